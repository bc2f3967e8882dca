"""The wire format: every message is one msgpack document; numpy arrays travel as an ext type.

Array ext layout (ext code 1)::

    byte 0        dtype code (see ``_DTYPES``)
    byte 1        ndim (0..32)
    4*ndim bytes  shape, little-endian uint32 each
    0-7 bytes     zero padding
    the rest      the array's elements, C order, little-endian

The padding is whatever the body length says it is (body length - header - elements), so the
encoder may choose it; it chooses it so that the elements are *aligned* (their offset a multiple
of the itemsize). In a message (``encode_message`` with a dict payload) the offset that counts is
the one in the whole document: ``decode_message`` then returns arrays as views on the received
bytes themselves, with no copy at all (wire format 3); so does a map one level down, a whole
model ``{"model": {name: array}}`` (wire format 4). Elsewhere (``encode``, arrays nested deeper
in a message) it is the offset in the ext body, which msgpack hands to the decoder as a bytes
object of its own (16-byte aligned by CPython), so those views are aligned too. An array
that arrives unaligned all the same (bytes from another encoder) is copied once into aligned
memory: NumPy takes slow paths on unaligned views (``take`` of 265 rows of a 3706 x 20 float32
array measured 11.1 us unaligned against 2.1 us aligned, a matrix-vector product 21.8 against
10.4 us).

No pickle is used anywhere. Decoding validates everything it reads and raises ``CodecError``
(never another exception: not ValueError, OverflowError, MemoryError, RecursionError or TypeError)
for malformed input: truncated documents, bytes msgpack never uses, trailing bytes, ext codes
other than 1 (msgpack's own Timestamp, -1, included), unknown dtypes, bool arrays holding a byte
other than 0 or 1 (the encoder sends any nonzero byte of a bool array as 1), more than 32 dimensions,
padding over 7 bytes or not zero, a buffer whose length disagrees with shape x itemsize, shapes
NumPy cannot represent (a zero dimension beside dimensions whose product overflows), maps that
repeat a key (msgpack would keep the last value and drop the others without a word; keys equal in
Python, such as 1 and True, are one key), documents over ``max_bytes`` (512 MiB by default) and
nesting deeper than ``max_depth`` (32). (Limits themselves that are no integer, or below their
least, are the caller's error: ``TypeError`` / ``ValueError`` naming the parameter.)

Decoding also bounds its work and memory by the input's size. Before msgpack builds anything,
``_scan`` walks the document: a container may not claim more items than bytes follow it, nor a
str, bin or ext more bytes than the document has left, nesting is checked as it goes, and every
item is charged the Python objects it will become. A document whose objects would take more than
``DECODE_OBJECT_BYTES_PER_BYTE`` (16) bytes per input byte plus ``DECODE_OBJECT_SLACK`` (16 KiB)
is refused with a ``CodecError`` that says so; that takes many tiny containers or scalars (an
empty list is a 56-byte object and one byte of msgpack), never arrays or the maps of arrays and
scalars that protocols send. ``decode_message`` reads a map of more than 16 + size/32 entries
(counting those of the maps one level down in it) with the same costed decoder instead of directly. Measured with tracemalloc over a million fuzzed
inputs (``benchmarks/fuzz_codec.py``), a decode's peak allocation stays within 17 bytes per input
byte plus 48 KiB (worst seen: 13.6 bytes per byte beyond the 48 KiB), apart from CPython now and
then rebuilding its table of interned strings (msgpack interns map keys), a cost of the process's
strings, not of the document. Refusing a map that repeats a key decodes the document a second time
to name the key, which takes at most 19 bytes per byte plus the 48 KiB (measured on the costliest
maps for their size). The scan costs a few operations per item, at most one item per
input byte (a run of numbers: one regular expression).

Decoded arrays are read-only. A zero-copy view keeps the whole received document alive for as
long as the array (or any view of it) lives; copy a small array out of a big message to keep it.
"""

from __future__ import annotations

import re
import struct
import sys
from math import prod as _prod
import threading
from typing import Any

import msgpack
import numpy as np

__all__ = [
    "ARRAY_EXT",
    "WIRE_VERSION",
    "CodecError",
    "Draft",
    "Encoded",
    "decode",
    "decode_encoded",
    "decode_message",
    "draft_message",
    "encode",
    "encode_message",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_DEPTH",
    "DECODE_OBJECT_BYTES_PER_BYTE",
    "DECODE_OBJECT_SLACK",
]

ARRAY_EXT = 1
# Bumped whenever encoded sizes change (2: array elements aligned to their itemsize within the ext
# body; 3: within the message document, so that decoded arrays are views on the received bytes;
# 4: so are the arrays of a map one level down, a whole model), so that stored results that carry
# byte counts can tell they came from another wire format.
WIRE_VERSION = 4
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
_BOOL = _DTYPES[1]
_ExtType = msgpack.ExtType
_new_ext = tuple.__new__
_SHAPES = [struct.Struct(f"<{n}I") for n in range(33)]


_MAX_PAD = 7  # the most padding a decoder accepts between an array header and its elements

# (ndim, padding) -> Struct packing dtype code, ndim, shape and the zero padding
_HEADERS = {(n, pad): struct.Struct(f"<BB{n}I{pad}x")
            for n in range(_MAX_NDIM + 1) for pad in range(_MAX_PAD + 1)}


def _ext_header_len(body: int) -> int:
    """Length of msgpack's ext header for a body of ``body`` bytes (fixext, ext 8/16/32)."""
    if body in (1, 2, 4, 8, 16):
        return 2
    return 3 if body < 0x100 else 4 if body < 0x10000 else 6


