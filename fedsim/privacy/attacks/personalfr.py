"""PersonalFR without compression, by the curious server: the item set from the decoder a client returns.

Without Partial Compression (``compression=false``) no client sends its item set (``indices``), and the
server broadcasts the whole decoder and gets a whole decoder back (docs/personalfr.md). The output row
``w_i`` (weights and bias) of an item that none of the client's users rated gets an exactly zero gradient
at every local step (the loss reads the rated entries only; dropout and clipping scale gradients, which
are zero), so its local steps are SGD's weight decay and momentum alone, a linear map of the pair (row,
momentum buffer). PyTorch's rule (``fedsim.math.optim.sgd_step``, dampening 0) with ``g = 0``, learning
rate ``lr``, momentum ``mu`` and weight decay ``wd`` is, per step::

    buf' = mu buf + wd p
    p'   = p - lr (wd p + mu buf')     (Nesterov)      p' = p - lr buf'     (plain momentum)

so ``(p, buf)`` is multiplied by the 2 x 2 matrix ``A = [[1 - lr wd (1 + mu), -lr mu^2], [wd, mu]]``
(Nesterov) or ``[[1 - lr wd, -lr mu], [wd, mu]]`` (plain momentum; without momentum ``p' = (1 - lr wd) p``),
and S steps by ``A^S`` (``idle_map``). A client keeps its momentum buffers between the rounds
it is selected in (``client_momentum=keep``, the authors' code) or starts each round from zero (``reset``);
the buffer of an untouched row starts at zero at the client's first selection and is carried by the same
map, so from the decoders the server sent that client, in order, it knows what every untouched row must
be after each of its rounds (``idle_path``): ``(p_k, b_k) = A_k^S (sent_k, b_{k-1})`` with ``b_0 = 0``
(``b_{k-1} = 0`` under ``reset``). With ``uncompressed_training=masked`` untouched rows and their buffers
are left as they are: the row returned is the row sent. The rows off that path are I_m, the items the
client's users rated.

``personalfr_idle_rows`` measures each returned row's distance to its idle path in units of the
dtype's rounding at that row's scale (``idle_deviation``) and claims the rows beyond ``tol`` such units
in any of the client's updates. What it assumes the server knows: the decoders it sent each client (its
own messages) and the updates that came back, and the protocol's public hyper-parameters (``Public.config``:
the learning rate and its schedule over the rounds, momentum, Nesterov, weight decay, the local epochs,
``client_momentum`` and ``uncompressed_training``). The number S of local steps a client takes per round
(local epochs times its batches, which depend on how many users it holds) is not public: it is read off
the client's first update whose buffer is known to be zero (its first selection, any under ``reset``):
every untouched row comes back as ``A^S[0, 0]`` times the row sent, one factor for all of them, so S is
the multiple of the local epochs, up to ``max_steps``, whose factor the most rows show (``steps_of``). Under
kept momentum a client whose earlier selections fall outside the view's window (``View.outside``) has an
unknown buffer: it is not answered for. A decoder sent without an update back is one the client trained
on (its update was lost) or never got (its buffer stayed): ``read_updates`` tries both and keeps what the
next update's untouched rows follow; when that was its first selection, S is tried along with them
(``steps_along``).
With compression the update is the active slice of the client's items only and the server already has
them (``personalfr_indices``): not answered either. The reading of every client (``idle_guesses``) is shared
with ``fedavg_idle_rows`` (``attacks.fedavg``), which reads FedAvg-AE's whole models the same way.
"""

from __future__ import annotations

import itertools

import numpy as np

from ...math.autoencoder import output_keys
from ..metrics import Guess
from ..views import View, ViewSpec
from .base import Attack

__all__ = ["PersonalFRIdleRows", "decoder_rows", "idle_deviation", "idle_guesses", "idle_map", "idle_path", "read_updates",
           "steps_along", "steps_of", "wire_eps"]


