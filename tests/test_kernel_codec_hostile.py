"""Hostile documents the other codec tests do not cover: what msgpack would accept and quietly
change (a repeated map key drops values)."""

import struct
import tracemalloc

import msgpack
import numpy as np
import pytest

from fedsim.kernel import codec
from fedsim.kernel.codec import CodecError, decode, decode_message, encode, encode_message

_REPEATS = {
    # [kind, {"a": 1, "a": 2}]: the direct reader's top-level map
    "top level": (b"\x92\xa1k\x82\xa1a\x01\xa1a\x02", "'a'"),
    # [kind, {"m": {"a": 1, "a": 2}}]: the direct reader's map one level down
    "one level down": (b"\x92\xa1k\x81\xa1m\x82\xa1a\x01\xa1a\x02", "'a'"),
    # [kind, [{"a": 1, "a": 2}]]: msgpack's decoder
    "in a list": (b"\x92\xa1k\x91\x82\xa1a\x01\xa1a\x02", "'a'"),
    # [kind, [{1: 1, True: 2}]]: equal keys in Python, different msgpack bytes
    "1 and True": (b"\x92\xa1k\x91\x82\x01\x01\xc3\x02", "True"),
    # [kind, {"w": float32 array, "w": 3}]: an array would be dropped
    "an array": (b"\x92\xa1k\x82\xa1w" + msgpack.packb(msgpack.ExtType(1, b"\x0b\x01\x01\0\0\0\0\0\x80\x3f"))
                 + b"\xa1w\x03", "'w'"),
}


@pytest.mark.parametrize("name", list(_REPEATS))
def test_a_map_that_repeats_a_key_is_refused_naming_the_key(name):
    data, key = _REPEATS[name]
    for fn in (decode_message, decode):
        with pytest.raises(CodecError, match=rf"malformed message: a map repeats the key {key} "):
            fn(data)
    # and msgpack alone would have kept one value: the refusal is what changed
    doc = msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=codec._ext_hook)
    inner = doc[1][0] if type(doc[1]) is list else doc[1]
    inner = inner.get("m", inner)
    assert len(inner) == 1


def test_a_repeated_key_is_named_first_in_document_order_among_many():
    # 300 distinct int keys (beyond the small ints: objects of their own), then 7 and 5 again
    keys = list(range(1000, 1300)) + [1007, 1005]
    data = b"\x92\xa1k\x91\xde" + struct.pack(">H", len(keys)) + b"".join(msgpack.packb(k) + b"\xc0" for k in keys)
    with pytest.raises(CodecError, match=r"repeats the key 1007 "):
        decode(data)
    # 2**61 - 1 + 5 and 5 have one hash but are different keys: not a repeat
    data = b"\x92\xa1k\x91\x82\x05\xc0" + msgpack.packb(2**61 - 1 + 5) + b"\xc0"
    assert decode(data) == ["k", [{5: None, 2**61 - 1 + 5: None}]]


def test_documents_without_repeated_keys_decode_as_before():
    payload = {"op": "report", "items": [{"a": i, "b": [1.5, None], "c": {"x": 1, 2: "y"}} for i in range(50)],
               float("nan"): 1, float("nan"): 2}  # two NaN keys: different keys for a dict, both kept
    got = decode(encode(payload).data)
    assert len(got) == 4 and got["items"] == payload["items"]
    kind, got = decode_message(encode_message("m", {"w": np.arange(6, dtype=np.float32), "n": 3}).data)
    assert kind == "m" and got["n"] == 3 and got["w"].tolist() == [0, 1, 2, 3, 4, 5]


