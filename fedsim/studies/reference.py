"""An independent reference: scikit-surprise (a maintained recommender library with its own C
code) trained on the very folds fedsim's central twins train on.

fedsim's "unfederated" runs are the central twins of its own protocols, so they share fedsim's
math; a second implementation written by someone else tells a reader whether fedsim's central
numbers are those of the model or of fedsim. The pairing:

- PMF (PMF(B), PMF(S)): ``surprise.SVD(biased=False)``: U_u . V_i with L2 regularisation, SGD
  over the ratings in a shuffled order each epoch;
- SVD++ (SVD++(S)): ``surprise.SVDpp``: (U_u + |N(u)|^-1/2 sum_j y_j) . V_i, *plus* a global
  mean and user and item biases, which surprise's SVD++ always has (fedsim's follows the
  authors' code, without biases); the reference is therefore the same family, not the same
  model.

Differences that stay: surprise initialises factors N(0, 0.1), shuffles ratings, has no
learning-rate decay, and predicts the global mean for a user or item absent from the training
part (fedsim predicts the clipped initial factor, 1). Its hyperparameters (epochs, lr,
regularisation) are searched on the same validation split as fedsim's (``SURPRISE_GRID``).

The extra: ``pip install fedsim[reference]`` (scikit-surprise >= 1.1.4, which builds against
NumPy 2). Without it :func:`available` is False and the scenarios say so in their reports.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

__all__ = ["ALGORITHMS", "RefOutcome", "SURPRISE_GRID", "available", "fit_predict", "run_reference"]

# fedsim model -> surprise algorithm
ALGORITHMS = {"PMF(B)": "SVD(biased=False)", "PMF(S)": "SVD(biased=False)", "SVD++(S)": "SVDpp"}
# candidate hyperparameters per surprise algorithm (searched on the validation split by MAE);
# d = 20 factors as the papers, the rest around surprise's defaults
SURPRISE_GRID = {
    "SVD(biased=False)": [dict(n_epochs=e, lr_all=0.005, reg_all=r) for e in (20, 50, 100) for r in (0.1, 0.05, 0.02)],
    "SVDpp": [dict(n_epochs=20, lr_all=0.007, reg_all=r) for r in (0.1, 0.02)],
}


def available() -> bool:
    """Whether scikit-surprise can be imported."""
    try:
        import surprise  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass
class RefOutcome:
    fold: int
    algorithm: str
    params: dict
    mae: float
    rmse: float
    wall_s: float


def _trainset(users, items, ratings, scale=(1.0, 5.0)):
    from surprise import Trainset

    ur: dict[int, list] = {}
    ir: dict[int, list] = {}
    u_ids = np.unique(users)
    i_ids = np.unique(items)
    um = {int(x): k for k, x in enumerate(u_ids)}
    im = {int(x): k for k, x in enumerate(i_ids)}
    for a, b, c in zip(users.tolist(), items.tolist(), np.asarray(ratings, dtype=np.float64).tolist()):
        ur.setdefault(um[a], []).append((im[b], c))
        ir.setdefault(im[b], []).append((um[a], c))
    return Trainset(ur, ir, len(u_ids), len(i_ids), len(users), scale, um, im)


def fit_predict(algorithm: str, params: dict, train: tuple, test: tuple, d: int = 20, seed: int = 0
                ) -> tuple[float, float]:
    """Fit surprise's ``algorithm`` (a key of ``SURPRISE_GRID``) with ``params`` on ``train``
    ((users, items, ratings) arrays) and return (MAE, RMSE) on ``test``, predictions clipped to
    [1, 5]. Raises ``ImportError`` without scikit-surprise, ``ValueError`` for another
    algorithm."""
    import surprise

    if algorithm == "SVD(biased=False)":
        algo = surprise.SVD(n_factors=d, biased=False, random_state=seed, **params)
    elif algorithm == "SVDpp":
        algo = surprise.SVDpp(n_factors=d, random_state=seed, **params)
    else:
        raise ValueError(f"unknown reference algorithm {algorithm!r}; expected one of {sorted(SURPRISE_GRID)}")
    algo.fit(_trainset(*(np.asarray(a) for a in train[:3])))
    tu, ti, tv = (np.asarray(a) for a in test[:3])
    pred = np.array([algo.predict(int(a), int(b), clip=True).est for a, b in zip(tu.tolist(), ti.tolist())])
    err = pred - tv.astype(np.float64)
    return float(np.abs(err).mean()), float(np.sqrt((err * err).mean()))


def run_reference(task: tuple) -> RefOutcome:
    """``(fold, algorithm, params, d, seed)`` -> a :class:`RefOutcome` on the fold's test part
    (a module-level function, for worker processes)."""
    fold, algorithm, params, d, seed = task
    t0 = time.perf_counter()
    mae, rmse = fit_predict(algorithm, params, fold.train, fold.test, d=d, seed=seed)
    return RefOutcome(fold.index, algorithm, dict(params), mae, rmse, time.perf_counter() - t0)
