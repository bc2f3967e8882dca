"""FPL's message-free twin (fedsim.math.fpl_central, fedsim.math.fpl_kernels) against the actors:
the same model to the last bit, on every preset, both kernel backends, and in the study, where the
search runs on the twin and every chosen configuration is re-run as actors and checked."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from fedsim.data import generate
from fedsim.kernel import NetSpec
from fedsim.math import fpl_kernels
from fedsim.math.bpr import BPRReg, exact_dot, init_item_params, init_user_factor
from fedsim.math.bpr import fpl_client_round, make_triple_sampler
from fedsim.math.fpl_central import CompiledClientRound, fpl_epoch, pack_samplers, select_clients
from fedsim.math.fpl_presets import PRESET_NAMES
from fedsim.protocols import fpl as fpl_proto
from fedsim.protocols.common import SERVER, client_names
from fedsim.seeding import node_rng
from fedsim.studies.fpl import StudyOptions, epoch_seed, prepare, run_fpl, run_study, settings_from
from fedsim.studies.fpl.study import TwinMismatchError, check_twin, resolve_engine

BACKENDS = ["python", pytest.param("numba", marks=pytest.mark.skipif(
    fpl_kernels.kernels() is fpl_kernels, reason="numba is not installed (the `fast` extra): only the Python "
    "kernels run"))]


def small_split():
    r = generate("ml100k-like", seed=11, n_users=24, n_items=80, n_ratings=700, min_per_user=22)
    return prepare(r, min_interactions=21)


# ---------------------------------------------------------------------------------------------
# the exact dot product


def _kernel_dot(kern, a, b):
    n = a.shape[0]
    return kern.exact_dot(a, b, np.empty(n), np.empty(n + 1))


@pytest.mark.parametrize("backend", BACKENDS)
def test_exact_dot_is_the_correctly_rounded_sum(backend):
    kern = fpl_kernels.kernels(backend)
    # hand case: the naive sum loses the 1 entirely, the exact sum keeps it
    a = np.array([1e16, 1.0, -1e16])
    b = np.ones(3)
    assert float(np.sum(a * b)) == 0.0
    assert _kernel_dot(kern, a, b) == 1.0 == exact_dot(a, b)
    rng = np.random.default_rng(5)
    for n in (1, 2, 7, 10, 11, 20, 50, 51):
        for _ in range(200):
            scale = 10.0 ** rng.integers(-8, 9, size=n)
            a = rng.normal(size=n) * scale
            b = rng.normal(size=n)
            want = math.fsum((a * b).tolist())  # an independent implementation (CPython's)
            assert _kernel_dot(kern, a, b) == want
            assert exact_dot(a, b) == want
    # where the fast path must give way to the exact partials: near-ties, cancellation, powers of two
    for it in range(3000):
        n = int(rng.integers(1, 40))
        if it % 3 == 0:  # 1 + multiples of half an ulp, plus dust far below
            a = np.concatenate([[1.0], rng.integers(-3, 4, size=n) * 2.0 ** -54, rng.normal(size=2) * 2.0 ** -100])
        elif it % 3 == 1:  # terms that cancel to a tiny remainder
            h = rng.normal(size=n) * 1e8
            a = np.concatenate([h, -h[::-1], [rng.normal() * 1e-9]])
        else:  # small integers times scattered powers of two: exact ties happen
            a = rng.integers(-5, 6, size=n).astype(float) * 2.0 ** rng.integers(-60, 60, size=n)
        want = math.fsum(a.tolist())
        got = _kernel_dot(kern, a, np.ones_like(a))
        assert got == want or (got == 0.0 and want == 0.0), (a.tolist(), got, want)
    assert _kernel_dot(kern, np.zeros(4), np.ones(4)) == 0.0
    # ties are rounded half-even as fsum does: 1 + 2^-53 (exactly half an ulp) + tiny
    a = np.array([1.0, 2.0 ** -53, 2.0 ** -80])
    assert _kernel_dot(kern, a, np.ones(3)) == math.fsum(a.tolist()) == 1.0 + 2.0 ** -52


@pytest.mark.parametrize("backend", BACKENDS)
def test_exact_dot_of_non_finite_products_agrees_with_the_numpy_side(backend):
    kern = fpl_kernels.kernels(backend)
    cases = [
        ([np.inf, 1.0, 2.0], math.inf), ([-np.inf, 1.0], -math.inf), ([np.nan, 1.0], math.nan),
        ([np.inf, -np.inf, 1.0], math.nan),  # fsum raises here; both sides fall back to the plain sum
        ([1e308, 1e308, -1e308], math.inf),  # the exact sum is finite, but fsum overflows on the way: plain sum
    ]
    for vals, want in cases:
        a = np.array(vals)
        with np.errstate(all="ignore"):  # the Python kernels compute on NumPy scalars
            got_k = _kernel_dot(kern, a, np.ones_like(a))
        got_np = exact_dot(a, np.ones_like(a))
        if math.isnan(want):
            assert math.isnan(got_k) and math.isnan(got_np), vals
        else:
            assert got_k == want == got_np, vals


# ---------------------------------------------------------------------------------------------
# one epoch against the actors


def _actors_epochs(sp, cfg, seed, epochs):
    """Theta, P and the clients' counts after each of ``epochs`` epochs of actors."""
    out, resume = [], None
    for e in range(epochs):
        net = NetSpec().build(epoch_seed(seed, e))
        job = fpl_proto.SPEC.build(net, sp.train, cfg, resume=resume)
        res = job.collect(net.run())
        resume = res
        out.append((res.params["theta"].copy(), res.params["P"].copy(),
                    {k: res.info[k].copy() for k in ("rounds", "sent_positive", "sent_negative")}))
    return out


