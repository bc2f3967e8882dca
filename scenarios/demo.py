"""Kernel demo: federated gradient descent on a linear model, with its message ledger.

Runs the small broadcast-and-gather protocol of ``fedsim.protocols.demo`` (a server and a few
dozen clients fitting a linear model) and prints the model error and the communication per role,
read from the ledger.
"""

from __future__ import annotations

from fedsim.experiment import Param, RunContext, scenario_main
from fedsim.kernel import SimNetwork
from fedsim.protocols import demo

DEFAULT_DATA = "synthetic"
PARAMS = {
    "clients": Param(32, "number of clients"),
    "dim": Param(8, "model dimension"),
    "rounds": Param(20, "rounds"),
    "lr": Param(0.2, "server learning rate"),
}


def run(ctx: RunContext) -> None:
    net = SimNetwork(seed=ctx.seed, profile=ctx.profile)
    cfg = demo.DemoConfig(clients=ctx["clients"], dim=ctx["dim"], rounds=ctx["rounds"], lr=ctx["lr"])
    result = demo.SPEC.build(net, None, cfg).collect(net.run())
    ctx.record_network(net)
    ctx.table("accuracy", [{"rounds": ctx["rounds"], "clients": ctx["clients"],
                            "weight_error": result.final("weight_error"),
                            "simulated_s": result.duration}],
              title="Model error after training")
    ctx.table("communication", [
        {k: r[k] for k in ("role", "direction", "nodes", "messages", "bytes", "bytes_per_node")}
        for r in net.ledger.by_role(per_round=False)
    ], title="Communication per role (from the ledger)", floatfmt=".1f")


if __name__ == "__main__":
    raise SystemExit(scenario_main(globals()))
