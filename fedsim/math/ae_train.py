"""Training loops and evaluation shared by PersonalFR, FedAvg and the Joint baseline (pure NumPy).

Built on ``fedsim.math.autoencoder`` (model, hand-written backward pass), ``fedsim.math.optim`` and
``fedsim.math.active``; no messages, no time, randomness only from a Generator passed in.

- :func:`prepare`: the dense user rows of a dataset (input = the user's training row, target = its observed
  entries, AutoRec style) for the explicit task (ratings, squared error) or the implicit one (every rating
  binarised to ``rating >= threshold``, all rated entries kept as observed 0/1 targets, cross-entropy), plus
  the test entries in CSR form. This is what the authors' code does; :meth:`Ratings.binarize` instead drops
  the negatives, which is not the paper's task.
- :func:`local_train`: a client's ``K`` local epochs (shuffled batches, dropout on the code, gradient-norm
  clipping, SGD with Nesterov momentum and weight decay), the ClientUpdate of Algorithm 1; returns the FLOPs
  executed so the actor can charge them.
- :func:`train_joint`: the centralised "Joint" upper bound (one model on all users, Adam lr 1e-3, batch 500,
  weight decay 5e-4, clipping at 1, dropout 0.5: the authors' code); with numba its steps are computed from
  the data's sparsity (``joint_kernels``), the same training to float rounding.
- :func:`eval_sums` / :func:`finish_eval`: test metrics as additive sums (so clients can report theirs and a
  server can add them up): squared error and count for RMSE; NDCG@k over each user's *test items* ranked by
  score (the authors' metric: relevance = the binarised test label; a user with test items but no positive
  scores 0, as their ``div_no_nan``), averaged over the users that have test items.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, NamedTuple

import numpy as np

from . import ae_kernels, joint_kernels
from . import autoencoder as ae
from . import optim
from .blas import with_one_blas_thread

__all__ = [
    "TASKS",
    "AETask",
    "LocalResult",
    "JointResult",
    "prepare",
    "local_train",
    "train_joint",
    "eval_sums",
    "add_sums",
    "finish_eval",
    "ndcg_test_items",
    "EMPTY_SUMS",
]

TASKS = {"explicit": "mse", "implicit": "bce"}
EMPTY_SUMS = {"sse": 0.0, "n": 0, "ndcg_sum": 0.0, "ndcg_users": 0}


@dataclass
class AETask:
    """Dense training rows and CSR test entries of ``n_users`` users over ``n_items`` items.

    ``x``: ``(n_users, n_items)`` input rows, zero where unrated (ratings, or 0/1 labels for the implicit
    task); it is also the target. ``mask``: the observed training entries. ``test_ptr``, ``test_items``,
    ``test_values``: the test entries of user ``u`` are ``test_items[test_ptr[u]:test_ptr[u + 1]]`` (sorted)
    with values ``test_values[...]`` (ratings, or 0/1 labels). ``loss``: ``"mse"`` or ``"bce"``.
    """

    task: str
    x: np.ndarray
    mask: np.ndarray
    test_ptr: np.ndarray
    test_items: np.ndarray
    test_values: np.ndarray
    threshold: float | None = None
    info: dict = field(default_factory=dict)
    # what eval_sums derives from the (never modified) rows and test entries, per (block, dtype): a
    # client evaluates the same users every few rounds
    _eval_plans: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def loss(self) -> str:
        return TASKS[self.task]

    @property
    def n_users(self) -> int:
        return self.x.shape[0]

    @property
    def n_items(self) -> int:
        return self.x.shape[1]

    def rows(self, users: np.ndarray) -> "AETask":
        """The same task restricted to ``users`` (in that order): what one client holds."""
        users = np.asarray(users, dtype=np.int64)
        starts, ends = self.test_ptr[users], self.test_ptr[users + 1]
        lens = ends - starts
        idx = np.concatenate([np.arange(s, e) for s, e in zip(starts, ends)]) if len(users) else np.zeros(0, np.int64)
        ptr = np.concatenate(([0], np.cumsum(lens))).astype(np.int64)
        return AETask(self.task, self.x[users], self.mask[users], ptr, self.test_items[idx.astype(np.int64)],
                      self.test_values[idx.astype(np.int64)], self.threshold, dict(self.info))


def _csr(users, items, values, n_users):
    users = np.asarray(users, dtype=np.int64)
    items = np.asarray(items, dtype=np.int64)
    order = np.lexsort((items, users))
    ptr = np.zeros(n_users + 1, dtype=np.int64)
    np.add.at(ptr, users + 1, 1)
    return np.cumsum(ptr), items[order], np.asarray(values, dtype=np.float64)[order]


def _first_repeat(u: np.ndarray, i: np.ndarray) -> tuple[int, int, int, int, int]:
    """For pairs ``(u, i)`` of which some repeat: the pair occurring again earliest in input order as
    ``(user, item, position of its first occurrence, position of that repeat, number of entries that
    repeat an earlier one)``."""
    order = np.lexsort((i, u))  # stable: a pair's occurrences in input order
    su, si = u[order], i[order]
    dup = (su[1:] == su[:-1]) & (si[1:] == si[:-1])
    again = int(order[1:][dup].min())
    first = int(np.flatnonzero((u == u[again]) & (i == i[again]))[0])
    return int(u[again]), int(i[again]), first, again, int(dup.sum())


def prepare(train: tuple, test: tuple, n_users: int, n_items: int, *, task: str = "explicit",
            threshold: float = 3.5, dtype=np.float32) -> AETask:
    """Build an :class:`AETask` from ``train = (users, items, values)`` and ``test`` likewise.

    ``task="explicit"``: values are ratings (squared error, RMSE). ``task="implicit"``: every value becomes
    ``1.0`` if ``>= threshold`` else ``0.0`` and stays observed (cross-entropy on all rated entries, NDCG over
    the test items), as in the authors' code (ML1M: ratings 4 and 5 positive).

    Raises ``ValueError`` for a user or item index outside ``[0, n_users) x [0, n_items)`` and for a
    (user, item) pair repeated within ``train`` or within ``test`` (naming the first repeated pair and
    its two positions): a repeat used to keep its last training value silently.
    """
    if task not in TASKS:
        raise ValueError(f"task must be one of {tuple(TASKS)}, got {task!r}")
    tu, ti, tv = (np.asarray(a) for a in train)
    su, si, sv = (np.asarray(a) for a in test)
    # indices are checked here: a negative test user was silently dropped by _csr (and made
    # test_ptr[0] non-zero), a negative train index wrapped around in x[tu, ti], and a test item
    # past the end was read out of bounds by the compiled evaluation (ae_kernels.predict_entries)
    for what, (u, i) in (("train", (tu, ti)), ("test", (su, si))):
        if u.shape != i.shape:
            raise ValueError(f"{what} users and items differ in length: {u.shape} and {i.shape}")
        if u.size and (u.min() < 0 or u.max() >= int(n_users) or i.min() < 0 or i.max() >= int(n_items)):
            raise ValueError(f"{what} user or item index outside [0, {int(n_users)}) x [0, {int(n_items)})")
    tv = tv.astype(np.float64)
    sv = sv.astype(np.float64)
    if task == "implicit":
        tv = (tv >= threshold).astype(np.float64)
        sv = (sv >= threshold).astype(np.float64)
    x = np.zeros((int(n_users), int(n_items)), dtype=dtype)
    mask = np.zeros((int(n_users), int(n_items)), dtype=bool)
    mask[tu, ti] = True
    ptr, items, values = _csr(su, si, sv, int(n_users))
    # a repeated (user, item) pair: x[tu, ti] = tv kept the last value silently (and the test
    # entries counted the pair twice in RMSE and NDCG); the loaders refuse repeats or merge them by
    # their ``duplicates`` policy, so this is for direct callers. Fewer observed cells than entries
    # (train), or a row's sorted test items with one twice, is a repeat: located only then.
    rows = np.repeat(np.arange(int(n_users)), np.diff(ptr))
    for what, (u, i), repeated in (("train", (tu, ti), int(mask.sum()) != tu.size),
                                   ("test", (su, si), bool(np.any((items[1:] == items[:-1]) & (rows[1:] == rows[:-1]))))):
        if repeated:
            pu, pi, first, again, count = _first_repeat(u, i)
            raise ValueError(
                f"{what} entries repeat (user, item) = ({pu}, {pi}) at positions {first} and {again} (the first "
                f"repeated pair; {count} repeated entries in total): each (user, item) must appear once; merge "
                f"repeats first (the loaders' duplicates= policy)")
    x[tu, ti] = tv
    return AETask(task, x, mask, ptr, items, values, threshold if task == "implicit" else None,
                  {"train_entries": int(mask.sum()), "test_entries": int(len(items))})


# ----------------------------------------------------------------------------------------- training


class LocalResult(NamedTuple):
    flops: int  # forward + backward + clipping + optimiser, as executed
    loss: float  # mean batch loss of the last epoch
    steps: int


def local_train(
    params: dict,
    state: dict,
    x: np.ndarray,
    target: np.ndarray,
    mask: np.ndarray,
    *,
    epochs: int,
    batch: int,
    lr: float,
    rng: np.random.Generator,
    loss: str = "mse",
    momentum: float = 0.9,
    nesterov: bool = True,
    weight_decay: float = 5e-4,
    clip: float | None = 1.0,
    dropout: float = 0.5,
    restrict: Mapping[str, Any] | None = None,
    lazy: bool = False,
    sequential_sums: bool = False,
    exact_norm: bool = False,
    stepwise_idle: bool = False,
    source: Mapping[str, np.ndarray] | None = None,
) -> LocalResult:
    """``epochs`` passes over the rows of ``x`` in shuffled batches of ``batch`` (Algorithm 1's ClientUpdate).

    ``params`` (writable arrays) and ``state`` (from ``optim.sgd_init``) are updated in place; ``state=None``
    starts from zero momentum and throws it away after (a client that resets its momentum every round:
    no whole-model buffer need be kept or, with ``lazy``, even allocated). ``target`` and
    ``mask`` have the model's output width (a client holding its active decoder passes the columns of its
    active items). ``restrict``: optimiser restriction (full training with the inactive rows masked).
    Randomness (shuffles, dropout) from ``rng``, in that order per epoch: one permutation, then the batches.

    ``lazy`` (without ``restrict``): the same training, computed on the part of the model the client's data
    can reach. An input column of an item no row of ``x`` has a value for, and an output row of an item no
    row of ``mask`` rates, get an exactly zero gradient at every step, so their steps are weight decay and
    momentum only: the local steps run on the model cut to the reached columns and rows
    (``ae.loss_and_grads`` of the smaller arrays) and the other entries get their ``steps`` zero-gradient
    steps at once (``optim.sgd_idle_steps`` in closed form: one linear map of parameter and momentum,
    computed in float64). Same rule, same random draws; the only differences from the step-by-step path
    are the order in which the matrix products and the clipping norm add up their terms (their zero
    terms are left out) and the rounding of the zero-gradient steps (once instead of at every step), so
    results agree to float rounding, not bit for bit; when the data reaches every input column and output
    row (a client holding its active items only) nothing is cut or idle and the model is trained in
    place; with ``sequential_sums``, ``exact_norm`` and
    ``stepwise_idle`` (slow, for tests) both paths are bit-identical. With a client
    of one user on ML-100K the cut model is about a tenth of the whole. The FLOPs returned are those of
    the step-by-step path (the method's arithmetic, whatever shortcut the simulator takes), so simulated
    compute times do not depend on ``lazy``.

    ``sequential_sums``, ``exact_norm``, ``stepwise_idle``: matrix products summed term by term
    (``ae.loss_and_grads``), the clipping norm correctly rounded (``optim.grad_norm``) and, with ``lazy``,
    the zero-gradient steps applied one by one in the parameters' precision; slow, for tests.

    ``source``: the starting values of ``params`` (the same keys, shapes and dtypes; read-only arrays,
    such as a received model's, are fine), ``params`` then need only be allocated (``np.empty_like``):
    the result is that of copying ``source`` into ``params`` first, and with ``lazy`` the copy of the
    cut arrays is folded into the pass that gives their untouched entries their steps.

    Parameters that overflow (a learning rate too large for the data) are not checked here: the
    caller checks what it gets (the federated servers every merged model, and stop saying so), and
    NumPy's overflow and invalid-value warnings on the way are not printed.
    """
    # a learning rate too large for the data: the callers check the parameters they get (the federated
    # servers every merged model); NumPy's overflow warnings on the way were printed by every client
    with np.errstate(over="ignore", invalid="ignore"):
        if lazy and restrict is None:
            return _local_train_lazy(params, state, x, target, mask, epochs=epochs, batch=batch, lr=lr, rng=rng,
                                     loss=loss, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay,
                                     clip=clip, dropout=dropout, sequential_sums=sequential_sums,
                                     exact_norm=exact_norm, stepwise_idle=stepwise_idle, source=source)
        if source is not None:
            for k, v in params.items():
                np.copyto(v, source[k])
        if state is None:
            state = optim.sgd_init(params)
        flops = 0

        def step(b):  # one step on the rows b; the FLOPs as executed
            nonlocal flops
            r = ae.loss_and_grads(params, x[b], target[b], mask[b], loss=loss, dropout=dropout,
                                  rng=rng if dropout > 0 else None, sequential_sums=sequential_sums)
            flops += r.flops
            coef = None
            if clip is not None and clip > 0:  # clip_grad_norm's scaling, done inside the step
                _, coef, f = optim.clip_coef(r.grads, clip, exact=exact_norm)
                flops += f
            flops += optim.sgd_step(params, r.grads, state, lr=lr, momentum=momentum, nesterov=nesterov,
                                    weight_decay=weight_decay, restrict=restrict, grad_scale=coef)
            return r.loss

        steps, last = _minibatches(x.shape[0], epochs, batch, rng, step)
        return LocalResult(int(flops), float(last), steps)


def _minibatches(n: int, epochs: int, batch: int, rng: np.random.Generator,
                 step: Callable[[np.ndarray], float]) -> tuple[int, float]:
    """``local_train``'s loop, shared by its two paths: ``epochs`` passes over ``n`` rows, each one
    permutation drawn from ``rng`` then ``step(b)`` on its batches of ``batch`` rows in order (``b``
    the rows' indices, sorted); ``step`` returns the batch's loss. Returns the number of steps and
    the mean loss of the last epoch (0.0 without epochs)."""
    batch = int(batch)
    steps = 0
    last = 0.0
    for _ in range(int(epochs)):
        order = rng.permutation(n)
        total = 0.0
        nb = 0
        for b0 in range(0, n, batch):
            total += step(np.sort(order[b0:b0 + batch]))
            nb += 1
        steps += nb
        last = total / max(nb, 1)
    return steps, last


def _local_train_lazy(params, state, x, target, mask, *, epochs, batch, lr, rng, loss, momentum, nesterov,
                      weight_decay, clip, dropout, sequential_sums, exact_norm, stepwise_idle,
                      source=None) -> LocalResult:
    """``local_train(lazy=True)``: see there."""
    w_in = ae.input_key(params)
    w_out, b_out = ae.output_keys(params)
    cols = np.flatnonzero((x != 0).any(axis=0))  # input columns the data reaches
    rows = np.flatnonzero(np.asarray(mask).any(axis=0))  # output rows the loss reaches
    cut = {w_in: (cols, 1), w_out: (rows, 0), b_out: (rows, 0)}  # (indices, axis)
    if len(cols) == params[w_in].shape[1] and len(rows) == params[w_out].shape[0]:
        cut = {}  # the data reaches every column and row (a client holding its active items): train in place
    start = params if source is None else source
    if source is not None:  # the layers not cut are trained in place: they need their values now
        for k, v in params.items():
            if k not in cut:
                np.copyto(v, source[k])
    # the cut model: gathered copies of the reached parts, the other (small) layers shared as they are
    sub = {k: (_take(start[k], *cut[k]) if k in cut else v) for k, v in params.items()}
    if state is None:  # fresh momentum, not kept: only the cut model's is needed
        sub_state = optim.sgd_init(sub)
    else:
        sub_state = dict(state)
        if momentum:
            for k, (idx, axis) in cut.items():
                sub_state[f"momentum.{k}"] = _take(state[f"momentum.{k}"], idx, axis)
    xs, ts, ms = (x, target, mask) if not cut else (x[:, cols], target[:, rows], mask[:, rows])
    # FLOPs of the step-by-step path over the whole model
    enc_sizes, dec_sizes = ae.layer_sizes(params)
    size = ae.param_count(params)
    step_flops = optim.sgd_flops(size, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay)
    n = x.shape[0]
    one = None  # each local step fused into one compiled call (ae_kernels.step1, stepb)
    if not (sequential_sums or exact_norm):
        one = _FusedStep.make(sub, sub_state, loss=loss, lr=lr, momentum=momentum, nesterov=nesterov,
                              weight_decay=weight_decay, clip=clip, dropout=dropout)
    flops = 0
    if _all_steps_at_once(one, batch):  # all the steps in one compiled call, the draws made first
        losses, clipped, sizes = one.train(xs, ts, ms, int(epochs), int(batch), rng)
        steps = len(losses)
        distinct, counts = np.unique(sizes, return_counts=True)  # (a few batch sizes, many steps)
        flops = sum(c * ae.train_flops(enc_sizes, dec_sizes, b, loss=loss, dropout=dropout)
                    for b, c in zip(distinct.tolist(), counts.tolist()))
        flops += steps * step_flops
        if clip is not None and clip > 0:
            flops += (2 * steps + int(clipped.sum())) * size  # clip_coef's count for the whole model
        per_epoch = -(-n // int(batch))  # batches per epoch
        # the last epoch's mean, added up as _minibatches does
        last = sum(losses[-per_epoch:].tolist()) / per_epoch if n else 0.0
    else:
        def step(b):  # one step of the cut model on the rows b; the FLOPs of the whole model's step
            nonlocal flops
            flops += ae.train_flops(enc_sizes, dec_sizes, len(b), loss=loss, dropout=dropout)
            if one is not None:
                value, clipped = one(xs[b], ts[b], ms[b], rng)
                if clip is not None and clip > 0:
                    flops += (3 if clipped else 2) * size  # clip_coef's count for the whole model
                flops += step_flops
                return value
            r = ae.loss_and_grads(sub, xs[b], ts[b], ms[b], loss=loss, dropout=dropout,
                                  rng=rng if dropout > 0 else None, sequential_sums=sequential_sums)
            coef = None
            if clip is not None and clip > 0:
                _, coef, _ = optim.clip_coef(r.grads, clip, exact=exact_norm)
                flops += (3 if coef is not None else 2) * size  # clip_coef's count for the whole model
            optim.sgd_step(sub, r.grads, sub_state, lr=lr, momentum=momentum, nesterov=nesterov,
                           weight_decay=weight_decay, grad_scale=coef)
            flops += step_flops
            return r.loss

        steps, last = _minibatches(n, epochs, batch, rng, step)
    if not cut:
        return LocalResult(int(flops), float(last), steps)
    # the entries the data never reached get their steps at once, the reached ones the trained values
    reached = {k: (idx, axis, sub[k], sub_state.get(f"momentum.{k}")) for k, (idx, axis) in cut.items()}
    optim.sgd_idle_steps({k: params[k] for k in cut}, state, steps, lr=lr, momentum=momentum, nesterov=nesterov,
                         weight_decay=weight_decay, closed_form=not stepwise_idle,
                         source=None if source is None else {k: source[k] for k in cut}, reached=reached)
    return LocalResult(int(flops), float(last), steps)


def _take(a, idx, axis):
    return a[idx] if axis == 0 else a[:, idx]


def _all_steps_at_once(one, batch) -> bool:
    """Whether ``local_train(lazy=True)`` runs all its steps in one kernel call (tests switch it off
    to compare with one call a step)."""
    return one is not None


_FUSED_KEYS = ("enc.W1", "enc.b1", "enc.W2", "enc.b2", "dec.W1", "dec.b1", "dec.W2", "dec.b2")


class _FusedStep:
    """A local step on a batch of users' rows as one call of a compiled kernel (``ae_kernels.step1``
    for one user, ``stepb`` for more): the same step as ``ae.loss_and_grads`` + ``optim.clip_coef`` +
    ``optim.sgd_step``, to float rounding (the kernel's module says where the two differ), with the
    same random draws (the dropout mask, drawn here as ``ae`` draws it). :meth:`make` returns None
    when the kernel does not apply: numba missing, a model other than two encoder and two
    decoder layers, layouts or dtypes the kernel does not take."""

    def __init__(self, kern, args, pt, par, flags, dropout, h2, dtype):
        self.kern, self.args, self.pt, self.par, self.flags = kern, args, pt, par, flags
        self.dropout, self.h2, self.dtype = dropout, h2, dtype

    @classmethod
    def make(cls, params, state, *, loss, lr, momentum, nesterov, weight_decay, clip, dropout):
        if tuple(params) != _FUSED_KEYS or loss not in TASKS.values():
            return None
        kern = ae_kernels.compiled()
        if kern is None:
            return None
        dtype = params["enc.W1"].dtype
        bufs = [state[f"momentum.{k}"] for k in params] if momentum else list(params.values())
        arrays = list(params.values()) + bufs
        if dtype not in (np.float32, np.float64) or any(a.dtype != dtype or not a.flags.writeable for a in arrays):
            return None
        w1, m1 = params["enc.W1"], bufs[0]
        by_column = bool(w1.flags.f_contiguous and m1.flags.f_contiguous) and w1.ndim == 2 and w1.shape[0] > 1
        if not (by_column or (w1.flags.c_contiguous and m1.flags.c_contiguous)):
            return None
        if not all(a.flags.c_contiguous for a in arrays[1:8] + arrays[9:]):
            return None
        K = ae_kernels
        pt = np.zeros(K.T_KEEP + 1, dtype=dtype)  # the kernel's scalars, rounded to the weights' dtype
        pt[[K.T_LR, K.T_MOMENTUM, K.T_WD, K.T_ONE]] = lr, momentum, weight_decay, 1.0
        par = np.zeros(K.P_DROPOUT + 1)  # and those it keeps in float64
        par[K.P_CLIP] = clip if clip is not None else 0.0
        flags = (by_column, loss == "bce", dropout > 0.0, clip is not None and clip > 0, bool(weight_decay),
                 bool(momentum), bool(nesterov))
        one = cls(kern.step1, arrays, pt, par, flags, float(dropout), params["enc.W2"].shape[0], dtype)
        one.kern_steps = kern.steps1
        one.kern_batch = kern.stepb
        one.kern_batches = kern.stepsb
        return one

    def train(self, X, Y, masks, epochs, batch, rng):
        """``epochs`` passes over the rows of ``X`` (targets ``Y``, observed entries ``masks``) in
        batches of ``batch`` rows, shuffled per epoch: the draws ``local_train``'s loop makes (per
        epoch one permutation, then per batch the dropout mask's uniforms), made first, then every
        step in one kernel call. Returns each step's loss, whether it was clipped, and its batch's
        size."""
        n = X.shape[0]
        counts = np.count_nonzero(masks, axis=1)
        self.par[ae_kernels.P_DROPOUT] = self.dropout
        self.pt[ae_kernels.T_KEEP] = 1.0 / (1.0 - self.dropout)  # (ae's keep scale, rounded to the dtype)
        dt = self.dtype
        data = (np.ascontiguousarray(X, dtype=dt), np.ascontiguousarray(Y, dtype=dt),
                np.ascontiguousarray(masks, dtype=dt))
        if n == 1:  # (a permutation of one row draws nothing: every dropout mask in one draw, the same values)
            rows = np.zeros(epochs, dtype=np.int64)
            sizes = np.ones(epochs, dtype=np.int64)
            draws = rng.random((epochs, self.h2)) if self.dropout > 0.0 else np.zeros((epochs, 1))
        else:
            rows, draws = [], []
            for _ in range(epochs):
                order = rng.permutation(n)
                for b0 in range(0, n, batch):
                    b = np.sort(order[b0:b0 + batch])
                    rows.append(b)
                    if self.dropout > 0.0:
                        draws.append(rng.random((len(b), self.h2)))
            sizes = np.array([len(b) for b in rows], dtype=np.int64)
            rows = np.concatenate(rows).astype(np.int64) if rows else np.zeros(0, np.int64)
            draws = np.concatenate(draws) if draws else np.zeros((len(rows), 1))
        losses = np.zeros(len(sizes))
        clipped = np.zeros(len(sizes), dtype=np.bool_)
        if batch == 1:  # step1's loops (no batch buffers): a fifth faster a step
            scales = np.divide(1.0, counts, out=np.zeros(n), where=counts > 0)  # per row
            self.kern_steps(*self.args, *data, scales, rows, draws, self.par, self.pt, *self.flags, losses, clipped)
            return losses, clipped, sizes
        starts = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=starts[1:])
        totals = np.add.reduceat(counts[rows], starts[:-1]).astype(np.float64) if len(rows) else np.zeros(0)
        scales = np.divide(1.0, totals, out=np.zeros(len(sizes)), where=totals > 0)  # per batch
        self.kern_batches(*self.args, *data, starts, rows, scales, draws, self.par, self.pt, *self.flags,
                          losses, clipped)
        return losses, clipped, sizes

    def __call__(self, x, y, mask, rng):
        """One step on the rows of ``x`` (a batch; or one row, 1-D), targets ``y`` and observed
        entries ``mask``; returns (loss, clipped)."""
        count = int(np.count_nonzero(mask))
        scale = 1.0 / count if count else 0.0
        self.par[ae_kernels.P_SCALE] = scale
        self.pt[ae_kernels.T_LOSS_SCALE] = scale if self.flags[1] else 2.0 * scale  # the loss gradient's factor
        dt = self.dtype
        if x.ndim == 2 and x.shape[0] != 1:
            keep = self.pt[None, :1]  # (unused without dropout)
            if self.dropout > 0.0:  # ae._forward's draw
                keep = ((rng.random((x.shape[0], self.h2)) >= self.dropout)
                        * (1.0 / (1.0 - self.dropout))).astype(dt)
            return self.kern_batch(*self.args, np.ascontiguousarray(x, dtype=dt), np.ascontiguousarray(y, dtype=dt),
                                   np.ascontiguousarray(mask, dtype=dt), np.arange(x.shape[0]), keep, self.par,
                                   self.pt, *self.flags)
        x, y, mask = x.reshape(-1), y.reshape(-1), mask.reshape(-1)
        keep = self.pt[:1]  # (unused without dropout)
        if self.dropout > 0.0:  # ae._forward's draw, for a batch of one
            keep = ((rng.random((1, self.h2)) >= self.dropout) * (1.0 / (1.0 - self.dropout))).astype(dt)[0]
        value, clipped = self.kern(*self.args, x.astype(dt, copy=False), y.astype(dt, copy=False),
                                   mask.astype(dt), keep, self.par, self.pt, *self.flags)
        return value, clipped


@dataclass
class JointResult:
    params: dict
    history: list  # one {"epoch", "rmse" | "ndcg", "loss"} per evaluation
    flops: int
    epochs: int  # the epochs run: those asked for, or up to diverged_at
    diverged_at: int | None = None  # the epoch (1-based) after which a parameter was found not finite


def train_joint(
    task: AETask,
    *,
    epochs: int,
    rng: np.random.Generator,
    batch: int = 500,
    lr: float = 1e-3,
    weight_decay: float = 5e-4,
    clip: float | None = 1.0,
    dropout: float = 0.5,
    hidden: tuple[int, ...] = ae.DEFAULT_HIDDEN,
    dtype=np.float32,
    eval_every: int = 0,
    k: int = 10,
    callback: Callable[[int, dict | None], None] | None = None,
    sparse: bool = True,
) -> JointResult:
    """The Joint baseline: one autoencoder trained on every user's row with Adam (the authors' settings).

    The model is initialised from ``rng`` first (``ae.init_params``), then every epoch draws one permutation
    of the users and the dropout masks. With ``eval_every`` the test metrics are recorded every that many
    epochs and after the last; ``callback(epoch, evaluation_or_None)`` is called after every epoch.

    ``sparse`` (the default): when numba is available and the model has two encoder and two decoder
    layers, each step is :class:`_SparseJoint`'s (the input and output layers computed from the non-zero
    inputs and at the loss mask's entries only, ``joint_kernels``): the same training, to float rounding,
    with the same random draws; otherwise (or with ``sparse=False``) the NumPy step
    (``ae.loss_and_grads``, ``optim.clip_grad_norm``, ``optim.adam_step``). The FLOPs returned are the
    NumPy step's either way (the method's arithmetic).

    The parameters are checked after every epoch: if one is not finite (a learning rate too large
    for the data), or an evaluation over some entries is (finite parameters whose predictions are
    not), training stops after that epoch with ``diverged_at`` set to it and ``epochs`` the epochs
    run; that epoch's evaluation is not kept (``callback`` gets None for it), so ``history`` holds
    no NaN figure of the diverged model. NumPy's overflow warnings on the way there are not
    printed.
    """
    params = ae.init_params(task.n_items, rng, hidden, dtype=dtype)
    x, mask = task.x, task.mask
    fast = _SparseJoint.make(params, x, mask, loss=task.loss, dropout=dropout) if sparse else None
    state = optim.adam_init(params) if fast is None else None
    enc_sizes, dec_sizes = ae.layer_sizes(params)
    size = ae.param_count(params)
    n = x.shape[0]
    flops = 0
    history = []
    done, diverged_at = 0, None
    # divergence is checked once per epoch below: NumPy's overflow warnings on the way say nothing more
    quiet = dict(over="ignore", invalid="ignore")
    for ep in range(1, int(epochs) + 1):
        order = rng.permutation(n)
        total, nb = 0.0, 0
        done = ep
        for b0 in range(0, n, int(batch)):
            b = np.sort(order[b0:b0 + int(batch)])
            if fast is not None:
                with np.errstate(**quiet):
                    value, clipped = fast.step(b, rng, lr=lr, weight_decay=weight_decay, clip=clip)
                # the NumPy step's count: loss_and_grads, clip_grad_norm, adam_step
                flops += ae.train_flops(enc_sizes, dec_sizes, len(b), loss=task.loss, dropout=dropout)
                if clip is not None and clip > 0:
                    flops += (3 if clipped else 2) * size
                flops += optim.adam_flops(size, weight_decay=weight_decay)
                total += value
                nb += 1
                continue
            with np.errstate(**quiet):
                r = ae.loss_and_grads(params, x[b], x[b], mask[b], loss=task.loss, dropout=dropout,
                                      rng=rng if dropout > 0 else None)
                flops += r.flops
                if clip is not None and clip > 0:
                    flops += optim.clip_grad_norm(r.grads, clip)[1]
                flops += optim.adam_step(params, r.grads, state, lr=lr, weight_decay=weight_decay)
            total += r.loss
            nb += 1
        finite = np.isfinite(fast.P).all() if fast is not None else all(np.isfinite(v).all() for v in params.values())
        if not finite:  # fast.P: the sparse step's flat buffer of every parameter
            diverged_at = ep
            if callback is not None:
                callback(ep, None)
            break
        ev = None
        if (eval_every and ep % eval_every == 0) or ep == int(epochs):
            with np.errstate(**quiet):  # (finite parameters whose predictions overflow: checked below)
                ev = finish_eval(eval_sums(params if fast is None else fast.params(), task, k=k), task.task)
            if ev["n"] and not np.isfinite(ev.get("rmse", ev.get("ndcg"))):
                # finite parameters whose predictions are not: no figure either (over no entry, NaN
                # says nobody was evaluated, not divergence)
                diverged_at = ep
                if callback is not None:
                    callback(ep, None)
                break
            ev.update(epoch=ep, loss=total / max(nb, 1))
            history.append(ev)
        if callback is not None:
            callback(ep, ev)
    if fast is not None:
        params = fast.params()
    return JointResult(params, history, int(flops), done, diverged_at)


class _SparseJoint:
    """:func:`train_joint`'s step (``ae.loss_and_grads`` + ``optim.clip_grad_norm`` +
    ``optim.adam_step`` on a batch of rows) computed from the data's sparsity: the input layer from
    the rows' non-zero entries, the output layer, the loss and the output layer's backward products
    at the loss mask's entries only (``joint_kernels``; the terms left out are zero), the two middle
    layers with NumPy's dense products. The parameters live in one flat buffer (the input weight
    stored transposed, ``(n_in, h1)``, so that an item's weights are contiguous), with Adam's moments
    and a gradient buffer of the same layout, so that clipping and the update are one pass each.
    :meth:`make` returns None when the kernels do not apply: numba missing, a model other than two
    encoder and two decoder layers, or a dtype other than float32 / float64."""

    def __init__(self, K, params, x, mask, loss, dropout):
        dt = params["enc.W1"].dtype
        self.K, self.dt, self.bce, self.dropout = K, dt, loss == "bce", float(dropout)
        shapes = {k: (v.shape[::-1] if k == "enc.W1" else v.shape) for k, v in params.items()}
        total = sum(int(np.prod(s)) for s in shapes.values())
        self.P, self.G, self.M, self.V = (np.zeros(total, dtype=dt) for _ in range(4))
        self.p, self.g = {}, {}
        o = 0
        for key, shape in shapes.items():
            size = int(np.prod(shape))
            self.p[key] = self.P[o:o + size].reshape(shape)
            self.g[key] = self.G[o:o + size].reshape(shape)
            np.copyto(self.p[key], params[key].T if key == "enc.W1" else params[key])
            o += size
        xd = np.asarray(x, dtype=dt)
        self.x_ptr, self.x_idx, self.x_val = _csr_of(xd, xd != 0)
        self.m_ptr, self.m_idx, self.m_y = _csr_of(xd, np.asarray(mask).astype(bool, copy=False))
        self.m_count = np.diff(self.m_ptr)
        self.z = np.zeros(len(self.m_idx), dtype=dt)  # the outputs at the mask's entries, then their gradient
        self.t = 0  # Adam's step count
        self.pa = np.zeros(joint_kernels.A_COEF + 1, dtype=dt)
        self.pl = np.zeros(joint_kernels.L_GSCALE + 1, dtype=dt)
        self.pl[joint_kernels.L_ONE] = 1.0

    @classmethod
    def make(cls, params, x, mask, *, loss, dropout):
        if tuple(params) != _FUSED_KEYS or loss not in TASKS.values():
            return None
        if params["enc.W1"].dtype not in (np.float32, np.float64):
            return None
        K = joint_kernels.compiled()
        if K is None:
            return None
        return cls(K, params, x, mask, loss, dropout)

    def params(self) -> dict:
        """The current parameters, fresh C-ordered arrays in ``ae.init_params``'s layout."""
        return {k: np.array(v.T if k == "enc.W1" else v, order="C") for k, v in self.p.items()}

    @with_one_blas_thread  # its products of the hidden layers are BLAS's (.blas)
    def step(self, rows, rng, *, lr, weight_decay, clip, betas=(0.9, 0.999), eps=1e-8):
        """One step on the (sorted) rows ``rows``, the dropout mask drawn from ``rng`` as ``ae`` draws
        it; returns the batch's loss (``ae.loss_and_grads``'s) and whether the gradient was clipped."""
        K, dt, p, g = self.K, self.dt, self.p, self.g
        B = len(rows)
        # forward: the input layer from the non-zero inputs
        a = np.empty((B, p["enc.W1"].shape[1]), dtype=dt)
        K.csr_matmul(self.x_ptr, self.x_idx, self.x_val, rows, p["enc.W1"], a)
        a += p["enc.b1"]
        H1 = np.tanh(a, out=a)
        H2 = np.tanh(H1 @ p["enc.W2"].T + p["enc.b2"])
        code, keep = H2, None
        if self.dropout > 0.0:  # ae._forward's draw
            keep = ((rng.random(H2.shape) >= self.dropout) * (1.0 / (1.0 - self.dropout))).astype(dt)
            code = H2 * keep
        H3 = np.tanh(code @ p["dec.W1"].T + p["dec.b1"])
        # the output layer and the loss at the mask's entries only
        z = self.z
        K.masked_matmul(self.m_ptr, self.m_idx, rows, H3, p["dec.W2"], p["dec.b2"], z, dt.type(0))
        count = int(self.m_count[rows].sum())
        scale = 1.0 / count if count else 0.0
        self.pl[joint_kernels.L_GSCALE] = scale if self.bce else 2.0 * scale  # ae's loss gradient factor
        value = K.masked_loss_grad(self.m_ptr, self.m_y, rows, z, z, self.pl, self.bce)
        value = value * scale if count else 0.0
        # backward (the gradient buffer is zero: adam_update clears it)
        G3 = np.empty_like(H3)
        K.masked_backward(self.m_ptr, self.m_idx, rows, z, p["dec.W2"], H3, G3, g["dec.W2"], g["dec.b2"])
        G3 *= 1 - H3 * H3
        np.matmul(G3.T, code, out=g["dec.W1"])
        np.sum(G3, axis=0, out=g["dec.b1"])
        G2 = G3 @ p["dec.W1"]
        if keep is not None:
            G2 *= keep
        G2 *= 1 - H2 * H2
        np.matmul(G2.T, H1, out=g["enc.W2"])
        np.sum(G2, axis=0, out=g["enc.b2"])
        G1 = G2 @ p["enc.W2"]
        G1 *= 1 - H1 * H1
        np.sum(G1, axis=0, out=g["enc.b1"])
        K.csr_t_matmul_add(self.x_ptr, self.x_idx, self.x_val, rows, G1, g["enc.W1"])
        # clipping (optim.clip_grad_norm's rule) and Adam (optim.adam_step's), one pass each
        pa = self.pa
        clipped = False
        if clip is not None and clip > 0:
            coef = clip / (math.sqrt(K.sumsq(self.G)) + 1e-6)
            clipped = coef < 1.0
            pa[joint_kernels.A_COEF] = coef
        b1, b2 = betas
        self.t += 1
        pa[joint_kernels.A_WD] = weight_decay
        pa[joint_kernels.A_B1], pa[joint_kernels.A_1MB1] = b1, 1.0 - b1
        pa[joint_kernels.A_B2], pa[joint_kernels.A_1MB2] = b2, 1.0 - b2
        pa[joint_kernels.A_BC2] = math.sqrt(1.0 - b2 ** self.t)
        pa[joint_kernels.A_EPS] = eps
        pa[joint_kernels.A_STEP] = lr / (1.0 - b1 ** self.t)
        K.adam_update(self.P, self.G, self.M, self.V, pa, clipped, bool(weight_decay))
        return value, clipped


