"""PersonalFR's user-based autoencoder in NumPy: parameters, forward pass, hand-written backward pass.

Model (paper Table II, authors' code): encoder ``[n_in, 256, 128]`` and decoder ``[128, 256, n_out]``,
every encoder layer followed by ``tanh``, inverted dropout on the code (the encoder's output; 0.5 in the
authors' code, off by default here), every decoder layer but the last followed by ``tanh``, linear output.
Weights Xavier-uniform, biases zero.

Parameters are a flat ``dict`` of named arrays. Names are ``enc.W1, enc.b1, enc.W2, enc.b2, ...`` for the
encoder and ``dec.W1, dec.b1, ..., dec.WL, dec.bL`` for the decoder (layers numbered from 1 in the order
data flows through them), so :func:`encoder_of` and :func:`decoder_of` split a model into two separable
dicts and :func:`join` puts them back. Weights are stored ``(out, in)`` as in the paper's Eq. 2
(``x_hat = W_p H + B_p``, ``W_p`` of shape ``n x q``): row ``i`` of the output weight ``dec.WL`` and entry ``i``
of ``dec.bL`` belong to item ``i``; column ``i`` of ``enc.W1`` is the input weight of item ``i``.

The functions never look at item identities: the model's input width is ``enc.W1.shape[1]`` and its output
width ``dec.WL.shape[0]``. A client that holds only the rows of its active items (``fedsim.math.active``) runs
the very same functions on the smaller arrays. Inside one call, ``out_rows`` / ``in_cols`` further restrict the
output-layer rows / input columns actually computed (rows or columns outside get an exactly zero gradient, so
the result is the gradient of the masked loss, computed with fewer operations).

No state, no time, no messages: randomness only from a ``numpy.random.Generator`` passed in. Every training
call returns the number of floating-point operations it executed (``flops``) for the kernel's ``compute``.

FLOP convention: a matrix product ``(B, K) @ (K, N)`` costs ``2 B K N``; an elementwise operation costs 1 per
element and per operation (``tanh``, ``exp`` and ``log1p`` count 1); gathers, scatters and zero fills cost 0.
"""

from __future__ import annotations

from typing import Mapping, NamedTuple

import numpy as np

from .blas import with_one_blas_thread

__all__ = [
    "DEFAULT_HIDDEN",
    "mean_params",
    "ENCODER_PREFIX",
    "DECODER_PREFIX",
    "StepResult",
    "init_params",
    "encoder_of",
    "decoder_of",
    "join",
    "copy_params",
    "n_layers",
    "output_keys",
    "input_key",
    "layer_sizes",
    "param_count",
    "predict",
    "loss_and_grads",
    "masked_loss",
    "train_flops",
    "predict_flops",
    "sigmoid",
]

DEFAULT_HIDDEN: tuple[int, ...] = (256, 128)
ENCODER_PREFIX = "enc."
DECODER_PREFIX = "dec."
LOSSES = ("mse", "bce")

Params = dict[str, np.ndarray]


class StepResult(NamedTuple):
    """What :func:`loss_and_grads` returns."""

    loss: float  # masked loss of the batch (mean over rated entries, or their sum)
    grads: Params  # same keys and shapes as the params passed in
    flops: int  # floating-point operations of the forward and backward passes executed
    n_rated: int  # number of rated (target) entries in the batch


# --------------------------------------------------------------------------------------------- parameters


def _xavier_uniform(rng: np.random.Generator, fan_out: int, fan_in: int, dtype) -> np.ndarray:
    bound = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-bound, bound, size=(fan_out, fan_in)).astype(dtype)