def step_matrix(lr: float, momentum: float, nesterov: bool, weight_decay: float) -> np.ndarray:
    """The 2 x 2 float64 matrix of one zero-gradient SGD step on ``(parameter, momentum buffer)``
    (module docstring)."""
    lr, mu, wd = float(lr), float(momentum), float(weight_decay)
    if mu == 0.0:
        return np.array([[1.0 - lr * wd, 0.0], [0.0, 0.0]])
    if nesterov:
        return np.array([[1.0 - lr * wd * (1.0 + mu), -lr * mu * mu], [wd, mu]])
    return np.array([[1.0 - lr * wd, -lr * mu], [wd, mu]])


def idle_map(steps: int, lr: float, momentum: float, nesterov: bool, weight_decay: float) -> np.ndarray:
    """``A^steps``: the linear map of ``steps`` zero-gradient SGD steps on ``(parameter, buffer)``,
    float64 (``np.linalg.matrix_power``; ``[[c, f], [e, h]]``: the parameter becomes ``c p + f buf``,
    the buffer ``e p + h buf``). Raises ``ValueError`` for negative ``steps``."""
    if int(steps) < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    return np.linalg.matrix_power(step_matrix(lr, momentum, nesterov, weight_decay), int(steps))


def idle_path(sent: np.ndarray, maps: np.ndarray, keep: bool) -> tuple[np.ndarray, np.ndarray]:
    """What every untouched row must be after each of a client's rounds: ``(rows, bound)``, both
    ``(k, n, w)`` float64, from ``sent`` (``(k, n, w)``: the rows the server sent it at its k
    selections, in order) and ``maps`` (``(k, 2, 2)``: each round's ``idle_map``). ``keep``: the
    momentum buffer is carried from one selection to the next (else it starts at zero each time);
    it is zero at the first. ``bound`` is ``|c| |sent| + |f| |buf|``, the scale of the terms the
    client rounded (``idle_deviation``)."""
    sent = np.asarray(sent, dtype=np.float64)
    maps = np.asarray(maps, dtype=np.float64)
    rows = np.empty_like(sent)
    bound = np.empty_like(sent)
    buf = np.zeros(sent.shape[1:])
    for k in range(sent.shape[0]):
        (c, f), (e, h) = maps[k]
        if not keep:
            buf[...] = 0.0
        rows[k] = c * sent[k] + f * buf
        bound[k] = abs(c) * np.abs(sent[k]) + abs(f) * np.abs(buf)
        buf = e * sent[k] + h * buf
    return rows, bound


def idle_deviation(returned: np.ndarray, rows: np.ndarray, bound: np.ndarray, eps: float) -> np.ndarray:
    """Each returned row's distance to its idle path (``idle_path``), ``(k, n)``: the largest over the
    row's entries of ``|returned - rows| / (eps (bound + |returned|))``, in units of the rounding
    (``eps``: the wire dtype's machine epsilon) at that entry's scale; an entry that is exactly on the
    path counts 0 (a zero bias sent and returned), one that is not finite is infinitely far."""
    r = np.asarray(returned, dtype=np.float64)
    diff = np.abs(r - rows)
    scale = eps * (bound + np.abs(r))
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(diff == 0, 0.0, diff / scale)
    z = np.where(np.isfinite(r), z, np.inf)
    z = np.nan_to_num(z, nan=np.inf)
    return z.max(axis=-1) if z.shape[-1] else np.zeros(z.shape[:-1])


