"""Bytes, durations and counts as people read them, for every floor: the reports' tables and the kernel's
own error messages (TcpNetwork's memory check) write them alike. Text only; no fedsim import."""

from __future__ import annotations

import math

__all__ = ["human_bytes", "human_seconds", "plural"]


def human_bytes(n: float) -> str:
    """``1903907570`` -> ``1.9 GB`` (powers of 1000 with their SI symbols, ``kB``, ``MB``,
    ``GB``, ...: ``KB`` is often read as 1024; three significant digits, trailing zeros dropped;
    below 999.5: whole bytes, so that 999.6 is ``1 kB``, not ``1000 B``, and what rounds to no
    byte is ``0 B``, not ``-0 B``). NaN as ``nan``, infinity as ``inf B``."""
    n = float(n)
    if math.isnan(n):
        return "nan"
    if math.isinf(n):
        return f"{'-' if n < 0 else ''}inf B"
    if abs(n) < 999.5:
        return f"{round(n) or 0:.0f} B"  # (round(-0.4) is -0: the 'or' makes it 0)
    units = ("kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB")
    for unit in units:
        n /= 1000.0
        if abs(n) < 999.5 or unit == units[-1]:
            return f"{n:.3g} {unit}"
    return f"{n:.3g} {units[-1]}"  # pragma: no cover


def human_seconds(s: float) -> str:
    """A duration for people: ``850 µs``, ``12.3 ms``, ``4.56 s``, ``3 min 05 s``, ``1 h 02 min``
    (what rounds to 1000 of a unit in three digits is written in the next: 0.9996 s is ``1 s``,
    not ``1e+03 ms``); below a microsecond in ns (``12.3 ns``), below a picosecond ``< 1 ps``
    (``> -1 ps``): a simulator's float noise, written ``1.39e-11 µs`` before. A negative
    duration is its magnitude's text after a minus sign (-185 s was ``-4 min 55 s``); NaN is
    ``nan``, infinity ``inf s``; from 1,000 h on with thousands separators (``277,777 h 46 min``),
    from 1e15 h on in hours with an exponent (``2.78e+296 h``, not 296 digits)."""
    s = float(s)
    if math.isnan(s):
        return "nan"
    sign = "-" if s < 0 else ""
    a = abs(s)
    if a == 0:
        return "0 s"
    if math.isinf(a):
        return f"{sign}inf s"
    if a < 1e-12:
        return "> -1 ps" if sign else "< 1 ps"
    if a < 999.5e-9:
        return f"{sign}{a * 1e9:.3g} ns"
    if a < 999.5e-6:
        return f"{sign}{a * 1e6:.3g} µs"
    if a < 0.9995:
        return f"{sign}{a * 1e3:.3g} ms"
    if a < 59.95:  # what rounds to 60.0 s is written as a minute
        return f"{sign}{a:.3g} s"
    if a < 3599.5:  # round to whole seconds first, so that 119.9 s is 2 min 00 s (not 1 min 00 s)
        m, sec = divmod(int(round(a)), 60)
        return f"{sign}{m} min {sec:02d} s"
    if a >= 3.6e18:  # 1e15 hours and more (a deadline of 1e300 s): its 296 digits of hours said nothing
        return f"{sign}{a / 3600:.3g} h"
    h, rest = divmod(int(round(a)), 3600)
    return f"{sign}{h:,} h {rest // 60:02d} min"  # minutes truncated; 1,000 h and more with thousands separators


def plural(n: int, noun: str, many: str | None = None, spec: str = "") -> str:
    """``n`` and ``noun`` in the number ``n`` takes: ``1 point``, ``2 points``, ``0 points``
    (``many``: the plural where it is not ``noun + "s"``, ``plural(2, "process", "processes")``;
    ``spec``: ``n``'s format, ``","`` for ``1,024 users``). A sweep of one point said ``1 points``."""
    return f"{n:{spec}} {noun if n == 1 else many or noun + 's'}"
