"""Rank agreement: Kendall τ-b and Spearman ρ, vectorised (ties handled as in scipy), and competition ranks.

Scores that differ by float noise only are ties (:func:`snap_ties`): a fit gives two models with the same record
ratings a few ulps apart, which ranked them one above the other and counted the pair as ordered in τ.

Plain numpy on purpose, not ``scipy.stats``: importing it costs 0.5–0.7 s and ~40 MB in every refresh (measured
on this machine), which paid for two τ values per board; the tests check these against ``scipy.stats``.
"""

from __future__ import annotations

import math

import numpy as np

#: Rows of the pairwise sign matrix per block of :func:`kendall_tau_b` (block × n int8 values at a time).
_TAU_BLOCK = 1024

#: Scores closer than this, relative to the largest magnitude (at least 1), are one value (:func:`snap_ties`).
#: Far above a solve's round-off (AlpacaEval 2's naive board: four pairs of models with the same record
#: 5.6e-17 to 7.2e-16 logits apart, ranked 16th and 17th and so on), far below any difference a board shows
#: (its ratings are printed to 0.01 Elo points, 2.3e-5 logits).
TIE_TOLERANCE = 1e-9


def snap_ties(values: np.ndarray) -> np.ndarray:
    """``values`` with every run of scores each within :data:`TIE_TOLERANCE` of the next set to the run's lowest,
    so that ranks and rank correlations see them as the tie they are (non-finite scores are left as they are)."""
    v = np.asarray(values, float)
    if v.size < 2 or not np.isfinite(v).all():
        return v
    order = np.argsort(v, kind="stable")
    ascending = v[order]
    tolerance = TIE_TOLERANCE * max(1.0, float(np.abs(ascending).max()))
    starts = np.concatenate([[True], np.diff(ascending) > tolerance])
    snapped = np.empty_like(v)
    snapped[order] = ascending[starts][np.cumsum(starts) - 1]
    return snapped


def tie_runs(draws: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each row of ``draws`` (draws × models) sorted best first, in runs of ties as :func:`snap_ties` sees them.

    Returns (order, start, size), each draws × models: ``order`` the models best first; for the model at each
    sorted position, ``start`` the 0-based position where its run of ties begins and ``size`` the run's length.
    Why: bootstrap replicates can rate models exactly equal (a board of ties; models with the same record), and
    breaking those ties by index made the first model by name "certainly best"."""
    draws = np.atleast_2d(np.asarray(draws, float))
    n = draws.shape[1]
    order = np.argsort(-draws, axis=1, kind="stable")
    desc = np.take_along_axis(draws, order, axis=1)
    tolerance = TIE_TOLERANCE * np.maximum(1.0, np.abs(desc).max(axis=1, initial=0.0, keepdims=True))
    starts = np.ones(desc.shape, bool)
    starts[:, 1:] = desc[:, :-1] - desc[:, 1:] > tolerance
    positions = np.arange(n)
    start = np.maximum.accumulate(np.where(starts, positions, 0), axis=1)
    ends = np.ones(desc.shape, bool)
    ends[:, :-1] = starts[:, 1:]
    end = np.minimum.accumulate(np.where(ends, positions, n)[:, ::-1], axis=1)[:, ::-1]
    return order, start, end - start + 1


def kendall_tau_b(x: np.ndarray, y: np.ndarray, groups: np.ndarray | None = None) -> float:
    """Kendall's τ-b between two score vectors (ties in either get the τ-b correction).

    Exact integer pair counts over blocks of the pairwise sign matrices: O(n²) time, O(block · n) memory —
    leaderboards have hundreds to thousands of models.  With ``groups`` (a label per item: the comparison
    components) only the pairs within a group count — scores of different components are each centred on their
    own, so a pair across them compares two arbitrary centres.  NaN when no counted pair is untied in x or in y.
    """
    x, y = snap_ties(x), snap_ties(y)
    if x.shape != y.shape:
        raise ValueError(f"kendall_tau_b: shapes differ {x.shape} vs {y.shape}")
    if x.size < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    concordance = untied_x = untied_y = 0
    for lo in range(0, x.size, _TAU_BLOCK):
        sx = np.sign(x[lo : lo + _TAU_BLOCK, None] - x[None, :]).astype(np.int8)
        sy = np.sign(y[lo : lo + _TAU_BLOCK, None] - y[None, :]).astype(np.int8)
        if groups is not None:
            same = groups[lo : lo + _TAU_BLOCK, None] == groups[None, :]
            sx *= same
            sy *= same
        concordance += int(np.einsum("ij,ij->", sx, sy, dtype=np.int64))
        untied_x += int(np.count_nonzero(sx))
        untied_y += int(np.count_nonzero(sy))
    if untied_x == 0 or untied_y == 0:
        return float("nan")
    # Every pair is counted in both orders: the factor 2 cancels in the ratio.
    return exact_correlation(concordance, untied_x, untied_y)


def spearman(x: np.ndarray, y: np.ndarray, groups: np.ndarray | None = None) -> float:
    """Spearman's ρ (Pearson correlation of average ranks); with ``groups``, of the ranks within each group (the
    comparison components: see :func:`kendall_tau_b`), which no shift of one group's scores changes."""
    x, y = snap_ties(x), snap_ties(y)
    if x.shape != y.shape:
        raise ValueError(f"spearman: shapes differ {x.shape} vs {y.shape}")
    if x.size < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    parts = [np.ones(x.size, bool)] if groups is None else [groups == g for g in np.unique(groups)]
    rx, ry = np.empty(x.size), np.empty(y.size)
    for members in parts:
        rx[members], ry[members] = _ranks(x[members], "average"), _ranks(y[members], "average")
    return _pearson_of_ranks(rx, ry, parts)