def read_updates(sent: np.ndarray, returned: list, maps: np.ndarray, keep: bool, eps: float, tol: float,
                 max_branch: int = 6) -> np.ndarray:
    """``idle_deviation`` of each update that came back, ``(u, n)``, along the idle path of a client's
    rounds (``idle_path``) when some of them have no update: ``sent`` ``(k, n, w)`` and ``maps``
    ``(k, 2, 2)`` as there, ``returned`` a list of k arrays ``(n, w)`` or None (no update came back).
    A round without an update is one the client trained in (its update was lost or late: its buffer
    moved on) or not (the decoder never reached it: the buffer stayed); under ``keep`` the attack
    tries both for each such round before the next update and keeps the combination under which the
    most rows of that update lie within ``tol`` rounding units of their path (the untouched rows);
    more than ``max_branch`` such rounds in a row: all trained. Without ``keep`` every round starts
    from a zero buffer and nothing needs choosing."""
    sent = np.asarray(sent, dtype=np.float64)
    maps = np.asarray(maps, dtype=np.float64)
    zero = np.zeros(sent.shape[1:])
    buf = zero
    pending: list[int] = []
    out = []
    for k in range(sent.shape[0]):
        if returned[k] is None:
            pending.append(k)
            continue
        (c, f), _ = maps[k]
        combos = [()] if not keep else (list(itertools.product((True, False), repeat=len(pending)))
                                         if len(pending) <= max_branch else [(True,) * len(pending)])
        best = None
        for combo in combos:
            b = buf if keep else zero
            for kk, trained in zip(pending, combo):
                if trained:
                    b = maps[kk, 1, 0] * sent[kk] + maps[kk, 1, 1] * b
            path = c * sent[k] + f * b
            bound = abs(c) * np.abs(sent[k]) + abs(f) * np.abs(b)
            z = idle_deviation(returned[k], path, bound, eps)
            fit = int((z <= tol).sum())
            if best is None or fit > best[0]:
                best = (fit, z, b)
        _, z, b = best
        out.append(z)
        buf = maps[k, 1, 0] * sent[k] + maps[k, 1, 1] * b if keep else zero
        pending = []
    return np.stack(out) if out else np.zeros((0, sent.shape[1]))


