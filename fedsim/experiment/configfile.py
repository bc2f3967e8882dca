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

Every error names the file and the key (and the line and column of a TOML syntax error).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from ..config import did_you_mean
from .errors import UsageError

__all__ = ["NETWORK_KEYS", "load_config"]

TOP_KEYS = {"scenario": str, "data": str, "seed": int, "out": str, "ledger": bool, "quiet": bool, "force": bool}
SWEEP_KEYS = {"workers": int, "backend": str, "address": str}
TABLES = ("params", "network")
SWEEP_TABLES = ("grid",)
NETWORK_KEYS = {"profile": str, "link_model": str, "transport": str, "loss": (int, float), "dropout": (int, float),
                "dropout_window": list}


def _unknown(path: Path, key: str, known: list[str], where: str = "") -> UsageError:
    return UsageError(f"{path}: unknown key {where}{key!r}{did_you_mean(key, known)} "
                      f"(known: {', '.join(sorted(known))})")


def load_config(path: str | Path, *, sweep: bool = False) -> dict[str, Any]:
    """Read and check a configuration file; returns its content (tables as dicts, missing ones
    empty). Raises ``UsageError`` naming the file: missing or unreadable, a TOML syntax error
    (with its line and column), an unknown key (with the closest known one), a value of the
    wrong type. Scenario parameters and grid values are checked later, against the scenario."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"--config: no such file: {p}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--config: cannot read {p}: {exc}") from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        if msg.endswith(")") and "(at line" in msg:
            reason, at = msg.rsplit(" (at ", 1)
            raise UsageError(f"{p}: {at[:-1]}: {reason}") from None
        raise UsageError(f"{p}: {msg}") from None
    keys = dict(TOP_KEYS, **(SWEEP_KEYS if sweep else {}))
    tables = TABLES + (SWEEP_TABLES if sweep else ())
    out: dict[str, Any] = {t: {} for t in tables}
    for k, v in doc.items():
        if k in tables:
            if not isinstance(v, dict):
                raise UsageError(f"{p}: {k} must be a table ([{k}]), got {v!r}")
            out[k] = dict(v)
            continue
        if not sweep and k in SWEEP_TABLES + tuple(SWEEP_KEYS):
            raise UsageError(f"{p}: {f'[{k}]' if k in SWEEP_TABLES else k} is for fedsim sweep, not fedsim run")
        if k not in keys:
            raise _unknown(p, k, list(keys) + [f"[{t}]" for t in tables])
        want = keys[k]
        if not isinstance(v, want) or (want is int and isinstance(v, bool)):
            raise UsageError(f"{p}: {k}: expected {want.__name__}, got {v!r}")
        if want is str and not v.strip():
            # an empty value read as "not given": data = "" ran the default data, out = "" wrote
            # to runs/<time>-NAME, scenario = "" ran quickstart
            raise UsageError(f"{p}: {k}: empty; give a value or leave the key out")
        out[k] = v
    for table in ("network", "grid"):
        # link-model and link_model name one option (the command line's spelling and Python's):
        # both in one table silently kept the later value
        seen: dict[str, str] = {}
        for k in out.get(table, {}):
            first = seen.setdefault(k.replace("-", "_"), k)
            if first != k:
                raise UsageError(f"{p}: [{table}] {first!r} and {k!r} are the same key; give it once")
    for k, v in out.get("network", {}).items():
        if k.replace("-", "_") not in NETWORK_KEYS:
            raise _unknown(p, k, list(NETWORK_KEYS), "[network] ")
        want = NETWORK_KEYS[k.replace("-", "_")]
        if not isinstance(v, want) or isinstance(v, bool):
            raise UsageError(f"{p}: [network] {k}: expected {'a number' if want != str else 'text'}"
                             f"{' pair [START, END]' if want is list else ''}, got {v!r}")
        if want is str and not v.strip():  # profile = "" ran the scenario's default profile
            raise UsageError(f"{p}: [network] {k}: empty; give a value or leave the key out")
    out["network"] = {k.replace("-", "_"): v for k, v in out.get("network", {}).items()}
    window = out["network"].get("dropout_window")
    if window is not None and (len(window) != 2 or not all(isinstance(x, (int, float)) for x in window)):
        raise UsageError(f"{p}: [network] dropout_window: expected [START, END] in seconds, got {window!r}")
    out["_path"] = str(p)
    return out