def _csr_of(x, where):
    """``(ptr, idx, val)``: the entries of ``x`` where ``where`` is true, row by row, columns in order."""
    r, c = np.nonzero(where)
    ptr = np.zeros(x.shape[0] + 1, dtype=np.int64)
    np.cumsum(np.bincount(r, minlength=x.shape[0]), out=ptr[1:])
    return ptr, c.astype(np.int64), np.ascontiguousarray(x[r, c])


# --------------------------------------------------------------------------------------- evaluation


def ndcg_test_items(scores: np.ndarray, labels: np.ndarray, k: int = 10) -> float:
    """NDCG@k of one user's test items ranked by ``scores`` (descending; ties keep item order) with binary
    relevance ``labels``; 0 when no test item is positive; NaN when a score is not finite (a diverged
    model's logits: NaN was sorted last and the model got a plausible NDCG, where its RMSE is NaN)."""
    s = np.asarray(scores, dtype=np.float64)
    if not np.all(np.isfinite(s)):
        return float("nan")
    order = np.argsort(-s, kind="stable")[:k]
    disc = 1.0 / np.log2(np.arange(2, k + 2))
    rel = np.asarray(labels, dtype=np.float64)
    dcg = float((rel[order] * disc[: len(order)]).sum())
    n_pos = int(np.count_nonzero(rel > 0))
    idcg = float(disc[: min(n_pos, k)].sum())
    return dcg / idcg if idcg > 0 else 0.0


