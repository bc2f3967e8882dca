"""Optimisers on dicts of named arrays: SGD (momentum, Nesterov, weight decay), Adam, global gradient-norm
clipping, cosine annealing.

The update rules are PyTorch's (``torch.optim.SGD`` with ``dampening=0``, ``torch.optim.Adam`` with L2 weight
decay, ``clip_grad_norm_``, ``CosineAnnealingLR``'s closed form), written out so the simulator needs no
framework. Optimiser state is a flat ``dict`` of plain arrays (``"momentum.<param>"``, ``"m.<param>"``,
``"v.<param>"`` and a 0-d ``"step"`` counter) so a client can keep it between rounds, copy it or serialise it.

``sgd_step`` and ``adam_step`` update ``params`` and ``state`` **in place** (as ``torch.optim`` does) and
return the number of floating-point operations executed (1 per elementwise operation, same convention as
``fedsim.math.autoencoder``).

``restrict`` maps a parameter name to a NumPy index (row indices, or ``(slice(None), cols)`` for columns):
only that part of the parameter, and of its optimiser state, is read and updated; the rest is left exactly
as it was (no weight decay, no momentum, no Adam moments). This is how "full training with the inactive
rows masked" is defined in fedsim (see ``docs/personalfr.md``): it performs exactly the arithmetic that
training a client's active slice performs.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

__all__ = [
    "sgd_init",
    "sgd_step",
    "sgd_idle_steps",
    "idle_map",
    "sgd_flops",
    "adam_init",
    "adam_step",
    "adam_flops",
    "grad_norm",
    "clip_grad_norm",
    "clip_coef",
    "cosine_lr",
]

Params = dict[str, np.ndarray]


def _parts(params, grads, restrict, key):
    """(param view or gathered copy, grad part, index or None)."""
    idx = None if restrict is None else restrict.get(key)
    if idx is None:
        return params[key], grads[key], None
    return params[key][idx], grads[key][idx], idx


# ----------------------------------------------------------------------------------------------------- SGD


def sgd_init(params: Mapping[str, np.ndarray]) -> Params:
    """Zero momentum buffers, one per parameter (``"momentum.<name>"``)."""
    return {f"momentum.{k}": np.zeros_like(v) for k, v in params.items()}


def sgd_step(
    params: Params,
    grads: Mapping[str, np.ndarray],
    state: Params,
    *,
    lr: float,
    momentum: float = 0.0,
    nesterov: bool = False,
    weight_decay: float = 0.0,
    restrict: Mapping[str, Any] | None = None,
    grad_scale: float | None = None,
    kernel: str = "auto",
) -> int:
    """One SGD step in place; returns its FLOPs.

    Per parameter ``p`` with gradient ``g`` (PyTorch's rule, ``dampening = 0``):
    ``d = g + weight_decay * p``; with momentum ``buf = momentum * buf + d`` and ``d = d + momentum * buf``
    (Nesterov) or ``d = buf``; then ``p = p - lr * d``. The momentum buffers must come from :func:`sgd_init`
    when ``momentum > 0`` (a zero buffer gives PyTorch's first step, ``buf = d``).

    ``grad_scale``: use ``g * grad_scale`` (rounded to ``g``'s dtype, as ``g *= grad_scale`` would) instead
    of ``g``, without writing to ``grads``: gradient clipping's coefficient (:func:`clip_coef`) folded into
    the step. Its FLOPs are not counted here (:func:`clip_coef` counts them).

    ``kernel``: ``"auto"`` runs each unrestricted parameter whose arrays (parameter, gradient, momentum)
    share one float dtype and shape and are either all C-contiguous or 2-D of any layout through the fused
    loop of ``fedsim.math.optim_kernels`` when numba can compile it (one pass over memory instead of about
    ten; bit-identical results), NumPy's expressions otherwise; ``"numpy"`` always uses NumPy's
    expressions. Scalars are taken as Python floats (``float(lr)``, ...), as NumPy treats them in a
    float32 run.
    """
    if nesterov and momentum <= 0.0:
        raise ValueError("Nesterov momentum needs momentum > 0")
    if kernel not in ("auto", "numpy"):
        raise ValueError(f"kernel must be 'auto' or 'numpy', got {kernel!r}")
    # Python floats: NumPy treats them as weak scalars (a float32 run stays float32), as the fused loop does
    lr, momentum, weight_decay = float(lr), float(momentum), float(weight_decay)
    grad_scale = None if grad_scale is None else float(grad_scale)
    fused = _fused() if kernel == "auto" else None
    flops = 0
    for key in params:
        p, g, idx = _parts(params, grads, restrict, key)
        how = _fusable(p, g, state.get(f"momentum.{key}") if momentum else p) if fused is not None and idx is None else 0
        if how:
            buf = state[f"momentum.{key}"] if momentum else p
            par = np.array([grad_scale if grad_scale is not None else 1.0, weight_decay, momentum, lr], dtype=p.dtype)
            flags = (grad_scale is not None, bool(weight_decay), bool(momentum), bool(nesterov))
            if how == 1:  # one row of contiguous memory
                fused.sgd_update(p.reshape(1, -1), g.reshape(1, -1), buf.reshape(1, -1), par, *flags)
            elif p.flags.f_contiguous:  # walk the parameter in its memory order
                fused.sgd_update(p.T, g.T, buf.T, par, *flags)
            else:
                fused.sgd_update(p, g, buf, par, *flags)
            flops += sgd_flops(p.size, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay)
            continue
        if grad_scale is not None:
            g = g * grad_scale  # as clip_grad_norm's ``g *= coef``, into a temporary
        # the arithmetic is written with few temporaries (large arrays are memory-bound); each value is
        # the same IEEE result as PyTorch's expression (a + b == b + a and a * b == b * a exactly)
        d, owned = g, False  # owned: d is a temporary of ours, free to overwrite
        if weight_decay:
            d, owned = p * weight_decay, True
            d += g  # g + weight_decay * p
            flops += 2 * d.size
        if momentum:
            buf_full = state[f"momentum.{key}"]
            buf = buf_full if idx is None else buf_full[idx]
            buf *= momentum
            buf += d  # momentum * buf + d
            if idx is not None:
                buf_full[idx] = buf
            if nesterov:
                nest = buf * momentum
                nest += d  # d + momentum * buf
                d, owned = nest, True
            else:
                d, owned = buf, False
            flops += (4 if nesterov else 2) * d.size
        if owned:
            d *= lr
        else:
            d = d * lr
        p -= d  # p - lr * d
        flops += 2 * d.size
        if idx is not None:
            params[key][idx] = p
    return flops


def sgd_flops(size: int, *, momentum: float = 0.0, nesterov: bool = False, weight_decay: float = 0.0) -> int:
    """FLOPs :func:`sgd_step` counts for ``size`` scalars (weight decay 2, momentum 2 or Nesterov 4, the
    update 2 per scalar)."""
    return (2 * bool(weight_decay) + (4 if nesterov else 2) * bool(momentum) + 2) * int(size)


def sgd_idle_steps(
    params: Mapping[str, np.ndarray],
    state: Params | None,
    steps: int,
    *,
    lr: float,
    momentum: float = 0.0,
    nesterov: bool = False,
    weight_decay: float = 0.0,
    kernel: str = "auto",
    closed_form: bool = False,
    source: Mapping[str, np.ndarray] | None = None,
    reached: Mapping[str, tuple] | None = None,
) -> int:
    """``steps`` SGD steps with a zero gradient on every array of ``params``, in place; returns their FLOPs.

    Exactly what ``steps`` calls of :func:`sgd_step` with all-zero gradients (same ``lr``, ``momentum``,
    ``nesterov``, ``weight_decay``, no ``grad_scale``) do to ``params`` and to their momentum buffers in
    ``state``, bit for bit except for the sign of a zero: weight decay shrinks the parameter and momentum
    carries the buffer on. ``state=None``: the momentum starts at zero (a fresh :func:`sgd_init`) and is
    not kept. This is the lazy half of a sparse update: a caller that knows which entries a run of steps
    leaves with a zero gradient updates the others step by step and these once. With numba
    (``kernel="auto"``) each row's ``steps`` steps are done while it is in cache, one pass over memory;
    otherwise, and with ``kernel="numpy"``, by ``steps`` NumPy passes. Nothing happens (0 FLOPs) when there
    is neither weight decay nor momentum: the parameter cannot move.

    ``reached``: ``{key: (idx, axis, values, momentum)}``, rows (``axis=0``) or columns (``axis=1``;
    2-D arrays) ``idx`` (sorted, distinct) of ``params[key]`` that the caller stepped itself: they take
    ``values`` (shaped as ``params[key][idx]`` or ``params[key][:, idx]``), and their momentum in ``state`` takes
    ``momentum`` (when ``state`` keeps one), instead of the zero-gradient steps. The same as the steps
    over everything followed by that scatter; in closed form with numba, one pass writing each entry
    once. The FLOPs returned are still those of the whole arrays' steps (the rule's count).

    ``closed_form``: the same steps as one linear map (:func:`idle_map`) applied per element in float64
    and rounded once, instead of step after step in the arrays' precision: one memory-bound pass,
    whatever ``steps`` is (a fifth of the time for 5 steps on a whole PersonalFR autoencoder), and
    results that differ from the step-by-step ones by float rounding only (each is within a few units
    in the last place of the exact value; the closed form is the closer). The FLOPs returned are the
    steps' either way. The numba kernel and the NumPy expressions give the same bits.

    ``source``: the parameters' values before the steps are read from these arrays (same keys, shapes
    and dtypes; read-only is fine) and ``params`` need only be allocated: the same results as copying
    ``source`` into ``params`` first, with the copy folded into the closed form's one pass.
    """
    if nesterov and momentum <= 0.0:
        raise ValueError("Nesterov momentum needs momentum > 0")
    steps = int(steps)
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    if source is not None:
        fold = bool(closed_form and steps and (weight_decay or momentum))  # the map reads source itself
        for key, p in params.items():
            src = source[key]
            if src.shape != p.shape or src.dtype != p.dtype:
                raise ValueError(f"source[{key!r}] is {src.dtype}{src.shape}, params[{key!r}] {p.dtype}{p.shape}")
            if not fold:
                np.copyto(p, src)  # then the steps, if any, in place
        if not fold:
            source = None
    reached = dict(reached or {})
    keep = state is not None and bool(momentum)
    if steps == 0 or (not weight_decay and not momentum):
        for key, (idx, axis, values, mom) in reached.items():
            _put(params[key], idx, axis, values)
            if keep:
                _put(state[f"momentum.{key}"], idx, axis, mom)
        return 0
    lr, momentum, weight_decay = float(lr), float(momentum), float(weight_decay)
    fused = _fused() if kernel == "auto" else None
    coef = idle_map(steps, lr=lr, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay) \
        if closed_form else None
    flops = 0
    for key, p in params.items():
        buf = state[f"momentum.{key}"] if keep else p
        flops += steps * sgd_flops(p.size, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay)
        reach = reached.pop(key, None)
        if coef is not None and reach is not None:
            if not _idle_linear_cut(p, buf, coef, keep, fused, p if source is None else source[key], reach):
                _idle_linear(p, buf, coef, keep, fused, p if source is None else source[key])
                reached[key] = reach  # scattered below
            continue
        if reach is not None:
            reached[key] = reach
        if coef is not None:
            _idle_linear(p, buf, coef, keep, fused, p if source is None else source[key])
            continue
        if fused is not None and _fusable(p, p, buf) and p.ndim <= 2:
            par = np.array([1.0, weight_decay, momentum, lr], dtype=p.dtype)
            if p.ndim < 2 or (p.flags.c_contiguous and buf.flags.c_contiguous):
                p2, b2 = p.reshape(1, -1), buf.reshape(1, -1)
            elif p.flags.f_contiguous:
                p2, b2 = p.T, buf.T
            else:
                p2, b2 = p, buf
            fused.sgd_idle(p2, b2, par, steps, bool(momentum), bool(nesterov), keep)
            continue
        if momentum and not keep:
            buf = np.zeros_like(p)
        for _ in range(steps):  # sgd_step's NumPy expressions with g = 0
            d = p * weight_decay
            if momentum:
                buf *= momentum
                buf += d
                if nesterov:
                    nest = buf * momentum
                    nest += d
                    d = nest
                else:
                    d = buf.copy()
            d *= lr
            p -= d
    for key, (idx, axis, values, mom) in reached.items():  # the scatter the fused pass did not do
        _put(params[key], idx, axis, values)
        if keep:
            _put(state[f"momentum.{key}"], idx, axis, mom)
    return flops


def _put(a: np.ndarray, idx: np.ndarray, axis: int, values: np.ndarray) -> None:
    if axis == 0:
        a[idx] = values
    else:
        a[:, idx] = values


def _idle_linear_cut(p, buf, coef, keep, fused, src, reach) -> bool:
    """``optim_kernels.sgd_idle_linear_cut`` on one array when it applies (compiled, C-ordered 1-D or
    2-D arrays of one dtype, columns only of 2-D ones); False to have the caller do the closed form
    and the scatter separately (the same values)."""
    idx, axis, values, mom = reach
    values = np.asarray(values)
    if fused is None or p.ndim > 2 or (axis == 1 and p.ndim != 2) or not p.flags.writeable:
        return False
    if any(a.dtype != p.dtype or not a.flags.c_contiguous for a in (p, buf, src)) or \
            p.dtype not in (np.float32, np.float64):
        return False
    if values.dtype != p.dtype or (keep and np.asarray(mom).dtype != p.dtype):
        return False  # (the values may have any strides: the kernel reads them by index)
    if keep and not buf.flags.writeable:
        return False
    idx = np.asarray(idx, dtype=np.int64)
    want = (p.shape[0], len(idx)) if axis == 1 else (len(idx),) + p.shape[1:]
    if values.shape != want or (keep and mom.shape != want):
        return False
    if len(idx) and (idx.min() < 0 or idx.max() >= p.shape[axis] or np.any(np.diff(idx) <= 0)):
        raise ValueError(f"reached indices must be sorted, distinct and within axis {axis} of size {p.shape[axis]}")

    def two(a):  # 1-D arrays as columns: their rows are the reached entries
        return a.reshape(-1, 1) if a.ndim == 1 else a

    fused.sgd_idle_linear_cut(two(src), two(p), two(buf), coef, keep, idx, axis == 1, two(values),
                              two(mom) if keep else two(values))
    return True


def idle_map(steps: int, *, lr: float, momentum: float = 0.0, nesterov: bool = False,
             weight_decay: float = 0.0) -> np.ndarray:
    """The coefficients ``[c, f, e, h]`` (float64) of ``steps`` zero-gradient SGD steps as a linear map:
    a parameter ``p`` with momentum ``buf`` becomes ``c p + f buf`` and its momentum ``e p + h buf``
    (:func:`sgd_step`'s rule with ``g = 0`` is linear in the pair). Each step is applied to the two
    coefficient pairs in float64: exact to about 1e-16 relative, far below a float32 ulp."""
    pc, pb = 1.0, 0.0  # p_k = pc p + pb buf
    bc, bb = 0.0, 1.0  # buf_k = bc p + bb buf
    for _ in range(int(steps)):
        dc, db = pc * weight_decay, pb * weight_decay
        if momentum:
            bc, bb = bc * momentum + dc, bb * momentum + db
            if nesterov:
                dc, db = bc * momentum + dc, bb * momentum + db
            else:
                dc, db = bc, bb
        pc, pb = pc - dc * lr, pb - db * lr
    return np.array([pc, pb, bc, bb], dtype=np.float64)


def _idle_linear(p: np.ndarray, buf: np.ndarray, coef: np.ndarray, keep: bool, fused, src: np.ndarray) -> None:
    """``optim_kernels.sgd_idle_linear`` on one array (read from ``src``, written to ``p``), compiled
    when it can be, else the same float64 arithmetic in NumPy (same bits: one product and one sum per
    value, rounded once)."""
    same_layout = src.flags.c_contiguous == p.flags.c_contiguous and src.flags.f_contiguous == p.flags.f_contiguous
    if fused is not None and _fusable(p, p, buf) and p.ndim <= 2 and same_layout and src.dtype == p.dtype:
        if p.ndim < 2 or (p.flags.c_contiguous and buf.flags.c_contiguous):
            s2, p2, b2 = src.reshape(1, -1), p.reshape(1, -1), buf.reshape(1, -1)
        elif p.flags.f_contiguous and buf.flags.f_contiguous:
            s2, p2, b2 = src.T, p.T, buf.T
        else:
            s2, p2, b2 = src, p, buf
        fused.sgd_idle_linear(s2, p2, b2, coef, keep)
        return
    c, f, e, h = (float(v) for v in coef)
    v = src.astype(np.float64)
    if keep:
        b = buf.astype(np.float64)
        p[...] = v * c + b * f
        buf[...] = v * e + b * h
    else:
        v *= c
        p[...] = v


def _fusable(p, g, buf) -> int:
    """How the fused loop can update ``p``: 1 (flat: C-contiguous arrays), 2 (2-D arrays of other
    layouts, element by element) or 0 (not: other dtypes or dimensions, read-only arrays)."""
    if buf is None:
        return 0
    dt = p.dtype
    if dt not in (np.float32, np.float64) or g.dtype != dt or buf.dtype != dt:
        return 0
    if not (p.flags.writeable and buf.flags.writeable and p.shape == g.shape == buf.shape):
        return 0
    if p.flags.c_contiguous and g.flags.c_contiguous and buf.flags.c_contiguous:
        return 1
    return 2 if p.ndim == 2 else 0


def _fused():
    from . import optim_kernels

    return optim_kernels.compiled()


# ---------------------------------------------------------------------------------------------------- Adam


def adam_init(params: Mapping[str, np.ndarray]) -> Params:
    """Zero first and second moments (``"m.<name>"``, ``"v.<name>"``) and a step counter (``"step"``)."""
    state: Params = {"step": np.zeros((), dtype=np.int64)}
    for k, v in params.items():
        state[f"m.{k}"] = np.zeros_like(v)
        state[f"v.{k}"] = np.zeros_like(v)
    return state


def adam_step(
    params: Params,
    grads: Mapping[str, np.ndarray],
    state: Params,
    *,
    lr: float = 1e-3,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    restrict: Mapping[str, Any] | None = None,
) -> int:
    """One Adam step in place; returns its FLOPs.

    ``g = g + weight_decay * p`` (L2, as ``torch.optim.Adam``); ``m = b1 m + (1 - b1) g``;
    ``v = b2 v + (1 - b2) g^2``; ``p = p - (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)`` with
    ``t`` the step number (counted once per call, also under ``restrict``).
    """
    b1, b2 = betas
    state["step"] = np.asarray(state["step"] + 1, dtype=np.int64)
    t = int(state["step"])
    bc1 = 1.0 - b1**t
    bc2_sqrt = math.sqrt(1.0 - b2**t)
    step_size = lr / bc1
    flops = 0
    for key in params:
        p, g, idx = _parts(params, grads, restrict, key)
        if weight_decay:
            wd_g = p * weight_decay
            wd_g += g  # g + weight_decay * p
            g = wd_g
            flops += 2 * g.size
        m_full, v_full = state[f"m.{key}"], state[f"v.{key}"]
        m = m_full if idx is None else m_full[idx]
        v = v_full if idx is None else v_full[idx]
        m *= b1
        tmp = g * (1.0 - b1)
        m += tmp  # b1 m + (1 - b1) g
        np.multiply(g, g, out=tmp)
        tmp *= 1.0 - b2
        v *= b2
        v += tmp  # b2 v + (1 - b2) g^2
        np.sqrt(v, out=tmp)
        tmp /= bc2_sqrt
        tmp += eps  # denominator
        np.divide(m, tmp, out=tmp)
        tmp *= step_size
        p -= tmp  # p - step_size * m / denom
        flops += 12 * g.size
        if idx is not None:
            m_full[idx] = m
            v_full[idx] = v
            params[key][idx] = p
    return flops


def adam_flops(size: int, *, weight_decay: float = 0.0) -> int:
    """FLOPs :func:`adam_step` counts for ``size`` scalars (weight decay 2, the moments and the update
    12 per scalar)."""
    return (2 * bool(weight_decay) + 12) * int(size)


# -------------------------------------------------------------------------------------- clipping, schedule


def grad_norm(grads: Mapping[str, np.ndarray], *, exact: bool = False) -> float:
    """Global L2 norm of all gradients together.

    ``exact``: sum the squares with ``math.fsum`` (correctly rounded, hence independent of order and of
    exact-zero terms: the norm of an active slice equals bit for bit the norm of the full gradient whose
    other rows are zero). Slow; for tests.

    Without ``exact`` each array's sum of squares is ``np.dot`` in the array's dtype. When that
    overflows although every element is finite (a float32 norm above about 1.8e19, a float64 one above
    about 1.3e154) the norm is recomputed from the elements scaled by a power of two (exact) in float64,
    so it is finite; it was inf, which made :func:`clip_coef`'s factor 0 and the clipped step a no-op.
    Any result that does not overflow is unchanged (same bits). A NaN or infinite element gives NaN
    or inf, as before.
    """
    with np.errstate(over="ignore"):  # an overflow is caught below
        if exact:
            total = math.fsum(math.fsum(np.square(g.astype(np.float64)).ravel().tolist()) for g in grads.values())
        else:
            total = 0.0
            for g in grads.values():
                flat = g.ravel()
                total += float(np.dot(flat, flat))
    if math.isinf(total):
        return _scaled_norm(grads, exact)
    return math.sqrt(total)


def _scaled_norm(grads: Mapping[str, np.ndarray], exact: bool) -> float:
    """:func:`grad_norm` when its sum of squares overflowed: inf or NaN when an element is (what the
    sum gave), else ``2^e * sqrt(sum((x / 2^e)^2))`` in float64 with ``2^e`` the largest element's
    binary exponent (the scaling is exact, the largest scaled square below 1)."""
    peak = 0.0
    for g in grads.values():
        if g.size:
            a = np.abs(g.astype(np.float64, copy=False))
            top = float(a.max())  # NaN when any element is NaN
            if not math.isfinite(top):
                return top
            peak = max(peak, top)
    e = math.frexp(peak)[1]
    parts = [np.square(np.ldexp(g.astype(np.float64), -e)).ravel() for g in grads.values()]
    if exact:
        total = math.fsum(math.fsum(p.tolist()) for p in parts)
    else:
        total = math.fsum(float(np.sum(p)) for p in parts)
    return math.ldexp(math.sqrt(total), e)


def clip_grad_norm(
    grads: Params, max_norm: float, *, exact: bool = False
) -> tuple[float, int]:
    """Scale all gradients in place so that their global L2 norm is at most ``max_norm``.

    PyTorch's rule: ``coef = max_norm / (norm + 1e-6)``, applied when below 1. Returns
    ``(norm before clipping, FLOPs)``.
    """
    norm, coef, flops = clip_coef(grads, max_norm, exact=exact)
    if coef is not None:
        for g in grads.values():
            g *= coef
    return norm, flops


def clip_coef(grads: Mapping[str, np.ndarray], max_norm: float, *, exact: bool = False) -> tuple[float, float | None, int]:
    """What :func:`clip_grad_norm` would do, without doing it: ``(norm, coef, FLOPs)`` where ``coef`` is the
    factor to scale the gradients by (``None`` when no clipping is needed). Pass ``coef`` as
    ``sgd_step(..., grad_scale=coef)`` to clip inside the step; the FLOPs count the scaling."""
    norm = grad_norm(grads, exact=exact)
    size = sum(g.size for g in grads.values())
    flops = 2 * size
    coef = max_norm / (norm + 1e-6)
    if coef < 1.0:
        return norm, coef, flops + size
    return norm, None, flops


def cosine_lr(base_lr: float, t: int, t_max: int, min_lr: float = 0.0) -> float:
    """Cosine annealing (closed form of ``CosineAnnealingLR``): the learning rate of step ``t`` (0-based,
    e.g. the communication round) out of ``t_max``: ``min_lr + (base_lr - min_lr)(1 + cos(pi t / t_max)) / 2``."""
    if t_max <= 0:
        raise ValueError("t_max must be positive")
    return min_lr + (base_lr - min_lr) * (1.0 + math.cos(math.pi * t / t_max)) / 2.0
