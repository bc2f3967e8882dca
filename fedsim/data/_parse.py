"""Fast numeric table parsing with exact error locations.

The fast path hands chunks of the file to :func:`numpy.loadtxt` (a C parser) after a few cheap
byte-level checks.  When a chunk fails any check, a strict line-by-line parser re-reads only that
chunk: it either raises :class:`DataFormatError` naming the 1-based line and the problem, or (if
the fast path was merely stricter than needed) returns the rows itself.  So the slow path is the
reference semantics and the fast path an optimisation that never accepts more.

Files are read whole (:func:`read_bytes`): the fast path parses chunks of one buffer, and the
loaders' checks run vectorised over whole columns, so memory grows with the file's size by
design (about the file plus its parsed columns).  What is bounded is the line: a line longer
than :data:`MAX_LINE_BYTES` is a :class:`DataFormatError` naming the file and line right after
the read, before any parsing, decoding or splitting, which copy a line whole (a file of
gigabytes without a line break was one line for them).  The check looks for a newline in each
window of half the cap with ``bytes.find``: a few calls per megabyte, no copy, nothing
measurable beside the parse.
"""

from __future__ import annotations

import io
import math
import re
from pathlib import Path
from typing import Sequence

import numpy as np

from .ratings import DataFormatError

_INT_RE = re.compile(rb"\s*[+-]?\d+\s*")
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
BOM = b"\xef\xbb\xbf"
_FLOAT_RE = re.compile(rb"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*")
CHUNK_BYTES = 16 << 20
#: The longest line (bytes before its newline) a data file may hold: the longest lines of the
#: supported formats (a movie title with its genres, a wide CSV row) are a few hundred bytes.  A
#: longer one (a file without line breaks) is a DataFormatError naming it before it is parsed:
#: a line is split, copied, decoded and shown whole by the parsers, so one line of gigabytes
#: multiplied the memory of reading the file.  Read at call time, so that tests can lower it.
MAX_LINE_BYTES = 1 << 20

Column = tuple[str, str]  # (name, kind); kind: "int", "int32", "float", "float32"

# fast-path dtypes; the strict parser always returns int64 / float64 (ids too large for int32
# make the fast path fail and fall back, so nothing overflows)
_FAST_DTYPE = {"int": np.int64, "int32": np.int32, "float": np.float64, "float32": np.float32}


def _is_int(kind: str) -> bool:
    return kind.startswith("int")


# the magic numbers of compressed files: read as text they failed with a misleading message
# (gzip: "byte b'\x8b' ... is not valid utf-8; pass encoding='latin-1'", or a wrong field count
# showing binary garbage on line 1)
_COMPRESSED = (
    (b"\x1f\x8b", "gzip-compressed", "decompress it first (gunzip)"),
    (b"PK\x03\x04", "a zip archive", "unpack it first, or install a MovieLens zip with "
     "`fedsim data get NAME --from ZIP`"),
    (b"\xfd7zXZ\x00", "xz-compressed", "decompress it first (unxz)"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed", "decompress it first (unzstd)"),
)
_BZIP2 = re.compile(rb"BZh[1-9]1AY&SY")


# UTF-32 first: its little-endian mark starts with UTF-16's
_WIDE_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"),
              (b"\xff\xfe", "UTF-16"), (b"\xfe\xff", "UTF-16"))


def refuse_non_text(path: Path, head: bytes) -> None:
    """Raise :class:`DataFormatError` naming ``path`` when ``head`` (the file's first bytes) is
    the start of a gzip, zip, bzip2, xz or zstd file, or the byte order mark of UTF-16 or UTF-32
    text (a spreadsheet's "Unicode text"): the loaders read plain text in an ASCII-compatible
    encoding only."""
    for bom, enc in _WIDE_BOMS:
        if head.startswith(bom):
            # it failed with "byte b'\xff' ... is not valid utf-8; pass encoding='latin-1'", which
            # gives NUL bytes in every field
            raise DataFormatError(path, None, f"the file is {enc} text (byte order mark {bom.hex(' ').upper()}), "
                                  "not UTF-8 or another ASCII-compatible encoding: save it as UTF-8")
    for magic, what, how in _COMPRESSED:
        if head.startswith(magic):
            raise DataFormatError(path, None, f"the file is {what}, not a text file: {how}")
    if _BZIP2.match(head):
        raise DataFormatError(path, None, "the file is bzip2-compressed, not a text file: decompress it first (bunzip2)")


