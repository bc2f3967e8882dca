"""Finding and importing scenarios: by name from ``fedsim.scenarios`` (the repository's
``scenarios/`` folder) or from a path to a script."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

from .errors import UsageError

from .naming import scenario_name

__all__ = ["SCENARIO_PACKAGE", "first_sentence", "list_scenarios", "load_scenario", "scenario_name", "scenario_run_times",
           "unknown_scenario"]

SCENARIO_PACKAGE = "fedsim.scenarios"


def _scenario_package():
    """The ``fedsim.scenarios`` package, or None.

    Installed, it is the repository's ``scenarios/`` folder mapped into the package. In a source
    checkout (``fedsim/`` with ``scenarios/`` beside it) it is that ``scenarios/`` folder,
    registered as ``fedsim.scenarios`` here, whatever an import hook says: running ``python -m
    fedsim`` from the repository root imports that ``fedsim/`` (the working directory comes first
    on sys.path), and

    - without an install, ``fedsim.scenarios`` does not exist as such (listing and importing
      disagreed: ``unknown scenario quickstart; known: ... quickstart``);
    - with an editable install of another checkout (a second clone, a ``git worktree``), its
      import hook maps ``fedsim.scenarios`` to *that* checkout's folder: ``fedsim run NAME`` ran
      the other checkout's scenario with this checkout's fedsim (and tests of this checkout's
      scenarios by name tested the other's)."""
    here = (Path(__file__).resolve().parents[2] / "scenarios").resolve()
    init = here / "__init__.py"
    pkg = sys.modules.get(SCENARIO_PACKAGE)
    if not init.is_file():
        if pkg is not None:
            return pkg
        try:
            return importlib.import_module(SCENARIO_PACKAGE)
        except ModuleNotFoundError as exc:
            if exc.name not in (SCENARIO_PACKAGE, None):
                raise
        return None
    if pkg is not None and any(Path(p).resolve() == here for p in getattr(pkg, "__path__", ())):
        return pkg
    if pkg is not None:  # another checkout's, imported through its import hook: forget it and its scenarios
        for key in [k for k in sys.modules if k == SCENARIO_PACKAGE or k.startswith(SCENARIO_PACKAGE + ".")]:
            del sys.modules[key]
    spec = importlib.util.spec_from_file_location(SCENARIO_PACKAGE, init, submodule_search_locations=[str(here)])
    pkg = importlib.util.module_from_spec(spec)
    sys.modules[SCENARIO_PACKAGE] = pkg
    try:
        spec.loader.exec_module(pkg)
    except BaseException:
        del sys.modules[SCENARIO_PACKAGE]
        raise
    import fedsim

    fedsim.scenarios = pkg
    return pkg


def _scenario_dirs() -> list[Path]:
    pkg = _scenario_package()
    return [Path(p) for p in pkg.__path__] if pkg is not None else []


def scenario_run_times() -> dict[str, str]:
    """``{name: RUN_TIME}`` of the scenarios that declare one (a module-level string such as
    ``"about 15 s by default; 20 min at paper scale (MovieLens 100K)"``), read without importing."""
    out: dict[str, str] = {}
    for d in _scenario_dirs():
        for f in sorted(d.glob("*.py")):
            if f.name.startswith("_") or f.stem in out:
                continue
            try:
                tree = ast.parse(f.read_text(encoding="utf-8"))
            except SyntaxError:
                continue
            for node in tree.body:
                if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "RUN_TIME" for t in node.targets) \
                        and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                    out[f.stem] = node.value.value
    return out


def list_scenarios() -> list[tuple[str, str]]:
    """``(name, one-line description)`` of every scenario, sorted by name."""
    seen: dict[str, str] = {}
    for d in _scenario_dirs():
        for f in sorted(d.glob("*.py")):
            if f.name.startswith("_") or f.stem in seen:
                continue
            seen[f.stem] = _first_docline(f)
    return sorted(seen.items())


def _first_docline(path: Path) -> str:
    try:
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    except SyntaxError:
        return "(cannot parse)"
    return first_sentence(doc)


def first_sentence(doc: str) -> str:
    """The docstring's first paragraph up to its first full stop, on one line (summaries in
    ``fedsim list`` may wrap over several source lines)."""
    para = " ".join(doc.strip().split("\n\n")[0].split())
    for i, ch in enumerate(para):
        if ch == "." and (i + 1 == len(para) or para[i + 1] == " "):
            return para[: i + 1]
    return para


