"""benchmarks/fuzz_codec.py fails when ``decode`` refuses a document of its ``valid`` family (it
counted the refusal and passed)."""

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("fuzz_codec", REPO / "benchmarks" / "fuzz_codec.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_refused_valid_document_is_a_failure(monkeypatch):
    f = _bench()
    assert f.fuzz(30, 0, families=["valid"])["valid"].failures == []

    def refuse(data, **kw):
        raise f.CodecError("refused")

    monkeypatch.setattr(f, "decode", refuse)
    st = f.fuzz(30, 0, families=["valid"])["valid"]
    assert len(st.failures) == 20 and all("a valid document was refused" in x for x in st.failures)