def check_line_lengths(path: Path, data: bytes, max_line: int | None = None) -> None:
    """Raise :class:`DataFormatError` naming ``path`` and the 1-based line when a line of ``data``
    (its bytes before ``"\n"``, a ``"\r"`` included) is longer than ``max_line`` bytes (default
    :data:`MAX_LINE_BYTES`, read at call time).

    Looks for a newline in each aligned window of ``(max_line + 1) // 2`` bytes: a longer line
    holds a whole window without one (``bytes.find`` in C, about ``2 * len(data) / max_line``
    calls), and only such a window's line is measured.  Never copies ``data``.
    """
    cap = MAX_LINE_BYTES if max_line is None else int(max_line)
    if cap < 1:
        raise ValueError(f"max_line must be >= 1, got {cap}")
    n = len(data)
    if n <= cap:
        return
    w = (cap + 1) // 2  # a run of cap + 1 bytes without "\n" holds an aligned window of w bytes
    pos = 0
    while pos < n:
        stop = min(pos + w, n)
        if data.find(b"\n", pos, stop) >= 0:
            pos = stop
            continue
        start = data.rfind(b"\n", 0, pos) + 1
        end = data.find(b"\n", stop)
        end = n if end < 0 else end
        if end - start > cap:
            line = 1 + data.count(b"\n", 0, start)
            raise DataFormatError(
                path, line,
                f"the line is {end - start:,} bytes long, more than the {cap:,} a line may hold "
                f"(fedsim.data._parse.MAX_LINE_BYTES): not a text table with a row per line"
                + (" (the file has no line break after it)" if end == n else ""),
            )
        pos = end  # the next window starts at this line's newline (or the end)
    return


