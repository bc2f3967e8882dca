"""What the three FPL scenarios (``fpl_table2``, ``fpl_pi``, ``fpl_tcc``) share: the paper's
Brazil figures printed beside ours, their common parameters, the data preparation they note in
the report, epochs per preset, the (preset, pi) grid of cached FPL runs, and the bias columns."""

from __future__ import annotations

import numpy as np

from ...data import SYNTHETIC_PRESETS
from ...experiment import Param, RunContext, UsageError
from ...kernel import NetSpec
from ...protocols.fpl import FPLConfig
from ...math.fpl_presets import PRESET_NAMES
from ...math.metrics import bias_disparity
from .cache import run_cached
from .data import ImplicitSplit, prepare
from .runs import RunRecord, run_fpl

__all__ = [
    "PAPER_BEST_PI_BRAZIL", "PAPER_TABLE2_BRAZIL", "PAPER_TABLE3_BRAZIL", "PAPER_TABLE4_BRAZIL", "bd_columns",
    "fpl_grid", "preset_epochs", "scenario_params", "scenario_split", "source_bias",
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


def scenario_params() -> dict:
    """Parameters common to ``fpl_table2``, ``fpl_pi`` and ``fpl_tcc``."""
    return {
        "presets": Param(list(PRESET_NAMES), "FPL presets to run", kind="strs", choices=PRESET_NAMES),
        "epochs": Param([8, 2, 8, 2], "epochs per preset, in the order sFPL, sFPL+, pFPL, pFPL+ (one value: "
                        "all); the paper explores 10-50", kind="ints"),
        "d": Param.of(FPLConfig, "d", help="latent dimension (FPL, FCF; BPR-MF's default)"),
        "lr": Param.of(FPLConfig, "lr", help="learning rate alpha (FPL; BPR-MF's default)"),
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
    s = str(spec).strip()
    return s.startswith("synthetic:") or s in SYNTHETIC_PRESETS


def scenario_split(ctx: RunContext) -> ImplicitSplit:
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


def preset_epochs(ctx: RunContext) -> dict[str, int]:
    """``ctx["epochs"]`` as ``{preset: epochs}`` over every preset name (one value: for all);
    raises ``UsageError`` for any other count of values."""
    ep = list(ctx["epochs"])
    if len(ep) == 1:
        ep = ep * len(PRESET_NAMES)
    if len(ep) != len(PRESET_NAMES):
        raise UsageError(f"epochs: give one value or {len(PRESET_NAMES)} (sFPL, sFPL+, pFPL, pFPL+)")
    return dict(zip(PRESET_NAMES, ep))


def fpl_grid(ctx: RunContext, split: ImplicitSplit, presets: list[str], pis: list[float], *, d: int, lr: float,
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
        if ctx.net != NetSpec(profile=ctx.profile):  # link model, faults: part of the key (absent by default)
            params["network"] = ctx.net.to_dict()

        def fn(n, preset=preset, pi=pi, start=None, checkpoint=None):
            return run_fpl(split, preset, pi, n, d=d, lr=lr, seed=ctx.seed, profile=ctx.net,
                           rounding=ctx["rounding"], on_epoch=lambda e, _: ctx.progress.update(e, n),
                           record_network=ctx.record_network, start=start, checkpoint=checkpoint)

        rec, cached = run_cached(ctx["cache"], split, preset, params, fn, n_ep, resumable=True)
        rec.info["cached"] = cached
        out[(preset, pi)] = rec
    return out


def bd_columns(split: ImplicitSplit) -> list[str]:
    """Table column names of the bias disparity per category (``BD <category>``)."""
    names = split.category_names or ()
    return [f"BD {n}" for n in names]


def source_bias(split: ImplicitSplit) -> dict[str, float]:
    """B_T per category (the paper's Table 5) of the fitted part."""
    ev = next(iter(split.evaluators.values()))
    if ev.categories is None:
        return {}
    bd = bias_disparity(ev.train_items, np.full((1, ev.n), -1), ev.categories, ev.n)
    return {n: float(v) for n, v in zip(split.category_names or (), bd.source)}