def steps_of(sent: np.ndarray, returned: np.ndarray, lr: float, momentum: float, nesterov: bool,
             weight_decay: float, per: int = 1, max_steps: int = 4096, rtol: float = 1e-5) -> int:
    """The number of zero-gradient steps (a multiple of ``per``, at most ``max_steps``) that took the
    rows ``sent`` (``(n, w)``) to ``returned`` from a zero buffer, read off the untouched rows: each
    of them is ``c sent`` with one ``c = idle_map(S)[0, 0]``, so their ratios ``<returned, sent> /
    <sent, sent>`` coincide (to ``rtol``, relative) while a trained row's falls anywhere. The S whose c
    the most rows' ratios equal; ties (no weight decay: c = 1 for every S) the one whose c is nearest
    their median, then the smallest. Rows sent as zeros say nothing and are left out; ``per`` when no
    row is left. (The median alone misread S for clients whose users rated most of the catalogue: 74
    % of the items on average with M = 10 on ML-100K, exact recovery for 5 of 10 clients.)"""
    s = np.asarray(sent, dtype=np.float64)
    r = np.asarray(returned, dtype=np.float64)
    nn = (s * s).sum(axis=1)
    ok = (nn > 0) & np.isfinite(r).all(axis=1)
    per = max(int(per), 1)
    if not ok.any():
        return per
    ratio = np.sort((r[ok] * s[ok]).sum(axis=1) / nn[ok])
    one = idle_map(per, lr, momentum, nesterov, weight_decay)
    count = max(int(max_steps) // per, 1)
    cs = np.empty(count)
    m = one.copy()
    for j in range(count):  # c of S = per (j + 1): one 2 x 2 product a candidate
        cs[j] = m[0, 0]
        m = m @ one
    width = float(rtol) * np.abs(cs)
    hits = np.searchsorted(ratio, cs + width, "right") - np.searchsorted(ratio, cs - width, "left")
    best = np.flatnonzero(hits == hits.max())
    j = best[int(np.argmin(np.abs(cs[best] - float(np.median(ratio)))))]
    return per * (int(j) + 1)


def steps_along(sent: np.ndarray, returned: np.ndarray, lrs, momentum: float, nesterov: bool,
                weight_decay: float, eps: float, tol: float, per: int = 1, max_steps: int = 4096,
                max_branch: int = 6, sample: int = 256) -> int:
    """``steps_of`` for a client under kept momentum whose first updates did not come back: ``sent``
    ``(k + 1, n, w)``, the rows sent at its selections up to the first update that did (``returned``,
    ``(n, w)``), ``lrs`` their learning rates. Its buffer then depends on S and on which earlier rounds it
    trained in (``read_updates``), so each S (a multiple of ``per`` up to ``max_steps``) and each
    combination of those rounds (all trained beyond ``max_branch`` of them) is tried on ``sample`` rows
    spread over the catalogue, and the S under which the most of them lie within ``tol`` rounding units
    of their path is kept (ties: the smallest)."""
    sent = np.asarray(sent, dtype=np.float64)
    n = sent.shape[1]
    idx = np.unique(np.linspace(0, n - 1, min(n, int(sample))).astype(np.int64))
    s, r = sent[:, idx], np.asarray(returned, dtype=np.float64)[idx]
    k = sent.shape[0] - 1
    combos = list(itertools.product((True, False), repeat=k)) if k <= max_branch else [(True,) * k]
    per = max(int(per), 1)
    ones = [idle_map(per, lr, momentum, nesterov, weight_decay) for lr in lrs]
    maps = [o.copy() for o in ones]
    best_fit, best_S = -1, per
    for j in range(max(int(max_steps) // per, 1)):
        (c, f), _ = maps[k]
        for combo in combos:
            b = np.zeros_like(r)
            for kk, trained in enumerate(combo):
                if trained:
                    b = maps[kk][1, 0] * s[kk] + maps[kk][1, 1] * b
            z = idle_deviation(r, c * s[k] + f * b, abs(c) * np.abs(s[k]) + abs(f) * np.abs(b), eps)
            fit = int((z <= tol).sum())
            if fit > best_fit:
                best_fit, best_S = fit, per * (j + 1)
        maps = [m @ o for m, o in zip(maps, ones)]
    return best_S


def decoder_rows(dec: dict) -> np.ndarray:
    """The output rows of a decoder (``output_keys``): each item's weights and bias side by side,
    float64 ``(n, w + 1)``."""
    w_key, b_key = output_keys(dec)
    return np.column_stack([np.asarray(dec[w_key], np.float64), np.asarray(dec[b_key], np.float64)])


def wire_eps(dec: dict) -> float:
    """The machine epsilon of a model's wire dtype (that of its output weights), for ``idle_deviation``."""
    return float(np.finfo(np.asarray(dec[output_keys(dec)[0]]).dtype).eps)


def idle_guesses(view: View, sent: dict, back: dict, rows_of, *, call_kind: str, keep: bool, masked: bool,
                 tol: float, max_steps: int) -> dict[str, Guess]:
    """The idle-path reading of every client that returned an update (module docstring), shared by
    ``personalfr_idle_rows`` and ``fedavg_idle_rows`` (``attacks.fedavg``): ``sent`` and ``back``
    (client -> {round: model document}) the documents the server sent each client (messages of
    ``call_kind``; one a round for everyone, a broadcast) and those it got back; ``rows_of(doc)``
    each item's parameters in a document as one row, float64 ``(n_items, w)``; the wire's epsilon is
    ``wire_eps`` of the documents. ``keep``: the clients keep their momentum between selections;
    ``masked``: untouched rows are not stepped at all. A client is claimed the items whose row is more
    than ``tol`` rounding units off its idle path in some update; not answered for when its buffer is
    unknown (``View.count_outside`` of ``call_kind`` before its last update, under ``keep``) or its
    rows do not have the catalogue's shape. S: ``steps_of`` up to ``max_steps`` (``steps_along``
    when its first update was lost under ``keep``)."""
    cfg = view.public.config
    n = int(view.public.n_items)
    pool = np.arange(n, dtype=np.int64)
    out = {}
    cache: dict[int, np.ndarray] = {}
    for client in sorted(back):
        rounds = sorted(sent.get(client, {}))
        ups = [t for t in rounds if t in back[client]]
        if not ups:
            continue
        first = rounds[0]
        # under kept momentum the buffer needs every model sent it up to its last update: a window
        # that leaves one out (View.outside) leaves the buffer unknown
        if keep and not masked and view.count_outside(call_kind, before=ups[-1], receiver=client):
            continue
        eps = wire_eps(sent[client][first])
        S_rows = np.stack([cache[t] if t in cache else cache.setdefault(t, rows_of(sent[client][t]))
                           for t in rounds])  # (a broadcast: one model a round for everyone)
        if S_rows.shape[1] != n:
            continue
        if masked:
            maps = np.repeat(np.eye(2)[None], len(rounds), 0)
        else:
            hyper = (cfg.momentum, cfg.nesterov, cfg.weight_decay)
            # S from an update trained from a zero buffer: the first selection's, or (reset) any; under
            # kept momentum with the first update missing, S and the rounds trained in are tried together
            t0 = first if first in back[client] or keep else ups[0]
            if t0 in back[client]:
                S = steps_of(S_rows[rounds.index(t0)], rows_of(back[client][t0]), cfg.lr_at(t0),
                             *hyper, per=cfg.local_epochs, max_steps=max_steps, rtol=tol * eps)
            else:
                k0 = rounds.index(ups[0])
                S = steps_along(S_rows[:k0 + 1], rows_of(back[client][ups[0]]),
                                [cfg.lr_at(t) for t in rounds[:k0 + 1]], *hyper, eps, tol,
                                per=cfg.local_epochs, max_steps=max_steps)
            maps = np.stack([idle_map(S, cfg.lr_at(t), *hyper) for t in rounds])
        R = [rows_of(back[client][t]) if t in back[client] else None for t in rounds]
        if any(r is not None and r.shape != S_rows.shape[1:] for r in R):
            continue
        z = read_updates(S_rows, R, maps, keep and not masked, eps, tol).max(axis=0)
        out[client] = Guess(pool, z, pool[z > tol])
    return out


class PersonalFRIdleRows(Attack):
    """``personalfr_idle_rows`` (module docstring): the rows of an uncompressed PersonalFR update
    that left the path of an untouched row. ``tol``: a row is claimed when some entry is more than
    this many rounding units (``idle_deviation``) off its idle path in some update of the client;
    ``max_steps``: the largest number of local steps per round tried (``steps_of``)."""

    name = "personalfr_idle_rows"
    view = ViewSpec.server()
    protocols = ("personalfr",)

    def __init__(self, tol: float = 64.0, max_steps: int = 4096) -> None:
        self.tol = float(tol)
        self.max_steps = int(max_steps)

    def run(self, view: View) -> dict[str, Guess]:
        cfg = view.public.config
        if getattr(cfg, "compression", True):  # slices of I_m: the indices say it already
            return {}
        sent: dict[str, dict[int, dict]] = {}
        back: dict[str, dict[int, dict]] = {}
        for m in view.messages:
            if m.kind == "decoder" and m.outgoing and m.payload is not None:
                sent.setdefault(m.receiver, {})[m.round] = m.payload["dec"]
            elif m.kind == "update" and not m.outgoing and m.sender is not None and m.payload is not None:
                back.setdefault(m.sender, {})[m.round] = m.payload["dec"]
        return idle_guesses(view, sent, back, decoder_rows, call_kind="decoder",
                            keep=cfg.client_momentum == "keep", masked=cfg.uncompressed_training == "masked",
                            tol=self.tol, max_steps=self.max_steps)
