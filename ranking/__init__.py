"""The ranking core: naive and bias-aware leaderboard models fit on cells (pure numpy/scipy, no Beam)."""

from biasboard.ranking.config import ModelConfig, NaiveConfig, Priors
from biasboard.ranking.data import Dataset, build_dataset
from biasboard.ranking.fit import fit_bias_aware, fit_leaderboards, fit_naive
from biasboard.ranking.result import FitResult

__all__ = [
    "Dataset",
    "FitResult",
    "ModelConfig",
    "NaiveConfig",
    "Priors",
    "build_dataset",
    "fit_bias_aware",
    "fit_leaderboards",
    "fit_naive",
]