def read_bytes(path: Path, max_line: int | None = None) -> bytes:
    """The bytes of ``path``; a compressed file is a :class:`DataFormatError` (see
    :func:`refuse_non_text`), and so is a line longer than ``max_line`` bytes (default
    :data:`MAX_LINE_BYTES`; see :func:`check_line_lengths`)."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise FileNotFoundError(f"no such file: {path}") from None
    except IsADirectoryError:
        raise IsADirectoryError(f"expected a file, got a folder: {path}") from None
    refuse_non_text(path, data[:16])
    check_line_lengths(path, data, max_line)
    return data


def decode_text(data: bytes, encoding: str | None = None) -> str:
    """Decode with ``encoding``, or UTF-8 falling back to Latin-1 (old MovieLens files)."""
    if encoding is not None:
        return data.decode(encoding)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def strip_bom(data: bytes) -> bytes:
    """``data`` without a leading UTF-8 byte order mark."""
    return data[3:] if data.startswith(BOM) else data


def text_lines(text: str) -> list[str]:
    """``text`` split at each ``"\n"``, with one trailing ``"\r"`` removed from every line.

    A final newline leaves a last empty line.  Unlike :meth:`str.splitlines`, which also breaks at
    U+0085, U+2028, U+2029, ``\x0b``, ``\x0c`` and ``\x1c``-``\x1e`` (a cp1252 ellipsis
    byte read as Latin-1 is U+0085), a title holding one of those stays on its line, so line
    numbers match the ratings parsers' and an editor's.
    """
    return [line.removesuffix("\r") for line in text.split("\n")]


def strip_trailing_blank_lines(data: bytes) -> bytes:
    """Drop whitespace-only lines at the very end (an editor's or exporter's trailing newlines);
    the result ends with one newline, or is empty.  Earlier line numbers are unchanged."""
    end = len(data)
    while True:
        nl = data.rfind(b"\n", 0, end)
        tail = data[nl + 1 : end]
        if tail.strip(b" \t\r\f\v"):
            return data[:end] + b"\n"
        if nl < 0:
            return b""
        end = nl


def require_rows(path: Path, body: bytes, header_line: int | None) -> None:
    """Raise :class:`DataFormatError` for an empty file or a header without rows."""
    if body.strip():
        return
    if header_line is None:
        raise DataFormatError(path, None, "empty file: no rating rows")
    raise DataFormatError(path, header_line, "the file has a header and no rating rows")


def decode_strict(path: Path, data: bytes, encoding: str, first_line: int = 1) -> str:
    """Decode ``data`` or raise :class:`DataFormatError` naming the line of the first bad byte."""
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        line = first_line + data.count(b"\n", 0, exc.start)
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise DataFormatError(
            path, line,
            f"byte {data[exc.start:exc.start + 1]!r} at column {col} is not valid {encoding}; "
            "pass encoding='latin-1' (or the file's encoding) if the file is not UTF-8",
        ) from None


def split_first_line(data: bytes) -> tuple[bytes, bytes]:
    """(first line without its newline, rest of the data)."""
    data = strip_bom(data)
    nl = data.find(b"\n")
    if nl < 0:
        return data.rstrip(b"\r"), b""
    return data[:nl].rstrip(b"\r"), data[nl + 1 :]


def _sep_label(sep: str) -> str:
    return {"\t": "tab", ",": "','", "::": "'::'", ";": "';'", " ": "space"}.get(sep, repr(sep))


def split_fields(path: Path, lineno: int, line: bytes | str, sep: bytes | str, names: Sequence[str]) -> list:
    """``line`` split at ``sep`` into exactly ``len(names)`` fields, else :class:`DataFormatError`
    naming the file, the line, the fields expected and the number found (a field too many was
    taken into the last one, or a line short of one accepted, silently)."""
    fields = line.split(sep)
    if len(fields) != len(names):
        shown = line[:120].decode("utf-8", "replace") if isinstance(line, bytes) else line[:120]
        label = _sep_label(sep.decode() if isinstance(sep, bytes) else sep)
        raise DataFormatError(
            path, lineno,
            f"expected {len(names)} fields ({', '.join(names)}) separated by {label}, found {len(fields)}: {shown!r}",
        )
    return fields


def parse_line_fields(
    path: Path, lineno: int, line: bytes, sep: bytes, columns: Sequence[Column]
) -> list[float | int]:
    """Strictly parse one line (without newline); raise DataFormatError on any problem."""
    if line.endswith(b"\r"):
        line = line[:-1]
    if not line.strip():
        raise DataFormatError(path, lineno, "empty line")
    fields = split_fields(path, lineno, line, sep, [c for c, _ in columns])
    out: list[float | int] = []
    for (name, kind), f in zip(columns, fields):
        shown = f.decode("utf-8", "replace")
        if _is_int(kind):
            if not _INT_RE.fullmatch(f):
                what = "empty" if not f.strip() else f"{shown!r} is not an integer"
                raise DataFormatError(path, lineno, f"field '{name}': {what}")
            v = int(f)
            if not INT64_MIN <= v <= INT64_MAX:
                raise DataFormatError(path, lineno, f"field '{name}': {shown.strip()!r} is out of the 64-bit integer range")
            out.append(v)
        else:
            if not _FLOAT_RE.fullmatch(f):
                what = "empty" if not f.strip() else f"{shown!r} is not a number"
                raise DataFormatError(path, lineno, f"field '{name}': {what}")
            x = float(f)
            if not math.isfinite(x):
                raise DataFormatError(path, lineno, f"field '{name}': {shown!r} is not finite")
            out.append(x)
    return out


def _slow_chunk(path, chunk: bytes, first_line: int, sep: bytes, columns) -> list[np.ndarray]:
    lines = chunk.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    rows = [parse_line_fields(path, first_line + k, ln, sep, columns) for k, ln in enumerate(lines)]
    cols = list(zip(*rows)) if rows else [() for _ in columns]
    return [
        np.array(c, dtype=np.int64 if _is_int(kind) else np.float64) for c, (_, kind) in zip(cols, columns)
    ]


def _fast_chunk(chunk: bytes, sep: str, columns) -> list[np.ndarray] | None:
    body = chunk
    if sep == "::":
        if b"\t" in body:
            return None
        body = body.replace(b"::", b"\t")
        if b":" in body:  # a lone or tripled colon
            return None
        delim = "\t"
    else:
        delim = sep
    if body.startswith((b"\n", b"\r\n")) or b"\n\n" in body or b"\n\r\n" in body:
        return None  # blank line: loadtxt would skip it silently
    if b"\r" in body and body.count(b"\r") != body.count(b"\r\n"):
        return None
    # float32 columns are read in float64 and narrowed below: read in float32, 5.00000001 became
    # 5.0 and passed a caller's range or scale check that the strict parser's value fails
    dt = np.dtype([(f"c{k}", np.float64 if kind == "float32" else _FAST_DTYPE[kind])
                   for k, (_, kind) in enumerate(columns)])
    try:
        arr = np.loadtxt(io.BytesIO(body), delimiter=delim, dtype=dt, comments=None, ndmin=1, quotechar=None)
    except (ValueError, OverflowError):  # OverflowError: an integer beyond the column's dtype
        return None
    out = []
    for k, (_, kind) in enumerate(columns):
        a = np.ascontiguousarray(arr[f"c{k}"])
        if not _is_int(kind) and a.size and not np.all(np.isfinite(a)):
            return None
        if kind == "float32":
            narrow = a.astype(np.float32)
            if not np.array_equal(narrow, a):  # a value float32 cannot hold: the strict parser's float64
                return None
            a = narrow
        out.append(a)
    return out


def parse_numeric(
    path: Path, data: bytes, *, sep: str, columns: Sequence[Column], first_line: int = 1,
    chunk_bytes: int = CHUNK_BYTES,
) -> list[np.ndarray]:
    """Parse ``data`` (the table body, one row per line) into one array per column.

    Integer columns come back as int64 (``"int32"``: int32 when every chunk fits, else int64),
    float columns as float64 (``"float32"``: float32 when every chunk is parsed by the fast path,
    which takes a chunk only if float32 holds each of its values exactly, else float64: the
    values the strict parser gives, so that a caller's checks see ``5.00000001``, not 5.0).
    ``first_line`` is the file line number of the first body line.  Raises :class:`DataFormatError` on the first bad line.
    """
    if not data:
        return [np.zeros(0, dtype=np.int64 if _is_int(k) else np.float64) for _, k in columns]
    sep_b = sep.encode()
    parts: list[list[np.ndarray]] = []
    pos, line = 0, first_line
    n = len(data)
    while pos < n:
        end = n if n - pos <= chunk_bytes else data.find(b"\n", pos + chunk_bytes)
        end = n if end < 0 else end + 1 if end < n else n
        chunk = data[pos:end]
        got = _fast_chunk(chunk, sep, columns)
        if got is None:
            got = _slow_chunk(path, chunk, line, sep_b, columns)
        parts.append(got)
        line += chunk.count(b"\n")
        pos = end
    if len(parts) == 1:
        return parts[0]
    return [np.concatenate([p[k] for p in parts]) for k in range(len(columns))]


def check_header(path: Path, header: bytes, expected: Sequence[str], sep: str) -> None:
    got = [h.strip().decode("utf-8", "replace") for h in header.split(sep.encode())]
    if [g.lower() for g in got] != [e.lower() for e in expected]:
        raise DataFormatError(path, 1, f"expected header {sep.join(expected)!r}, found {sep.join(got)!r}")


def first_bad_row(mask_bad: np.ndarray) -> int | None:
    idx = np.flatnonzero(mask_bad)
    return int(idx[0]) if idx.size else None
