"""FPL without messages: an epoch of the FPL actors replayed in one compiled call, bit for bit.

FPL's server and clients (:mod:`fedsim.protocols.fpl`) exchange Theta_S and the update rows
through the network; this module computes the same epoch from the same random streams with no
network at all: the server's generator draws the rounds' selections exactly as the server actor
does (:func:`select_clients`), each client's generator draws its uniforms exactly as the client
actor does (one ``random((3, T))`` per visit, taken here as one ``random((visits, 3, T))``, the
same stream), and :mod:`fedsim.math.fpl_kernels` does the client and server arithmetic in the
actors' order and precision. The result (Theta_S, every p_u, the counts of sent rows) equals the
actors' to the last bit (``tests/test_math_fpl_central.py``), so a hyperparameter search can run
here in seconds per configuration and only its choices need the actors and their ledger.

A model that stops being finite stops the epoch where the server actor stops it: after the round
whose updates made Theta_S not finite (the actors' visits, rows and p_u, not an epoch run on NaN).

Supported: the protocol's defaults (per-triple p_u steps, item parameters frozen within a round,
no merging, float32 Theta_S, no defences); :func:`fpl_epoch` raises ``ValueError`` otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import fpl_kernels
from .bpr import BPRReg, TripleSampler

__all__ = ["CompiledClientRound", "PackedSamplers", "fpl_epoch", "pack_samplers", "select_clients"]


class CompiledClientRound:
    """One client's FPL round through the compiled kernel: what
    :func:`fedsim.math.bpr.fpl_client_round` computes with its defaults, followed by the actor's
    stable sort by item id and the float32 rows, bit for bit, at a fraction of the cost of the
    NumPy code (which loops over the triples in Python). Built per client from its sampler;
    :meth:`make` returns None when it cannot apply (numba missing, or a non-default option), and
    the caller then runs the NumPy code."""

    def __init__(self, kern, sampler: TripleSampler, d: int, T: int, lr: float, pi: float, reg: BPRReg):
        self.kern = kern
        self.positives = np.ascontiguousarray(sampler.positives, dtype=np.int64)
        self.keys = np.ascontiguousarray(sampler.rank_keys, dtype=np.int64)
        cat = sampler.catalogue
        self.catalogue = np.zeros(0, dtype=np.int64) if cat is None else np.ascontiguousarray(cat, dtype=np.int64)
        self.n_neg = int(sampler.n_negatives)
        # rows of theta the sampler can name (the kernel reads theta[i] unchecked)
        self.rows_needed = int(sampler.n_catalogue) if cat is None else int(self.catalogue[-1]) + 1
        self.d, self.T = int(d), int(T)
        self.par64, self.par32 = fpl_kernels.make_params(lr, reg.user, reg.pos_item, reg.neg_item, reg.bias, pi)

    @classmethod
    def make(cls, sampler: TripleSampler, d: int, T: int, lr: float, pi: float, reg: BPRReg, *, dtype: str,
             merge: str, local_item_updates: bool, user_update: str) -> CompiledClientRound | None:
        kern = fpl_kernels.compiled()
        if (kern is None or dtype != "float32" or merge not in ("none", False, None) or local_item_updates
                or user_update != "per_triple" or sampler.n_negatives <= 0):
            return None
        return cls(kern, sampler, d, T, lr, pi, reg)

    def __call__(self, p: np.ndarray, theta: np.ndarray, U: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """Step ``p`` (float64, in place) through the round whose uniforms are ``U`` (3, T) on
        the received ``theta`` (float32 [Q | b]); returns ``(items int32, rows float32, positives
        sent)``, rows sorted by item id."""
        d, T = self.d, self.T
        if theta.shape[0] < self.rows_needed:  # compiled: a read past the end; NumPy's code raises
            raise IndexError(f"theta has {theta.shape[0]} rows, the sampler draws items up to {self.rows_needed - 1}")
        if theta.ndim != 2 or theta.shape[1] != d + 1:  # compiled: reads past each row's end (taken silently)
            raise ValueError(f"theta must be {d + 1} wide ([Q | b]), got shape {theta.shape}")
        cap = 2 * T
        items = np.empty(cap, dtype=np.int64)
        rows = np.empty((cap, d + 1), dtype=np.float32)
        n, sent = self.kern.client_round(
            p, np.ascontiguousarray(theta), d, self.positives, self.keys, self.catalogue, self.n_neg, U, T,
            self.par64, self.par32, items, rows, np.empty((T, d)), np.empty(d), np.empty(T),
            np.empty((cap, d + 1)), np.empty(cap, dtype=np.int64), np.empty(d), np.empty(d + 1))
        return items[:n].astype(np.int32), rows[:n], int(sent)


def select_clients(rng: np.random.Generator, n: int, k: int) -> range | tuple[int] | list[int]:
    """The clients (indices, ascending) of one FPL round, drawn from the server's ``rng``:
    nothing drawn when ``k >= n`` (all), ``rng.integers(n)`` for one, ``rng.choice(n, k,
    replace=False)`` sorted otherwise."""
    if k >= n:
        return range(n)
    if k == 1:
        return (int(rng.integers(n)),)
    return np.sort(rng.choice(n, size=k, replace=False)).tolist()


@dataclass(frozen=True)
class PackedSamplers:
    """Every client's :class:`~fedsim.math.bpr.TripleSampler` tables as flat arrays (client c's
    positives are ``pos_all[pos_ptr[c]:pos_ptr[c + 1]]``, likewise its keys); ``catalogue`` is
    the shared catalogue (empty: ``range(n_items)``)."""

    pos_ptr: np.ndarray
    pos_all: np.ndarray
    key_ptr: np.ndarray
    key_all: np.ndarray
    catalogue: np.ndarray
    n_negs: np.ndarray

    @property
    def n_clients(self) -> int:
        return int(self.n_negs.shape[0])


def _ptr(sizes: list[int]) -> np.ndarray:
    out = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=out[1:])
    return out


def pack_samplers(samplers: list[TripleSampler]) -> PackedSamplers:
    """Pack the clients' samplers (built by :func:`fedsim.protocols.fpl.make_samplers`: one
    shared catalogue). Raises ``ValueError`` when their catalogues differ."""
    if not samplers:
        raise ValueError("no samplers to pack")
    cat0 = samplers[0].catalogue
    for s in samplers:
        same = (s.catalogue is None) if cat0 is None else (s.catalogue is cat0 or (
            s.catalogue is not None and np.array_equal(s.catalogue, cat0)))
        if not same:
            raise ValueError("the clients' samplers do not share one catalogue")
    return PackedSamplers(
        pos_ptr=_ptr([s.positives.shape[0] for s in samplers]),
        pos_all=np.concatenate([s.positives for s in samplers]).astype(np.int64, copy=False),
        key_ptr=_ptr([s.rank_keys.shape[0] for s in samplers]),
        key_all=np.concatenate([s.rank_keys for s in samplers]).astype(np.int64, copy=False),
        catalogue=np.zeros(0, dtype=np.int64) if cat0 is None else np.asarray(cat0, dtype=np.int64),
        n_negs=np.array([s.n_negatives for s in samplers], dtype=np.int64),
    )


def fpl_epoch(theta: np.ndarray, P: np.ndarray, packed: PackedSamplers, *, clients_per_round: int, triples: int,
              rounds: int, lr: float, pi: float, reg: BPRReg, server_rng: np.random.Generator,
              client_rng: Callable[[int], np.random.Generator], backend: str | None = None) -> dict:
    """Run ``rounds`` FPL rounds on ``theta`` ([Q | b], float32, stepped in place) and ``P``
    (every client's p_u, float64, stepped in place): what the server actor (drawing from
    ``server_rng`` after its initialisation) and the client actors (client c drawing from
    ``client_rng(c)``, after its own initialisation) compute in a network of those rounds.
    ``client_rng`` is called once for each client selected at least once, in client order.
    Returns per-client int64 counts ``rounds`` (visits), ``sent_positive``, ``sent_negative``,
    and ``rounds_done`` (an int): ``rounds``, or the round (1-based) after whose updates
    ``theta`` was not finite, where the server actor stops (``info["diverged_at"]``): the later
    rounds are not run (no visit, no row counted, no p_u stepped), as the actors run none.
    ``backend``: see :func:`fedsim.math.fpl_kernels.kernels`."""
    if theta.dtype != np.float32 or not theta.flags.c_contiguous:
        raise ValueError("theta must be a C-contiguous float32 array (the protocol's default dtype)")
    if P.dtype != np.float64 or not P.flags.c_contiguous:
        raise ValueError("P must be a C-contiguous float64 array")
    n, d = P.shape
    if theta.shape[1] != d + 1:
        raise ValueError(f"theta has {theta.shape[1]} columns, expected d + 1 = {d + 1}")
    if packed.n_clients != n:
        raise ValueError(f"{packed.n_clients} samplers for {n} clients")
    if np.any(packed.n_negs <= 0):
        raise ValueError("a client's positives cover the whole catalogue: no negative to sample")
    n_pos = np.diff(packed.pos_ptr)
    if n_pos.shape != (n,) or np.any(n_pos <= 0):
        # the kernels draw positives[a] unchecked: for an empty slice the Python kernels raised
        # IndexError, the compiled ones read another client's positive (or past the array)
        bad = int(np.flatnonzero(n_pos <= 0)[0]) if n_pos.shape == (n,) else -1
        raise ValueError(f"client {bad} has no positive item to sample BPR triples" if bad >= 0 else
                         f"pos_ptr has {packed.pos_ptr.shape[0]} entries for {n} clients")
    # the kernels index theta unchecked (compiled: reads and, in the server's update, writes past
    # its end): every item a sampler can draw must be a row of theta. Without a shared catalogue
    # client c draws from range(n_negs[c] + its number of distinct positives, one key each)
    if packed.catalogue.size:
        need = int(packed.catalogue[-1]) + 1
    else:
        need = int((packed.n_negs + np.diff(packed.key_ptr)).max())
    if packed.pos_all.size:
        need = max(need, int(packed.pos_all.max()) + 1)
    if need > theta.shape[0]:
        raise ValueError(f"theta has {theta.shape[0]} rows, the samplers draw items up to {need - 1}")
    T = int(triples)
    k = min(int(clients_per_round), n)
    R = int(rounds)
    if k == 1 and n > 1:
        # one array draw gives the same integers as R scalar draws (NumPy draws every bounded
        # integer from a word of its own either way; tests/test_math_fpl_central.py checks it)
        sel = server_rng.integers(n, size=R).astype(np.int64, copy=False)
        sel_ptr = np.arange(R + 1, dtype=np.int64)
    else:
        chosen: list = []
        sizes = []
        for _ in range(R):
            c = select_clients(server_rng, n, k)
            chosen.append(c)
            sizes.append(len(c))
        sel_ptr = _ptr(sizes)
        sel = np.fromiter((c for r in chosen for c in r), dtype=np.int64, count=int(sel_ptr[-1]))
    visits = np.bincount(sel, minlength=n).astype(np.int64)
    draw_at = _ptr(visits.tolist())[:-1]
    U_all = np.empty((int(visits.sum()), 3, T), dtype=np.float64)
    for c in np.flatnonzero(visits).tolist():
        client_rng(c).random(out=U_all[draw_at[c]:draw_at[c] + visits[c]])
    par64, par32 = fpl_kernels.make_params(lr, reg.user, reg.pos_item, reg.neg_item, reg.bias, pi)
    counts = {name: np.zeros(n, dtype=np.int64) for name in ("rounds", "sent_positive", "sent_negative")}
    kern = fpl_kernels.kernels(backend)
    done = kern.epoch(theta, P, sel_ptr, sel, draw_at, U_all, packed.pos_ptr, packed.pos_all, packed.key_ptr,
                      packed.key_all, packed.catalogue, packed.n_negs, T, par64, par32, counts["rounds"],
                      counts["sent_positive"], counts["sent_negative"])
    return {**counts, "rounds_done": int(done)}
