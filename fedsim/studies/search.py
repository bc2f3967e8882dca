"""Hyperparameter searches on a validation split cut from training data.

The papers search their hyperparameters "according to the MAE performance on the first copy of
each dataset", i.e. on a test part. Here a search is a step of its scenario and, by default,
reads no test rating: :func:`validation_fold` cuts a validation part out of the first copy's
*training* part (one of ``parts`` equal random parts, as the copies themselves are cut), and
every candidate is trained on the rest and scored on it. ``search_on="first_copy"`` is the
paper's rule (train on copy 1's training part, score on its test part), offered so the two can
be compared; reports say which rule chose each value.

A FedRec candidate is scored with the central twin (``fedrec.central_twin``), which computes
the federated model with the same streams (equal to rounding, tests/test_math_fedrec_equivalence),
so a search costs central runs, not simulations.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from ..seeding import node_rng
from .fedrec import Fold, run_one
from .parallel import count_done, pmap

__all__ = ["SEARCH_RULES", "TP_TL_GRID", "choose_hf", "confirm_fold", "grid", "run_search", "search_fold",
           "ties_text", "tied_with_chosen", "validation_fold"]

SEARCH_RULES = ("validation", "first_copy", "none")
# FedRec and FedRec++: (T_predict, T_local) both from {5, 10, 15}
TP_TL_GRID = tuple((tp, tl) for tp in (5, 10, 15) for tl in (5, 10, 15))


def validation_fold(fold: Fold, parts: int = 5, seed: int = 0) -> Fold:
    """A fold whose ``train`` is ``fold``'s training part minus a random ``1/parts`` of it and
    whose ``test`` is that held-out part (the validation split). Only ``fold.train`` is read.
    Raises ``ValueError`` if ``parts`` < 2 or the training part is too small to split."""
    if parts < 2:
        raise ValueError(f"parts must be >= 2, got {parts}")
    users, items, values = (np.asarray(a) for a in fold.train)
    n = users.shape[0]
    if n < parts:
        raise ValueError(f"a training part of {n} ratings cannot give a 1/{parts} validation split")
    perm = node_rng(seed, f"validation/fold{fold.index}").permutation(n)
    k = n // parts
    val = np.sort(perm[:k])
    keep = np.sort(perm[k:])
    return Fold(fold.index, (users[keep], items[keep], values[keep]), (users[val], items[val], values[val]),
                fold.n_users, fold.n_items)


def search_fold(folds: Sequence[Fold], rule: str, parts: int = 5, seed: int = 0) -> Fold | None:
    """The fold a search scores candidates on: the validation split of the first copy
    (``"validation"``), the first copy itself (``"first_copy"``: the paper's rule, reads its
    test part) or None (``"none"``: no search). Raises ``ValueError`` for another rule."""
    if rule == "validation":
        return validation_fold(folds[0], parts, seed)
    if rule == "first_copy":
        return folds[0]
    if rule == "none":
        return None
    raise ValueError(f"search rule must be one of {SEARCH_RULES}, got {rule!r}")


def confirm_fold(folds: Sequence[Fold], rule: str, parts: int = 5, seed: int = 0) -> Fold | None:
    """For ``rule="validation"``: the first copy's *whole* training part (its ``test`` is the
    validation split, so that no test rating is read), on which a chosen candidate must train
    without diverging (see :func:`run_search`); None for the other rules (their candidates
    trained on the whole training part already)."""
    if rule != "validation":
        return None
    val = validation_fold(folds[0], parts, seed)
    return Fold(folds[0].index, folds[0].train, val.test, folds[0].n_users, folds[0].n_items)


def run_search(fold: Fold, groups: dict[Any, Sequence[Any]], *, seed: int, workers: int = 1,
               runner: Callable = run_one, framework: str = "unfederated", metric: str = "mae",
               on_done: Callable | None = None, describe: Callable[[Any], dict] | None = None,
               confirm: Fold | None = None, confirm_seeds: int = 5,
               neighbours: Callable[[Any], Iterable[Any]] | None = None) -> tuple[dict[Any, Any], list[dict]]:
    """Score every candidate config of every group on ``fold`` (``runner((fold, framework, cfg,
    seed, "ideal", False))`` -> an outcome with ``mae``, ``rmse``, ``diverged_at``) and keep, per
    group, the one with the lowest ``metric`` (ties: the first listed).

    ``confirm``: a fold whose training part is the whole training part the validation split was
    cut from (:func:`confirm_fold`). A validation split trains on less data, and a learning rate
    at the edge of stability there can diverge on the whole part (FedRec++'s lr 1.1 on ML100K
    did, on 3 folds of 5): the best candidate is then trained on ``confirm`` with
    ``confirm_seeds`` seeds (``seed``, ``seed + 1``, ...: at the edge divergence depends on the
    initial factors, lr 1.1 diverged with 2 of 4 seeds there) and, if any run diverges, the
    next best is tried, and so on. Only divergence is read from those runs (a training-time
    fact), never their scores.

    ``neighbours(cfg)``: the candidates next to ``cfg`` on an axis where instability grows
    (e.g. the next larger learning rate). A candidate one of whose neighbours diverged on the
    validation split is at the edge of stability and is not chosen (that is what caught lr 1.1,
    whose neighbour 1.2 diverged; the seeded check alone did not, with the seeds it drew).

    Returns ``({group: chosen config}, rows)``, one row per candidate (``describe(cfg)`` gives
    its columns) with its scores, whether it diverged on the whole training part (when tried)
    and whether it was chosen. Raises ``ValueError`` when every candidate of a group diverged."""
    tasks, keys = [], []
    for g, cands in groups.items():
        for cfg in cands:
            tasks.append((fold, framework, cfg, seed, "ideal", False))
            keys.append(g)
    outs = pmap(runner, tasks, workers, on_done=on_done)
    ranked: dict[Any, list[int]] = {g: [] for g in groups}
    for k, (g, o) in enumerate(zip(keys, outs)):
        if o.diverged_at is None and np.isfinite(getattr(o, metric)):
            ranked[g].append(k)
    for g in ranked:  # stable: ties keep the listed order
        ranked[g].sort(key=lambda k: getattr(outs[k], metric))
    confirmed: dict[int, bool] = {}
    diverged = {(keys[k], repr(o.cfg)) for k, o in enumerate(outs) if o.diverged_at is not None
                or not np.isfinite(getattr(o, metric))}
    edge = {k for g, order in ranked.items() for k in order if neighbours is not None
            and any((g, repr(n)) in diverged for n in neighbours(outs[k].cfg))}
    n_checks = max(1, confirm_seeds)

    def check(ks: list[int]) -> None:  # confirm candidates ks on the whole training part, in one pool
        runs = pmap(runner, [(confirm, framework, outs[k].cfg, seed + j, "ideal", False)
                             for k in ks for j in range(n_checks)], workers)
        for i, k in enumerate(ks):
            confirmed[k] = all(c.diverged_at is None for c in runs[i * n_checks:(i + 1) * n_checks])

    if confirm is not None:
        # every group's first choice is checked in one batch, not one group after the other (9
        # groups of one check each kept one of 2 cores idle for 1.5 minutes); a group whose
        # first choice fails goes on below exactly as before, so the same checks decide
        firsts = (next((k for k in order if k not in edge), None) for order in ranked.values())
        check([k for k in firsts if k is not None])
    best: dict[Any, int] = {}
    for g, order in ranked.items():
        for k in order:
            if k in edge:
                continue
            if confirm is not None:
                if k not in confirmed:
                    check([k])
                if not confirmed[k]:
                    continue
            best[g] = k
            break
    missing = [g for g in groups if g not in best]
    if missing:
        raise ValueError(f"every candidate diverged for {missing}")
    rows = []
    for k, (g, o) in enumerate(zip(keys, outs)):
        row = dict(group=str(g)) if not isinstance(g, tuple) else {f"group{j}": x for j, x in enumerate(g)}
        row.update(describe(o.cfg) if describe else {})
        row.update({"mae": o.mae, "rmse": o.rmse, "diverged_at": o.diverged_at or ""})
        if neighbours is not None:
            row["next_to_divergence"] = k in edge
        if confirm is not None:
            row["diverged_on_whole_training_part"] = "" if k not in confirmed else not confirmed[k]
        row["chosen"] = best[g] == k
        rows.append(row)
    return {g: outs[best[g]].cfg for g in groups}, rows


def tied_with_chosen(rows: Sequence[dict], group_cols: Sequence[str], metric: str = "mae") -> dict[tuple, list[dict]]:
    """Per group (the values of ``group_cols``), the other candidates of :func:`run_search`'s
    ``rows`` whose ``metric`` equals the chosen one's (none diverged): the search took the chosen
    one for its place in the listing, not for its score, which a note must say."""
    out: dict[tuple, list[dict]] = {}
    for r in rows:
        if not r.get("chosen"):
            continue
        g = tuple(r[c] for c in group_cols)
        out[g] = [o for o in rows if o is not r and tuple(o[c] for c in group_cols) == g and not o.get("diverged_at")
                  and o[metric] == r[metric]]  # NaN equals nothing
    return out


def ties_text(others: Sequence[str], paper: str | None = None, metric: str = "MAE") -> str:
    """`` (N other candidate(s) tie with it on MAE[, the authors' X among them]: ...)`` for a
    choice with ties (``others``: their descriptions), else ``""``."""
    if not others:
        return ""
    among = f", the authors' {paper} among them" if paper is not None and paper in others else ""
    return (f" ({len(others)} other candidate(s) tie with it on {metric}{among}: taken for its place in the "
            "listing, not its score)")


def grid(base: Any, **axes: Iterable) -> list[Any]:
    """Every combination of ``axes`` (field -> values) applied to the dataclass ``base``."""
    out = [base]
    for field, values in axes.items():
        out = [replace(c, **{field: v}) for c in out for v in values]
    return out


def choose_hf(ctx, folds: Sequence[Fold], keys: Iterable[tuple], make_cfg: Callable[..., Any], *, rule: str,
              workers: int, paper: Callable[[tuple], tuple[int, int]], fixed: tuple[int, int] = (-1, -1),
              seed: int = 0, table: str = "hf_search", runner: Callable = run_one,
              key_names: Sequence[str] = ()) -> dict[tuple, tuple[int, int]]:
    """(T_predict, T_local) per key (e.g. (model, rho)) from :data:`TP_TL_GRID` by the MAE on
    the search fold of ``rule`` (``make_cfg(key, tp, tl)`` builds a FedRec config to run with
    its central twin); ``rule="none"`` takes ``paper(key)``. A non-negative entry of ``fixed``
    overrides that value (and is not searched). Writes the candidates as table ``table`` and
    a note with the chosen values. Keys whose rho is 0 get ``paper(key)`` (nothing is sampled)."""
    keys = list(dict.fromkeys(keys))
    tp_fix, tl_fix = fixed
    out: dict[tuple, tuple[int, int]] = {}
    groups = {}
    for key in keys:
        ptp, ptl = paper(key)
        if rule == "none" or (tp_fix >= 0 and tl_fix >= 0) or make_cfg(key, ptp, ptl).rho == 0:
            out[key] = (ptp if tp_fix < 0 else tp_fix, ptl if tl_fix < 0 else tl_fix)
            continue
        cands = sorted({(tp if tp_fix < 0 else tp_fix, tl if tl_fix < 0 else tl_fix) for tp, tl in TP_TL_GRID})
        groups[key] = [make_cfg(key, tp, tl) for tp, tl in cands]
    if groups:
        fold = search_fold(folds, rule, len(folds), seed)
        n = sum(len(v) for v in groups.values())
        ctx.progress.update(0, n, stage=f"(T_predict, T_local) search ({rule})")
        best, rows = run_search(fold, groups, seed=seed, workers=workers, runner=runner,
                                # lr is fixed here: one seed guards against a surprise only
                                confirm=confirm_fold(folds, rule, len(folds), seed), confirm_seeds=1,
                                on_done=count_done(lambda k: ctx.progress.update(k, n)),
                                describe=lambda c: {"T_predict": c.T_predict, "T_local": c.T_local})
        for key, cfg in best.items():
            out[key] = (cfg.T_predict, cfg.T_local)
        # a tie was shown as a choice, beside the authors' values as if they differed (tiny data:
        # every (T_predict, T_local) with T_predict >= T gives the same MAE)
        tied = tied_with_chosen(rows, [f"group{j}" for j in range(len(keys[0]))] if keys else [])
        ties = {key: [str((o["T_predict"], o["T_local"])) for o in tied.get(tuple(key), [])] for key in groups}
        for r in rows:
            for j, name in enumerate(key_names):
                r[name] = r.pop(f"group{j}", None)
            r["scored_on"] = rule
        if key_names:
            rows = [{k: r[k] for k in [*key_names, *(k for k in r if k not in key_names)]} for r in rows]
        ctx.table(table, rows, title="(T_predict, T_local) search by MAE on "
                  + ("a validation split of copy 1's training part" if rule == "validation"
                     else "copy 1's test part (the paper's rule)"))
    ctx.note("(T_predict, T_local) " + ("from the authors' settings" if not groups else
                                        f"chosen on the {rule.replace('_', ' ')} split") + ": "
             + ", ".join(f"{' '.join(str(k) for k in key)}: {v}"
                         + (ties_text(ties[key], str(paper(key))) if groups and key in ties else "")
                         for key, v in out.items())
             + ("" if not groups else "; the authors' choices: "
                + ", ".join(f"{' '.join(str(k) for k in key)}: {paper(key)}" for key in groups)) + ".")
    return out
