"""Reading and writing the ground-truth result files (validation/results/*.json).

The engines return per pattern ``"messages"`` as a list of rows (one dict per message). The
files store them as columns (one list per field, same order, ``id`` first), which is several
times smaller; ``pandas.DataFrame(result["messages"])`` reads either form. ``load`` turns the
columns back into rows::

    from validation.results import load
    ns3 = load("validation/results/ns3.json")           # name -> pattern result
    r = ns3["bcast/wan/het/n100"]
    r["round"], r["messages"][0]["completion"], r["hash"]
    by_id = {m["id"]: m["completion"] for m in r["messages"]}

A pattern result's ``hash`` is ``validation.patterns.pattern_hash`` of the pattern measured;
regenerate the pattern with ``validation.patterns.by_name(name)`` and compare hashes before
comparing times.
"""

from __future__ import annotations

import json
from pathlib import Path


def _round(x, digits):
    if isinstance(x, float):
        return round(x, digits)
    if isinstance(x, list):
        return [_round(v, digits) for v in x]
    return x


def to_columns(rows: list[dict], digits: int = 9) -> dict[str, list]:
    if not rows:
        return {}
    keys = list(rows[0])
    return {k: [_round(r.get(k), digits) for r in rows] for k in keys}


def to_rows(cols: dict[str, list] | list[dict]) -> list[dict]:
    if isinstance(cols, list):
        return cols
    keys = list(cols)
    n = len(cols[keys[0]]) if keys else 0
    return [{k: cols[k][i] for k in keys} for i in range(n)]


def dump(doc: dict, path: str | Path, digits: int = 9) -> None:
    """Write an engine's result document with per-pattern message columns, one pattern a line."""
    pats = []
    for p in doc["patterns"]:
        q = {k: (v if k == "messages" else _round(v, digits)) for k, v in p.items()}
        q["messages"] = to_columns(p["messages"], digits)
        pats.append(q)
    head = {k: v for k, v in doc.items() if k != "patterns"}
    lines = ["{"]
    for k, v in head.items():
        lines.append(f" {json.dumps(k)}: {json.dumps(v)},")
    lines.append(' "patterns": [')
    lines.append(",\n".join("  " + json.dumps(q, separators=(",", ":")) for q in pats))
    lines.append(" ]")
    lines.append("}")
    Path(path).write_text("\n".join(lines) + "\n")


def load_doc(path: str | Path) -> dict:
    """The whole document (engine, versions, settings, patterns as a list with message rows)."""
    doc = json.loads(Path(path).read_text())
    for p in doc["patterns"]:
        p["messages"] = to_rows(p["messages"])
    return doc


def load(path: str | Path) -> dict[str, dict]:
    """Pattern name -> pattern result (messages as rows)."""
    return {p["name"]: p for p in load_doc(path)["patterns"]}
