"""Fuzz the codec's decoders: only ``CodecError`` may escape, and memory stays within the bound.

    python benchmarks/fuzz_codec.py [--count 1000000] [--seed 0] [--max-size 1048576] [--family NAME]

Every input goes through ``decode_message`` and ``decode`` under tracemalloc. Per family the run
prints how many inputs it made; how many each decoder refused with ``CodecError``; the worst peak
memory per input byte (peak bytes traced during one decode / input bytes) over the inputs of at
least 4 KiB and of at least 64 KiB, and over all inputs once the bound's constant C is subtracted; the largest peak; the
largest peak - K x input bytes (the constant the bound needs); the longest decode under
tracemalloc and that same decode again without it (best of 3, from the direct reader's parse); and
how many decodes were measured a second time (see ``fuzz``). It fails (exit status 1) if any
other exception escapes or a peak exceeds ``BOUND_PER_BYTE`` x input bytes + ``BOUND_SLACK``.
tests/test_kernel_codec_fuzz.py runs the same families on fewer and smaller inputs.

Families: ``random`` bytes; ``tokens`` (random msgpack headers with random lengths); ``truncated``,
``bitflip`` (valid messages cut short or with flipped bits, decoded after the original so that
the remembered-layout path sees them); ``huge_header`` (array/map/str/bin/ext lengths of up to
2^32-1 with little behind them); ``deep_nesting`` (up to 3000 levels); ``zero_dims`` (a zero
dimension beside dimensions up to 2^32-1); ``ext_codes`` (every ext code but 1, Timestamps among
them); ``dtype_codes`` (codes outside 1..12); ``ndim`` (33..255); ``padding`` (8..64 bytes, or not
zero); ``many_small`` (runs of empty or tiny containers, small ints, short strings, tiny arrays:
what costs the most memory per byte); ``map_entries`` (a message map of many small entries, the
direct reader's case); ``valid`` (documents that ``decode`` must accept: it fails if one is refused). ``many_small`` and
``map_entries`` are 16 bytes to 16 KiB long (log-uniform), one in 500 (``--large-share``) 16
bytes to ``--max-size``.
"""

from __future__ import annotations

import argparse
import random
import struct
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

try:
    from fedsim.kernel import codec
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from fedsim.kernel import codec
from fedsim.kernel.codec import CodecError, decode, decode_message, encode, encode_message

# The bound asserted for every input: peak traced bytes <= BOUND_PER_BYTE * len + BOUND_SLACK.
BOUND_PER_BYTE = 17
BOUND_SLACK = 48 * 1024

_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
           "float16", "float32", "float64"]
_CONTAINER_HEADS = [b"\xdc\xff\xff", b"\xdd\xff\xff\xff\xff", b"\xde\xff\xff", b"\xdf\xff\xff\xff\xff"]
_SIZED_HEADS = [b"\xd9\xff", b"\xda\xff\xff", b"\xdb\xff\xff\xff\xff", b"\xc4\xff", b"\xc5\xff\xff",
                b"\xc6\xff\xff\xff\xff", b"\xc7\xff\x01", b"\xc8\xff\xff\x01", b"\xc9\xff\xff\xff\xff\x01"]
# one item each: what costs the most Python memory per byte of msgpack
_SMALL_ITEMS = [b"\x90", b"\x80", b"\x91\x90", b"\x81\x00\x00", b"\x81\x00\x90", b"\x81\x90\x90",
                b"\xe0", b"\xfa", b"\xd0\x9c", b"\xcd\x10\x00", b"\xa2ab", b"\xa2\xc4\x80",
                b"\xa4\xf0\x90\x80\x80", b"\xc4\x02ab", b"\xca\0\0\0\1",
                b"\xd6\x01\x03\x00\x00\x00",  # int16 0-d array: fixext 4
                b"\xc7\x06\x01\x01\x01\x00\x00\x00\x00",  # bool (0,) array
                b"\xc7\x82\x01\x02\x20" + b"\x00" * 128]  # int8 array of 32 zero dimensions


