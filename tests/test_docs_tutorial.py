"""The tutorial in docs/writing-a-protocol.md runs, is short, and its protocol learns."""

import re
from pathlib import Path

import numpy as np

from fedsim.data import generate
from fedsim.kernel import SimNetwork

DOC = Path(__file__).resolve().parents[1] / "docs" / "writing-a-protocol.md"


def tutorial_namespace():
    code = re.search(r"```python\n(.*?)```", DOC.read_text(), re.S).group(1)
    body = code.split('if __name__ == "__main__":')[0]
    lines = [ln for ln in body.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    assert len(lines) < 100, f"the tutorial protocol has {len(lines)} lines"
    ns: dict = {}
    exec(compile(code, str(DOC), "exec"), ns)
    return ns


def test_tutorial_fedavg_learns_and_costs_come_from_the_ledger():
    ns = tutorial_namespace()
    data = generate("tiny", seed=0)
    net = SimNetwork(seed=0, profile="wan")
    names = ns["build"](net, data.users, data.items, data.values, data.n_users, data.n_items, rounds=30)
    res = net.run()
    U = np.array([res[n] for n in names])
    pred = np.einsum("kd,kd->k", U[data.users], res["server"][data.items])
    rmse = float(np.sqrt(np.mean((pred - data.values) ** 2)))
    baseline = float(np.sqrt(np.mean((data.values.mean() - data.values) ** 2)))
    assert rmse < 0.8 * baseline
    sent = {(r["role"], r["direction"]): r for r in net.ledger.by_role(per_round=False)}
    # half of the 30 clients per round, one model message each, 30 rounds, plus the stop broadcast
    assert sent[("server", "sent")]["messages"] == 30 * 15 + 30
    assert res.duration > 0
