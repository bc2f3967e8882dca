"""The FPL study's settings: the paper's (section 5.3) and a quick set for trying things out, the
scenario parameters that override them one by one, and the list of every way a run departs from
the paper's settings (which every FPL report prints).

The paper's settings (Anelli et al. 2022, sections 5.1-5.3), as :data:`PAPER` holds them:

- users with more than 20 interactions (``user_filter="paper"``; the authors' code keeps at
  least 20: ``"code"``); per-user temporal 80/20 hold-out, validation cut from each user's
  training part the same way; models chosen on the validation cut;
- BPR-MF: grid lr {0.005, 0.05, 0.5} x d {10, 20, 50}; FPL and FCF reuse the chosen lr and d
  (FCF: the chosen lr as its Adam step); every factorization model explored at {10, ..., 50}
  iterations, read here as the checkpoints 10, 20, 30, 40, 50 (``epoch_step = 10``);
- FPL: pi in {0.1, ..., 1.0} for each of sFPL, sFPL+, pFPL, pFPL+;
- User-kNN, Item-kNN: cosine similarity, k in {10, 20, ..., 100} (the paper prints
  "{10, 20, ..., 10}", a typo; the usual grid is taken);
- VAE: topologies 200-100-200, 300-100-300, 600-200-600, candidate models after 50, 100 and
  200 epochs;
- not in the paper, needed for honest statistics: 5 seeds (the paper reports one run).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from ...experiment import Param, UsageError
from ...math.fpl_presets import PRESET_NAMES

__all__ = ["PAPER", "QUICK", "SETTINGS", "Settings", "default_meaning", "deviations", "settings_params", "settings_from"]

USER_FILTERS = {"paper": 21, "code": 20}


@dataclass(frozen=True)
class Settings:
    """Everything the FPL study chooses from (see the module docstring for the paper's)."""

    name: str
    user_filter: str  # "paper" (> 20) or "code" (>= 20); min_interactions overrides
    min_interactions: int  # 0: from user_filter
    seeds: int
    pis: tuple[float, ...]
    epochs: tuple[int, ...]  # FPL epochs per preset (sFPL, sFPL+, pFPL, pFPL+)
    epoch_step: int  # candidate epochs: multiples of this (FPL, BPR-MF, FCF, cornac BPR)
    bpr_lrs: tuple[float, ...]
    bpr_ds: tuple[int, ...]
    bpr_epochs: int
    fcf_rounds: int
    fcf_lr: float  # 0: the lr chosen for BPR-MF (the paper)
    knn_ks: tuple[int, ...]
    vae_topologies: tuple[str, ...]
    vae_epochs: tuple[int, ...]

    @property
    def threshold(self) -> int:
        """Minimum interactions per user kept."""
        return int(self.min_interactions) or USER_FILTERS[self.user_filter]

    def preset_epochs(self) -> dict[str, int]:
        ep = list(self.epochs)
        if len(ep) == 1:
            ep = ep * len(PRESET_NAMES)
        if len(ep) != len(PRESET_NAMES):
            raise UsageError(f"epochs: give one value or {len(PRESET_NAMES)} (sFPL, sFPL+, pFPL, pFPL+)")
        return dict(zip(PRESET_NAMES, (int(e) for e in ep)))


PAPER = Settings(
    name="paper", user_filter="paper", min_interactions=0, seeds=5,
    pis=tuple(round(0.1 * k, 1) for k in range(1, 11)), epochs=(50,), epoch_step=10,
    bpr_lrs=(0.005, 0.05, 0.5), bpr_ds=(10, 20, 50), bpr_epochs=50, fcf_rounds=50, fcf_lr=0.0,
    knn_ks=tuple(range(10, 101, 10)), vae_topologies=("200-100-200", "300-100-300", "600-200-600"),
    vae_epochs=(50, 100, 200),
)
# minutes on a city file: two pi values, short runs, one BPR-MF point, two seeds
QUICK = Settings(
    name="quick", user_filter="paper", min_interactions=0, seeds=2, pis=(0.5, 1.0), epochs=(8, 2, 8, 2),
    epoch_step=1, bpr_lrs=(0.05,), bpr_ds=(10,), bpr_epochs=30, fcf_rounds=40, fcf_lr=0.05, knn_ks=(10, 50),
    vae_topologies=("200-100-200",), vae_epochs=(50,),
)
SETTINGS = {"paper": PAPER, "quick": QUICK}

# scenario parameter -> (settings field, Param); an "empty" default (0, [] or "") means "from the
# settings"; anything else overrides that field
_OVERRIDES: dict[str, Param] = {
    "user_filter": Param("", "'paper': more than 20 interactions; 'code': at least 20 (the authors' code)",
                         choices=("", "paper", "code")),
    "min_interactions": Param(0, "keep users with at least this many interactions (0: from user_filter)", min=0),
    "seeds": Param(0, "number of seeds (the run's seed and the next ones); 0: from settings", min=0),
    "pis": Param([], "FPL disclosure probabilities pi (paper: 0.1, 0.2, ..., 1.0)", kind="floats"),
    "epochs": Param([], "FPL epochs per preset in the order sFPL, sFPL+, pFPL, pFPL+ (one value: all; paper: 50)",
                    kind="ints"),
    "epoch_step": Param(0, "models are chosen among the epochs that are multiples of this (paper: 10, i.e. 10, "
                        "20, ..., 50)", min=0),
    "bpr_lrs": Param([], "BPR-MF learning rates searched (paper: 0.005, 0.05, 0.5); FPL and FCF reuse the choice",
                     kind="floats"),
    "bpr_ds": Param([], "BPR-MF latent dimensions searched (paper: 10, 20, 50); FPL and FCF reuse the choice",
                    kind="ints"),
    "bpr_epochs": Param(0, "BPR-MF epochs (paper: 50)", min=0),
    "fcf_rounds": Param(0, "FCF rounds of all clients (paper: 50)", min=0),
    "fcf_lr": Param(0.0, "FCF's Adam learning rate (0: the lr chosen for BPR-MF, as the paper)", min=0.0),
    "knn_ks": Param([], "User-kNN and Item-kNN neighbourhood sizes (paper: 10, 20, ..., 100)", kind="ints"),
    "vae_topologies": Param([], "VAE topologies H-Z-H (paper: 200-100-200, 300-100-300, 600-200-600)", kind="strs"),
    "vae_epochs": Param([], "VAE candidate epoch budgets (paper: 50, 100, 200)", kind="ints"),
}


def settings_params(exclude: tuple[str, ...] = ()) -> dict[str, Param]:
    """The ``settings`` switch and every override, as scenario parameters."""
    out = {"settings": Param("quick", "quick: minutes, NOT the paper's settings (every departure is listed in the "
                             "report); paper: the paper's grids (section 5.3) and 5 seeds", choices=tuple(SETTINGS))}
    out.update({k: v for k, v in _OVERRIDES.items() if k not in exclude})
    return out


def settings_from(config: dict[str, Any]) -> Settings:
    """The named settings (``config["settings"]``) with every non-empty override applied.
    Raises ``UsageError`` for inconsistent values (an empty grid, a bad topology)."""
    base = SETTINGS[config.get("settings", "quick")]
    changes: dict[str, Any] = {}
    for f in fields(Settings):
        if f.name == "name" or f.name not in config:
            continue
        v = config[f.name]
        if v in (0, 0.0, "", [], None):
            continue
        changes[f.name] = tuple(v) if isinstance(v, list) else v
    s = replace(base, **changes)
    for name in ("pis", "epochs", "bpr_lrs", "bpr_ds", "knn_ks", "vae_topologies", "vae_epochs"):
        if not getattr(s, name):
            raise UsageError(f"{name}: empty")
    if any(not 0.0 <= p <= 1.0 for p in s.pis):
        raise UsageError(f"pis must lie in [0, 1], got {list(s.pis)}")
    if any(x < 1 for x in (*s.epochs, *s.bpr_ds, *s.knn_ks, *s.vae_epochs)) or min(s.bpr_lrs) <= 0:
        raise UsageError("epochs, bpr_ds, knn_ks, vae_epochs must be >= 1 and bpr_lrs > 0")
    from .baselines import parse_topology

    for t in s.vae_topologies:
        try:
            parse_topology(t)
        except ValueError as exc:
            raise UsageError(f"vae_topologies: {exc}") from None
    s.preset_epochs()
    return s


def default_meaning(key: str, config: dict[str, Any]) -> tuple[Any, str] | None:
    """What override ``key`` left at its default (0, [] or '': "from the settings") stands for
    under ``config``'s ``settings``: the settings' value, as the parameter holds it (a list for a
    list), and how to say it (``"the paper's 5"``, ``"the quick settings' 0.5, 1"``); None for a
    key that is no override. The FPL scenarios' ``default_meaning`` (the note under a table with
    ``paper_*`` columns read ``seeds=2 (default 0)``: 0 was no number of seeds but "the
    settings'")."""
    if key not in _OVERRIDES:
        return None
    name = config.get("settings", "quick")
    base = SETTINGS[name]
    whose = "the paper's" if name == "paper" else f"the {name} settings'"
    if key == "min_interactions":
        return base.threshold, f"{whose} {base.threshold} (users with more than {base.threshold - 1} interactions)"
    value = getattr(base, key)
    if key == "fcf_lr" and not value:
        return value, f"{whose}: the lr chosen for BPR-MF"
    if key == "epochs":
        value = tuple(base.preset_epochs().values())
        if len(set(value)) == 1:
            value = value[:1]
    return (list(value) if isinstance(value, tuple) else value), f"{whose} {_fmt(value)}"


def _fmt(v: Any) -> str:
    if isinstance(v, tuple):
        if len(v) > 4 and all(isinstance(x, (int, float)) for x in v):
            return f"{v[0]:g}, {v[1]:g}, ..., {v[-1]:g}"
        return ", ".join(f"{x:g}" if isinstance(x, float) else str(x) for x in v)
    return f"{v:g}" if isinstance(v, float) else str(v)


def deviations(s: Settings, used: tuple[str, ...] | None = None) -> list[str]:
    """Every field (of ``used``, default all) where ``s`` differs from the paper's settings, as
    'name = value (paper: value)' lines; empty when the run uses the paper's settings."""
    out = []
    for f in fields(Settings):
        if f.name == "name" or (used is not None and f.name not in used):
            continue
        mine, paper = getattr(s, f.name), getattr(PAPER, f.name)
        if f.name == "epochs":
            mine, paper = tuple(s.preset_epochs().values()), tuple(PAPER.preset_epochs().values())
        if f.name in ("user_filter", "min_interactions"):
            if s.threshold == PAPER.threshold:
                continue
            out.append(f"users with at least {s.threshold} interactions (paper: more than 20)")
            continue
        if f.name == "fcf_lr":
            if mine != paper:
                out.append(f"fcf_lr = {_fmt(mine)} (paper: the lr chosen for BPR-MF)")
            continue
        if mine != paper:
            out.append(f"{f.name} = {_fmt(mine)} (paper: {_fmt(paper)})")
    seen, uniq = set(), []
    for line in out:
        if line not in seen:
            seen.add(line)
            uniq.append(line)
    return uniq
