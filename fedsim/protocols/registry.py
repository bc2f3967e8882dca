"""The protocol registry: the one list of protocols that the CLI, the studies, the traces, the
docs and the tests read.

Protocol modules fill it themselves: each calls ``register(ProtocolSpec(...))`` at import (the
built-in ones are imported by ``fedsim.protocols``). A protocol outside the package is a plug-in:
a Python file named with ``--plugin PATH`` on the command line or in the ``FEDSIM_PLUGINS``
environment variable (paths separated by ``os.pathsep``), or a module an installed package
declares under one of the entry-point groups ``PLUGIN_GROUPS`` (``fedsim.protocols``,
``fedsim.link_models``, ``fedsim.transports``). ``load_plugins`` imports them; their
``register`` calls do the rest. A plug-in may equally register link models and transports
(``fedsim.kernel.register_link_model``, ``register_transport``: the kernel's registries, which
``--link-model`` and ``--transport`` read); the group an entry point is declared in only says
what it is for: every group's modules are imported alike, each once.

What each plug-in file registered is recorded as it loads, so that another process (a Ray task, a
pool worker started by spawn or forkserver) can be brought to know exactly what this one knows:
:func:`plugin_state` says it (the files still contributing, what each registered, and who holds
each of those names now), :func:`load_plugin_state` does it there. A registration later removed
(``REGISTRY.remove``, ``LINK_MODEL_REGISTRY.remove``) or replaced by another source is not held
any more, and a file none of whose registrations is held is no longer listed (:func:`plugin_files`).
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.util
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from ..kernel.registry import LINK_MODEL_REGISTRY, TRANSPORT_REGISTRY
from .contract import ProtocolSpec

__all__ = ["PLUGIN_GROUPS", "PluginState", "REGISTRY", "Registry", "all_or_nothing", "entry_points_loaded",
           "load_plugin_state", "load_plugins", "plugin_files", "plugin_state", "register"]


def protocol_key(name: str) -> str:
    """``name`` as protocol names are spelt, to suggest one for a mistyped name: lower case,
    ``++`` as ``pp`` (``FedRec++`` -> ``fedrecpp``)."""
    return name.strip().lower().replace("++", "pp")


# the entry-point groups whose modules load_plugins imports (any of them may register protocols,
# link models and transports alike; a module declared in several is imported once)
PLUGIN_GROUPS = ("fedsim.protocols", "fedsim.link_models", "fedsim.transports")


class Registry:
    """Protocol specs by name, in registration order. ``REGISTRY[name]`` raises ``KeyError``
    with the known names and the closest (as the kernel's registries' ``entry``); iterating
    yields the names."""

    def __init__(self) -> None:
        self._specs: dict[str, ProtocolSpec] = {}

    def add(self, spec: ProtocolSpec, *, replace: bool = False) -> ProtocolSpec:
        """Register ``spec``, as :func:`register` (its raises)."""
        if not isinstance(spec, ProtocolSpec):
            raise TypeError(f"register() takes a ProtocolSpec, got {type(spec).__name__} {spec!r:.80}")
        if not isinstance(replace, bool):  # (replace="no" replaced)
            raise TypeError(f"register: replace must be True or False, got {type(replace).__name__} {replace!r:.80}")
        old = self._specs.get(spec.name)
        if old is not None and old is not spec and not replace:
            # the same file imported twice under two module names registers an equal spec: fine.
            # "Equal" is the same source (file and line of build), not the same qualname and
            # summary: a plug-in that copies a built-in spec with its own function named build
            # had both and silently replaced the built-in.
            if (_source(old.build), old.summary) != (_source(spec.build), spec.summary):
                # (as the kernel's registries say it: what has the name, and the way out)
                raise ValueError(f"a protocol named {spec.name!r} is already registered ({old.summary}); "
                                 "choose another name, or pass replace=True")
        self._specs[spec.name] = spec
        return spec

    def remove(self, name: str) -> None:
        """Forget a protocol (tests that register a temporary one); no error if it is not there.
        A plug-in file's protocol removed is no longer what this process knows: a file none of whose
        registrations (protocols, link models, transports) is still held leaves
        :func:`plugin_files`, and one that keeps others stays, :func:`plugin_state` saying that
        this one is gone, so that another process loading the same files (a sweep's workers)
        forgets it too (another file registering the name later clashed there with it)."""
        self._specs.pop(name, None)

    def closest(self, name: object) -> str | None:
        """The registered protocol a mistyped ``name`` most likely means (None: none is close):
        compared as ``protocol_key`` spells it, so the papers' ``FedRec++`` is ``fedrecpp`` (it
        was 'fedrec', the other protocol)."""
        if not isinstance(name, str):
            return None
        close = difflib.get_close_matches(protocol_key(name), list(self._specs), n=1)
        return close[0] if close else None

    def __getitem__(self, name: str) -> ProtocolSpec:
        try:
            return self._specs[name]
        except KeyError:
            close = self.closest(name)
            hint = f"; did you mean {close!r}?" if close else ""
            raise KeyError(f"unknown protocol {name!r}; known: {', '.join(self._specs)}{hint}") from None
        except TypeError:  # unhashable: "unhashable type: 'list'"
            raise KeyError(f"unknown protocol {name!r}: a protocol name is a str") from None

    def get(self, name: str) -> ProtocolSpec | None:
        return self._specs.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._specs))

    def __len__(self) -> int:
        return len(self._specs)

    def specs(self) -> list[ProtocolSpec]:
        return list(self._specs.values())


def _source(fn) -> tuple:
    """Where ``fn`` is defined: (file, first line, qualname); a callable without code (an
    object with ``__call__``) is only the same as itself."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return (id(fn),)
    # realpath: the same file reached through a symbolic link or a relative sys.path entry
    return (os.path.realpath(code.co_filename), code.co_firstlineno, getattr(fn, "__qualname__", None))


