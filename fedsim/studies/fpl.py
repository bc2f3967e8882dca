"""FPL studies: the implicit-feedback pipeline, top-N evaluation, and run helpers for FPL, FCF,
BPR-MF, Top-Pop and Random, with CCE read from the ledger.

Data (:func:`prepare`): every rating is a positive interaction (``binarize()``), users with
``min_interactions`` or more are kept (default 21, i.e. "more than 20" as the FPL paper and issue
say; the authors' code and the reference notes keep >= 20: pass 20), then the per-user temporal
hold-out: each user's most recent ``floor(0.2 n_u)`` interactions are the test part, and the same
cut of the remaining ones the validation part (``temporal_holdout_with_validation``).

Protocols (what a model is fitted on and what it is evaluated on):

``validation`` (default) fit on train (= the 80 % minus its validation cut); every epoch is
               evaluated on the validation part (ranking everything but the training items) and
               on the test part (ranking everything but training and validation items). The
               epoch (and pi) is chosen by validation P@10 and its test figures are reported:
               the paper's section 5.3 ("a further temporal hold-out 80-20 ... to extract her
               validation set"), without retraining on train + validation.
``test``       fit on the full 80 %; evaluate the test part only; choose the best epoch on test
               (a sanity protocol, as ``benchmarks/bpr_sanity.py``; what Table 4's "epochs needed
               to obtain the best accuracy value" reads like).

Rankings never include an item without a training interaction (it cannot be learnt; its factors
stay at their random initialisation): the catalogue is the fitted part's items.

Communication: every FPL/FCF number comes from the run's ledger (``cce_ledger``: the units, i.e.
vectors, of the training kinds in one epoch); the closed forms are computed beside it as checks.
Long FPL runs are split into one network per epoch (state carried over through ``build``'s
``init``/``user_factors``), which keeps each ledger small and lets the model be evaluated between
epochs; network seeds are derived per epoch from the run seed.

An optional on-disk cache (``cache_dir``) stores each run's curve as JSON under a key made of the
data fingerprint and every parameter, so the three FPL scenarios can share runs.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..data import Ratings, temporal_holdout, temporal_holdout_with_validation
from ..kernel import SimNetwork
from ..kernel.codec import WIRE_VERSION
from ..math.bpr import bpr_scores
from ..math.bpr_central import train_bpr
from ..math.fpl_presets import PRESET_NAMES, fpl_preset
from ..math.metrics import bias_disparity, f1_at, gini_at, item_coverage_at, precision_at, recall_at, top_n
from ..math.popularity import random_scores, toppop_item_scores
from ..protocols import fcf as fcf_proto
from ..protocols import fpl as fpl_proto
from ..seeding import node_rng, seed_sequence

__all__ = [
    "PAPER_TABLE2_BRAZIL",
    "PAPER_TABLE3_BRAZIL",
    "PAPER_TABLE4_BRAZIL",
    "Evaluator",
    "ImplicitSplit",
    "RunRecord",
    "best_epoch",
    "epoch_seed",
    "prepare",
    "run_bpr",
    "run_cached",
    "run_fcf",
    "run_fpl",
    "run_random",
    "run_toppop",
    "ledger_tcc",
    "mean_cce",
]

# The paper's Brazil figures (Foursquare check-ins; a different data set from MovieLens).
PAPER_TABLE2_BRAZIL = {  # P@10, R@10
    "Random": (0.00013, 0.00015), "Top-Pop": (0.01909, 0.02375), "BPR-MF": (0.07702, 0.09494),
    "FCF": (0.03089, 0.03749), "sFPL": (0.07757, 0.09581), "sFPL+": (0.08682, 0.11004),
    "pFPL": (0.07771, 0.09582), "pFPL+": (0.08733, 0.11085),
}
PAPER_TABLE3_BRAZIL = {  # IC@10, G@10
    "Random": (46120, 0.70946), "Top-Pop": (19, 0.00020), "BPR-MF": (2552, 0.00756), "FCF": (911, 0.00095),
    "sFPL": (1581, 0.00561), "sFPL+": (5200, 0.01449), "pFPL": (2114, 0.00638), "pFPL+": (3820, 0.01106),
}
PAPER_BEST_PI_BRAZIL = {"sFPL": 0.5, "sFPL+": 0.9, "pFPL": 0.8, "pFPL+": 0.8}
# Table 4 (Brazil): best P@10 per preset, its pi and its TCC (x 1e12 vectors); epochs 45/50/45/35
PAPER_TABLE4_BRAZIL = {
    "sFPL": (0.5, 0.07757, 1.27624, 45), "sFPL+": (0.9, 0.08682, 1.41996, 50),
    "pFPL": (0.8, 0.07771, 1.27625, 45), "pFPL+": (0.8, 0.08733, 0.99390, 35),
}


# --------------------------------------------------------------------------------------------
# data


@dataclass
class Evaluator:
    """Top-N evaluation of one held-out part: ``truth`` (CSR of the held-out items per user) and
    ``exclude`` (CSR of the items never ranked for a user: her known items plus every item
    outside the catalogue)."""

    name: str
    truth: tuple[np.ndarray, np.ndarray]
    exclude: tuple[np.ndarray, np.ndarray]
    n_items: int
    train_items: np.ndarray  # every training interaction's item (source bias)
    categories: np.ndarray | None
    n: int = 10

    def __call__(self, scores: np.ndarray) -> dict[str, Any]:
        recs = top_n(scores, self.exclude, self.n)
        n = self.n
        out = {
            "p": float(precision_at(recs, self.truth, n)),
            "r": float(recall_at(recs, self.truth, n)),
            "f1": float(f1_at(recs, self.truth, n)),
            "ic": int(item_coverage_at(recs, n)),
            "gini": float(gini_at(recs, n, self.n_items)),
        }
        if self.categories is not None:
            bd = bias_disparity(self.train_items, recs, self.categories, n)
            out["bd"] = [None if not np.isfinite(x) else float(x) for x in bd.disparity]
        return out


def _csr(users: np.ndarray, items: np.ndarray, n_users: int) -> tuple[np.ndarray, np.ndarray]:
    users = np.asarray(users, dtype=np.int64)
    items = np.asarray(items, dtype=np.int64)
    order = np.lexsort((items, users))
    indptr = np.zeros(n_users + 1, dtype=np.int64)
    np.cumsum(np.bincount(users, minlength=n_users), out=indptr[1:])
    return indptr, items[order]


@dataclass
class ImplicitSplit:
    """What a run needs: the part to fit (``train``), its catalogue, and the evaluators."""

    name: str
    protocol: str
    n_users: int
    n_items: int
    train: Ratings
    catalogue: np.ndarray
    evaluators: dict[str, Evaluator]
    category_names: tuple[str, ...] | None
    info: dict = field(default_factory=dict)

    @property
    def x_plus(self) -> int:
        return len(self.train)

    @property
    def user_items(self) -> list[np.ndarray]:
        csr = self.train.by_user()
        return [np.asarray(csr.row_indices(u), dtype=np.int64) for u in range(self.n_users)]

    @property
    def fingerprint(self) -> str:
        h = hashlib.sha256()
        h.update(self.train.fingerprint().encode())
        for name in sorted(self.evaluators):
            ev = self.evaluators[name]
            h.update(name.encode())
            for a in (*ev.truth, *ev.exclude):
                h.update(np.ascontiguousarray(a).tobytes())
        h.update(self.protocol.encode())
        return h.hexdigest()[:20]

    def evaluate(self, scores: np.ndarray) -> dict[str, dict]:
        return {name: ev(scores) for name, ev in self.evaluators.items()}


def prepare(ratings: Ratings, *, min_interactions: int = 21, test_frac: float = 0.2, val_frac: float = 0.2,
            protocol: str = "validation", n: int = 10, max_users: int = 0, seed: int = 0) -> ImplicitSplit:
    """The FPL pipeline on ``ratings`` (explicit or implicit, with timestamps): binarize, keep
    users with at least ``min_interactions``, per-user temporal split, evaluators for
    ``protocol`` ("validation" or "test", see the module docstring). ``max_users`` > 0 keeps a
    seeded random subset of that many users first (to make synthetic defaults small)."""
    if protocol not in ("validation", "test"):
        raise ValueError(f"protocol must be 'validation' or 'test', got {protocol!r}")
    r = ratings.binarize()
    if max_users and max_users < r.n_users:
        keep = np.zeros(r.n_users, dtype=bool)
        keep[node_rng(seed, "fpl:users").choice(r.n_users, size=int(max_users), replace=False)] = True
        r = r.reindex(keep, None)
    if min_interactions > 0:
        r = r.filter_users(int(min_interactions))
    if r.n_users == 0:
        raise ValueError(f"no user has {min_interactions} interactions or more")
    nu, ni = r.n_users, r.n_items
    cats = None if r.categories is None else np.asarray(r.categories, dtype=bool)
    train_full, test = temporal_holdout(r, test_frac)
    if protocol == "validation":
        train, val, test = temporal_holdout_with_validation(r, test_frac, val_frac)
    else:
        train, val = train_full, None
    catalogue = np.unique(train.items).astype(np.int64)
    outside = np.setdiff1d(np.arange(ni), catalogue)

    def exclude_for(*parts: Ratings) -> tuple[np.ndarray, np.ndarray]:
        us = [p.users for p in parts] + [np.repeat(np.arange(nu), outside.size)]
        its = [p.items for p in parts] + [np.tile(outside, nu)]
        return _csr(np.concatenate(us), np.concatenate(its), nu)

    ti = np.asarray(train.items, dtype=np.int64)
    evals: dict[str, Evaluator] = {}
    if val is not None:
        evals["val"] = Evaluator("val", _csr(val.users, val.items, nu), exclude_for(train), ni, ti, cats, n)
        evals["test"] = Evaluator("test", _csr(test.users, test.items, nu), exclude_for(train, val), ni, ti, cats, n)
    else:
        evals["test"] = Evaluator("test", _csr(test.users, test.items, nu), exclude_for(train), ni, ti, cats, n)
    counts = np.bincount(train.users, minlength=nu)
    if counts.min() == 0:
        raise ValueError("a user has no training interaction; raise min_interactions")
    info = {"users": nu, "items": ni, "catalogue": int(catalogue.size), "x_plus": len(train),
            "train_full": len(train_full), "validation": 0 if val is None else len(val), "test": len(test),
            "test_unreachable": int(np.isin(test.items, outside).sum()), "min_interactions": int(min_interactions),
            "max_users": int(max_users)}
    return ImplicitSplit(r.name or "data", protocol, nu, ni, train, catalogue, evals,
                         None if r.category_names is None else tuple(r.category_names), info)


# --------------------------------------------------------------------------------------------
# run records


@dataclass
class RunRecord:
    """One training run: ``curve`` holds one dict per evaluation (``epoch``; per evaluator
    ``{name}_p``, ``_r``, ``_f1``, ``_ic``, ``_gini``, ``_bd``; for federated runs the ledger's
    ``cce_ledger`` (units of the training kinds in that epoch), ``bytes``, and the closed forms)."""

    method: str
    params: dict
    curve: list[dict]
    wall_s: float
    info: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "RunRecord":
        return cls(d["method"], d["params"], d["curve"], d["wall_s"], d.get("info", {}))


def best_epoch(rec: RunRecord, on: str = "val", metric: str = "p") -> dict:
    """The curve entry with the highest ``{on}_{metric}`` (the first one on ties); ``on`` falls
    back to "test" when the run has no validation figures."""
    key = f"{on}_{metric}"
    if not rec.curve:
        raise ValueError(f"{rec.method}: empty curve")
    if key not in rec.curve[0]:
        key = f"test_{metric}"
    vals = [c[key] for c in rec.curve]
    return rec.curve[int(np.argmax(vals))]


def _flatten(epoch: int, metrics: dict[str, dict]) -> dict:
    out: dict[str, Any] = {"epoch": epoch}
    for name, m in metrics.items():
        for k, v in m.items():
            out[f"{name}_{k}"] = v
    return out


def epoch_seed(seed: int, epoch: int) -> int:
    """The network seed of epoch ``epoch`` of a run seeded ``seed`` (a 63-bit integer)."""
    w = seed_sequence(seed, f"fpl:epoch:{epoch}").generate_state(2, np.uint32)
    return (int(w[0]) << 31) ^ int(w[1])


def _ledger_epoch(net, kinds: tuple[str, ...]) -> dict[str, float]:
    c = net.ledger.columns()
    keep = np.isin(c["kind"], kinds)
    down = keep & (c["src_role"] == "server")
    return {"cce_ledger": float(c["units"][keep].sum()), "down_units": float(c["units"][down].sum()),
            "up_units": float(c["units"][keep & ~down].sum()), "bytes": int(c["bytes"][keep].sum()),
            "raw_bytes": int(c["raw_bytes"][keep].sum()), "messages": int(keep.sum())}


# --------------------------------------------------------------------------------------------
# runners


def run_fpl(split: ImplicitSplit, preset: str, pi: float, epochs: int, *, d: int = 10, lr: float = 0.05,
            seed: int = 0, profile: str = "ideal", rounding: str = "round", definition: str = "code",
            dtype: str = "float32", merge: bool | str = False, local_item_updates: bool = False,
            user_update: str = "per_triple", on_epoch: Callable[[int, dict], None] | None = None,
            record_network: Callable[[Any], None] | None = None, start: tuple[RunRecord, dict] | None = None,
            checkpoint: Callable[[RunRecord, dict], None] | None = None) -> RunRecord:
    """Train FPL preset ``preset`` with disclosure ``pi`` for ``epochs`` epochs, one network per
    epoch; evaluate after every epoch. Each curve entry carries the ledger's figures for that
    epoch (``cce_ledger`` etc.), the exact count ``cce_exact`` = visits (|I| + T) + positives sent
    (from the clients' own counts), the closed form of the schedule actually run
    (``cce_formula``) and of the paper's fractional T and rpe (``cce_formula_paper``).

    ``start = (record, {"theta", "P"})`` continues a run of ``len(record.curve)`` epochs (same
    parameters) from its final model; epoch e only depends on the model after epoch e - 1 and on
    ``epoch_seed(seed, e)``, so a continued run equals one run of ``epochs`` epochs.
    ``checkpoint(record_so_far, {"theta", "P"})`` is called after every epoch."""
    if preset not in PRESET_NAMES:
        raise ValueError(f"unknown preset {preset!r}")
    nu, ni = split.n_users, split.n_items
    exact = fpl_preset(preset, nu, split.x_plus, definition)
    sched = exact.schedule(rounding)
    cfg = fpl_proto.config_for_preset(preset, nu, split.x_plus, epochs=1, rounding=rounding, definition=definition,
                                      d=d, lr=lr, pi=pi, dtype=dtype, merge=merge,
                                      local_item_updates=local_item_updates, user_update=user_update)
    samplers = fpl_proto.make_samplers(split.user_items, ni, split.catalogue)
    theta = P = None
    curve: list[dict] = []
    wall0 = 0.0
    if start is not None:
        prev, state = start
        curve = [dict(c) for c in prev.curve]
        theta, P = np.array(state["theta"]), np.array(state["P"], dtype=np.float64)
        wall0 = float(prev.wall_s)
    params = {"preset": preset, "pi": float(pi), "epochs": int(epochs), "d": d, "lr": lr, "seed": seed,
              "profile": profile, "rounding": rounding, "definition": definition, "dtype": dtype,
              "merge": merge, "local_item_updates": local_item_updates, "user_update": user_update,
              "clients_per_round": cfg.clients_per_round, "triples": cfg.triples,
              "rounds_per_epoch": cfg.rounds}
    t0 = time.perf_counter()
    for e in range(len(curve), int(epochs)):
        te = time.perf_counter()
        net = SimNetwork(seed=epoch_seed(seed, e), profile=profile)
        job = fpl_proto.build(net, None, ni, cfg, samplers=samplers, init=theta, user_factors=P,
                              round_offset=e * cfg.rounds)
        res = net.run()
        out = job.collect(res)
        theta, P = out["theta"], out["P"]
        led = _ledger_epoch(net, fpl_proto.TRAINING_KINDS)
        visits = int(out["rounds"].sum())
        pos = int(out["sent_positive"].sum())
        train_s = time.perf_counter() - te
        scores = bpr_scores(P, out["Q"].astype(np.float64), out["b"].astype(np.float64))
        entry = _flatten(e + 1, split.evaluate(scores))
        entry.update(led)
        entry.update({
            "visits": visits, "positives_sent": pos, "negatives_sent": int(out["sent_negative"].sum()),
            "cce_exact": visits * (ni + cfg.triples) + pos,
            "cce_formula": sched.cce(ni, pi),
            "cce_formula_paper": exact.cce(ni, pi),
            "sim_time": float(res.duration), "train_s": train_s, "wall_s": time.perf_counter() - te,
        })
        curve.append(entry)
        if record_network is not None:
            record_network(net)
        if on_epoch is not None:
            on_epoch(e + 1, entry)
        if checkpoint is not None:
            checkpoint(RunRecord(preset, {**params, "epochs": e + 1}, list(curve), wall0 + time.perf_counter() - t0),
                       {"theta": theta, "P": P})
        del net, res, job
    return RunRecord(preset, params, curve, wall0 + time.perf_counter() - t0)


def run_fcf(split: ImplicitSplit, rounds: int, *, d: int = 10, alpha: float = 1.0, lam: float = 0.1,
            lr: float = 0.05, optimizer: str = "adam", seed: int = 0, profile: str = "ideal", eval_every: int = 1,
            on_epoch: Callable[[int, dict], None] | None = None,
            record_network: Callable[[Any], None] | None = None) -> RunRecord:
    """Train FCF for ``rounds`` rounds of all clients (one "epoch" = one round: every client
    processes all its data), in networks of ``eval_every`` rounds, evaluating ``P @ Q_sent.T``
    after each. Curve entries carry the ledger's figures per round (averaged over the chunk):
    ``bytes_per_client_round`` and ``raw_bytes_per_client_round`` (payload arrays only)."""
    nu, ni = split.n_users, split.n_items
    items = split.user_items
    state = None
    curve = []
    t0 = time.perf_counter()
    done = 0
    chunk = 0
    while done < rounds:
        k = min(int(eval_every), rounds - done)
        cfg = fcf_proto.FCFConfig(rounds=k, d=d, alpha=alpha, lam=lam, lr=lr, optimizer=optimizer)
        te = time.perf_counter()
        net = SimNetwork(seed=epoch_seed(seed, chunk), profile=profile)
        job = fcf_proto.build(net, items, ni, cfg, init=state, round_offset=done)
        res = net.run()
        out = job.collect(res)
        state = {"Q": out["Q"], "adam": out["adam"]}
        done += k
        chunk += 1
        led = _ledger_epoch(net, fcf_proto.TRAINING_KINDS)
        scores = out["P"] @ out["Q_sent"].astype(np.float64).T
        entry = _flatten(done, split.evaluate(scores))
        entry.update({key: v / k for key, v in led.items()})
        entry.update({"bytes_per_client_round": led["bytes"] / (k * nu),
                      "raw_bytes_per_client_round": led["raw_bytes"] / (k * nu),
                      "formula_bytes_per_client_round": fcf_proto.payload_bytes_per_client_round(ni, d),
                      "sim_time": float(res.duration), "wall_s": time.perf_counter() - te})
        curve.append(entry)
        if record_network is not None:
            record_network(net)
        if on_epoch is not None:
            on_epoch(done, entry)
    params = {"rounds": int(rounds), "d": d, "alpha": alpha, "lam": lam, "lr": lr, "optimizer": optimizer,
              "seed": seed, "profile": profile, "eval_every": int(eval_every)}
    return RunRecord("FCF", params, curve, time.perf_counter() - t0)


def run_bpr(split: ImplicitSplit, epochs: int, *, d: int = 10, lr: float = 0.05, seed: int = 0,
            on_epoch: Callable[[int, dict], None] | None = None) -> RunRecord:
    """Centralized BPR-MF (``fedsim.math.bpr_central.train_bpr``, X+ steps per epoch, negatives
    from the catalogue), evaluated after every epoch."""
    csr = split.train.by_user()
    curve = []
    t0 = time.perf_counter()

    def cb(epoch, model):
        entry = _flatten(epoch, split.evaluate(model.scores()))
        curve.append(entry)
        if on_epoch is not None:
            on_epoch(epoch, entry)

    train_bpr(np.asarray(csr.indptr), np.asarray(csr.indices), split.n_users, split.n_items, d, int(epochs), lr,
              node_rng(seed, "bpr"), catalogue=split.catalogue, eval_callback=cb)
    return RunRecord("BPR-MF", {"epochs": int(epochs), "d": d, "lr": lr, "seed": seed}, curve,
                     time.perf_counter() - t0)


def run_toppop(split: ImplicitSplit) -> RunRecord:
    t0 = time.perf_counter()
    s = toppop_item_scores(split.train.items, n_items=split.n_items)
    scores = np.broadcast_to(s, (split.n_users, split.n_items))
    return RunRecord("Top-Pop", {}, [_flatten(0, split.evaluate(scores))], time.perf_counter() - t0)


def run_random(split: ImplicitSplit, seed: int = 0) -> RunRecord:
    t0 = time.perf_counter()
    scores = random_scores(split.n_users, split.n_items, node_rng(seed, "random"))
    return RunRecord("Random", {"seed": seed}, [_flatten(0, split.evaluate(scores))], time.perf_counter() - t0)


# --------------------------------------------------------------------------------------------
# cache


def run_cached(cache_dir: str | Path | None, split: ImplicitSplit, method: str, params: dict,
               fn: Callable[..., RunRecord], length: int, length_key: str = "epochs",
               resumable: bool = False) -> tuple[RunRecord, bool]:
    """``fn(length)``, or a stored result: ``cache_dir/<method>-<key>.json`` where the key hashes
    the data's fingerprint, the method and ``params`` (every parameter that changes the run
    except its length). Epoch e of a run does not depend on how many epochs follow (one network
    per epoch, seeded per epoch), so a stored run at least ``length`` long is reused, cut to
    ``length`` evaluations. A shorter one is run again and replaced, unless ``resumable``: then
    ``fn(length, start=..., checkpoint=...)`` is called (see :func:`run_fpl`), continuing from the
    stored model (``<method>-<key>.npz``, written with the record after every epoch, so an
    interrupted run keeps its finished epochs). Returns ``(record, was_cached)`` (True only when
    nothing was run)."""
    if not cache_dir:
        return fn(length), False
    d = Path(cache_dir)
    d.mkdir(parents=True, exist_ok=True)
    # the wire format is in the key: a stored record's byte counts belong to the format that made them
    key = hashlib.sha256(json.dumps({"data": split.fingerprint, "method": method, "wire": WIRE_VERSION, **params},
                                    sort_keys=True, default=str).encode()).hexdigest()[:16]
    safe = method.replace("+", "plus").replace("/", "_").replace(" ", "_")
    path = d / f"{safe}-{key}.json"
    state_path = d / f"{safe}-{key}.npz"
    start = None
    if path.exists():
        rec = RunRecord.from_json(json.loads(path.read_text()))
        have = int(rec.params.get(length_key, 0))
        if have >= length:
            keep = [c for c in rec.curve if c["epoch"] <= length]
            params = dict(rec.params)
            params[length_key] = length
            return RunRecord(rec.method, params, keep, rec.wall_s, rec.info), True
        if resumable and state_path.exists() and len(rec.curve) == have:
            with np.load(state_path) as z:
                if int(z["epoch"]) == have:
                    start = (rec, {"theta": z["theta"], "P": z["P"]})

    def save(rec: RunRecord, state: dict | None = None) -> None:
        if state is not None:  # the model first, then the record that points at it
            tmp = state_path.with_suffix(".part.npz")
            np.savez(tmp, theta=state["theta"], P=state["P"], epoch=np.int64(len(rec.curve)))
            tmp.replace(state_path)
        tmp = path.with_suffix(".part")
        tmp.write_text(json.dumps(rec.to_json(), default=_json_default))
        tmp.replace(path)

    rec = fn(length, start=start, checkpoint=save) if resumable else fn(length)
    save(rec)
    return rec, False


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def mean_cce(rec: RunRecord, upto: int | None = None) -> float:
    """The ledger's mean vectors per epoch over the first ``upto`` epochs (all by default)."""
    c = rec.curve[: upto or len(rec.curve)]
    return float(np.mean([e["cce_ledger"] for e in c]))