def init_params(
    n_items: int,
    rng: np.random.Generator,
    hidden: tuple[int, ...] | list[int] = DEFAULT_HIDDEN,
    decoder_hidden: tuple[int, ...] | list[int] | None = None,
    dtype=np.float32,
    n_out: int | None = None,
) -> Params:
    """A fresh autoencoder: encoder ``[n_items, *hidden]``, decoder ``[*decoder_hidden, n_out]``.

    ``decoder_hidden`` defaults to ``hidden`` reversed (``[128, 256]`` for the default), ``n_out`` to
    ``n_items``. Weights Xavier-uniform (``U(-a, a)``, ``a = sqrt(6 / (fan_in + fan_out))``) drawn from
    ``rng`` in layer order (encoder first), biases zero. ``dtype`` float32 (default) or float64.
    """
    hidden = tuple(int(h) for h in hidden)
    if not hidden:
        raise ValueError("hidden must name at least one layer size")
    dec_hidden = tuple(reversed(hidden)) if decoder_hidden is None else tuple(int(h) for h in decoder_hidden)
    if not dec_hidden or dec_hidden[0] != hidden[-1]:
        raise ValueError(f"decoder_hidden must start with the code size {hidden[-1]}, got {dec_hidden}")
    n_out = int(n_items if n_out is None else n_out)
    params: Params = {}
    enc_sizes = (int(n_items),) + hidden
    for layer, (fan_in, fan_out) in enumerate(zip(enc_sizes[:-1], enc_sizes[1:]), start=1):
        params[f"enc.W{layer}"] = _xavier_uniform(rng, fan_out, fan_in, dtype)
        params[f"enc.b{layer}"] = np.zeros(fan_out, dtype=dtype)
    dec_sizes = dec_hidden + (n_out,)
    for layer, (fan_in, fan_out) in enumerate(zip(dec_sizes[:-1], dec_sizes[1:]), start=1):
        params[f"dec.W{layer}"] = _xavier_uniform(rng, fan_out, fan_in, dtype)
        params[f"dec.b{layer}"] = np.zeros(fan_out, dtype=dtype)
    return params


def encoder_of(params: Mapping[str, np.ndarray]) -> Params:
    """The encoder's entries of ``params`` (same arrays, not copies)."""
    return {k: v for k, v in params.items() if k.startswith(ENCODER_PREFIX)}


def decoder_of(params: Mapping[str, np.ndarray]) -> Params:
    """The decoder's entries of ``params`` (same arrays, not copies)."""
    return {k: v for k, v in params.items() if k.startswith(DECODER_PREFIX)}


def join(*parts: Mapping[str, np.ndarray]) -> Params:
    """One parameter dict from an encoder dict and a decoder dict (same arrays, not copies)."""
    out: Params = {}
    for part in parts:
        for k, v in part.items():
            if k in out:
                raise ValueError(f"parameter {k!r} given twice")
            out[k] = v
    return out


def copy_params(params: Mapping[str, np.ndarray]) -> Params:
    """A deep copy (fresh arrays)."""
    return {k: np.array(v, copy=True) for k, v in params.items()}


def n_layers(params: Mapping[str, np.ndarray], prefix: str) -> int:
    """Number of linear layers under ``prefix`` (``"enc."`` or ``"dec."``)."""
    n = 0
    while f"{prefix}W{n + 1}" in params:
        n += 1
    return n


def output_keys(params: Mapping[str, np.ndarray]) -> tuple[str, str]:
    """Names of the output layer's weight and bias (``("dec.W2", "dec.b2")`` for the default model)."""
    last = n_layers(params, DECODER_PREFIX)
    if last == 0:
        raise ValueError("params hold no decoder layer")
    return f"dec.W{last}", f"dec.b{last}"


def input_key(params: Mapping[str, np.ndarray]) -> str:
    """Name of the first encoder weight (``"enc.W1"``), whose columns are the items' input weights."""
    if "enc.W1" not in params:
        raise ValueError("params hold no encoder layer")
    return "enc.W1"


def layer_sizes(params: Mapping[str, np.ndarray]) -> tuple[list[int], list[int]]:
    """``([n_in, *hidden], [*decoder_hidden, n_out])`` read from the array shapes."""
    enc = [params["enc.W1"].shape[1]] + [
        params[f"enc.W{l}"].shape[0] for l in range(1, n_layers(params, ENCODER_PREFIX) + 1)
    ]
    dec = [params["dec.W1"].shape[1]] + [
        params[f"dec.W{l}"].shape[0] for l in range(1, n_layers(params, DECODER_PREFIX) + 1)
    ]
    return enc, dec


def param_count(params: Mapping[str, np.ndarray]) -> int:
    """Total number of scalars."""
    return int(sum(v.size for v in params.values()))