def _document_pad(pos: int, head: int, nbytes: int, itemsize: int) -> int:
    """Padding that puts the elements of an array ext written at document offset ``pos`` at a
    multiple of ``itemsize`` in the document. The ext header's own length depends on the body
    length, so candidates are checked exactly; in the rare size class where none of 0..7 works,
    the elements are aligned within the body instead (and the decoder copies them)."""
    if itemsize == 1:
        return 0
    framing = _ext_header_len(head + nbytes)
    pad = -(pos + framing + head) % itemsize
    if _ext_header_len(head + pad + nbytes) == framing:
        return pad  # the usual case: the padding does not change the ext header's size class
    for pad in range(_MAX_PAD + 1):
        if (pos + _ext_header_len(head + pad + nbytes) + head + pad) % itemsize == 0:
            return pad
    return (-head) % itemsize


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
    __slots__ = ("data", "array_bytes", "floats", "layout")

    def __init__(self, data: bytes, array_bytes: int, floats: int, layout: list | None = None) -> None:
        self.data = data
        self.array_bytes = array_bytes
        self.floats = floats
        # where the payload's values are in ``data``, when this process wrote it from a plan (see
        # ``decode_encoded``); None otherwise
        self.layout = layout

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
        self.layout = None
        self.packer = msgpack.Packer(default=self.default, use_bin_type=True, autoreset=True)

    def default(self, obj: Any) -> Any:
        if type(obj) is np.ndarray:
            return self._array(obj)
        if isinstance(obj, np.ndarray):
            if not isinstance(obj, np.memmap):
                # a subclass's own state (a masked array's mask, a matrix's semantics) has no place
                # in the array ext: it would be dropped without a word
                raise CodecError(f"cannot encode {type(obj).__module__}.{type(obj).__name__}: an ndarray subclass "
                                 f"(only numpy.ndarray and numpy.memmap travel; convert it, e.g. with "
                                 f"np.asarray or MaskedArray.filled)")
            return self._array(obj)
        if isinstance(obj, np.generic):
            # numpy scalars become plain msgpack scalars (a 0-d array is the way to keep a dtype)
            return obj.item()
        raise CodecError(f"cannot encode object of type {type(obj).__name__}: {obj!r:.80}")

    def _array(self, arr: np.ndarray) -> msgpack.ExtType:
        header, body, _ = self._array_parts(arr, None)
        # join copies the array memory (a C-contiguous buffer) straight into the ext body: one copy
        # (ExtType's own __new__ re-checks code and data types in Python; both are known good here)
        return _new_ext(_ExtType, (ARRAY_EXT, b"".join((header, body))))

    def _array_parts(self, arr: np.ndarray, pos: int | None) -> tuple[bytes, Any, int]:
        """The ext body of ``arr`` as (header with padding, element buffer, body length);
        adds the array to the document's counts. With ``pos`` (where the ext header will start in
        the document) the elements are aligned in the document, else within the body."""
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
        nbytes = arr.nbytes
        if code == 1 and nbytes and arr.view(np.uint8).max() > 1:
            # a bool array whose bytes are not all 0 or 1 (made with view or frombuffer): NumPy
            # takes any nonzero byte as True, so that is what is sent, as 1 (receivers refuse
            # other bytes, and equal arrays must encode to equal bytes)
            arr = arr.view(np.uint8) != 0
        ndim = arr.ndim
        self.array_bytes += nbytes
        if code in _FLOAT_CODES:
            self.floats += arr.size
        head = 2 + 4 * ndim
        size = le.itemsize
        pad = (-head) % size if pos is None else _document_pad(pos, head, nbytes, size)
        header = _HEADERS[ndim, pad].pack(code, ndim, *arr.shape)
        return header, (arr if nbytes else b""), head + pad + nbytes

    def message(self, kind: str, payload: Any, plan_key: tuple | None = None) -> bytes:
        """The document ``[kind, payload]``. A dict payload is written directly, msgpack's framing
        byte for byte, with each array copied once (from its own memory into the document, where
        the packer copies it into an ExtType, then into its buffer: 7.6 against about 4 us for a
        265 x 20 float32 block and its int32 ids) and its elements aligned in the document, so
        that the receiver's arrays can be views on the bytes it received. With ``plan_key`` (see
        ``encode_message``) the document's framing is remembered as a plan for that key."""
        if type(payload) is not dict:
            return self.packer.pack([kind, payload])
        parts, bodies, fields, plannable = self.frame(kind, payload)
        data = b"".join(parts)
        if plan_key is not None and plannable:
            # every array went in as it is (no byte swap, no contiguous copy) and none is one level
            # down: remember the framing, with the arrays' places left empty (a plan must not keep
            # arrays alive); the scalars' packed bytes stay (they are part of the plan's key)
            slots = [i for i, _ in bodies]
            for i in slots:
                parts[i] = b""
            if len(_PLANS) >= _MAX_PLANS:
                _PLANS.clear()
            _PLANS[plan_key] = (parts, slots, self.array_bytes, self.floats, fields)
            self.layout = fields
        return data

    def frame(self, kind: str, payload: dict) -> tuple[list, list, list, bool]:
        """The parts of the document ``[kind, payload]`` (a dict payload), to be joined in order:
        framing bytes and, for each array, its buffer (an array, or ``b""`` when it has no
        elements). Also returns ``bodies``, ``(index in parts, key path)`` of every array (at the
        top level or in a map one level down), the top level's decode layout
        (see ``_fill``) and whether the document can be a plan (every array written as it is,
        none one level down; only then is that layout complete)."""
        pack = self.packer.pack
        parts = [_MESSAGE_HEAD, _packed_str(kind) if type(kind) is str else pack(kind),
                 _map_header(len(payload))]
        pos = len(parts[0]) + len(parts[1]) + len(parts[2])
        append = parts.append
        bodies: list = []
        fields: list = []  # the decode layout of a plan (meaningful only when one is made)
        plannable = True
        for k, v in payload.items():
            key = _packed_str(k) if type(k) is str else pack(k)
            append(key)
            pos += len(key)
            if type(v) is np.ndarray:
                header, body, length = self._array_parts(v, pos)
                ext = _ext_header(length)
                append(ext)
                append(header)
                bodies.append((len(parts), (k,)))
                if body is v and v.dtype.kind != "b":
                    fields.append((k, (v.shape, v.dtype, pos + len(ext) + len(header)), True))
                else:
                    plannable = False  # (a plan would skip _array_parts' check of a bool array's bytes)
                append(body)
                pos += len(ext) + length
            elif type(v) is dict:
                # a map of arrays one level down (a whole model): written here too, so that each
                # array is copied once, not three times (into an ExtType, the packer's buffer and
                # its bytes), and aligned in the document like the top level's, so that the
                # receiver's arrays are views on its bytes (wire format 4; before, they were
                # aligned within their ext body and decoding copied every one: a FedAvg server
                # spent 1.8 ms per 3.7 MB update there). (Never part of a plan.)
                head = _map_header(len(v))
                append(head)
                pos += len(head)
                plannable = False
                for k2, v2 in v.items():
                    key = _packed_str(k2) if type(k2) is str else pack(k2)
                    append(key)
                    pos += len(key)
                    if type(v2) is np.ndarray:
                        header, body, length = self._array_parts(v2, pos)
                        ext = _ext_header(length)
                        parts += (ext, header)
                        bodies.append((len(parts), (k, k2)))
                        append(body)
                        pos += len(ext) + length
                    else:
                        value = pack(v2)
                        append(value)
                        pos += len(value)
            else:
                value = pack(v)
                append(value)
                pos += len(value)
                fields.append((k, v, False))
        return parts, bodies, fields, plannable


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


class Draft:
    """A message whose arrays are written in place, in the document that will be sent.

    Made by :func:`draft_message` (actors: ``Context.draft``). The document is laid out first,
    framing bytes and all; ``payload`` is the template with every array (at the top level and in
    maps one level down) replaced by a writable, aligned, C-ordered view on the document's bytes
    with that array's shape and dtype (little-endian). Fill the views, then send the draft
    (``Context.send(dst, kind, draft)``): the document sent is byte for byte what
    ``encode_message(kind, payload)`` makes of the filled payload, without copying the arrays into
    it. Sending seals the draft (:meth:`seal`): its views become read-only, and it cannot be sent
    again. Arrays whose elements were not all written carry zeros there (``zero=True``, the
    default) or whatever the memory held (``zero=False``: for callers that write every element).

    A sent draft that nothing else holds any more can be written again and sent again
    (:meth:`reopen`): a sender that sends one large array after each small change (FedRec's
    stochastic server, V to one client after another) then changes the array in place instead of
    copying all of it into every message.
    """

    __slots__ = ("kind", "payload", "_buffer", "_shared", "_views", "_encoded", "_sent_views", "_refs_at_seal")

    def __init__(self, kind: str, payload: dict, buffer: np.ndarray, views: list, encoded: Encoded) -> None:
        self.kind = kind
        self.payload = payload
        self._buffer = buffer
        # the read-only array over the buffer that ``encoded.data`` is a memoryview of, and that
        # every array a receiver decodes from it has as its base
        self._shared = encoded.data.obj
        self._views = views
        self._encoded = encoded
        self._sent_views: list | None = None
        self._refs_at_seal: tuple[int, int, int, int] | None = None

    @property
    def sealed(self) -> bool:
        return self._views is None

    def seal(self) -> Encoded:
        """The encoded document (read-only from now on). Raises ``CodecError`` if the draft was
        sealed (sent) before and not reopened."""
        if self._views is None:
            raise CodecError(f"the {self.kind!r} draft was already sent: a draft is sent once (or reopened)")
        for v in self._views:
            v.flags.writeable = False
        self._sent_views, self._views = self._views, None
        self._refs_at_seal = self._refs()
        return self._encoded

    def reopen(self) -> bool:
        """Make a sent draft writable again, with the values it was sent with, if nothing but the
        draft holds its document any more: no copy of the message in flight or in a mailbox, no
        receiver, tap or trace holding its payload or any array of it (references counted: those
        the draft itself holds when it is sealed, nothing more). Then returns True, and the draft
        can be changed and sent again, as a new message. Otherwise returns False and changes
        nothing (make a new draft). No one can tell a reopened draft from a new one: whoever could
        see the document has let it go. Returns True at once for a draft not sent yet. Never
        blocks; does not raise."""
        if self._views is not None:
            return True
        if self._sent_views is None or self._refs() != self._refs_at_seal:
            return False
        for v in self._sent_views:
            v.flags.writeable = True
        self._views, self._sent_views = self._sent_views, None
        return True

    def _refs(self) -> tuple[int, int, int, int]:
        # references to the document, to its bytes, to the read-only array under them (a
        # receiver's arrays refer to it: NumPy unwraps the memoryview) and to the buffer under
        # that (reachable from it); compared only with the same call at seal time, so the counts'
        # own offsets cancel out
        enc = self._encoded
        return (sys.getrefcount(enc), sys.getrefcount(enc.data), sys.getrefcount(self._shared),
                sys.getrefcount(self._buffer))

    def __repr__(self) -> str:
        state = "sealed" if self._views is None else "open"
        return f"Draft({self.kind!r}, {len(self._buffer)} bytes, {state})"


