"""Uncertainty beyond the Laplace marginals: top-k membership by Monte Carlo, Poisson bootstrap on cells.

Top-k (Xu et al. 2026): draw θ from the Laplace posterior N(θ̂, Σ), rank each draw, and count how often each
model is among the k best.  Bootstrap: every count of every cell is redrawn as Poisson(count) — the
multinomial bootstrap of battles in its Poisson form, which needs only the cells, never the raw
battles — and the model is refit (:mod:`biasboard.ranking.bootstrap`).
"""

from __future__ import annotations

import numpy as np
from biasboard.ranking.data import ScoreArrays
from biasboard.ranking.rank_stats import tie_runs


def centre_within(values: np.ndarray, component: np.ndarray | None = None) -> np.ndarray:
    """``values`` (…, models) centred to mean 0 within each comparison component (all models when one).

    Why: θ is identified only up to one constant per component of the comparison graph; centring each
    component on its own keeps a component that floats (no battle links it to the rest) from widening
    every interval — each component's θ is identified separately (sum to zero per component).
    """
    values = np.asarray(values, float)
    if component is None or component.size == 0 or component.max() == 0:
        return values - values.mean(axis=-1, keepdims=True)
    out = values.copy()
    for c in np.unique(component):
        members = component == c
        out[..., members] -= values[..., members].mean(axis=-1, keepdims=True)
    return out


def centring_matrix(component: np.ndarray, m: int) -> np.ndarray:
    """P with P θ = :func:`centre_within` (θ): the covariance of the centred ratings is P Σ Pᵀ."""
    if component.size == 0 or component.max() == 0:
        return np.eye(m) - 1.0 / m
    same = component[:, None] == component[None, :]
    return np.eye(m) - same / np.bincount(component)[component][:, None]


def top_k_probabilities(draws: np.ndarray, k: int, component: np.ndarray | None = None) -> np.ndarray:
    """P(model in top k) from posterior draws or bootstrap replicates (rows = draws).

    Models tied in a draw across the k-th place share the places left: each of s tied models for r places counts
    r/s (:func:`~biasboard.ranking.rank_stats.tie_runs`; breaking the tie by index made the first model by name
    "certainly best" on a board of ties).  With several comparison components, membership is computed within
    each component (a model is never ranked against models it cannot be compared with).
    """
    n_draws, n_models = draws.shape
    out = np.zeros(n_models)
    if component is None:
        groups = [np.arange(n_models)]
    else:
        groups = [np.flatnonzero(component == c) for c in np.unique(component)]
    for members in groups:
        kk = min(k, members.size)
        if kk == members.size:
            out[members] = 1.0
            continue
        order, start, size = tie_runs(draws[:, members])
        share = np.clip((kk - start) / size, 0.0, 1.0)
        inside = np.empty(order.shape)
        np.put_along_axis(inside, order, share, axis=1)
        out[members] = inside.sum(axis=0) / n_draws
    return out


def poisson_scores(scores: ScoreArrays | None, rng: np.random.Generator) -> ScoreArrays | None:
    if scores is None:
        return None
    return ScoreArrays(scores.j, scores.m, scores.p, rng.poisson(scores.counts).astype(float))


def percentile_interval(samples: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """The ``level`` percentile interval of replicates (rows), at order statistics p·(B + 1) (``weibull``).

    Why not numpy's default (linear, order statistic p·(B − 1) + 1): over B replicates the mass between its two
    ends is on average (B − 1)(1 − 2p)/(B + 1), 0.931 at B = 100, and the published "95%" intervals covered 0.93 in
    simulation (0.937 ± 0.010 against the Laplace 0.953 on the same fits).  At p·(B + 1) it is ``level`` at every B
    (the expected coverage of the order statistics, whatever the distribution)."""
    tail = 100 * (1 - level) / 2
    return (
        np.percentile(samples, tail, axis=0, method="weibull"),
        np.percentile(samples, 100 - tail, axis=0, method="weibull"),
    )
