"""The registries of link models and transports: the names ``--link-model`` and ``--transport``
(and ``[network]`` in configuration files, sweep grid axes, ``fedsim compare --against``,
``fedsim trace --link-model``, ``NetSpec``, ``SimNetwork(link_model=NAME)``) accept.

One small registry per kind of component, filled by the components themselves: the built-in
ones register at import (``fifo``, ``fair`` and ``tcp`` in ``fedsim.kernel.sim``; ``sim``,
``asyncio`` and ``tcp`` in ``sim``, ``aio`` and ``tcp``), exactly as a plug-in does::

    from fedsim.kernel import LinkModel, register_link_model, register_transport

    @register_link_model("slow", description="fifo plus 2 s per message")
    class Slow(LinkModel):
        ...

    register_transport("my-asyncio", MyAsyncioNetwork, "asyncio, with my changes")

A plug-in is a file given to ``fedsim --plugin FILE`` (or ``$FEDSIM_PLUGINS``) or a module an
installed package declares under the ``fedsim.protocols``, ``fedsim.link_models`` or
``fedsim.transports`` entry-point group: ``fedsim.protocols.load_plugins`` imports it, its
``register_*`` calls do the rest (docs/network-model.md, docs/cli.md).

A link model's factory is called once per network (a link model keeps per-run state), with the
``NetSpec``'s ``link_options`` as keyword arguments (``--link-option KEY=VALUE``; none by default):
a ``LinkModel`` subclass, or any callable returning a new ``LinkModel``. A transport's
factory is called with the network's keyword arguments (``seed``, ``profile``, ``faults``,
``framing_bytes``, the ``NetSpec``'s ``options``, and ``link_model`` for one that takes link
models) and returns a new ``fedsim.kernel.Network``: a ``Network`` subclass, usually.

This module imports nothing of the kernel but its errors and ``LinkModel`` (the kernel's modules
register into it).
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import inspect
import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

from .errors import NetworkConfigError
from .linkmodel import LinkModel

__all__ = [
    "ComponentRegistry", "LINK_MODEL_REGISTRY", "LinkModelEntry", "NAME_PATTERN", "TRANSPORT_REGISTRY",
    "TransportEntry", "factory_class", "factory_file", "factory_keywords", "factory_parameters",
    "register_link_model", "register_transport", "plugin_hint", "source_digest", "unknown_option",
]

NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\Z")
"""What a registered name may be: letters, digits, ``_``, ``.`` and ``-``, starting with a letter
or digit (a name is a command-line value, a grid value separated by ``,``, and part of a sweep's
folder names)."""


def plugin_hint(kind: str) -> str:
    """The end of a message for an unknown name of ``kind`` (``"link model"``, ``"transport"``):
    where one of the user's own comes from (a plug-in file that was not loaded)."""
    return f"; a {kind} in a file of your own is loaded with fedsim --plugin FILE (or FEDSIM_PLUGINS=FILE)"


@dataclass(frozen=True)
class LinkModelEntry:
    """A registered link model: ``factory()`` makes a new instance."""

    name: str
    factory: Callable[[], Any]
    description: str
    source: str | None = None  # source_digest: the plug-in's code when it was registered


@dataclass(frozen=True)
class TransportEntry:
    """A registered transport: ``factory(**kwargs)`` makes a new network. ``link_models``: the
    transport takes ``link_model=`` (a simulated one, as ``sim``); the others run with link model
    ``fifo`` only (the name stands for "no link model of its own")."""

    name: str
    factory: Callable[..., Any]
    description: str
    link_models: bool
    source: str | None = None  # source_digest: the plug-in's code when it was registered


