"""Shared test helpers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Path:
    """``../shared/data`` beside the repository (or ``$FEDSIM_SHARED_DATA``)."""
    env = os.environ.get("FEDSIM_SHARED_DATA")
    return Path(env) if env else REPO.parent / "shared" / "data"


@pytest.fixture
def ml100k_dir() -> Path:
    d = shared_data_dir() / "ml-100k"
    if not (d / "u.data").is_file():
        pytest.skip("MovieLens 100K not present in ../shared/data")
    return d


@pytest.fixture
def fsq_dir() -> Path:
    d = shared_data_dir() / "foursquare-fedbpr-cities"
    if not d.is_dir():
        pytest.skip("Foursquare city files not present in ../shared/data")
    return d


def as_ratings(users, items, values, n_users, n_items, *rest):
    """A ``Ratings`` from the tuple form ``(users, items, values, n_users, n_items)`` tests use."""
    from fedsim.data import Ratings

    return Ratings(users, items, values, n_users=n_users, n_items=n_items)


def load_benchmark(name: str):
    """The module ``benchmarks/NAME.py``, loaded by its path (benchmarks are scripts, not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
