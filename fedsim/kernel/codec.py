"""The wire format: every message is one msgpack document; numpy arrays travel as an ext type.

Array ext layout (ext code 1)::

    byte 0        dtype code (see ``_DTYPES``)
    byte 1        ndim (0..32)
    4*ndim bytes  shape, little-endian uint32 each
    0-6 bytes     zero padding, up to the next multiple of the itemsize (1, 2, 4 or 8)
    the rest      the array's elements, C order, little-endian

The padding puts the elements at an offset that is a multiple of their itemsize within the ext
body, which msgpack hands to the decoder as a bytes object of its own (allocated 16-byte
aligned by CPython), so decoded arrays are *aligned* views. Unaligned views are valid, but
NumPy takes slow paths on them: ``take`` of 265 rows of a 3706 x 20 float32 array measured
11.1 us unaligned against 2.1 us aligned, a matrix-vector product 21.8 against 10.4 us.

No pickle is used anywhere. Decoding validates everything it reads and raises ``CodecError``
(never another exception) for malformed input: truncated documents, unknown ext codes, unknown
dtypes, a buffer whose length disagrees with shape x itemsize, documents over the size limit,
nesting deeper than the depth limit.

Decoded arrays are read-only views on the ext bytes msgpack hands us (no further copy).
"""

from __future__ import annotations

import struct
from math import prod as _prod
import threading
from typing import Any

import msgpack
import numpy as np

__all__ = [
    "ARRAY_EXT",
    "WIRE_VERSION",
    "CodecError",
    "Encoded",
    "decode",
    "decode_message",
    "encode",
    "encode_message",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_DEPTH",
]

ARRAY_EXT = 1
# Bumped whenever encoded sizes change (2: array elements aligned to their itemsize), so that
# stored results that carry byte counts can tell they came from another wire format.
WIRE_VERSION = 2
DEFAULT_MAX_BYTES = 512 * 1024 * 1024
DEFAULT_MAX_DEPTH = 32
_MAX_NDIM = 32

# dtype code -> little-endian numpy dtype. The codes are part of the wire format: never renumber.
_DTYPES: dict[int, np.dtype] = {
    1: np.dtype("|b1"),
    2: np.dtype("|i1"),
    3: np.dtype("<i2"),
    4: np.dtype("<i4"),
    5: np.dtype("<i8"),
    6: np.dtype("|u1"),
    7: np.dtype("<u2"),
    8: np.dtype("<u4"),
    9: np.dtype("<u8"),
    10: np.dtype("<f2"),
    11: np.dtype("<f4"),
    12: np.dtype("<f8"),
}
# keyed by dtype objects (hash/eq are cheap and byte-order aware); big-endian maps to the same code
_CODES: dict[np.dtype, int] = {dt: code for code, dt in _DTYPES.items()}
_CODES.update({dt.newbyteorder(">"): code for code, dt in _DTYPES.items() if dt.itemsize > 1})
_FLOAT_CODES = frozenset({10, 11, 12})
_ExtType = msgpack.ExtType
_new_ext = tuple.__new__
_SHAPES = [struct.Struct(f"<{n}I") for n in range(33)]


def _data_offset(ndim: int, itemsize: int) -> int:
    """Where the elements start in an array ext body: the header, padded to the itemsize."""
    head = 2 + 4 * ndim
    return head + (-head) % itemsize


# (ndim, itemsize) -> Struct packing dtype code, ndim, shape and the zero padding
_HEADERS = {(n, size): struct.Struct(f"<BB{n}I{_data_offset(n, size) - 2 - 4 * n}x")
            for n in range(_MAX_NDIM + 1) for size in (1, 2, 4, 8)}


class CodecError(ValueError):
    """A value cannot be encoded, or bytes are not a valid fedsim message."""


class Encoded:
    """One encoded document and what it carries (treat as read-only).

    ``data`` is what crosses the wire. ``array_bytes`` is the size of the array payloads alone
    (the "raw" bytes users compare with the encoded size) and ``floats`` the number of
    floating-point array elements, from which the ledger derives latent-vector units.
    """

    # a plain slotted class: one is made per message, and a frozen dataclass's __init__ costs
    # several times more (object.__setattr__ per field)
    __slots__ = ("data", "array_bytes", "floats")

    def __init__(self, data: bytes, array_bytes: int, floats: int) -> None:
        self.data = data
        self.array_bytes = array_bytes
        self.floats = floats

    def __len__(self) -> int:
        return len(self.data)

    def __repr__(self) -> str:
        return f"Encoded({len(self.data)} bytes, array_bytes={self.array_bytes}, floats={self.floats})"


