"""FPL Figure 3: item coverage (IC@10) against precision (P@10) for the four presets as pi grows, over several seeds.

The same runs as fpl_pi (``--set cache=DIR`` shares them): for every preset, pi and seed, FPL
runs as actors with the d and lr chosen for BPR-MF, and the test P@10 and IC@10 at the epoch
chosen on validation P@10 are plotted, one line per preset in the order of increasing pi (the
arrows; the open marker is the largest pi), mean over seeds with the sd as error bars.

The paper's text gives no numbers for its Figure 3, only each preset's point at its best pi
(Tables 2 and 3): those points (``paper_country``, Italy by default) are printed and drawn beside
ours; they come from other data (a country, not a city). The paper reads its figure as: with
more local computation (sFPL+, pFPL+) the curves move right (much higher IC) and up, and pi
moves IC more for the "+" presets than for the plain ones; the report checks both on this data
(IC@10 range over pi per preset; the "+" presets' IC against the plain ones'), each difference
weighed against the presets' IC@10 sd over seeds.
"""

from __future__ import annotations

import math

from fedsim.experiment import RunContext, plural, scenario_main
from fedsim.studies.fpl import default_meaning as fpl_default_meaning
from fedsim.studies.fpl import (
    FPL_SETTINGS, PAPER_BEST_PI, PAPER_TABLE2, PAPER_TABLE3, PRESET_STYLES, fig2_rows, fpl_scenario_params,
    scenario_study,
)

RUN_TIME = "under a minute on the default synthetic data (15 s measured quiet on 2026-11-26, docs/performance.md); with --set cache=DIR shared with fpl_pi, only the runs fpl_pi has not made (docs/fpl.md)"
DEFAULT_DATA = "ml100k-like"
# the paper's setting is `settings=paper`, not the default (quick); the paper_* note compares with it
PAPER_VALUES = {"settings": "paper"}
# what the settings overrides left empty stand for ("seeds=2 (default: the paper's 5)", not "(default 0)")
default_meaning = fpl_default_meaning
PARAMS = fpl_scenario_params()


def gap_spread(gap: float, sds: tuple[float, ...], seeds: int) -> str:
    """How the gap between two presets' mean IC@10 (or between their IC@10 ranges over pi)
    compares with their IC@10 sds over seeds (``sds``: the largest of each): larger than every one
    of them, or not a clear ordering (also when an sd is NaN: no spread known to judge it by)."""
    if seeds < 2:
        return "one seed: no spread to judge the gap by"
    if not any(math.isnan(x) for x in sds) and abs(gap) > max(sds):
        return f"the gap, {abs(gap):.1f}, exceeds the largest IC@10 sd over seeds of either"
    return f"the gap, {abs(gap):.1f}, is within an IC@10 sd over seeds: not a clear ordering"


