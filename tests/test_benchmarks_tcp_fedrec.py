"""benchmarks/tcp_fedrec.py's --data: a path that does not exist used to be replaced by the
ml100k-like synthetic preset without a word (only the default folder has that stand-in), and a
preset name was not accepted either. Now a given --data is resolved as every other command's is."""

import pytest
from conftest import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("tcp_fedrec")


def test_a_missing_data_path_is_an_error(bench, tmp_path):
    with pytest.raises(FileNotFoundError, match="no-such-folder"):
        bench.main(["--data", str(tmp_path / "no-such-folder"), "--processes", "2", "--iterations", "1"])


def test_a_preset_is_run_as_given(bench):
    out = bench.main(["--data", "tiny", "--processes", "2", "--iterations", "1", "--timeout", "60"])
    assert out["data"] == "synthetic:tiny" and out["clients"] == 30
    assert out["params_bit_identical"] and out["payload_bytes_equal_per_kind"]
