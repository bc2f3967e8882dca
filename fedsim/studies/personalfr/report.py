"""PersonalFR reporting: the accuracy and communication tables and learning-curve CSV of a set of
runs (:func:`fedsim.studies.personalfr.execute`'s results), the checks against the paper's claims,
and the learning-curve plots. The paper's figures (Le et al. 2022, ML1M) are shown beside ours."""

from __future__ import annotations

import math

import numpy as np

from ...experiment import RunContext, write_csv
from .runs import METRIC

__all__ = ["PAPER", "label_M", "plot_curves", "result_tables", "verdicts"]

# Le et al. 2022, Tables III and IV (ML1M; mean over 4 seeds): RMSE (explicit), NDCG@10 (implicit)
PAPER = {
    ("explicit", "joint", None): 0.8591, ("implicit", "joint", None): 0.8466,
    ("explicit", "fedavg", 100): 0.8629, ("implicit", "fedavg", 100): 0.8514,
    ("explicit", "personalfr", 100): 0.8613, ("implicit", "personalfr", 100): 0.8538,
    ("explicit", "fedavg", 300): 0.8731, ("implicit", "fedavg", 300): 0.8486,
    ("explicit", "personalfr", 300): 0.8602, ("implicit", "personalfr", 300): 0.8529,
    ("explicit", "fedavg", "all"): 0.9508, ("implicit", "fedavg", "all"): 0.8321,
    ("explicit", "personalfr", "all"): 0.8983, ("implicit", "personalfr", "all"): 0.8379,
}


def _mean_std(xs):
    """Mean and population standard deviation (as the paper) over repeats. A repeat without the
    figure (NaN: it diverged, or no evaluation arrived) makes both NaN: dropping it averaged the
    other repeats under the row's full ``repeats`` count. One repeat: the std is NaN (no spread
    is measured, 0 would say there was none)."""
    a = np.asarray(list(xs), dtype=np.float64)
    if a.size == 0 or np.isnan(a).any():
        return float("nan"), float("nan")
    return float(a.mean()), (float(a.std()) if a.size > 1 else float("nan"))


def label_M(M: int, n_users: int) -> str:
    """How tables name a number of clients: "all" for one user per client, else the number."""
    return "all" if M in (0, n_users) else str(M)


def _at_round(run: dict, rnd) -> float:
    key = METRIC[run["task"]]
    for h in run["history"]:
        if h["round"] == rnd:
            return h[key]
    return float("nan")


