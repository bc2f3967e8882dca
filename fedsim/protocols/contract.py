"""The protocol contract: what every protocol module exports, and the ``Result`` every run returns.

A protocol module defines its actors (coroutines that only await ``ctx``), a configuration
dataclass (``fedsim.config.Config``: every hyperparameter declared once, with help and
validation), and one ``ProtocolSpec`` that it registers (``fedsim.protocols.registry``)::

    SPEC = register(ProtocolSpec(
        name="fedrec", summary="...", Config=FedRecConfig, data="explicit",
        kinds=(Kind("model", "server", "client", "training"), ...),
        build=build, tiny=tiny))

Running any protocol is the same three lines on any transport::

    spec = REGISTRY["fedrec"]
    job = spec.build(net, ratings, spec.Config(rho=1.0))
    result = job.collect(net.run())          # a Result

``build(net, data, config, *, test=None, resume=None)`` places the actors on ``net`` and returns a
``Job``; ``data`` is the training ``fedsim.data.Ratings`` (``None`` for protocols that make their
own data, as ``demo``); ``test`` optional held-out ``Ratings`` the protocol's clients evaluate on
privately (metrics per round); ``resume`` a previous ``Result`` of the same protocol to continue
from (its ``state``). ``job.collect(run)`` turns the network's ``RunResult`` into a ``Result``.

``kinds`` declares every message kind the protocol may send, with the roles (at the time of
sending, as the ledger records them) that may send and receive it, and its purpose; the contract
test checks every ledger row of every registered protocol against it.

``check_job``, ``check_result``, ``check_tiny`` and ``check_ledger`` hold a protocol to this
contract with a ``ContractError`` naming it and what to change (``fedsim run``, ``fedsim trace``,
``fedsim compare`` and the contract test call them); ``ProtocolSpec`` and ``Kind`` refuse a
malformed declaration when they are made.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Protocol

import numpy as np

from ..config import Config
from ..kernel import FedsimError
from ..kernel.errors import clock_text

__all__ = ["ContractError", "IncompleteRunError", "Job", "Kind", "PURPOSES", "ProtocolSpec", "Result",
           "check_job", "check_ledger", "check_result", "check_tiny", "server_result"]

PURPOSES = ("setup", "training", "evaluation", "control")


def _roles(v: str | Iterable[str]) -> tuple:
    """A role or roles as a tuple; anything not iterable as a tuple of itself, which the caller
    then refuses naming the Kind (``tuple(None)`` was a bare "'NoneType' object is not iterable")."""
    return (v,) if isinstance(v, str) or not isinstance(v, Iterable) else tuple(v)


@dataclass(frozen=True)
class Kind:
    """One message kind: who sends it to whom (role names at the time of sending; a tuple for
    several), what it is for (``setup``, ``training``, ``evaluation``: kept out of cost tables,
    ``control``: stop and similar), whether it travels anonymously, and what it carries.

    Raises ``ValueError`` naming the kind for an empty ``name``, a ``src`` or ``dst`` that is not
    a non-empty role name or tuple of them, a ``purpose`` not in ``PURPOSES``, or an
    ``anonymous`` that is not a bool (``"no"`` was taken as true)."""

    name: str
    src: str | tuple[str, ...]
    dst: str | tuple[str, ...]
    purpose: str = "training"
    doc: str = ""
    anonymous: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"Kind {self.name!r}: the name must be a non-empty string")
        object.__setattr__(self, "src", _roles(self.src))
        object.__setattr__(self, "dst", _roles(self.dst))
        for side in ("src", "dst"):
            roles = getattr(self, side)
            if not roles or not all(isinstance(r, str) and r for r in roles):
                raise ValueError(f"Kind {self.name!r}: {side} must be a role name or a tuple of role names "
                                 f"(as the ledger records them, e.g. 'server', 'client'), got {roles!r}")
        if self.purpose not in PURPOSES:
            raise ValueError(f"Kind {self.name!r}: purpose must be one of {PURPOSES}, got {self.purpose!r}")
        if not isinstance(self.anonymous, (bool, np.bool_)):
            raise ValueError(f"Kind {self.name!r}: anonymous must be True or False, got {self.anonymous!r}")
        object.__setattr__(self, "anonymous", bool(self.anonymous))

    def allows(self, src_role: str, dst_role: str) -> bool:
        return src_role in self.src and dst_role in self.dst


@dataclass
class Result:
    """What a protocol run produced, in the same shape for every protocol.

    ``params``: the final model parameters by name (``"V"``, ``"U"``, ``"theta"``, ...; arrays);
    ``metrics``: one dict per evaluation (each with ``round``; empty when nothing was
    evaluated); ``run``: the network's ``RunResult`` (duration, unfinished and offline nodes, the
    ledger); ``info``: protocol-specific facts (``diverged_at``, denoisers, counts ...);
    ``model``: the protocol's own model object where it has one (e.g. a ``TrainResult`` that
    predicts ratings), else None; ``state``: what ``build(..., resume=result)`` continues from.
    """

    protocol: str
    config: Any
    params: dict[str, np.ndarray]
    metrics: list[dict]
    run: Any
    info: dict = field(default_factory=dict)
    model: Any = None
    state: dict = field(default_factory=dict, repr=False)

    @property
    def ledger(self):
        """The run's message ledger."""
        return self.run.ledger

    @property
    def duration(self) -> float:
        """The run's simulated (or scaled real) duration in seconds."""
        return float(self.run.duration)

    def final(self, metric: str) -> float:
        """The last evaluation's value of ``metric`` (NaN if there was none)."""
        for m in reversed(self.metrics):
            if metric in m:
                return float(m[metric])
        return float("nan")

    def present(self, users, items, values) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """``(users, items, values, left_out)``: the ratings whose user was still present at the
        end of the run, and how many distinct users were left out. The others are those of
        ``info["lost_users"]`` (clients that dropped out: their factors left with them, and the
        model holds zeros in their place, which would be scored as if they had trained)."""
        users, items, values = np.asarray(users), np.asarray(items), np.asarray(values)
        lost = self.info.get("lost_users") or []
        if not len(lost):
            return users, items, values, 0
        keep = ~np.isin(users, np.asarray(lost, dtype=np.int64))
        return users[keep], items[keep], values[keep], int(np.unique(users[~keep]).size)


