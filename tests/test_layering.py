"""The house rules for imports, checked on every module of fedsim/: no import cycle, no import of
another module's _private name, and no simpy or asyncio in the math and protocol floors (the
actors' code must run unchanged on every transport)."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "fedsim"


def modules(root: Path = PKG) -> dict[str, Path]:
    out = {}
    for f in root.rglob("*.py"):
        parts = list(f.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def _absolute(mod: str, is_pkg: bool, level: int, name: str | None) -> str:
    if level == 0:
        return name or ""
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def imports(mods: dict[str, Path]):
    """(module, imported module, imported names) for every import statement, resolved."""
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                target = _absolute(mod, is_pkg, node.level, node.module)
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    if sub in mods:
                        yield mod, sub, None
                    else:
                        yield mod, target, alias.name
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    yield mod, alias.name, None


def edges(mods):
    g: dict[str, set[str]] = {m: set() for m in mods}
    for mod, target, _ in imports(mods):
        if target in mods and target != mod:
            g[mod].add(target)
    return g


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def private_imports(mods) -> list[str]:
    bad = []
    for mod, target, name in imports(mods):
        if name and name.startswith("_") and not name.startswith("__") and target in mods and target != mod:
            bad.append(f"{mod} imports {name} from {target}")
    return bad


def forbidden(mods, floors=("fedsim.math", "fedsim.protocols"), banned=("simpy", "asyncio")) -> list[str]:
    bad = []
    for mod, target, _ in imports(mods):
        if mod.startswith(floors) and target.split(".")[0] in banned:
            bad.append(f"{mod} imports {target}")
    return bad


def test_no_import_cycle():
    assert cycles(edges(modules())) == []


def test_no_module_imports_another_modules_private_names():
    assert private_imports(modules()) == []


def test_math_and_protocols_never_import_simpy_or_asyncio():
    mods = modules()
    assert any(m.startswith("fedsim.protocols.") for m in mods) and any(m.startswith("fedsim.math.") for m in mods)
    assert forbidden(mods) == []


def test_the_checks_find_what_they_look_for(tmp_path):
    """Each check fails on a package built to break it (so a green run means something)."""
    pkg = tmp_path / "fedsim"
    (pkg / "math").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "math" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import thing\n")
    (pkg / "b.py").write_text("from . import a\nfrom .c import _secret\n")
    (pkg / "c.py").write_text("_secret = 1\n")
    (pkg / "math" / "m.py").write_text("import asyncio\nimport simpy.events\n")
    mods = modules(pkg)
    assert cycles(edges(mods)) == [["fedsim.a", "fedsim.b"]]
    assert private_imports(mods) == ["fedsim.b imports _secret from fedsim.c"]
    assert forbidden(mods) == ["fedsim.math.m imports asyncio", "fedsim.math.m imports simpy.events"]