class _Encoder(threading.local):
    """Per-thread reusable msgpack Packer (building one per call costs more than packing a
    small message) plus the counters of the document being encoded."""

    def __init__(self) -> None:
        self.array_bytes = 0
        self.floats = 0
        self.packer = msgpack.Packer(default=self.default, use_bin_type=True, autoreset=True)

    def default(self, obj: Any) -> Any:
        if isinstance(obj, np.ndarray):
            return self._array(obj)
        if isinstance(obj, np.generic):
            # numpy scalars become plain msgpack scalars (a 0-d array is the way to keep a dtype)
            return obj.item()
        raise CodecError(f"cannot encode object of type {type(obj).__name__}: {obj!r:.80}")

    def _array(self, arr: np.ndarray) -> msgpack.ExtType:
        header, body, _ = self._array_parts(arr)
        # join copies the array memory (a C-contiguous buffer) straight into the ext body: one copy
        # (ExtType's own __new__ re-checks code and data types in Python; both are known good here)
        return _new_ext(_ExtType, (ARRAY_EXT, b"".join((header, body))))

    def _array_parts(self, arr: np.ndarray) -> tuple[bytes, Any, int]:
        """The ext body of ``arr`` as (header with padding, element buffer, body length);
        adds the array to the document's counts."""
        code = _CODES.get(arr.dtype)
        if code is None:
            raise CodecError(f"cannot encode array of dtype {arr.dtype} (not in the dtype whitelist)")
        if arr.ndim > _MAX_NDIM:
            raise CodecError(f"cannot encode array with {arr.ndim} dimensions (max {_MAX_NDIM})")
        le = _DTYPES[code]
        if arr.dtype is not le and arr.dtype != le:
            arr = arr.astype(le)
        if not arr.flags.c_contiguous:
            arr = arr.copy(order="C")  # (ascontiguousarray would turn 0-d arrays into 1-d)
        self.array_bytes += arr.nbytes
        if code in _FLOAT_CODES:
            self.floats += arr.size
        header = _HEADERS[arr.ndim, le.itemsize].pack(code, arr.ndim, *arr.shape)
        return header, (arr if arr.size else b""), len(header) + arr.nbytes

    def message(self, kind: str, payload: Any) -> bytes:
        """``packer.pack([kind, payload])``, byte for byte, written directly when ``payload`` is
        a dict: each array is copied once, from its own memory into the document, where going
        through the packer copies it into an ExtType, then into the packer's buffer (measured
        7.6 against about 4 us for a 265 x 20 float32 block and its int32 ids)."""
        pack = self.packer.pack
        if type(payload) is not dict:
            return pack([kind, payload])
        n = len(payload)
        parts = [_MESSAGE_HEAD, _packed_str(kind) if type(kind) is str else pack(kind),
                 _map_header(n)]
        append = parts.append
        for k, v in payload.items():
            append(_packed_str(k) if type(k) is str else pack(k))
            if type(v) is np.ndarray:
                header, body, length = self._array_parts(v)
                append(_ext_header(length))
                append(header)
                append(body)
            else:
                append(pack(v))
        return b"".join(parts)


_MESSAGE_HEAD = b"\x92"  # a 2-element msgpack array: [kind, payload]
_FIXEXT = {1: 0xD4, 2: 0xD5, 4: 0xD6, 8: 0xD7, 16: 0xD8}
_EXT8, _EXT16, _EXT32 = struct.Struct(">BBb"), struct.Struct(">BHb"), struct.Struct(">BIb")
_STR_CACHE: dict[str, bytes] = {}


def _ext_header(length: int) -> bytes:
    """msgpack's header of an ARRAY_EXT of ``length`` body bytes, exactly as its Packer writes it."""
    fix = _FIXEXT.get(length)
    if fix is not None:
        return bytes((fix, ARRAY_EXT))
    if length < 0x100:
        return _EXT8.pack(0xC7, length, ARRAY_EXT)
    if length < 0x10000:
        return _EXT16.pack(0xC8, length, ARRAY_EXT)
    if length < 0x100000000:
        return _EXT32.pack(0xC9, length, ARRAY_EXT)
    raise CodecError(f"array of {length} bytes is too large for one message")


def _map_header(n: int) -> bytes:
    if n < 16:
        return bytes((0x80 | n,))
    if n < 0x10000:
        return struct.pack(">BH", 0xDE, n)
    return struct.pack(">BI", 0xDF, n)


def _packed_str(s: str) -> bytes:
    """msgpack bytes of a message kind or payload key (a small set of names: cached)."""
    b = _STR_CACHE.get(s)
    if b is None:
        b = msgpack.packb(s, use_bin_type=True)
        if len(_STR_CACHE) < 4096:
            _STR_CACHE[s] = b
    return b


_encoder = _Encoder()


def encode(obj: Any) -> Encoded:
    """Encode ``obj`` (None, bool, int, float, str, bytes, list/tuple, dict, numpy arrays and
    scalars, nested) into one msgpack document.

    Raises ``CodecError`` for values outside that set (no pickle fallback).
    """
    return _encode(_encoder.packer.pack, obj)