class ComponentRegistry(Mapping):
    """Entries by name, in registration order. As a mapping it gives each name's description
    (``LINK_MODELS`` and ``TRANSPORTS`` are the two registries: ``", ".join(LINK_MODELS)``, ``name in
    TRANSPORTS``, ``TRANSPORTS["sim"]`` work as they did when they were plain dicts); ``entry(name)``
    gives the whole entry, or ``NetworkConfigError`` naming the registered names (and the closest
    one). ``kind`` (``"link model"``, ``"transport"``) and ``option`` (``--link-model``) name it in
    errors."""

    def __init__(self, kind: str, option: str) -> None:
        self.kind = kind
        self.option = option
        self._entries: dict[str, Any] = {}

    # -- the mapping: name -> description
    def __getitem__(self, name: str) -> str:
        return self.entry(name).description

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._entries

    def __repr__(self) -> str:
        return f"<{self.kind} registry: {', '.join(self._entries)}>"

    def entry(self, name: str) -> Any:
        """The entry registered as ``name``; ``NetworkConfigError`` (one line: the registered
        names, a did-you-mean) for another name."""
        found = self._entries.get(name) if isinstance(name, str) else None
        if found is None:
            raise NetworkConfigError(self.unknown(name))
        return found

    def unknown(self, name: Any, alternative: str = "") -> str:
        """The one-line message for an unknown ``name``: ``unknown link model 'fifoo'; known: fifo,
        fair, tcp; did you mean 'fifo'?; a link model in a file of your own is loaded with fedsim
        --plugin FILE (or FEDSIM_PLUGINS=FILE)`` (``alternative``, e.g. ``"a LinkModel
        instance"``, is added to the known names as ``, or ...``; the plug-in hint, as the unknown
        protocol's message has, since a plug-in not loaded is a name unknown)."""
        close = difflib.get_close_matches(name, list(self._entries), n=1) if isinstance(name, str) else []
        hint = f"; did you mean {close[0]!r}?" if close else ""
        also = f", or {alternative}" if alternative else ""
        return f"unknown {self.kind} {name!r}; known: {', '.join(self._entries)}{also}{hint}{plugin_hint(self.kind)}"

    def add(self, entry: Any, *, replace: bool = False) -> Any:
        """Register ``entry`` (its ``name`` checked). ``ValueError`` for a name already taken by
        another entry, unless ``replace``; the same entry registered again (the same file imported
        twice under two module names: a factory of the same source and the same description) is
        no error. ``TypeError`` for a ``replace`` that is not True or False."""
        if not isinstance(replace, bool):  # (replace="no" replaced)
            raise TypeError(f"register_{self.kind.replace(' ', '_')}: replace must be True or False, got "
                            f"{type(replace).__name__} {replace!r:.80}")
        old = self._entries.get(entry.name)
        if old is not None and not replace and (_source(old.factory), old.description, getattr(old, "link_models", None)) \
                != (_source(entry.factory), entry.description, getattr(entry, "link_models", None)):
            raise ValueError(f"a {self.kind} named {entry.name!r} is already registered ({old.description}); "
                             f"choose another name, or pass replace=True")
        self._entries[entry.name] = entry
        return entry

    def remove(self, name: str) -> None:
        """Forget ``name`` (tests that register a temporary one); no error if it is not there. A
        plug-in file's registration removed is no longer what this process knows: the file leaves
        ``fedsim.protocols.plugin_files()`` once none of its registrations (protocols, link models,
        transports) is held, and another process loading ``plugin_state()`` (a sweep's workers)
        forgets this one too, so that a file registering the name since does not clash there."""
        self._entries.pop(name, None)

    def entries(self) -> list[Any]:
        return list(self._entries.values())

    def snapshot(self) -> dict[str, Any]:
        """The registry as it is (for :meth:`restore`: a plug-in that fails to load is undone)."""
        return dict(self._entries)

    def restore(self, snapshot: Mapping[str, Any]) -> None:
        self._entries.clear()
        self._entries.update(snapshot)


def _source(fn: Any) -> tuple:
    """Where ``fn`` is defined (file, first line, qualname; for a class, its module and qualname;
    for a ``functools.partial``, its function's and arguments): two registrations of the same
    source are one. Anything else is only the same as itself."""
    func = getattr(fn, "func", None)
    if func is not None and hasattr(fn, "args"):  # functools.partial
        return (_source(func), repr(fn.args), repr(sorted(fn.keywords.items())))
    if isinstance(fn, type):
        try:
            return (os.path.realpath(inspect.getfile(fn)), fn.__qualname__)
        except (TypeError, OSError):
            return (fn.__module__, fn.__qualname__)
    code = getattr(fn, "__code__", None)
    if code is None:
        return (id(fn),)
    return (os.path.realpath(code.co_filename), code.co_firstlineno, getattr(fn, "__qualname__", None))


def factory_class(factory: Any) -> type | None:
    """The class a registered ``factory`` makes, when that can be told without calling it: the
    factory itself if it is a class, the class of a ``functools.partial`` of one (``partial(
    TcpNetwork, processes=2)``: a name per setting, the way before ``--transport-option``); None
    for a function. ``frames_itself``, ``factory_keywords`` and
    ``fedsim compare``'s ``takes_processes`` read it: a partial of ``TcpNetwork`` was built with
    ``framing_bytes=0`` and refused it ("framing_bytes is 25, got 0")."""
    while isinstance(factory, functools.partial):
        factory = factory.func
    return factory if isinstance(factory, type) else None


