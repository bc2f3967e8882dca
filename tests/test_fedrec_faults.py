"""FedRec runs that do not go as planned: late evaluation answers, malformed uploads the server
reads, studies on networks that lose messages. Tiny synthetic data only."""

from __future__ import annotations

import numpy as np
import pytest

from fedsim.kernel import SimNetwork
from fedsim.protocols import REGISTRY, fedrec

from conftest import RewritingContext, rewrite_sends, run_to_bad_message


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


_UPLOAD_FAULTS = {
    # integer or bool rows were summed as numbers (bool: 0s and 1s), a list of numbers taken by
    # PMF(B)'s sum; a list of item ids passed the range check and stopped the server with a bare
    # AttributeError ('list' object has no attribute 'shape') that named no sender
    "bool grads": (lambda p: {**p, "grads": np.ones(p["grads"].shape, bool)}, "gradients: rows must be a float array, got bool"),
    "int grads": (lambda p: {**p, "grads": np.ones(p["grads"].shape, np.int32)}, "gradients: rows must be a float array, got int32"),
    "list grads": (lambda p: {**p, "grads": p["grads"].tolist()}, "gradients: rows must be a float array, got list"),
    "list items": (lambda p: {**p, "items": p["items"].tolist()}, "gradients: item ids must be a 1-D integer array, got list"),
    "bool o_deltas": (lambda p: {**p, "o_deltas": np.ones(p["o_deltas"].shape, bool)},
                      "O deltas: rows must be a float array, got bool"),
    "list o_deltas": (lambda p: {**p, "o_deltas": p["o_deltas"].tolist()}, "O deltas: rows must be a float array, got list"),
}
_UPLOAD_CASES = [(m, f) for m in ("PMF(B)", "PMF(S)", "SVD++(S)") for f in _UPLOAD_FAULTS
                 if m == "SVD++(S)" or "o_deltas" not in f]


@pytest.mark.parametrize("model, fault", _UPLOAD_CASES, ids=[f"{m}-{f}" for m, f in _UPLOAD_CASES])
def test_an_upload_that_is_not_float_rows_over_integer_ids_is_an_error_naming_its_sender(model, fault):
    rewrite, why = _UPLOAD_FAULTS[fault]
    spec = REGISTRY["fedrec"]
    data, cfg = spec.tiny(4, 2, 0)
    net = SimNetwork(seed=1)
    spec.build(net, data, cfg.replace(model=model))
    bad = sorted(n for n in net.nodes if n.startswith("client"))[1]
    rewrite_sends(net, [bad], fedrec.client, lambda kind, p: rewrite(p) if kind == "gradients" else p)
    err, cause = run_to_bad_message(net)
    assert cause.sender == bad and cause.kind == "gradients" and cause.round == 0 and err.node == "server"
    assert str(cause) == f"'gradients' from {bad} (round 0): ValueError: {why}"


def _fold():
    from fedsim.data import generate
    from fedsim.studies.fedrec import make_folds

    return make_folds(generate("tiny", seed=3), 2, 0)[0]


def test_run_one_carries_what_a_faulty_run_left_out_and_evaluates_the_clients_present():
    """run_one dropped the result's info["missing"] and lost clients, and evaluated the collected
    model on every test rating: on wan with clients dropping out at 0.12 s (after their last
    upload, before the stop arrives) the run completed and reported MAE 2.1189 / RMSE 2.3635, the
    lost clients' zero user factors predicting the lowest rating, as a complete run's (the
    fault-free run: 2.0657 / 2.3145). Its outcome now says who was lost, and its errors are over
    the clients present: here the fault-free model's on the same users, bit for bit (the dropouts
    came after the last upload). Without a deadline such a network is refused."""
    from fedsim.kernel import NetSpec
    from fedsim.protocols.fedrec import FedRecConfig
    from fedsim.studies.fedrec import run_one

    fold = _fold()
    cfg = FedRecConfig("PMF(B)", d=4, T=2, lr=0.5, init_scale=0.5, deadline=1.0)
    late = NetSpec(profile="wan", dropout=0.5, window=(0.12, 0.12))
    clean = run_one((fold, "federated", cfg, 0, "wan", False))
    faulty = run_one((fold, "federated", cfg, 0, late, False))
    assert not clean.incomplete and clean.missing == [] and clean.lost_clients == []
    assert faulty.incomplete and faulty.missing == [] and len(faulty.lost_clients) == 18
    lost = [int(c.split("/")[1]) for c in faulty.lost_clients]
    users, items, values = fold.test
    keep = ~np.isin(users, lost)
    assert 0 < keep.sum() < len(users)
    # the same training (every upload arrived), so the clean run's model on the clients present
    net = NetSpec.of("wan").build(0)
    model = fedrec.build(net, fold.train_ratings(), cfg).collect(net.run()).model
    assert (faulty.mae, faulty.rmse) == model.evaluate(users[keep], items[keep], values[keep])
    assert (clean.mae, clean.rmse) == model.evaluate(users, items, values)
    assert faulty.rmse != clean.rmse
    with pytest.raises(ValueError, match=r"^run_one runs FedRec with no deadline on a network that loses no message; "
                                         r"this one does \(dropout 0.5\): measure faults with `fedsim run fault_study`"):
        run_one((fold, "federated", cfg.replace(deadline=None), 0, late, False))


@pytest.mark.parametrize("name", ["fedrec_table2", "fedrec_rho", "fedrec_convergence", "quickstart"])
def test_fedrec_scenarios_refuse_faults_up_front(name, tmp_path):
    # their runs have no deadline: a loss was a DeadlockError in a worker process, a late dropout
    # a complete-looking table with zeroed user factors
    from fedsim.experiment import UsageError, run_scenario
    from fedsim.kernel import NetSpec

    with pytest.raises(UsageError) as exc:
        run_scenario(name, data="ml100k-like", out=tmp_path / "o", net=NetSpec(loss=0.05), quiet=True)
    assert str(exc.value) == (f"{name} runs FedRec with no deadline on a network that loses no message; this one "
                              "does (loss 0.05): measure faults with `fedsim run fault_study` (fedsim.studies.faults)")
    assert list(tmp_path.iterdir()) == []
