import struct

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsim.kernel.codec import (
    ARRAY_EXT, CodecError, decode, decode_message, encode, encode_message,
)

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64"]
SHAPES = [(), (0,), (1,), (5,), (3, 4), (2, 0, 3), (2, 3, 4, 1)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_round_trip_every_dtype_and_shape(dtype, shape):
    rng = np.random.default_rng(0)
    arr = np.asarray(rng.random(shape) * 100).astype(dtype)
    enc = encode({"a": arr, "n": 3})
    out = decode(enc.data)
    assert out["a"].dtype == np.dtype(dtype) and out["a"].shape == shape
    np.testing.assert_array_equal(out["a"], arr)
    assert enc.array_bytes == arr.nbytes
    assert enc.floats == (arr.size if dtype.startswith("float") else 0)


def test_big_endian_and_non_contiguous_arrays_are_normalised():
    be = np.arange(6, dtype=">f8").reshape(2, 3)
    out = decode(encode(be.T).data)
    assert out.dtype == np.dtype("<f8")
    np.testing.assert_array_equal(out, be.T)


def test_decoded_arrays_are_read_only_views_without_extra_copy():
    arr = np.arange(1000, dtype=np.float32)
    out = decode(encode(arr).data)
    assert not out.flags.writeable
    assert not out.flags.owndata  # a view on the ext buffer


@pytest.mark.parametrize("dtype", ["bool", "int8", "float16", "int32", "float32", "int64", "float64"])
@pytest.mark.parametrize("shape", [(), (5,), (3, 4), (2, 1, 3)])
def test_decoded_arrays_are_aligned(dtype, shape):
    # NumPy takes slow paths on unaligned views (take, BLAS); the header padding prevents them
    arr = np.ones(shape, dtype=dtype)
    body = encode(arr).data
    out = decode(body)
    assert out.flags.aligned and out.ctypes.data % out.dtype.itemsize == 0
    head = 2 + 4 * len(shape)
    assert len(body) - arr.nbytes - (-head) % arr.dtype.itemsize - head in (2, 3)  # fixext / ext8 marker


def test_nonzero_header_padding_is_rejected():
    good = bytearray(encode(np.ones(3, np.float32)).data)
    # ext8 marker, length, type, then code, ndim, 4 bytes of shape, 2 bytes of padding
    assert good[0] == 0xC7 and good[2] == 1 and good[9:11] == b"\0\0"
    good[9] = 7
    with pytest.raises(CodecError, match="padding"):
        decode(bytes(good))


def test_message_documents_carry_the_kind():
    enc = encode_message("grad", {"g": np.ones(2, np.float32)})
    kind, payload = decode_message(enc.data)
    assert kind == "grad" and payload["g"].tolist() == [1.0, 1.0]
    # exact size: fixarray(1) + fixstr "grad"(5) + fixmap(1) + fixstr "g"(2) + fixext16 marker and
    # type(2) + the 16-byte array body (code, ndim, one uint32 dimension, 2 zero bytes to a multiple
    # of 4, two float32)
    assert len(enc.data) == 1 + 5 + 1 + 2 + 2 + (2 + 4 + 2 + 8)
    with pytest.raises(CodecError, match="kind, payload"):
        decode_message(encode({"not": "a message"}).data)


@given(st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.floats(allow_nan=False)
    | st.text(max_size=20) | st.binary(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=20))
@settings(max_examples=150, deadline=None)
def test_round_trip_plain_values(value):
    assert decode(encode(value).data) == value


def _ext(code, body):
    return msgpack.packb(msgpack.ExtType(code, body))


@pytest.mark.parametrize("data, message", [
    (encode(np.arange(10, dtype=np.int32)).data[:-3], "malformed"),  # truncated document
    (_ext(ARRAY_EXT, struct.pack("<BBI", 4, 1, 10) + b"\0" * 39), "length mismatch"),  # wrong length
    (_ext(7, b"abc"), "unknown ext type 7"),
    (_ext(ARRAY_EXT, struct.pack("<BBI", 99, 1, 1) + b"\0"), "unknown dtype code 99"),
    (_ext(ARRAY_EXT, b"\x04"), "truncated"),
    (_ext(ARRAY_EXT, struct.pack("<BB", 4, 3) + b"\0\0"), "truncated"),
    (_ext(ARRAY_EXT, struct.pack("<BB", 4, 40)), "dimensions"),
    (b"\x91" * 40 + b"\x01", "nesting"),
    (b"\xc1", "malformed"),  # never-used msgpack byte
    (b"", "malformed"),
])
def test_malformed_input_raises_codec_error(data, message):
    with pytest.raises(CodecError, match=message):
        decode(data)


def _nested(depth, leaf, wrap):
    doc = leaf
    for i in range(depth - 1):
        doc = wrap(doc, i)
    return doc


@pytest.mark.parametrize("wrap", [lambda x, i: [x], lambda x, i: {"k": x},
                                  lambda x, i: [1, x] if i % 2 else {"a": 2, "b": x}],
                         ids=["lists", "maps", "mixed"])
def test_nesting_limit_counts_every_container_level(wrap):
    ok = _nested(8, [1], wrap)
    assert decode(encode(ok).data, max_depth=8) == ok
    # one level too many anywhere below the root is refused, whatever the container types
    deep = _nested(9, [1], wrap)
    with pytest.raises(CodecError, match="nesting deeper than 8"):
        decode(encode(deep).data, max_depth=8)


def test_oversized_input_raises_codec_error():
    data = encode(np.zeros(1000, np.float64)).data
    with pytest.raises(CodecError, match="exceeds the limit"):
        decode(data, max_bytes=1000)


@given(st.binary(max_size=200))
@settings(max_examples=300, deadline=None)
def test_arbitrary_bytes_decode_or_raise_codec_error(data):
    try:
        decode(data)
    except CodecError:
        pass


@pytest.mark.parametrize("value", [object(), {1, 2}, np.array(["a"]), np.array([1 + 2j]),
                                   np.zeros(2, dtype=object)])
def test_unencodable_values_raise_codec_error(value):
    with pytest.raises(CodecError):
        encode({"x": value})
    # the per-thread packer is usable again after a failure
    assert decode(encode({"ok": 1}).data) == {"ok": 1}


_PAYLOADS = [
    {}, {"a": 1}, {"x": np.float32(2.5), "n": None, "b": True, "s": "hé", "l": [1, np.arange(3)]},
    {"be": np.arange(5, dtype=">f8")}, {"nc": np.arange(20.).reshape(4, 5)[:, ::2]},
    {f"k{i}": np.arange(i, dtype=np.int16) for i in range(20)},  # a map16 header
    {1: np.arange(4), b"x": 2}, {"d": {"nested": np.ones(3)}},
    {"u": np.arange(70000, dtype=np.uint8)},  # an ext32 body
    [np.ones(2), "not a dict"], "scalar payload",
]


@pytest.mark.parametrize("payload", _PAYLOADS, ids=range(len(_PAYLOADS)))
@pytest.mark.parametrize("shape", [(), (0,), (1,), (2,), (3,), (4,), (2, 1), (300,)])
@pytest.mark.parametrize("dtype", ["uint8", "float16", "float32", "float64"])
def test_message_writer_matches_the_generic_packer_byte_for_byte(payload, shape, dtype):
    """encode_message writes dict payloads itself (one copy of each array); every ext size class
    (fixext 1/2/4/8/16, ext8, ext16, ext32) and map size must come out as msgpack writes them."""
    extra = np.zeros(shape, dtype)
    if isinstance(payload, dict):
        payload = {**payload, "extra": extra}
    fast = encode_message("kind", payload)
    generic = encode(["kind", payload])
    assert fast.data == generic.data
    assert (fast.array_bytes, fast.floats) == (generic.array_bytes, generic.floats)


@pytest.mark.parametrize("value", [object(), np.array(["a"]), np.zeros(2, dtype=object), "\ud800"])
def test_message_writer_errors_are_codec_errors(value):
    with pytest.raises(CodecError):
        encode_message("k", {"ok": np.ones(2), "bad": value})
    assert decode_message(encode_message("k", {"ok": 1}).data) == ("k", {"ok": 1})