def draft_message(kind: str, template: dict, *, zero: bool = True) -> Draft:
    """A :class:`Draft` of the message ``[kind, template]``: ``template`` is a dict payload whose
    arrays give the shapes and dtypes (their values are not read), at the top level or in maps one
    level down; its other values are encoded as ``encode_message`` encodes them, and reach every
    receiver as the document's bytes decode (a tuple as a new list, a numpy scalar as a Python
    one), never as the template's own objects. Raises ``CodecError`` for what ``encode_message``
    cannot encode, and ``TypeError`` for a ``zero`` that is not True or False (NumPy's ``bool_`` is
    taken as one): truthiness decided before, and ``zero=""``, ``0`` or ``None`` left the arrays'
    elements as whatever the memory held."""
    if zero is not True and zero is not False:  # (no call on the common path: drafts are per-message)
        zero = _zero_flag(zero)
    if type(template) is not dict or type(kind) is not str:
        raise CodecError("a draft needs a str kind and a dict payload")
    enc = _encoder
    try:
        parts, bodies, _, _ = _counted(enc.frame, kind, template)
    except CodecError as exc:
        raise _located(exc, template, f"the {kind!r} draft's template") from exc.__cause__
    offsets = []
    at = 0
    for part in parts:
        offsets.append(at)
        at += part.nbytes if type(part) is np.ndarray else len(part)
    buf = (np.zeros if zero else np.empty)(at, dtype=np.uint8)
    body_at = {i for i, _ in bodies}
    run, run_at = [], 0  # framing bytes between two arrays, written in one go
    for i, part in enumerate(parts):
        if i in body_at:
            if run:
                chunk = b"".join(run)
                buf[run_at:run_at + len(chunk)] = np.frombuffer(chunk, dtype=np.uint8)
            run = []
        else:
            if not run:
                run_at = offsets[i]
            run.append(part)
    if run:
        chunk = b"".join(run)
        buf[run_at:run_at + len(chunk)] = np.frombuffer(chunk, dtype=np.uint8)
    payload = {k: (dict(v) if type(v) is dict else v) for k, v in template.items()}
    views = []
    layout: dict = {}
    for i, path in bodies:
        src = template[path[0]] if len(path) == 1 else template[path[0]][path[1]]
        dtype = _DTYPES[_CODES[src.dtype]]
        view = np.ndarray(src.shape, dtype, buf, offsets[i]) if src.size else np.empty(src.shape, dtype)
        views.append(view)
        if len(path) == 1:
            payload[path[0]] = view
        else:
            payload[path[0]][path[1]] = view
        layout[path] = (src.shape, dtype, offsets[i])
    array_bytes, floats = enc.array_bytes, enc.floats
    fields = _draft_fields(template, layout)
    # What receivers decode. NumPy lets anyone set a view's writeable flag again when its base is
    # a writable array, and takes the object under a memoryview as the base: receivers' arrays on
    # memoryview(buf) had buf, so one receiver could write into the sender's document and every
    # other receiver's arrays. An array that frombuffer makes of a read-only memoryview keeps that
    # memoryview as its base, which refuses a writable buffer: their flag stays down for good.
    shared = np.frombuffer(memoryview(buf).toreadonly(), np.uint8)
    data = memoryview(shared)
    return Draft(kind, payload, buf, views, Encoded(data, array_bytes, floats, fields))


# values msgpack gives back as themselves, of the same type, and that no receiver can change: a
# draft's layout hands them to every receiver as they are
_AS_SENT = frozenset({int, float, bool, str, bytes, type(None)})


def _zero_flag(zero: Any) -> bool:
    """``draft_message``'s ``zero`` that is neither True nor False: a NumPy bool as a bool, anything
    else refused (falsy ones too: they meant uninitialised memory)."""
    if isinstance(zero, np.bool_):
        return bool(zero)
    raise TypeError(f"draft: zero must be True or False, got {type(zero).__name__} {zero!r:.80}")


def _draft_fields(template: dict, layout: dict) -> list | None:
    """The decode layout (see ``_fill``) of a draft of ``template`` whose arrays are at
    ``layout[key path]``: what decoding the draft's bytes gives, key for key. The other values are
    taken as they decode from their own msgpack bytes, not as the template has them (a tuple
    decodes to a list, a numpy scalar to a Python one, a memmap to a read-only array, and the
    sender's objects must not reach the receivers); those that decode to a list or a map are kept
    as those bytes and decoded anew for every receiver. None when a key decodes to something a
    dict cannot hold (a tuple key: a list); receivers of the bytes get a ``CodecError`` then, and
    ``decode_encoded`` gives them the same by decoding the bytes."""
    pack = _encoder.packer.pack
    try:
        fields = []
        for k, v in template.items():
            key = k if type(k) is str else _received_key(pack, k)
            if type(v) is dict:
                inner = []
                for k2, v2 in v.items():
                    key2 = k2 if type(k2) is str else _received_key(pack, k2)
                    inner.append((key2, layout[k, k2], True) if type(v2) is np.ndarray else
                                 (key2, *_as_received(pack, v2)))
                fields.append((key, inner, None))
            elif type(v) is np.ndarray:
                fields.append((key, layout[(k,)], True))
            else:
                fields.append((key, *_as_received(pack, v)))
    except (TypeError, ValueError):  # an unhashable key (what else msgpack raises, it raises for the bytes too)
        _encoder.packer.reset()
        return None
    return fields


def _received_key(pack, key: Any) -> Any:
    """``key`` as msgpack decodes it; TypeError if a dict cannot hold that."""
    got = _unpack(pack(key))
    hash(got)
    return got


