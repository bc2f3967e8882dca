"""Attacks on FedRec++'s anonymous noise channel.

FedRec++ (section "Security analysis"): each ordinary client sends the gradients of its sampled
items I'_u to a denoising client over an anonymous channel, so that "even if the server colludes
with the denoising clients, the server cannot obtain the rating behaviors of a specific user ...
because of the anonymity of the clients".

``noise_matching`` (the server colluding with one or all denoisers): a noise message lists the
    items I'_u and their gradient rows, and the same rows, bit for bit, are in that user's upload
    to the server (FedRec++ must send them there: the server removes their sum later). The
    server matches every noise message to the one upload that contains its rows (one noise
    message per user and round: a matching, not a guess) and recovers I_u = upload items minus
    I'_u. When no single upload matches (the ``secure_noise`` defence masks the noise, or the
    noise went to a denoiser outside the coalition), the server still has what every denoiser
    sent it, under the denoiser's name: the items some noise of its group named; a user's upload
    minus those items is a set of rated items (her own sampled items are among them), and the
    claim is its union over rounds. (It used only the colluding denoisers' messages, which
    understated what the server learns.) A user in no group keeps the server-only answer: the
    whole upload.
``noise_linking`` (a network observer of the server's and the denoisers' links, no payloads):
    links each anonymous noise message at a denoiser to the upload of the same round at the
    server, by size (the noise of a user with n rated items has int(rho n) rows, the upload
    n + int(rho n)) and by arrival time (a client sends its upload and its noise back to back;
    when times are equal, the order of arrival), with a greedy minimum-cost matching. It reports links, not items (``about = "links"``):
    ``{noise ref: guessed sender}``, scored by the audit against the ledger.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from ...kernel.codec import encode_message
from ...math.filling import rated_counts_of_rows
from ..metrics import Guess
from ..views import View, ViewSpec
from .base import Attack

__all__ = ["NoiseLinking", "NoiseMatching", "row_count_of_size"]


def _row_key(item: int, row: np.ndarray) -> bytes:
    return int(item).to_bytes(8, "little", signed=True) + np.ascontiguousarray(row).tobytes()


class NoiseMatching(Attack):
    """The collusion attack (module docstring). ``count``: the colluding denoisers (None: all)."""

    name = "noise_matching"
    protocols = ("fedrecpp",)

    def __init__(self, count: int | None = None) -> None:
        self.count = count
        self.view = ViewSpec.colluding("denoiser", count)
        self.name = "noise_matching" + ("" if count is None else f"[{count}]")

    def run(self, view: View) -> dict[str, Guess]:
        uploads: dict[int, dict[str, tuple]] = defaultdict(dict)  # round -> sender -> (items, grads)
        index: dict[int, dict[bytes, list[str]]] = defaultdict(lambda: defaultdict(list))
        noises = []
        for m in view.messages:
            if m.outgoing or m.payload is None:
                continue
            p = m.payload
            if m.kind == "gradients" and m.sender is not None and "items" in p:
                items = np.asarray(p["items"])
                grads = np.asarray(p["grads"])
                uploads[m.round][m.sender] = (items, grads)
                for i, row in zip(items.tolist(), grads):
                    index[m.round][_row_key(i, row)].append(m.sender)
            elif m.kind == "noise" and "items" in p:
                noises.append((m.round, np.asarray(p["items"]), np.asarray(p["grads"])))
        # what every denoiser sent the server (named, not anonymous: the server reads them all,
        # colluding denoisers or not): per denoiser and round, the items some noise in its group
        # named (count > 0), and who belongs to which group (the server's assign)
        assigned: dict[str, str] = {}
        group_items: dict[tuple[str, int], np.ndarray] = {}
        for m in view.messages:
            if m.payload is None:
                continue
            if m.kind == "assign" and m.outgoing and m.payload.get("denoiser"):
                assigned[m.receiver] = m.payload["denoiser"]
            elif m.kind == "denoised" and m.sender is not None:
                it = np.asarray(m.payload["items"], dtype=np.int64)
                group_items[(m.sender, m.round)] = it[np.asarray(m.payload["counts"]) > 0]
        found: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))  # user -> sampled item -> times
        rounds_linked: dict[str, int] = defaultdict(int)
        taken: set[tuple[int, str]] = set()
        for rnd, items, grads in noises:
            if items.size == 0:
                continue
            cands = None
            for i, row in zip(items.tolist(), grads):
                who = set(index[rnd].get(_row_key(i, row), ()))
                cands = who if cands is None else cands & who
                if not cands:
                    break
            cands = sorted(c for c in (cands or ()) if (rnd, c) not in taken)
            if len(cands) != 1:
                continue  # no upload, or several, carry every row: no link
            user = cands[0]
            taken.add((rnd, user))
            rounds_linked[user] += 1
            for i in items.tolist():
                found[user][i] += 1
        pools: dict[str, list] = defaultdict(list)
        by_group: dict[str, list] = defaultdict(list)  # user -> upload items minus her group's noise items
        for rnd, by_user in uploads.items():
            for user, (items, _) in by_user.items():
                pools[user].append(items)
                gi = group_items.get((assigned.get(user), rnd))
                if gi is not None:
                    by_group[user].append(np.setdiff1d(items.astype(np.int64), gi))
        out = {}
        for user, parts in pools.items():
            pool = np.unique(np.concatenate(parts).astype(np.int64))
            if rounds_linked.get(user):
                sampled = np.fromiter(found[user].keys(), dtype=np.int64)
                rated = np.setdiff1d(pool, sampled)
                out[user] = Guess(pool, np.isin(pool, rated).astype(float), rated)
            elif by_group.get(user):
                # no individual link (secure noise): her own sampled items are among her group's
                # noise items, so what is left of each upload is rated; the union over rounds
                rated = np.unique(np.concatenate(by_group[user]))
                out[user] = Guess(pool, np.isin(pool, rated).astype(float), rated)
            else:  # not linked: the server-only answer, every uploaded item
                out[user] = Guess(pool, np.zeros(pool.size), pool)
        return out


def _doc_size(kind: str, rows: int, d: int, dtype: str, extra: dict | None = None) -> int:
    payload = {"items": np.zeros(rows, np.int32), "grads": np.zeros((rows, d), np.dtype(dtype))}
    if extra:
        payload.update(extra)
    return len(encode_message(kind, payload).data)


def row_count_of_size(size: int, kind: str, d: int, dtype: str, framing: int, max_rows: int) -> int | None:
    """The number of rows k of an ``{items: int32[k], grads: dtype[k, d]}`` message of ``kind``
    whose wire size (document + ``framing``) is ``size``, or None if no k fits (found from the
    affine size law and checked exactly with the codec)."""
    per_row = 4 + d * np.dtype(dtype).itemsize
    base = _doc_size(kind, 0, d, dtype) + framing
    guess = int(round((size - base) / per_row))
    for k in sorted(range(max(0, guess - 3), min(max_rows, guess + 3) + 1), key=lambda k: abs(k - guess)):
        if _doc_size(kind, k, d, dtype) + framing == size:
            return k
    return None


class NoiseLinking(Attack):
    """The network observer's linking attack (module docstring). ``use``: ``"size"``, ``"time"``
    or ``"size+time"``. ``framing``: bytes the network adds per message (the transport is public;
    0 on ``SimNetwork``)."""

    about = "links"
    protocols = ("fedrecpp",)

    def __init__(self, use: str = "size+time", framing: int = 0) -> None:
        if use not in ("size", "time", "size+time"):
            raise ValueError(f"use must be size, time or size+time, got {use!r}")
        self.use = use
        self.framing = int(framing)
        self.name = f"noise_linking[{use}]"
        self.view = ViewSpec.network(("server", "denoiser"))

    def run(self, view: View) -> dict[int, str]:
        cfg = view.public.config
        rho, d, dt = float(cfg.rho), int(cfg.d), cfg.dtype
        m = view.public.n_items
        ups: dict[int, list] = defaultdict(list)
        noise: dict[int, list] = defaultdict(list)
        for p in view.messages:
            if p.kind == "gradients" and p.sender is not None:
                ups[p.round].append(p)
            elif p.kind == "noise":
                noise[p.round].append(p)
        upload_memo: dict[int, frozenset] = {}
        noise_memo: dict[int, int | None] = {}

        def noise_rows_of_upload(up) -> frozenset:
            """The noise row counts an upload of this size is consistent with."""
            if up.nbytes not in upload_memo:
                k = row_count_of_size(up.nbytes, "gradients", d, dt, self.framing, 2 * m)
                # n rated items give k = n + s upload rows and s = n_sampled(n, m, rho) noise
                # rows; one n below the cap, several at k == m (rated_counts_of_rows)
                upload_memo[up.nbytes] = (frozenset() if k is None else
                                          frozenset(k - int(n) for n in rated_counts_of_rows(k, m, rho)))
            return upload_memo[up.nbytes]

        def noise_rows(msg) -> int | None:
            if msg.nbytes not in noise_memo:
                noise_memo[msg.nbytes] = row_count_of_size(msg.nbytes, "noise", d, dt, self.framing, 2 * m)
            return noise_memo[msg.nbytes]

        out: dict[int, str] = {}
        for rnd, ns in noise.items():
            us = ups.get(rnd, [])
            if not us:
                continue
            t_up = np.array([u.rx_start for u in us])
            t_no = np.array([n.rx_start for n in ns])
            size_ok = np.zeros((len(ns), len(us)), dtype=bool)
            allowed = [noise_rows_of_upload(u) for u in us]
            for j, n in enumerate(ns):
                r = noise_rows(n)
                size_ok[j] = [r is not None and r in a for a in allowed]
            cost = np.zeros((len(ns), len(us)))
            if "time" in self.use:
                # the delay from a client's upload reaching the server to its noise reaching the
                # denoiser: the median over the size-consistent pairs (or all pairs)
                diff = t_no[:, None] - t_up[None, :]
                base = diff[size_ok] if size_ok.any() else diff.ravel()
                offset = float(np.median(base)) if base.size else 0.0
                cost += np.abs(diff - offset)
                # and the order of arrival (all that is left when times are equal, as on the
                # ideal profile): each message's position in its own stream, as a fraction
                q_no = (np.argsort(np.argsort(t_no, kind="stable"), kind="stable") + 0.5) / len(ns)
                q_up = (np.argsort(np.argsort(t_up, kind="stable"), kind="stable") + 0.5) / len(us)
                cost += 1e-9 * np.abs(q_no[:, None] - q_up[None, :])
            if "size" in self.use:
                cost += np.where(size_ok, 0.0, 1e12)
            # greedy minimum-cost matching; equal costs broken by the opaque references
            ref_n = np.array([n.ref for n in ns])
            ref_u = np.array([u.ref for u in us])
            order = np.lexsort((np.broadcast_to(ref_u, cost.shape).ravel(),
                                np.broadcast_to(ref_n[:, None], cost.shape).ravel(), cost.ravel()))
            used_n, used_u = set(), set()
            for flat in order:
                j, i = divmod(int(flat), len(us))
                if j in used_n or i in used_u:
                    continue
                used_n.add(j)
                used_u.add(i)
                out[ns[j].ref] = us[i].sender
                if len(used_n) == len(ns):
                    break
        return out