def eval_sums(params: Mapping[str, np.ndarray], task: AETask, *, k: int = 10, clip: tuple | None = None,
              block: int = 512) -> dict:
    """Additive test-metric sums of ``params`` on every user of ``task`` that has test entries.

    Input = the user's training row; the prediction of a test entry is the model output there (explicit:
    the rating, optionally clipped to ``clip``; implicit: the logit). Returns ``{"sse", "n", "ndcg_sum",
    "ndcg_users", "flops"}`` (``ndcg_*`` only for the implicit task; ``flops`` of the full forward passes,
    though only the test items' outputs are computed, from the non-zero inputs: the predictions are the
    full model's, to rounding).
    """
    out = dict(EMPTY_SUMS)
    flops = 0
    ptr = task.test_ptr
    enc_sizes, dec_sizes = ae.layer_sizes(params)
    # the compiled prediction reads the output rows of the test items unchecked (NumPy's path
    # raises): refuse items outside the output layer first. The output layer, not the task's
    # input width: a PersonalFR client with a cut encoder has fewer input columns than outputs.
    n_out = dec_sizes[-1]
    ti = task.test_items
    if ti.size and (ti.min() < 0 or ti.max() >= n_out):
        raise ValueError(f"test items must be indices in [0, {n_out}) (the model's outputs)")
    kern = _PredictEntries.make(params)
    for blk in _eval_plan(task, block, params["enc.W1"].dtype if kern is not None else None):
        users = blk.users
        # only the outputs of the block's test items are computed, from the inputs that are not zero
        # (the other terms of the products are zero: the same predictions, summed in another order)
        fast = kern is not None and blk.nz_ptr is not None
        if fast:
            z = kern.predict_rows(blk.x, blk.nz_ptr, blk.nz_cols, blk.nz_vals, blk.ent_ptr, blk.items)
        else:
            out_rows = blk.out_rows
            z = ae.predict(params, blk.x, in_cols="nonzero", out_rows=out_rows)
        flops += ae.predict_flops(enc_sizes, dec_sizes, len(users))
        at = 0
        for row, u in enumerate(users.tolist()):
            items = task.test_items[ptr[u]:ptr[u + 1]]
            vals = task.test_values[ptr[u]:ptr[u + 1]]
            if fast:
                pred = z[at:at + len(items)].astype(np.float64)
                at += len(items)
            else:
                pred = z[row, np.searchsorted(out_rows, items)].astype(np.float64)
            if task.task == "explicit":
                if clip is not None:
                    pred = np.clip(pred, *clip)
                err = pred - vals
                out["sse"] += float(err @ err)
                out["n"] += int(len(items))
            else:
                out["ndcg_sum"] += ndcg_test_items(pred, vals, k)
                out["ndcg_users"] += 1
                out["n"] += int(len(items))
    out["flops"] = int(flops)
    return out