class ContractError(FedsimError):
    """A protocol broke its side of the contract: ``build`` did not return a job, ``collect``
    did not return a ``Result``, ``tiny`` did not return ``(data, config)``, or a run sent a
    message kind, or between roles, that its spec does not declare. The message names the
    protocol and what to change."""


class IncompleteRunError(RuntimeError):
    """A run ended without the node whose return value a protocol's result needs (typically its
    server dropped out): there is no model to collect."""


def server_result(run, node: str = "server"):
    """``run[node]``, or ``IncompleteRunError`` saying why it is missing (offline since when,
    or still blocked on what) instead of a bare ``KeyError``."""
    if node in run.results:
        return run.results[node]
    if node in run.offline:
        why = "dropped out (offline) before finishing"
    elif node in run.blocked:
        why = f"was still waiting in {run.blocked[node]}"
    elif node in run.unfinished:
        why = "had not finished when the run stopped"
    else:
        why = "is not part of this run"
    raise IncompleteRunError(f"no result: node {node!r} {why} (run ended at t = {clock_text(run.duration)} s)")


class Job(Protocol):
    """What ``build`` returns: it knows where the actors are and turns a run into a ``Result``."""

    def collect(self, run: Any) -> Result:  # pragma: no cover - interface
        ...


@dataclass(frozen=True)
class ProtocolSpec:
    """One protocol, as the registry lists it. Made once per protocol; refuses a malformed
    declaration when made, naming the protocol and the field: ``ValueError`` for a ``name`` that
    is empty or holds a path separator or ``.py``, a ``rounds_field`` that is no ``Config`` field, a
    kind declared twice or a ``data`` other than the three below; ``TypeError`` for ``kinds`` that
    are not an iterable of ``Kind``, a ``Config`` that is not a ``fedsim.config.Config``
    dataclass, or a ``build``, ``tiny`` or ``check_data`` that is not callable.

    ``name`` (what ``fedsim run NAME`` and ``REGISTRY[NAME]`` use), ``summary`` (one line),
    ``Config`` (its configuration dataclass), ``kinds`` (every message kind it may send),
    ``build``, ``tiny`` (``tiny(clients, rounds, seed) -> (data, config)``: a small preset that
    runs in well under a second, for traces, docs and the contract test), ``data`` (what
    ``build`` takes: ``explicit`` or ``implicit`` ratings, or ``none``), ``metric`` (the metric
    its evaluations report first, e.g. ``rmse``), ``paper`` (reference), ``rounds_field`` (the
    config field that counts rounds or iterations), ``check_data`` (optional: a check of a
    configuration against the data before the run, see below).

    ``check_data(config, ratings, given)``, when set, is called by ``fedsim run NAME`` (and
    ``fedsim compare``; ``fedsim sweep`` for every point before it runs any; ``fedsim trace`` on
    its preset's data; ``fedsim.privacy.capture`` when given ``given``) once the data is loaded and before the
    network is built, with the protocol's ``config``, the ``Ratings`` as read from ``--data`` (before any
    binarizing and before the test split) and ``given``, the frozenset of the names of the
    settings the user set (``--set``, a config file's ``[params]``, a sweep's grid), whatever
    their value. It returns None, or raises ``fedsim.config.ConfigError(message, key)`` naming
    the setting that does not fit the data (the command line prints one ``error:`` line, with
    the config file's line when the key came from there, and writes no output folder). A default
    meant for other data can so be refused unless it was asked for (PersonalFR's implicit
    ``threshold`` 3.5, for 1-5 stars, on ratings 1 to 10). Not called for ``data="none"``, nor
    by code that calls ``build`` itself.
    """

    name: str
    summary: str
    Config: type
    kinds: tuple[Kind, ...]
    build: Callable[..., Job]
    tiny: Callable[..., tuple[Any, Any]]
    data: str = "explicit"
    metric: str = ""
    paper: str = ""
    rounds_field: str = "rounds"
    check_data: Callable[[Any, Any, frozenset], None] | None = None

    def __post_init__(self) -> None:
        # the name is typed as `fedsim run NAME`: one with a path separator or a .py suffix was
        # listed by `fedsim list` and then taken for a script path ("no scenario script at
        # fed/avg"), a protocol nobody could run from the command line
        if not isinstance(self.name, str) or not self.name or self.name.endswith(".py") \
                or "/" in self.name or os.sep in self.name:
            raise ValueError(f"protocol name {self.name!r}: give a non-empty name without a path separator or a "
                             ".py suffix (it is typed as `fedsim run NAME`)")
        # a tuple, as declared: a generator would be used up by the checks below and the spec
        # would then declare no kind at all (the dataclass is frozen: set through object)
        if isinstance(self.kinds, (str, Kind)) or not isinstance(self.kinds, Iterable):
            raise TypeError(f"protocol {self.name!r}: kinds must be a tuple of Kind(...), got {self.kinds!r}")
        object.__setattr__(self, "kinds", tuple(self.kinds))
        for i, k in enumerate(self.kinds):
            if not isinstance(k, Kind):
                raise TypeError(f"protocol {self.name!r}: kinds[{i}] is {k!r}, not a Kind: declare each message "
                                "kind as Kind(name, sender_role, receiver_role, purpose)")
        if not (isinstance(self.Config, type) and issubclass(self.Config, Config)
                and dataclasses.is_dataclass(self.Config)):
            raise TypeError(f"protocol {self.name!r}: Config must be a dataclass subclassing fedsim.config.Config "
                            f"(fields declared with param(...)), got {self.Config!r}")
        for what in ("build", "tiny"):
            if not callable(getattr(self, what)):
                raise TypeError(f"protocol {self.name!r}: {what} must be a function, got {getattr(self, what)!r}")
        if self.check_data is not None and not callable(self.check_data):
            raise TypeError(f"protocol {self.name!r}: check_data must be a function (config, ratings, given) or None, "
                            f"got {self.check_data!r}")
        fields = [f.name for f in dataclasses.fields(self.Config)]
        if self.rounds_field not in fields:
            raise ValueError(f"protocol {self.name!r}: rounds_field {self.rounds_field!r} (the default is 'rounds') "
                             f"is not a field of {self.Config.__name__} (its fields: {', '.join(fields)}); name the "
                             "field that counts its rounds or iterations")
        names = [k.name for k in self.kinds]
        if len(set(names)) != len(names):
            raise ValueError(f"protocol {self.name!r} declares a message kind twice")
        if self.data not in ("explicit", "implicit", "none"):
            raise ValueError(f"protocol {self.name!r}: data must be explicit, implicit or none, got {self.data!r}")

    def kind(self, name: str) -> Kind:
        """The declared ``Kind`` named ``name``; ``KeyError`` naming the protocol if none is."""
        for k in self.kinds:
            if k.name == name:
                return k
        raise KeyError(f"protocol {self.name!r} declares no message kind {name!r}")

    def kinds_for(self, *purposes: str) -> tuple[str, ...]:
        """Names of the kinds with one of ``purposes`` (e.g. ``kinds_for("evaluation")``)."""
        return tuple(k.name for k in self.kinds if k.purpose in purposes)

    def undeclared(self, ledger) -> list[tuple[str, str, str]]:
        """The distinct ``(src_role, dst_role, kind)`` of ``ledger``'s rows that this spec does
        not declare (empty when the run kept to its contract)."""
        seen = set(ledger.view().group("src_role", "dst_role", "kind"))
        bad = []
        declared = {k.name: k for k in self.kinds}
        for src, dst, kind in sorted(seen):
            k = declared.get(kind)
            if k is None or not k.allows(src, dst):
                bad.append((src, dst, kind))
        return bad


