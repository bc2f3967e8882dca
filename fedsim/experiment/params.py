"""Typed scenario parameters: a scenario's ``PARAMS`` maps names to :class:`Param`; values come
from ``--set KEY=VALUE`` text (:func:`parse_value`, :func:`parse_sets`) or from Python (sweep
grids, API calls: :func:`check_value`), and :func:`resolve_config` merges them over the defaults."""

from __future__ import annotations

import numbers
from collections.abc import Collection, Mapping
from dataclasses import MISSING, dataclass
from types import ModuleType
from typing import Any, Sequence

from ..config import ConfigError, FieldInfo, check_field, did_you_mean, fields_of, parse_field

from .naming import scenario_name
from .errors import UsageError

__all__ = ["KINDS", "Param", "check_value", "params_from", "parse_sets", "parse_value", "resolve_config", "set_keys",
           "unknown_parameter"]


#: the parameter types a ``Param``'s ``kind`` may name ("any": a field of no declared type)
KINDS = ("int", "float", "str", "bool", "ints", "floats", "strs", "any")


@dataclass(frozen=True)
class Param:
    """A scenario parameter: its default (whose type is the parameter's type) and help text.
    ``choices`` restricts the values; ``kind`` overrides the type ('int', 'float', 'str',
    'bool', 'ints', 'floats', 'strs' for comma-separated lists); ``min``/``max`` (with
    ``exclusive_min``) bound numbers; ``none_ok`` admits ``none``. Parsing and checking are the
    ones of protocol configurations (``fedsim.config``): a parameter that is a protocol
    hyperparameter is best declared with :meth:`Param.of` so that it is declared once.

    Raises ``ValueError`` for a ``kind`` none of ``KINDS`` (``kind="integer"`` made a parameter
    that took any text), ``TypeError`` for a ``help`` that is no str, ``choices`` that are no
    collection of values (one str: its letters were the choices), a ``min``/``max`` that is no
    number (it failed at the first value checked) and an ``exclusive_min``/``none_ok`` that is
    not True or False."""

    default: Any
    help: str = ""
    choices: tuple | None = None
    kind: str | None = None
    min: float | None = None
    max: float | None = None
    exclusive_min: bool = False
    none_ok: bool = False

    def __post_init__(self) -> None:
        if self.kind is not None and self.kind not in KINDS:
            raise ValueError(f"Param kind {self.kind!r}: expected one of {', '.join(KINDS)} (or None: the "
                             "default's type)")
        if not isinstance(self.help, str):
            raise TypeError(f"Param help must be a str, got {type(self.help).__name__} {self.help!r:.80}")
        if self.choices is not None and (isinstance(self.choices, (str, bytes, Mapping))
                                         or not isinstance(self.choices, Collection)):
            raise TypeError(f"Param choices must be a list or tuple of values, got {type(self.choices).__name__} "
                            f"{self.choices!r:.80}")
        for name in ("min", "max"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, numbers.Real)):
                raise TypeError(f"Param {name} must be a number or None, got {type(v).__name__} {v!r:.80}")
        for name in ("exclusive_min", "none_ok"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"Param {name} must be True or False, got {getattr(self, name)!r:.80}")

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

    def field(self, key: str) -> FieldInfo:
        """This parameter as a configuration field description (for parsing and checking)."""
        return FieldInfo(key, self.type_name, self.default, self.help, self.choices, self.min, self.max,
                         self.exclusive_min, self.none_ok or self.default is None)

    @classmethod
    def of(cls, config: type, name: str, default: Any = MISSING, help: str | None = None) -> "Param":
        """The parameter of a configuration dataclass's field ``name``: its type, bounds, choices
        and help as declared there; ``default`` and ``help`` may differ for a scenario (say, fewer
        rounds by default than the paper)."""
        infos = {f.name: f for f in fields_of(config)}
        if name not in infos:  # (a bare KeyError of the name)
            raise KeyError(f"{config.__name__} has no field {name!r}{did_you_mean(name, infos)}; fields: "
                           f"{', '.join(infos)}")
        info = infos[name]
        d = info.default if default is MISSING else default
        return cls(list(d) if isinstance(d, tuple) else d, info.help if help is None else help, info.choices,
                   info.type, info.min, info.max, info.exclusive_min, info.none_ok)

    def describe(self) -> str:
        return self.field("").describe()

    def default_text(self) -> str:
        """The default as it is typed (``--set KEY=VALUE``, ``--KEY VALUE``): a list comma
        separated, None as ``none``, an empty string or list as ``''``."""
        v = self.default
        if isinstance(v, (list, tuple)):
            v = ",".join(map(str, v))
        return "none" if v is None else (str(v) if str(v) != "" else "''")


def params_from(config: type, *names: str, **defaults: Any) -> dict[str, Param]:
    """``{name: Param.of(config, name)}`` for ``names`` (every field when none is given), with
    scenario ``defaults`` overriding the configuration's. Raises ``KeyError`` naming a name
    that is no field of ``config``, and ``TypeError`` for ``defaults`` of fields not among
    ``names`` (they were dropped, silently)."""
    names = names or tuple(f.name for f in fields_of(config))
    extra = [k for k in defaults if k not in names]
    if extra:
        raise TypeError(f"params_from: defaults for {', '.join(map(repr, extra))}, which are not among the "
                        f"parameters made ({', '.join(names)})")
    return {n: Param.of(config, n, defaults.get(n, MISSING)) for n in names}