class _EvalBlock(NamedTuple):
    """One block of :func:`eval_sums`: its users, their input rows and test entries as the
    prediction takes them (``nz_*`` and ``ent_ptr`` for the compiled one, else ``out_rows``)."""

    users: np.ndarray
    x: np.ndarray
    items: np.ndarray
    ent_ptr: np.ndarray | None
    nz_ptr: np.ndarray | None
    nz_cols: np.ndarray | None
    nz_vals: np.ndarray | None
    out_rows: np.ndarray | None


def _eval_plan(task: AETask, block: int, dtype) -> list[_EvalBlock]:
    """``eval_sums``' blocks of ``task`` (``dtype``: the compiled prediction's, None when it is not
    used), built at the first evaluation and kept on the task."""
    key = (int(block), None if dtype is None else np.dtype(dtype).str)
    plan = task._eval_plans.get(key)
    if plan is not None:
        return plan
    plan = []
    ptr = task.test_ptr
    has = np.flatnonzero(np.diff(ptr) > 0)
    for b0 in range(0, len(has), block):
        users = has[b0:b0 + block]
        entries = np.concatenate([np.arange(ptr[u], ptr[u + 1]) for u in users])
        items = task.test_items[entries]
        if dtype is not None and len(users) <= _KERNEL_USERS:
            x = np.ascontiguousarray(task.x[users], dtype=dtype)
            rows, cols = np.nonzero(x)
            nz_ptr = np.zeros(x.shape[0] + 1, dtype=np.int64)
            np.cumsum(np.bincount(rows, minlength=x.shape[0]), out=nz_ptr[1:])
            ent_ptr = np.zeros(x.shape[0] + 1, dtype=np.int64)
            np.cumsum(ptr[users + 1] - ptr[users], out=ent_ptr[1:])
            plan.append(_EvalBlock(users, x, np.asarray(items, dtype=np.int64), ent_ptr, nz_ptr,
                                   cols.astype(np.int64), x[rows, cols], None))
        else:
            plan.append(_EvalBlock(users, task.x[users], items, None, None, None, None, np.unique(items)))
    task._eval_plans[key] = plan
    return plan