# ------------------------------------------------------------------------------------------ linear algebra


def _mm(a: np.ndarray, b: np.ndarray, sequential: bool) -> np.ndarray:
    """``a @ b``. With ``sequential`` every output element is accumulated term by term in index order
    (one rounding per product and per addition, no reassociation). Adding a term that is exactly zero then
    leaves the sum bit-for-bit unchanged, so the result does not depend on which zero terms the product
    includes: this is what makes active-row and masked full training bit-identical (tests only; slow)."""
    if not sequential:
        return a @ b
    out = np.zeros((a.shape[0], b.shape[1]), dtype=np.result_type(a, b))
    for k in range(a.shape[1]):
        out += np.multiply.outer(a[:, k], b[k, :])
    return out


def _linear(a: np.ndarray, W: np.ndarray, b: np.ndarray, sequential: bool) -> np.ndarray:
    """``a @ W.T + b``. For small batches ``(W @ a.T).T`` is the same product and about twice as fast with
    OpenBLAS (measured for batch 10 and width 1682; no difference from batch ~500 on)."""
    if sequential:
        return _mm(a, W.T, True) + b
    if a.shape[0] < 64:
        return (W @ a.T).T + b
    return a @ W.T + b


def _resolve_index(spec, ref: np.ndarray, name: str, width: int, mode: str | None) -> np.ndarray | None:
    """``None`` (all), the mode string ``mode`` (``"rated"``: columns of ``ref`` with a true entry;
    ``"nonzero"``: columns with a non-zero entry), or explicit strictly increasing indices."""
    if spec is None:
        return None
    if isinstance(spec, str):
        if spec != mode:
            raise ValueError(f"{name} must be None, strictly increasing indices" + (f" or {mode!r}" if mode else ""))
        ref = np.asarray(ref)
        return np.flatnonzero(ref.any(axis=0) if mode == "rated" else (ref != 0).any(axis=0))
    idx = np.asarray(spec, dtype=np.int64).ravel()
    if idx.size and (idx[0] < 0 or idx[-1] >= width or np.any(np.diff(idx) <= 0)):
        raise ValueError(f"{name} must be strictly increasing indices in [0, {width})")
    return idx


# -------------------------------------------------------------------------------------------- the model


def _forward(params, x, in_cols, out_rows, dropout, rng, sequential):
    """Forward pass. Returns the output, the input of every linear layer (data order), the weight each
    layer actually used (after the ``in_cols`` / ``out_rows`` gathers), the post-``tanh`` outputs of the
    hidden layers (data order; the code before dropout for the last encoder layer) and the dropout scale."""
    dtype = params["enc.W1"].dtype
    n_enc = n_layers(params, ENCODER_PREFIX)
    n_dec = n_layers(params, DECODER_PREFIX)
    a = np.asarray(x, dtype=dtype)
    if in_cols is not None:
        a = a[:, in_cols]
    inputs: list[np.ndarray] = []
    weights: list[np.ndarray] = []
    hidden: list[np.ndarray] = []
    keep = None
    for pre, count in (("enc", n_enc), ("dec", n_dec)):
        for l in range(1, count + 1):
            W, b = params[f"{pre}.W{l}"], params[f"{pre}.b{l}"]
            if pre == "enc" and l == 1 and in_cols is not None:
                W = W[:, in_cols]
            last = pre == "dec" and l == n_dec
            if last and out_rows is not None:
                W, b = W[out_rows], b[out_rows]
            inputs.append(a)
            weights.append(W)
            a = _linear(a, W, b, sequential)
            if not last:
                a = np.tanh(a)
                hidden.append(a)
        if pre == "enc" and dropout > 0.0:
            if rng is None:
                raise ValueError("dropout > 0 needs a numpy.random.Generator (rng)")
            keep = ((rng.random(a.shape) >= dropout) * (1.0 / (1.0 - dropout))).astype(dtype)
            a = a * keep
    return a, inputs, weights, hidden, keep