def ledger_tcc(rec: RunRecord, epochs: int) -> float:
    """TCC from the ledger: the vectors actually exchanged in the first ``epochs`` epochs."""
    return float(sum(e["cce_ledger"] for e in rec.curve[:epochs]))


# --------------------------------------------------------------------------------------------
# what the three FPL scenarios share


def scenario_params() -> dict:
    """Parameters common to ``fpl_table2``, ``fpl_pi`` and ``fpl_tcc``."""
    from ..experiment import Param

    return {
        "presets": Param(list(PRESET_NAMES), "FPL presets to run", kind="strs", choices=PRESET_NAMES),
        "epochs": Param([8, 2, 8, 2], "epochs per preset, in the order sFPL, sFPL+, pFPL, pFPL+ (one value: "
                        "all); the paper explores 10-50", kind="ints"),
        "d": Param(10, "latent dimension (FPL, FCF; BPR-MF's default)"),
        "lr": Param(0.05, "learning rate alpha (FPL; BPR-MF's default)"),
        "protocol": Param("validation", "validation: fit on train minus the validation cut, choose pi and the "
                          "epoch by validation P@10, report test; test: fit on the 80 %, choose on test",
                          choices=("validation", "test")),
        "min_interactions": Param(21, "keep users with at least this many interactions (21 = 'more than 20')"),
        "max_users": Param(-1, "keep a seeded random subset of this many users first (0: all; -1: 100 on "
                           "synthetic data, all on real data)"),
        "rounding": Param("round", "integer T and rpe: round (nearest) or floor (the authors' int())",
                          choices=("round", "floor")),
        "cache": Param("", "folder caching each run's curve, shared by the FPL scenarios ('' = none)"),
    }