def _as_received(pack, value: Any) -> tuple[Any, bool | None]:
    """A draft layout's entry for ``value`` (neither a dict nor an array): ``(value as decoded,
    False)`` when that is immutable, else ``(its msgpack bytes, None)``, for ``_fill`` to decode
    for each receiver."""
    if type(value) in _AS_SENT:
        return value, False
    packed = pack(value)
    got = _unpack(packed)
    if type(got) in _AS_SENT or type(got) is np.ndarray:  # (decoded arrays are read-only, for good)
        return got, False
    return packed, None


def _unpack(packed: bytes) -> Any:
    """What msgpack's decoder makes of ``packed``, a value this process encoded."""
    return msgpack.unpackb(packed, ext_hook=_ext_hook, raw=False, strict_map_key=False)


def encode(obj: Any) -> Encoded:
    """Encode ``obj`` (None, bool, int, float, str, bytes, list/tuple, dict, numpy arrays and
    scalars, nested) into one msgpack document. Arrays are ``numpy.ndarray`` or ``numpy.memmap``
    instances; other ndarray subclasses (masked arrays, matrices) are refused.

    Raises ``CodecError`` for values outside that set (no pickle fallback), naming where the
    first such value is (``value['m'][2]: cannot encode object of type set: ...``).
    """
    try:
        return _encode(_encoder.packer.pack, obj)
    except CodecError as exc:
        raise _located(exc, obj, "value") from exc.__cause__


def _located(exc: CodecError, value: Any, label: str) -> CodecError:
    """``exc`` (what encoding ``value`` raised) with where in ``value`` it happened: ``label`` and
    the key path of the first value that does not encode on its own (``label['m']['y']``; a key
    that does not encode, ``label['m'] (its key <object ...>)``). It said what but not where: a
    payload of twenty keys named no key. Made only once encoding has failed."""
    path = _refused_at(value, 0)
    where = label + ("" if path is None else "".join(path))
    return CodecError(f"{where}: {exc}")


def _refused_at(value: Any, depth: int) -> list[str] | None:
    """The key path (``['m']``, ``[2]``) in ``value`` of the first value that does not encode on its
    own; ``[]`` when that is ``value`` itself; None when each does (the failure was the whole's,
    such as nesting beyond msgpack's limit). Stops going down at the codec's nesting depth."""
    if depth < DEFAULT_MAX_DEPTH:
        if type(value) is dict:
            for k, v in value.items():
                if _refused_at(k, DEFAULT_MAX_DEPTH) is not None:
                    return [f" (its key {k!r:.40})"]
                sub = _refused_at(v, depth + 1)
                if sub is not None:
                    return [f"[{k!r:.40}]", *sub]
            return None
        if type(value) is list or type(value) is tuple:
            for i, v in enumerate(value):
                sub = _refused_at(v, depth + 1)
                if sub is not None:
                    return [f"[{i}]", *sub]
            return None
    try:
        _counted(_encoder.packer.pack, value)
    except CodecError:
        return []
    return None


def _encode(pack, *args: Any) -> Encoded:
    """Run ``pack(*args)`` with the document counters reset; any failure becomes CodecError."""
    data = _counted(pack, *args)
    enc = _encoder
    return Encoded(data, enc.array_bytes, enc.floats, enc.layout)


def _counted(fn, *args: Any) -> Any:
    """``fn(*args)`` (an encoding step) with the document counters reset first; any failure
    becomes CodecError, the packer left ready for the next document."""
    enc = _encoder
    enc.array_bytes = 0
    enc.floats = 0
    enc.layout = None
    try:
        return fn(*args)
    except CodecError:
        enc.packer.reset()
        raise
    except (TypeError, ValueError, OverflowError, BufferError) as exc:
        # (BufferError: a memoryview msgpack cannot take as one contiguous block)
        enc.packer.reset()
        raise CodecError(f"cannot encode value: {exc}") from exc


def encode_message(kind: str, payload: Any) -> Encoded:
    """Encode one network message: the document ``[kind, payload]``.

    Raises ``CodecError`` for values the codec cannot encode, naming the kind and where the
    first such value is (``the 'k' message's payload['m']['y']: cannot encode object of type
    object: ...``)."""
    if type(payload) is dict and type(kind) is str:
        # A payload of arrays and small plain scalars (int, bool, None, short str), under str
        # keys, is encoded from a plan when one with the same kind, keys, array dtypes, shapes and
        # strides and the same scalar values was encoded before: the framing bytes (headers,
        # padding, the packed scalars) depend on nothing else, so only the arrays' elements are
        # new. (Floats are left out: -0.0 == 0.0 would share a plan but not their bytes.)
        key = [kind]
        arrays = []
        for k, v in payload.items():
            if type(k) is not str:
                break
            t = type(v)
            if t is np.ndarray:
                key += (k, v.dtype, v.shape, v.strides)
                arrays.append(v)
            elif t is int or t is bool or v is None or (t is str and len(v) <= _PLAN_STR):
                key += (k, t, v)
            else:
                break
        else:
            key = tuple(key)
            plan = _PLANS.get(key)
            if plan is None:
                try:
                    return _encode(_encoder.message, kind, payload, key)
                except CodecError as exc:
                    raise _located(exc, payload, f"the {kind!r} message's payload") from exc.__cause__
            framing, slots, array_bytes, floats, layout = plan
            parts = framing.copy()
            for i, v in zip(slots, arrays):
                parts[i] = v
            return Encoded(b"".join(parts), array_bytes, floats, layout)
    try:
        return _encode(_encoder.message, kind, payload)
    except CodecError as exc:
        raise _located(exc, payload, f"the {kind!r} message's payload") from exc.__cause__


_PLAN_STR = 64  # longest str value a plan key may hold (plans keep their keys)


# encode_message's plans: (kind, key, dtype, shape, strides, ...) -> (framing parts with empty
# array slots, slot indices, array bytes, floats). Bounded: cleared when full.
_PLANS: dict[tuple, tuple] = {}
_MAX_PLANS = 4096


def decode_encoded(encoded: Encoded) -> Any:
    """The payload of a document this process encoded (what ``decode_message(encoded.data)[1]``
    returns, arrays as read-only views on ``encoded.data``). A document written from a plan
    carries its layout: the offsets of its arrays are known, so nothing is parsed or looked up
    (an in-process transport decodes every upload; this is most of that cost). Raises
    ``CodecError`` as ``decode_message`` does for other documents."""
    layout = encoded.layout
    if layout is not None:
        return _fill(encoded.data, layout)
    return decode_message(encoded.data)[1]


