"""Adding blocks of rows into a matrix at distinct row indices: ``acc[ids] += rows``.

Servers do this once per upload (FedRec's item gradients, a client's rows of V), so it sits on a
per-message path. NumPy's fancy-index assignment ``acc[ids] = block`` goes through its general
mapping iterator and, for int32 ids, a buffered cast of the indices: about 5.8 us for 265 rows of
20 float32 here, most of the whole update. Viewing each row as one opaque ``void`` element turns
the gather and the scatter into ``take``/``put`` of whole rows (one ``memcpy`` per row), and the
update costs 5.5 against 8.6 us (benchmarks/kernel.py, 2026-11-22). The arithmetic is the same:
every element of a listed row receives exactly one addition, so results are bit-identical to
``acc[ids] += rows`` (tested).

The ids of one call must be distinct: with a repeated id the row would be added once, silently
(as with ``acc[ids] += rows``); use ``np.add.at`` for ids that may repeat.
"""

from __future__ import annotations

import numpy as np

__all__ = ["RowSum", "add_rows_at", "check_rows", "dots_in_order", "weighted_rows_in_order"]

_ROW_TYPES: dict[tuple[np.dtype, int], np.dtype] = {}


def _row_type(dtype: np.dtype, d: int) -> np.dtype:
    """The ``void`` dtype of one row of ``d`` elements of ``dtype`` (cached: building a dtype
    costs about a microsecond)."""
    key = (dtype, d)
    vt = _ROW_TYPES.get(key)
    if vt is None:
        vt = _ROW_TYPES[key] = np.dtype((np.void, d * dtype.itemsize))
    return vt


def _row_view(acc: np.ndarray) -> np.ndarray | None:
    """``acc`` (m, d) seen as m opaque rows, or None if its layout does not allow it."""
    if acc.ndim != 2 or not acc.flags.c_contiguous or not acc.flags.writeable or acc.shape[1] == 0:
        return None
    return np.ndarray((acc.shape[0],), _row_type(acc.dtype, acc.shape[1]), acc)


def _add(acc: np.ndarray, view: np.ndarray | None, ids, rows) -> None:
    rows = np.asarray(rows)
    if view is None or rows.ndim != 2 or rows.shape[1] != acc.shape[1]:
        acc[ids] += rows  # general layout (and NumPy's own error for mismatched shapes)
        return
    block = view.take(ids)  # whole rows, one memcpy each; IndexError for an id out of range
    values = np.ndarray((block.shape[0], acc.shape[1]), acc.dtype, block)
    values += rows  # broadcasting/casting rules of `+=`; ValueError if len(ids) != len(rows)
    view.put(ids, block)


def check_rows(ids, rows, m: int, width: int, what: str = "rows", *, ascending: bool = False,
               distinct: bool = False, upload: bool = False) -> None:
    """Raise ``IndexError`` for an id outside [0, ``m``) and ``ValueError`` unless ``ids`` is a 1-D
    integer array and ``rows`` an array of shape (len(ids), ``width``): what a server's row update
    needs of an upload. NumPy's indexing would take a negative id as counting from the end and broadcast a
    (1, width) block over every listed row, changing the wrong rows without a word. With
    ``ascending``, also ``ValueError`` unless the ids are strictly increasing (a repeated id would
    otherwise be updated once, its other rows dropped); with ``distinct``, ``ValueError`` if an id
    repeats, in any order. With ``upload`` (an upload off the wire), also ``ValueError`` unless
    ``ids`` is a NumPy integer array and ``rows`` a NumPy float array: a list of ids passed here
    and then failed in the caller as a bare AttributeError, and integer or bool rows (nothing a
    client computes) were summed as numbers. (Servers call it where their compiled update
    declined an upload, so well-formed uploads pay nothing.)"""
    if upload:
        if type(ids) is not np.ndarray:
            raise ValueError(f"{what}: item ids must be a 1-D integer array, got {type(ids).__name__}")
        if type(rows) is not np.ndarray or rows.dtype.kind != "f":
            raise ValueError(f"{what}: rows must be a float array, got "
                             f"{rows.dtype if isinstance(rows, np.ndarray) else type(rows).__name__}")
    ids_a = np.asarray(ids)
    if ids_a.ndim != 1 or (ids_a.size and ids_a.dtype.kind not in "iu"):
        raise ValueError(f"{what}: item ids must be a 1-D integer array, got {ids_a.dtype} of shape {ids_a.shape}")
    if ids_a.size and (int(ids_a.min()) < 0 or int(ids_a.max()) >= m):
        bad = int(ids_a[(ids_a < 0) | (ids_a >= m)][0])
        raise IndexError(f"{what}: item id {bad} outside [0, {m})")
    if ascending and ids_a.size > 1:
        down = np.flatnonzero(ids_a[1:] <= ids_a[:-1])
        if down.size:
            k = int(down[0]) + 1
            how = "repeats" if ids_a[k] == ids_a[k - 1] else f"follows {int(ids_a[k - 1])}"
            raise ValueError(f"{what}: item ids must be strictly increasing; id {int(ids_a[k])} at position {k} {how}")
    elif distinct and ids_a.size > 1:
        s = np.sort(ids_a)
        rep = s[1:][s[1:] == s[:-1]]
        if rep.size:
            raise ValueError(f"{what}: item id {int(rep[0])} appears more than once")
    shape = np.shape(rows)
    if shape != (ids_a.shape[0], width):
        raise ValueError(f"{what}: {ids_a.shape[0]} item ids need rows of shape ({ids_a.shape[0]}, {width}), "
                         f"got {shape}")