def _twin_epochs(sp, cfg, seed, epochs, backend):
    nu, ni, d = sp.n_users, sp.n_items, cfg.d
    packed = pack_samplers(fpl_proto.make_samplers(fpl_proto.user_item_lists(sp.train), ni,
                                                   np.unique(np.asarray(sp.train.items))))
    names = client_names(nu)
    theta = np.empty((ni, d + 1), dtype=np.float32)
    P = np.empty((nu, d))
    out = []
    for e in range(epochs):
        es = epoch_seed(seed, e)
        srng = node_rng(es, SERVER)
        rngs = {}
        if e == 0:
            Q, b = init_item_params(ni, d, srng)
            theta[:, :d], theta[:, d] = Q, b
            for u in range(nu):
                rngs[u] = node_rng(es, names[u])
                P[u] = init_user_factor(d, rngs[u])
        counts = fpl_epoch(theta, P, packed, clients_per_round=cfg.clients_per_round, triples=cfg.triples,
                           rounds=cfg.rounds, lr=cfg.lr, pi=cfg.pi, reg=cfg.reg, server_rng=srng,
                           client_rng=lambda c: rngs.get(c) or node_rng(es, names[c]), backend=backend)
        out.append((theta.copy(), P.copy(), counts))
    return out


@pytest.mark.parametrize("actors", ["numpy", "compiled"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("preset", PRESET_NAMES)
def test_twin_epochs_equal_the_actors_bit_for_bit(preset, backend, actors, monkeypatch):
    if actors == "numpy":  # the clients run fpl_client_round, the NumPy code, not the compiled round
        monkeypatch.setattr(CompiledClientRound, "make", classmethod(lambda cls, *a, **k: None))
    elif fpl_kernels.compiled() is None:
        pytest.skip("numba is not installed (the `fast` extra): the actors run the NumPy code only")
    sp = small_split()
    for d, lr, pi in ((4, 0.05, 0.5), (11, 0.5, 0.2)):
        cfg = fpl_proto.config_for_preset(preset, sp.n_users, sp.x_plus, epochs=1, d=d, lr=lr, pi=pi)
        if preset.startswith("s"):  # a few hundred single-client rounds are enough to compare
            cfg = replace(cfg, rounds=300)
        want = _actors_epochs(sp, cfg, 3, 2)
        got = _twin_epochs(sp, cfg, 3, 2, backend)
        for (th_a, P_a, c_a), (th_t, P_t, c_t) in zip(want, got):
            assert th_t.dtype == np.float32 and np.array_equal(th_t, th_a)
            assert np.array_equal(P_t, P_a)
            for k in c_a:
                assert np.array_equal(c_t[k], c_a[k]), k
            assert c_t["rounds"].sum() == cfg.rounds * min(cfg.clients_per_round, sp.n_users)
        # the model moved: a comparison of two initial states would prove nothing
        assert not np.array_equal(got[1][0], got[0][0])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("preset, lr", [("sFPL", 1e4), ("sFPL", 1e30), ("pFPL", 1e4), ("pFPL", 1e30)])
def test_twin_epoch_stops_in_the_round_the_actors_server_stops_on_a_model_not_finite(preset, lr, backend):
    """The server actor stops in the round after whose updates Theta_S is not finite; the twin ran
    the epoch to its end on NaN: more visits and rows, other p_u (the study then stopped with
    TwinMismatchError when every candidate diverged and one was confirmed as actors)."""
    sp = small_split()
    cfg = fpl_proto.config_for_preset(preset, sp.n_users, sp.x_plus, epochs=1, d=4, lr=lr, pi=0.5)
    if preset.startswith("s"):
        cfg = replace(cfg, rounds=300)
    net = NetSpec().build(epoch_seed(3, 0))
    with np.errstate(all="ignore"):
        res = fpl_proto.SPEC.build(net, sp.train, cfg).collect(net.run())
        ((th_t, P_t, c_t),) = _twin_epochs(sp, cfg, 3, 1, backend)
    stop = res.info["diverged_at"]
    # the actors stopped within the epoch (after a few rounds at 1e4, after the first at 1e30)
    assert stop is not None and (stop == 1) is (lr == 1e30) and stop < cfg.rounds
    assert c_t["rounds"].sum() == stop * min(cfg.clients_per_round, sp.n_users)
    for k in ("rounds", "sent_positive", "sent_negative"):
        assert np.array_equal(c_t[k], res.info[k]), k
    # the same bits, NaN and infinities included
    assert np.array_equal(th_t.view(np.uint32), res.params["theta"].view(np.uint32))
    assert np.array_equal(P_t.view(np.uint64), res.params["P"].view(np.uint64))
    assert not np.isfinite(th_t).all()
    assert c_t["rounds_done"] == res.info["rounds_done"] == stop


@pytest.mark.skipif(fpl_kernels.compiled() is None, reason="numba is not installed (the `fast` extra)")
def test_compiled_client_round_equals_the_numpy_round_and_sort():
    rng = np.random.default_rng(9)
    n_items = 40
    cat = np.unique(rng.choice(60, size=n_items, replace=False))
    for it in range(300):
        d, T = int(rng.integers(1, 30)), int(rng.integers(1, 25))
        lr, pi = float(rng.choice([0.005, 0.05, 0.5])), float(rng.random())
        reg = BPRReg.paper(lr)
        positives = rng.choice(cat, size=int(rng.integers(1, 12)))  # repeats allowed: they weigh the draws
        sampler = make_triple_sampler(positives, 60, cat if it % 2 else None)
        theta = (rng.normal(size=(60, d + 1)) * rng.choice([0.1, 3.0])).astype(np.float32)
        p0 = rng.normal(size=d)
        U = rng.random((3, T))
        p_np, up = fpl_client_round(p0, theta[:, :d], theta[:, d], sampler, T, lr, pi,
                                    _replay(U), reg=reg)
        order = np.argsort(up.items, kind="stable")
        rows_np = np.empty((up.n_vectors, d + 1), dtype=np.float32)
        rows_np[:, :d], rows_np[:, d] = up.deltas[order], up.bias_deltas[order]
        fast = CompiledClientRound.make(sampler, d, T, lr, pi, reg, dtype="float32", merge="none",
                                        local_item_updates=False, user_update="per_triple")
        p = p0.copy()
        items, rows, sent = fast(p, theta, U)
        assert np.array_equal(items, up.items[order]) and items.dtype == np.int32
        assert np.array_equal(rows, rows_np) and rows.dtype == np.float32
        assert np.array_equal(p, p_np) and sent == up.n_positive
    assert CompiledClientRound.make(sampler, d, T, lr, pi, reg, dtype="float64", merge="none",
                                    local_item_updates=False, user_update="per_triple") is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_epoch_refuses_a_theta_smaller_than_the_samplers_catalogue(backend):
    """The kernels index theta unchecked: samplers of 10 items on an 8-row theta made the compiled
    epoch write the server's updates past theta's end (into the rows after it in memory) where the
    Python kernels raised IndexError. Both refuse it now, before anything is stepped."""
    reg = BPRReg.paper(0.1)
    for cat in (None, np.arange(0, 20, 2)):  # range(10), or a catalogue up to item 18
        samplers = [make_triple_sampler(np.array([0, 4]), 10, cat), make_triple_sampler(np.array([2, 8]), 10, cat)]
        packed = pack_samplers(samplers)
        need = 10 if cat is None else 19
        big = np.zeros((need + 4, 4), dtype=np.float32)
        P = np.random.default_rng(0).normal(size=(2, 3))
        with pytest.raises(ValueError):
            fpl_epoch(big[:need - 1], P.copy(), packed, clients_per_round=2, triples=20, rounds=3, lr=0.1, pi=1.0,
                      reg=reg, server_rng=np.random.default_rng(1),
                      client_rng=lambda c: np.random.default_rng(10 + c), backend=backend)
        assert not big.any()
        fpl_epoch(big[:need], P.copy(), packed, clients_per_round=2, triples=20, rounds=3, lr=0.1, pi=1.0, reg=reg,
                  server_rng=np.random.default_rng(1), client_rng=lambda c: np.random.default_rng(10 + c),
                  backend=backend)
        assert big[:need].any() and not big[need:].any()
        if backend == "numba":
            fast = CompiledClientRound.make(samplers[0], 3, 5, 0.1, 1.0, reg, dtype="float32", merge="none",
                                            local_item_updates=False, user_update="per_triple")
            with pytest.raises(IndexError):
                fast(np.zeros(3), big[:need - 1], np.random.default_rng(2).random((3, 5)))
            fast(np.zeros(3), big[:need], np.random.default_rng(2).random((3, 5)))


def test_compiled_client_round_refuses_a_theta_of_another_width():
    """The compiled round reads theta's rows d + 1 wide, unchecked: a narrower theta was read past
    each row's end and its values taken (a wider one's bias column was a weight)."""
    fast = CompiledClientRound.make(make_triple_sampler(np.array([0, 4]), 10, None), 3, 5, 0.1, 1.0,
                                    BPRReg.paper(0.1), dtype="float32", merge="none", local_item_updates=False,
                                    user_update="per_triple")
    if fast is None:
        pytest.skip("numba is not installed")
    U = np.random.default_rng(2).random((3, 5))
    for width in (2, 5):
        with pytest.raises(ValueError, match=rf"theta must be 4 wide \(\[Q \| b\]\), got shape \(10, {width}\)"):
            fast(np.zeros(3), np.zeros((10, width), np.float32), U)
    fast(np.zeros(3), np.zeros((10, 4), np.float32), U)


class _replay:
    """A stand-in generator whose one ``random((3, T))`` returns the given uniforms."""

    def __init__(self, U):
        self.U = U

    def random(self, shape):
        assert shape == self.U.shape
        return self.U


def test_select_clients_draws_as_documented():
    rng, ref = np.random.default_rng(1), np.random.default_rng(1)
    assert select_clients(rng, 5, 9) == range(5)
    assert select_clients(rng, 5, 1) == (int(ref.integers(5)),)
    assert select_clients(rng, 9, 3) == sorted(ref.choice(9, size=3, replace=False).tolist())
    # fpl_epoch draws a sequential schedule's rounds as one array: the same integers, the same state after
    for n in (2, 551, 2957, 138_493):
        one, many = np.random.default_rng(n), np.random.default_rng(n)
        assert many.integers(n, size=5000).tolist() == [select_clients(one, n, 1)[0] for _ in range(5000)]
        assert one.random() == many.random()


def test_fpl_epoch_refuses_what_it_does_not_replay():
    sp = small_split()
    packed = pack_samplers(fpl_proto.make_samplers(fpl_proto.user_item_lists(sp.train), sp.n_items))
    kw = dict(clients_per_round=1, triples=1, rounds=1, lr=0.05, pi=0.5, reg=BPRReg.paper(0.05),
              server_rng=np.random.default_rng(0), client_rng=lambda c: np.random.default_rng(c))
    with pytest.raises(ValueError, match="float32"):
        fpl_epoch(np.zeros((sp.n_items, 5)), np.zeros((sp.n_users, 4)), packed, **kw)
    with pytest.raises(ValueError, match="columns"):
        fpl_epoch(np.zeros((sp.n_items, 4), np.float32), np.zeros((sp.n_users, 4)), packed, **kw)
    with pytest.raises(ValueError, match="twin"):
        run_fpl(sp, "sFPL", 0.5, 1, d=4, engine="twin", merge="last")
    with pytest.raises(ValueError, match="loss"):
        run_fpl(sp, "sFPL", 0.5, 1, d=4, engine="twin", profile=NetSpec(loss=0.1))


# ---------------------------------------------------------------------------------------------
# runs and the study


def test_run_fpl_twin_equals_actors_at_every_evaluated_epoch():
    sp = small_split()
    for preset in ("sFPL+", "pFPL"):
        act = run_fpl(sp, preset, 0.3, 4, d=5, lr=0.05, seed=2, eval_every=2)
        twin = run_fpl(sp, preset, 0.3, 4, d=5, lr=0.05, seed=2, eval_every=2, engine="twin")
        # actors: one entry per epoch with its ledger; evaluation figures at epochs 2 and 4 only
        assert [c["epoch"] for c in act.curve] == [1, 2, 3, 4]
        assert "test_p" not in act.curve[0] and "cce_ledger" in act.curve[0]
        assert [c["epoch"] for c in twin.curve] == [2, 4] and "cce_ledger" not in twin.curve[0]
        for e in (2, 4):
            a, t = act.curve[e - 1], twin.curve[e // 2 - 1]
            check_twin(t, RunRecordLike([a]), (preset, e))
            assert a["cce_ledger"] == a["cce_exact"] == t["cce_exact"]


class RunRecordLike:
    def __init__(self, curve):
        self.curve = curve


def test_check_twin_names_what_differs():
    entry = {"epoch": 3, "test_p": 0.25, "val_p": 0.5, "wall_s": 1.0}
    check_twin(entry, RunRecordLike([{"epoch": 3, "test_p": 0.25, "val_p": 0.5, "wall_s": 9.0, "bytes": 7}]), ("x",))
    with pytest.raises(TwinMismatchError, match="test_p"):
        check_twin(entry, RunRecordLike([{"epoch": 3, "test_p": 0.25 + 2 ** -50, "val_p": 0.5}]), ("x",))
    with pytest.raises(TwinMismatchError, match="epoch"):
        check_twin(entry, RunRecordLike([{"epoch": 2, "test_p": 0.25, "val_p": 0.5}]), ("x",))


def test_study_on_the_twin_confirms_every_choice_with_actors_and_chooses_as_the_actors_would():
    sp = small_split()
    s = settings_from({"settings": "quick", "pis": [0.3, 1.0], "epochs": [4], "epoch_step": 2, "bpr_lrs": [0.05],
                       "bpr_ds": [4], "bpr_epochs": 2, "seeds": 2})
    methods = ("sFPL", "pFPL+")
    twin = run_study(sp, s, StudyOptions(seeds=[0, 1], methods=methods, fpl_engine="twin"))
    act = run_study(sp, s, StudyOptions(seeds=[0, 1], methods=methods, fpl_engine="actors"))
    assert set(twin.confirmed) == {(p, seed) for p in methods for seed in (0, 1)}
    assert not act.confirmed
    for p in methods:
        for seed in (0, 1):
            ct, ca = twin.chosen[p][seed], act.chosen[p][seed]
            assert ct.what == ca.what
            for k, v in ct.entry.items():
                if k not in ("wall_s", "train_s"):
                    assert np.array_equal(np.asarray(ca.entry[k]), np.asarray(v)), k
            # the confirmation's ledger: one entry per epoch up to the chosen one, counted exactly
            rec = twin.confirmed[(p, seed)]
            assert [c["epoch"] for c in rec.curve] == list(range(1, ct.what["epoch"] + 1))
            assert all(c["cce_ledger"] == c["cce_exact"] for c in rec.curve)
            assert [c["cce_ledger"] for c in rec.curve] == [c["cce_ledger"] for c in
                                                            act.runs[("fpl", p, ct.what["pi"], seed)].curve[:len(rec.curve)]]


def test_study_on_the_twin_where_every_candidate_diverged_confirms_the_actors_figures():
    """At lr 1e30 every FPL candidate diverges and one is chosen anyway (the NaN entry: nothing
    better): its confirmation as actors stopped with TwinMismatchError (visits, rows, CCE differ),
    the twin having run the epoch to its end on NaN. Now the twin stops in the actors' round, the
    study completes, and it chooses and reports what the actors engine does, figure for figure."""
    import json

    from fedsim.experiment import json_default

    sp = small_split()
    s = settings_from({"settings": "quick", "pis": [0.5, 1.0], "epochs": [2], "bpr_lrs": [1e30], "bpr_ds": [4],
                       "bpr_epochs": 2, "seeds": 1})
    methods = ("sFPL", "pFPL")
    with np.errstate(all="ignore"):
        twin = run_study(sp, s, StudyOptions(seeds=[0], methods=methods, fpl_engine="twin"))
        act = run_study(sp, s, StudyOptions(seeds=[0], methods=methods, fpl_engine="actors"))
    assert set(twin.confirmed) == {(p, 0) for p in methods}
    for p in methods:
        ct, ca = twin.chosen[p][0], act.chosen[p][0]
        assert ct.what == ca.what and ct.entry["epoch"] == 1  # diverged in its first epoch: stopped there
        assert ct.entry["test_diverged"] is True and math.isnan(ct.entry["test_p"])
        for k, v in ct.entry.items():
            if k not in ("wall_s", "train_s"):
                assert json.dumps(ca.entry[k], default=json_default) == json.dumps(v, default=json_default), k
        # the actors' own count of the rows they sent, and their ledger, agree with the twin's count
        last = twin.confirmed[(p, 0)].curve[-1]
        assert last["cce_ledger"] == last["cce_exact"] == ct.entry["cce_exact"]
        assert twin.runs[("fpl", p, ct.what["pi"], 0)].params["diverged_at"] == 1


def test_auto_engine_takes_the_twin_only_with_compiled_kernels(monkeypatch):
    assert resolve_engine("actors") == "actors" and resolve_engine("twin") == "twin"
    assert resolve_engine("auto") == ("twin" if fpl_kernels.compiled() is not None else "actors")
    monkeypatch.setattr(fpl_kernels, "compiled", lambda: None)
    assert resolve_engine("auto") == "actors"
    with pytest.raises(ValueError, match="fpl_engine"):
        resolve_engine("fast")


@pytest.mark.parametrize("backend", BACKENDS)
def test_epoch_refuses_a_client_without_positives(backend):
    """Packed by hand, a client with an empty positive slice made the compiled kernels draw
    ``positives[-1]`` unchecked (another client's item) where the Python kernels raised
    IndexError; both refuse it now with a ValueError naming the client, before anything is
    stepped (make_triple_sampler refuses such a client; pack_samplers never builds one)."""
    from fedsim.math.fpl_central import PackedSamplers
    reg = BPRReg.paper(0.1)
    packed = pack_samplers([make_triple_sampler(np.array([0, 4]), 10), make_triple_sampler(np.array([2, 8]), 10)])
    hollow = PackedSamplers(pos_ptr=np.array([0, 0, 2]), pos_all=np.array([2, 8]), key_ptr=packed.key_ptr,
                            key_all=packed.key_all, catalogue=packed.catalogue, n_negs=packed.n_negs)
    theta = np.zeros((10, 4), dtype=np.float32)
    P = np.ones((2, 3))
    with pytest.raises(ValueError, match="client 0 has no positive"):
        fpl_epoch(theta, P, hollow, clients_per_round=2, triples=5, rounds=2, lr=0.1, pi=1.0, reg=reg,
                  server_rng=np.random.default_rng(1), client_rng=lambda c: np.random.default_rng(10 + c),
                  backend=backend)
    assert not theta.any() and (P == 1.0).all()
