"""Scenarios are leaves: what two scenarios share lives in fedsim.studies, never in a scenario
that the other imports (a scenario's module-level code would then run inside the other)."""

import ast
from pathlib import Path

import pytest

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
NAMES = sorted(p.stem for p in SCENARIOS.glob("*.py") if p.stem != "__init__")


def _imported_modules(tree: ast.AST) -> list[str]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            out.append(base)
            # `from fedsim.scenarios import x` and `from . import x` name the scenario in the alias
            out += [f"{base}.{a.name}" if base.strip(".") else base + a.name for a in node.names]
    return out


def _offends(module: str) -> bool:
    if module.startswith("."):  # relative: within the scenarios package
        return True
    parts = module.split(".")
    return (module == "fedsim.scenarios" or module.startswith("fedsim.scenarios.") or parts[0] == "scenarios"
            or parts[0] in NAMES or parts[0].startswith("fedsim_scenario_"))


@pytest.mark.parametrize("name", NAMES)
def test_no_scenario_imports_another_scenario(name):
    tree = ast.parse((SCENARIOS / f"{name}.py").read_text(encoding="utf-8"))
    bad = sorted({m for m in _imported_modules(tree) if _offends(m)})
    assert not bad, f"scenarios/{name}.py imports {bad}; move what it shares into fedsim.studies"


def test_the_check_catches_each_form():
    for src in ("import fedsim.scenarios.quickstart", "from fedsim.scenarios import quickstart", "from fedsim.scenarios.quickstart import x",
                "from . import quickstart", "from .quickstart import x", "import quickstart", "from scenarios.quickstart import x"):
        assert any(_offends(m) for m in _imported_modules(ast.parse(src))), src
    for src in ("import fedsim.studies.personalfr", "from fedsim.experiment import Param", "import numpy as np"):
        assert not any(_offends(m) for m in _imported_modules(ast.parse(src))), src
