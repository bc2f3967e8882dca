"""fedsim installed from a wheel (issue 24): ``python -m fedsim run`` from the repository root of a
fresh clone, where the clone's ``fedsim/`` shadows the installed package and has no
``scenarios`` inside, finds the scenarios; results.json records the git revision both there and
from an installed copy run elsewhere (stamped at build time)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _git(*args, cwd):
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs git and a git checkout of fedsim")
    base = tmp_path_factory.mktemp("install")
    clone = base / "clone"
    # a fresh clone of the work tree as it is: tracked and new files, nothing ignored (no
    # fedsim/scenarios link, no caches), committed in a repository of its own
    names = _git("ls-files", "--cached", "--others", "--exclude-standard", "-z", cwd=REPO).split("\0")
    for name in filter(None, names):
        src = REPO / name
        if src.is_file() and not src.is_symlink():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, clone / name)
    assert not (clone / "fedsim" / "scenarios").exists()
    _git("init", "-q", cwd=clone)
    _git("add", "-A", cwd=clone)
    _git("commit", "-q", "-m", "clone", cwd=clone)
    head = _git("rev-parse", "HEAD", cwd=clone)
    wheels = base / "wheels"
    try:
        import setuptools

        isolation = [] if int(setuptools.__version__.split(".")[0]) >= 77 else None
    except ImportError:
        isolation = None
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(clone)]
    if isolation is not None:
        cmd.insert(5, "--no-build-isolation")
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    wheel = next(wheels.glob("fedsim_rec-*.whl"))
    site = base / "site"
    res = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site),
                          str(wheel)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    return clone, site, head


def _run(cwd: Path, site: Path, out: str):
    """``python -m fedsim run ...`` with the wheel's install first on the path, then the
    dependencies. ``-S`` keeps .pth files out: an editable install of another fedsim (a
    developer's) registers an import hook that would find ``fedsim.scenarios`` for the shadowing
    ``fedsim/`` and hide the failure a plain install has."""
    import numpy

    deps = Path(numpy.__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=f"{site}{os.pathsep}{deps}")
    return subprocess.run([sys.executable, "-S", "-m", "fedsim", "run", "--data", "tiny", "--set", "iterations=1",
                           "--out", out, "--quiet"], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_the_wheel_is_named_fedsim_rec_and_carries_the_scenarios_and_the_revision(installed):
    clone, site, head = installed
    assert (site / "fedsim" / "scenarios" / "quickstart.py").is_file()
    assert (site / "fedsim" / "_revision.txt").read_text().strip() == head
    assert list(site.glob("fedsim_rec-*.dist-info"))


def test_python_m_fedsim_run_from_the_repository_root(installed):
    clone, site, head = installed
    res = _run(clone, site, "o")
    assert res.returncode == 0, res.stderr
    assert "unknown scenario" not in res.stderr
    saved = json.loads((clone / "o" / "results.json").read_text())
    assert saved["scenario"] == "quickstart" and saved["git_revision"] == head


def test_installed_fedsim_elsewhere_records_the_revision_it_was_built_from(installed, tmp_path):
    clone, site, head = installed
    res = _run(tmp_path, site, "o")
    assert res.returncode == 0, res.stderr
    saved = json.loads((tmp_path / "o" / "results.json").read_text())
    assert saved["git_revision"] == head
    from fedsim import __version__

    assert saved["versions"]["fedsim"] == __version__
