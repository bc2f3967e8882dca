"""The SGD update of ``fedsim.math.optim.sgd_step`` as one fused loop: one source, run compiled by
numba (or as plain Python in tests).

``optim.sgd_step`` writes PyTorch's rule with NumPy expressions, each of which is a full pass over
the parameter (about twenty array reads and writes per element for SGD with weight decay and
Nesterov momentum). On the autoencoders of PersonalFR and FedAvg (about 900,000 parameters, a
step per local batch) those passes were a third of a run. :func:`sgd_update` performs the same
operations on each element, in the same order and precision, in a single pass: it reads ``p``,
``g`` and the momentum buffer once and writes ``p`` and the buffer once.

Bit-identity with the NumPy expressions: every scalar is of the arrays' dtype (``par`` is built by
the caller with the array dtype, so a float32 run stays float32 as NumPy's weak Python scalars do),
each operation is rounded on its own (no fast-math, hence no fused multiply-add or re-association),
and the operations are those of ``sgd_step`` in its order (tested in ``tests/test_math_optim_fused.py``).
"""

from __future__ import annotations

import sys

import numpy as np

__all__ = ["P_SCALE", "P_WD", "P_MOMENTUM", "P_LR", "sgd_update", "sgd_idle", "sgd_idle_linear", "sgd_idle_linear_cut",
           "compiled", "python"]

# indices into ``par`` (an array of the parameters' dtype)
P_SCALE = 0  # the gradient is multiplied by this first (gradient clipping's coefficient)
P_WD = 1  # weight decay
P_MOMENTUM = 2
P_LR = 3


def sgd_update(p, g, buf, par, scale, decay, momentum, nesterov):
    """One SGD step over 2-D arrays ``p`` (updated), ``g`` (read) and ``buf`` (the momentum buffer,
    updated when ``momentum``) of one shape and any strides (pass ``x.reshape(1, -1)`` for flat
    contiguous data; a cut encoder's columns are column-major while its gradient is row-major), with
    the switches ``scale``, ``decay``, ``momentum`` and ``nesterov`` (0 or 1) and the values in ``par``.
    Per element: ``g' = g * s`` (``scale``), ``d = p * wd + g'`` (``decay``; else ``d = g'``),
    ``buf = buf * mu + d`` and ``d = buf * mu + d`` (``nesterov``) or ``d = buf`` (``momentum``), then
    ``p = p - d * lr``; row by row, each row in order."""
    s = par[P_SCALE]
    wd = par[P_WD]
    mu = par[P_MOMENTUM]
    lr = par[P_LR]
    for r in range(p.shape[0]):
        for i in range(p.shape[1]):
            gi = g[r, i]
            if scale:
                gi = gi * s
            d = gi
            if decay:
                d = p[r, i] * wd
                d = d + gi
            p[r, i], b = _descend(p[r, i], d, buf[r, i], mu, lr, momentum, nesterov)
            if momentum:
                buf[r, i] = b


def _descend(v, d, b, mu, lr, momentum, nesterov):
    """The rest of the rule for one element once ``d`` (gradient plus weight decay) is known:
    with ``momentum`` ``b = b * mu + d`` and ``d = b * mu + d`` (``nesterov``) or ``d = b``; then
    ``v - d * lr``. Returns the new value and momentum (``b`` unchanged without momentum)."""
    if momentum:
        b = b * mu
        b = b + d
        if nesterov:
            n = b * mu
            d = n + d
        else:
            d = b
    d = d * lr
    return v - d, b


def sgd_idle(p, buf, par, steps, momentum, nesterov, keep):
    """``steps`` SGD steps with a zero gradient over 2-D arrays ``p`` and ``buf`` (any strides): the
    weight decay and momentum that :func:`sgd_update` applies, step after step, to an element whose
    gradient is zero (``d = p * wd``, which is ``p * wd + 0`` except for the sign of a zero).
    Elements are independent, so doing a row's ``steps`` steps before the next row's gives what
    ``steps`` calls of :func:`sgd_update` would, in one pass over memory (a row stays in cache
    between its steps, and each step over a row is a loop the compiler can vectorise). Without
    ``keep`` the momentum starts at zero and is not stored (``buf`` is not read or written; pass
    any array of ``p``'s dtype): a buffer that would be thrown away costs no memory traffic."""
    wd = par[P_WD]
    mu = par[P_MOMENTUM]
    lr = par[P_LR]
    row = np.zeros(p.shape[1], dtype=p.dtype)  # the row's momentum, in cache across its steps
    for r in range(p.shape[0]):
        if keep:
            for i in range(p.shape[1]):
                row[i] = buf[r, i]
        else:
            row[:] = 0
        for _ in range(steps):
            for i in range(p.shape[1]):
                v = p[r, i]
                p[r, i], row[i] = _descend(v, v * wd, row[i], mu, lr, momentum, nesterov)
        if keep:
            for i in range(p.shape[1]):
                buf[r, i] = row[i]


