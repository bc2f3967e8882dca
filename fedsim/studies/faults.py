"""Runs under message loss and client dropout: what a fault costs in accuracy and round time.

One task is a protocol (FedRec PMF(B), FPL or PersonalFR) run on a train/test split with seeded
faults (``fedsim.kernel.Faults`` through ``NetSpec``) and a server deadline; the outcome holds the
accuracy the paper uses (test RMSE for FedRec and PersonalFR, P@10 for FPL), the mean simulated
round time,
and what was lost, all read off the run's result and ledger. Tasks are picklable (plain arrays),
so a scenario can run a grid of them in worker processes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..data import Ratings
from ..kernel import NetSpec, get_profile, network_record
from ..protocols import REGISTRY

__all__ = ["FAULT_STUDY", "FaultTask", "network_faults", "refuse_faults", "run_fault_task"]


@dataclass(frozen=True)
class FaultTask:
    protocol: str  # "fedrec", "fpl" or "personalfr" (explicit task)
    train: tuple  # users, items, values, n_users, n_items (and timestamps or None)
    test: tuple
    config: dict  # the protocol's Config fields
    net: NetSpec
    seed: int
    ledger_dir: str | None = None


def _ratings(t: tuple) -> Ratings:
    users, items, values, n_users, n_items, ts = t
    return Ratings(users, items, values, n_users=n_users, n_items=n_items, timestamps=ts)


def run_fault_task(task: FaultTask) -> dict[str, Any]:
    """Run one task; returns its figures (module-level: runs in a worker process). A run whose
    model diverged has ``diverged_at`` and a NaN figure (``test_rmse`` or ``p_at_10``), no score;
    a FedRec or FPL run with no user left to score (every one with test ratings dropped out), or a
    PersonalFR run whose final evaluation scored no rating (no client answered it), has
    ``unevaluated`` (why, in words) and a NaN figure."""
    spec = REGISTRY[task.protocol]
    cfg = spec.Config(**task.config)
    train, test = _ratings(task.train), _ratings(task.test)
    net = task.net.build(task.seed)
    t0 = time.perf_counter()
    result = spec.build(net, train, cfg, test=test).collect(net.run())
    wall = time.perf_counter() - t0
    led = net.ledger
    rounds = [r for r in led.rounds() if r >= 0]
    # a round lasts from its first message to the next round's first (the server may wait out its
    # deadline after the last arrival); the last round to its last arrival
    starts = [float(led.select(round=r).column("send_time").min()) for r in rounds]
    spans = [b - a for a, b in zip(starts, starts[1:])] + ([led.select(round=rounds[-1]).span()] if rounds else [])
    out: dict[str, Any] = {"protocol": task.protocol, "loss": task.net.loss, "dropout": task.net.dropout,
                           "deadline_s": cfg.deadline, "rounds": len(rounds),
                           "round_s": float(np.nanmean(spans)) if spans else float("nan")}
    diverged = result.info.get("diverged_at")
    if diverged is not None:
        # no figure to score: FedRec's evaluate refused the model (a DivergenceError that failed the
        # whole grid), PersonalFR's last evaluation was an earlier round's (or none, said as a wrong task)
        out["diverged_at"] = int(diverged)
        out["p_at_10" if task.protocol == "fpl" else "test_rmse"] = float("nan")
    elif task.protocol == "fedrec":
        # a client that dropped out took its model with it: its test ratings are left out
        users, items, values, left_out = result.present(test.users, test.items, test.values)
        if len(users):
            out["test_rmse"] = result.model.evaluate(users, items, values)[1]
        else:  # a mean over no rating is no figure (it was NaN with NumPy's "Mean of empty slice" warnings)
            out["test_rmse"] = float("nan")
            out["unevaluated"] = (f"all {left_out} users with test ratings dropped out" if len(test.users)
                                  else "the test ratings are empty")
    elif task.protocol == "personalfr":
        # the protocol's own final federated evaluation: over the test entries of the clients that
        # answered it (one that dropped out does not; one whose indices never arrived is not asked)
        final = result.info["final"]
        if final is None or "rmse" not in final:
            raise ValueError(f"fault task {task.protocol!r}: the run has no final explicit evaluation "
                             f"(config task {cfg.task!r}; the study measures explicit RMSE)")
        everyone = len(result.info["clients"]) + len(result.info["lost_clients"])
        out.update(test_rmse=final["rmse"], eval_clients=everyone - final["missing"] - final["left_out"],
                   eval_missing=final["missing"], eval_left_out=final["left_out"], eval_ratings=final["n"])
        if not final["n"]:  # an RMSE over no rating: NaN, which the report's Not evaluated note left out
            out["unevaluated"] = (f"no test rating evaluated: {out['eval_clients']} of {everyone} clients answered the "
                                  f"final evaluation ({final['missing']} did not, {final['left_out']} were not asked)")
    else:
        out["p_at_10"] = result.final("p@10")
        last = result.metrics[-1] if result.metrics else {}
        if last.get("users") == 0:  # FPL's P@10 over no user: NaN, no figure
            out["unevaluated"] = (f"all {last['lost']} users with test items dropped out" if last.get("lost")
                                  else "no user has test items")
    t = led.totals()
    missing = sum(m.get("clients", 0) for m in result.info.get("missing", []))
    out.update(lost_messages=t["lost_messages"], lost_share=t["lost_messages"] / max(t["messages"], 1),
               missing_uploads_per_round=missing / max(len(rounds), 1),
               lost_clients=len(result.info.get("lost_clients", [])), wall_s=wall,
               record=network_record(net, task.ledger_dir,
                                     f"{task.protocol}-loss{task.net.loss:g}-drop{task.net.dropout:g}"))
    return out


def network_faults(profile: str | NetSpec) -> str | None:
    """What in network ``profile`` can lose a message (``Faults``: loss or dropout; a profile whose
    node specs lose or drop out), in words, or None. A run with no deadline waits for a lost
    upload for ever, and a client that drops out after its last upload (its ``stop`` lost) leaves
    a run that completes with that client's user factor zeroed, with nothing in a table to say
    so: the FPL study runs (``run_fpl``, ``run_fcf``) and the FedRec paper scenarios refuse such a
    network; this module's runs measure faults (with a deadline)."""
    spec = NetSpec.of(profile)
    prof = get_profile(spec.profile)
    what = [f"{k} {getattr(spec, k):g}" for k in ("loss", "dropout") if getattr(spec, k)]
    what += [f"profile {spec.profile!r}'s {role}s {how}" for role, n in (("server", prof.server), ("client", prof.client))
             for how in ((f"lose {n.loss:g}",) if n.loss > 0 else ()) + (("drop out",) if n.offline_at is not None else ())]
    return ", ".join(what) or None


#: where faults are measured, for the refusals of runs without a deadline
FAULT_STUDY = "measure faults with `fedsim run fault_study` (fedsim.studies.faults)"


def refuse_faults(profile: str | NetSpec, who: str, instead: str, error: type[Exception] = ValueError) -> None:
    """Raise ``error`` if network ``profile`` can lose a message (:func:`network_faults`):
    ``"{who} on a network that loses no message; this one does (what): {instead}"``.
    For the runs that set no deadline and read whole runs (the paper scenarios, the studies'
    runners): a lost message would stop them in a deadlock, and a client that drops out after its
    last upload would leave its user factor zeroed in a run that completes; ``instead`` says where
    faults are measured. ``who`` names the runs and what they do ("run_one runs FedRec with no
    deadline")."""
    why = network_faults(profile)
    if why is not None:
        raise error(f"{who} on a network that loses no message; this one does ({why}): {instead}")
