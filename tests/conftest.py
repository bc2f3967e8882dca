"""Shared test helpers."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]


def pytest_configure(config):
    # A command started in the background by a non-interactive shell (`pytest &` in a script, a
    # CI step detached with `cmd &`) begins with SIGINT ignored, and so would every fedsim
    # process the tests start: the Ctrl-C tests' processes ran on (they timed out, and one left
    # a sweep running). Python's own handler here is reset to the default by exec in a child.
    import signal

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(config, items):
    # The suite's workers take whole files (--dist loadfile). tests/test_sweep_ray.py, every test
    # that starts a real Ray instance, is one of the longest (about 2.5 min on a 2-core machine):
    # collected last, it was handed out last, and the other worker sat idle while it ran. First,
    # it runs beside the rest. (Every file's own order is kept, the same in every worker.)
    def is_ray(item) -> bool:
        return item.path.name == "test_sweep_ray.py"

    items[:] = [it for it in items if is_ray(it)] + [it for it in items if not is_ray(it)]


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
def timed_wait_losing_the_race(monkeypatch):
    """Replace the real-time transports' timed wait (``ClosedOnDropout.await_within``, here and
    in processes forked from here) by one that always raises ``TimeoutError``, once the future
    has completed or its seconds have passed, whichever comes first: the race ``asyncio.timeout``
    (and Python 3.12's ``wait_for``) loses when the future completes in the loop pass its timeout
    fires in. (It waited out its seconds whatever came: a test had to keep them short, and a
    process held back longer than they exceed the sender's delay timed out before the message.)"""
    import asyncio

    from fedsim.kernel.realtime import ClosedOnDropout

    async def late_await_within(fut, seconds):
        await asyncio.wait([fut], timeout=seconds)
        if not fut.done():
            fut.cancel()
        raise TimeoutError

    monkeypatch.setattr(ClosedOnDropout, "await_within", staticmethod(late_await_within))


async def receive_within(ctx, timeout: float = 0.3):
    """An actor: the payload of the first ``x`` message within ``timeout`` seconds, or None."""
    msg = await ctx.receive("x", timeout=timeout)
    return None if msg is None else msg.payload


async def send_x_to_a_soon(ctx):
    """An actor: after 0.05 s sends ``x`` (payload 5) to node ``a``; returns "sent"."""
    await ctx.sleep(0.05)
    await ctx.send("a", "x", 5)
    return "sent"


def later_round_net(net, then: str = "gather", each: bool = False):
    """Nodes ``server``, ``a``, ``b`` on ``net``: the server gathers ``u`` of round 1 from a and
    b while messages of other rounds are about. Already in its mailbox when it starts: a's
    ``a2`` (round 2), then ``a0`` (round 0: stale), then ``a1``; arriving while it waits: b's
    ``b2`` (round 2), a ``note`` (another kind), then ``b1``. The server returns what its round-1
    gather took, then (``then="gather"``) what a round-2 gather takes and the next message of
    any kind, or (``then="receive"``) the next three messages of any kind: ``(payload, round)``
    pairs. With ``each``, round 1 is gathered with ``gather_each``."""

    async def server(ctx):
        ctx.begin_round(1)
        await ctx.receive("hello")  # a's u messages are queued by now
        await ctx.send("b", "go", None)
        if each:
            got = [m async for m in ctx.gather_each("u", senders=["a", "b"], round=1, timeout=5.0)]
        else:
            got = (await ctx.gather("u", senders=["a", "b"], round=1, timeout=5.0)).messages
        out = [[(m.payload, m.round) for m in got]]
        if then == "gather":
            got2 = await ctx.gather("u", senders=["a", "b"], round=2, timeout=5.0)
            out.append([(m.payload, m.round) for m in got2])
            rest = [await ctx.receive(timeout=5.0)]
        else:
            rest = [await ctx.receive(timeout=5.0) for _ in range(3)]
        out.append([None if m is None else (m.payload, m.round) for m in rest])
        return out

    async def a(ctx):
        ctx.begin_round(2)
        await ctx.send("server", "u", "a2")
        ctx.begin_round(0)
        await ctx.send("server", "u", "a0")
        ctx.begin_round(1)
        await ctx.send("server", "u", "a1")
        await ctx.send("server", "hello", None)

    async def b(ctx):
        await ctx.receive("go")
        ctx.begin_round(2)
        await ctx.send("server", "u", "b2")
        await ctx.send("server", "note", "n2")
        ctx.begin_round(1)
        await ctx.sleep(0.05)
        await ctx.send("server", "u", "b1")

    net.add_node("server", server, role="server")
    net.add_node("a", a)
    net.add_node("b", b)
    return net


def check_later_round(net, res, then: str = "gather") -> None:
    """What ``later_round_net``'s server must have got: round 1 only in its round-1 gather, the
    round-2 messages left for later in arrival order, the stale one discarded unread."""
    # (pairs as tuples: TcpNetwork's results cross a process boundary, which makes them lists)
    out = [[None if m is None else tuple(m) for m in part] for part in res["server"]]
    assert out[0] == [("a1", 1), ("b1", 1)]
    if then == "gather":
        assert out[1] == [("a2", 2), ("b2", 2)]
        assert out[2] == [("n2", 2)]
    else:
        assert out[1] == [("a2", 2), ("b2", 2), ("n2", 2)]  # arrival order
    unread = [(r["src"], r["kind"], r["round"]) for r in net.ledger.records() if r["dst"] == "server" and not r["read"]]
    assert unread == [("a", "u", 0)]


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


class ServerRewritingContext(RewritingContext):
    """A server's context whose sends *and broadcasts* of one ``kind`` go through
    ``rewrite(payload) -> payload`` (a ``Draft`` is given as a dict of copies of its arrays):
    a real server made to send one malformed message to its clients."""

    def __init__(self, ctx, kind, rewrite) -> None:
        super().__init__(ctx, self._apply)
        self._kind, self._fn = kind, rewrite

    def _apply(self, kind, payload):
        if kind != self._kind:
            return payload
        if type(payload).__name__ == "Draft":
            payload = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in payload.payload.items()}
        return self._fn(payload)

    async def broadcast(self, dsts, kind, payload):
        return await self._ctx.broadcast(dsts, kind, self._apply(kind, payload))


def rewrite_server(net, server, kind, rewrite) -> None:
    """Make ``net``'s node ``server`` run ``server`` (its real actor function) with its ``kind``
    messages rewritten by ``rewrite(payload)`` (:class:`ServerRewritingContext`)."""
    async def actor(ctx, *args, **kwargs):
        return await server(ServerRewritingContext(ctx, kind, rewrite), *args, **kwargs)
    net.nodes["server"].actor = actor


def run_to_bad_server_message(net, kind: str, round: int):
    """Run ``net``, which must stop with a client's ``BadMessageError`` naming the server's
    ``kind`` message of ``round``; returns ``(the ActorError, the BadMessageError)``."""
    err, cause = run_to_bad_message(net)
    assert err.node.startswith("client") and cause.sender == "server", (err.node, str(cause))
    assert (cause.kind, cause.round) == (kind, round), str(cause)
    assert str(cause).startswith(f"{kind!r} from server (round {round}): ") and err.node in str(err), str(err)
    return err, cause


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


def anime_like(tmp_path):
    """(A test helper.) An Anime-format folder (rating.csv, ratings 1..10): 12 users, 6 items each."""
    d = tmp_path / "anime"
    d.mkdir()
    rows = [f"{u},{i},{1 + (u * 7 + i * 3) % 10}" for u in range(1, 13) for i in range(1 + u % 4, 7 + u % 4)]
    (d / "rating.csv").write_text("user_id,anime_id,rating\n" + "\n".join(rows) + "\n")
    return d
