"""validation/compare.py's bookkeeping (no ns-3, no root): which ground-truth patterns and rows are
compared, and that a malformed results file is refused rather than silently thinned out."""

import copy
import math
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from validation import compare as C  # noqa: E402
from validation import patterns as P  # noqa: E402
from validation.fedsim_run import run_pattern  # noqa: E402

NAME = "bcast/lan0/homo/n10"  # 20 messages, fast on every model


@pytest.fixture(scope="module")
def truth():
    """A ground truth that is fedsim's own ``fifo`` result for NAME, as an engine would write it."""
    pat = P.by_name(NAME)
    r = run_pattern(pat, "fifo")
    r["hash"] = P.pattern_hash(pat)
    return {NAME: r}


def test_a_truth_equal_to_the_model_has_zero_error(truth):
    errs = C.errors(truth, models=("fifo",))
    assert errs[NAME]["fifo"]["round"] == 0
    assert len(errs[NAME]["fifo"]["messages"]) == 20 and errs[NAME]["fifo"]["messages"].max() == 0


def test_an_incomplete_pattern_is_left_out_with_its_reason(truth):
    t = copy.deepcopy(truth)
    t["single/wan0/10KB"] = {"name": "single/wan0/10KB", "complete": False, "round": None,
                             "messages": [{"id": 0, "completion": None}]}
    keep, dropped = C.usable(t)
    assert list(keep) == [NAME]
    assert any("single/wan0/10KB" in names for names in dropped.values())


@pytest.mark.parametrize("bad", ["missing_row", "nan_completion", "none_completion", "nan_round"])
def test_a_malformed_truth_is_refused_not_thinned(truth, bad):
    t = copy.deepcopy(truth)
    r = t[NAME]
    if bad == "missing_row":
        del r["messages"][7]
    elif bad == "nan_completion":
        r["messages"][7]["completion"] = math.nan
    elif bad == "none_completion":
        r["messages"][7]["completion"] = None
    else:
        r["round"] = math.nan
    with pytest.raises(ValueError, match=NAME):
        C.errors(t, models=("fifo",))


def test_a_pattern_measured_with_another_hash_is_reported(truth):
    t = copy.deepcopy(truth)
    assert C.hash_mismatches(t) == []
    t[NAME]["hash"] = "0000000000000000"
    assert C.hash_mismatches(t) == [NAME]
    text = C.table(C.errors(t, models=("fifo",)), t, "x", models=("fifo",))
    assert "hash" in text and NAME in text
