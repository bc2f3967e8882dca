"""Running scenarios: typed parameters, a run context, and the files every run writes.

A scenario is a module (``scenarios/NAME.py``, installed as ``fedsim.scenarios.NAME``) with

- a docstring whose first line describes it (``fedsim list`` shows it);
- ``PARAMS``: ``{name: Param(default, help)}``; the default's type is the parameter's type;
- ``run(ctx: RunContext) -> None``: does the work, reporting through ``ctx``;
- ``if __name__ == "__main__": scenario_main(globals())`` so that
  ``python scenarios/NAME.py --data PATH --out DIR [--NAME VALUE ...] [--set NAME=VALUE ...]`` works.

Every run writes to its output folder: ``report.md`` (all tables and notes), one CSV per
table, ``results.json`` (configuration, seed, versions, git revision, wall and simulated time,
ledger totals, ``caveats``: the words of the notes made with ``ctx.caveat``, such as
``incomplete`` or ``diverged``; written last), ``run.log``, ``ledger.csv`` when asked, and PNG plots when
matplotlib is installed (one it cannot lay out is left out, report.md saying which and why). The folder appears only when the run has completed.

The package holds one concern a module; everything public is importable from here:

- :mod:`.errors`: ``UsageError``, ``ScenarioError``;
- :mod:`.params`: ``Param``, ``parse_value``, ``check_value``, ``resolve_config``, ``parse_sets``;
- :mod:`.discovery`: ``load_scenario``, ``list_scenarios``, ``first_sentence``, ``scenario_name``;
- :mod:`.context`: ``RunContext``, ``Progress`` (tqdm bar, plain lines, run.log);
- :mod:`.live`: what is running now (networks watched for progress, figures from workers);
- :mod:`.report`: ``Table``, ``format_table``, ``write_csv``, ``write_report``, ``write_results``,
  ``versions``, ``git_revision``, ``format_number``, ``human_bytes``, ``human_seconds``, ``plural``;
- :mod:`.configfile`: TOML run and sweep files (``load_config``);
- :mod:`.allocator`: ``keep_freed_memory`` (the C allocator setting long runs use);
- :mod:`.runner`: ``run_scenario``, ``OutputFolder`` (temporary folder renamed into place),
  ``scenario_main``, ``add_run_arguments`` (with ``StoreOnce`` / ``FlagOnce``, the argparse
  actions of an option that may be given once), ``resolve_run_options``, ``default_out_dir``,
  ``closing_line``.
"""

from __future__ import annotations

from .allocator import keep_freed_memory
from .configfile import load_config
from .context import Progress, RunContext
from .discovery import SCENARIO_PACKAGE, first_sentence, list_scenarios, load_scenario, scenario_name
from .errors import ScenarioError, UsageError
from .params import Param, check_value, params_from, parse_sets, parse_value, resolve_config
from .report import (
    Table, csv_cell, format_number, format_table, git_revision, human_bytes, human_seconds, json_default, plural, versions,
    write_csv, write_report, write_results,
)
from .runner import (
    FlagOnce, OutputFolder, StoreOnce, add_run_arguments, closing_line, default_out_dir, net_from_args, network_spec,
    resolve_run_options, run_scenario, scenario_main,
)

__all__ = [
    "SCENARIO_PACKAGE", "FlagOnce", "OutputFolder", "Param", "Progress", "RunContext", "ScenarioError", "StoreOnce",
    "Table", "UsageError",
    "add_run_arguments", "check_value", "closing_line", "csv_cell", "default_out_dir", "first_sentence",
    "format_number", "format_table", "git_revision", "human_bytes", "human_seconds", "json_default", "keep_freed_memory",
    "list_scenarios", "load_config", "plural",
    "load_scenario", "net_from_args", "network_spec", "params_from", "parse_sets", "parse_value",
    "resolve_config", "resolve_run_options", "run_scenario", "scenario_main", "scenario_name", "versions",
    "write_csv", "write_report", "write_results",
]