def check_job(spec: ProtocolSpec, job: Any) -> Any:
    """``job`` if it has a ``collect(run)`` method (what ``spec.build`` must return); else
    ``ContractError`` naming the protocol and what ``build`` returned."""
    if not callable(getattr(job, "collect", None)):
        raise ContractError(f"protocol {spec.name!r}: build() returned {_what(job)}, not a job: return an object "
                            "with a collect(run) method that makes the Result (did build forget its return?)")
    return job


def check_result(spec: ProtocolSpec, result: Any, run: Any = None) -> Result:
    """``result`` if it is a ``Result`` in the documented shape (``params`` a dict, ``metrics`` a
    list of dicts each with ``round``, and, when ``run`` is given, ``result.run`` that run); else
    ``ContractError`` naming the protocol and what is wrong."""
    where = f"protocol {spec.name!r}: collect(run)"
    if not isinstance(result, Result):
        raise ContractError(f"{where} returned {_what(result)}, not a fedsim.protocols.Result: return "
                            "Result(name, config, params, metrics, run, info=...)")
    if not isinstance(result.params, dict):
        raise ContractError(f"{where} returned a Result whose params is {_what(result.params)}, not a dict of "
                            "arrays by name")
    if not isinstance(result.metrics, list) or not all(isinstance(m, dict) and "round" in m for m in result.metrics):
        raise ContractError(f"{where} returned a Result whose metrics is not a list of dicts each with a 'round' "
                            f"(one per evaluation; [] when there is none): {result.metrics!r:.200}")
    if run is not None and result.run is not run:
        raise ContractError(f"{where} returned a Result whose run is {_what(result.run)}, not the run it was given "
                            "(its ledger and duration come from there)")
    return result