def _is_synthetic(spec: str) -> bool:
    from ..data import SYNTHETIC_PRESETS

    s = str(spec).strip()
    return s.startswith("synthetic:") or s in SYNTHETIC_PRESETS


def scenario_split(ctx) -> ImplicitSplit:
    """Load ``--data`` and prepare it as the scenario's parameters say; notes what was done."""
    ratings = ctx.load_data()
    max_users = int(ctx["max_users"])
    if max_users < 0:
        max_users = 100 if _is_synthetic(ctx.data) else 0
    sp = prepare(ratings, min_interactions=ctx["min_interactions"], protocol=ctx["protocol"],
                 max_users=max_users, seed=ctx.seed)
    i = sp.info
    ctx.note(f"Data `{ctx.data}`: {i['users']} users (>= {i['min_interactions']} interactions"
             + (f", a random {max_users} first" if max_users else "") + f"), {i['items']} items, training "
             f"catalogue {i['catalogue']}; fitted on X+ = {i['x_plus']} interactions "
             f"(protocol `{sp.protocol}`: validation {i['validation']}, test {i['test']}, of which "
             f"{i['test_unreachable']} on items outside the catalogue).")
    return sp


def preset_epochs(ctx) -> dict[str, int]:
    ep = list(ctx["epochs"])
    if len(ep) == 1:
        ep = ep * len(PRESET_NAMES)
    if len(ep) != len(PRESET_NAMES):
        from ..experiment import UsageError

        raise UsageError(f"epochs: give one value or {len(PRESET_NAMES)} (sFPL, sFPL+, pFPL, pFPL+)")
    return dict(zip(PRESET_NAMES, ep))


