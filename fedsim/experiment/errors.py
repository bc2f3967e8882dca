"""The two errors a scenario run reports to the user as one line (``error: ...``, exit status 2)."""

from __future__ import annotations

__all__ = ["ScenarioError", "UsageError"]


class UsageError(ValueError):
    """A mistake the user can fix (unknown scenario or key, wrong type, missing file)."""


class ScenarioError(RuntimeError):
    """A scenario failed for a reason it reports (e.g. a diverged run it refuses to average)."""