def exact_correlation(cross: int, square_x: int, square_y: int) -> float:
    """``cross / sqrt(square_x * square_y)`` from exact integer sums, in [-1, 1], and exactly ±1 at a perfect
    (dis)agreement.

    Two square roots divided one after the other rounded twice: two boards of a two-model slice that agree
    published τ = 0.9999999999999999 and three models 1.0000000000000002, outside the range of a correlation.
    The product of the integer sums is exact (Python integers); when it is a perfect square — always so when
    ``square_x == square_y``, as at a perfect agreement — its integer root makes the division one correctly
    rounded step, so ``n / n`` is 1.0; otherwise one float root, and the clip keeps round-off inside [-1, 1].
    """
    product = square_x * square_y
    root = math.isqrt(product)
    ratio = cross / root if root * root == product else cross / math.sqrt(product)
    return min(1.0, max(-1.0, ratio))


def _pearson_of_ranks(rx: np.ndarray, ry: np.ndarray, parts: list[np.ndarray]) -> float:
    """Pearson correlation of two average-rank vectors, each centred within its part (``parts``: boolean masks,
    the groups), from exact integer moments (:func:`exact_correlation`); NaN when either has no spread.

    Average ranks are multiples of ½, so twice them are integers and each part's ``n·Σxy − Σx·Σy`` (and the two
    squares) are exact in Python integers, where ``np.corrcoef`` gave 0.9999999999999999 for two identical
    rankings; the parts' sums are brought to the common multiple of their sizes.  Why centred within each part:
    ranks within groups of different sizes have different means (4 in a group of 7, 3 in one of 5), and pooled
    around one mean that spread agreed with itself: two components each ranked in exactly the reverse order gave
    ρ = −0.857, and 20 reversed models beside 3 singletons (models graded but never in a battle, each alone on
    the naive board) −0.477, where τ said −1.
    """
    x, y = np.rint(2 * rx).astype(np.int64), np.rint(2 * ry).astype(np.int64)
    sizes = [int(members.sum()) for members in parts]
    common = math.lcm(*sizes)
    cross = square_x = square_y = 0
    for members, n in zip(parts, sizes, strict=True):
        px, py = x[members], y[members]
        sum_x, sum_y, scale = int(px.sum()), int(py.sum()), common // n
        cross += scale * (n * int(px @ py) - sum_x * sum_y)
        square_x += scale * (n * int(px @ px) - sum_x**2)
        square_y += scale * (n * int(py @ py) - sum_y**2)
    if square_x == 0 or square_y == 0:
        return float("nan")
    return exact_correlation(cross, square_x, square_y)


def ranks_desc(scores: np.ndarray) -> np.ndarray:
    """Competition ranks, 1 = best (highest score); ties (:func:`snap_ties`) share the best rank."""
    return _ranks(-snap_ties(scores), "min").astype(np.int64)


def ranks_within(rating: np.ndarray, component: np.ndarray) -> np.ndarray:
    """Competition ranks (1 = best; ties share the best rank) within each comparison component."""
    if component.size == 0 or component.max() == 0:
        return ranks_desc(rating)
    out = np.empty(rating.size, np.int64)
    for c in np.unique(component):
        members = component == c
        out[members] = ranks_desc(rating[members])
    return out


def _ranks(values: np.ndarray, ties: str) -> np.ndarray:
    """1-based ranks of ``values`` (ascending); tied values share their group's ``"min"`` or ``"average"`` rank."""
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    shared = ends - counts + 1 if ties == "min" else ends - (counts - 1) / 2.0
    return shared[inverse.reshape(-1)]


def top_k_recall(estimate: np.ndarray, truth: np.ndarray, k: int) -> float:
    """Share of the true top-k that the estimate's top-k contains."""
    k = min(k, len(truth))
    est = set(np.argsort(-np.asarray(estimate))[:k].tolist())
    true = set(np.argsort(-np.asarray(truth))[:k].tolist())
    return len(est & true) / k