@with_one_blas_thread  # (the products' last bits would depend on the BLAS thread count: .blas)
def predict(
    params: Mapping[str, np.ndarray],
    x: np.ndarray,
    *,
    in_cols=None,
    out_rows=None,
) -> np.ndarray:
    """Model output for a batch of user rows ``x`` (evaluation mode: no dropout).

    Ratings for the squared-error model, logits for the cross-entropy model (apply :func:`sigmoid` for
    probabilities; ranking needs only the logits). ``in_cols``: ``None``, ``"nonzero"`` or indices of the
    input columns to read (others must be zero in ``x`` for the result to be the full model's).
    ``out_rows``: ``None`` or strictly increasing indices of the output rows to compute; the result then
    has ``len(out_rows)`` columns.
    """
    x = np.asarray(x)
    n_in = params["enc.W1"].shape[1]
    n_out = params[output_keys(params)[0]].shape[0]
    if x.ndim != 2 or x.shape[1] != n_in:
        raise ValueError(f"x must have shape (batch, {n_in}), got {x.shape}")
    cols = _resolve_index(in_cols, x, "in_cols", n_in, "nonzero")
    rows = _resolve_index(out_rows, None, "out_rows", n_out, None)
    return _forward(params, x, cols, rows, 0.0, None, False)[0]


def sigmoid(z: np.ndarray) -> np.ndarray:
    """Numerically stable logistic function."""
    z = np.asarray(z)
    return _sigmoid(z, np.exp(-np.abs(z)))


def _sigmoid(z: np.ndarray, e: np.ndarray) -> np.ndarray:
    """:func:`sigmoid` of ``z`` given ``e = exp(-|z|)``."""
    return np.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e)).astype(z.dtype, copy=False)


def _scatter_rows(like: np.ndarray, rows: np.ndarray, values: np.ndarray) -> np.ndarray:
    full = np.zeros_like(like)
    full[rows] = values
    return full


def _loss_and_dz(z, y, m, mask_b, loss, reduction, count):
    """Masked loss (float64) and its gradient w.r.t. the output ``z`` (zero off the mask)."""
    scale = 0.0 if count == 0 else (1.0 / count if reduction == "mean" else 1.0)
    if loss == "mse":
        diff = (z - y) * m
        value = float(np.sum(np.square(diff[mask_b]), dtype=np.float64))
        dz = diff * np.asarray(2.0 * scale, dtype=z.dtype)
    else:  # "bce": binary cross-entropy on logits, y in {0, 1}
        # log(1 + exp(z)) - y z, stably: max(z, 0) - y z + log1p(exp(-|z|))
        e = np.exp(-np.abs(z))  # (shared by the loss and the sigmoid of its gradient)
        ell = np.maximum(z, 0) - y * z + np.log1p(e)
        value = float(np.sum(ell[mask_b], dtype=np.float64))
        dz = (_sigmoid(z, e) - y) * m * np.asarray(scale, dtype=z.dtype)
    return value * scale if count else 0.0, dz


_LOSS_FLOPS = {"mse": (4, 1), "bce": (8, 6)}  # (forward, backward) elementwise ops per computed entry


def train_flops(
    enc_sizes: list[int] | tuple[int, ...],
    dec_sizes: list[int] | tuple[int, ...],
    batch: int,
    *,
    loss: str = "mse",
    dropout: float = 0.0,
) -> int:
    """FLOPs of one :func:`loss_and_grads` call for a batch of ``batch`` users.

    ``enc_sizes = [n_in_computed, *hidden]``, ``dec_sizes = [*decoder_hidden, n_out_computed]``: the input
    width and output width actually computed (after ``in_cols`` / ``out_rows``). Per linear layer
    ``(in, out)``: forward ``2 B in out + B out``, weight gradient ``2 B in out``, bias gradient ``B out``,
    input gradient ``2 B in out`` except for the first layer (the data needs none); ``tanh`` 1 forward and
    3 backward per unit; dropout 1 + 1 per code unit; the loss 4 + 1 (squared error) or 8 + 6
    (cross-entropy) per output entry computed.
    """
    B = int(batch)
    sizes = list(enc_sizes) + list(dec_sizes[1:])
    n_lin = len(sizes) - 1
    n_enc = len(enc_sizes) - 1
    total = 0
    for l, (i, o) in enumerate(zip(sizes[:-1], sizes[1:])):
        total += 2 * B * i * o + B * o  # forward
        total += 2 * B * i * o + B * o  # dW, db
        if l > 0:
            total += 2 * B * i * o  # d input
        if l < n_lin - 1:
            total += 4 * B * o  # tanh forward + backward
    if dropout > 0.0:
        total += 2 * B * sizes[n_enc]
    fwd, bwd = _LOSS_FLOPS[loss]
    total += (fwd + bwd) * B * sizes[-1]
    return int(total)


