"""Datasets, splits and loaders (pure data code: no actors, no network except ``download``).

- :class:`Ratings`: the immutable ratings container with CSR views;
- loaders: :func:`load_movielens`, :func:`load_netflix` + :func:`netflix_subset`,
  :func:`load_foursquare` (:mod:`fedsim.data.foursquare`: FPL's user filters and the shipped map
  of venue types to the nine top-level categories), :func:`load_anime`, :func:`load_csv`;
- :func:`resolve`: a ``--data`` argument (synthetic preset, path, downloaded name) to Ratings;
- :mod:`fedsim.data.synthetic` (:func:`generate`), :mod:`fedsim.data.splits`,
  :mod:`fedsim.data.download`, :mod:`fedsim.data.cli`.

Metrics live in :mod:`fedsim.math.metrics`.  See ``docs/data.md``.
"""

from .loaders import load_anime, load_csv, load_foursquare, load_movielens, load_netflix, netflix_subset
from .ratings import CSR, DataFormatError, Ratings
from .resolve import load_path, resolve
from .splits import (
    kfold_copies,
    partition_users,
    per_user_random,
    random_holdout,
    temporal_holdout,
    temporal_holdout_with_validation,
)
from .synthetic import PRESETS as SYNTHETIC_PRESETS
from .synthetic import generate

__all__ = [
    "CSR",
    "DataFormatError",
    "Ratings",
    "SYNTHETIC_PRESETS",
    "generate",
    "kfold_copies",
    "load_anime",
    "load_csv",
    "load_foursquare",
    "load_movielens",
    "load_netflix",
    "load_path",
    "netflix_subset",
    "partition_users",
    "per_user_random",
    "random_holdout",
    "resolve",
    "temporal_holdout",
    "temporal_holdout_with_validation",
]