def decode_message(data: bytes | bytearray | memoryview, *, max_bytes: int = DEFAULT_MAX_BYTES,
                   max_depth: int = DEFAULT_MAX_DEPTH) -> tuple[str, Any]:
    """Decode a document made by ``encode_message``; returns ``(kind, payload)``.

    A payload that is a map of names to arrays and scalars (what protocols send) is read
    directly: its arrays are read-only views on ``data`` itself, no copy (``data`` that is not
    ``bytes`` is copied once first, so that the views cannot change under the receiver). Other
    payloads go through msgpack's decoder. Raises ``CodecError`` if the bytes are malformed,
    over ``max_bytes``, nested deeper than ``max_depth``, would decode into more objects than
    their size allows (see the module docstring) or are not a ``[kind, payload]`` pair;
    ``TypeError`` if ``data`` is not a bytes-like object, or for a ``max_bytes`` or ``max_depth``
    that is not an integer (NumPy's are taken; a bool, a float, a str or None is refused);
    ``ValueError`` naming the parameter for a ``max_bytes`` below 1 or a ``max_depth`` below 1
    (a message is a ``[kind, payload]`` array, one deep), which no message could meet.
    """
    if max_bytes.__class__ is not int or max_depth.__class__ is not int:  # (attributes, no call: per message)
        max_bytes, max_depth = _limits("decode_message", max_bytes, max_depth, 1)
    # Limits below their least (max_bytes < 1, max_depth < 1) are refused in branches they take
    # anyway, not by compares on the fast path: a max_bytes < 1 makes every message too long (or,
    # empty, malformed), and a max_depth < 2 skips the fast path; both reach the general path
    # below, which checks them before decode.
    if type(data) is not bytes:
        view = memoryview(data)  # (TypeError for what is not a bytes-like object)
        if view.nbytes > max_bytes:  # refused before it is copied
            raise _too_long("decode_message", view.nbytes, max_bytes, max_depth, 1)
        data = bytes(view)
    n = len(data)
    if n > max_bytes:
        raise _too_long("decode_message", n, max_bytes, max_depth, 1)
    if max_depth >= 2:
        layout = _LAYOUTS_SEEN.get((n, data[:_KEY_BYTES]))
        if layout is not None:
            for at, blob in layout[1]:
                if not data.startswith(blob, at):
                    break
            else:
                return layout[0], _fill(data, layout[2])
        try:
            fast = _read_message(data, n, max_depth >= 3)
        except (IndexError, struct.error, UnicodeDecodeError):
            fast = None  # malformed: the general decoder below says how
        if fast is not None:
            return fast
    if max_bytes < 1 or max_depth < 1:  # (the general path: msgpack's decoder follows)
        _limits("decode_message", max_bytes, max_depth, 1)  # (raises)
    doc = decode(data, max_bytes=max_bytes, max_depth=max_depth)
    if type(doc) is not list or len(doc) != 2 or type(doc[0]) is not str:
        raise CodecError("not a fedsim message: expected a [kind, payload] array")
    return doc[0], doc[1]


_U16, _U32 = struct.Struct(">H"), struct.Struct(">I")
_F32, _F64 = struct.Struct(">f"), struct.Struct(">d")
# msgpack's fixed-width integer markers -> (Struct, width)
_INTS = {0xCC: (struct.Struct(">B"), 1), 0xCD: (_U16, 2), 0xCE: (_U32, 4), 0xCF: (struct.Struct(">Q"), 8),
         0xD0: (struct.Struct(">b"), 1), 0xD1: (struct.Struct(">h"), 2), 0xD2: (struct.Struct(">i"), 4),
         0xD3: (struct.Struct(">q"), 8)}
_CONSTANTS = {0xC0: None, 0xC2: False, 0xC3: True}


def _read_message(data: bytes, n: int, nested: bool = True) -> tuple[str, dict] | None:
    """``[kind, {str: array or scalar}]`` read straight from ``data`` (arrays as views on it),
    or ``None`` when the document has another shape; then msgpack decodes it. With ``nested``
    a value may also be one map of the same kind (a whole model: ``{"model": {name: array}}``),
    read the same way. The caller turns IndexError, struct.error and UnicodeDecodeError (a
    truncated or malformed document) into that fallback too, so that every error message comes
    from one place."""
    if data[0] != 0x92:
        return None
    kind, pos = _read_str(data, 1)
    if kind is None:
        return None
    arrays: list[tuple[int, int]] = []  # where each array's elements are
    got = _read_map(data, pos, n, arrays, 1 if nested else 0)
    if got is None:
        return None
    payload, pos = got
    if pos != n:
        return None
    if not any(type(v) is dict for v in payload.values()):
        _remember(data, kind, payload, arrays)  # (a nested map would be shared by every later copy)
    return kind, payload


def _read_map(data: bytes, pos: int, n: int, arrays: list, depth: int) -> tuple[dict, int] | None:
    """The map of str keys to arrays and scalars at ``pos`` (and, ``depth`` more levels down,
    maps of the same kind), and where it ends; ``None`` for anything else, and for a map whose
    entries, with those of the maps in it, number more than 16 + size/32 (msgpack's decoder
    then costs them)."""
    t = data[pos]
    if 0x80 <= t <= 0x8F:
        count = t & 0x0F
        pos += 1
    elif t == 0xDE:
        count = _U16.unpack_from(data, pos + 1)[0]
        if count > 16 + (n >> 5):
            return None  # many small entries: msgpack's decoder, after _scan has costed them
        pos += 3
    else:
        return None
    payload: dict[str, Any] = {}
    inner = 0  # entries of the maps one level down, so far
    for _ in range(count):
        key, pos = _read_str(data, pos)
        if key is None:
            return None
        t = data[pos]
        if t <= 0x7F:
            value = t
            pos += 1
        elif 0xD4 <= t <= 0xD8 or 0xC7 <= t <= 0xC9:
            if t >= 0xD4:
                length, body = 1 << (t - 0xD4), pos + 2
            elif t == 0xC7:
                length, body = data[pos + 1], pos + 3
            elif t == 0xC8:
                length, body = _U16.unpack_from(data, pos + 1)[0], pos + 4
            else:
                length, body = _U32.unpack_from(data, pos + 1)[0], pos + 6
            if data[body - 1] != ARRAY_EXT or body + length > n:
                return None
            value = _array(data, body, length)
            pos = body + length
            arrays.append((pos - value.nbytes, pos))
        elif t >= 0xE0:
            value = t - 0x100
            pos += 1
        elif t == 0xCB:
            value = _F64.unpack_from(data, pos + 1)[0]
            pos += 9
        elif t == 0xCA:
            value = _F32.unpack_from(data, pos + 1)[0]
            pos += 5
        elif t in _INTS:
            fmt, width = _INTS[t]
            value = fmt.unpack_from(data, pos + 1)[0]
            pos += 1 + width
        elif t in _CONSTANTS:
            value = _CONSTANTS[t]
            pos += 1
        elif depth > 0 and (0x80 <= t <= 0x8F or t == 0xDE):
            # the limit on entries is what bounds the objects built without _scan's costing: it
            # holds for every entry read here, not for each map alone (many maps of 15 small
            # entries would take twice the documented memory per byte)
            inner += t & 0x0F if t != 0xDE else _U16.unpack_from(data, pos + 1)[0]
            if count + inner > 16 + (n >> 5):
                return None
            got = _read_map(data, pos, n, arrays, depth - 1)
            if got is None:
                return None
            value, pos = got
        else:
            value, pos = _read_str(data, pos)
            if value is None:
                return None  # a list, a map, bytes, ...: msgpack's decoder handles it
        payload[key] = value
    if len(payload) != count:
        return None  # a repeated key: msgpack's decoder refuses it (with the key)
    return payload, pos


# Documents of one protocol step share their layout (kind, names, dtypes, shapes, scalars) and
# differ only in array elements. A layout read once is remembered under (length, first bytes);
# a later document uses it only if every byte outside the element ranges is identical, which
# makes it the same document up to element values: its arrays are then views at the remembered
# offsets, and the parse (about 5 us of Python for two arrays) is skipped.
# What a layout keeps is mostly Python objects, not bytes: its keys and scalars, a tuple per
# field, an array's shape. 1,000 fields of a 2-character key and an int take 4 kB of document and
# 160 kB of memory, so a bound on the bytes alone let 1,024 such layouts hold 157 MiB. Each layout
# is charged an upper estimate of its memory, and the cache is cleared before the total would pass
# _MAX_LAYOUT_BYTES: 1 KiB, plus 8 bytes per byte of the document outside the arrays (copied, and
# the most the keys' and scalars' objects grow with it: 4 bytes of str per byte of UTF-8), plus
# 256 per field (a tuple, a key, a value) and 256 per array (a shape, an offset, a slice of the
# document). Measured with tracemalloc, layouts take a third to three quarters of that; a protocol
# step's (two arrays, or one and a scalar) is charged 2 to 2.5 KiB, so 1,024 of them still fit.
_LAYOUTS_SEEN: dict[tuple[int, bytes], tuple] = {}
_KEY_BYTES = 16
_MAX_LAYOUTS = 1024
_MAX_SKELETON = 4096  # bytes outside the arrays: longer documents are not remembered
_MAX_LAYOUT_BYTES = 4 << 20  # the cache's estimated memory, at most
_layout_bytes = 0  # the estimated memory of the layouts in _LAYOUTS_SEEN


