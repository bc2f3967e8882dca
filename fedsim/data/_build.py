"""From raw (original-id) columns to a :class:`Ratings`: dense indexing and the duplicate policy."""

from __future__ import annotations

import logging
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .ratings import DataFormatError, Ratings

log = logging.getLogger("fedsim.data")

DUPLICATE_POLICIES = ("error", "keep_last", "keep_first", "mean")
ITEM_SPACES = ("observed", "id_range")


def densify(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Map ids to dense indices in sorted-id order: returns (index int32, unique ids)."""
    ids = np.asarray(ids)
    if ids.size == 0:
        return np.zeros(0, dtype=np.int32), ids[:0]
    if ids.dtype.kind in "iu":
        lo, hi = int(ids.min()), int(ids.max())
        if lo >= 0 and hi <= 4 * ids.size + (1 << 22):
            present = np.zeros(hi + 1, dtype=bool)
            present[ids] = True
            uniq = np.flatnonzero(present)
            lookup = np.cumsum(present, dtype=np.int64) - 1
            return lookup[ids].astype(np.int32), uniq.astype(ids.dtype if ids.dtype.kind == "i" else np.int64)
    uniq, inv = np.unique(ids, return_inverse=True)
    return inv.reshape(-1).astype(np.int32), uniq


def check_seed(seed: Any, *, allow: tuple[type, ...] = (), what: str = "an integer >= 0") -> None:
    """Raise ``ValueError`` naming ``seed`` unless it is an integer >= 0 (Python or NumPy, not a
    bool) or an instance of ``allow``: NumPy's own errors ("expected non-negative integer",
    "SeedSequence expects int ...") named no parameter, and ``True`` seeded as 1."""
    if allow and isinstance(seed, allow):
        return
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be {what}, got {seed!r}")


def check_choice(name: str, value: str, choices: Sequence[str]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")


def build_ratings(
    user_raw: np.ndarray,
    item_raw: np.ndarray,
    values: np.ndarray,
    timestamps: np.ndarray | None = None,
    *,
    name: str,
    source: str,
    duplicates: str = "error",
    item_space: str = "observed",
    line_of: Callable[[int], int | None] | None = None,
    item_meta_ids: np.ndarray | None = None,
    item_meta_categories: np.ndarray | None = None,
    category_names: Sequence[str] | None = None,
    info: Mapping[str, Any] | None = None,
) -> Ratings:
    """Assemble a :class:`Ratings` from rows in original ids, in file order.

    ``line_of(row)`` gives the 1-based file line of a parsed row for error messages.
    ``item_meta_ids``/``item_meta_categories`` give a category row per original item id (from a
    metadata file); items without metadata get no category.
    """
    check_choice("duplicates", duplicates, DUPLICATE_POLICIES)
    check_choice("item_space", item_space, ITEM_SPACES)
    info = dict(info or {})
    info.setdefault("source", source)
    n_rows = len(user_raw)
    if n_rows == 0:  # a loader's own check names the line; this one keeps any path from an empty Ratings
        raise DataFormatError(source, None, "no rating rows")
    info["rows_read"] = int(n_rows)

    users, user_ids = densify(user_raw)
    if item_space == "observed":
        items, item_ids = densify(item_raw)
    else:
        item_raw = np.asarray(item_raw)
        if item_raw.size and item_raw.dtype.kind not in "iu":
            raise ValueError("item_space='id_range' needs integer item ids")
        if item_raw.size and int(item_raw.min()) < 1:
            row = int(np.argmin(item_raw))
            raise DataFormatError(*_locate(source, line_of, row),
                                  f"item id {int(item_raw[row])} < 1 cannot be used with item_space='id_range'")
        n_items = int(item_raw.max()) if item_raw.size else 0
        items = (item_raw - 1).astype(np.int32)
        item_ids = np.arange(1, n_items + 1, dtype=np.int64)
    n_users, n_items = len(user_ids), len(item_ids)

    raw_values = np.asarray(values)
    with np.errstate(over="ignore"):
        values = raw_values.astype(np.float32)
    # the loaders pass finite values; one beyond float32's range became inf here, silently
    # (load_csv(scale=None) with a rating 1e40), and the constructor's finiteness check is skipped
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        row = int(bad[0])
        raise DataFormatError(*_locate(source, line_of, row),
                              f"rating {float(raw_values[row]):g} is beyond the float32 range (|rating| <= 3.4e38)")
    ts = None if timestamps is None else np.asarray(timestamps, dtype=np.int64)

    keep, dup_report = _apply_duplicates(users, items, values, ts, n_items, duplicates, source, line_of,
                                         user_ids, item_ids)
    if dup_report is not None:
        info["duplicates"] = dup_report
        if dup_report["rows_removed"]:
            log.warning("%s: merged %d duplicate (user, item) rows (policy %s)",
                        source, dup_report["rows_removed"], duplicates)
    if keep is not None:
        users, items = users[keep], items[keep]
        values = dup_report.pop("_values") if "_values" in dup_report else values[keep]
        if ts is not None:
            ts = dup_report.pop("_ts") if "_ts" in dup_report else ts[keep]
    if dup_report is not None:
        dup_report.pop("_values", None)
        dup_report.pop("_ts", None)

    cats = None
    if item_meta_ids is not None and item_meta_categories is not None:
        cats = align_categories(item_ids, np.asarray(item_meta_ids), np.asarray(item_meta_categories, dtype=bool))
        info["items_without_category"] = int((~cats.any(axis=1)).sum())

    info["item_space"] = item_space
    return Ratings._trusted(
        users, items, values, ts,
        n_users=n_users, n_items=n_items,
        user_ids=user_ids, item_ids=item_ids,
        categories=cats, category_names=None if cats is None else list(category_names or []),
        name=name, info=info,
    )


def align_categories(item_ids: np.ndarray, meta_ids: np.ndarray, meta_cats: np.ndarray) -> np.ndarray:
    """Category rows for ``item_ids`` looked up in (``meta_ids``, ``meta_cats``); missing -> none."""
    out = np.zeros((len(item_ids), meta_cats.shape[1]), dtype=bool)
    if len(meta_ids) == 0 or len(item_ids) == 0:
        return out
    try:
        meta_ids = meta_ids.astype(item_ids.dtype) if item_ids.dtype.kind in "iu" else meta_ids
    except (TypeError, ValueError):
        pass
    order = np.argsort(meta_ids, kind="stable")
    sorted_ids = meta_ids[order]
    pos = np.searchsorted(sorted_ids, item_ids)
    pos_c = np.minimum(pos, len(sorted_ids) - 1)
    found = sorted_ids[pos_c] == item_ids
    out[found] = meta_cats[order[pos_c[found]]]
    return out


def _locate(source, line_of, row):
    """(path, line) of a parsed row; ``line_of`` may return a line or a (path, line) pair."""
    r = line_of(row) if line_of else None
    if isinstance(r, tuple):
        return str(r[0]), r[1]
    return source, r


def _apply_duplicates(users, items, values, ts, n_items, policy, source, line_of, user_ids, item_ids):
    """Return (keep mask or None, report or None); for 'mean' the report carries merged arrays."""
    n = len(users)
    if n < 2:
        return None, {"policy": policy, "pairs": 0, "rows_removed": 0}
    key = users.astype(np.int64) * max(n_items, 1) + items
    d = np.diff(key)
    if np.all(d > 0):
        return None, {"policy": policy, "pairs": 0, "rows_removed": 0}
    order = np.argsort(key, kind="stable")
    sk = key[order]
    same = sk[1:] == sk[:-1]
    if not same.any():
        return None, {"policy": policy, "pairs": 0, "rows_removed": 0}
    # group starts in sorted order
    starts = np.flatnonzero(np.concatenate(([True], ~same)))
    sizes = np.diff(np.append(starts, n))
    dup_groups = np.flatnonzero(sizes > 1)
    n_pairs = int(len(dup_groups))
    rows_removed = int((sizes[dup_groups] - 1).sum())
    if policy == "error":
        g = dup_groups[0]
        first, second = int(order[starts[g]]), int(order[starts[g] + 1])
        (p1, l1), (p2, l2) = _locate(source, line_of, first), _locate(source, line_of, second)
        if l1 is None:
            where = ""
        elif p1 == p2:
            where = f" (lines {l1} and {l2})"
        else:
            where = f" ({p1} line {l1} and {p2} line {l2})"
        raise DataFormatError(
            p2, l2,
            f"duplicate rating for user {user_ids[users[first]]!s}, item {item_ids[items[first]]!s}{where}; "
            f"{n_pairs} duplicated (user, item) pairs ({rows_removed} extra rows) in total. "
            "Choose a policy: duplicates='keep_last', 'keep_first' or 'mean'",
        )
    report: dict[str, Any] = {"policy": policy, "pairs": n_pairs, "rows_removed": rows_removed}
    keep = np.zeros(n, dtype=bool)
    if policy == "keep_first":
        keep[order[starts]] = True
    elif policy == "keep_last":
        ends = np.append(starts[1:], n) - 1
        keep[order[ends]] = True
    else:  # mean: value = mean of the group, timestamp = latest, position = first occurrence
        first_rows = order[starts]
        keep[first_rows] = True
        sums = np.add.reduceat(values[order].astype(np.float64), starts)
        means = (sums / sizes).astype(np.float32)
        # keep order is by row position; map group -> position rank
        rank = np.argsort(first_rows, kind="stable")
        report["_values"] = means[rank]
        if ts is not None:
            report["_ts"] = np.maximum.reduceat(ts[order], starts)[rank]
    return keep, report
