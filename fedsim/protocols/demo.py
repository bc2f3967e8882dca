"""A minimal federated protocol for demos and kernel tests: federated gradient descent on a
linear least-squares model.

Each round the server broadcasts the weights ``w``; every client computes the gradient of its
local mean squared error and sends it back; the server averages the gradients, weighted by
client sample counts, in node-id order (so the result does not depend on arrival order) and
takes a step. The server checks its weights once per round (``common.all_finite``): weights that
are not finite (a learning rate too large for the data) stop the run there, no client is sent
them, and ``collect`` reports the round (``info["diverged_at"]``). The actors use only the
``Context`` API and run on any transport. The data are synthetic (drawn from the network seed),
so ``build`` takes no ratings.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config import Config, param
from .common import SERVER, BadMessageError, all_finite
from .contract import Kind, ProtocolSpec, Result, server_result
from .registry import register

__all__ = ["DemoConfig", "DemoJob", "SPEC", "build", "client", "make_data", "server"]


@dataclass(frozen=True)
class DemoConfig(Config):
    """Federated gradient descent on a linear model."""

    clients: int = param(8, "number of clients", min=1)
    dim: int = param(5, "model dimension", min=1)
    rounds: int = param(10, "rounds", min=0)
    lr: float = param(0.1, "server learning rate", min=0, exclusive_min=True)
    deadline: float | None = param(None, "seconds the server waits for gradients each round (none: forever)",
                                   min=0, exclusive_min=True, none_ok=True)


async def server(ctx, clients: list[str], dim: int, rounds: int, lr: float,
                 deadline: float | None = None) -> np.ndarray:
    """Run ``rounds`` rounds over ``clients``; returns the final weights (float64).

    After each step the weights are checked: if they are not finite, the server stops in that
    round (no client is sent them; they are the value returned, and the last round in which
    ``weights`` were sent is the round it diverged in, which ``DemoJob.collect`` reads from the
    ledger)."""
    w = np.zeros(dim)
    for r in range(rounds):
        ctx.begin_round(r)
        await ctx.broadcast(clients, "weights", {"w": w})
        got = await ctx.gather("gradient", senders=clients, timeout=deadline, round=r)
        if not got.messages:
            continue
        total = 0
        grad = np.zeros(dim)
        for m in got:  # node-id order
            n, g = _gradient(m, dim)
            total += n
            with np.errstate(over="ignore", invalid="ignore"):  # a non-finite sum is checked below
                grad += n * g
        await ctx.compute(2 * dim * len(got))
        with np.errstate(over="ignore", invalid="ignore"):
            w = w - lr * grad / total
        if not all_finite(w):  # once per round: diverged, stop here
            break
    await ctx.broadcast(clients, "stop", None)
    return w


def _gradient(msg, dim: int) -> tuple[int, np.ndarray]:
    """A ``gradient`` message's (n, g), checked: what a client sends is not trusted (a (1,)
    gradient would be broadcast over every weight, a negative count would flip the step)."""
    try:
        n, g = msg.payload["n"], msg.payload["g"]
    except (KeyError, TypeError) as exc:
        raise BadMessageError(msg, exc) from exc
    if type(n) is not int or n < 1:
        raise BadMessageError(msg, f"n must be a positive integer, got {n!r}")
    if not isinstance(g, np.ndarray) or g.shape != (dim,) or g.dtype.kind != "f":
        raise BadMessageError(msg, f"g must be a float vector of {dim} entries, got "
                                   f"{f'{g.dtype} of shape {g.shape}' if isinstance(g, np.ndarray) else type(g).__name__}")
    return n, g


async def client(ctx, X: np.ndarray, y: np.ndarray) -> int:
    """Answer each ``weights`` message with the local least-squares gradient; stop on ``stop``.
    Returns the number of rounds served."""
    served = 0
    while True:
        msg = await ctx.receive(("weights", "stop"))
        if msg.kind == "stop":
            return served
        w = msg.payload.get("w") if type(msg.payload) is dict else None
        if type(w) is not np.ndarray or w.dtype != np.float64 or w.shape != (X.shape[1],):
            # (w of another length or a string was a bare ValueError of the matmul, a list taken)
            got = f"{w.dtype} of shape {w.shape}" if isinstance(w, np.ndarray) else type(w).__name__
            raise BadMessageError(msg, f"w must be a float64 vector of {X.shape[1]} entries, got {got}")
        with np.errstate(over="ignore", invalid="ignore"):
            # finite but huge weights (a diverging run) can overflow here; the server finds the
            # non-finite gradient in its weights after this round's step and stops
            g = 2.0 * X.T @ (X @ w - y) / len(y)
        await ctx.compute(4 * X.size)
        await ctx.send(SERVER, "gradient", {"g": g, "n": len(y)})
        served += 1


def make_data(n_clients: int, dim: int, seed: int) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]]]:
    """Synthetic per-client regression data around one true weight vector."""
    rng = np.random.default_rng(seed)
    w_true = rng.normal(size=dim)
    parts = []
    for _ in range(n_clients):
        n = int(rng.integers(5, 40))
        X = rng.normal(size=(n, dim))
        parts.append((X, X @ w_true + 0.1 * rng.normal(size=n)))
    return w_true, parts


@dataclass
class DemoJob:
    cfg: DemoConfig
    w_true: np.ndarray
    clients: list[str]

    def collect(self, run) -> Result:
        """``params["w"]``: the final weights; one metric row, at the last round run: the distance
        to the true weights (with ``rounds`` 0, that of the initial zero weights);
        ``info["diverged_at"]``: if the final weights are not finite (a learning rate too large
        for the data), the 1-based round in which the server found them so and stopped (the last
        round the ledger shows ``weights`` sent in), else None; ``info["rounds_done"]``: that
        round, or ``rounds``; ``info["missing"]``: per round in which the server's wait (its
        ``deadline``) missed gradients, ``{"round", "kind": "gradient", "clients"}``, ``clients``
        counting them as ``ledger.missing`` does (the server averages those that arrived; none:
        the weights stay)."""
        w = server_result(run)
        diverged_at = None
        if not all_finite(w):
            sent = run.ledger.select(kind="weights").rounds()
            diverged_at = sent[-1] + 1 if sent else self.cfg.rounds
        done = self.cfg.rounds if diverged_at is None else diverged_at
        with np.errstate(over="ignore", invalid="ignore"):
            err = float(np.linalg.norm(w - self.w_true))
        missed: dict[int, int] = {}  # the server's waits that gave up (it had no record of them)
        for m in run.ledger.missing:
            if m.receiver == SERVER and m.kind == "gradient":
                missed[m.round] = missed.get(m.round, 0) + 1
        missing = [{"round": r, "kind": "gradient", "clients": n} for r, n in sorted(missed.items())]
        return Result("demo", self.cfg, {"w": w}, [{"round": done, "weight_error": err}], run,
                      info={"w_true": self.w_true, "diverged_at": diverged_at, "rounds_done": done, "missing": missing,
                            "rounds_served": [run.results.get(c, 0) for c in self.clients],
                            "lost_clients": [c for c in self.clients if c not in run.results]})


def build(net, data=None, cfg: DemoConfig | None = None, *, test=None, resume=None) -> DemoJob:
    """Add a server and ``cfg.clients`` clients to ``net`` (any transport), with data drawn from
    the network's seed (``data`` must be None)."""
    if data is not None or test is not None or resume is not None:
        raise ValueError("the demo protocol makes its own data: pass data=None, no test, no resume")
    cfg = cfg or DemoConfig()
    w_true, parts = make_data(cfg.clients, cfg.dim, net.seed)
    names = [f"client/{i:03d}" for i in range(cfg.clients)]  # the demo's own names, kept since its first runs
    net.set_unit(cfg.dim)
    net.add_node(SERVER, server, names, cfg.dim, cfg.rounds, cfg.lr, cfg.deadline, role="server")
    for name, (X, y) in zip(names, parts):
        net.add_node(name, client, X, y)
    return DemoJob(cfg, w_true, names)


def tiny(clients: int = 3, rounds: int = 2, seed: int = 0):
    """``clients`` (1 to 30, as every protocol's tiny preset: ``ValueError`` beyond) on the
    demo's own data, ``dim`` 4."""
    from .presets import check_tiny_clients

    check_tiny_clients(clients)
    return None, DemoConfig(clients=clients, dim=4, rounds=rounds)


SPEC = register(ProtocolSpec(
    name="demo", summary="federated gradient descent on a linear model (kernel demo)", Config=DemoConfig,
    kinds=(Kind("weights", "server", "client", "training", "{w: float64[dim]}"),
           Kind("gradient", "client", "server", "training", "{g: float64[dim], n: samples}"),
           Kind("stop", "server", "client", "control", "None")),
    build=build, tiny=tiny, data="none", metric="weight_error", rounds_field="rounds"))