def check_run(run: Any, net: Any, transport: str) -> Any:
    """``run`` if it is the ``RunResult`` a network's ``run()`` must return; else ``ContractError``
    naming ``transport`` (the registered name) and ``net``'s class: a plug-in transport whose
    ``run`` forgot to return ``finish``'s result failed in the protocol's ``collect`` with
    ``AttributeError: 'NoneType' object has no attribute 'results'``, a traceback naming neither."""
    from ..kernel import RunResult

    if not isinstance(run, RunResult):
        raise ContractError(f"transport {transport!r} ({type(net).__name__}): run() returned {_what(run)}, not a "
                            "fedsim.kernel.RunResult (a transport's run ends with return self.finish(duration, "
                            "strict=strict); docs/network-model.md, \"Writing a transport\")")
    return run


def check_tiny(spec: ProtocolSpec, preset: Any) -> tuple[Any, Any]:
    """``(data, config)`` from what ``spec.tiny(clients, rounds, seed)`` returned, or
    ``ContractError`` naming the protocol."""
    if not (isinstance(preset, tuple) and len(preset) == 2 and isinstance(preset[1], spec.Config)):
        raise ContractError(f"protocol {spec.name!r}: tiny(clients, rounds, seed) returned {_what(preset)}, not "
                            f"(data, config) with config a {spec.Config.__name__}")
    return preset


def check_ledger(spec: ProtocolSpec, ledger: Any) -> None:
    """``ContractError`` naming every (sender role, receiver role, kind) of ``ledger`` that
    ``spec`` does not declare (``spec.undeclared``), and what it declares instead."""
    bad = spec.undeclared(ledger)
    if not bad:
        return
    declared = {k.name: k for k in spec.kinds}
    parts = []
    for src, dst, kind in bad:
        k = declared.get(kind)
        if k is None:
            parts.append(f"{kind!r} from {src} to {dst} (no Kind {kind!r} declared)")
        else:
            parts.append(f"{kind!r} from {src} to {dst} (its Kind allows {'/'.join(k.src)} to {'/'.join(k.dst)})")
    raise ContractError(f"protocol {spec.name!r} sent messages its spec does not declare: {'; '.join(parts)}. "
                        "Declare each kind in ProtocolSpec(kinds=...) with the roles the ledger records at sending")


def _what(x: Any) -> str:
    if x is None:
        return "None"
    text = " ".join(repr(x).split())  # (an array's repr spans lines)
    return f"a {type(x).__name__} ({text if len(text) <= 80 else text[:77] + '...'})"
