"""What every attack is: a declared view and a function of that view alone.

An ``Attack`` has a ``name``, the ``view`` it plays (a ``ViewSpec``), the ``protocols`` it is
written for, and ``run(view) -> {target node id: Guess}``. ``run_attack`` builds the view from a
recording and hands the attack that object and nothing else; it returns the inference and the
attack's own cost (wall seconds), reported beside the protocol run's cost. An attack that attacks
a sample of the clients it saw (IMIA's ``max_users``) names it (``sample(view)``, kept in
``AttackRun.sample``): the audit scores those clients, an unanswered one as a miss, and not the
others.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from ..metrics import Guess
from ..views import Public, View, ViewSpec, build_view

__all__ = ["Attack", "AttackRun", "run_attack"]


class Attack:
    """Base class. Subclasses set ``name``, ``view`` and ``protocols`` and implement ``run``.

    ``run(view)`` returns ``{target: Guess}`` for the targets (client node ids) it has an opinion
    on; it may read only ``view`` (its messages and ``view.public``) and its own parameters.
    ``targets`` is for attacks that are not about item sets (``None``: about I_u)."""

    name: str = ""
    view: ViewSpec = ViewSpec.server()
    protocols: tuple[str, ...] = ()
    about: str = "items"  # "items": a Guess of I_u per target; "links": LinkAttack (see fedrecpp)

    def run(self, view: View) -> Mapping[str, Any]:  # pragma: no cover - interface
        raise NotImplementedError

    def sample(self, view: View) -> tuple[str, ...] | None:
        """The clients this attack sets out to attack in ``view`` when it attacks a sample of
        those it saw (answered or not: a masked upload is in the sample and unanswered), sorted;
        None (the default): every client the adversary saw upload."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, view={self.view.label!r})"


@dataclass
class AttackRun:
    """One attack on one recording: ``inference`` (what ``run`` returned), ``seconds`` (wall
    time of building the view and running the attack), ``messages`` (how many the view held),
    ``unrecorded`` (messages the adversary saw whose payload the recorder did not keep),
    ``sample`` (``Attack.sample``: the clients it set out to attack; None: every one seen)."""

    attack: Attack
    inference: Mapping[str, Any]
    seconds: float
    messages: int
    unrecorded: int
    sample: tuple[str, ...] | None = None


def run_attack(attack: Attack, recording: Any, public: Public, *,
               rounds: int | Iterable[int] | None = None, key: bytes = b"fedsim.privacy",
               views: dict | None = None) -> AttackRun:
    """Build ``attack.view`` over ``recording`` (up to round ``rounds`` or in that set; ``key``
    keys the messages' opaque references; see ``build_view``) and call ``attack.run`` with that
    view alone. ``views``: a dict in which views are kept by (spec, rounds) so that attacks of
    the same adversary share one (a view is read-only). Raises ``TypeError`` if the attack
    returns anything but a mapping (of ``Guess`` for an item attack)."""
    t0 = time.perf_counter()
    vkey = (attack.view, rounds if rounds is None or isinstance(rounds, int) else tuple(rounds))
    view = None if views is None else views.get(vkey)
    if view is None:
        view = build_view(attack.view, recording, public, rounds=rounds, key=key)
        if views is not None:
            views[vkey] = view
    out = attack.run(view)
    sample = attack.sample(view)
    seconds = time.perf_counter() - t0
    if not isinstance(out, Mapping):
        raise TypeError(f"attack {attack.name!r} returned {type(out).__name__}, not a mapping")
    if attack.about == "items":
        bad = [k for k, g in out.items() if not isinstance(g, Guess)]
        if bad:
            raise TypeError(f"attack {attack.name!r}: the answer for {bad[0]!r} is not a Guess")
    return AttackRun(attack, out, seconds, len(view), view.unrecorded,
                     None if sample is None else tuple(sorted(sample)))
