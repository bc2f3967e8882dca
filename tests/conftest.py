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


@pytest.fixture
def wait_for_losing_the_race(monkeypatch):
    """Replace ``asyncio.wait_for`` (here and in processes forked from here) by one that, for a
    future with a timeout, always raises ``TimeoutError`` after the timeout even when the future
    completed meanwhile: the race Python 3.12's ``wait_for`` loses when the future completes in
    the loop pass its timeout fires in. Other waits (coroutines, no timeout) are the real ones."""
    import asyncio

    real = asyncio.wait_for

    async def late_wait_for(aw, timeout):
        if timeout is None or not isinstance(aw, asyncio.Future):
            return await real(aw, timeout)
        task = asyncio.ensure_future(aw)
        await asyncio.sleep(timeout)
        if not task.done():
            task.cancel()
        raise asyncio.TimeoutError

    monkeypatch.setattr(asyncio, "wait_for", late_wait_for)


async def receive_within(ctx, timeout: float = 0.3):
    """An actor: the payload of the first ``x`` message within ``timeout`` seconds, or None."""
    msg = await ctx.receive("x", timeout=timeout)
    return None if msg is None else msg.payload


async def send_x_to_a_soon(ctx):
    """An actor: after 0.05 s sends ``x`` (payload 5) to node ``a``; returns "sent"."""
    await ctx.sleep(0.05)
    await ctx.send("a", "x", 5)
    return "sent"


class RewritingContext:
    """An actor's context whose sends go through ``rewrite(kind, payload) -> payload`` (everything
    else is the real context's): a real client made to send one malformed message."""

    def __init__(self, ctx, rewrite) -> None:
        self._ctx, self._rewrite = ctx, rewrite

    def __getattr__(self, name):
        return getattr(self._ctx, name)

    async def send(self, dst, kind, payload, **kw):
        return await self._ctx.send(dst, kind, self._rewrite(kind, payload), **kw)


def rewrite_sends(net, nodes, client, rewrite) -> None:
    """Make each of ``nodes`` on ``net`` run ``client`` (its real actor function) with its sends
    rewritten (:class:`RewritingContext`)."""
    async def actor(ctx, *args, **kwargs):
        return await client(RewritingContext(ctx, rewrite), *args, **kwargs)
    for node in nodes:
        net.nodes[node].actor = actor


def run_to_bad_message(net):
    """Run ``net``, which must stop with an actor's ``BadMessageError``; returns
    ``(the ActorError, the BadMessageError)``."""
    import pytest

    from fedsim.kernel import ActorError
    from fedsim.protocols.common import BadMessageError

    with pytest.raises(ActorError) as info:
        net.run()
    cause = info.value.__cause__
    assert isinstance(cause, BadMessageError), repr(cause)
    return info.value, cause
