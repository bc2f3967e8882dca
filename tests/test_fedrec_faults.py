"""FedRec runs that do not go as planned: late evaluation answers, malformed uploads the server
reads, studies on networks that lose messages. Tiny synthetic data only."""

from __future__ import annotations

import pytest

from fedsim.kernel import SimNetwork
from fedsim.protocols import REGISTRY, fedrec

from conftest import RewritingContext


class _SlowEval(RewritingContext):
    """A client's context that, in round ``rnd``, waits ``delay`` seconds before sending its
    ``eval`` answer (busy elsewhere; the upload that follows it is late too)."""

    def __init__(self, ctx, rnd: int, delay: float) -> None:
        super().__init__(ctx, lambda kind, payload: payload)
        self._rnd, self._delay = rnd, delay

    async def send(self, dst, kind, payload, **kw):
        if kind == "eval" and self._ctx.round == self._rnd:
            await self._ctx.sleep(self._delay)
            self._rnd = None  # once
        return await self._ctx.send(dst, kind, payload, **kw)


def _batch_eval_run(delay: float, secure: bool = False):
    spec = REGISTRY["fedrec"]
    data, cfg = spec.tiny(4, 2, 0)
    # factors large enough for predictions inside the rating scale (not all clipped to 1)
    cfg = cfg.replace(deadline=1.0, dtype="float64", eval_every=1, init_scale=1.0, secure_aggregation=secure,
                      secagg_neighbours=2)
    net = SimNetwork(seed=0, profile="lan")
    job = spec.build(net, data, cfg, test=data)
    slow = sorted(n for n in net.nodes if n.startswith("client"))[1]

    async def actor(ctx, *args, **kwargs):
        return await fedrec.client(_SlowEval(ctx, cfg.T - 1, delay), *args, **kwargs)

    net.nodes[slow].actor = actor
    return job.collect(net.run()), data, net, slow


@pytest.mark.parametrize("secure", [False, True])
def test_a_late_eval_answer_is_not_taken_for_the_final_evaluation(secure):
    """Batch FedRec with eval_every = 1: the evaluation riding on round T-1's download and the
    final ``evaluate`` (after the last iteration) were both labelled round T-1, so a client's
    round T-1 answer that missed its deadline was taken, when it came, as its answer to the final
    evaluation: the metrics of the model after T iterations mixed in that client's errors of the
    model after T-1 (with its U before its last step), and its real answer was never read. The
    final evaluation must be of the final model: the test errors of U and V as returned."""
    res, data, net, slow = _batch_eval_run(2.5, secure)
    final = res.metrics[-1]
    assert final["iteration"] == 2 and final["missing"] == 0 and final["n"] == len(data.values)
    # the round T-1 evaluation went on without the slow client, its answer came after the deadline
    assert res.metrics[-2]["iteration"] == 1 and res.metrics[-2]["missing"] == 1
    mae, rmse = res.model.evaluate(data.users, data.items, data.values)
    assert final["rmse"] == pytest.approx(rmse, rel=1e-12, abs=0)
    assert final["mae"] == pytest.approx(mae, rel=1e-12, abs=0)
    # the late round T-1 answer is discarded unread (stale), the answer to the final one is read
    evals = [(r["round"], r["read"]) for r in net.ledger.records() if r["kind"] == "eval" and r["src"] == slow]
    assert evals == [(1, False), (2, True)]