def _encode(pack, *args: Any) -> Encoded:
    """Run ``pack(*args)`` with the document counters reset; any failure becomes CodecError."""
    enc = _encoder
    enc.array_bytes = 0
    enc.floats = 0
    try:
        data = pack(*args)
    except CodecError:
        enc.packer.reset()
        raise
    except (TypeError, ValueError, OverflowError) as exc:
        enc.packer.reset()
        raise CodecError(f"cannot encode value: {exc}") from exc
    return Encoded(data, enc.array_bytes, enc.floats)


def encode_message(kind: str, payload: Any) -> Encoded:
    """Encode one network message: the document ``[kind, payload]``."""
    return _encode(_encoder.message, kind, payload)


def decode_message(data: bytes | bytearray | memoryview, **limits: int) -> tuple[str, Any]:
    """Decode a document made by ``encode_message``; returns ``(kind, payload)``.

    Raises ``CodecError`` if the bytes are malformed or not a ``[kind, payload]`` pair.
    """
    doc = decode(data, **limits)
    if type(doc) is not list or len(doc) != 2 or type(doc[0]) is not str:
        raise CodecError("not a fedsim message: expected a [kind, payload] array")
    return doc[0], doc[1]


# (dtype code, ndim) -> (dtype, where the shape ends, where the elements start, shape Struct)
_LAYOUTS = {(code, n): (dt, 2 + 4 * n, _data_offset(n, dt.itemsize), _SHAPES[n])
            for code, dt in _DTYPES.items() for n in range(_MAX_NDIM + 1)}


def _ext_hook(code: int, data: bytes) -> np.ndarray:
    if code != ARRAY_EXT:
        raise CodecError(f"unknown ext type {code}")
    if len(data) < 2:
        raise CodecError(f"array ext truncated: {len(data)} bytes, header needs at least 2")
    layout = _LAYOUTS.get((data[0], data[1]))
    if layout is None:
        if data[0] not in _DTYPES:
            raise CodecError(f"array ext has unknown dtype code {data[0]}")
        raise CodecError(f"array ext has {data[1]} dimensions (max {_MAX_NDIM})")
    dtype, head, start, shape_struct = layout
    if len(data) < start:
        raise CodecError(f"array ext truncated: header needs {start} bytes, got {len(data)}")
    if start > head and data[head:start].count(0) != start - head:
        raise CodecError("array ext header padding is not zero")
    shape = shape_struct.unpack_from(data, 2)
    expected = _prod(shape) * dtype.itemsize
    if len(data) - start != expected:
        raise CodecError(
            f"array ext length mismatch: shape {shape} x itemsize {dtype.itemsize} = {expected} bytes, "
            f"buffer has {len(data) - start}"
        )
    # a read-only view on the ext bytes (one call: frombuffer + reshape costs twice as much)
    return np.ndarray(shape, dtype, data, start)


def _check_depth(obj: Any, limit: int) -> None:
    """Raise CodecError if containers nest deeper than ``limit`` (the root counts as 1).

    msgpack decodes arrays to lists and maps to dicts (never tuples); only containers are
    pushed. A typical message (``[kind, {name: array or scalar}]``) takes the fast path: one
    loop over the payload's values, no stack.
    """
    if limit >= 2 and type(obj) is list and len(obj) == 2 and type(obj[1]) is dict:
        for v in obj[1].values():
            t = type(v)
            if t is dict or t is list:
                break
        else:
            return  # depth 2
    stack = [(obj, 1)]
    pop, push = stack.pop, stack.append
    while stack:
        node, depth = pop()
        if depth > limit:
            raise CodecError(f"document nesting deeper than {limit}")
        for v in (node.values() if type(node) is dict else node):
            t = type(v)
            if t is dict or t is list:
                push((v, depth + 1))


def decode(data: bytes | bytearray | memoryview, *, max_bytes: int = DEFAULT_MAX_BYTES,
           max_depth: int = DEFAULT_MAX_DEPTH) -> Any:
    """Decode one document produced by ``encode``.

    Arrays come back as read-only numpy views (copy before modifying). Raises ``CodecError`` if
    the bytes are malformed, longer than ``max_bytes``, or nested deeper than ``max_depth``.
    """
    if len(data) > max_bytes:
        raise CodecError(f"message of {len(data)} bytes exceeds the limit of {max_bytes}")
    try:
        obj = msgpack.unpackb(data, ext_hook=_ext_hook, raw=False, strict_map_key=False)
    except CodecError:
        raise
    except Exception as exc:  # msgpack raises several unrelated types for bad input
        raise CodecError(f"malformed message: {type(exc).__name__}: {exc}") from exc
    t = type(obj)
    if t is dict or t is list:
        _check_depth(obj, max_depth)
    return obj