# eval_sums uses the compiled prediction for blocks of at most this many users (a client's); on larger
# blocks (the Joint baseline's 512) BLAS's blocked products over the block's test items are faster (measured)
_KERNEL_USERS = 64


class _PredictEntries:
    """The model's outputs at chosen entries of a batch of input rows, one call of the compiled
    ``ae_kernels.predict_entries`` (the same function as ``ae.predict``'s, to float rounding: its
    sums run in another order). :meth:`make` returns None where the kernel does not apply (numba
    missing, a model other than two encoder and two decoder layers, mixed or other dtypes,
    layouts it does not take)."""

    def __init__(self, kern, arrays, by_column, dtype):
        self.kern, self.arrays, self.by_column, self.dtype = kern, arrays, by_column, dtype

    @classmethod
    def make(cls, params):
        if tuple(params) != _FUSED_KEYS:
            return None
        dtype = params["enc.W1"].dtype
        arrays = list(params.values())
        if dtype not in (np.float32, np.float64) or any(a.dtype != dtype for a in arrays):
            return None
        w1 = params["enc.W1"]
        by_column = bool(w1.flags.f_contiguous) and w1.shape[0] > 1
        if not (by_column or w1.flags.c_contiguous) or not all(a.flags.c_contiguous for a in arrays[1:]):
            return None
        kern = ae_kernels.compiled()
        return None if kern is None else cls(kern.predict_entries, arrays, by_column, dtype)

    def __call__(self, x, items, counts):
        """The outputs at ``items`` (output rows; the first ``counts[0]`` for row 0 of ``x``, the
        next ``counts[1]`` for row 1, ...), in that order."""
        x = np.ascontiguousarray(x, dtype=self.dtype)
        rows, cols = np.nonzero(x)
        nz_ptr = np.zeros(x.shape[0] + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=x.shape[0]), out=nz_ptr[1:])
        ent_ptr = np.zeros(x.shape[0] + 1, dtype=np.int64)
        np.cumsum(counts, out=ent_ptr[1:])
        return self.predict_rows(x, nz_ptr, cols.astype(np.int64), x[rows, cols], ent_ptr,
                                 np.asarray(items, dtype=np.int64))

    def predict_rows(self, x, nz_ptr, nz_cols, nz_vals, ent_ptr, items):
        """:meth:`__call__` with the rows' non-zeros and the entries' offsets already known (``x`` of
        the model's dtype, C-ordered; ``nz_*`` as ``np.nonzero`` orders them; int64 indices)."""
        out = np.empty(int(ent_ptr[-1]), dtype=self.dtype)
        self.kern(*self.arrays, x, nz_ptr, nz_cols, nz_vals, self.by_column, ent_ptr, items, out)
        return out


def add_sums(parts) -> dict:
    """Add up eval sums (e.g. the clients' replies)."""
    out = dict(EMPTY_SUMS)
    out["flops"] = 0
    for p in parts:
        for key in out:
            out[key] += p.get(key, 0)
    return out


def finish_eval(sums: Mapping[str, float], task: str) -> dict:
    """``{"rmse": ...}`` (explicit) or ``{"ndcg": ...}`` (implicit) from added-up sums."""
    if task == "explicit":
        return {"rmse": float(np.sqrt(sums["sse"] / sums["n"])) if sums["n"] else float("nan"), "n": int(sums["n"])}
    users = sums["ndcg_users"]
    return {"ndcg": float(sums["ndcg_sum"] / users) if users else float("nan"), "n": int(sums["n"])}
