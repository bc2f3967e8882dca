"""benchmarks/fuzz_codec.py fails when ``decode`` refuses a document of its ``valid`` family (it
counted the refusal and passed)."""

from conftest import load_benchmark


def test_a_refused_valid_document_is_a_failure(monkeypatch):
    f = load_benchmark("fuzz_codec")
    assert f.fuzz(30, 0, families=["valid"])["valid"].failures == []

    def refuse(data, **kw):
        raise f.CodecError("refused")

    monkeypatch.setattr(f, "decode", refuse)
    st = f.fuzz(30, 0, families=["valid"])["valid"]
    assert len(st.failures) == 20 and all("a valid document was refused" in x for x in st.failures)
