"""Typed, validated configuration dataclasses: hyperparameters declared once.

A protocol's configuration is a frozen dataclass whose fields are declared with ``param``::

    @dataclass(frozen=True)
    class FedRecConfig(Config):
        d: int = param(20, "latent dimension", min=1)
        rho: float = param(0.0, "unrated items sampled per rated item", min=0)
        strategy: str = param("ua", "filling of sampled items", choices=("ua", "hf"))

Everything else reads the declaration: ``Config.__post_init__`` checks every value (type,
choices, bounds) and raises ``ConfigError`` naming the field; ``fields_of`` lists name, type,
default, help and choices for the command line (``--set d=10``), sweep grids, report headers and
the docs' parameter tables; ``from_strings`` parses ``key=value`` text.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

__all__ = ["Config", "ConfigError", "FieldInfo", "annotation_type", "check_field", "closest_key", "did_you_mean", "fields_of", "param",
           "parse_field", "unknown_key_message"]


class ConfigError(ValueError):
    """A configuration value is missing, unknown, of the wrong type or out of range; the message
    names the field (``key``) and the configuration class."""

    def __init__(self, message: str, key: str | None = None) -> None:
        self.key = key
        super().__init__(message)


def param(default: Any, help: str, *, choices: Iterable[Any] | None = None, min: float | None = None,
          max: float | None = None, exclusive_min: bool = False, none_ok: bool = False) -> Any:
    """Declare a configuration field: its default, one line of help, and what values it takes
    (``choices``; numeric bounds ``min``/``max``, with ``exclusive_min`` for "> min"; ``none_ok``
    for an optional value). Returns a ``dataclasses.field``. Raises ``TypeError`` for a list, dict or
    set ``default`` (use a tuple); the default itself is checked like any value when the class is
    instantiated (``ConfigError``)."""
    meta = {"help": help, "choices": None if choices is None else tuple(choices), "min": min, "max": max,
            "exclusive_min": exclusive_min, "none_ok": none_ok}
    if isinstance(default, (list, dict, set)):
        raise TypeError("use a tuple for a sequence default (configs are frozen and hashable)")
    return dataclasses.field(default=default, metadata={"fedsim": meta})


@dataclass(frozen=True)
class FieldInfo:
    """One declared field, as ``fields_of`` returns it. ``type`` is one of ``bool``, ``int``,
    ``float``, ``str``, ``ints``, ``floats``, ``strs`` (a tuple of those) or ``any``."""

    name: str
    type: str
    default: Any
    help: str
    choices: tuple | None
    min: float | None
    max: float | None
    exclusive_min: bool
    none_ok: bool

    def describe(self) -> str:
        """Type, range and default in a few words (for ``--help`` and docs tables)."""
        bits = [self.type + (" or none" if self.none_ok else "")]
        if self.choices:
            # an empty choice ('': "from the settings") printed as nothing: "one of , paper, code"
            bits.append("one of " + ", ".join(str(c) if str(c) != "" else "''" for c in self.choices))
        if self.min is not None:
            bits.append(("> " if self.exclusive_min else ">= ") + f"{self.min:g}")
        if self.max is not None:
            bits.append(f"<= {self.max:g}")
        return "; ".join(bits)


_SCALARS = {bool: "bool", int: "int", float: "float", str: "str"}


def _type_name(tp: Any) -> tuple[str, bool]:
    """(type name, optional) of an annotation."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        name, _ = _type_name(args[0]) if len(args) == 1 else ("any", False)
        return name, True
    if origin is tuple:
        inner = [a for a in typing.get_args(tp) if a is not Ellipsis]
        base = _SCALARS.get(inner[0], "str") if inner else "str"
        return {"int": "ints", "float": "floats"}.get(base, "strs"), False
    return _SCALARS.get(tp, "any"), False


def annotation_type(tp: Any) -> tuple[str, bool]:
    """(type name, optional) of an annotation, as a configuration field's: ``float`` -> ``("float",
    False)``, ``int | None`` -> ``("int", True)``, ``tuple[float, ...]`` -> ``("floats", False)``,
    anything else ``"any"`` (``--link-option`` and ``--transport-option`` type their values so)."""
    return _type_name(tp)


