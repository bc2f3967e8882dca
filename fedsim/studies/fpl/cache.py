"""The FPL run cache: each run's record as JSON (and, for resumable runs, its model) under a key
made of the data fingerprint and every parameter, so the three FPL scenarios can share runs."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Callable

import numpy as np

from ...experiment import json_default
from ...kernel.codec import WIRE_VERSION
from .data import ImplicitSplit
from .runs import RunRecord

__all__ = ["run_cached"]


def run_cached(cache_dir: str | Path | None, split: ImplicitSplit, method: str, params: dict,
               fn: Callable[..., RunRecord], length: int, length_key: str = "epochs",
               resumable: bool = False) -> tuple[RunRecord, bool]:
    """``fn(length)``, or a stored result: ``cache_dir/<method>-<key>.json`` where the key hashes
    the data's fingerprint, the method and ``params`` (every parameter that changes the run
    except its length). Epoch e of a run does not depend on how many epochs follow (one network
    per epoch, seeded per epoch), so a stored run at least ``length`` long is reused, cut to
    ``length`` evaluations (and without a ``diverged_at`` beyond ``length``). A shorter one is run again and replaced, unless ``resumable``: then
    ``fn(length, start=..., checkpoint=...)`` is called (see :func:`run_fpl`), continuing from the
    stored model (``<method>-<key>.npz``, written with the record after every epoch, so an
    interrupted run keeps its finished epochs). Returns ``(record, was_cached)`` (True only when
    nothing was run)."""
    if not cache_dir:
        return fn(length), False
    d = Path(cache_dir)
    d.mkdir(parents=True, exist_ok=True)
    # the wire format is in the key: a stored record's byte counts belong to the format that made them
    key = hashlib.sha256(json.dumps({"data": split.fingerprint, "method": method, "wire": WIRE_VERSION, **params},
                                    sort_keys=True, default=str).encode()).hexdigest()[:16]
    safe = method.replace("+", "plus").replace("/", "_").replace(" ", "_")
    path = d / f"{safe}-{key}.json"
    state_path = d / f"{safe}-{key}.npz"
    start = None
    if path.exists():
        rec = RunRecord.from_json(json.loads(path.read_text()))
        have = int(rec.params.get(length_key, 0))
        if have >= length:
            keep = [c for c in rec.curve if c["epoch"] <= length]
            params = dict(rec.params)
            params[length_key] = length
            if int(params.get("diverged_at", 0) or 0) > length:  # as a run of ``length`` epochs would say: it did not
                del params["diverged_at"]
            return RunRecord(rec.method, params, keep, rec.wall_s, rec.info), True
        if resumable and state_path.exists() and len(rec.curve) == have:
            with np.load(state_path) as z:
                if int(z["epoch"]) == have:
                    start = (rec, {"theta": z["theta"], "P": z["P"]})

    def save(rec: RunRecord, state: dict | None = None) -> None:
        if state is not None:  # the model first, then the record that points at it
            tmp = state_path.with_suffix(".part.npz")
            np.savez(tmp, theta=state["theta"], P=state["P"], epoch=np.int64(len(rec.curve)))
            tmp.replace(state_path)
        tmp = path.with_suffix(".part")
        tmp.write_text(json.dumps(rec.to_json(), default=json_default))
        tmp.replace(path)

    rec = fn(length, start=start, checkpoint=save) if resumable else fn(length)
    save(rec)
    return rec, False