def _remember(data: bytes, kind: str, payload: dict, arrays: list[tuple[int, int]]) -> None:
    fields, spans = [], iter(arrays)
    for key, value in payload.items():
        if type(value) is np.ndarray:
            value = (value.shape, value.dtype, next(spans, (None,))[0])
            if value[2] is None:
                return  # (a repeated key, which _read_map never lets through: the decoder refuses it)
            fields.append((key, value, True))
        else:
            fields.append((key, value, False))
    if next(spans, None) is not None:
        return  # (likewise: a repeated key that replaced an array)
    outside = len(data) - sum(end - start for start, end in arrays)
    if outside > _MAX_SKELETON:
        return  # long strings: not worth keeping a copy of
    skeleton, at = [], 0
    for start, end in arrays:
        skeleton.append((at, data[at:start]))
        at = end
    skeleton.append((at, data[at:]))
    global _layout_bytes
    cost = 1024 + 8 * outside + 256 * (len(fields) + len(arrays))
    if not _LAYOUTS_SEEN or len(_LAYOUTS_SEEN) >= _MAX_LAYOUTS or _layout_bytes + cost > _MAX_LAYOUT_BYTES:
        _LAYOUTS_SEEN.clear()  # (found empty: cleared from outside, which leaves the count behind)
        _layout_bytes = 0
    _LAYOUTS_SEEN[len(data), data[:_KEY_BYTES]] = (kind, skeleton, fields)
    _layout_bytes += cost


def _fill(data: bytes, fields: list) -> dict:
    """The payload of a document whose layout is ``fields``: arrays as views on ``data`` (entries
    ``(key, (shape, dtype, offset), True)``), immutable scalars (``(key, value, False)``), and, in
    a draft's, maps one level down (``(key, their fields, None)``) and values decoded anew for
    each call from their msgpack bytes (``(key, bytes, None)``: lists, maps)."""
    payload = {}
    for key, value, is_array in fields:
        if is_array:
            shape, dtype, offset = value
            value = np.ndarray(shape, dtype, data, offset)
            if dtype is _BOOL:
                _check_bool(value)
            if not value.flags.aligned:
                value = value.copy()
                value.flags.writeable = False
        elif is_array is None:
            value = _fill(data, value) if type(value) is list else _unpack(value)
        payload[key] = value
    return payload


def _read_str(data: bytes, pos: int) -> tuple[str | None, int]:
    """A msgpack str (fixstr, str 8 or str 16) at ``pos``, and where it ends; (None, pos) if
    something else is there."""
    t = data[pos]
    if 0xA0 <= t <= 0xBF:
        start = pos + 1
        end = start + (t & 0x1F)
    elif t == 0xD9:
        start = pos + 2
        end = start + data[pos + 1]
    elif t == 0xDA:
        start = pos + 3
        end = start + _U16.unpack_from(data, pos + 1)[0]
    else:
        return None, pos
    if end > len(data):
        raise IndexError("str runs past the end of the document")
    return data[start:end].decode("utf-8"), end


# (dtype code, ndim) -> (dtype, header length, shape Struct)
_LAYOUTS = {(code, n): (dt, 2 + 4 * n, _SHAPES[n])
            for code, dt in _DTYPES.items() for n in range(_MAX_NDIM + 1)}


def _array(data: bytes, body: int, length: int) -> np.ndarray:
    """The array in the ext body ``data[body:body + length]``: a read-only view on ``data`` when
    its elements are aligned, else an aligned read-only copy. Raises ``CodecError``."""
    if length < 2:
        raise CodecError(f"array ext truncated: {length} bytes, header needs at least 2")
    layout = _LAYOUTS.get((data[body], data[body + 1]))
    if layout is None:
        if data[body] not in _DTYPES:
            raise CodecError(f"array ext has unknown dtype code {data[body]}")
        raise CodecError(f"array ext has {data[body + 1]} dimensions (max {_MAX_NDIM})")
    dtype, head, shape_struct = layout
    if length < head:
        raise CodecError(f"array ext truncated: header needs {head} bytes, got {length}")
    shape = shape_struct.unpack_from(data, body + 2)
    expected = _prod(shape) * dtype.itemsize
    pad = length - head - expected
    if not 0 <= pad <= _MAX_PAD:
        raise CodecError(
            f"array ext length mismatch: shape {shape} x itemsize {dtype.itemsize} = {expected} bytes, "
            f"buffer has {length - head} after the header"
        )
    start = body + head
    if pad and data[start:start + pad].count(0) != pad:
        raise CodecError("array ext header padding is not zero")
    try:  # one call: frombuffer + reshape costs twice as much
        arr = np.ndarray(shape, dtype, data, start + pad)
    except ValueError as exc:  # zero elements, but the other dimensions overflow NumPy's sizes
        raise CodecError(f"array ext shape {shape} is too large: {exc}") from None
    if dtype is _BOOL:
        _check_bool(arr)
    if not arr.flags.aligned:
        arr = arr.copy()
        arr.flags.writeable = False
    return arr


def _check_bool(arr: np.ndarray) -> None:
    """Raise ``CodecError`` unless every byte of the bool array ``arr`` is 0 or 1: NumPy's bool
    holds nothing else (another byte reads as True but keeps its bits: equal arrays would differ
    in ``tobytes``, hashes and a re-encoding)."""
    if arr.size:
        raw = arr.reshape(-1).view(np.uint8)
        if raw.max() > 1:
            at = int(np.argmax(raw > 1))
            raise CodecError(f"bool array ext holds byte 0x{int(raw[at]):02x} at element {at} (only 0 and 1 are bools)")


def _ext_hook(code: int, data: bytes) -> np.ndarray:
    if code != ARRAY_EXT:
        raise CodecError(f"unknown ext type {code}")
    return _array(data, 0, len(data))


# What a decode may allocate. Every msgpack item becomes a Python object and a place in its
# container, and may take a single byte of input: an empty list is 56 + 8 bytes, a one-entry map
# 224 + 8 for three bytes, an int outside -5..256 32 + 8. Unchecked, a document of empty lists
# takes 64 times its size in memory, one of one-entry maps 77 times. Before msgpack builds
# anything, ``_scan`` charges every item what CPython 3.11 and NumPy allocate for it (upper
# estimates, measured with tracemalloc) and refuses the document once the total exceeds
# DECODE_OBJECT_BYTES_PER_BYTE per input byte plus DECODE_OBJECT_SLACK. Arrays, floats, longer
# strings and lists of numbers stay far below (a map of arrays costs about 2 bytes per byte, a
# list of floats 3.6, of ints 8 to 13); only long runs of tiny containers or scalars reach it:
# beyond the slack, some 680 of the ints -32..-6 (40 bytes per byte), 1,500 2-character strings
# (20), 340 empty lists (64) or 90 one-entry maps (77). Every message of fedsim's protocols (as
# their tests send them) is charged at most 2 bytes per byte plus 1.5 KiB. Bulk numbers belong in
# arrays anyway.
DECODE_OBJECT_BYTES_PER_BYTE = 16
DECODE_OBJECT_SLACK = 16 * 1024

