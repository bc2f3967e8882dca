"""What a finished network run leaves for the experiment that ran it, as plain data: simulated
duration, ledger totals and (when asked) its ledger written to a file. Runs made in worker
processes hand this back instead of the network."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

__all__ = ["network_record"]


def network_record(net: Any, ledger_dir: str | Path | None = None, label: str = "run") -> dict[str, Any]:
    """``{"sim_time", "simulated", "totals", "ledger"}`` of a network that has run (``sim_time``
    its clock at the end: simulated seconds when ``simulated``, else real seconds); with ``ledger_dir`` its
    ledger is written there as ``<label>.csv`` (a file-name-safe form of ``label``; ``<label>~2.csv``
    and so on if that exists) and ``ledger`` is that path, else None.

    The name is claimed with an empty file (never another run's: workers write side by side),
    then the whole CSV replaces it at once (``Ledger.to_csv``): a reader sees an empty file or the
    complete ledger, never part of one. If the export fails, the claimed file is removed and the
    error propagates; ``FileExistsError`` if all 9,999 names are taken. Raises ``TypeError`` for a
    ``ledger_dir`` that is not a path (str or os.PathLike) or None, or a ``label`` that is not a
    str, and ``ValueError`` for an empty ``ledger_dir`` (it wrote into the working folder)."""
    if not isinstance(label, str):  # (re.sub's "expected string or bytes-like object" with a folder, kept without)
        raise TypeError(f"network_record: label must be a str, got {type(label).__name__} {label!r:.80}")
    if ledger_dir is not None:
        if not isinstance(ledger_dir, (str, os.PathLike)) or isinstance(os.fspath(ledger_dir), bytes):
            raise TypeError(f"network_record: ledger_dir must be a folder path (str or os.PathLike) or None, got "
                            f"{type(ledger_dir).__name__} {ledger_dir!r:.80}")
        if os.fspath(ledger_dir) == "":  # (Path("") is ".")
            raise ValueError("network_record: ledger_dir is empty; give a folder, or None to write no ledger")
    path = None
    if ledger_dir is not None:
        safe = re.sub(r"[^A-Za-z0-9=.,+_-]+", "_", label)[:150] or "run"
        Path(ledger_dir).mkdir(parents=True, exist_ok=True)
        for k in range(1, 10_000):
            path = Path(ledger_dir) / (f"{safe}.csv" if k == 1 else f"{safe}~{k}.csv")
            try:
                open(path, "x").close()
            except FileExistsError:
                continue
            try:
                net.ledger.to_csv(path)
            except BaseException:
                path.unlink(missing_ok=True)
                raise
            break
        else:  # the last name tried was another run's file: not this run's ledger
            raise FileExistsError(f"no free file name for ledger {safe!r} in {ledger_dir} (up to ~9999 taken)")
    return {"sim_time": float(net.now()), "simulated": bool(net.simulated), "totals": net.ledger.totals(),
            "ledger": None if path is None else str(path)}