def fields_of(cls_or_obj: Any) -> list[FieldInfo]:
    """The declared fields of a configuration class (or instance), in declaration order."""
    cls = cls_or_obj if isinstance(cls_or_obj, type) else type(cls_or_obj)
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        meta = f.metadata.get("fedsim", {})
        name, optional = _type_name(hints.get(f.name, Any))
        out.append(FieldInfo(f.name, name, f.default, meta.get("help", ""), meta.get("choices"), meta.get("min"),
                             meta.get("max"), bool(meta.get("exclusive_min")),
                             bool(meta.get("none_ok")) or optional))
    return out


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def parse_field(info: FieldInfo, text: str, owner: str = "") -> Any:
    """Convert command-line text to ``info``'s type; raises ``ConfigError`` naming the key.
    ``none``/empty gives None for optional fields; sequences are comma-separated (empty text is
    the empty sequence; an empty element, ``1,,2``, is an error)."""
    t = info.type
    s = text.strip()
    if info.none_ok and s.lower() in ("none", ""):
        return None
    try:
        if t == "bool":
            low = s.lower()
            if low not in _TRUE | _FALSE:
                raise ValueError
            return low in _TRUE
        if t == "int":
            return int(s)
        if t == "float":
            v = float(s)
            if math.isnan(v):
                raise ValueError
            return v
        if t in ("ints", "floats", "strs"):
            conv = {"ints": int, "floats": float, "strs": str}[t]
            if s == "":
                return ()
            parts = [x.strip() for x in s.split(",")]
            if "" in parts:
                # "1,,2" and "1,2," were read as 1,2: an element silently dropped
                where = f" of {owner}" if owner else ""
                raise ConfigError(f"{info.name}{where}: empty element in {text!r} (elements are comma separated; "
                                  "an empty list is empty text)", info.name)
            return tuple(conv(x) for x in parts)
        return s
    except ConfigError:
        raise
    except ValueError:
        where = f" of {owner}" if owner else ""
        raise ConfigError(f"{info.name}{where}: expected {t}, got {text!r}", info.name) from None


def check_field(info: FieldInfo, value: Any, owner: str = "") -> Any:
    """The value coerced to the declared type (int -> float, list -> tuple, numpy scalars to
    Python ones), or ``ConfigError``."""
    name = f"{owner}.{info.name}" if owner else info.name

    def bad(why: str) -> ConfigError:
        return ConfigError(f"{name} {why}, got {value!r}", info.name)

    if value is None:
        if info.none_ok:
            return None
        raise bad("must not be None")
    t = info.type
    if t in ("bool", "int", "float", "str"):
        value = _scalar(t, value, bad)
    elif t in ("ints", "floats", "strs"):
        # a Mapping iterates over its keys: {"a": 1} is no list of strings
        if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
            raise bad("must be a sequence")
        # each element is checked as the scalar field would check it: int() alone would turn
        # 1.5 into 1 and True into 1, str() would turn None into 'None', float() let NaN through,
        # and a bad element raised a bare ValueError naming no field
        value = tuple(_scalar(t[:-1], x, lambda why, x=x: ConfigError(f"{name} element {x!r} {why}", info.name))
                      for x in value)
    if info.choices is not None:
        vals = value if isinstance(value, tuple) else (value,)
        for v in vals:
            if v not in info.choices:
                raise ConfigError(f"{name} must be one of {', '.join(map(str, info.choices))}, got {v!r}",
                                  info.name)
    if info.min is not None or info.max is not None:
        vals = value if isinstance(value, tuple) else (value,)
        for v in vals:
            if not isinstance(v, (int, float)):
                continue
            if info.min is not None and (v <= info.min if info.exclusive_min else v < info.min):
                raise ConfigError(f"{name} must be {'>' if info.exclusive_min else '>='} {info.min:g}, got {v!r}",
                                  info.name)
            if info.max is not None and v > info.max:
                raise ConfigError(f"{name} must be <= {info.max:g}, got {v!r}", info.name)
    return value


_INT64 = 2 ** 63


def _scalar(t: str, value: Any, bad: Any) -> Any:
    """``value`` checked and coerced as a field of scalar type ``t`` (``bad(why)`` makes the
    error)."""
    if hasattr(value, "item") and not isinstance(value, (list, tuple)) and getattr(value, "ndim", 0) == 0:
        value = value.item()  # numpy scalar
    if t == "bool":
        if not isinstance(value, bool):
            raise bad("must be true or false")
    elif t == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                raise bad("must be an integer")
        if not -_INT64 <= value < _INT64:
            # NumPy (array sizes, seeds, counts) and msgpack take 64-bit integers: dim=10**20 was a
            # NumPy traceback mid-run, rounds=10**20 a run that never ended
            raise bad("must fit in 64 bits (below 2**63 in magnitude)")
    elif t == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad("must be a number")
        try:
            value = float(value)
        except OverflowError:  # an int beyond float's range
            raise bad("must be finite") from None
        if math.isnan(value):
            raise bad("must not be NaN")
        if math.isinf(value):  # no hyperparameter means anything at infinity (no limit is `none`)
            raise bad("must be finite")
    elif t == "str":
        if not isinstance(value, str):
            raise bad("must be text")
    return value