def unknown_scenario(name: str) -> str:
    """The message for a name that is neither a scenario nor a protocol, with the closest ones."""
    import difflib

    from ..protocols import REGISTRY
    from ..protocols.registry import protocol_key

    scenarios = [n for n, _ in list_scenarios()]
    # (as protocol names are spelt: 'fedrec++' and 'FedRec++' were told "did you mean 'fedrec'?", or nothing)
    close = difflib.get_close_matches(protocol_key(name), scenarios + list(REGISTRY), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return (f"unknown scenario or protocol {name!r}{hint} (scenarios: {', '.join(scenarios)}; "
            f"protocols: {', '.join(REGISTRY)}; a protocol in a file of your own: fedsim --plugin FILE run NAME)")


def _not_a_script(path: str) -> UsageError:
    hint = f"; a TOML run or sweep file is read with --config {path}" if path.endswith(".toml") else ""
    return UsageError(f"{path} is not a scenario script (a .py file){hint}")


def load_scenario(name_or_path: str) -> ModuleType:
    """Import a scenario by name (``fedrec_table2``), by path to a ``.py`` file, or make the
    scenario of a registered protocol (``fedrec``: one run of it, see ``protocol_run``).
    Raises ``UsageError`` if there is none. A script that raises while it is imported leaves
    nothing behind (``fedsim.protocols.registry.all_or_nothing``): its module is not in
    ``sys.modules`` (one that was there before, an earlier load's, is back), and the protocols,
    link models, transports and plug-ins it registered or loaded before the error are undone; the
    error propagates (its traceback names the script's line) with a note naming the script and
    the line. A plug-in file given as a scenario path (it registers protocols, link models or
    transports, and has no ``run`` and ``PARAMS``) is refused with a ``UsageError`` saying how to
    load it with ``--plugin``, and undone the same way; so is a script that is neither, and a
    file that is no ``.py`` file (a TOML run file: the message says ``--config``). Raises
    ``TypeError`` for a ``name_or_path`` that is no str."""
    if not isinstance(name_or_path, str):  # (Path(5): "expected str, bytes or os.PathLike object, not int")
        raise TypeError(f"load_scenario takes a scenario's name or path (str), got {type(name_or_path).__name__} "
                        f"{name_or_path!r:.80}")
    p = Path(name_or_path)
    if p.suffix == ".py" or os.sep in name_or_path or "/" in name_or_path:
        if not p.is_file():
            raise UsageError(f"no scenario script at {name_or_path}")
        if p.suffix != ".py":
            # importlib found no loader for it: "'NoneType' object has no attribute 'loader'"
            raise _not_a_script(name_or_path)
        from ..kernel.registry import LINK_MODEL_REGISTRY, TRANSPORT_REGISTRY
        from ..protocols import REGISTRY
        from ..protocols.registry import all_or_nothing

        spec = importlib.util.spec_from_file_location(f"fedsim_scenario_{p.stem}", p)
        mod = importlib.util.module_from_spec(spec)
        before = {n: REGISTRY.get(n) for n in REGISTRY}
        kernel = [(r, r.snapshot()) for r in (LINK_MODEL_REGISTRY, TRANSPORT_REGISTRY)]
        # a script that raises while it runs is undone as a plug-in that does: its half-initialised
        # module left in sys.modules (found by name by whatever loaded it next: dataclasses, a
        # pool's workers, another load in the same process), and what it registered before the
        # error (a fixed script loaded again was refused as 'already registered'). A plug-in
        # given as a scenario is refused inside the block, so undone alike (imported as a
        # scenario: not loaded as a plug-in, so not kept): its protocols, link models,
        # transports, the plug-in files it loaded itself, and its module (an earlier load's back)
        with all_or_nothing(f"the scenario script {name_or_path}", module=spec.name, path=p):
            sys.modules[spec.name] = mod  # so multiprocessing workers and dataclasses can find it
            spec.loader.exec_module(mod)
            if not hasattr(mod, "run") or not hasattr(mod, "PARAMS"):
                # added, or registered again (a plug-in file that --plugin or an entry point had
                # loaded already: the same spec, no new name, taken for a broken scenario)
                added = [n for n in REGISTRY if REGISTRY.get(n) is not before.get(n)]
                components = [(r, n) for r, snap in kernel for n in r if n not in snap]
                if added or components:  # a plug-in (writing-a-protocol.md, network-model.md) given as a scenario
                    names = [repr(n) for n in added] + [f"{r.kind} {n!r}" for r, n in components]
                    if added:
                        what, how = "a protocol plug-in", f"run it with fedsim --plugin {name_or_path} run {added[0]}"
                    else:
                        r, n = components[0]
                        what, how = "a plug-in", f"use it with fedsim --plugin {name_or_path} run SCENARIO {r.option} {n}"
                    raise UsageError(f"{name_or_path} is not a fedsim scenario but {what} (it registers "
                                     f"{', '.join(names)}): {how}")
                # neither (refused here too, so undone: its module stayed in sys.modules, with the
                # plug-in files it had loaded itself)
                raise UsageError(f"{name_or_path} is not a fedsim scenario (it needs PARAMS and run(ctx))")
    else:
        from ..protocols import REGISTRY

        if name_or_path in REGISTRY:  # any registered protocol runs as a scenario of its own
            # a plug-in protocol named like a scenario (say 'quickstart') would silently run
            # instead of it: refuse the ambiguity rather than pick one
            if name_or_path.isidentifier() and any((d / f"{name_or_path}.py").is_file() for d in _scenario_dirs()):
                raise UsageError(f"{name_or_path!r} is both a scenario and a registered protocol (a plug-in's?); "
                                 "rename the protocol, or run the scenario by its path")
            from .protocol_run import protocol_scenario

            return protocol_scenario(name_or_path)
        if not name_or_path.isidentifier():
            if p.suffix and p.is_file():  # run.toml in the working folder: said unknown scenario 'run.toml'
                raise _not_a_script(name_or_path)
            raise UsageError(unknown_scenario(name_or_path))
        _scenario_package()
        try:
            mod = importlib.import_module(f"{SCENARIO_PACKAGE}.{name_or_path}")
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith(SCENARIO_PACKAGE):
                raise UsageError(unknown_scenario(name_or_path)) from None
            raise
    if not hasattr(mod, "run") or not hasattr(mod, "PARAMS"):
        raise UsageError(f"{name_or_path} is not a fedsim scenario (it needs PARAMS and run(ctx))")
    return mod
