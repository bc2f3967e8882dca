"""Constructor options of a link model or a transport from the command line: ``--link-option
KEY=VALUE`` and ``--transport-option KEY=VALUE`` (repeatable), ``link_options`` and
``transport_options`` in a configuration file's ``[network]``, and a sweep's grid axes
``link_options.KEY`` and ``transport_options.KEY``. They become the ``NetSpec``'s
``link_options`` and ``options``, which go to the registered factory (``factory(**options)``).

An option's key must be a keyword the factory takes (its signature, through a class's
``__init__`` and the bases' its ``**kwargs`` passes on to: ``fedsim.kernel.registry``); its
value is read as ``--set`` reads a parameter's (:func:`fedsim.experiment.params.parse_value`),
typed by the parameter's annotation (``rate: float``), else by its default's type, else (no
annotation, no default, or a factory taking any ``**kwargs``) as a number when it reads as one,
``true``/``false`` as a bool, ``none`` as None, and text otherwise.
"""

from __future__ import annotations

import inspect
from typing import Any, Iterable

from ..config import annotation_type
from .errors import UsageError
from .params import Param, check_value, parse_value

__all__ = ["FLAGS", "GRID_PREFIXES", "command_line_options", "option_value", "parse_options"]

#: the command-line flag of each kind of option ("link": the link model's, "transport": the transport's)
FLAGS = {"link": "--link-option", "transport": "--transport-option"}
#: a sweep's grid axis of an option: ``link_options.rate``, ``transport_options.processes`` (as the
#: ``[network]`` keys of a configuration file)
GRID_PREFIXES = {"link": "link_options.", "transport": "transport_options."}


def _entry(kind: str, name: str):
    from ..kernel.registry import LINK_MODEL_REGISTRY, TRANSPORT_REGISTRY

    registry = LINK_MODEL_REGISTRY if kind == "link" else TRANSPORT_REGISTRY
    return registry.entry(name)  # (NetworkConfigError for an unknown name: the callers check names first)


def _check_key(kind: str, name: str, key: str, where: str) -> inspect.Parameter | None:
    """The factory's parameter ``key`` (None: a ``**kwargs`` takes it), or ``UsageError``
    beginning with ``where`` (``--link-option rat``) naming the component, its plug-in file and
    the options it takes, with a did-you-mean."""
    from ..kernel.netspec import OWN_FIELDS
    from ..kernel.registry import factory_file, factory_parameters, unknown_option

    entry = _entry(kind, name)
    if kind == "transport" and key in OWN_FIELDS:
        raise UsageError(f"{where}: not an option of the transport: {OWN_FIELDS[key]}")
    what = "link model" if kind == "link" else "transport"
    origin = ""
    if entry.source is not None:  # a plug-in's: where it comes from
        path = factory_file(entry.factory)
        origin = f" (a plug-in's, {path})" if path else " (a plug-in's)"
    error = unknown_option(what, name, entry.factory, key, OWN_FIELDS if kind == "transport" else (), origin)
    if error is not None:
        raise UsageError(f"{where}: {error}")
    params = factory_parameters(entry.factory)
    return None if params is None else params.get(key)


def _param(p: inspect.Parameter | None) -> Param | None:
    """How to read a value of parameter ``p``: a ``Param`` of its annotation's type (or its
    default's), or None (any value: :func:`_any`)."""
    if p is None:
        return None
    default = None if p.default is p.empty else p.default
    kind, optional = "any", p.default is None
    if p.annotation is not p.empty and not isinstance(p.annotation, str):
        kind, optional = annotation_type(p.annotation)
        optional = optional or p.default is None
    if kind == "any" and isinstance(default, (bool, int, float, str, list, tuple)):
        kind = Param(list(default) if isinstance(default, tuple) else default).type_name
    if kind == "any":
        return None
    return Param(default, kind=kind, none_ok=optional)


