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
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Protocol

import numpy as np

__all__ = ["IncompleteRunError", "Job", "Kind", "PURPOSES", "ProtocolSpec", "Result", "server_result"]

PURPOSES = ("setup", "training", "evaluation", "control")


def _roles(v: str | Iterable[str]) -> tuple[str, ...]:
    return (v,) if isinstance(v, str) else tuple(v)


@dataclass(frozen=True)
class Kind:
    """One message kind: who sends it to whom (role names at the time of sending; a tuple for
    several), what it is for (``setup``, ``training``, ``evaluation``: kept out of cost tables,
    ``control``: stop and similar), whether it travels anonymously, and what it carries."""

    name: str
    src: str | tuple[str, ...]
    dst: str | tuple[str, ...]
    purpose: str = "training"
    doc: str = ""
    anonymous: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "src", _roles(self.src))
        object.__setattr__(self, "dst", _roles(self.dst))
        if self.purpose not in PURPOSES:
            raise ValueError(f"Kind {self.name!r}: purpose must be one of {PURPOSES}, got {self.purpose!r}")

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
    raise IncompleteRunError(f"no result: node {node!r} {why} (run ended at t = {run.duration:.6g} s)")


class Job(Protocol):
    """What ``build`` returns: it knows where the actors are and turns a run into a ``Result``."""

    def collect(self, run: Any) -> Result:  # pragma: no cover - interface
        ...


@dataclass(frozen=True)
class ProtocolSpec:
    """One protocol, as the registry lists it.

    ``name`` (what ``fedsim run NAME`` and ``REGISTRY[NAME]`` use), ``summary`` (one line),
    ``Config`` (its configuration dataclass), ``kinds`` (every message kind it may send),
    ``build``, ``tiny`` (``tiny(clients, rounds, seed) -> (data, config)``: a small preset that
    runs in well under a second, for traces, docs and the contract test), ``data`` (what
    ``build`` takes: ``explicit`` or ``implicit`` ratings, or ``none``), ``metric`` (the metric
    its evaluations report first, e.g. ``rmse``), ``paper`` (reference), ``rounds_field`` (the
    config field that counts rounds or iterations).
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
        object.__setattr__(self, "kinds", tuple(self.kinds))
        names = [k.name for k in self.kinds]
        if len(set(names)) != len(names):
            raise ValueError(f"protocol {self.name!r} declares a message kind twice")
        if self.data not in ("explicit", "implicit", "none"):
            raise ValueError(f"protocol {self.name!r}: data must be explicit, implicit or none")

    def kind(self, name: str) -> Kind:
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