def fpl_grid(ctx, split: ImplicitSplit, presets: list[str], pis: list[float], *, d: int, lr: float,
             epochs: dict[str, int]) -> dict[tuple[str, float], RunRecord]:
    """Run (or read from the cache) every (preset, pi), reporting progress on ``ctx``."""
    out = {}
    todo = [(p, float(pi)) for p in presets for pi in pis]
    for k, (preset, pi) in enumerate(todo):
        n_ep = int(epochs[preset])
        stage = f"{preset} pi={pi:g} ({k + 1}/{len(todo)})"
        ctx.progress.update(0, n_ep, stage=stage)
        params = {"preset": preset, "pi": pi, "d": d, "lr": lr, "seed": ctx.seed, "profile": ctx.profile,
                  "rounding": ctx["rounding"]}

        def fn(n, preset=preset, pi=pi, start=None, checkpoint=None):
            return run_fpl(split, preset, pi, n, d=d, lr=lr, seed=ctx.seed, profile=ctx.profile,
                           rounding=ctx["rounding"], on_epoch=lambda e, _: ctx.progress.update(e, n),
                           record_network=ctx.record_network, start=start, checkpoint=checkpoint)

        rec, cached = run_cached(ctx["cache"], split, preset, params, fn, n_ep, resumable=True)
        rec.info["cached"] = cached
        out[(preset, pi)] = rec
    return out


def bd_columns(split: ImplicitSplit) -> list[str]:
    names = split.category_names or ()
    return [f"BD {n}" for n in names]


def source_bias(split: ImplicitSplit) -> dict[str, float]:
    """B_T per category (the paper's Table 5) of the fitted part."""
    ev = next(iter(split.evaluators.values()))
    if ev.categories is None:
        return {}
    bd = bias_disparity(ev.train_items, np.full((1, ev.n), -1), ev.categories, ev.n)
    return {n: float(v) for n, v in zip(split.category_names or (), bd.source)}