# type byte -> what follows: (kind, fixed size or length-field width, charge of fixed items)
_FIXED, _ARR, _MAP, _STR, _BIN, _EXT, _BAD = range(7)
_ITEMS: list[tuple[int, int, int]] = [(_BAD, 0, 0)] * 256
# (an item's place in its container is charged with the container: 8 bytes per item of a list)
for _t in range(0x80):
    _ITEMS[_t] = (_FIXED, 1, 0)  # positive fixint: CPython's small ints, shared
for _t in range(0x80, 0x90):
    _ITEMS[_t] = (_MAP, 0, _t & 0x0F)  # fixmap: the count in the type byte
for _t in range(0x90, 0xA0):
    _ITEMS[_t] = (_ARR, 0, _t & 0x0F)
for _t in range(0xA0, 0xC0):
    _ITEMS[_t] = (_STR, 0, _t & 0x1F)
for _t in range(0xE0, 0x100):  # negative fixint; -5..-1 are shared small ints
    _ITEMS[_t] = (_FIXED, 1, 0 if _t >= 0xFB else 32)
_ITEMS[0xC0] = _ITEMS[0xC2] = _ITEMS[0xC3] = (_FIXED, 1, 0)  # nil, false, true: shared
_ITEMS[0xCC] = (_FIXED, 2, 0)  # uint 8: always a small int
for _t, _size in ((0xCD, 3), (0xCE, 5), (0xD0, 2), (0xD1, 3), (0xD2, 5)):
    _ITEMS[_t] = (_FIXED, _size, 32)
_ITEMS[0xCF] = _ITEMS[0xD3] = (_FIXED, 9, 40)  # 64-bit ints: up to 3 digits of 30 bits
_ITEMS[0xCA] = (_FIXED, 5, 24)  # float 32 and 64: a Python float
_ITEMS[0xCB] = (_FIXED, 9, 24)
for _t, _w in ((0xC4, 1), (0xC5, 2), (0xC6, 4)):
    _ITEMS[_t] = (_BIN, _w, -1)
for _t, _w in ((0xD9, 1), (0xDA, 2), (0xDB, 4)):
    _ITEMS[_t] = (_STR, _w, -1)  # (a count of -1: the length follows in _w bytes)
for _t, _w in ((0xC7, 1), (0xC8, 2), (0xC9, 4)):
    _ITEMS[_t] = (_EXT, _w, -1)
for _t, _size in ((0xD4, 1), (0xD5, 2), (0xD6, 4), (0xD7, 8), (0xD8, 16)):
    _ITEMS[_t] = (_EXT, 0, _size)  # fixext: the body length in the type byte
_ITEMS[0xDC], _ITEMS[0xDD] = (_ARR, 2, -1), (_ARR, 4, -1)
_ITEMS[0xDE], _ITEMS[0xDF] = (_MAP, 2, -1), (_MAP, 4, -1)
_ITEMS = tuple(_ITEMS)  # 0xC1 stays _BAD: never used by msgpack
# runs of fixed-size items: all one-byte items together, longer ones of one type byte
_ONE_BYTE = bytes(range(0x80)) + b"\xc0\xc2\xc3" + bytes(range(0xE0, 0x100))
_SHARED = bytes(range(0x80)) + b"\xc0\xc2\xc3" + bytes(range(0xFB, 0x100))  # no object of their own
_RUNS: dict[int, re.Pattern] = {}  # type byte -> a pattern matching a run from it
_SAME: dict[int, tuple[bool, ...]] = {}  # type byte -> which bytes may start the next item of a run
for _t, (_kind, _size, _) in enumerate(_ITEMS):
    if _kind == _FIXED:
        if _size == 1:
            _RUNS[_t] = re.compile(b"[" + re.escape(_ONE_BYTE) + b"]+")
            _SAME[_t] = tuple(_b in _ONE_BYTE for _b in range(256))
        else:
            # possessive: a plain repeat of a group keeps a backtracking mark per repetition
            _RUNS[_t] = re.compile(b"(?:" + re.escape(bytes((_t,))) + b".{%d})++" % (_size - 1), re.DOTALL)
            _SAME[_t] = tuple(_b == _t for _b in range(256))


def _dict_cost(k: int) -> int:
    """Upper estimate of a dict of ``k`` entries as msgpack builds it (presized: CPython 3.11
    allocates 8 slots up to 5 entries, then about 3k/2 rounded up to a power of two)."""
    return 64 if k == 0 else 224 if k <= 5 else 116 + 60 * k


def _scan(data: bytes, max_depth: int, budget: int) -> int:
    """Walk the msgpack document ``data`` without building it, and raise ``CodecError`` unless it
    is exactly one well-formed document whose containers nest at most ``max_depth`` deep (the
    root counts as 1), whose ext items are all array exts, and whose Python objects are estimated
    at no more than ``budget`` bytes. A container may not claim more items than bytes follow it,
    and a str, bin or ext no more bytes than the document has left, so msgpack never
    preallocates for items that are not there. Returns the estimate. Work: a few operations per
    item (every item takes at least one byte), or one regular expression for a run of numbers.
    Returns ``(estimate, entries)``, ``entries`` the number of map entries the document declares
    (the maps msgpack builds from it hold fewer exactly when a map repeats a key)."""
    n = len(data)
    items, u16, u32 = _ITEMS, _U16.unpack_from, _U32.unpack_from
    pos = cost = entries = 0
    left = 1  # items still to read at the current level (the root: one)
    stack: list[int] = []  # the enclosing levels' items still to read
    try:
        while True:
            if not left:
                if not stack:
                    break
                left = stack.pop()
                continue
            left -= 1
            t = data[pos]
            kind, width, count = items[t]
            if kind == _FIXED:
                if left > 8 and _SAME[t][data[pos + width]]:
                    # a run of items of this size (one-byte items, or of type t): skip them all at C
                    # speed (long lists of numbers)
                    run = _RUNS[t].match(data, pos, min(n, pos + (left + 1) * width))
                    k = (run.end() - pos) // width
                    if width == 1:  # ints -32..-6 are objects of their own, the rest shared
                        cost += 32 * len(data[pos:pos + k].translate(None, _SHARED))
                    else:
                        cost += count * k
                    pos += k * width
                    left -= k - 1
                else:
                    pos += width
                    cost += count
                if cost > budget:
                    _over_budget(n, budget)
                continue
            if count < 0:  # the length or count follows the type byte
                count = data[pos + 1] if width == 1 else u16(data, pos + 1)[0] if width == 2 \
                    else u32(data, pos + 1)[0]
            pos += 1 + width
            if kind == _STR:
                end = pos + count
                if end > n:
                    raise CodecError(f"malformed message: str of {count} bytes at offset {pos} runs past the end")
                if count > 1:  # ("" and one ASCII character are shared objects)
                    cost += 49 + count if data[pos:end].isascii() else 80 + 4 * count
                pos = end
            elif kind == _ARR or kind == _MAP:
                if len(stack) >= max_depth:  # this container's depth is len(stack) + 1
                    raise CodecError(f"document nesting deeper than {max_depth}")
                if kind == _MAP:
                    cost += _dict_cost(count)
                    entries += count
                    count *= 2
                else:
                    cost += 56 + 8 * count  # the list and its items' places
                if count > n - pos:  # every item takes at least one byte
                    what = "map" if kind == _MAP else "array"
                    raise CodecError(f"malformed message: {what} at offset {pos - 1 - width} claims "
                                     f"{count} items but {n - pos} bytes follow")
                if count:
                    stack.append(left)
                    left = count
            elif kind == _EXT:
                code = data[pos]
                if code != ARRAY_EXT:
                    name = " (msgpack Timestamp)" if code == 0xFF else ""
                    raise CodecError(f"unknown ext type {code - 256 if code > 127 else code}{name}")
                pos += 1
                end = pos + count
                if end > n:
                    raise CodecError(f"malformed message: ext of {count} bytes at offset {pos} runs past the end")
                # the body as a bytes object (33 + length), the array (96 + 16 per dimension) and
                # an aligned copy of its elements if they arrive unaligned (at most the length)
                cost += 129 + 2 * count + (16 * data[pos + 1] if count > 1 else 0)
                pos = end
            elif kind == _BIN:
                end = pos + count
                if end > n:
                    raise CodecError(f"malformed message: bin of {count} bytes at offset {pos} runs past the end")
                if count > 1:  # (b"" and single bytes are shared objects)
                    cost += 33 + count
                pos = end
            else:
                raise CodecError(f"malformed message: byte 0x{t:02x} at offset {pos - 1} is never used by msgpack")
            if cost > budget:
                _over_budget(n, budget)
    except (IndexError, struct.error):
        raise CodecError(f"malformed message: truncated ({n} bytes)") from None
    if pos != n:
        raise CodecError(f"malformed message: truncated ({n} bytes)" if pos > n else
                         f"malformed message: {n - pos} extra bytes after the document")
    return cost, entries