def run(ctx: RunContext) -> None:
    st = scenario_study(ctx, tuple(ctx["presets"]), used=FPL_SETTINGS)
    country = ctx["paper_country"]
    rows = fig2_rows(st)
    table = [{"preset": r["preset"], "pi": r["pi"], "P@10": r["p"], "P@10 sd": r["p_sd"], "IC@10": r["ic"],
              "IC@10 sd": r["ic_sd"], "G@10": r["gini"]} for r in rows]
    ctx.table("ic_vs_p", table, title=f"Figure 3: test IC@10 against P@10 as pi grows, mean and sd over "
              f"{plural(len(st.seeds), 'seed')} (catalogue {st.split.catalogue.size} items)", floatfmt=".5g")
    paper = []
    for preset in ctx["presets"]:
        paper.append({"preset": preset, "paper best pi": PAPER_BEST_PI[country][preset],
                      "paper P@10": PAPER_TABLE2[country][preset][0], "paper IC@10": PAPER_TABLE3[country][preset][0]})
    ctx.table("paper_points", paper, title=f"The paper's only numbers for Figure 3: each preset at its best pi "
              f"({country}, Tables 2 and 3)", floatfmt=".5g")

    span, sd = {}, {}
    for preset in ctx["presets"]:
        mine = [r for r in rows if r["preset"] == preset]
        if mine:
            span[preset] = (min(r["ic"] for r in mine), max(r["ic"] for r in mine), sum(r["ic"] for r in mine) / len(mine))
            sds = [r["ic_sd"] for r in mine if not math.isnan(r["ic_sd"])]
            sd[preset] = max(sds) if sds else math.nan
    n_pis = len({r["pi"] for r in rows})
    lines = [f"{p}: IC@10 from {a:.1f} to {b:.1f} over pi (mean {m:.1f})" for p, (a, b, m) in span.items()]
    for plus, plain in (("sFPL+", "sFPL"), ("pFPL+", "pFPL")):
        if plus in span and plain in span:
            gap = span[plus][2] - span[plain][2]
            where = "level with" if gap == 0 else "right of" if gap > 0 else "NOT right of"
            spread = gap_spread(gap, (sd[plus], sd[plain]), len(st.seeds))
            line = (f"{plus} lies {where} {plain} (mean IC@10 {span[plus][2]:.1f} vs {span[plain][2]:.1f}; "
                    f"{spread})")
            if n_pis < 2:
                line += "; one pi ran: nothing to say about how far pi moves IC@10"
            else:
                r_plus, r_plain = span[plus][1] - span[plus][0], span[plain][1] - span[plain][0]
                # the ranges' comparison was stated from the means alone (0.5 vs 0.0 with sds of 0.7)
                how = "more" if r_plus > r_plain else "as much" if r_plus == r_plain else "NOT more"
                line += (f"; pi moves its IC@10 {how} ({r_plus:.1f} vs {r_plain:.1f}"
                         + ("" if r_plus == r_plain else
                            "; " + gap_spread(r_plus - r_plain, (sd[plus], sd[plain]), len(st.seeds))) + ")")
            lines.append(line)
    if lines:
        ctx.note("Figure 3 on this data (seed means; a difference smaller than the sd columns is noise):\n\n"
                 + "\n".join(f"- {x}" for x in lines))

    def draw(ax):
        for preset in ctx["presets"]:
            mine = sorted((r for r in rows if r["preset"] == preset), key=lambda r: r["pi"])
            if not mine:
                continue
            c, m = PRESET_STYLES.get(preset, ("gray", "x"))
            xs, ys = [r["p"] for r in mine], [r["ic"] for r in mine]
            ax.errorbar(xs, ys, xerr=[0 if math.isnan(r["p_sd"]) else r["p_sd"] for r in mine],
                        yerr=[0 if math.isnan(r["ic_sd"]) else r["ic_sd"] for r in mine], color=c, marker=m,
                        label=preset, capsize=2, linestyle="none", alpha=0.8)
            for k in range(len(mine) - 1):
                ax.annotate("", xy=(xs[k + 1], ys[k + 1]), xytext=(xs[k], ys[k]),
                            arrowprops={"arrowstyle": "->", "color": c, "lw": 1})
            ax.scatter([xs[-1]], [ys[-1]], facecolor="white", edgecolor=c, marker=m, s=60, zorder=3)
        for r in paper:
            c, m = PRESET_STYLES.get(r["preset"], ("gray", "x"))
            ax.scatter([r["paper P@10"]], [r["paper IC@10"]], color=c, marker="*", s=120, edgecolor="black",
                       zorder=4)
        ax.set_xlabel("P@10")
        ax.set_ylabel("IC@10")
        ax.set_yscale("log")
        ax.set_title(f"IC@10 against P@10 as pi grows (Figure 3), {st.split.name}; stars: paper ({country})",
                     fontsize=9)
        ax.legend()

    if rows:
        ctx.plot("ic_vs_p", draw)


if __name__ == "__main__":
    raise SystemExit(scenario_main(globals()))
