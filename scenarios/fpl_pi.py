"""FPL Figure 2: F1@10 against the disclosure probability pi for the four presets.

For every preset and pi, FPL runs as actors (one network per epoch); the F1@10 plotted is the
test F1@10 at the epoch chosen by validation P@10 (``protocol=validation``, the default), the
same choice as fpl_table2 and fpl_tcc. pi = 0.1 means a client sends the update of one sampled
positive in ten; every negative update is always sent. The paper uses pi = 0.1, 0.2, ..., 1.0
(``--set pis=0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,1.0``).

Defaults are sized for the synthetic default data (a 100-user subset: minutes); on MovieLens
100K every (preset, pi) takes from about 10 min (pFPL+, a few epochs) to about an hour (sFPL,
30 epochs) on a shared 2-core machine: see docs/fpl.md, and ``--set cache=DIR`` to share runs
with fpl_table2 and fpl_tcc.
"""

from __future__ import annotations

import math

from fedsim.experiment import Param, RunContext, scenario_main
from fedsim.studies.fpl import best_epoch, fpl_grid, preset_epochs, scenario_params, scenario_split

# typical wall time on a 2-core machine, shown by `fedsim list`
RUN_TIME = 'minutes on the default synthetic subset; 10 min to an hour per (preset, pi) on MovieLens 100K (docs/fpl.md)'
DEFAULT_DATA = "ml100k-like"
PARAMS = {
    **scenario_params(),
    "pis": Param([0.2, 0.6, 1.0], "disclosure probabilities pi (the paper: 0.1, 0.2, ..., 1.0)", kind="floats"),
}


def run(ctx: RunContext) -> None:
    split = scenario_split(ctx)
    runs = fpl_grid(ctx, split, ctx["presets"], ctx["pis"], d=ctx["d"], lr=ctx["lr"], epochs=preset_epochs(ctx))
    rows = []
    for (preset, pi), rec in runs.items():
        e = best_epoch(rec)
        rows.append({"preset": preset, "pi": pi, "f1_at_10": e["test_f1"], "p_at_10": e["test_p"],
                     "r_at_10": e["test_r"], "ic_at_10": e["test_ic"], "epoch": e["epoch"],
                     "epochs_run": len(rec.curve), "val_p_at_10": e.get("val_p", math.nan),
                     "val_f1_at_10": e.get("val_f1", math.nan),
                     "positives_sent_per_epoch": sum(c["positives_sent"] for c in rec.curve) / len(rec.curve)})
    ctx.table("f1_vs_pi", rows, title="Figure 2: test F1@10 against pi (epoch chosen on validation P@10)",
              floatfmt=".5g")
    peaks = []
    for preset in ctx["presets"]:
        mine = [r for r in rows if r["preset"] == preset]
        if mine:
            b = max(mine, key=lambda r: r["f1_at_10"])
            peaks.append(f"{preset}: best F1@10 {b['f1_at_10']:.4f} at pi = {b['pi']:g}")
    if peaks:
        ctx.note("Peaks: " + "; ".join(peaks) + ". The paper (Foursquare) finds the peak below pi = 1 for most "
                 "presets and countries.")

    def draw(ax):
        styles = {"sFPL": ("#1f3b73", "s"), "sFPL+": ("#1b6e3a", "s"), "pFPL": ("#5b9bd5", "o"),
                  "pFPL+": ("#7fcf7f", "o")}
        for preset in ctx["presets"]:
            mine = sorted((r for r in rows if r["preset"] == preset), key=lambda r: r["pi"])
            c, m = styles.get(preset, ("gray", "x"))
            ax.plot([r["pi"] for r in mine], [r["f1_at_10"] for r in mine], color=c, marker=m, label=preset)
        ax.set_xlabel("pi (probability of sending a positive update)")
        ax.set_ylabel("F1@10")
        ax.set_title("F1@10 against pi (Figure 2)")
        ax.legend()

    if rows:
        ctx.plot("f1_vs_pi", draw)


if __name__ == "__main__":
    raise SystemExit(scenario_main(globals()))
