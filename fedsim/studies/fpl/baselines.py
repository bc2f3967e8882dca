"""The FPL paper's baselines that fedsim does not implement as protocols: User-kNN and Item-kNN
with cosine similarity (:mod:`fedsim.math.knn`, no library), and through cornac (the
``baselines`` extra) the VAE (Mult-VAE) and cornac's BPR as an independent check of fedsim's own
BPR-MF. Every run is a :class:`~fedsim.studies.fpl.runs.RunRecord` evaluated by the split's
evaluators, like fedsim's own methods.

Why cornac for the VAE and the BPR check (docs/fpl.md, "Baselines"): it ships ``VAECF`` (the
Mult-VAE of Liang et al. 2018) and a Cython ``BPR``, installs as one wheel for Python 3.11 with
NumPy and SciPy (VAECF also needs PyTorch), and is deterministic with a seed. LensKit 2025 has no
VAE and pulls in PyTorch, pandas, pyarrow and pydantic for any model. Why not cornac's kNN: its
cosine runs over co-rated items only, which on 0/1 check-ins is 1 for any two users (items) that
share an item, so it ranks by overlap counts, not by the paper's cosine vector similarity.

What the adapters do:

- kNN: the training part as a dense 0/1 matrix over the catalogue; one similarity computation
  serves the whole k grid.
- The cornac data set holds the training part only; users keep fedsim's indices and cornac item
  ``j`` is ``split.catalogue[j]`` (global maps given to ``Dataset.build``), so scores land in
  fedsim's item columns; items outside the catalogue get score 0 and are never ranked anyway
  (the evaluators exclude them).
- VAE: ``VAECF(likelihood="mult", act_fn="tanh")`` with topology ``H-Z-H`` as
  ``autoencoder_structure=[H], k=Z``, Adam lr 0.001, batch 100, beta 1 (cornac's defaults; no
  KL annealing, no input dropout); one training run evaluated at every epoch budget. PyTorch
  runs on one thread here (the study parallelises by process).
- BPR: cornac's Cython BPR with the given d and lr, one regulariser ``lambda_reg`` (lr/20, the
  paper's user and positive-item regulariser), fitted one epoch at a time so every epoch is
  evaluated. Its step is fedsim's (``tests/test_fpl_baselines.py`` compares one step to the last
  bits); what differs from fedsim's BPR-MF: ``lambda_reg`` also decays the negative item (the
  paper: lr/200) and the item bias (the paper: 0); factors start uniform in +-0.5/d, biases at 0
  (fedsim: N(0, 0.1^2)), in float32; the negative is drawn from every catalogue item and a draw
  that is one of the user's items is skipped, so an epoch makes fewer than X+ steps (fedsim draws
  from the catalogue minus the user's items).

The cornac functions raise ``ImportError`` naming the extra when cornac (or PyTorch for the VAE)
is missing.
"""

from __future__ import annotations

import time
import warnings
from collections import OrderedDict
from typing import Any, Callable

import numpy as np

from ...math.knn import knn_scores
from ...seeding import node_rng
from .data import ImplicitSplit
from .runs import RunRecord, flatten_metrics

__all__ = [
    "KNN_KINDS", "cornac_available", "cornac_dataset", "model_scores", "parse_topology", "run_cornac_bpr", "run_knn",
    "run_vae", "torch_available",
]

KNN_KINDS = {"User-kNN": "user", "Item-kNN": "item"}
EXTRA_HINT = "pip install 'fedsim[baselines]' (cornac, scipy, and the CPU build of torch for the VAE)"


def cornac_available() -> bool:
    """True when cornac imports."""
    try:
        import cornac  # noqa: F401
    except ImportError:
        return False
    return True


