"""The Python examples of README.md and docs/concepts.md run as written; the tests, benchmarks and
files docs/reliability.md and docs/network-model.md cite exist."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("doc", ["README.md", "docs/concepts.md"])
def test_python_blocks_run(doc, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / doc).read_text(), re.S)
    blocks = [b for b in blocks if "async def client(ctx, data)" not in b]  # the README's actor sketch
    assert blocks
    ns: dict = {}
    for b in blocks:  # later blocks may use names from earlier ones, as a reader would
        exec(compile(b, doc, "exec"), ns)
    assert "result" in ns and ns["result"].params


# `tests/test_x.py`, `test_x.py::test_name`, and `::test_name` (a test of the file named last before it)
CITED = re.compile(r"`((?:tests|benchmarks|scenarios|fedsim|validation)/[\w/]+\.py|test_\w+\.py)?(?:::(\w+))?`")


@pytest.mark.parametrize("doc", ["docs/reliability.md", "docs/network-model.md"])
def test_every_cited_file_and_test_exists(doc):
    # reliability.md cited `::test_fedrecpp_leaves_out_broken_groups_and_stays_lossless_for_the_rest`
    # after `tests/test_fedrecpp_faults.py`; the test is in tests/test_protocol_faults.py
    last, cited, wrong = None, 0, []
    for m in CITED.finditer((ROOT / doc).read_text()):
        path, name = m.groups()
        if path:
            path = path if "/" in path else f"tests/{path}"
            if not (ROOT / path).is_file():
                wrong.append(f"{path}: no such file")
                continue
            last = path
        if name:
            if last is None or not re.search(rf"^def {name}\(", (ROOT / last).read_text(), re.M):
                wrong.append(f"{last}::{name}: no such test")
        cited += 1
    assert cited >= 10 and not wrong, wrong