REGISTRY = Registry()


def register(spec: ProtocolSpec, *, replace: bool = False) -> ProtocolSpec:
    """Add ``spec`` to ``REGISTRY`` and return it (so a module can write
    ``SPEC = register(ProtocolSpec(...))``). Raises ``TypeError`` for a ``spec`` that is not a
    ``ProtocolSpec`` or a ``replace`` that is not True or False, and ``ValueError`` if another
    protocol already has that name (``a protocol named 'x' is already registered (its summary);
    choose another name, or pass replace=True``, as the kernel's link-model and transport
    registries say it; ``replace=True`` overrides; the same spec, or one from the same source,
    registered again is no error)."""
    return REGISTRY.add(spec, replace=replace)


_loaded: set[str] = set()
_files: list[str] = []  # the plug-in files loaded, in load order
_entry_points: list[bool] = [False]  # whether load_plugins has loaded the entry points' plug-ins
_entry_points_at: list[int] = [0]  # how many of _files had loaded when it first did
# what each plug-in file registered as it loaded: path -> [(kind, name, entry, displaced)]: kind
# "protocol", "link model" or "transport", entry the object registered (the spec, the kernel
# registry's entry), displaced whether the name was held by another entry when the file registered it
_registered: dict[str, list[tuple[str, str, Any, bool]]] = {}
_KERNEL = (LINK_MODEL_REGISTRY, TRANSPORT_REGISTRY)


def _holdings() -> dict[tuple[str, str], Any]:
    """Every registration this process holds: ``(kind, name) -> entry``."""
    held: dict[tuple[str, str], Any] = {("protocol", n): s for n, s in REGISTRY._specs.items()}
    for registry in _KERNEL:
        held.update({(registry.kind, n): e for n, e in registry.snapshot().items()})
    return held


def _put(key: tuple[str, str], entry: Any) -> None:
    """Make ``entry`` the registration of ``key`` (``(kind, name)``); None: none."""
    kind, name = key
    if kind == "protocol":
        specs = REGISTRY._specs
    else:
        registry = next(r for r in _KERNEL if r.kind == kind)
        specs = registry.snapshot()
    if entry is None:
        specs.pop(name, None)
    else:
        specs[name] = entry
    if kind != "protocol":
        registry.restore(specs)


