"""Typed scenario parameters: a scenario's ``PARAMS`` maps names to :class:`Param`; values come
from ``--set KEY=VALUE`` text (:func:`parse_value`, :func:`parse_sets`) or from Python (sweep
grids, API calls: :func:`check_value`), and :func:`resolve_config` merges them over the defaults."""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Sequence

from .discovery import scenario_name
from .errors import UsageError

__all__ = ["Param", "check_value", "parse_sets", "parse_value", "resolve_config"]


@dataclass(frozen=True)
class Param:
    """A scenario parameter: its default (whose type is the parameter's type) and help text.
    ``choices`` restricts the values; ``kind`` overrides the type ('int', 'float', 'str',
    'bool', 'ints', 'floats', 'strs' for comma-separated lists)."""

    default: Any
    help: str = ""
    choices: tuple | None = None
    kind: str | None = None

    @property
    def type_name(self) -> str:
        if self.kind:
            return self.kind
        d = self.default
        if isinstance(d, bool):
            return "bool"
        if isinstance(d, int):
            return "int"
        if isinstance(d, float):
            return "float"
        if isinstance(d, (list, tuple)):
            inner = {type(x) for x in d}
            if inner <= {int}:
                return "ints"
            if inner <= {int, float}:
                return "floats"
            return "strs"
        return "str"


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def parse_value(key: str, text: str, param: Param) -> Any:
    """Convert ``text`` to ``param``'s type; raises ``UsageError`` naming the key."""
    t = param.type_name
    try:
        if t == "bool":
            low = text.strip().lower()
            if low in _TRUE:
                value: Any = True
            elif low in _FALSE:
                value = False
            else:
                raise ValueError
        elif t == "int":
            value = int(text)
        elif t == "float":
            value = float(text)
            if math.isnan(value):
                raise ValueError
        elif t in ("ints", "floats", "strs"):
            conv = {"ints": int, "floats": float, "strs": str}[t]
            value = [conv(x.strip()) for x in text.split(",") if x.strip() != ""]
        else:
            value = text
    except ValueError:
        raise UsageError(f"--set {key}: expected {t}, got {text!r}") from None
    if param.choices is not None:
        vals = value if isinstance(value, list) else [value]
        bad = [v for v in vals if v not in param.choices]
        if bad:
            raise UsageError(f"--set {key}: {bad[0]!r} is not one of {', '.join(map(str, param.choices))}")
    return value


def check_value(key: str, value: Any, param: Param) -> Any:
    """Validate a Python value (from a sweep grid or API call) against ``param``: a string is
    parsed as :func:`parse_value` does; otherwise the value must already have the parameter's
    type. Returns it normalised (an int given for a float parameter as float, a tuple for a
    list parameter as list); raises ``UsageError`` naming ``key`` when the type is wrong.
    ``choices`` are checked for strings only."""
    if isinstance(value, str):
        return parse_value(key, value, param)
    t = param.type_name
    ok = {
        "bool": lambda v: isinstance(v, bool),
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        "ints": lambda v: isinstance(v, (list, tuple)) and all(isinstance(x, int) for x in v),
        "floats": lambda v: isinstance(v, (list, tuple)) and all(isinstance(x, (int, float)) for x in v),
        "strs": lambda v: isinstance(v, (list, tuple)),
        "str": lambda v: isinstance(v, str),
    }[t]
    if not ok(value):
        raise UsageError(f"{key}: expected {t}, got {value!r}")
    return float(value) if t == "float" else (list(value) if t in ("ints", "floats", "strs") else value)


def _unknown(key: str, mod: ModuleType, params: dict[str, Param]) -> UsageError:
    return UsageError(f"unknown parameter {key!r} for scenario {scenario_name(mod)}; "
                      f"known: {', '.join(sorted(params))}")


def resolve_config(mod: ModuleType, overrides: dict[str, Any]) -> dict[str, Any]:
    """Defaults of ``mod.PARAMS`` updated with ``overrides`` checked by :func:`check_value`;
    raises ``UsageError`` for an unknown key or a value of the wrong type."""
    params: dict[str, Param] = mod.PARAMS
    cfg = {k: p.default for k, p in params.items()}
    for k, v in overrides.items():
        if k not in params:
            raise _unknown(k, mod, params)
        cfg[k] = check_value(k, v, params[k])
    return cfg


def parse_sets(mod: ModuleType, sets: Sequence[str]) -> dict[str, Any]:
    """Parse ``key=value`` strings against ``mod.PARAMS`` into ``{key: typed value}``; raises
    ``UsageError`` for a string without ``=``, an unknown key or a value :func:`parse_value`
    refuses."""
    out: dict[str, Any] = {}
    for s in sets:
        if "=" not in s:
            raise UsageError(f"--set expects key=value, got {s!r}")
        k, v = s.split("=", 1)
        k = k.strip()
        if k not in mod.PARAMS:
            raise _unknown(k, mod, mod.PARAMS)
        out[k] = parse_value(k, v, mod.PARAMS[k])
    return out
