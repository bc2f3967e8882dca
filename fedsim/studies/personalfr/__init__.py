"""What the PersonalFR scenarios (``personalfr_table3``, ``personalfr_table4``,
``personalfr_curves``, ``personalfr_compression``) share: :mod:`.runs` (parameters, run specs,
running them) and :mod:`.report` (tables, checks, plots)."""

from .report import PAPER, label_M, plot_curves, result_tables, verdicts
from .runs import (
    COMMON_PARAMS, METRIC, PROTOCOLS, RunSpec, check_clients, check_network, check_threshold, comm_from_ledger,
    config_from, execute, load_task, make_specs, run_spec,
)

__all__ = [
    "COMMON_PARAMS", "METRIC", "PAPER", "PROTOCOLS", "RunSpec", "check_clients", "check_network", "check_threshold",
    "comm_from_ledger", "config_from", "execute", "label_M", "load_task", "make_specs", "plot_curves", "result_tables", "run_spec", "verdicts",
]
