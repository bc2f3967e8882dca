"""Property tests: the fast path and the strict line parser agree, and errors name the right line."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsim.data import DataFormatError
from fedsim.data._parse import _slow_chunk, parse_numeric, text_lines

COLS = [("user", "int32"), ("item", "int32"), ("rating", "float32"), ("timestamp", "int")]

rows_st = st.lists(
    st.tuples(
        st.integers(1, 10**6),
        st.integers(1, 10**6),
        st.sampled_from(["1", "2", "3.5", "4.0", "0.5", "5"]),
        st.integers(0, 2 * 10**9),
    ),
    min_size=1,
    max_size=60,
)


def render(rows, sep):
    return "".join(f"{u}{sep}{i}{sep}{r}{sep}{t}\n" for u, i, r, t in rows).encode()


@settings(max_examples=60, deadline=None)
@given(rows=rows_st, sep=st.sampled_from(["\t", ",", "::"]), chunk=st.integers(16, 400))
def test_fast_path_matches_expected(rows, sep, chunk):
    data = render(rows, sep)
    got = parse_numeric("f", data, sep=sep, columns=COLS, chunk_bytes=chunk)
    assert got[0].tolist() == [r[0] for r in rows]
    assert got[1].tolist() == [r[1] for r in rows]
    assert np.allclose(got[2], [float(r[2]) for r in rows])
    assert got[3].tolist() == [r[3] for r in rows]
    slow = _slow_chunk("f", data, 1, sep.encode(), COLS)
    assert [a.tolist() for a in slow[:2]] == [a.tolist() for a in got[:2]]


BAD = ["1\t2\t3", "1\t2\t3\t4\t5", "1\t\t3\t4", "1\tx\t3\t4", "", "1\t2\t3.5.1\t4", "1\t2\tinf\t4", "-\t2\t3\t4"]


@settings(max_examples=60, deadline=None)
@given(rows=rows_st, bad=st.sampled_from(BAD), where=st.integers(0, 59), chunk=st.integers(16, 400))
def test_error_names_the_bad_line(rows, bad, where, chunk):
    lines = render(rows, "\t").decode().splitlines(keepends=True)
    k = where % (len(lines) + 1)
    lines.insert(k, bad + "\n")
    with pytest.raises(DataFormatError) as ei:
        parse_numeric("f", "".join(lines).encode(), sep="\t", columns=COLS, first_line=1, chunk_bytes=chunk)
    assert ei.value.line == k + 1


def test_text_lines_breaks_at_newlines_only():
    odd = "\x85\u2028\u2029\x0b\x0c\x1c\x1d\x1e"
    assert text_lines(f"a{odd}b\r\nc\r\r\n\nd") == [f"a{odd}b", "c\r", "", "d"]
    assert text_lines("a\n") == ["a", ""] and text_lines("") == [""]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=30), st.integers(1, 25), st.booleans())
def test_check_line_lengths_finds_the_first_line_over_the_cap(lengths, cap, final_newline):
    """check_line_lengths looks in windows, not line by line: it must agree with measuring every
    line (the first one over the cap, its number and length; '\\r' counts as a byte)."""
    from fedsim.data._parse import check_line_lengths
    data = b"\n".join(b"7\r"[: k % 2] + b"x" * (k - k % 2) if k else b"" for k in lengths)
    data += b"\n" if final_newline else b""
    lines = data.split(b"\n")
    over = [(i + 1, len(ln)) for i, ln in enumerate(lines) if len(ln) > cap]
    if not over:
        check_line_lengths("f.txt", data, cap)
        return
    with pytest.raises(DataFormatError) as ei:
        check_line_lengths("f.txt", data, cap)
    line, n = over[0]
    assert (ei.value.path, ei.value.line) == ("f.txt", line)
    assert ei.value.reason.startswith(f"the line is {n:,} bytes long, more than the {cap:,} a line may hold")
    assert ei.value.reason.endswith("(the file has no line break after it)") == (line == len(lines))
