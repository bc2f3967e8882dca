"""The immutable ratings container shared by loaders, splits, protocols and metrics.

A :class:`Ratings` holds one rating per row in four parallel arrays (``users``, ``items``,
``values``, optional ``timestamps``) over a fixed *index space*: users ``0..n_users-1`` and items
``0..n_items-1``.  The index space may be larger than the set of users or items that actually
occur in the rows (a training fold keeps the items that only occur in its test fold; the
``id_range`` item space of the MovieLens loaders keeps every id up to the largest one).

Rows stay in the order they were given (file order for loaders).  Per-user and per-item access
goes through cached CSR views (:meth:`Ratings.by_user`, :meth:`Ratings.by_item`), whose rows are
sorted by the other index (items within a user, users within an item).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping, Sequence

import numpy as np

from ..math.csr import csr_order

__all__ = ["CSR", "DataFormatError", "Ratings"]


class DataFormatError(ValueError):
    """A data file does not have the expected format.

    ``path`` is the file, ``line`` the 1-based line number (``None`` for file-level problems) and
    ``reason`` what was wrong; ``str(err)`` is ``"<path>, line <n>: <reason>"``.
    """

    def __init__(self, path: Any, line: int | None, reason: str):
        self.path = str(path)
        self.line = line
        self.reason = reason
        where = f"{self.path}, line {line}" if line is not None else self.path
        super().__init__(f"{where}: {reason}")


@dataclass(frozen=True, eq=False)
class CSR:
    """A compressed-sparse-row view of a :class:`Ratings`.

    Row ``r`` (a user for :meth:`Ratings.by_user`, an item for :meth:`Ratings.by_item`) owns the
    slice ``indptr[r]:indptr[r+1]`` of ``indices`` (the other index: item ids for ``by_user``),
    ``data`` (rating values), ``timestamps`` (or ``None``) and ``order`` (the row positions in the
    parent :class:`Ratings`).  Within a row, entries are sorted by ``indices``.  All arrays are
    read-only.
    """

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    timestamps: np.ndarray | None
    order: np.ndarray
    n_cols: int

    @property
    def n_rows(self) -> int:
        return len(self.indptr) - 1

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n_rows, self.n_cols)

    @property
    def nnz(self) -> int:
        return int(self.indptr[-1])

    def counts(self) -> np.ndarray:
        """Number of entries per row (int64)."""
        return np.diff(self.indptr)

    def row(self, r: int) -> slice:
        """The slice of ``indices``/``data``/... that belongs to row ``r``."""
        return slice(int(self.indptr[r]), int(self.indptr[r + 1]))

    def row_indices(self, r: int) -> np.ndarray:
        return self.indices[self.indptr[r] : self.indptr[r + 1]]

    def row_data(self, r: int) -> np.ndarray:
        return self.data[self.indptr[r] : self.indptr[r + 1]]

    def row_ids(self) -> np.ndarray:
        """The row index of every entry (int32), i.e. the expanded ``indptr``."""
        return np.repeat(np.arange(self.n_rows, dtype=np.int32), self.counts())


def _readonly(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def _as_index(name: str, a: Any, n: int | None) -> tuple[np.ndarray, int]:
    arr = np.asarray(a)
    if arr.ndim != 1:
        raise ValueError(f"Ratings: {name} must be 1-D, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        if np.issubdtype(arr.dtype, np.floating) and np.all(np.floor(arr) == arr):
            arr = arr.astype(np.int64)
        else:
            raise ValueError(f"Ratings: {name} must hold integers, got dtype {arr.dtype}")
    lo = int(arr.min()) if arr.size else 0
    hi = int(arr.max()) if arr.size else -1
    if n is None:
        n = hi + 1
    n = int(n)
    if n < 0 or n > np.iinfo(np.int32).max:
        raise ValueError(f"Ratings: n_{name} = {n} is out of range")
    if arr.size and (lo < 0 or hi >= n):
        raise ValueError(f"Ratings: {name} must lie in [0, {n}), found values in [{lo}, {hi}]")
    return np.array(arr, dtype=np.int32), n


def _as_timestamps(a: Any) -> np.ndarray:
    """Timestamps as int64 seconds: integers, or floats with whole values (no truncation)."""
    arr = np.asarray(a)
    bad = "Ratings: timestamps must hold integer seconds in the int64 range"
    if arr.size == 0:
        return np.array(arr, dtype=np.int64)
    if np.issubdtype(arr.dtype, np.integer):
        if arr.dtype == np.uint64 and int(arr.max()) > np.iinfo(np.int64).max:
            raise ValueError(f"{bad}, found {int(arr.max())}")
        return np.array(arr, dtype=np.int64)
    if not np.issubdtype(arr.dtype, np.floating):
        raise ValueError(f"{bad}, got dtype {arr.dtype}")
    ok = np.isfinite(arr) & (np.floor(arr) == arr) & (np.abs(arr) < 2.0**63)
    if not np.all(ok):
        raise ValueError(f"{bad}, found {arr.reshape(-1)[np.flatnonzero(~ok.reshape(-1))[0]]}")
    return np.array(arr, dtype=np.int64)


class Ratings:
    """Immutable explicit or implicit ratings over a dense index space.

    Parameters
    ----------
    users, items
        Dense indices, one per rating (converted to int32).
    values
        Rating values (converted to float32; must be finite).
    n_users, n_items
        Size of the index spaces (default: largest index + 1).  May exceed the indices present.
    timestamps
        Seconds since the epoch (int64), or ``None``.
    user_ids, item_ids
        Original ids by dense index (default ``arange``); arrays of length ``n_users``/``n_items``.
    categories, category_names
        Optional bool matrix ``n_items x n_categories`` (multi-label allowed) and its column names.
    name
        A label (``"ml-100k"``, ``"synthetic:tiny"``...).
    info
        Free-form provenance (loader report: duplicates merged, rows dropped, filters applied...).

    The arrays are copied and made read-only.  Derived containers are built with
    :meth:`subset`, :meth:`binarize`, :meth:`filter_users`.
    """

    __slots__ = (
        "users",
        "items",
        "values",
        "timestamps",
        "n_users",
        "n_items",
        "user_ids",
        "item_ids",
        "categories",
        "category_names",
        "name",
        "info",
        "_cache",
    )

    def __init__(
        self,
        users: Any,
        items: Any,
        values: Any,
        *,
        n_users: int | None = None,
        n_items: int | None = None,
        timestamps: Any = None,
        user_ids: Any = None,
        item_ids: Any = None,
        categories: Any = None,
        category_names: Sequence[str] | None = None,
        name: str = "ratings",
        info: Mapping[str, Any] | None = None,
    ):
        u, n_users = _as_index("users", users, n_users)
        i, n_items = _as_index("items", items, n_items)
        v = np.array(values, dtype=np.float32)
        if v.ndim != 1:
            raise ValueError(f"Ratings: values must be 1-D, got shape {v.shape}")
        if not (len(u) == len(i) == len(v)):
            raise ValueError(
                f"Ratings: users, items and values must have equal lengths, got {len(u)}, {len(i)}, {len(v)}"
            )
        if v.size and not np.all(np.isfinite(v)):
            raise ValueError("Ratings: values must be finite")
        t = None
        if timestamps is not None:
            t = _as_timestamps(timestamps)
            if t.shape != u.shape:
                raise ValueError(f"Ratings: timestamps must have length {len(u)}, got shape {t.shape}")
        uid = np.arange(n_users, dtype=np.int64) if user_ids is None else np.array(user_ids)
        iid = np.arange(n_items, dtype=np.int64) if item_ids is None else np.array(item_ids)
        if uid.shape != (n_users,):
            raise ValueError(f"Ratings: user_ids must have length n_users = {n_users}, got shape {uid.shape}")
        if iid.shape != (n_items,):
            raise ValueError(f"Ratings: item_ids must have length n_items = {n_items}, got shape {iid.shape}")
        cats = None
        names = None
        if categories is not None:
            cats = np.array(categories, dtype=bool)
            if cats.ndim != 2 or cats.shape[0] != n_items:
                raise ValueError(
                    f"Ratings: categories must be a bool matrix with n_items = {n_items} rows, got shape {cats.shape}"
                )
            names = [str(c) for c in category_names] if category_names is not None else [str(k) for k in range(cats.shape[1])]
            if len(names) != cats.shape[1]:
                raise ValueError(
                    f"Ratings: category_names has {len(names)} names for {cats.shape[1]} category columns"
                )
        elif category_names is not None:
            raise ValueError("Ratings: category_names given without categories")
        self._init(u, i, v, t, n_users, n_items, uid, iid, cats, names, str(name), dict(info or {}))

    # -- construction -------------------------------------------------------------------------

    def _init(self, u, i, v, t, n_users, n_items, uid, iid, cats, names, name, info) -> None:
        s = object.__setattr__
        s(self, "users", _readonly(u))
        s(self, "items", _readonly(i))
        s(self, "values", _readonly(v))
        s(self, "timestamps", None if t is None else _readonly(t))
        s(self, "n_users", int(n_users))
        s(self, "n_items", int(n_items))
        s(self, "user_ids", _readonly(uid))
        s(self, "item_ids", _readonly(iid))
        s(self, "categories", None if cats is None else _readonly(cats))
        s(self, "category_names", None if names is None else list(names))
        s(self, "name", name)
        s(self, "info", MappingProxyType(info))
        s(self, "_cache", {})

    @classmethod
    def _trusted(cls, u, i, v, t, *, like: "Ratings | None" = None, **kw) -> "Ratings":
        """Build without validation or copies from arrays the caller owns (internal)."""
        self = cls.__new__(cls)
        fields = dict(
            n_users=kw.pop("n_users", like.n_users if like is not None else None),
            n_items=kw.pop("n_items", like.n_items if like is not None else None),
            uid=kw.pop("user_ids", like.user_ids if like is not None else None),
            iid=kw.pop("item_ids", like.item_ids if like is not None else None),
            cats=kw.pop("categories", like.categories if like is not None else None),
            names=kw.pop("category_names", like.category_names if like is not None else None),
            name=kw.pop("name", like.name if like is not None else "ratings"),
            info=kw.pop("info", dict(like.info) if like is not None else {}),
        )
        if kw:
            raise TypeError(f"unexpected arguments {sorted(kw)}")
        self._init(
            np.ascontiguousarray(u, dtype=np.int32),
            np.ascontiguousarray(i, dtype=np.int32),
            np.ascontiguousarray(v, dtype=np.float32),
            None if t is None else np.ascontiguousarray(t, dtype=np.int64),
            fields["n_users"],
            fields["n_items"],
            fields["uid"],
            fields["iid"],
            fields["cats"],
            fields["names"],
            fields["name"],
            fields["info"],
        )
        return self

    def __setattr__(self, key, value):
        raise AttributeError("Ratings is immutable")

    def __delattr__(self, key):
        raise AttributeError("Ratings is immutable")

    # -- basic protocol -----------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.users)

    def __repr__(self) -> str:
        extra = ", timestamps" if self.timestamps is not None else ""
        if self.categories is not None:
            extra += f", {self.categories.shape[1]} categories"
        return (
            f"Ratings({self.name!r}: {len(self):,} ratings, {self.n_users:,} users x "
            f"{self.n_items:,} items{extra})"
        )

    @property
    def n_categories(self) -> int:
        return 0 if self.categories is None else int(self.categories.shape[1])

    @property
    def density(self) -> float:
        cells = self.n_users * self.n_items
        return len(self) / cells if cells else 0.0

    def fingerprint(self) -> str:
        """sha256 over the index space and all arrays (same data, same hex digest)."""
        h = hashlib.sha256()
        h.update(f"{self.n_users},{self.n_items},{len(self)}".encode())
        arrays = [self.users, self.items, self.values]
        if self.timestamps is not None:
            arrays.append(self.timestamps)
        if self.categories is not None:
            arrays.append(self.categories)
        for a in arrays:
            h.update(np.ascontiguousarray(a).tobytes())
        for ids in (self.user_ids, self.item_ids):
            h.update(np.asarray(ids).astype(str).astype("U").tobytes() if ids.dtype.kind in "OUS" else ids.tobytes())
        return h.hexdigest()

    # -- counts and CSR views -----------------------------------------------------------------

    def user_counts(self) -> np.ndarray:
        """Ratings per user (int64, length ``n_users``)."""
        return np.bincount(self.users, minlength=self.n_users).astype(np.int64)

    def item_counts(self) -> np.ndarray:
        """Ratings per item (int64, length ``n_items``)."""
        return np.bincount(self.items, minlength=self.n_items).astype(np.int64)

    def _csr(self, rows: np.ndarray, cols: np.ndarray, n_rows: int, n_cols: int) -> CSR:
        indptr, order = csr_order(rows, cols, n_rows)
        ts = None if self.timestamps is None else _readonly(self.timestamps[order])
        return CSR(
            indptr=_readonly(indptr),
            indices=_readonly(cols[order]),
            data=_readonly(self.values[order]),
            timestamps=ts,
            order=_readonly(order.astype(np.int64)),
            n_cols=n_cols,
        )

    def by_user(self) -> CSR:
        """Per-user CSR view (cached): ``indices`` are item indices, sorted within each user."""
        c = self._cache.get("by_user")
        if c is None:
            c = self._cache["by_user"] = self._csr(self.users, self.items, self.n_users, self.n_items)
        return c

    def by_item(self) -> CSR:
        """Per-item CSR view (cached): ``indices`` are user indices, sorted within each item."""
        c = self._cache.get("by_item")
        if c is None:
            c = self._cache["by_item"] = self._csr(self.items, self.users, self.n_items, self.n_users)
        return c

    def user_items(self, u: int) -> np.ndarray:
        """Item indices rated by user ``u`` (sorted, read-only view)."""
        return self.by_user().row_indices(u)

    def user_ratings(self, u: int) -> np.ndarray:
        """Values of user ``u``'s ratings, aligned with :meth:`user_items`."""
        return self.by_user().row_data(u)

    def user_timestamps(self, u: int) -> np.ndarray:
        c = self.by_user()
        if c.timestamps is None:
            raise ValueError(f"{self.name} has no timestamps")
        return c.timestamps[c.indptr[u] : c.indptr[u + 1]]

    def item_users(self, i: int) -> np.ndarray:
        """User indices who rated item ``i`` (sorted, read-only view)."""
        return self.by_item().row_indices(i)

    def item_ratings(self, i: int) -> np.ndarray:
        return self.by_item().row_data(i)

    def to_dense(self, fill: float = 0.0, dtype: Any = np.float32) -> np.ndarray:
        """An ``n_users x n_items`` matrix with the ratings and ``fill`` elsewhere."""
        m = np.full((self.n_users, self.n_items), fill, dtype=dtype)
        m[self.users, self.items] = self.values
        return m

    # -- derived containers -------------------------------------------------------------------

    def subset(self, sel: Any, *, name: str | None = None, info: Mapping[str, Any] | None = None) -> "Ratings":
        """Rows selected by a bool mask (length ``len(self)``) or an integer index array.

        The index space is unchanged (``n_users``, ``n_items``, id maps and categories are the
        same objects): a training fold keeps the items that only occur in its test fold.  With an
        index array the rows come out in the given order.
        """
        s = np.asarray(sel)
        if s.dtype == bool:
            if s.shape != (len(self),):
                raise ValueError(f"subset: mask must have shape ({len(self)},), got {s.shape}")
            idx = np.flatnonzero(s)
        else:
            if s.ndim != 1 or (s.size and not np.issubdtype(s.dtype, np.integer)):
                raise ValueError("subset: expected a bool mask or a 1-D integer index array")
            idx = s.astype(np.int64, copy=False)
            if idx.size and (idx.min() < -len(self) or idx.max() >= len(self)):
                raise ValueError(f"subset: index out of range for {len(self)} rating{'' if len(self) == 1 else 's'}")
        t = None if self.timestamps is None else self.timestamps[idx]
        new_info = dict(self.info)
        if info:
            new_info.update(info)
        return Ratings._trusted(
            self.users[idx], self.items[idx], self.values[idx], t, like=self,
            name=self.name if name is None else name, info=new_info,
        )

    def binarize(self, threshold: float | None = None) -> "Ratings":
        """Implicit feedback with value 1.0.

        ``threshold=None``: every rating becomes a positive interaction.  Otherwise ratings with
        ``value >= threshold`` become 1.0 and the others are dropped; the number dropped is
        recorded in ``info["binarize"]``.
        """
        if threshold is None:
            keep = np.ones(len(self), dtype=bool)
        else:
            t = float(threshold)
            if not np.isfinite(t):
                raise ValueError(f"binarize: threshold must be a finite number, got {threshold}")
            # in float64, where every float32 value is exact: float32(4.00000001) would be 4.0
            keep = self.values.astype(np.float64) >= t
        out = self.subset(keep)
        info = dict(out.info)
        info["binarize"] = {
            "threshold": threshold,
            "kept": int(keep.sum()),
            "dropped": int(len(self) - keep.sum()),
        }
        return Ratings._trusted(
            out.users, out.items, np.ones(len(out), dtype=np.float32), out.timestamps, like=out, info=info,
        )

    def filter_users(self, min_count: int, *, reindex_items: bool = True) -> "Ratings":
        """Keep the users with at least ``min_count`` ratings, then re-index densely.

        One pass over users (not an iterative k-core: items are not filtered by count).  Users
        are re-indexed over the kept ones (original order preserved); with ``reindex_items`` the
        items are re-indexed over those still rated, otherwise the item space is kept.  A record
        goes to ``info["filter_users"]``.
        """
        counts = self.user_counts()
        keep_user = counts >= int(min_count)
        row_keep = keep_user[self.users]
        info = dict(self.info)
        info["filter_users"] = {
            "min_count": int(min_count),
            "users_kept": int(keep_user.sum()),
            "users_removed": int((~keep_user & (counts > 0)).sum()),
            "ratings_removed": int(len(self) - row_keep.sum()),
        }
        item_keep = None
        if reindex_items:
            item_keep = np.zeros(self.n_items, dtype=bool)
            item_keep[self.items[row_keep]] = True
            info["filter_users"]["items_removed"] = int(self.n_items - item_keep.sum())
        return self.reindex(keep_user, item_keep, info=info)

    def reindex(
        self,
        user_keep: np.ndarray | None,
        item_keep: np.ndarray | None,
        *,
        name: str | None = None,
        info: Mapping[str, Any] | None = None,
    ) -> "Ratings":
        """Restrict to the users and items whose masks are True and re-index both densely.

        ``None`` keeps the whole space on that side.  Ratings touching a removed user or item are
        dropped.  Dense order follows the old order, so original-id order is preserved.
        """
        rows = np.ones(len(self), dtype=bool)
        uid, nu = self.user_ids, self.n_users
        umap = None
        if user_keep is not None:
            user_keep = np.asarray(user_keep, dtype=bool)
            rows &= user_keep[self.users]
            umap = np.cumsum(user_keep, dtype=np.int64) - 1
            uid, nu = self.user_ids[user_keep], int(user_keep.sum())
        iid, ni, cats = self.item_ids, self.n_items, self.categories
        imap = None
        if item_keep is not None:
            item_keep = np.asarray(item_keep, dtype=bool)
            rows &= item_keep[self.items]
            imap = np.cumsum(item_keep, dtype=np.int64) - 1
            iid, ni = self.item_ids[item_keep], int(item_keep.sum())
            cats = None if cats is None else cats[item_keep]
        idx = np.flatnonzero(rows)
        u = self.users[idx] if umap is None else umap[self.users[idx]]
        i = self.items[idx] if imap is None else imap[self.items[idx]]
        t = None if self.timestamps is None else self.timestamps[idx]
        return Ratings._trusted(
            u, i, self.values[idx], t, like=self,
            n_users=nu, n_items=ni, user_ids=_readonly(np.array(uid)), item_ids=_readonly(np.array(iid)),
            categories=None if cats is None else _readonly(np.array(cats)),
            name=self.name if name is None else name,
            info=dict(info) if info is not None else dict(self.info),
        )

    def with_info(self, **entries: Any) -> "Ratings":
        """A copy sharing the arrays, with ``entries`` added to ``info``."""
        info = dict(self.info)
        info.update(entries)
        return Ratings._trusted(self.users, self.items, self.values, self.timestamps, like=self, info=info)

    def renamed(self, name: str) -> "Ratings":
        return Ratings._trusted(self.users, self.items, self.values, self.timestamps, like=self, name=name)
