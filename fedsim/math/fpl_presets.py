"""The four FPL configurations of section 5.2 as data, and the closed-form communication cost.

Notation: |U| users, |I| items, X+ training interactions, |U^-| clients per round, T triples per
client per round, rpe rounds per epoch, pi the probability of sending each positive update.

=======  ======  ===========  ===========  =============================
preset   |U^-|   T            rpe          triples per epoch
=======  ======  ===========  ===========  =============================
sFPL     1       1            X+           X+
sFPL+    1       X+/|U|       X+           X+ * X+/|U|
pFPL     |U|     1            X+/|U|       X+
pFPL+    |U|     X+/|U|       X+/|U|       X+ * X+/|U|
=======  ======  ===========  ===========  =============================

This is ``definition="code"`` (the default): in the authors' code and in the numbers of the
paper's Table 4, ``rpe x |U^-| = X+`` for every preset, so a "+" epoch processes T times more
triples. The paper's text (section 5.2) instead sets T = X+/|U^-| for the "+" presets and
rpe = X+, |U^-| (= 1), X+/|U^-|, 1, so that ``|U^-| T rpe = X+`` for all four; that is
``definition="text"``. Table 4 is only reproduced by the code's definition (see
:func:`table4_tcc`).

CCE (section 6.3): ``CCE = rpe |U^-| (|I| + T (1 + pi))`` vectors per epoch (|I| item vectors sent
to each selected client, T negative and on average pi T positive updates back); TCC = CCE x epochs
to the best P@10.

T and rpe are fractional in general (X+/|U| = 87.66 on the ML100K temporal split). A simulation
needs integers: :meth:`FPLPreset.schedule` rounds them, ``"round"`` (default, nearest) or
``"floor"`` (the authors' ``int()``); :func:`cce_formula` accepts either the exact or the
integer values, so a ledger can be compared with the formula of the schedule it actually ran.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "PRESET_NAMES",
    "FPLPreset",
    "FPLSchedule",
    "cce_formula",
    "fpl_preset",
    "fpl_presets",
    "table4_tcc",
    "tcc_formula",
]

PRESET_NAMES: tuple[str, ...] = ("sFPL", "sFPL+", "pFPL", "pFPL+")

Definition = Literal["code", "text"]
Rounding = Literal["round", "floor"]


def cce_formula(rpe: float, clients_per_round: float, n_items: int, T: float, pi: float) -> float:
    """Communication Cost per Epoch in vectors: ``rpe |U^-| (|I| + T (1 + pi))`` (section 6.3)."""
    if not 0.0 <= pi <= 1.0:
        raise ValueError(f"pi must lie in [0, 1], got {pi}")
    return float(rpe) * float(clients_per_round) * (float(n_items) + float(T) * (1.0 + float(pi)))


def tcc_formula(cce: float, epochs: float) -> float:
    """Total Communication Cost: CCE x the number of epochs needed to reach the best P@10."""
    return float(cce) * float(epochs)


@dataclass(frozen=True, slots=True)
class FPLSchedule:
    """Integer schedule a simulation runs: ``rounds_per_epoch`` rounds of ``clients_per_round``
    clients, each processing ``triples_per_client`` triples."""

    name: str
    rounds_per_epoch: int
    clients_per_round: int
    triples_per_client: int

    @property
    def client_visits_per_epoch(self) -> int:
        return self.rounds_per_epoch * self.clients_per_round

    @property
    def triples_per_epoch(self) -> int:
        return self.client_visits_per_epoch * self.triples_per_client

    def cce(self, n_items: int, pi: float) -> float:
        """The closed form with this schedule's integers (what a ledger's mean should match)."""
        return cce_formula(self.rounds_per_epoch, self.clients_per_round, n_items,
                           self.triples_per_client, pi)

    def vectors_per_epoch(self, n_items: int, n_positive_sent: int) -> int:
        """Exact vector count of an unmerged epoch: ``rpe |U^-| (|I| + T) + positives sent``."""
        return self.client_visits_per_epoch * (int(n_items) + self.triples_per_client) + int(
            n_positive_sent
        )


@dataclass(frozen=True, slots=True)
class FPLPreset:
    """One of the four configurations, with the exact (possibly fractional) T and rpe."""

    name: str
    n_users: int
    x_plus: int
    clients_per_round: int  # |U^-|
    triples_per_client: float  # T
    rounds_per_epoch: float  # rpe
    definition: str = "code"

    @property
    def triples_per_epoch(self) -> float:
        return self.rounds_per_epoch * self.clients_per_round * self.triples_per_client

    def cce(self, n_items: int, pi: float) -> float:
        """The paper's closed form with the exact values."""
        return cce_formula(self.rounds_per_epoch, self.clients_per_round, n_items,
                           self.triples_per_client, pi)

    def schedule(self, rounding: Rounding = "round") -> FPLSchedule:
        """Integers for a simulation: ``"round"`` to nearest (ties up) or ``"floor"`` (the
        authors' ``int()``); never below 1."""
        if rounding == "round":
            f = lambda v: max(1, int(math.floor(v + 0.5)))  # noqa: E731
        elif rounding == "floor":
            f = lambda v: max(1, int(math.floor(v)))  # noqa: E731
        else:
            raise ValueError(f"rounding must be 'round' or 'floor', got {rounding!r}")
        return FPLSchedule(
            name=self.name,
            rounds_per_epoch=f(self.rounds_per_epoch),
            clients_per_round=int(self.clients_per_round),
            triples_per_client=f(self.triples_per_client),
        )


def fpl_preset(name: str, n_users: int, x_plus: int, definition: Definition = "code") -> FPLPreset:
    """The preset ``name`` (one of :data:`PRESET_NAMES`) for |U| = n_users and X+ = x_plus."""
    n_users = int(n_users)
    x_plus = int(x_plus)
    if n_users <= 0 or x_plus <= 0:
        raise ValueError("n_users and x_plus must be positive")
    if name not in PRESET_NAMES:
        raise ValueError(f"unknown preset {name!r}; expected one of {PRESET_NAMES}")
    parallel = name.startswith("p")
    plus = name.endswith("+")
    clients = n_users if parallel else 1
    if definition == "code":
        T = x_plus / n_users if plus else 1.0
        rpe = x_plus / clients
    elif definition == "text":
        T = x_plus / clients if plus else 1.0
        rpe = x_plus / (clients * T)
    else:
        raise ValueError(f"definition must be 'code' or 'text', got {definition!r}")
    return FPLPreset(name, n_users, x_plus, clients, float(T), float(rpe), definition)


def fpl_presets(n_users: int, x_plus: int, definition: Definition = "code") -> dict[str, FPLPreset]:
    """All four presets, keyed by name, in the order of :data:`PRESET_NAMES`."""
    return {n: fpl_preset(n, n_users, x_plus, definition) for n in PRESET_NAMES}


def table4_tcc(name: str, pi: float, epochs: int, n_users: int = 17_473, x_plus: int = 599_958,
               n_items: int = 47_270, definition: Definition = "code") -> float:
    """TCC of the paper's Table 4 (Brazil by default), in vectors (the table prints x 1e-12).

    With the code's definition and epochs 45 / 50 / 45 / 35 (sFPL / sFPL+ / pFPL / pFPL+) this
    gives all 40 printed values.
    """
    return tcc_formula(fpl_preset(name, n_users, x_plus, definition).cce(n_items, pi), epochs)
