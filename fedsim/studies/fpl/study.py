"""The whole FPL study on one split: every method of the paper's Tables 2-6 over several seeds,
with the paper's hyperparameter searches on the validation cut, run as independent jobs on a
process pool and shared through the run cache.

Stages (each job seeded by its own seed, so the results do not depend on the number of workers):

1. per seed: the BPR-MF grid (``bpr_lrs`` x ``bpr_ds``), Random; once: Top-Pop, User-kNN and
   Item-kNN over ``knn_ks``; with the ``baselines`` extra, per seed and topology: the VAE;
2. per seed, with the (d, lr) chosen for BPR-MF on that seed's validation figures (the paper's
   "same learning rate and number of latent factors"): FPL for every preset and pi, FCF, and
   cornac's BPR as an independent check of fedsim's BPR-MF.

Each method's configuration (epoch among :func:`~fedsim.studies.fpl.runs.candidate_epochs`, pi,
d and lr, k, topology and budget) is chosen per seed by validation P@10 (ties: the first in grid
order; figures equal to 12 decimals are ties), and its test figures, with the per-user hit masks,
are what the tables report.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from typing import Callable

from ...experiment import json_default
from ...kernel import NetSpec, network_record
from ...math import fpl_kernels
from ...math.fpl_presets import PRESET_NAMES
from ..parallel import pmap
from . import baselines as lib
from .cache import run_cached
from .data import ImplicitSplit
from .runs import (
    RunRecord, best_epoch, candidate_epochs, run_bpr, run_fcf, run_fpl, run_random, run_toppop,
)
from .settings import Settings

__all__ = [
    "METHOD_ORDER", "Choice", "Study", "StudyOptions", "TwinMismatchError", "check_twin", "choices_summary",
    "choose_epoch", "describe_choice", "resolve_engine", "run_length", "run_study",
]

BASELINE_ORDER = ("Random", "Top-Pop", "User-kNN", "Item-kNN", "VAE", "BPR-MF", "BPR-MF (cornac)", "FCF")
METHOD_ORDER = BASELINE_ORDER + tuple(PRESET_NAMES)


@dataclass
class StudyOptions:
    """How the study runs (not what it chooses from: that is :class:`Settings`)."""

    seeds: list[int]
    cache: str = ""
    workers: int = 1
    net: NetSpec = field(default_factory=NetSpec)
    rounding: str = "round"
    ledger_dir: str | None = None
    methods: tuple[str, ...] = METHOD_ORDER  # what to run (FPL presets by name)
    # "twin": FPL's search (every pi and epoch) on the message-free replay, bit-identical to the
    # actors, and each chosen configuration re-run as actors (ledger, and the check that the two
    # agree); "actors": every FPL run as actors with its ledger (fpl_tcc needs every pi's ledger);
    # "auto": the twin when its kernels are compiled (numba), else the actors (the twin's pure-
    # Python kernels are slower than the actors' NumPy code)
    fpl_engine: str = "auto"


@dataclass
class Choice:
    """A method's chosen configuration on one seed: the curve entry (test figures, hit masks)
    and what was chosen (``epoch``, ``pi``, ``d``, ``lr``, ``k``, ``topology``)."""

    method: str
    seed: int
    entry: dict
    what: dict


@dataclass
class Study:
    """Every run of the study and each method's choice per seed."""

    split: ImplicitSplit
    settings: Settings
    options: StudyOptions
    runs: dict[tuple, RunRecord] = field(default_factory=dict)  # (method, config..., seed) -> record
    chosen: dict[str, dict[int, Choice]] = field(default_factory=dict)  # method -> seed -> choice
    bpr_choice: dict[int, tuple[int, float]] = field(default_factory=dict)  # seed -> (d, lr)
    # (preset, seed) -> the chosen configuration re-run as actors (twin engine only)
    confirmed: dict[tuple[str, int], RunRecord] = field(default_factory=dict)
    fpl_engine: str = ""  # what ran FPL's search: "twin" or "actors"
    skipped: dict[str, str] = field(default_factory=dict)  # method -> why it did not run
    wall_s: float = 0.0
    jobs_run: int = 0
    jobs_cached: int = 0

    @property
    def seeds(self) -> list[int]:
        return list(self.options.seeds)

    def fpl_runs(self) -> dict[tuple[str, float, int], RunRecord]:
        """(preset, pi, seed) -> record."""
        return {(k[1], k[2], k[3]): v for k, v in self.runs.items() if k[0] == "fpl"}

    def fpl_choice(self, preset: str, pi: float, seed: int) -> dict:
        """The entry of run (preset, pi, seed) at its epoch chosen on validation."""
        rec = self.runs[("fpl", preset, float(pi), seed)]
        return choose_epoch(rec, self.settings.epoch_step)

    def methods(self) -> list[str]:
        return [m for m in METHOD_ORDER if m in self.chosen]