def factory_parameters(factory: Any) -> dict[str, inspect.Parameter] | None:
    """The keyword parameters ``factory`` takes, by name, as :func:`factory_keywords` finds them
    (a class's ``__init__`` and the bases' a ``**kwargs`` passes on to; the first, the subclass's,
    where two declare one name), with their annotations evaluated where they can be (a module with
    ``from __future__ import annotations`` has them as text); None where ``factory_keywords`` is.
    ``--link-option`` and ``--transport-option`` read each option's type from its annotation or
    default."""
    cls = factory_class(factory)
    if cls is None:
        chain: list = [factory]
    else:
        factory = cls
        chain = [c.__dict__["__init__"] for c in factory.__mro__ if "__init__" in c.__dict__]
    found: dict[str, inspect.Parameter] = {}
    for fn in chain:
        if fn is object.__init__:
            return found
        try:
            try:
                sig = inspect.signature(fn, eval_str=True)
            except Exception:  # (an annotation naming what its module does not define): as written
                sig = inspect.signature(fn)
            params = list(sig.parameters.values())
        except (TypeError, ValueError):
            return None
        if isinstance(factory, type):
            params = params[1:]  # (self)
        for p in params:
            if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD):
                found.setdefault(p.name, p)
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            return found
    return None


def unknown_option(kind: str, name: str, factory: Any, key: str, own: Any = (), origin: str = "") -> str | None:
    """The message for ``key`` given as an option of the registered ``kind`` (``"link model"``,
    ``"transport"``) ``name`` whose ``factory`` does not take it (``link model 'slow' takes no
    option 'rat' (its options: rate); did you mean 'rate'?``), or None when it takes it or takes any
    ``**kwargs`` (:func:`factory_keywords`); ``own``: names that are no option (the ``NetSpec``'s own
    fields), ``origin`` words after the name (``(from PATH)``)."""
    takes = factory_keywords(factory)
    if takes is None:
        return None
    takes = sorted(takes - set(own))
    if key in takes:
        return None
    close = difflib.get_close_matches(key, takes, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return (f"{kind} {name!r}{origin} takes no option {key!r} (its options: {', '.join(takes) or 'none'})"
            f"{hint}")


def factory_file(factory: Any) -> str | None:
    """The file ``factory`` (a class, a function, a ``functools.partial`` of one) is defined in, or
    None (one defined interactively)."""
    while isinstance(factory, functools.partial):
        factory = factory.func
    try:
        return inspect.getfile(factory)
    except (TypeError, OSError):
        return None


def factory_keywords(factory: Any) -> set[str] | None:
    """The keyword arguments ``factory`` takes: for a class, those of its ``__init__`` and of each
    base's that a ``**kwargs`` passes on to (``TcpNetwork``'s own, then ``Network``'s; a plug-in's
    ``SimNetwork`` subclass with ``__init__(self, *, path, **kwargs)``: ``path``, then
    ``SimNetwork``'s ``link_model``, ...); None when a ``**kwargs`` reaches no fixed signature (a
    function's own) or a signature cannot be read. ``NetSpec`` checks its options against them,
    ``register_transport`` looks for ``link_model`` among them."""
    cls = factory_class(factory)
    if cls is None:
        chain: list = [factory]
    else:  # (a partial's own keywords are its class's: they may be given again, overriding them)
        factory = cls
        chain = [c.__dict__["__init__"] for c in factory.__mro__ if "__init__" in c.__dict__]
    names: set[str] = set()
    for fn in chain:
        if fn is object.__init__:
            return names
        try:
            params = list(inspect.signature(fn).parameters.values())
        except (TypeError, ValueError):
            return None
        if isinstance(factory, type):
            params = params[1:]  # (self)
        names |= {p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            return names
    return None


_FEDSIM_DIR = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


def source_digest(registry: "ComponentRegistry", name: str) -> str | None:
    """``sha256:`` and 16 hex digits identifying what ``name`` is in ``registry`` when a plug-in
    registered it: the bytes of the file its factory is defined in, when it was registered, and, for a
    ``functools.partial``, its arguments; None for fedsim's own components, an unknown name and a
    factory with no file to read (defined interactively). A run records it beside the name
    (``NetSpec.to_dict``: ``link_model_source``, ``transport_source``), so that a sweep does not
    take a point run with another version of the plug-in for done (it did: the same name, the same
    configuration) and results.json says which code gave its times. Files at other paths with the
    same bytes (a Ray task's copy of the driver's plug-in) give the same digest."""
    return registry.entry(name).source if name in registry else None


def _digest(factory: Any) -> str | None:
    """``source_digest`` of ``factory``, read when it is registered (the code as loaded: a file
    edited during a sweep is not taken for the code the command's forked workers run)."""
    fn, extra = factory, ""
    while getattr(fn, "func", None) is not None and hasattr(fn, "args"):  # functools.partial
        extra += repr(fn.args) + repr(sorted(fn.keywords.items()))
        fn = fn.func
    try:
        path = os.path.realpath(inspect.getfile(fn))
        with open(path, "rb") as f:
            data = f.read()
    except (TypeError, OSError):
        return None
    if path.startswith(_FEDSIM_DIR + os.sep):
        return None
    return "sha256:" + hashlib.sha256(data + extra.encode()).hexdigest()[:16]


def _check(kind: str, name: Any, factory: Any, description: Any) -> None:
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise ValueError(f"{kind} name {name!r}: expected letters, digits, '_', '.' or '-', starting with a "
                         "letter or digit (it is a command-line value and part of folder names)")
    if not callable(factory):
        raise TypeError(f"{kind} {name!r}: the factory must be callable (a class, or a function returning a new "
                        f"one), got {type(factory).__name__} {factory!r}")
    if not isinstance(description, str):
        raise TypeError(f"{kind} {name!r}: the description must be a str, got {type(description).__name__}")


LINK_MODEL_REGISTRY = ComponentRegistry("link model", "--link-model")
TRANSPORT_REGISTRY = ComponentRegistry("transport", "--transport")


def register_link_model(name: str, factory: Callable[[], Any] | None = None, description: str = "", *,
                        replace: bool = False) -> Any:
    """Register a link model as ``name``: ``factory()`` makes a new ``fedsim.kernel.LinkModel``
    for each network (a ``LinkModel`` subclass whose constructor takes no arguments, or a function,
    a ``functools.partial``; ``factory(**link_options)`` with ``--link-option``s, checked against
    its signature: :func:`unknown_option`). Returns ``factory``; without it, a decorator for the class or
    function (``@register_link_model("slow", description="...")``). ``description``: one line for
    ``fedsim list``. Raises ``ValueError`` for a bad name or one already registered (``replace=True``
    overrides), ``TypeError`` for a factory that is not callable, cannot be called without
    arguments, or is a class that is not a ``LinkModel`` (its instances are checked when a network
    adopts them), and for a ``replace`` that is not True or False."""
    if factory is None:
        return lambda f: register_link_model(name, f, description, replace=replace)
    _check("link model", name, factory, description)
    if isinstance(factory, type) and not issubclass(factory, LinkModel):
        raise TypeError(f"link model {name!r}: {factory.__name__} does not subclass fedsim.kernel.LinkModel")
    try:  # (it is called with no arguments, once per network: a class needing one failed there, naming no model)
        inspect.signature(factory).bind()
    except TypeError as exc:
        what = getattr(factory, "__qualname__", None) or repr(factory)
        raise TypeError(f"link model {name!r}: the factory is called with no arguments, and {what} needs some "
                        f"({exc}); register functools.partial({what}, ...) with them, or a function") from None
    except ValueError:  # no signature to read (a builtin): called as it is
        pass
    LINK_MODEL_REGISTRY.add(LinkModelEntry(name, factory, description, _digest(factory)), replace=replace)
    return factory


def register_transport(name: str, factory: Callable[..., Any] | None = None, description: str = "", *,
                       link_models: bool | None = None, replace: bool = False) -> Any:
    """Register a transport as ``name``: ``factory(**kwargs)`` makes a new network (a
    ``fedsim.kernel.Network`` subclass, usually; the keyword arguments: ``seed``, ``profile``,
    ``faults``, ``framing_bytes`` (not for a ``TcpNetwork`` subclass: its framing is its frame
    header), the ``NetSpec``'s ``options``, and ``link_model`` when ``link_models``). ``link_models``: whether it takes a link model (default: whether the factory's
    signature has a ``link_model`` parameter, or a ``**kwargs`` that passes it on to a base's
    constructor that has one, as ``SimNetwork``'s and its subclasses' have). Returns
    ``factory``; without it, a decorator. Raises ``ValueError`` for a bad name or one already
    registered (``replace=True`` overrides), ``TypeError`` for a factory that is not callable, or
    a ``link_models`` (None aside) or ``replace`` that is not True or False."""
    if factory is None:
        return lambda f: register_transport(name, f, description, link_models=link_models, replace=replace)
    _check("transport", name, factory, description)
    if link_models is not None and not isinstance(link_models, bool):  # ("no" took a link model)
        raise TypeError(f"transport {name!r}: link_models must be True, False or None, got "
                        f"{type(link_models).__name__} {link_models!r:.80}")
    if link_models is None:
        # through the bases' constructors a **kwargs passes on to: a SimNetwork subclass whose
        # __init__ takes **kwargs was taken for one without a link model ("link model 'fair'
        # applies to the simulator only, not to transport 'record'"); a function with a **kwargs
        # of its own is not known to take one
        try:
            direct = "link_model" in inspect.signature(factory).parameters
        except (TypeError, ValueError):  # no signature to read (a builtin): no link model
            direct = False
        takes = factory_keywords(factory)
        link_models = direct or (takes is not None and "link_model" in takes)
    TRANSPORT_REGISTRY.add(TransportEntry(name, factory, description, link_models, _digest(factory)),
                           replace=replace)
    return factory