def result_tables(ctx: RunContext, outs: list[dict], *, title: str, name: str = "results") -> list[dict]:
    """The accuracy table ``name`` (mean and population std over repeats: the selected evaluation,
    each run's best on its test split and its final one), the communication table ``name_comm``
    (when there are federated runs; mean over the repeats) and the learning-curve CSV ``name_curves.csv`` (not a table of
    the report); returns the accuracy rows.

    ``selected``: with validation runs among ``outs`` (``select_on=validation``), each test run's
    metric at the round that was best on the validation split (one choice per task, method and
    M, applied to every repetition); without them, each run's best test evaluation (the
    paper's rule). Validation runs appear in no other column.

    A repeat whose figure is NaN (it diverged, or no evaluation arrived) is not averaged away:
    the row's mean and std of that figure are NaN, ``nan_runs`` counts such repeats and a note
    names them. With one repeat the stds are NaN."""
    groups: dict = {}
    chosen: dict = {}
    for o in outs:
        key = (o["task"], o["method"], o["M"] if o["method"] != "joint" else None)
        if o.get("validation"):
            chosen[key] = (o["best_round"], o["best"])
            continue
        groups.setdefault(key, []).append(o)
    rows = []
    order = {"joint": 0, "fedavg": 1, "personalfr": 2}
    with_nan = []
    for (task, method, M), runs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][2] or 0, order[kv[0][1]])):
        n_users = runs[0]["n_users"]
        mlab = "" if M is None else label_M(M, n_users)
        best, best_sd = _mean_std([r["best"] for r in runs])
        fin, fin_sd = _mean_std([r["final"] for r in runs])
        if (task, method, M) in chosen:
            sel_round, val_metric = chosen[(task, method, M)]
            sel_vals = [_at_round(r, sel_round) for r in runs]
            sel, sel_sd = _mean_std(sel_vals)
            rule = "validation"
        else:
            sel_vals = [r["best"] for r in runs]
            sel_round, val_metric, sel, sel_sd, rule = runs[0]["best_round"], float("nan"), best, best_sd, "test"
        nan_seeds = [r["seed"] for r, v in zip(runs, sel_vals) if math.isnan(v) or math.isnan(r["best"])
                     or math.isnan(r["final"])]
        if nan_seeds:
            with_nan.append(f"{task} {method}" + ("" if M is None else f" M = {mlab}")
                            + f" (seed(s) {', '.join(map(str, nan_seeds))})")
        paper = PAPER.get((task, method, None if M is None else (mlab if mlab == "all" else int(mlab))), "")
        rows.append({"task": task, "metric": METRIC[task] if task == "explicit" else "ndcg@10",
                     "clients": mlab or "1 (central)", "method": method, "selected": sel, "selected_std": sel_sd,
                     "selected_round": sel_round, "selected_on": rule, "validation_metric": val_metric,
                     "best_on_test": best, "best_on_test_std": best_sd,
                     "final": fin, "final_std": fin_sd,
                     "rounds": runs[0]["rounds"], "repeats": len(runs), "nan_runs": len(nan_seeds),
                     "paper_ml1m": paper,
                     "wall_s": float(np.mean([r["wall_s"] for r in runs]))})
    ctx.table(name, rows, title=title)
    if with_nan:
        ctx.caveat("nan", f"**Runs without a figure (NaN: diverged, or no evaluation arrived)**: {'; '.join(with_nan)}. "
                 "Their rows' means are NaN (`nan_runs`), not the mean of the other repeats.")
    if chosen:
        ctx.note("`selected`: each repetition's test metric at the round that was best on a validation split "
                 "cut from the first repetition's training part (`selected_round`; the validation run's metric "
                 "is `validation_metric`); no test rating chose it. `best_on_test` is the paper's rule (each "
                 "run's best evaluation on its own test split: optimistic), `final` the last round's.")
    outs = [o for o in outs if not o.get("validation")]
    comm = []
    for (task, method, M), runs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][2] or 0, order[kv[0][1]])):
        if method == "joint":
            continue
        # the mean over the repeats, as the accuracy table (it was the first repeat's alone, under a title
        # that did not say so: which clients a round selects, and so PersonalFR's bytes, vary with the seed)
        def mean(f):
            return float(np.mean([f(r) for r in runs]))

        comm.append({"task": task, "clients": label_M(M, runs[0]["n_users"]), "method": method,
                     "clients_per_round": mean(lambda r: r["clients_per_round"]),
                     "bytes_per_round": mean(lambda r: r["comm"]["bytes_per_round"]),
                     "down_bytes_per_client": mean(lambda r: r["comm"]["down_bytes_per_client"]),
                     "up_bytes_per_client": mean(lambda r: r["comm"]["up_bytes_per_client"]),
                     "setup_bytes": mean(lambda r: r["comm"]["setup_bytes"]),
                     "client_gflop_per_round": mean(lambda r: r["client_flops"] / r.get("rounds_run", r["rounds"]) / 1e9),
                     "repeats": len(runs)})
    if comm:
        ctx.table(f"{name}_comm", comm, title="Communication per round (ledger, evaluation messages left out) "
                  "and client computation per round (FLOPs charged), mean over the repeats", floatfmt=".1f")
    curves = []
    for o in outs:
        key = METRIC[o["task"]]
        for h in o["history"]:
            curves.append({"task": o["task"], "method": o["method"],
                           "clients": "" if o["method"] == "joint" else label_M(o["M"], o["n_users"]),
                           "seed": o["seed"], "round": h["round"], key: h[key]})
    write_csv(ctx.out / f"{name}_curves.csv", curves, ["task", "method", "clients", "seed", "round", "rmse", "ndcg"],
              nan="nan")
    return rows


def _spread_caveat(a: float, b: float, pair: tuple[float, float]) -> str:
    """What the spreads over the repeats (``pair``: the two figures' population stds) say of
    the ordering of two different means ``a`` and ``b``: nothing to add when the gap exceeds both,
    else a parenthesis saying it is no clear ordering (or that one repeat has no spread)."""
    if a == b:
        return ""
    if all(math.isnan(x) for x in pair):  # one repeat: the ordering was stated as a finding
        return " (one repeat: no spread to judge the gap by)"
    if any(math.isnan(x) for x in pair):
        # one method's spread unknown (a single finite repeat): the gap was judged against the
        # other's alone, and stated as an ordering when it exceeded it
        return " (one of them has no spread over its repeats: not a clear ordering)"
    if abs(a - b) <= max(pair):
        return " (the gap is within a population std over the repeats: not a clear ordering)"
    return ""


def _printed(x: float) -> str:
    """A figure as the checks print it (4 decimals): an ordering is only stated between figures
    that print differently."""
    return f"{x:.4f}"


