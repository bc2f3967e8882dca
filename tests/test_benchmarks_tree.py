"""``--tree DIR`` of benchmarks/fedrec_split.py and benchmarks/fedrec_client_math.py times another
checkout's fedsim. A folder without a fedsim package, or fedrec_split's ``--tree=DIR`` spelling
(which argparse accepts but the import-time look-up missed), used to time the installed fedsim
instead, silently: each is now refused, or honoured."""

import os
import subprocess
import sys

import pytest
from conftest import REPO


def _run(script, *args, cwd):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / script), *args], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=120)


@pytest.mark.parametrize("script", ["fedrec_split.py", "fedrec_client_math.py"])
@pytest.mark.parametrize("form", ["separate", "joined"])
def test_a_folder_without_fedsim_is_refused(tmp_path, script, form):
    missing = tmp_path / "no-checkout"
    args = ["--tree", str(missing)] if form == "separate" else [f"--tree={missing}"]
    res = _run(script, *args, "--data", "tiny", "--iterations", "2", "--repeats", "1", cwd=tmp_path) \
        if script == "fedrec_split.py" else _run(script, *args, "--data", "tiny", "--repeats", "1", cwd=tmp_path)
    assert res.returncode != 0
    assert f"--tree {missing}: no fedsim package there" in res.stderr
    assert "s_per_iteration" not in res.stdout and "us_per_client" not in res.stdout


@pytest.mark.parametrize("form", ["separate", "joined"])
def test_fedrec_split_imports_the_tree_in_either_spelling(tmp_path, form):
    tree = tmp_path / "other"
    (tree / "fedsim").mkdir(parents=True)
    (tree / "fedsim" / "__init__.py").write_text('raise SystemExit("the other tree\'s fedsim was imported")\n')
    args = ["--tree", str(tree)] if form == "separate" else [f"--tree={tree}"]
    res = _run("fedrec_split.py", *args, "--help", cwd=tmp_path)
    assert res.returncode != 0 and "the other tree's fedsim was imported" in res.stderr


def test_tree_argument_parses_both_spellings(tmp_path):
    from conftest import load_benchmark

    bench = load_benchmark("fedrec_split")
    (tmp_path / "fedsim").mkdir()
    (tmp_path / "fedsim" / "__init__.py").write_text("")
    assert bench.tree_argument(["--data", "tiny", "--tree", str(tmp_path)]) == str(tmp_path)
    assert bench.tree_argument([f"--tree={tmp_path}", "--repeats", "1"]) == str(tmp_path)
    assert bench.tree_argument(["--data", "tiny"]) is None
    with pytest.raises(SystemExit, match="no fedsim package there"):
        bench.tree_argument([f"--tree={tmp_path / 'x'}"])
    with pytest.raises(SystemExit, match="was imported from"):
        bench.check_tree(str(tmp_path), str(REPO / "fedsim" / "protocols" / "fedrec.py"))
    bench.check_tree(str(REPO), str(REPO / "fedsim" / "protocols" / "fedrec.py"))