@dataclass(frozen=True)
class Config:
    """Base class of validated configuration dataclasses (declare fields with ``param``).

    After construction every field has been checked and coerced to its declared type; a
    subclass adds checks that involve several fields in ``validate`` (raise ``ConfigError``).

    Construction raises ``ConfigError`` (``key``: the field) for a value of the wrong type,
    outside its ``choices`` or bounds, or ``None`` where ``none_ok`` is not set. An unknown
    keyword, or too many positional arguments, is Python's dataclass ``TypeError`` (it names the
    key and the class); ``replace`` and ``from_strings`` raise ``ConfigError`` for an unknown key
    instead, with the closest known one."""

    def __post_init__(self) -> None:
        owner = type(self).__name__
        for info in fields_of(self):
            value = getattr(self, info.name)
            checked = check_field(info, value, owner)
            if checked is not value:
                object.__setattr__(self, info.name, checked)
        self.validate()

    def validate(self) -> None:
        """Checks across fields (override; raise ``ConfigError``)."""

    @classmethod
    def from_strings(cls, sets: Mapping[str, str] | Iterable[str], **base: Any):
        """A config from ``key=value`` strings (or a mapping of key to text) on top of ``base``
        keyword values (a string overrides ``base``). Raises ``ConfigError`` for an unknown key
        (with the known ones), a key given twice among ``sets`` or a bad value."""
        infos = {f.name: f for f in fields_of(cls)}
        for k in base:  # (a TypeError of the dataclass's __init__ otherwise)
            if k not in infos:
                raise ConfigError(unknown_key_message(k, infos, cls.__name__), k)
        pairs = sets.items() if isinstance(sets, Mapping) else [_split(s) for s in sets]
        kw = dict(base)
        given: set[str] = set()
        for k, text in pairs:
            k = k.strip()
            if k not in infos:
                raise ConfigError(unknown_key_message(k, infos, cls.__name__), k)
            if k in given:  # the later one silently won (" d" and "d" too)
                raise ConfigError(f"{cls.__name__}.{k} given twice", k)
            given.add(k)
            kw[k] = parse_field(infos[k], text, cls.__name__)
        return cls(**kw)

    def replace(self, **changes: Any):
        """A copy with ``changes`` applied (validated). Unknown keys raise ``ConfigError``."""
        names = {f.name for f in dataclasses.fields(self)}
        for k in changes:
            if k not in names:
                raise ConfigError(unknown_key_message(k, names, type(self).__name__), k)
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Field values as plain Python (tuples become lists: JSON-ready)."""
        return {f.name: (list(v) if isinstance(v, tuple) else v)
                for f in dataclasses.fields(self) for v in [getattr(self, f.name)]}


def _split(s: str) -> tuple[str, str]:
    if "=" not in s:
        raise ConfigError(f"expected key=value, got {s!r}")
    k, v = s.split("=", 1)
    return k, v


def unknown_key_message(key: str, known: Iterable[str], owner: str) -> str:
    """"unknown parameter 'x' for Owner; did you mean 'y'? known: ..." (for every layer that
    rejects a key)."""
    known = sorted(known)
    return f"unknown parameter {key!r} for {owner}{did_you_mean(key, known)} (known: {', '.join(known)})"


def closest_key(key: str, known: Iterable[str]) -> str | None:
    """The known key ``key`` was probably meant as: the one that differs from it only in case or
    ``-`` against ``_`` (``ROUNDS``, ``local-epochs``), else the closest spelling (difflib), else
    None. (difflib alone found nothing for ``ROUNDS`` against ``rounds``, nor ``D`` against ``d``.)"""
    import difflib

    known = list(known)
    norm = key.strip().casefold().replace("-", "_")
    same = [k for k in known if k.casefold().replace("-", "_") == norm]
    if same:
        return same[0]
    close = difflib.get_close_matches(key, known, n=1)
    return close[0] if close else None


def did_you_mean(key: str, known: Iterable[str]) -> str:
    """``"; did you mean 'k'?"`` for :func:`closest_key`, or nothing."""
    close = closest_key(key, known)
    return f"; did you mean {close!r}?" if close is not None else ""
