"""How far each fedsim network model is from ground truth: the error table of docs/network-model.md.

    python -m validation.compare [--results validation/results] [--out validation/results/comparison.md]

For every pattern measured by a ground-truth engine (``ns3.json``: ns-3, packet level;
``real_tcp.json``: the Linux TCP stack in a shaped network namespace), the same pattern is run
through fedsim with each link model (``fifo``, ``fair``, ``tcp``; ``validation/fedsim_run.py``)
and compared: the relative error of the round completion time (the last message's completion)
and of every message's completion time, ``|fedsim - truth| / truth``. The table gives, per
pattern family and model, the median and the 95th percentile of both over the family's
patterns (messages pooled for the per-message figures), and the verdict against the issue's
goal for the flow model: a median within 10 % over patterns and no pattern's round worse than
25 %. Patterns the engine flagged as outliers (retransmission timeouts) are counted and listed.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

from .fedsim_run import MODELS, run_pattern
from .patterns import all_patterns, by_name, pattern_hash
from .results import load

GOAL_MEDIAN, GOAL_WORST = 0.10, 0.25


def usable(truth: dict) -> tuple[dict, dict[str, list[str]]]:
    """The patterns a ground truth measured faithfully, and the ones left out with the reason:
    patterns the engine did not complete (no round to compare), real TCP cannot add latency
    (patterns with latency ran without it) and is unreliable where the harness itself was busy
    (``cpu_busy`` >= 0.3: its CPU, not the shaped links, set the pace)."""
    keep, dropped = {}, {}
    for name, t in truth.items():
        if t.get("complete") is not True:
            dropped.setdefault("incomplete in the ground truth", []).append(name)
        elif t.get("latency_modelled") is False:
            dropped.setdefault("with latency (not modelled by the shaper)", []).append(name)
        elif max(t.get("cpu_busy") or [0.0]) >= 0.3:
            dropped.setdefault("harness CPU-bound (cpu_busy >= 0.3)", []).append(name)
        else:
            keep[name] = t
    return keep, dropped


def family(name: str) -> str:
    """The table's row of a pattern: its family and net, without the size or client count."""
    parts = name.split("/")
    if parts[0] == "star":
        return f"star {parts[2]}"  # star/c10/d20ms/1MB -> star d20ms
    if parts[0] == "single":
        return f"single {parts[1]}"
    return f"{parts[0]} {parts[1]} {parts[2]}"  # bcast/wan/het/n100 -> bcast wan het