def _object_typed(p: inspect.Parameter) -> bool:
    """Whether ``p`` is annotated with a type no command-line value is (a ``Ledger``, a mapping or
    a callable: ``TcpNetwork``'s ``placement``); ``typing.Any`` and no annotation take anything."""
    ann = p.annotation
    if ann is p.empty or isinstance(ann, str) or ann is Any:
        return False
    return annotation_type(ann)[0] == "any"


def _annotation(p: inspect.Parameter) -> str:
    return inspect.formatannotation(p.annotation)


def _any(text: str) -> Any:
    s = text.strip()
    if s.lower() == "none":
        return None
    if s.lower() in ("true", "false"):
        return s.lower() == "true"
    for conv in (int, float):
        try:
            return conv(s)
        except ValueError:
            pass
    return s


def command_line_options(kind: str, name: str) -> list[str] | None:
    """The options of the registered link model (``kind`` ``"link"``) or transport
    (``"transport"``) ``name`` that ``--link-option`` / ``--transport-option`` can give, sorted: its
    factory's keyword arguments but the ``NetSpec``'s own fields and those typed as objects no
    command-line value is (``TcpNetwork``'s ``placement``, a ``Ledger``); None when a ``**kwargs``
    takes any name (``fedsim list`` shows them)."""
    from ..kernel.netspec import OWN_FIELDS
    from ..kernel.registry import factory_parameters

    params = factory_parameters(_entry(kind, name).factory)
    if params is None:
        return None
    own = OWN_FIELDS if kind == "transport" else {}
    return sorted(k for k, p in params.items() if k not in own and not _object_typed(p))


def option_value(kind: str, name: str, key: str, value: Any, where: str) -> Any:
    """``value`` (text, as typed; or a Python value: a TOML file's, an API call's) of option
    ``key`` of the registered link model (``kind`` ``"link"``) or transport (``"transport"``)
    ``name``, checked and typed; ``UsageError`` beginning with ``where`` (``--link-option rate``,
    ``--grid link_options.rate``) for an unknown key or a bad value."""
    p = _check_key(kind, name, key, where)
    if p is not None and _object_typed(p):
        what = "link model" if kind == "link" else "transport"
        raise UsageError(f"{where}: {what} {name!r} takes {key} as {_annotation(p)}, which a command-line value (a "
                         "number, true/false, none or text) cannot be; give it from Python (NetSpec(options=...) or "
                         "link_options=...), or register a functools.partial of the factory with it")
    param = _param(p)
    if param is None:
        return _any(value) if isinstance(value, str) else value
    try:
        v = (parse_value if isinstance(value, str) else check_value)(key, value, param)
    except UsageError as exc:
        msg = str(exc)
        prefix = f"--set {key}:"
        raise UsageError(f"{where}:{msg[len(prefix):]}" if msg.startswith(prefix) else f"{where}: {msg}") from None
    return tuple(v) if isinstance(v, list) else v


def parse_options(kind: str, name: str, given: Iterable[Any]) -> tuple[tuple[str, Any], ...]:
    """The options ``given`` for the registered link model (``kind`` ``"link"``) or transport
    ``name``: ``KEY=VALUE`` text (``--link-option``; a later key replaces an earlier one given as a
    pair, a key given twice as text is refused) or ``(KEY, value)`` pairs (a configuration file's
    table, which the command line's text overrides), as (key, typed value) pairs."""
    flag = FLAGS[kind]
    out: dict[str, Any] = {}
    texts: set[str] = set()
    for g in given:
        if isinstance(g, str):
            if "=" not in g:
                raise UsageError(f"{flag} expects KEY=VALUE, got {g!r}")
            key, value = g.split("=", 1)
            key = key.strip()
            if not key:
                raise UsageError(f"{flag} expects KEY=VALUE, got {g!r} (no key)")
            if key in texts:
                raise UsageError(f"{flag} {key}: given twice; give each key once")
            texts.add(key)
            out[key] = option_value(kind, name, key, value, f"{flag} {key}")
        else:  # (a configuration file's table: its errors name the table's key, link_options.KEY)
            key, value = g
            out[key] = option_value(kind, name, key, value, f"{GRID_PREFIXES[kind]}{key}")
    return tuple(sorted(out.items()))