def run_length(rec: RunRecord) -> int:
    """Epochs (rounds) a run trained: its parameters say (its curve may hold only some of them)."""
    return int(rec.params.get("epochs", rec.params.get("rounds", rec.curve[-1]["epoch"])))


def choose_epoch(rec: RunRecord, step: int) -> dict:
    """The entry of ``rec`` chosen on validation among the candidate epochs (multiples of
    ``step``); a run that diverged before its first candidate gives its last (NaN) entry, which
    ranks below every finite one."""
    cands = candidate_epochs(run_length(rec), step)
    if not any(c["epoch"] in cands for c in rec.curve):
        return rec.curve[-1]
    return best_epoch(rec, epochs=cands)


def _score(entry: dict) -> float:
    """What choices are made on: validation P@10 (test P@10 under the test protocol); NaN (a
    diverged model) ranks below everything."""
    v = float(entry.get("val_p", entry["test_p"]))
    return -math.inf if math.isnan(v) else round(v, 12)  # equal up to float rounding: a tie


def _task_label(task: dict) -> str:
    p = task["params"]
    bits = [task["kind"]] + [f"{k}={p[k]}" for k in ("preset", "pi", "d", "lr", "topology") if k in p]
    return " ".join(bits) + f" s{p.get('seed', '')}"


def _run_task(task: dict) -> dict:
    """One job (module level: it runs in worker processes): the run, from the cache when there,
    and the records of the networks it built."""
    kind, split, p = task["kind"], task["split"], task["params"]
    nets: list[dict] = []
    ledger_dir = task.get("ledger_dir")
    label = _task_label(task)

    def rec_net(net):
        nets.append(network_record(net, ledger_dir, f"{label} n{len(nets) + 1}"))

    cache = task.get("cache") or ""
    seed = p.get("seed", 0)
    ev = int(p.get("eval_every", 1))
    extra = {"eval_every": ev} if ev > 1 else {}  # every-epoch runs keep their old keys
    if kind == "bpr":
        rec, cached = run_cached(cache, split, "BPR-MF", {"d": p["d"], "lr": p["lr"], "seed": seed, **extra},
                                 lambda n: run_bpr(split, n, d=p["d"], lr=p["lr"], seed=seed, eval_every=ev),
                                 task["length"])
    elif kind == "fpl":
        net = task["net"]
        engine = p.get("engine", "actors")
        key = {"preset": p["preset"], "pi": p["pi"], "d": p["d"], "lr": p["lr"], "seed": seed,
               "profile": net.profile, "rounding": p["rounding"]}
        if net != NetSpec(profile=net.profile):
            key["network"] = net.to_dict()
        if engine == "twin":  # evaluated at the candidate epochs only: its own cache entries
            key.update(engine="twin", eval_every=ev)
            rec, cached = run_cached(cache, split, p["preset"], key,
                                     lambda n: run_fpl(split, p["preset"], p["pi"], n, d=p["d"], lr=p["lr"],
                                                       seed=seed, profile=net, rounding=p["rounding"], engine="twin",
                                                       eval_every=ev), task["length"])
        elif ev > 1:  # a confirmation: evaluated once, at its last epoch
            key.update(eval_at=task["length"])
            rec, cached = run_cached(cache, split, p["preset"], key,
                                     lambda n: run_fpl(split, p["preset"], p["pi"], n, d=p["d"], lr=p["lr"],
                                                       seed=seed, profile=net, rounding=p["rounding"],
                                                       record_network=rec_net, eval_every=ev), task["length"])
        else:
            def fn(n, start=None, checkpoint=None):
                return run_fpl(split, p["preset"], p["pi"], n, d=p["d"], lr=p["lr"], seed=seed, profile=net,
                               rounding=p["rounding"], record_network=rec_net, start=start, checkpoint=checkpoint)

            rec, cached = run_cached(cache, split, p["preset"], key, fn, task["length"], resumable=True)
    elif kind == "fcf":
        net = task["net"]
        key = {"d": p["d"], "alpha": 1.0, "lam": 0.1, "lr": p["lr"], "seed": seed, "profile": net.profile}
        if net != NetSpec(profile=net.profile):
            key["network"] = net.to_dict()
        rec, cached = run_cached(cache, split, "FCF", key,
                                 lambda n: run_fcf(split, n, d=p["d"], lr=p["lr"], seed=seed, profile=net,
                                                   record_network=rec_net), task["length"], length_key="rounds")
    elif kind == "knn":
        rec, cached = run_cached(cache, split, p["method"], {"ks": p["ks"], "similarity": "cosine (fedsim.math.knn)"},
                                 lambda n: lib.run_knn(split, p["method"], p["ks"]), len(p["ks"]),
                                 length_key="n_configs")
    elif kind == "vae":
        rec, cached = run_cached(cache, split, "VAE", {"topology": p["topology"], "budgets": p["budgets"],
                                                       "seed": seed},
                                 lambda n: lib.run_vae(split, p["topology"], p["budgets"], seed=seed),
                                 max(p["budgets"]))
    elif kind == "cornac_bpr":
        rec, cached = run_cached(cache, split, "BPR-MF (cornac)", {"d": p["d"], "lr": p["lr"], "seed": seed, **extra},
                                 lambda n: lib.run_cornac_bpr(split, n, d=p["d"], lr=p["lr"], seed=seed, eval_every=ev),
                                 task["length"])
    else:  # pragma: no cover - tasks are built below
        raise ValueError(f"unknown task kind {kind!r}")
    return {"record": rec.to_json(), "cached": cached, "networks": nets}


