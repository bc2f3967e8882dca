"""The decoders under fuzzing: the families of ``benchmarks/fuzz_codec.py`` (random bytes, msgpack
tokens, truncated and bit-flipped messages, huge length prefixes, deep nesting, zero dimensions
beside huge ones, unknown and negative ext codes, wrong dtype codes, ndim over 32, padding over 7,
runs of tiny objects, maps of many entries, valid messages), fewer and smaller inputs.

Asserted for each of 21,000 inputs (seeded), through both ``decode_message`` and ``decode``:
only ``CodecError`` escapes, and the peak memory traced by tracemalloc during the decode is at
most K x input bytes + C with K = 17 and C = 48 KiB (the bound in the codec's docstring: 16
bytes of Python objects per input byte plus 16 KiB of slack, refused beyond that; the rest of C
is the transient of growing the codec's bounded layout cache and an exception's traceback).
"""

import importlib.util
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("fuzz_codec", REPO / "benchmarks" / "fuzz_codec.py")
fuzz_codec = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fuzz_codec)

COUNT = 21_000  # 1,500 per family
K, C = 17, 48 * 1024


def test_fuzzed_inputs_raise_only_codec_error_and_stay_within_the_memory_bound():
    assert (fuzz_codec.BOUND_PER_BYTE, fuzz_codec.BOUND_SLACK) == (K, C)
    t0 = time.perf_counter()
    stats = fuzz_codec.fuzz(COUNT, seed=20261123, max_size=8192)
    seconds = time.perf_counter() - t0
    failures = [line for st in stats.values() for line in st.failures]
    assert not failures, "\n".join(failures)
    assert sum(st.inputs for st in stats.values()) == COUNT
    for name in ("ext_codes", "dtype_codes", "ndim"):  # never a valid document
        st = stats[name]
        assert st.refused_message == st.refused_decode == st.inputs, name
    assert stats["valid"].refused_decode == 0  # every valid document decodes
    assert stats["many_small"].refused_decode > 0 and stats["many_small"].refused_decode < stats["many_small"].inputs
    print(f"{COUNT} fuzzed inputs in {seconds:.1f} s")