def _listed(now: dict[tuple[str, str], Any]) -> list[str]:
    """The loaded files but those that registered something none of which ``now`` holds."""
    out = []
    for f in _files:
        held = [now.get((k, n)) is e for k, n, e, _ in _registered.get(f, ())]
        if not held or any(held):
            out.append(f)
    return out


def plugin_files() -> list[str]:
    """The plug-in files :func:`load_plugins` has loaded in this process (absolute paths, in
    load order) and that still contribute: what another process must load to know the same
    protocols (a Ray worker, a pool worker started by spawn or forkserver:
    ``fedsim.studies.parallel.pmap``). A file that registered protocols, link models or transports
    none of which this process still holds as it registered them (each removed: ``REGISTRY.remove``,
    ``LINK_MODEL_REGISTRY.remove``, ``TRANSPORT_REGISTRY.remove``; or replaced by another source's
    registration of the name) is left out: loaded there, it registered names the other process
    then had twice (``a protocol named 'x' is already registered`` when another file registered the
    name since). A file that keeps one of its registrations stays, whatever else of it was
    removed (and a file that registered nothing stays: what it did is not known): to have the other
    process forget those too, hand it :func:`plugin_state` (:func:`load_plugin_state`), as the
    sweeps' workers do; ``load_plugins(plugin_files())`` loads the files as they are."""
    return _listed(_holdings())


@dataclass(frozen=True)
class PluginState:
    """What another process loads to know exactly the plug-ins this one knows: made by
    :func:`plugin_state`, loaded by :func:`load_plugin_state`; picklable (paths and names only).

    ``files``: :func:`plugin_files`. ``registered``: for each file, what it registered when it
    loaded here, ``(kind, name, displaced)`` (kind ``"protocol"``, ``"link model"`` or
    ``"transport"``; ``displaced``: the name was held by another registration then, which the file
    replaced with ``replace=True``). ``holders``: for every name a plug-in file loaded here
    registered (listed or not), in the order first registered, ``(kind, name, holder)``: the file
    whose registration of it this process holds now, ``""`` another source's (a built-in, an entry
    point, one the program registered itself), None none (removed). ``entry_points``:
    :func:`entry_points_loaded`; ``entry_points_at``: how many of ``files`` had loaded when the
    entry points did (a file loaded after them may have replaced one of their names)."""

    files: tuple[str, ...] = ()
    registered: tuple[tuple[tuple[str, str, bool], ...], ...] = ()
    holders: tuple[tuple[str, str, str | None], ...] = ()
    entry_points: bool = False
    entry_points_at: int = 0


def plugin_state() -> PluginState:
    """The plug-ins this process has loaded, as another process loads them
    (:func:`load_plugin_state`) to know the same protocols, link models and transports, each from
    the same file: the pool workers of ``fedsim.studies.parallel.pmap`` started by spawn or
    forkserver, a sweep's Ray tasks. See :class:`PluginState`."""
    now = _holdings()
    files = _listed(now)
    owner: dict[tuple[str, str], str | None] = {}
    for f in _files:
        for k, n, e, _ in _registered.get(f, ()):
            if now.get((k, n)) is e:
                owner[(k, n)] = f
            else:
                owner.setdefault((k, n), None)
    return PluginState(
        files=tuple(files),
        registered=tuple(tuple((k, n, d) for k, n, _, d in _registered.get(f, ())) for f in files),
        holders=tuple((k, n, f if f is not None else ("" if (k, n) in now else None)) for (k, n), f in owner.items()),
        entry_points=_entry_points[0],
        entry_points_at=sum(1 for f in files if _files.index(f) < _entry_points_at[0]) if _entry_points[0] else 0)