def _limits(call: str, max_bytes: Any, max_depth: Any, least_depth: int) -> tuple[int, int]:
    """``call``'s ``max_bytes`` and ``max_depth`` when either is not an int or is below its least
    (1 byte; ``least_depth``: 0 for ``decode``, a document without containers, 1 for
    ``decode_message``, whose [kind, payload] array is one deep): NumPy integers as ints; anything
    else ``TypeError`` naming the parameter (a str was "'>' not supported between instances of
    'int' and 'str'"; ``decode`` took max_depth "32" or None for a document without containers;
    True was a limit of one), and a smaller integer ``ValueError`` naming it (max_bytes -1 was a
    CodecError "message of 1 bytes exceeds the limit of -1", as if the document were at fault)."""
    out = []
    for name, v, least, what in (("max_bytes", max_bytes, 1, "bytes"), ("max_depth", max_depth, least_depth,
                                 "0: a document without containers" if least_depth == 0 else
                                 "a message is a [kind, payload] array")):
        if not isinstance(v, (int, np.integer)) or isinstance(v, (bool, np.bool_)):
            raise TypeError(f"{call}: {name} must be an integer, got {type(v).__name__} {v!r:.80}")
        if v < least:
            raise ValueError(f"{call}: {name} must be at least {least} ({what}), got {int(v)}")
        out.append(int(v))
    return out[0], out[1]


def _too_long(call: str, n: int, max_bytes: int, max_depth: int, least_depth: int) -> CodecError:
    """The ``CodecError`` of a message of ``n`` bytes over ``max_bytes``; first ``_limits``'s
    ``ValueError`` if a limit is below its least (every message is over a max_bytes below 1)."""
    _limits(call, max_bytes, max_depth, least_depth)
    return CodecError(f"message of {n} bytes exceeds the limit of {max_bytes} bytes")


def _over_budget(n: int, budget: int) -> None:
    raise CodecError(
        f"document of {n} bytes would decode into more than {budget} bytes of Python objects "
        f"({DECODE_OBJECT_BYTES_PER_BYTE} per input byte + {DECODE_OBJECT_SLACK} bytes): too many small "
        f"containers, ints or strings for its size (send bulk numbers as numpy arrays)")


def decode(data: bytes | bytearray | memoryview, *, max_bytes: int = DEFAULT_MAX_BYTES,
           max_depth: int = DEFAULT_MAX_DEPTH) -> Any:
    """Decode one document produced by ``encode``.

    Arrays come back as read-only numpy views (copy before modifying). Raises ``CodecError`` if
    the bytes are malformed, longer than ``max_bytes``, nested deeper than ``max_depth`` or would
    decode into more objects than their size allows (see the module docstring); ``TypeError`` if
    ``data`` is not a bytes-like object, or for a ``max_bytes`` or ``max_depth`` that is not an
    integer (NumPy's are taken; a bool, a float, a str or None is refused); ``ValueError`` naming
    the parameter for a ``max_bytes`` below 1 or a ``max_depth`` below 0 (0 takes a document
    without containers).
    """
    if max_bytes.__class__ is not int or max_depth.__class__ is not int or max_bytes < 1 or max_depth < 0:
        max_bytes, max_depth = _limits("decode", max_bytes, max_depth, 0)
    if type(data) is not bytes:
        view = memoryview(data)  # (TypeError for what is not a bytes-like object)
        if view.nbytes > max_bytes:  # refused before it is copied
            raise CodecError(f"message of {view.nbytes} bytes exceeds the limit of {max_bytes} bytes")
        data = bytes(view)
    n = len(data)
    if n > max_bytes:
        raise CodecError(f"message of {n} bytes exceeds the limit of {max_bytes} bytes")
    _, entries = _scan(data, max_depth, DECODE_OBJECT_BYTES_PER_BYTE * n + DECODE_OBJECT_SLACK)
    built = 0  # entries of the maps msgpack built: fewer than declared when a map repeats a key

    def count(d: dict) -> dict:
        nonlocal built
        built += len(d)
        return d

    try:
        doc = msgpack.unpackb(data, ext_hook=_ext_hook, raw=False, strict_map_key=False,
                              object_hook=count if entries else None)
    except CodecError:
        raise
    except Exception as exc:  # invalid UTF-8, unhashable map keys: msgpack raises several types
        raise CodecError(f"malformed message: {type(exc).__name__}: {exc}") from exc
    if built != entries:
        del doc  # (freed before the search for the key)
        _repeated_key(data)
    return doc


def _repeated_key(data: bytes) -> None:
    """Raise the ``CodecError`` for a document (``_scan`` passed it) in which a map repeats a key:
    msgpack keeps the last value and drops the others without a word. (Keys equal in Python, such as
    1, 1.0 and True, are one key.) Decodes again to name the first repeat, within about the memory
    the first decode took: nothing is kept of a map once checked, and a map's keys are compared
    through a sorted array of their hashes (16 bytes a key; a set of them would take up to 64)."""

    def pairs(items: list) -> None:
        if len(items) < 2:
            return
        hashes = np.fromiter((hash(k) for k, _ in items), np.int64, len(items))
        order = np.argsort(hashes, kind="stable")
        hashes.sort()  # (in place: hashes[order] would be a third array)
        first = None  # the lowest index of a key equal to an earlier one
        for at in np.flatnonzero(hashes[1:] == hashes[:-1]):
            j = int(order[at + 1])  # the later of two keys with one hash (the sort is stable)
            for earlier in order[np.searchsorted(hashes, hashes[at]):at + 1]:
                if items[int(earlier)][0] == items[j][0]:
                    if first is None or j < first:
                        first = j
                    break
        if first is not None:
            raise CodecError(f"malformed message: a map repeats the key {items[first][0]!r:.80} "
                             f"(msgpack would keep its last value and drop the others)")

    msgpack.unpackb(data, ext_hook=_ext_hook, raw=False, strict_map_key=False, object_pairs_hook=pairs)
    raise CodecError("malformed message: a map repeats a key")  # (not reached: the decode above raises)