def test_naming_a_repeated_key_stays_within_the_decoders_memory_bound():
    # the costliest kind of map for its size: 8-byte entries (a 3-byte int key, a 5-byte bin) are
    # charged 16 bytes of objects per byte, right at the budget; 20,000 of them and one repeat
    keys = list(range(300, 20300)) + [300]
    data = b"\x92\xa1k\xdf" + struct.pack(">I", len(keys)) + b"".join(
        b"\xcd" + struct.pack(">H", k) + b"\xc4\x03" + bytes([k % 251]) * 3 for k in keys)
    tracemalloc.start()
    try:
        with pytest.raises(CodecError, match="repeats the key 300 "):
            decode(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= 19 * len(data) + 48 * 1024, peak / len(data)


def _bool_ext(raw: bytes) -> bytes:
    return msgpack.packb(msgpack.ExtType(1, b"\x01\x01" + struct.pack("<I", len(raw)) + raw))


def test_a_bool_array_with_bytes_other_than_0_and_1_is_refused():
    for data in (b"\x92\xa1k\x81\xa1b" + _bool_ext(b"\x00\x01\x02\x01"),  # the direct reader
                 b"\x92\xa1k\x91" + _bool_ext(b"\x00\x01\x02\x01")):  # msgpack's decoder
        for fn in (decode_message, decode):
            with pytest.raises(CodecError, match=r"bool array ext holds byte 0x02 at element 2 \(only 0 and 1"):
                fn(data)
    # a 0-d one, and an empty one (nothing to check)
    with pytest.raises(CodecError, match="holds byte 0xff at element 0"):
        decode(msgpack.packb(msgpack.ExtType(1, b"\x01\x00\xff")))
    assert decode(_bool_ext(b"")).shape == (0,)


def test_a_remembered_layout_does_not_let_a_bad_bool_byte_through():
    data = encode_message("mask", {"b": np.array([True, False, True, True]), "t": 1}).data
    assert decode_message(data)[1]["b"].tolist() == [True, False, True, True]  # parsed, remembered
    at = data.index(b"\x01\x00\x01\x01")
    bad = data[:at + 1] + b"\x07" + data[at + 2:]
    with pytest.raises(CodecError, match="holds byte 0x07 at element 1"):
        decode_message(bad)


def test_a_bool_array_is_sent_as_0_and_1_whatever_bytes_it_holds():
    canonical = np.array([False, True, True, False, True])
    odd = np.frombuffer(b"\x00\x02\xff\x00\x01", np.bool_)  # equal to canonical, other bytes
    assert np.array_equal(odd, canonical) and odd.tobytes() != canonical.tobytes()
    assert encode(odd).data == encode(canonical).data
    assert encode({"x": [odd[::2]]}).data == encode({"x": [canonical[::2]]}).data  # strided, nested
    first = encode_message("m", {"b": canonical, "n": 2}).data
    for _ in range(2):  # a first encoding, then one that a plan could have served
        for arr in (odd, canonical):
            data = encode_message("m", {"b": arr, "n": 2}).data
            assert data == first
            assert decode_message(data)[1]["b"].tolist() == canonical.tolist()
    assert encode_message("m", {"model": {"b": odd}}).data == encode_message("m", {"model": {"b": canonical}}).data


def _nested(depth: int):
    doc = 1
    for _ in range(depth):
        doc = [doc]
    return doc


@pytest.mark.parametrize("transport", ["sim", "asyncio"])
@pytest.mark.parametrize("anonymous", [False, True])
def test_a_message_the_receiver_cannot_decode_names_its_sender(transport, anonymous):
    # the encoder takes nesting the decoder refuses (deeper than 32): the receiving actor's error
    # named the receiver only, not who sent what
    from fedsim.kernel import ActorError, AsyncioNetwork, SimNetwork

    async def sender(ctx):
        await ctx.send("b", "deep", {"x": _nested(40)}, anonymous=anonymous)

    async def receiver(ctx):
        await ctx.receive("deep")

    net = SimNetwork(seed=0) if transport == "sim" else AsyncioNetwork(seed=0)
    net.add_node("a", sender)
    net.add_node("b", receiver)
    with pytest.raises(ActorError) as info:
        net.run()
    cause = info.value.__cause__
    assert isinstance(cause, CodecError) and info.value.node == "b"
    who = "an anonymous sender" if anonymous else "'a'"
    assert str(cause).startswith(f"message 'deep' from {who} to 'b' (round 0, ledger row 0) does not decode: ")
    assert "deeper than 32" in str(cause)


def _message_with_padding(pad: bytes) -> bytes:
    """A message {"x": float32[3]} whose array ext carries ``pad`` between its header and elements
    (as another encoder may write it), framed by msgpack itself."""
    body = struct.pack("<BBI", 11, 1, 3) + pad + np.array([1, 2, 3], "<f4").tobytes()
    return msgpack.packb(["k", {"x": msgpack.ExtType(1, body)}])


def test_header_padding_of_up_to_seven_zero_bytes_is_read_and_more_refused():
    # the format allows 0-7 bytes of zero padding; 8 is refused, in a message and alone
    for n in range(8):
        for data in (_message_with_padding(b"\0" * n), msgpack.packb(msgpack.ExtType(1, struct.pack(
                "<BBI", 11, 1, 3) + b"\0" * n + np.array([1, 2, 3], "<f4").tobytes()))):
            x = decode_message(data)[1]["x"] if data[0] == 0x92 else decode(data)
            assert x.tolist() == [1.0, 2.0, 3.0]
    for data in (_message_with_padding(b"\0" * 8), msgpack.packb(msgpack.ExtType(1, struct.pack(
            "<BBI", 11, 1, 3) + b"\0" * 8 + np.array([1, 2, 3], "<f4").tobytes()))):
        with pytest.raises(CodecError, match="length mismatch"):
            decode_message(data) if data[0] == 0x92 else decode(data)


@pytest.mark.parametrize("n, at", [(1, 0), (2, 1), (3, 2), (7, 6)])
def test_any_nonzero_padding_byte_is_refused(n, at):
    # one byte of padding holding 1 (not only the 2-byte padding test_kernel_codec checks)
    pad = bytearray(n)
    pad[at] = 1
    with pytest.raises(CodecError, match="padding is not zero"):
        decode_message(_message_with_padding(bytes(pad)))


def test_a_document_of_exactly_max_bytes_is_read_and_one_byte_more_refused():
    data = encode_message("k", {"x": np.arange(5, dtype=np.float32), "t": 1}).data
    n = len(data)
    for buf in (data, bytearray(data)):
        assert decode_message(buf, max_bytes=n)[1]["x"].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
        assert decode(buf, max_bytes=n)[1]["t"] == 1
        with pytest.raises(CodecError, match=f"message of {n} bytes exceeds the limit of {n - 1}"):
            decode_message(buf, max_bytes=n - 1)
        with pytest.raises(CodecError, match=f"message of {n} bytes exceeds the limit of {n - 1}"):
            decode(buf, max_bytes=n - 1)