def load_plugin_state(state: PluginState, files: Sequence[str | Path] | None = None) -> list[str]:
    """Load, in this process, the plug-ins of another's :func:`plugin_state`, so that this one
    knows the same protocols, link models and transports, each from the same file: its files and
    its entry points if it loaded them, in its order (not ``$FEDSIM_PLUGINS``: the other's were
    among its files). ``files``: the same files at other paths, one for each of ``state.files``
    (a Ray task's copies). Returns the names of the protocols that became registered.

    What the other process had removed or replaced since a file loaded there is so here too: a
    name a file registered when the other had it free is freed before that file loads (a file
    whose registration of it had been removed there, loaded first, held it: ``a protocol named
    'x' is already registered``); once the files are loaded, each name a file registered there is
    held by the file that holds it there, or removed if nothing holds it there, or, held there by
    another source (a built-in put back), is what it was here before (registrations the other
    process made itself, not from a file, are not carried). A file already loaded here is not
    loaded again, so a process that runs several tasks (a Ray worker) may load the same state
    each time. Raises ``TypeError`` for a ``state`` that is not a ``PluginState`` or ``files`` given
    as one path, ``ValueError`` for ``files`` not one per file of the state, and what
    :func:`load_plugins` raises."""
    if not isinstance(state, PluginState):
        raise TypeError(f"load_plugin_state takes a PluginState (plugin_state()), got {type(state).__name__}")
    given = state.files if files is None else files
    if isinstance(given, (str, bytes, os.PathLike)):
        raise TypeError(f"load_plugin_state takes a list of paths, got the single path {given!r}; write [{given!r}]")
    paths = [str(Path(p).expanduser().resolve()) for p in given]
    if len(paths) != len(state.files):
        raise ValueError(f"load_plugin_state: {len(paths)} files given for the state's {len(state.files)}")
    where = dict(zip(state.files, paths))
    before = set(REGISTRY)
    base = _holdings()  # (and what the entry points register: another source's)

    def entry_points() -> None:
        held = _holdings()
        _load_entry_points()
        base.update({key: e for key, e in _holdings().items() if held.get(key) is not e})

    for i, path in enumerate(paths):
        if state.entry_points and i == state.entry_points_at:
            entry_points()
        registered = state.registered[i] if i < len(state.registered) else ()  # (a state made by hand: files only)
        _load_file(path, free=[(k, n) for k, n, displaced in registered if not displaced])
    if state.entry_points and state.entry_points_at >= len(paths):
        entry_points()
    now = _holdings()

    def from_files(entry: Any) -> bool:
        return entry is not None and any(e is entry for p in paths for _, _, e, _ in _registered.get(p, ()))

    for kind, name, holder in state.holders:
        key = (kind, name)
        want = now.get(key)
        if holder is None:
            want = None
        elif holder == "":
            if from_files(want):
                want = None if from_files(base.get(key)) else base.get(key)
        else:
            want = next((e for k, n, e, _ in _registered.get(where.get(holder, ""), ()) if (k, n) == key), want)
        if now.get(key) is not want:
            _put(key, want)
    return [n for n in REGISTRY if n not in before]


def entry_points_loaded() -> bool:
    """Whether :func:`load_plugins` has loaded the plug-ins installed packages declare (entry
    points) in this process: with :func:`plugin_files`, what another process loads to know the
    same protocols, link models and transports (``load_plugins(plugin_files(),
    entry_points=entry_points_loaded())``; :func:`plugin_state` holds both)."""
    return _entry_points[0]


