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
    return mod.__name__.rsplit(".", 1)[-1].removeprefix("fedsim_scenario_")