def _listy(t: str, value: Any) -> Any:
    return list(value) if t in ("ints", "floats", "strs") and isinstance(value, tuple) else value


def _usage(key: str, exc: ConfigError, text: Any, param: Param) -> UsageError:
    msg = str(exc)
    t = param.type_name
    if "must be one of" in msg:
        bad = msg.rsplit("got ", 1)[-1]
        return UsageError(f"--set {key}: {bad} is not one of {', '.join(map(str, param.choices or ()))}")
    if msg.startswith(f"{key}: expected") or "must be an integer" in msg or "must be a number" in msg \
            or "must be true or false" in msg or "must be text" in msg or "must be a sequence" in msg:
        return UsageError(f"--set {key}: expected {t}, got {text!r}")
    return UsageError(f"--set {key}: {msg.split(' ', 1)[1] if msg.startswith(key) else msg}")


def parse_value(key: str, text: str, param: Param) -> Any:
    """Convert ``text`` to ``param``'s type and check it (choices, bounds); raises
    ``UsageError`` naming the key."""
    info = param.field(key)
    try:
        return _listy(info.type, check_field(info, parse_field(info, text), ""))
    except ConfigError as exc:
        raise _usage(key, exc, text, param) from None


def check_value(key: str, value: Any, param: Param) -> Any:
    """Validate a Python value (from a sweep grid or API call) against ``param``: a string is
    parsed as :func:`parse_value` does; otherwise the value must already have the parameter's
    type. Returns it normalised (an int given for a float parameter as float, a tuple for a
    list parameter as list); raises ``UsageError`` naming ``key`` when the type, a choice or a
    bound is wrong."""
    if isinstance(value, str) and param.type_name != "str":
        return parse_value(key, value, param)
    info = param.field(key)
    try:
        return _listy(info.type, check_field(info, value, ""))
    except ConfigError as exc:
        raise _usage(key, exc, value, param) from None


def unknown_parameter(key: str, mod: ModuleType, params: dict[str, Param] | None = None) -> UsageError:
    params = mod.PARAMS if params is None else params
    hint = did_you_mean(key, params)
    return UsageError(f"unknown parameter {key!r} for scenario {scenario_name(mod)}{hint} "
                      f"(known: {', '.join(sorted(params))}; see fedsim run {scenario_name(mod)} --help)")


def resolve_config(mod: ModuleType, overrides: dict[str, Any]) -> dict[str, Any]:
    """Defaults of ``mod.PARAMS`` updated with ``overrides`` checked by :func:`check_value`;
    raises ``UsageError`` for an unknown key or a value of the wrong type, and ``TypeError`` for
    ``overrides`` that is no mapping (a list of ``key=value`` strings: :func:`parse_sets` makes
    the mapping of those) or has a key that is no str."""
    if not isinstance(overrides, Mapping):
        # a list was "'list' object has no attribute 'items'", naming neither overrides nor parse_sets
        hint = "; parse_sets(scenario, strings) makes one of key=value strings" if isinstance(
            overrides, (list, tuple)) else ""
        raise TypeError(f"overrides must be a mapping {{parameter: value}}, got {type(overrides).__name__} "
                        f"{overrides!r:.80}{hint}")
    params: dict[str, Param] = mod.PARAMS
    cfg = {k: p.default for k, p in params.items()}
    for k, v in overrides.items():
        if not isinstance(k, str):
            # 1 was "'int' object has no attribute 'strip'" from the did-you-mean hint
            raise TypeError(f"overrides: a key is a parameter name (str), got {type(k).__name__} {k!r}")
        if k not in params:
            raise unknown_parameter(k, mod, params)
        cfg[k] = check_value(k, v, params[k])
    return cfg


def set_keys(sets: Sequence[str] | None) -> set[str]:
    """The keys of ``--set key=value`` strings (as given, stripped; not checked)."""
    return {str(s).split("=", 1)[0].strip() for s in (sets or ())}


def parse_sets(mod: ModuleType, sets: Sequence[str]) -> dict[str, Any]:
    """Parse ``key=value`` strings against ``mod.PARAMS`` into ``{key: typed value}``; raises
    ``UsageError`` for a string without ``=``, an unknown key, a key given twice or a value
    :func:`parse_value` refuses, and ``TypeError`` for ``sets`` given as one str (its characters
    were taken for the strings: "--set expects key=value, got 'r'" for ``"rounds=2"``)."""
    if isinstance(sets, str):
        raise TypeError(f"parse_sets takes a list of key=value strings, got the single str {sets!r}; write [{sets!r}]")
    out: dict[str, Any] = {}
    for s in sets:
        if "=" not in s:
            raise UsageError(f"--set expects key=value, got {s!r}")
        k, v = s.split("=", 1)
        k = k.strip()
        if k not in mod.PARAMS:
            raise unknown_parameter(k, mod, mod.PARAMS)
        if k in out:  # the later one silently won; --grid refuses an axis given twice, so does --set
            raise UsageError(f"--set {k}: given twice; give each key once")
        out[k] = parse_value(k, v, mod.PARAMS[k])
    return out