def load_plugins(paths: Iterable[str | Path] = (), *, entry_points: bool = True) -> list[str]:
    """Import plug-ins (protocols, link models, transports): each file of ``paths`` and of
    ``$FEDSIM_PLUGINS``, and (with ``entry_points``) every module declared under the entry-point
    groups ``PLUGIN_GROUPS`` (``fedsim.protocols``, ``fedsim.link_models``, ``fedsim.transports``).
    Returns the names of the protocols that became registered (the link models and transports a
    plug-in registered are in ``fedsim.kernel.LINK_MODELS`` and ``TRANSPORTS``). A file already loaded in this
    process is not loaded again. What each file registers is recorded (:func:`plugin_files`,
    :func:`plugin_state`: another process is brought to know the same; a registration removed
    later is not carried there). Raises ``TypeError`` for ``paths`` given as one str or path
    (its characters were taken for paths: "no plug-in file at /"; pass a list),
    ``FileNotFoundError`` for a missing file (or a folder); an error inside a plug-in propagates
    (Python's traceback names its line; a note added to the exception names the plug-in file and
    the line of it the error came from: ``(while loading the plug-in file PATH, line N: nothing of
    it was kept)``) and
    the plug-in is left entirely unloaded: no module of it in ``sys.modules`` (for an entry point,
    its package and the submodules it imported, those this load added), none of the
    protocols, link models or transports it registered before the error (a protocol it replaced is back), so that it can
    be loaded again once fixed."""
    if isinstance(paths, (str, bytes, os.PathLike)):
        raise TypeError(f"load_plugins takes a list of paths, got the single path {paths!r}; write [{paths!r}]")
    before = set(REGISTRY)
    env = [p for p in os.environ.get("FEDSIM_PLUGINS", "").split(os.pathsep) if p.strip()]
    for p in [*paths, *env]:
        _load_file(p)
    if entry_points:
        _load_entry_points()
    return [n for n in REGISTRY if n not in before]


def _load_file(p: str | Path, free: Iterable[tuple[str, str]] = ()) -> None:
    """Load the plug-in file ``p`` (nothing if loaded), recording what it registers; ``free``: the
    ``(kind, name)`` registrations to forget first (:func:`load_plugin_state`; back if it fails)."""
    path = Path(p).expanduser().resolve()
    if str(path) in _loaded:
        return
    if not path.is_file():
        raise FileNotFoundError(f"no plug-in file at {p}")
    # the module name holds a digest of the whole path: two plug-ins named alike in two
    # folders (a/proto.py, b/proto.py) shared fedsim_plugin_proto, so the second replaced
    # the first in sys.modules and the first's classes no longer pickled (worker processes)
    digest = hashlib.blake2b(str(path).encode("utf-8"), digest_size=4).hexdigest()
    name = f"fedsim_plugin_{path.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    # "plug-in file", whatever it registers (it was "protocol plug-in file" for one of a link
    # model or a transport only); path: the note names the line the error came from
    with all_or_nothing(f"the plug-in file {path}", path=path):
        for key in free:
            _put(key, None)
        held, first = _holdings(), len(_files)
        sys.modules[name] = mod  # so dataclasses and worker processes can find it
        spec.loader.exec_module(mod)
        # its own: what changed, but what the plug-in files it loaded itself registered
        nested = {(k, n): e for f in _files[first:] for k, n, e, _ in _registered.get(f, ())}
        _registered[str(path)] = [(k, n, e, (k, n) in held) for (k, n), e in _holdings().items()
                                  if held.get((k, n)) is not e and nested.get((k, n)) is not e]
    _loaded.add(str(path))
    _files.append(str(path))


def _load_entry_points() -> None:
    """Import the modules of the entry-point groups ``PLUGIN_GROUPS`` not imported yet."""
    from importlib.metadata import entry_points as eps

    if not _entry_points[0]:
        _entry_points_at[0] = len(_files)
    for group in PLUGIN_GROUPS:
        for ep in eps(group=group):
            if ep.value not in _loaded:
                kind = group.removeprefix("fedsim.").rstrip("s").replace("_", "-")  # protocol, link-model, transport
                with all_or_nothing(f"the {kind} plug-in module {ep.value} (entry point {ep.name!r})",
                                     _own_package(ep.module)):
                    ep.load()
                _loaded.add(ep.value)
    _entry_points[0] = True


def _entry_module(value: str) -> str:
    """The module an entry point's ``value`` (``module``, ``module:attr``, with ``[extras]``) names."""
    from importlib.metadata import EntryPoint

    return EntryPoint(name="", value=value, group="").module


def _own_package(module: str) -> str:
    """The package whose modules an entry-point plug-in ``module`` brings: its top-level package
    (``acme.proto``: ``acme``), or, for one inside fedsim, ``module`` itself (a fedsim module the
    plug-in imported first is fedsim's, not the plug-in's)."""
    top = module.partition(".")[0]
    return module if top == "fedsim" else top