def verdicts(ctx: RunContext, rows: list[dict]) -> None:
    """Notes: does PersonalFR beat FedAvg at each M (means over the repeats; a gap within either's
    population std over the repeats is said to be no clear ordering), is Joint at least as good as
    both (selected figures; a method ahead of Joint by less than the spread is said the same way).
    Figures are printed to 4 decimals, and two that print alike are said to be equal to 4 decimals,
    never ordered ("PersonalFR 0.9000 vs FedAvg 0.9000: PersonalFR better" read as a contradiction)."""
    lines = []
    for task in sorted({r["task"] for r in rows}):
        def better(a, b, lower=task == "explicit"):
            return _printed(a) != _printed(b) and (a < b if lower else a > b)
        mine = {(r["method"], r["clients"]): r["selected"] for r in rows if r["task"] == task}
        sds = {(r["method"], r["clients"]): r.get("selected_std", float("nan")) for r in rows if r["task"] == task}
        joint = mine.get(("joint", "1 (central)"))
        joint_sd = sds.get(("joint", "1 (central)"), float("nan"))
        # numerically (as text "100" came before "20"), "all" last
        for M in sorted({c for (_, c) in mine if c != "1 (central)"},
                        key=lambda s: (str(s) == "all", int(s) if str(s).isdigit() else 0, str(s))):
            fa, pf = mine.get(("fedavg", M)), mine.get(("personalfr", M))
            if fa is None or pf is None:
                continue
            txt = f"{task}, M = {M}: PersonalFR {_printed(pf)} vs FedAvg {_printed(fa)}: "
            if math.isnan(pf) or math.isnan(fa):  # NaN compares false: "FedAvg better" whatever the runs did
                lines.append("- " + txt + "not compared (a NaN figure: see `nan_runs`)")
                continue
            # equal figures said "FedAvg better"; a gap within the spread over repeats is no ordering;
            # figures equal as printed but not exactly said one was better
            if pf == fa:
                txt += "equal"
            elif _printed(pf) == _printed(fa):
                txt += "equal to 4 decimals"
            else:
                txt += "PersonalFR better" if better(pf, fa) else "FedAvg better"
                txt += _spread_caveat(pf, fa, (sds[("fedavg", M)], sds[("personalfr", M)]))
            if joint is not None and math.isnan(joint):
                txt += "; Joint nan: not compared"
            elif joint is not None:
                # the methods ahead of Joint; an ordering from means alone was stated though the gap
                # lay inside the spread over the repeats (Joint 0.4916 +- 0.02 "NOT at least as good
                # as" FedAvg 0.4939 +- 0.04)
                ahead = [(v, sds[(m, M)]) for m, v in (("fedavg", fa), ("personalfr", pf)) if better(v, joint)]
                caveats = [_spread_caveat(v, joint, (sd, joint_sd)) for v, sd in ahead]
                # (a method ahead of Joint only in digits not printed is not ahead: better() says so)
                txt += f"; Joint {_printed(joint)} " + ("at least as good as both" if not ahead else
                                                   "NOT at least as good as both" if "" in caveats else
                                                   "NOT at least as good as both" + caveats[0])
            lines.append("- " + txt)
    if lines:
        ctx.note("Checks (the selected evaluations):\n\n" + "\n".join(lines))


def plot_curves(ctx: RunContext, outs: list[dict], name: str) -> None:
    """One plot ``name_TASK`` per task: the metric against rounds of every run seeded ``ctx.seed``."""
    for task in sorted({o["task"] for o in outs}):
        key = METRIC[task]

        def draw(ax, task=task, key=key):
            for o in outs:
                if o["task"] != task or o["seed"] != ctx.seed or o.get("validation"):
                    continue
                xs = [h["round"] for h in o["history"]]
                ys = [h[key] for h in o["history"]]
                lab = "Joint (epochs)" if o["method"] == "joint" else f"{o['method']} M={label_M(o['M'], o['n_users'])}"
                ax.plot(xs, ys, marker=".", label=lab, linestyle="--" if o["method"] == "joint" else "-")
            ax.set_xlabel("communication round (Joint: epoch)")
            ax.set_ylabel("RMSE" if key == "rmse" else "NDCG@10")
            ax.set_title(f"{task} feedback")
            ax.legend(fontsize=8)
            if key == "rmse":
                finite = [h[key] for o in outs if o["task"] == task for h in o["history"] if h[key] == h[key]]
                if finite:
                    ax.set_ylim(min(finite) - 0.02, min(max(finite), min(finite) + 0.35))

        ctx.plot(f"{name}_{task}", draw)