def torch_available() -> bool:
    """True when PyTorch imports (cornac's VAECF needs it)."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def _cornac():
    try:
        import cornac
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(f"the library baselines need cornac: {EXTRA_HINT}") from exc
    return cornac


def cornac_dataset(split: ImplicitSplit):
    """The training part as a ``cornac.data.Dataset``: cornac user ``u`` is fedsim user ``u``,
    cornac item ``j`` is ``split.catalogue[j]``."""
    cornac = _cornac()
    uid = OrderedDict((int(u), int(u)) for u in range(split.n_users))
    iid = OrderedDict((int(i), j) for j, i in enumerate(split.catalogue))
    t = split.train
    data = list(zip(t.users.tolist(), t.items.tolist(), [1.0] * len(t)))
    # (its warnings pass: "N duplicated observations are removed!" says a pair of the training
    # part counted once here, where fedsim's own methods would see it twice)
    return cornac.data.Dataset.build(data, fmt="UIR", global_uid_map=uid, global_iid_map=iid, seed=0)


def model_scores(split: ImplicitSplit, model: Any) -> np.ndarray:
    """Scores ``n_users x n_items`` of a fitted cornac model (``model.score(u)`` over the
    catalogue, fedsim's user ``u``); items outside the catalogue score 0."""
    out = np.zeros((split.n_users, split.n_items))
    for u in range(split.n_users):
        out[u, split.catalogue] = np.asarray(model.score(u), dtype=np.float64)
    return out


def run_knn(split: ImplicitSplit, kind: str, ks: list[int] | tuple[int, ...],
            on_config: Callable[[int, dict], None] | None = None) -> RunRecord:
    """User-kNN (``kind="User-kNN"``) or Item-kNN (``"Item-kNN"``) with cosine similarity
    (:func:`fedsim.math.knn.knn_scores`, the paper's definition; no library needed), evaluated
    for every ``k`` of ``ks``: curve entry ``j`` (``epoch`` = j + 1) is the j-th smallest k.
    Deterministic (no seed)."""
    if kind not in KNN_KINDS:
        raise ValueError(f"kind must be one of {', '.join(KNN_KINDS)}, got {kind!r}")
    ks = sorted({int(k) for k in ks})
    if not ks or ks[0] < 1:
        raise ValueError(f"ks must be positive neighbourhood sizes, got {ks}")
    t0 = time.perf_counter()
    r = np.zeros((split.n_users, split.catalogue.size), dtype=np.float32)
    col = np.full(split.n_items, -1, dtype=np.int64)
    col[split.catalogue] = np.arange(split.catalogue.size)
    r[split.train.users, col[split.train.items]] = 1.0
    scores = np.zeros((split.n_users, split.n_items))
    curve = []
    for j, (k, s) in enumerate(knn_scores(r, KNN_KINDS[kind], ks)):
        scores[:, split.catalogue] = s
        entry = flatten_metrics(j + 1, split.evaluate(scores))
        entry["k"] = k
        curve.append(entry)
        if on_config is not None:
            on_config(j + 1, entry)
    return RunRecord(kind, {"ks": ks, "n_configs": len(ks), "similarity": "cosine", "library": "fedsim.math.knn"},
                     curve, time.perf_counter() - t0)


def parse_topology(text: str) -> tuple[int, int]:
    """``"600-200-600"`` -> (hidden 600, latent 200); the two outer sizes must be equal."""
    try:
        a, z, b = (int(x) for x in str(text).split("-"))
    except ValueError:
        raise ValueError(f"a VAE topology is H-Z-H (e.g. 600-200-600), got {text!r}") from None
    if a != b or min(a, z) < 1:
        raise ValueError(f"a VAE topology is H-Z-H with equal outer layers, got {text!r}")
    return a, z


def _hide_refit_notice() -> None:
    """Inside ``warnings.catch_warnings()``: hide cornac's "Model is already fitted. Re-fitting
    will overwrite the previous model." (the adapters fit one model again on purpose: each fit
    continues the last one) and nothing else, so that a deprecation or numerical warning of
    cornac or PyTorch still reaches the user."""
    warnings.filterwarnings("ignore", message="Model is already fitted", category=UserWarning)


def _seed31(seed: int, name: str) -> int:
    return int(node_rng(seed, name).integers(2**31 - 1))


def run_vae(split: ImplicitSplit, topology: str, budgets: list[int] | tuple[int, ...], *, seed: int = 0,
            lr: float = 0.001, batch_size: int = 100, beta: float = 1.0,
            on_config: Callable[[int, dict], None] | None = None) -> RunRecord:
    """cornac's ``VAECF`` (multinomial likelihood, tanh) with ``topology`` ("H-Z-H"), trained to
    the largest of ``budgets`` epochs and evaluated at each budget (curve entry ``epoch`` = the
    budget): one training run continued from budget to budget (cornac's ``fit`` continues an
    existing network; it starts a new Adam optimizer and reseeds PyTorch with the model's seed at
    each call). The seed is derived from ``seed``. PyTorch runs on one thread during the fits."""
    cornac = _cornac()
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(f"the VAE baseline needs PyTorch: {EXTRA_HINT}") from exc
    hidden, latent = parse_topology(topology)
    budgets = sorted({int(b) for b in budgets})
    ds = cornac_dataset(split)
    s = _seed31(seed, f"vae:{topology}")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    curve = []
    model = None
    done = 0
    try:
        with warnings.catch_warnings():
            _hide_refit_notice()
            for b in budgets:
                if model is None:
                    model = cornac.models.VAECF(k=latent, autoencoder_structure=[hidden], act_fn="tanh",
                                                likelihood="mult", n_epochs=b, batch_size=batch_size,
                                                learning_rate=lr, beta=beta, seed=s, verbose=False)
                else:
                    model.n_epochs = b - done
                model.fit(ds)
                done = b
                with torch.no_grad():
                    entry = flatten_metrics(b, split.evaluate(model_scores(split, model)))
                entry["topology"] = topology
                curve.append(entry)
                if on_config is not None:
                    on_config(b, entry)
    finally:
        torch.set_num_threads(threads)
    params = {"topology": topology, "budgets": budgets, "epochs": max(budgets), "lr": lr, "batch_size": batch_size,
              "beta": beta, "seed": seed, "library": _version()}
    return RunRecord("VAE", params, curve, time.perf_counter() - t0)


def run_cornac_bpr(split: ImplicitSplit, epochs: int, *, d: int = 10, lr: float = 0.05, seed: int = 0,
                   reg: float | None = None, eval_every: int = 1,
                   on_epoch: Callable[[int, dict], None] | None = None) -> RunRecord:
    """cornac's ``BPR`` (item bias on, ``lambda_reg = reg``, default lr/20), fitted one epoch at a
    time and evaluated after every ``eval_every`` epochs and after the last; its seed is derived
    from ``seed``. Scores are ``U V^T + b`` from the model's factors."""
    cornac = _cornac()
    reg = lr / 20.0 if reg is None else float(reg)
    ds = cornac_dataset(split)
    model = cornac.models.BPR(k=int(d), max_iter=1, learning_rate=lr, lambda_reg=reg, use_bias=True,
                              seed=_seed31(seed, "cornac-bpr"), verbose=False)
    t0 = time.perf_counter()
    curve = []
    with warnings.catch_warnings():
        _hide_refit_notice()
        for e in range(1, int(epochs) + 1):
            model.fit(ds)
            if e % int(eval_every) and e != int(epochs):
                continue
            s = np.zeros((split.n_users, split.n_items))
            s[:, split.catalogue] = (np.asarray(model.u_factors, dtype=np.float64)
                                     @ np.asarray(model.i_factors, dtype=np.float64).T
                                     + np.asarray(model.i_biases, dtype=np.float64)[None, :])
            entry = flatten_metrics(e, split.evaluate(s))
            curve.append(entry)
            if on_epoch is not None:
                on_epoch(e, entry)
    params = {"epochs": int(epochs), "d": int(d), "lr": lr, "reg": reg, "seed": seed, "library": _version()}
    if int(eval_every) > 1:
        params["eval_every"] = int(eval_every)
    return RunRecord("BPR-MF (cornac)", params, curve, time.perf_counter() - t0)


def _version() -> str:
    import cornac

    return f"cornac {cornac.__version__}"


def describe() -> dict[str, Any]:
    """Versions of the baseline libraries present (for reports)."""
    out: dict[str, Any] = {}
    if cornac_available():
        out["cornac"] = _version().split()[1]
    if torch_available():
        import torch

        out["torch"] = torch.__version__
    return out
