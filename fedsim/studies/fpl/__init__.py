"""FPL studies: the implicit-feedback pipeline, top-N evaluation, and run helpers for FPL, FCF,
BPR-MF, Top-Pop and Random, with CCE read from the ledger.

Data (:func:`prepare`): every rating is a positive interaction (``binarize()``), users with
``min_interactions`` or more are kept (default 21, i.e. "more than 20" as the FPL paper and issue
say; the authors' code and the reference notes keep >= 20: pass 20), then the per-user temporal
hold-out: each user's most recent ``floor(0.2 n_u)`` interactions are the test part, and the same
cut of the remaining ones the validation part (``temporal_holdout_with_validation``).

Protocols (what a model is fitted on and what it is evaluated on):

``validation`` (default) fit on train (= the 80 % minus its validation cut); every epoch is
               evaluated on the validation part (ranking everything but the training items) and
               on the test part (ranking everything but training and validation items). The
               epoch (and pi) is chosen by validation P@10 and its test figures are reported:
               the paper's section 5.3 ("a further temporal hold-out 80-20 ... to extract her
               validation set"), without retraining on train + validation.
``test``       fit on the full 80 %; evaluate the test part only; choose the best epoch on test
               (a sanity protocol, as ``benchmarks/bpr_sanity.py``; what Table 4's "epochs needed
               to obtain the best accuracy value" reads like).

Rankings never include an item without a training interaction (it cannot be learnt; its factors
stay at their random initialisation): the catalogue is the fitted part's items.

Communication: every FPL/FCF number comes from the run's ledger (``cce_ledger``: the units, i.e.
vectors, of the training kinds in one epoch); the closed forms are computed beside it as checks.
Long FPL runs are split into one network per epoch (state carried over through ``build``'s
``init``/``user_factors``), which keeps each ledger small and lets the model be evaluated between
epochs; network seeds are derived per epoch from the run seed.

An optional on-disk cache (``cache_dir``) stores each run's curve as JSON under a key made of the
data fingerprint and every parameter, so the three FPL scenarios can share runs.

The package holds one concern a module, everything public importable from here: :mod:`.data`
(``prepare``, ``ImplicitSplit``, ``Evaluator``), :mod:`.runs` (``run_fpl``, ``run_fcf``,
``run_bpr``, ``run_toppop``, ``run_random``, ``RunRecord``, ``best_epoch``, ledger figures),
:mod:`.cache` (``run_cached``) and :mod:`.scenario` (what the three FPL scenarios share).
"""

from .cache import run_cached
from .data import Evaluator, ImplicitSplit, prepare
from .runs import (
    RunRecord, best_epoch, epoch_seed, ledger_tcc, mean_cce, run_bpr, run_fcf, run_fpl, run_random, run_toppop,
)
from .scenario import (
    PAPER_BEST_PI_BRAZIL, PAPER_TABLE2_BRAZIL, PAPER_TABLE3_BRAZIL, PAPER_TABLE4_BRAZIL, bd_columns, fpl_grid,
    preset_epochs, scenario_params, scenario_split, source_bias,
)

__all__ = [
    "PAPER_BEST_PI_BRAZIL", "PAPER_TABLE2_BRAZIL", "PAPER_TABLE3_BRAZIL", "PAPER_TABLE4_BRAZIL", "Evaluator",
    "ImplicitSplit", "RunRecord", "bd_columns", "best_epoch", "epoch_seed", "fpl_grid", "ledger_tcc", "mean_cce",
    "prepare", "preset_epochs", "run_bpr", "run_cached", "run_fcf", "run_fpl", "run_random", "run_toppop",
    "scenario_params", "scenario_split", "source_bias",
]
