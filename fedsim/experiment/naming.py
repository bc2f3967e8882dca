"""A scenario's short name, for messages and output folders (its own module: parameters and
discovery both need it)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

__all__ = ["scenario_name"]


def scenario_name(mod: ModuleType) -> str:
    """The scenario's short name (``fedrec_table2``) whether it was imported from the package, loaded
    from a path (``fedsim_scenario_NAME``) or is running as ``__main__``."""
    if getattr(mod, "PROTOCOL", None):
        return mod.PROTOCOL
    if mod.__name__ == "__main__" and getattr(mod, "__file__", None):
        return Path(mod.__file__).stem
    if mod.__name__.startswith("fedsim_scenario_"):
        # loaded from a path: the rest is the file's whole stem, dots included (exp.v2.py is
        # exp.v2, not v2: folders, results.json and "see fedsim run v2 --help" named a wrong one)
        return mod.__name__.removeprefix("fedsim_scenario_")
    return mod.__name__.rsplit(".", 1)[-1]