def _key(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.6:
        return rng.choice(["t", "V", "items", "grads", "g", "ids", "n", "model", "dec", "eval"])
    if r < 0.9:
        return "".join(rng.choice("abcdefghij_") for _ in range(rng.randint(0, 12)))
    return "".join(chr(rng.choice([0xE9, 0x3B1, 0x4E2D, 0x1F600])) for _ in range(rng.randint(1, 4)))


def _array(rng: random.Random) -> np.ndarray:
    ndim = rng.choice([0, 1, 1, 2, 2, 3])
    shape = tuple(rng.choice([0, 1, 2, 3, 5, 20]) for _ in range(ndim))
    return (np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape) * 1.5).astype(rng.choice(_DTYPES))


def _scalar(rng: random.Random, depth: int = 0):
    r = rng.random()
    if r < 0.15:
        return rng.randint(-2**63, 2**64 - 1) if rng.random() < 0.3 else rng.randint(-40, 300)
    if r < 0.3:
        return rng.random() * 10
    if r < 0.4:
        return rng.choice([None, True, False])
    if r < 0.5:
        return _key(rng)
    if r < 0.55:
        return bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 10)))
    if r < 0.65 and depth < 3:
        return [_scalar(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    if r < 0.75 and depth < 3:
        return {_key(rng): _scalar(rng, depth + 1) for _ in range(rng.randint(0, 4))}
    return _array(rng)


def valid_document(rng: random.Random) -> bytes:
    """A message as protocols send them (mostly a map of arrays and scalars), or another document."""
    r = rng.random()
    if r < 0.8:
        payload = {_key(rng): (_array(rng) if rng.random() < 0.5 else _scalar(rng)) for _ in range(rng.randint(0, 6))}
        return encode_message(_key(rng) or "k", payload).data
    if r < 0.9:
        return encode_message("stop", _scalar(rng)).data
    return encode(_scalar(rng)).data


def _array_ext(code: int, ndim: int, shape: list[int], pad: int = 0, elements: bytes = b"", ext: int = 1) -> bytes:
    body = struct.pack(f"<BB{len(shape)}I", code, ndim, *shape) + b"\0" * pad + elements
    return _ext(ext, body)


def _ext(code: int, body: bytes) -> bytes:
    n = len(body)
    c = struct.pack("b", code)
    if n in (1, 2, 4, 8, 16):
        return bytes((0xD4 + (1, 2, 4, 8, 16).index(n),)) + c + body
    if n < 0x100:
        return b"\xc7" + bytes((n,)) + c + body
    if n < 0x10000:
        return b"\xc8" + struct.pack(">H", n) + c + body
    return b"\xc9" + struct.pack(">I", n) + c + body


def _in_message(rng: random.Random, item: bytes) -> bytes:
    """``item`` as a whole document, as the value of a message's map, or deeper in a message."""
    r = rng.random()
    if r < 0.3:
        return item
    if r < 0.8:
        return b"\x92\xa1k\x81\xa1a" + item
    return b"\x92\xa1k\x82\xa1t\x01\xa1m\x81\xa1w\x91" + item


def _huge_length(rng: random.Random, width: int) -> int:
    top = (1 << (8 * width)) - 1
    return rng.choice([top, top - 1, top // 2 + 1, rng.randint(0, top)])


def gen_random(rng: random.Random, max_size: int) -> bytes:
    n = min(max_size, int(rng.expovariate(1 / 64)) if rng.random() < 0.9 else rng.randint(0, 4096))
    return rng.randbytes(n)


def gen_tokens(rng: random.Random, max_size: int) -> bytes:
    out = []
    for _ in range(rng.randint(1, 40)):
        t = rng.choice([0x92, 0x81, 0xA1, 0xDC, 0xDD, 0xDE, 0xDF, 0xD9, 0xDA, 0xDB, 0xC4, 0xC5, 0xC6,
                        0xC7, 0xC8, 0xC9, 0xD4, 0xD5, 0xD6, 0xD7, 0xD8, 0xCA, 0xCB, 0xCC, 0xCD, 0xCE,
                        0xCF, 0xD0, 0xD3, 0xC0, 0xC1, 0xC2, 0xE0, 0x90, 0x80, 0x05, rng.randrange(256)])
        out.append(bytes((t,)))
        if t in (0xDC, 0xDE, 0xDA, 0xC5, 0xC8):
            out.append(struct.pack(">H", _huge_length(rng, 2) if rng.random() < 0.3 else rng.randint(0, 20)))
        elif t in (0xDD, 0xDF, 0xDB, 0xC6, 0xC9):
            out.append(struct.pack(">I", _huge_length(rng, 4) if rng.random() < 0.3 else rng.randint(0, 20)))
        elif t in (0xD9, 0xC4, 0xC7):
            out.append(bytes((rng.randrange(256) if rng.random() < 0.3 else rng.randint(0, 20),)))
        if t in (0xC7, 0xC8, 0xC9, 0xD4, 0xD5, 0xD6, 0xD7, 0xD8):
            out.append(struct.pack("b", rng.choice([1, 1, 1, -1, 0, 2, 127, -128])))
        if rng.random() < 0.5:
            out.append(rng.randbytes(rng.randint(0, 12)))
    return b"".join(out)[:max_size]


def gen_truncated(rng: random.Random, max_size: int) -> tuple[bytes, bytes]:
    doc = valid_document(rng)
    return doc, doc[:rng.randrange(len(doc))]


def gen_bitflip(rng: random.Random, max_size: int) -> tuple[bytes, bytes]:
    doc = valid_document(rng)
    buf = bytearray(doc)
    for _ in range(rng.choice([1, 1, 2, 3, 8])):
        i = rng.randrange(len(buf))
        if rng.random() < 0.7:
            buf[i] ^= 1 << rng.randrange(8)
        else:
            buf[i] = rng.choice([0x00, 0xFF, 0xC1, 0xDD, 0xDF, 0xDB, 0xC9, 0x90, 0x80, rng.randrange(256)])
    return doc, bytes(buf)


def gen_huge_header(rng: random.Random, max_size: int) -> bytes:
    if rng.random() < 0.5:
        head = rng.choice(_CONTAINER_HEADS + _SIZED_HEADS)
        width = {0xDC: 2, 0xDE: 2, 0xDA: 2, 0xC5: 2, 0xC8: 2, 0xD9: 1, 0xC4: 1, 0xC7: 1}.get(head[0], 4)
        length = struct.pack(">" + {1: "B", 2: "H", 4: "I"}[width], _huge_length(rng, width))
        head = head[:1] + length + head[1 + width:]
    else:  # an array ext claiming huge dimensions
        ndim = rng.randint(1, 4)
        head = _array_ext(rng.randint(1, 12), ndim, [_huge_length(rng, 4) for _ in range(ndim)])
    tail = rng.randbytes(rng.randint(0, 64)) if rng.random() < 0.5 else b"\x90" * rng.randint(0, 64)
    return _in_message(rng, head + tail)[:max_size]


def gen_deep_nesting(rng: random.Random, max_size: int) -> bytes:
    depth = rng.choice([rng.randint(1, 40), rng.randint(1, 3000)])
    wraps = [b"\x91", b"\x81\xa1k", b"\xdc\x00\x01", b"\xde\x00\x01\x00", b"\x92\x01"]
    doc = b"".join(rng.choice(wraps) for _ in range(depth)) + rng.choice([b"\x01", b"\x90", b"", b"\x80"])
    return _in_message(rng, doc)[:max_size]


def gen_zero_dims(rng: random.Random, max_size: int) -> bytes:
    ndim = rng.randint(1, 32)
    shape = [rng.choice([0, 2**32 - 1, rng.randrange(2**32), 1]) for _ in range(ndim)]
    shape[rng.randrange(ndim)] = 0
    return _in_message(rng, _array_ext(rng.randint(1, 12), ndim, shape, pad=rng.randint(0, 7)))


def gen_ext_codes(rng: random.Random, max_size: int) -> bytes:
    code = rng.choice([-1, -1, 0, 2, 127, -128, rng.randint(-128, 127)])
    if code == 1:
        code = -1
    if code == -1 and rng.random() < 0.7:  # the three msgpack Timestamp formats
        body = rng.choice([struct.pack(">I", rng.getrandbits(32)), struct.pack(">Q", rng.getrandbits(64)),
                           struct.pack(">Iq", rng.randrange(10**9), rng.randint(-2**63, 2**63 - 1))])
    else:
        body = rng.randbytes(rng.choice([1, 2, 4, 8, 16, rng.randint(0, 300)]))
    return _in_message(rng, _ext(code, body))


def gen_dtype_codes(rng: random.Random, max_size: int) -> bytes:
    code = rng.choice([0, 13, 255, rng.randint(13, 255)])
    return _in_message(rng, _array_ext(code, 1, [4], elements=rng.randbytes(rng.choice([4, 8, 16, 32]))))


def gen_ndim(rng: random.Random, max_size: int) -> bytes:
    ndim = rng.randint(33, 255)
    shape = [1] * ndim if rng.random() < 0.5 else [rng.randrange(2**32) for _ in range(ndim)]
    return _in_message(rng, _array_ext(rng.randint(1, 12), ndim, shape, elements=b"\0" * 8))


def gen_padding(rng: random.Random, max_size: int) -> bytes:
    code = rng.randint(1, 12)
    itemsize = np.dtype(_DTYPES[code - 1]).itemsize
    count = rng.randint(0, 10)
    if rng.random() < 0.6:
        pad, fill = rng.randint(8, 64), b"\0"
    else:
        pad, fill = rng.randint(1, 7), bytes((rng.randint(1, 255),))
    elements = b"\0" * (count * itemsize - (rng.randint(1, itemsize) if rng.random() < 0.2 and count else 0))
    body = struct.pack("<BBI", code, 1, count) + fill * pad + elements
    return _in_message(rng, _ext(1, body))


LARGE_SHARE = 0.002  # the share of many_small/map_entries inputs drawn up to max_size (see fuzz)


def _size(rng: random.Random, max_size: int) -> int:
    """Log-uniform from 16 bytes: up to 16 KiB, and a LARGE_SHARE of the time up to ``max_size``."""
    top = max_size if rng.random() < LARGE_SHARE else min(max_size, 1 << 14)
    return int(2 ** rng.uniform(4, max(4.0, np.log2(top))))


def gen_many_small(rng: random.Random, max_size: int) -> bytes:
    size = _size(rng, max_size)
    if rng.random() < 0.4:  # one kind of item throughout
        items = [rng.choice(_SMALL_ITEMS)]
    else:
        items = rng.sample(_SMALL_ITEMS, rng.randint(2, 5))
    body, count, total = [], 0, 0
    while total < size:
        item = items[0] if len(items) == 1 else rng.choice(items)
        body.append(item)
        total += len(item)
        count += 1
    head = b"\xdd" + struct.pack(">I", count) + b"".join(body)
    if rng.random() < 0.3:  # the shape: [kind, {"a": [...]}]
        return b"\x92\xa1k\x81\xa1a" + head
    return _in_message(rng, head)


def gen_map_entries(rng: random.Random, max_size: int) -> bytes:
    count = min(65535, max(16, _size(rng, max_size) // 4))
    values = [b"\xfa", b"\x01", b"\xa2ab", b"\xd6\x01\x03\x00\x00\x00", b"\xcb" + b"\x01" * 8, b"\xc0"]
    value = rng.choice(values)
    keys = rng.random() < 0.5
    body = b"".join((b"\xa3" + b"%03x" % (i % 4096) if keys else b"\xa1a") + value for i in range(count))
    head = b"\x92\xa1k" + (b"\xde" + struct.pack(">H", count) if count > 15 else bytes((0x80 | count,)))
    return (head + body)[:max_size]


def gen_valid(rng: random.Random, max_size: int) -> bytes:
    return valid_document(rng)


FAMILIES = {
    "random": gen_random, "tokens": gen_tokens, "truncated": gen_truncated, "bitflip": gen_bitflip,
    "huge_header": gen_huge_header, "deep_nesting": gen_deep_nesting, "zero_dims": gen_zero_dims,
    "ext_codes": gen_ext_codes, "dtype_codes": gen_dtype_codes, "ndim": gen_ndim, "padding": gen_padding,
    "many_small": gen_many_small, "map_entries": gen_map_entries, "valid": gen_valid,
}


class Stats:
    __slots__ = ("inputs", "refused_message", "refused_decode", "ratio_large", "ratio_huge", "ratio_excess",
                 "peak", "excess", "seconds", "slowest", "untraced", "remeasured", "failures")

    def __init__(self) -> None:
        self.inputs = self.refused_message = self.refused_decode = self.remeasured = 0
        self.ratio_large = self.ratio_huge = self.ratio_excess = 0.0
        self.peak = 0
        self.excess = -(1 << 62)  # the largest peak - BOUND_PER_BYTE x len: the constant the bound needs
        self.seconds = 0.0
        self.slowest: tuple = ()  # (decoder, input) of the longest decode
        self.untraced = 0.0  # that decode again without tracemalloc (best of 3)
        self.failures: list[str] = []


def _measure(fn, data: bytes) -> tuple[bool, int, float, BaseException | None]:
    """(refused with CodecError, peak bytes traced, seconds, other exception) of ``fn(data)``."""
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    t0 = time.perf_counter()
    refused, other = False, None
    try:
        result = fn(data)
    except CodecError:
        refused = True
    except Exception as exc:  # noqa: BLE001 - the point is to catch what must not escape
        other = exc
    else:
        del result
    seconds = time.perf_counter() - t0
    return refused, tracemalloc.get_traced_memory()[1] - base, seconds, other


def _untraced(fn, data: bytes) -> float:
    """Seconds of ``fn(data)`` with tracemalloc off, from the direct reader's parse (no layout
    remembered from the traced run)."""
    codec._LAYOUTS_SEEN.clear()
    t0 = time.perf_counter()
    try:
        fn(data)
    except CodecError:
        pass
    return time.perf_counter() - t0


def fuzz(count: int, seed: int, max_size: int = 1 << 20, families=None, *, large_share: float = 0.002,
         keep_failures: int = 20) -> dict[str, Stats]:
    """Run ``count`` inputs, spread round-robin over ``families`` (default: all), through both
    decoders under tracemalloc; returns per-family ``Stats``. ``failures`` lists inputs where an
    exception other than CodecError escaped, or the peak exceeded the bound twice: a decode over
    the bound is measured once more (``remeasured``), because msgpack interns map keys and CPython
    now and then rebuilds its whole table of interned strings (every few thousand new keys, some
    hundreds of kB in this process: a cost of the process's strings, not of the document)."""
    global LARGE_SHARE
    LARGE_SHARE = large_share
    names = list(families or FAMILIES)
    rng = random.Random(seed)
    stats = {name: Stats() for name in names}
    started = tracemalloc.is_tracing()
    if not started:
        tracemalloc.start()
    try:
        for i in range(count):
            name = names[i % len(names)]
            made = FAMILIES[name](rng, max_size)
            if type(made) is tuple:  # (original, variant): the original first, outside the measurement
                try:
                    decode_message(made[0])
                except CodecError:
                    pass
                made = made[1]
            data = made
            st = stats[name]
            st.inputs += 1
            n = max(len(data), 1)
            for which, fn in (("decode_message", decode_message), ("decode", decode)):
                refused, peak, seconds, other = _measure(fn, data)
                if peak > BOUND_PER_BYTE * len(data) + BOUND_SLACK:
                    # msgpack interns map keys, and CPython rebuilds its table of interned strings
                    # now and then (every few thousand new keys; its size is the process's, not the
                    # document's): measure once more, through the same path, and count it
                    st.remeasured += 1
                    codec._LAYOUTS_SEEN.clear()
                    peak = _measure(fn, data)[1]
                if which == "decode_message":
                    st.refused_message += refused
                else:
                    st.refused_decode += refused
                st.peak = max(st.peak, peak)
                st.excess = max(st.excess, peak - BOUND_PER_BYTE * len(data))
                if seconds > st.seconds:
                    st.seconds, st.slowest = seconds, (fn, data)
                if len(data) >= 4096:
                    st.ratio_large = max(st.ratio_large, peak / n)
                if len(data) >= 65536:
                    st.ratio_huge = max(st.ratio_huge, peak / n)
                st.ratio_excess = max(st.ratio_excess, (peak - BOUND_SLACK) / n)
                problem = None
                if other is not None:
                    problem = f"{type(other).__name__}: {other}"
                elif refused and name == "valid" and which == "decode":  # must decode (a message: not always)
                    problem = "a valid document was refused"
                elif peak > BOUND_PER_BYTE * len(data) + BOUND_SLACK:
                    problem = f"peak {peak} bytes > {BOUND_PER_BYTE} x {len(data)} + {BOUND_SLACK}"
                if problem and len(st.failures) < keep_failures:
                    st.failures.append(f"{which}({data[:64]!r}{'...' if len(data) > 64 else ''}, "
                                       f"{len(data)} bytes): {problem}")
    finally:
        if not started:
            tracemalloc.stop()
    if not started:
        for st in stats.values():
            if st.slowest:
                st.untraced = min(_untraced(*st.slowest) for _ in range(3))
    return stats


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=1_000_000, help="inputs in all (default 1,000,000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-size", type=int, default=1 << 20,
                    help="largest many_small/map_entries input in bytes (default 1 MiB)")
    ap.add_argument("--family", action="append", choices=list(FAMILIES), help="only these families")
    ap.add_argument("--large-share", type=float, default=0.002,
                    help="share of many_small/map_entries inputs drawn up to --max-size (default 0.002)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    stats = fuzz(args.count, args.seed, args.max_size, args.family, large_share=args.large_share)
    wall = time.perf_counter() - t0
    print(f"{'family':13s} {'inputs':>8s} {'CodecError':>21s} {'peak/len':>9s} {'peak/len':>9s} {'(peak-C)/len':>12s} "
          f"{'max peak':>10s} {'peak-K*len':>10s} {'worst time per decode':>22s} {'re-':>4s}")
    print(f"{'':13s} {'':>8s} {'decode_message/decode':>21s} {'>=4 KiB':>9s} {'>=64 KiB':>9s} {'all':>12s} {'bytes':>10s} "
          f"{'max bytes':>10s} {'traced':>10s} {'untraced':>11s} {'meas':>4s}")
    failures = []
    for name, st in stats.items():
        print(f"{name:13s} {st.inputs:8d} {st.refused_message:10d}/{st.refused_decode:<10d} "
              f"{st.ratio_large:9.2f} {st.ratio_huge:9.2f} {st.ratio_excess:12.2f} {st.peak:10d} {st.excess:10d} {st.seconds * 1e3:7.1f} ms "
              f"{st.untraced * 1e3:8.2f} ms "
              f"{st.remeasured:4d}")
        failures += st.failures
    worst_large = max(st.ratio_large for st in stats.values())
    worst_huge = max(st.ratio_huge for st in stats.values())
    worst_excess = max(st.ratio_excess for st in stats.values())
    print(f"bound checked: peak <= {BOUND_PER_BYTE} x len + {BOUND_SLACK} (C); worst peak/len over inputs "
          f">= 4 KiB {worst_large:.2f}, >= 64 KiB {worst_huge:.2f}, worst (peak - C)/len {worst_excess:.2f}; "
          f"{args.count} inputs, seed "
          f"{args.seed}, max size {args.max_size}, {wall:.0f} s")
    for line in failures:
        print("FAIL", line)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
