"""Packaging: every package is listed in pyproject.toml and scenarios ship with fedsim."""

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_every_package_is_listed_in_pyproject():
    conf = tomllib.loads((REPO / "pyproject.toml").read_text())
    listed = set(conf["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "fedsim").rglob("__init__.py")}
    found.add("fedsim.scenarios")
    assert found == listed, f"pyproject packages differ: missing {found - listed}, stale {listed - found}"
    assert conf["tool"]["setuptools"]["package-dir"]["fedsim.scenarios"] == "scenarios"


def test_readme_opens_with_the_two_commands_and_ci_runs_the_second():
    readme = (REPO / "README.md").read_text()
    block = readme.split("```", 2)[1].splitlines()
    commands = [line.strip() for line in block[1:] if line.strip() and not line.startswith("#")]
    assert commands[0].endswith("fedsim run")
    test_cmd = commands[1]
    assert "pytest" in test_cmd
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert test_cmd in [line.strip() for line in ci]


def test_package_data_is_declared_and_readable():
    """Non-Python files under fedsim/ are declared package data (so a wheel carries them), and the
    Foursquare category map is readable from the fedsim that is imported (the installed one in CI)."""
    from fnmatch import fnmatch
    from importlib import resources

    conf = tomllib.loads((REPO / "pyproject.toml").read_text())
    declared = conf["tool"]["setuptools"].get("package-data", {})
    undeclared = []
    for f in (REPO / "fedsim").rglob("*"):
        if f.is_dir() or f.suffix in (".py", ".pyc") or "__pycache__" in f.parts:
            continue
        pkg = ".".join(f.parent.relative_to(REPO).parts)
        if not any(fnmatch(f.name, pat) for pat in declared.get(pkg, [])):
            undeclared.append(str(f.relative_to(REPO)))
    assert not undeclared, f"add to [tool.setuptools.package-data] in pyproject.toml: {undeclared}"
    assert "fedsim.data" in declared
    text = resources.files("fedsim.data").joinpath("foursquare_categories.tsv").read_text(encoding="utf-8")
    assert "type\ttop_level\tsource" in text.splitlines()


def test_distribution_name_is_publishable_and_stated_in_the_readme():
    """The PyPI name "fedsim" belongs to another project (varnio/fedsim); ours is fedsim-rec, the
    import name stays fedsim, and the README says so."""
    conf = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert conf["project"]["name"] == "fedsim-rec"
    assert conf["project"]["scripts"]["fedsim"] == "fedsim.__main__:entry"
    assert "**`fedsim-rec`**" in (REPO / "README.md").read_text()
    assert "browser" in conf["project"]["optional-dependencies"]
    assert any(d.startswith("tqdm") for d in conf["project"]["dependencies"])


def test_ci_installs_what_the_browser_test_needs():
    ci = (REPO / ".ci" / "run").read_text()
    assert "apt-get install -y -qq chromium chromium-driver" in ci and '"selenium>=4"' in ci
