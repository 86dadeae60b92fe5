"""Rank agreement: Kendall τ-b and Spearman ρ, vectorised (ties handled as in scipy).

``scipy.stats`` is imported inside the functions: it costs ~40 MB of resident
memory, which every fit would otherwise pay whether or not it compares rankings.
"""

from __future__ import annotations

import numpy as np


def kendall_tau_b(x: np.ndarray, y: np.ndarray) -> float:
    """Kendall's τ-b between two score vectors (ties in either get the τ-b correction).

    O(n log n) via scipy's implementation; NaN when either vector is constant or shorter than 2.
    """
    x, y = np.asarray(x, float), np.asarray(y, float)
    if x.shape != y.shape:
        raise ValueError(f"kendall_tau_b: shapes differ {x.shape} vs {y.shape}")
    if x.size < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    from scipy import stats

    return float(stats.kendalltau(x, y, variant="b").statistic)


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's ρ (Pearson correlation of average ranks)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if x.shape != y.shape:
        raise ValueError(f"spearman: shapes differ {x.shape} vs {y.shape}")
    if x.size < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    from scipy import stats

    return float(stats.spearmanr(x, y).statistic)


def ranks_desc(scores: np.ndarray) -> np.ndarray:
    """Competition ranks, 1 = best (highest score); ties share the best rank."""
    from scipy import stats

    return stats.rankdata(-np.asarray(scores, float), method="min").astype(np.int64)


def top_k_recall(estimate: np.ndarray, truth: np.ndarray, k: int) -> float:
    """Share of the true top-k that the estimate's top-k contains."""
    k = min(k, len(truth))
    est = set(np.argsort(-np.asarray(estimate))[:k].tolist())
    true = set(np.argsort(-np.asarray(truth))[:k].tolist())
    return len(est & true) / k