def add_rows_at(acc: np.ndarray, ids, rows) -> None:
    """``acc[ids] += rows`` in place, for a 2-D ``acc`` (m, d), *distinct* integer ``ids`` (k,)
    and ``rows`` (k, d). Bit-identical to the fancy-index form, faster on C-contiguous ``acc``;
    raises what that form raises (IndexError for an id out of range, ValueError for shapes)."""
    _add(acc, _row_view(acc), ids, rows)


class RowSum:
    """An (m, d) running sum that blocks of rows are added into, ``total[ids] += rows`` with
    distinct ids per block; the row view is built once, for many additions.

    ``RowSum(m, d, dtype=np.float32)`` starts at zero; ``RowSum(array)`` adds into ``array``
    (in place). ``total`` is the matrix.
    """

    __slots__ = ("total", "_view")

    def __init__(self, m, d: int | None = None, dtype=np.float32) -> None:
        if isinstance(m, np.ndarray):
            if d is not None:
                raise TypeError("RowSum(array) takes no d")
            if m.ndim != 2:
                raise ValueError(f"RowSum needs a 2-D array, got shape {m.shape}")
            self.total = m
        else:
            if d is None:
                raise TypeError("RowSum(m, d) needs d")
            self.total = np.zeros((int(m), int(d)), dtype)
        self._view = _row_view(self.total)

    def add(self, ids, rows) -> None:
        """``total[ids] += rows`` for distinct ``ids``; see :func:`add_rows_at`."""
        _add(self.total, self._view, ids, rows)


# --------------------------------------------------------------------------------------------
# Products summed in a fixed order. A BLAS product (``A @ u``) sums in an order of its own, which
# depends on the CPU kernel the library picks at run time (OpenBLAS's Prescott and Haswell kernels
# give different float32 results for the same rows), so a result computed with it can change in
# its last bits from one machine to another. These sum left to right, each sum from its first
# term (``np.cumsum`` is sequential), as the compiled per-client kernels in ``_sgd_numba`` do.


def dots_in_order(A: np.ndarray, u: np.ndarray) -> np.ndarray:
    """``A @ u`` for ``A`` (n, d) and ``u`` (d,), each row's d products summed left to right
    (in the dtype NumPy's ``A * u`` has)."""
    prod = A * u
    if prod.shape[-1] == 0:
        return np.zeros(prod.shape[:-1], dtype=prod.dtype)
    return np.cumsum(prod, axis=-1)[..., -1]


def weighted_rows_in_order(e: np.ndarray, A: np.ndarray) -> np.ndarray:
    """``e @ A`` for ``e`` (n,) and ``A`` (n, d): the rows scaled by ``e`` summed top to bottom."""
    prod = e[:, None] * A
    if prod.shape[0] == 0:
        return np.zeros(prod.shape[1:], dtype=prod.dtype)
    return np.cumsum(prod, axis=0)[-1]