def predict_flops(enc_sizes, dec_sizes, batch: int) -> int:
    """FLOPs of one :func:`predict` call (forward only, same conventions as :func:`train_flops`)."""
    B = int(batch)
    sizes = list(enc_sizes) + list(dec_sizes[1:])
    n_lin = len(sizes) - 1
    total = 0
    for l, (i, o) in enumerate(zip(sizes[:-1], sizes[1:])):
        total += 2 * B * i * o + B * o + (B * o if l < n_lin - 1 else 0)
    return int(total)


def masked_loss(
    params: Mapping[str, np.ndarray], x, target, mask, *, loss: str = "mse", reduction: str = "mean"
) -> float:
    """The masked loss (Eq. 1) of a batch in evaluation mode (no dropout), as a float."""
    z = predict(params, x)
    mask_b = np.asarray(mask).astype(bool, copy=False)
    count = int(np.count_nonzero(mask_b))
    y = np.asarray(target, dtype=z.dtype)
    value, _ = _loss_and_dz(z, y, mask_b.astype(z.dtype), mask_b, loss, reduction, count)
    return value


@with_one_blas_thread
def loss_and_grads(
    params: Mapping[str, np.ndarray],
    x: np.ndarray,
    target: np.ndarray,
    mask: np.ndarray,
    *,
    loss: str = "mse",
    reduction: str = "mean",
    dropout: float = 0.0,
    rng: np.random.Generator | None = None,
    out_rows=None,
    in_cols=None,
    sequential_sums: bool = False,
) -> StepResult:
    """Masked loss of a batch of users and its gradient with respect to every parameter.

    ``x``: ``(B, n_in)`` input rows (the users' training ratings, zero where unrated). ``target`` and
    ``mask``: ``(B, n_out)``; the loss (Eq. 1) runs over the entries where ``mask`` is true only: squared
    error ``(z - y)^2`` for ``loss="mse"`` (explicit ratings), binary cross-entropy on logits for
    ``loss="bce"`` (implicit feedback, ``y`` in {0, 1}). ``reduction="mean"`` divides by the number of rated
    entries in the batch (``F.mse_loss`` on the masked entries, as in the authors' code), ``"sum"`` does not.

    ``dropout``: rate of inverted dropout on the code (needs ``rng``); 0 disables it.

    ``out_rows``: ``None`` (compute every output row held in ``params``), ``"rated"`` (only the rows with at
    least one rated entry in this batch) or explicit row indices (every rated entry must lie in them).
    ``in_cols``: ``None``, ``"nonzero"`` (the input columns with a non-zero entry in this batch) or explicit
    column indices (``x`` must be zero elsewhere). Rows/columns left out are not computed and get an exactly
    zero gradient: the gradients are those of the full model, with fewer operations.

    ``sequential_sums``: accumulate every matrix product term by term in index order (slow; see ``_mm``).

    Returns ``StepResult(loss, grads, flops, n_rated)``; ``grads`` has the keys and shapes of ``params``.
    """
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}")
    w_out, b_out = output_keys(params)
    dtype = params["enc.W1"].dtype
    n_in = params["enc.W1"].shape[1]
    n_out = params[w_out].shape[0]
    x = np.asarray(x)
    mask = np.asarray(mask)
    if x.ndim != 2 or x.shape[1] != n_in:
        raise ValueError(f"x must have shape (batch, {n_in}), got {x.shape}")
    B = x.shape[0]
    if mask.shape != (B, n_out) or np.shape(target) != (B, n_out):
        raise ValueError(f"target and mask must have shape ({B}, {n_out})")
    mask_b = mask.astype(bool, copy=False)
    count = int(np.count_nonzero(mask_b))
    cols = _resolve_index(in_cols, x, "in_cols", n_in, "nonzero")
    rows = _resolve_index(out_rows, mask_b, "out_rows", n_out, "rated")
    y = np.asarray(target, dtype=dtype)
    if rows is not None:
        m_sub = mask_b[:, rows]
        if int(np.count_nonzero(m_sub)) != count:
            raise ValueError("out_rows leaves out rated entries")
        y, mask_b = y[:, rows], m_sub
    m = mask_b.astype(dtype)

    z, inputs, weights, hidden, keep = _forward(params, x, cols, rows, dropout, rng, sequential_sums)
    value, dz = _loss_and_dz(z, y, m, mask_b, loss, reduction, count)

    n_enc = n_layers(params, ENCODER_PREFIX)
    names = [f"enc.{{}}{l}" for l in range(1, n_enc + 1)]
    names += [f"dec.{{}}{l}" for l in range(1, n_layers(params, DECODER_PREFIX) + 1)]
    last = len(names) - 1
    grads: Params = {}
    grad = dz  # gradient w.r.t. the pre-activation of the current layer
    for k in range(last, -1, -1):
        g_w = _mm(grad.T, inputs[k], sequential_sums)
        g_b = grad.sum(axis=0)
        if k == last and rows is not None:  # scatter the computed rows; the others are exactly zero
            g_w, g_b = _scatter_rows(params[w_out], rows, g_w), _scatter_rows(params[b_out], rows, g_b)
        if k == 0 and cols is not None:
            full = np.zeros_like(params["enc.W1"])
            full[:, cols] = g_w
            g_w = full
        grads[names[k].format("W")] = g_w
        grads[names[k].format("b")] = g_b
        if k == 0:
            break  # the data needs no gradient
        grad = _mm(grad, weights[k], sequential_sums)  # w.r.t. the output of layer k - 1
        if k == n_enc and keep is not None:  # back through the dropout on the code
            grad = grad * keep
        out = hidden[k - 1]
        grad = grad * (1 - out * out)  # back through tanh
    grads = {k: grads[k] for k in params}  # the params' key order

    enc_sizes, dec_sizes = layer_sizes(params)
    if cols is not None:
        enc_sizes[0] = len(cols)
    if rows is not None:
        dec_sizes[-1] = len(rows)
    flops = train_flops(enc_sizes, dec_sizes, B, loss=loss, dropout=dropout)
    return StepResult(value, grads, flops, count)