@contextmanager
def all_or_nothing(what: str, package: str | None = None, *, module: str | None = None,
                   path: str | Path | None = None) -> Iterator[None]:
    """Load a plug-in (``what`` names it) entirely or not at all: one that raises leaves no module
    of its own behind in ``sys.modules`` (a half-initialised one stayed there, found by whatever
    imported it by name later), and the registry as it was before it (its ``register`` calls made
    before the error were kept: a protocol whose module had failed, and a fixed file loaded again
    was refused as 'already registered' once its ``build`` had moved). Its own modules are a plug-in
    file's (``fedsim_plugin_*``), ``module`` (another module name the load puts into ``sys.modules``:
    ``fedsim.experiment.load_scenario``'s ``fedsim_scenario_*``) and those of ``package`` (an entry
    point's: its package and the submodules it had imported stayed, so that, loaded again once
    mended, it found the stale ones) and of the entry points it loaded itself (a plug-in file or
    scenario that calls :func:`load_plugins`: loaded again, their import found the stale modules and
    registered nothing), each only if this load added or replaced it (one replaced gets
    its module of before back; a module of another package, such as NumPy, stays). The link models
    and transports it registered are undone too, and plug-ins it loaded itself are forgotten with
    it (:func:`plugin_files`, :func:`plugin_state` and :func:`entry_points_loaded` say what they
    said before). The error is re-raised with a note naming ``what`` (and, given the loaded file's ``path``,
    the line of it the error came from)."""
    specs = dict(REGISTRY._specs)
    kernel = [(r, r.snapshot()) for r in (LINK_MODEL_REGISTRY, TRANSPORT_REGISTRY)]
    loaded, files, entry_points, entry_points_at = set(_loaded), list(_files), _entry_points[0], _entry_points_at[0]
    registered = dict(_registered)
    modules = dict(sys.modules)
    try:
        yield
    except BaseException as exc:
        # the entry points this load loaded itself (a plug-in file or scenario calling load_plugins):
        # their packages' modules go too, or loaded again they would be found in sys.modules and not
        # run (their protocols never registered again, an updated package not read)
        packages = {_own_package(_entry_module(v)) for v in _loaded - loaded - set(_files)}
        if package is not None:
            packages.add(package)
        REGISTRY._specs.clear()
        REGISTRY._specs.update(specs)
        for registry, snapshot in kernel:
            registry.restore(snapshot)
        _loaded.clear()
        _loaded.update(loaded)
        _files[:] = files
        _registered.clear()
        _registered.update(registered)
        _entry_points_at[0] = entry_points_at
        _entry_points[0] = entry_points  # (entry_points_loaded: as _loaded, what it said before)
        own = [n for n, m in list(sys.modules.items()) if modules.get(n) is not m and (
            n.startswith("fedsim_plugin_") or n == module
            or n in packages or any(n.startswith(p + ".") for p in packages))]
        for name in own:
            mod = sys.modules.pop(name)
            old = modules.get(name)
            if old is not None:
                sys.modules[name] = old
            parent, _, child = name.rpartition(".")
            if parent in sys.modules and getattr(sys.modules[parent], child, None) is mod:
                if old is not None:
                    setattr(sys.modules[parent], child, old)
                else:
                    delattr(sys.modules[parent], child)  # (a package that stays: no attribute of a removed module)
        line = _line_in(exc, path) if path is not None else None
        exc.add_note(f"(while loading {what}{'' if line is None else f', line {line}'}: nothing of it was kept)")
        raise


def _line_in(exc: BaseException, path: str | Path) -> int | None:
    """The line of the file ``path`` that ``exc`` was raised from: its innermost frame in that file
    (a function the file defined and called), or, for a ``SyntaxError`` in it, the line Python
    could not parse; None if the error did not come from that file."""
    want = os.path.realpath(path)
    if isinstance(exc, SyntaxError) and exc.filename and os.path.realpath(exc.filename) == want:
        return exc.lineno
    line, tb = None, exc.__traceback__
    while tb is not None:
        if os.path.realpath(tb.tb_frame.f_code.co_filename) == want:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line