def sgd_idle_linear(src, p, buf, coef, keep):
    """The closed form of :func:`sgd_idle`: ``steps`` zero-gradient steps are a linear map of
    (parameter, momentum), whose coefficients ``coef = [c, f, e, h]`` (float64, from
    ``optim.idle_map``) give ``p' = c p + f buf`` and ``buf' = e p + h buf``, the parameter read
    from ``src`` and written to ``p`` (the same array for an update in place; another one folds a
    copy into the pass). Computed per element in float64 and rounded once to the arrays' dtype;
    without ``keep`` the momentum is zero and not stored (``p' = c p``; ``buf`` is not read or
    written). Elementwise and memory-bound: one read and one write of ``p`` (and of ``buf`` with
    ``keep``), whatever the number of steps."""
    for r in range(p.shape[0]):
        _idle_linear_row(src, p, buf, coef, keep, r)


def _idle_linear_row(src, p, buf, coef, keep, r):
    """Row ``r`` of :func:`sgd_idle_linear` (one loop the compiler vectorises)."""
    c = coef[0]
    f = coef[1]
    e = coef[2]
    h = coef[3]
    if keep:
        for i in range(p.shape[1]):
            v = np.float64(src[r, i])
            b = np.float64(buf[r, i])
            p[r, i] = v * c + b * f
            buf[r, i] = v * e + b * h
    else:
        for i in range(p.shape[1]):
            p[r, i] = np.float64(src[r, i]) * c


def sgd_idle_linear_cut(src, p, buf, coef, keep, idx, by_column, sub_p, sub_buf):
    """:func:`sgd_idle_linear` on the entries of 2-D ``p`` outside the rows ``idx`` (or, with
    ``by_column``, the columns ``idx``; sorted, distinct), which instead take the values the caller
    computed for them: ``p[idx[t]] = sub_p[t]`` (``p[:, idx[t]] = sub_p[:, t]`` by column), and with
    ``keep`` the same from ``sub_buf`` into ``buf``. Gives what the closed form over all of ``p``
    followed by that scatter gives, in one pass that writes each entry once (a FedAvg client's
    trained rows and columns are put back while the untouched rest gets its steps; a row's reached
    columns are written after its closed form, the row still in cache)."""
    n = idx.shape[0]
    t = 0  # the next reached row (or column) in idx
    for r in range(p.shape[0]):
        if not by_column:
            if t < n and idx[t] == r:
                for i in range(p.shape[1]):
                    p[r, i] = sub_p[t, i]
                if keep:
                    for i in range(p.shape[1]):
                        buf[r, i] = sub_buf[t, i]
                t += 1
                continue
            _idle_linear_row(src, p, buf, coef, keep, r)
            continue
        # the whole row's closed form, then the reached columns overwritten while it is in cache
        _idle_linear_row(src, p, buf, coef, keep, r)
        for u in range(n):
            p[r, idx[u]] = sub_p[r, u]
            if keep:
                buf[r, idx[u]] = sub_buf[r, u]


_KERNELS = ("_descend", "sgd_update", "sgd_idle", "sgd_idle_linear", "_idle_linear_row", "sgd_idle_linear_cut")


def compiled():
    """The numba-compiled kernels, or None when numba cannot be used (callers then run their
    NumPy expressions)."""
    from .jit import compiled_copy

    got = compiled_copy(__name__, __file__, _KERNELS)
    return None if isinstance(got, str) else got


def python():
    """This module: the kernels as plain Python (slow; for tests)."""
    return sys.modules[__name__]
