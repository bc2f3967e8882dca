"""A minimal federated protocol for demos and kernel tests: federated gradient descent on a
linear least-squares model.

Each round the server broadcasts the weights ``w``; every client computes the gradient of its
local mean squared error and sends it back; the server averages the gradients, weighted by
client sample counts, in node-id order (so the result does not depend on arrival order) and
takes a step. The actors use only the ``Context`` API and run on any transport.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["server", "client", "build", "make_data"]


async def server(ctx, clients: list[str], dim: int, rounds: int, lr: float,
                 deadline: float | None = None) -> np.ndarray:
    """Run ``rounds`` rounds over ``clients``; returns the final weights (float64)."""
    w = np.zeros(dim)
    for r in range(rounds):
        ctx.begin_round(r)
        await ctx.broadcast(clients, "weights", {"w": w})
        got = await ctx.gather("gradient", senders=clients, timeout=deadline, round=r)
        if not got.messages:
            continue
        total = sum(m.payload["n"] for m in got)
        grad = np.zeros(dim)
        for m in got:  # node-id order
            grad += m.payload["n"] * m.payload["g"]
        await ctx.compute(2 * dim * len(got))
        w = w - lr * grad / total
    await ctx.broadcast(clients, "stop", None)
    return w


async def client(ctx, X: np.ndarray, y: np.ndarray) -> int:
    """Answer each ``weights`` message with the local least-squares gradient; stop on ``stop``.
    Returns the number of rounds served."""
    served = 0
    while True:
        msg = await ctx.receive(("weights", "stop"))
        if msg.kind == "stop":
            return served
        w = msg.payload["w"]
        g = 2.0 * X.T @ (X @ w - y) / len(y)
        await ctx.compute(4 * X.size)
        await ctx.send("server", "gradient", {"g": g, "n": len(y)})
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


def build(net: Any, n_clients: int = 8, dim: int = 5, rounds: int = 10, lr: float = 0.1,
          seed: int = 0, deadline: float | None = None) -> np.ndarray:
    """Add a server and ``n_clients`` clients to ``net`` (any transport); returns the true
    weights the data was drawn around."""
    w_true, parts = make_data(n_clients, dim, seed)
    names = [f"client/{i:03d}" for i in range(n_clients)]
    net.set_unit(dim)
    net.add_node("server", server, names, dim, rounds, lr, deadline, role="server")
    for name, (X, y) in zip(names, parts):
        net.add_node(name, client, X, y)
    return w_true
