"""Attacks that read only what an adversary sees (``fedsim.privacy.views``)."""

from .base import Attack, AttackRun, run_attack
from .fedavg import FedAvgIdleRows
from .fedrec import ImpliedRatings, Intersection, SgdChain, SvdppODelta, fedrec_attacks
from .fedrecpp import NoiseLinking, NoiseMatching
from .imia import IMIA
from .implicit import FCFLine, FPLNeverNegative, FPLSign, PersonalFRIndices
from .personalfr import PersonalFRIdleRows
from .size import SizeOnly, score_sizes, size_estimate

__all__ = [
    "Attack", "AttackRun", "FCFLine", "FedAvgIdleRows", "IMIA", "SizeOnly", "score_sizes", "size_estimate", "FPLNeverNegative", "FPLSign", "ImpliedRatings", "Intersection", "NoiseLinking",
    "NoiseMatching", "PersonalFRIdleRows", "PersonalFRIndices", "SgdChain", "SvdppODelta", "fedrec_attacks", "run_attack",
]
