"""Run and sweep configuration files (TOML): ``fedsim run --config run.toml``,
``fedsim sweep --config sweep.toml``; options given on the command line override the file.

::

    scenario = "quickstart"        # a scenario, a protocol or a path (the command line's NAME wins)
    data = "tiny"
    seed = 1
    out = "runs/quick"             # relative to the working directory
    ledger = true                  # also quiet, force
    workers = 2                    # sweeps only (also backend = "ray", address = "HOST:PORT")

    [params]                       # the scenario's parameters (--set KEY=VALUE adds and overrides)
    iterations = 5
    rho = 1.0

    [network]                      # --profile, --link-model, --transport, --loss, --dropout, ...
    profile = "wan"
    link_model = "fair"
    dropout_window = [0, 60]

    [grid]                         # sweeps only: KEY = [values]; --grid KEY=... replaces an axis
    rho = [0, 1, 2]
    profile = ["lan", "wan"]

Every error names the file and the key, and the key's line (``run.toml: line 7: [params] rounds:
must be >= 0, got -1``; the line and column of a TOML syntax error).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from ..config import did_you_mean
from .errors import UsageError

__all__ = ["NETWORK_KEYS", "at", "key_lines", "load_config"]

TOP_KEYS = {"scenario": str, "data": str, "seed": int, "out": str, "ledger": bool, "quiet": bool, "force": bool}
SWEEP_KEYS = {"workers": int, "backend": str, "address": str}
TABLES = ("params", "network")
SWEEP_TABLES = ("grid",)
NETWORK_KEYS = {"profile": str, "link_model": str, "transport": str, "loss": (int, float), "dropout": (int, float),
                "dropout_window": list, "link_options": dict, "transport_options": dict}


_KEY_PART = r'(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|\'[^\']*\')'
# [table] or [[array of tables]] (tomllib has checked the brackets match; [[params]] had no line)
_HEADER = re.compile(r"^\s*\[\[?\s*(" + _KEY_PART + r"(?:\s*\.\s*" + _KEY_PART + r")*)\s*\]\]?\s*(?:#.*)?$")
_KEY = re.compile(r"^\s*(" + _KEY_PART + r"(?:\s*\.\s*" + _KEY_PART + r")*)\s*=")


def _key_path(text: str) -> tuple[str, ...]:
    parts = re.findall(_KEY_PART, text)
    return tuple(p[1:-1] if p[:1] in "\"'" else p for p in parts)


def key_lines(text: str) -> dict[tuple[str, ...], int]:
    """The 1-based line of each key of a TOML text, by its path (``("params", "rounds")``,
    ``("seed",)``; a table header's own line under its path, the first ``[[header]]``'s for an
    array of tables). ``tomllib`` keeps no positions;
    this reads the text line by line (keys inside multi-line strings and arrays are not keys),
    for error messages only: a key it does not find has no line."""
    lines: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    quote = None  # inside a multi-line string: its delimiter
    for n, line in enumerate(text.splitlines(), 1):
        if quote is not None:
            if line.count(quote) % 2:
                quote = None
            continue
        m = _HEADER.match(line)
        if m:
            table = _key_path(m.group(1))
            lines.setdefault(table, n)
            continue
        m = _KEY.match(line)
        if m:
            lines.setdefault(table + _key_path(m.group(1)), n)
            rest = line[m.end():]
            for q in ('"""', "'''"):
                if rest.count(q) % 2:
                    quote = q
    return lines


def at(doc: dict[str, Any], *key: str) -> str:
    """``"run.toml: line 7"`` for the key ``key`` (a path: ``"params", "rounds"``) of a loaded
    configuration file (:func:`load_config`), or ``"run.toml"`` when its line is not known: the
    start of an error message about that key."""
    lines = doc.get("_lines", {})
    # a [network] key as written (link-model, the command line's spelling, is read as link_model);
    # a key of an inline table (params = {rounds = 1}): the table's line
    spelt = key[:-1] + (key[-1].replace("_", "-"),) if key else key
    for k in (key, spelt, key[:1]):
        if k in lines:
            return f"{doc['_path']}: line {lines[k]}"
    return str(doc["_path"])


def _unknown(path: str, key: str, known: list[str], where: str = "") -> UsageError:
    return UsageError(f"{path}: unknown key {where}{key!r}{did_you_mean(key, known)} "
                      f"(known: {', '.join(sorted(known))})")