def _positive(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def errors(truth: dict, models: tuple[str, ...] = MODELS) -> dict[str, dict]:
    """Per pattern name and model: ``round`` relative error and per-message relative errors.
    ``truth`` holds complete patterns (``usable``); raises ``ValueError`` for one whose messages
    are not exactly the pattern's or whose round or a completion is not a positive number (a
    malformed file is refused, not compared on what is left of it)."""
    out: dict[str, dict] = {}
    for name, t in sorted(truth.items()):
        pattern = by_name(name)
        comp = {m["id"]: m["completion"] for m in t["messages"]}
        ids = {m["id"] for m in pattern["messages"]}
        if len(comp) != len(t["messages"]) or set(comp) != ids:
            raise ValueError(f"{name}: the ground truth has {len(t['messages'])} message rows for the pattern's "
                             f"{len(ids)} messages")
        bad = [i for i, c in comp.items() if not _positive(c)]
        if bad or not _positive(t.get("round")):
            raise ValueError(f"{name}: round {t.get('round')!r}, completions of messages {bad[:5]} "
                             "are not positive numbers")
        out[name] = {}
        for model in models:
            r = run_pattern(pattern, model)
            got = {m["id"]: m["completion"] for m in r["messages"]}
            if set(got) != ids:
                raise ValueError(f"{name}: fedsim's {model} run delivered {len(got)} of {len(ids)} messages")
            msg = np.array([abs(got[i] - comp[i]) / comp[i] for i in sorted(ids)])
            out[name][model] = {"round": abs(r["round"] - t["round"]) / t["round"], "messages": msg,
                                "fedsim_round": r["round"], "truth_round": t["round"]}
    return out


def hash_mismatches(truth: dict) -> list[str]:
    """Names of the patterns whose measured ``hash`` is not that of the pattern regenerated here:
    their times are compared with a pattern that differs from the one measured (validation/README.md)."""
    pats = {p["name"]: p for p in all_patterns()}
    return [n for n in sorted(truth) if truth[n].get("hash") != pattern_hash(pats[n])]


def table(errs: dict[str, dict], truth: dict, engine: str, models: tuple[str, ...] = MODELS) -> str:
    """A Markdown table: per family and model, median and p95 of the round and message errors."""
    fams: dict[str, list[str]] = {}
    for name in errs:
        fams.setdefault(family(name), []).append(name)
    head = "| patterns | n | " + " | ".join(f"{m}: round med / p95 | {m}: message med / p95" for m in models) + " |"
    lines = [f"Relative error against {engine} (median / 95th percentile):", "", head,
             "|" + "---|" * (2 + 2 * len(models))]
    for fam in sorted(fams):
        names = fams[fam]
        cells = []
        for m in models:
            rounds = np.array([errs[n][m]["round"] for n in names])
            msgs = np.concatenate([errs[n][m]["messages"] for n in names])
            cells.append(f"{_pct(np.median(rounds))} / {_pct(np.percentile(rounds, 95))}")
            cells.append(f"{_pct(np.median(msgs))} / {_pct(np.percentile(msgs, 95))}")
        lines.append(f"| {fam} | {len(names)} | " + " | ".join(cells) + " |")
    all_names = list(errs)
    cells = []
    for m in models:
        rounds = np.array([errs[n][m]["round"] for n in all_names])
        msgs = np.concatenate([errs[n][m]["messages"] for n in all_names])
        cells.append(f"**{_pct(np.median(rounds))} / {_pct(np.percentile(rounds, 95))}**")
        cells.append(f"**{_pct(np.median(msgs))} / {_pct(np.percentile(msgs, 95))}**")
    lines.append(f"| **all** | {len(all_names)} | " + " | ".join(cells) + " |")
    lines.append("")
    for m in models:
        rounds = np.array([errs[n][m]["round"] for n in all_names])
        worst = all_names[int(np.argmax(rounds))]
        ok = np.median(rounds) <= GOAL_MEDIAN and rounds.max() <= GOAL_WORST
        lines.append(f"- `{m}`: median round error {_pct(np.median(rounds))}, worst {_pct(rounds.max())} "
                     f"(`{worst}`: {errs[worst][m]['fedsim_round']:.4g} s against {errs[worst][m]['truth_round']:.4g} s)"
                     f"; goal (median <= 10 %, none > 25 %): {'met' if ok else 'not met'}")
    outliers = [n for n in all_names if truth[n].get("outliers")]
    if outliers:
        lines.append(f"- patterns with outliers in the ground truth (retransmission timeouts): {len(outliers)}: "
                     + ", ".join(f"`{n}`" for n in outliers[:10]) + (" ..." if len(outliers) > 10 else ""))
    mismatched = hash_mismatches({n: truth[n] for n in all_names})
    if mismatched:
        lines.append(f"- patterns measured with another hash than the one regenerated here: {len(mismatched)}: "
                     + ", ".join(f"`{n}`" for n in mismatched))
    return "\n".join(lines) + "\n"


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = Path(__file__).parent / "results"
    ap.add_argument("--results", default=str(here))
    ap.add_argument("--out", default=str(here / "comparison.md"))
    args = ap.parse_args(argv)
    parts = []
    for fname, engine in (("ns3.json", "ns-3 (packet level)"), ("real_tcp.json", "Linux TCP (shaped namespace)")):
        path = Path(args.results) / fname
        if not path.exists():
            continue
        truth, dropped = usable(load(path))
        errs = errors(truth)
        text = f"## {engine}\n\n" + table(errs, truth, engine)
        if dropped:
            text += ("- left out: " + "; ".join(f"{len(v)} {why}" for why, v in dropped.items()) + "\n")
        parts.append(text)
    text = "\n".join(parts)
    Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
