"""The Python examples of README.md and docs/concepts.md run as written."""

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