def load_config(path: str | Path, *, sweep: bool = False) -> dict[str, Any]:
    """Read and check a configuration file; returns its content (tables as dicts, missing ones
    empty). Raises ``UsageError`` naming the file: missing or unreadable, a TOML syntax error
    (with its line and column), an unknown key (with the closest known one), a value of the
    wrong type. Scenario parameters and grid values are checked later, against the scenario."""
    p = Path(path)
    try:
        # (utf-8-sig: a byte order mark, as Windows editors write, was "line 1, column 1: Invalid
        # statement"; the data files' loaders skip it too)
        text = p.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise UsageError(f"--config: no such file: {p}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--config: cannot read {p}: {exc}") from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        if msg.endswith(")") and "(at line" in msg:
            reason, pos = msg.rsplit(" (at ", 1)
            raise UsageError(f"{p}: {pos[:-1]}: {reason}") from None
        raise UsageError(f"{p}: {msg}") from None
    except RecursionError:  # (tomllib reads nested arrays and inline tables recursively)
        raise UsageError(f"{p}: arrays or inline tables nested too deeply to read (a few hundred levels); "
                         "no option takes more than a flat array") from None
    lines = key_lines(text)
    here = {"_path": str(p), "_lines": lines}
    keys = dict(TOP_KEYS, **(SWEEP_KEYS if sweep else {}))
    tables = TABLES + (SWEEP_TABLES if sweep else ())
    out: dict[str, Any] = {t: {} for t in tables}
    for k, v in doc.items():
        if k in tables:
            if not isinstance(v, dict):
                raise UsageError(f"{at(here, k)}: {k} must be a table ([{k}]), got {v!r}")
            out[k] = dict(v)
            continue
        if not sweep and k in SWEEP_TABLES + tuple(SWEEP_KEYS):
            raise UsageError(f"{at(here, k)}: {f'[{k}]' if k in SWEEP_TABLES else k} is for fedsim sweep, not fedsim run")
        if k not in keys:
            raise _unknown(at(here, k), k, list(keys) + [f"[{t}]" for t in tables])
        want = keys[k]
        if not isinstance(v, want) or (want is int and isinstance(v, bool)):
            raise UsageError(f"{at(here, k)}: {k}: expected {want.__name__}, got {v!r}")
        if want is str and not v.strip():
            # an empty value read as "not given": data = "" ran the default data, out = "" wrote
            # to runs/<time>-NAME, scenario = "" ran quickstart
            raise UsageError(f"{at(here, k)}: {k}: empty; give a value or leave the key out")
        out[k] = v
    for table in ("network", "grid"):
        # link-model and link_model name one option (the command line's spelling and Python's):
        # both in one table silently kept the later value
        seen: dict[str, str] = {}
        for k in out.get(table, {}):
            first = seen.setdefault(k.replace("-", "_"), k)
            if first != k:
                raise UsageError(f"{at(here, table, k)}: [{table}] {first!r} and {k!r} are the same key; give it once")
    for k, v in out.get("network", {}).items():
        if k.replace("-", "_") not in NETWORK_KEYS:
            raise _unknown(at(here, "network", k), k, list(NETWORK_KEYS), "[network] ")
        want = NETWORK_KEYS[k.replace("-", "_")]
        if not isinstance(v, want) or isinstance(v, bool):
            expected = {str: "text", dict: "a table of the constructor's options (KEY = VALUE)"}.get(want, "a number")
            raise UsageError(f"{at(here, 'network', k)}: [network] {k}: expected {expected}"
                             f"{' pair [START, END]' if want is list else ''}, got {v!r}")
        if want is str and not v.strip():  # profile = "" ran the scenario's default profile
            raise UsageError(f"{at(here, 'network', k)}: [network] {k}: empty; give a value or leave the key out")
    window_key = next((k for k in out.get("network", {}) if k.replace("-", "_") == "dropout_window"), "dropout_window")
    out["network"] = {k.replace("-", "_"): v for k, v in out.get("network", {}).items()}
    window = out["network"].get("dropout_window")
    # (a boolean is an int to Python: [true, 1] passed here and was refused in the command line's
    # words, "--dropout-window expects START,END ..., got 'True,1'")
    if window is not None and (len(window) != 2 or not all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                           for x in window)):
        raise UsageError(f"{at(here, 'network', window_key)}: [network] dropout_window: expected [START, END] in seconds, got {window!r}")
    out["_path"] = str(p)
    out["_lines"] = lines
    return out