def mean_params(models, like: dict) -> dict:
    """Equal-weight mean of whole parameter dicts (the keys and dtypes of ``like``), accumulated in
    float64 in the given order (FedAvg's merge). With numba, four models at a time are added in
    one pass (``active_kernels.add_each``: the same adds in the same order, the same bits).
    Raises ``ValueError`` for no model (the mean was NaN) or an array whose shape is not
    ``like``'s (NumPy broadcast it into the sum)."""
    from . import active_kernels

    if len(models) == 0:
        raise ValueError("mean_params: no model to average")
    kern = active_kernels.compiled()
    # a diverging model overflows in these sums: silent, as the compiled ones are (the servers
    # check the mean once per round)
    with np.errstate(over="ignore", invalid="ignore"):
        out = {}
        for key, ref in like.items():
            acc = np.zeros(ref.shape, dtype=np.float64)
            arrays = [p[key] for p in models]
            for k, a in enumerate(arrays):
                if np.shape(a) != ref.shape:
                    raise ValueError(f"mean_params: model {k}'s {key!r} has shape {np.shape(a)}, expected {ref.shape}")
            if kern is not None and all(a.shape == ref.shape and a.dtype in (np.float32, np.float64)
                                        and a.flags.c_contiguous for a in arrays):
                flat = acc.reshape(-1)
                for i in range(0, len(arrays), 4):
                    group = [a.reshape(-1) for a in arrays[i:i + 4]]
                    n = len(group)
                    group += [group[0]] * (4 - n)
                    if len({g.dtype for g in group}) > 1:  # (mixed dtypes: one compiled signature each)
                        for g in group[:n]:
                            flat += g
                        continue
                    kern.add_each(flat, *group, n)
            else:
                for a in arrays:
                    acc += a
            out[key] = (acc / len(models)).astype(ref.dtype)
    return out