def _cost(task: dict) -> float:
    """Rough relative duration (so long jobs start first)."""
    sp, p = task["split"], task["params"]
    if task["kind"] == "fpl":
        plus = 1.0 + (sp.x_plus / sp.n_users if p["preset"].endswith("+") else 0.0) * 0.05
        per = sp.x_plus if p["preset"].startswith("s") else sp.n_users * max(1, sp.x_plus // sp.n_users)
        twin = 0.05 if p.get("engine") == "twin" else 1.0  # measured: 15-35x faster than the actors
        return task["length"] * per * plus * (1 + p["d"] / 20) * 1e-4 * twin
    if task["kind"] == "vae":
        return max(p["budgets"]) * sp.catalogue.size * 1e-4
    if task["kind"] == "fcf":
        return task["length"] * sp.n_users * 1e-3
    return task["length"] * sp.x_plus * 1e-5 / p.get("eval_every", 1) ** 0.5


def run_study(split: ImplicitSplit, settings: Settings, options: StudyOptions,
              progress: Callable[[int, int, str], None] | None = None,
              record: Callable[[dict], None] | None = None) -> Study:
    """Run (or read from ``options.cache``) every job of the study; see the module docstring.

    ``progress(done, total, stage)`` is called as jobs finish; ``record(network_record)`` for
    every network a job built (none for cached runs). Methods of ``options.methods`` that need
    the ``baselines`` extra are skipped (``Study.skipped`` says why) when it is missing. Blocks
    until every job is done; exceptions of a job propagate."""
    t0 = time.perf_counter()
    st = Study(split, settings, options)
    want = set(options.methods)
    seeds = list(options.seeds)
    step = settings.epoch_step
    pis = tuple(float(p) for p in settings.pis)
    base = {"split": split, "cache": options.cache, "ledger_dir": options.ledger_dir, "net": options.net}

    if ({"VAE", "BPR-MF (cornac)"} & want) and not lib.cornac_available():
        for m in ("VAE", "BPR-MF (cornac)"):
            if m in want:
                st.skipped[m] = f"cornac is not installed ({lib.EXTRA_HINT})"
        want -= set(st.skipped)
    if "VAE" in want and not lib.torch_available():
        st.skipped["VAE"] = f"PyTorch is not installed ({lib.EXTRA_HINT})"
        want.discard("VAE")

    fpl_presets = [p for p in PRESET_NAMES if p in want]
    need_bpr_choice = bool(fpl_presets or {"FCF", "BPR-MF (cornac)"} & want)
    grid = [(d, lr) for lr in settings.bpr_lrs for d in settings.bpr_ds]
    run_bpr_grid = "BPR-MF" in want or (need_bpr_choice and len(grid) > 1)

    def go(tasks: list[dict], stage: str) -> list[RunRecord]:
        done = [0]

        def on_done(i, res):
            done[0] += 1
            if progress is not None:
                progress(done[0], len(tasks), stage)

        results = pmap(_run_task, tasks, options.workers, on_done=on_done, cost=_cost)
        out = []
        for res in results:
            if res["cached"]:
                st.jobs_cached += 1
            else:
                st.jobs_run += 1
            if record is not None:
                for n in res["networks"]:
                    record(n)
            out.append(RunRecord.from_json(res["record"]))
        return out

    # stage 1
    tasks, keys = [], []
    if run_bpr_grid:
        for s in seeds:
            for d, lr in grid:
                tasks.append({**base, "kind": "bpr", "params": {"d": d, "lr": lr, "seed": s, "eval_every": step},
                              "length": settings.bpr_epochs})
                keys.append(("bpr", d, lr, s))
    for m in ("User-kNN", "Item-kNN"):
        if m in want:
            tasks.append({**base, "kind": "knn", "params": {"method": m, "ks": list(settings.knn_ks)}, "length": 1})
            keys.append(("knn", m))
    if "VAE" in want:
        for s in seeds:
            for topo in settings.vae_topologies:
                tasks.append({**base, "kind": "vae", "params": {"topology": topo, "budgets": list(settings.vae_epochs),
                                                                 "seed": s}, "length": max(settings.vae_epochs)})
                keys.append(("vae", topo, s))
    for k, rec in zip(keys, go(tasks, "baselines")):
        st.runs[k] = rec

    if "Random" in want:
        for s in seeds:
            rec = run_random(split, s)
            st.runs[("random", s)] = rec
            st.chosen.setdefault("Random", {})[s] = Choice("Random", s, rec.curve[0], {})
    if "Top-Pop" in want:
        rec = run_toppop(split)
        st.runs[("toppop",)] = rec
        st.chosen["Top-Pop"] = {s: Choice("Top-Pop", s, rec.curve[0], {}) for s in seeds}
    for m in ("User-kNN", "Item-kNN"):
        if ("knn", m) in st.runs:
            e = best_epoch(st.runs[("knn", m)])
            st.chosen[m] = {s: Choice(m, s, e, {"k": e["k"]}) for s in seeds}
    if "VAE" in want:
        for s in seeds:
            best = None
            for topo in settings.vae_topologies:
                e = best_epoch(st.runs[("vae", topo, s)])
                if best is None or _score(e) > _score(best[0]):
                    best = (e, topo)
            st.chosen.setdefault("VAE", {})[s] = Choice("VAE", s, best[0], {"topology": best[1],
                                                                            "epoch": best[0]["epoch"]})
    for s in seeds:
        if run_bpr_grid:
            best = None
            for d, lr in grid:
                rec = st.runs[("bpr", d, lr, s)]
                e = choose_epoch(rec, step)
                if best is None or _score(e) > _score(best[0]):
                    best = (e, d, lr)
            st.bpr_choice[s] = (best[1], best[2])
            if "BPR-MF" in want:
                st.chosen.setdefault("BPR-MF", {})[s] = Choice("BPR-MF", s, best[0], {"d": best[1], "lr": best[2],
                                                                                     "epoch": best[0]["epoch"]})
        else:
            st.bpr_choice[s] = grid[0]

    # stage 2
    engine = resolve_engine(options.fpl_engine)
    twin = engine == "twin"
    st.fpl_engine = engine
    fpl_extra = {"engine": "twin", "eval_every": step} if twin else {}
    tasks, keys = [], []
    ep = settings.preset_epochs()
    for s in seeds:
        d, lr = st.bpr_choice[s]
        for preset in fpl_presets:
            for pi in pis:
                tasks.append({**base, "kind": "fpl", "params": {"preset": preset, "pi": pi, "d": d, "lr": lr,
                                                                 "seed": s, "rounding": options.rounding,
                                                                 **fpl_extra},
                              "length": ep[preset]})
                keys.append(("fpl", preset, pi, s))
        if "FCF" in want:
            flr = settings.fcf_lr or lr
            tasks.append({**base, "kind": "fcf", "params": {"d": d, "lr": flr, "seed": s},
                          "length": settings.fcf_rounds})
            keys.append(("fcf", s))
        if "BPR-MF (cornac)" in want:
            tasks.append({**base, "kind": "cornac_bpr", "params": {"d": d, "lr": lr, "seed": s, "eval_every": step},
                          "length": settings.bpr_epochs})
            keys.append(("cornac_bpr", s))
    for k, rec in zip(keys, go(tasks, "FPL, FCF")):
        st.runs[k] = rec

    for s in seeds:
        d, lr = st.bpr_choice[s]
        if ("fcf", s) in st.runs:
            rec = st.runs[("fcf", s)]
            e = choose_epoch(rec, step)
            st.chosen.setdefault("FCF", {})[s] = Choice("FCF", s, e, {"d": d, "lr": settings.fcf_lr or lr,
                                                                     "epoch": e["epoch"]})
        if ("cornac_bpr", s) in st.runs:
            rec = st.runs[("cornac_bpr", s)]
            e = choose_epoch(rec, step)
            st.chosen.setdefault("BPR-MF (cornac)", {})[s] = Choice("BPR-MF (cornac)", s, e,
                                                                    {"d": d, "lr": lr, "epoch": e["epoch"]})
        for preset in fpl_presets:
            best = None
            for pi in pis:
                e = st.fpl_choice(preset, pi, s)
                if best is None or _score(e) > _score(best[0]):
                    best = (e, pi)
            st.chosen.setdefault(preset, {})[s] = Choice(preset, s, best[0], {"pi": best[1], "d": d, "lr": lr,
                                                                             "epoch": best[0]["epoch"]})

    # stage 3 (twin engine): every chosen FPL configuration as actors, with its ledger
    if twin and fpl_presets:
        tasks, keys = [], []
        for s in seeds:
            for preset in fpl_presets:
                c = st.chosen[preset][s]
                n = int(c.entry["epoch"])
                tasks.append({**base, "kind": "fpl", "params": {"preset": preset, "pi": c.what["pi"], "d": c.what["d"],
                                                                 "lr": c.what["lr"], "seed": s,
                                                                 "rounding": options.rounding, "eval_every": n},
                              "length": n})
                keys.append((preset, s))
        for k, rec in zip(keys, go(tasks, "FPL as actors")):
            check_twin(st.chosen[k[0]][k[1]].entry, rec, k)
            st.confirmed[k] = rec
    st.wall_s = time.perf_counter() - t0
    return st


def resolve_engine(engine: str) -> str:
    """``"twin"`` or ``"actors"`` for an ``fpl_engine`` option (``"auto"``: the twin when numba
    compiles its kernels). Raises ``ValueError`` for another value."""
    if engine == "auto":
        return "twin" if fpl_kernels.compiled() is not None else "actors"
    if engine not in ("twin", "actors"):
        raise ValueError(f"fpl_engine must be 'auto', 'twin' or 'actors', got {engine!r}")
    return engine


class TwinMismatchError(RuntimeError):
    """An FPL configuration re-run as actors did not reproduce the twin's figures."""


def check_twin(entry: dict, actors: RunRecord, what: tuple) -> None:
    """Raise :class:`TwinMismatchError` unless the actors' last curve entry has every figure of
    the twin's ``entry`` (evaluation figures, per-user hit masks, the clients' counts) equal to
    the last bit (timings excepted)."""
    last = actors.curve[-1]
    if int(last["epoch"]) != int(entry["epoch"]):
        raise TwinMismatchError(f"{what}: actors ran to epoch {last['epoch']}, the twin's choice is epoch "
                                f"{entry['epoch']}")
    bad = [k for k, v in entry.items() if k not in ("wall_s", "train_s") and
           json.dumps(last.get(k), default=json_default) != json.dumps(v, default=json_default)]
    if bad:
        raise TwinMismatchError(f"{what}: the actors' run differs from the twin's in {', '.join(sorted(bad))} at epoch "
                                f"{entry['epoch']}")


def describe_choice(c: Choice) -> str:
    """'pi 0.4, epoch 30, d 10, lr 0.05' for a report."""
    parts = []
    for k in ("topology", "k", "pi", "d", "lr", "epoch"):
        if k in c.what:
            v = c.what[k]
            parts.append(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}")
    return ", ".join(parts)


def choices_summary(st: Study, method: str) -> str:
    """The chosen configurations of ``method`` over the seeds, identical ones merged."""
    seen: dict[str, list[int]] = {}
    for s, c in sorted(st.chosen.get(method, {}).items()):
        seen.setdefault(describe_choice(c), []).append(s)
    if len(seen) == 1:
        return next(iter(seen)) or "-"
    return "; ".join(f"{k or '-'} (seed {','.join(map(str, v))})" for k, v in seen.items())
