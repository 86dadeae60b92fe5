"""Rank intervals of a pair of boards (naive and corrected), as the summary publishes them.

One function for the overall board (:func:`biasboard.transforms.snapshot.build_summary`) and every
slice's (:mod:`biasboard.transforms.slices`), so a slice's intervals come from the same draws at the
same level as the overall board's: the bootstrap replicates when the fit made them, else draws from the fit's
covariance (:meth:`biasboard.ranking.result.FitResult.rank_interval`) — the Laplace posterior's, or the Godambe
sandwich of an ω-weighted fit (:mod:`biasboard.ranking.composite`).
"""

from __future__ import annotations

import numpy as np
from biasboard.ranking.leaderboard import left_off_models
from biasboard.ranking.result import FitResult
from biasboard.schemas import summary as S

#: Level and number of posterior draws of the published rank intervals.
RANK_LEVEL = 0.95
RANK_DRAWS = 2000
#: ``Ranks.source`` by the corrected fit's ``uncertainty``: what the report's rank-interval note names.  Why not
#: "Laplace posterior draws" throughout: an ω-weighted fit's draws come from its Godambe sandwich, which the
#: intervals' note above the board already names, so the rank note contradicted it.
RANK_SOURCES = {
    "bootstrap": "bootstrap replicates",
    "godambe": "draws from the Godambe (sandwich) covariance",
    "laplace": "Laplace posterior draws",
}


def rank_intervals(naive: FitResult, corrected: FitResult, seed: int) -> S.Ranks:
    """Both boards' ranks and central ``RANK_LEVEL`` rank intervals (draws seeded by ``seed``).

    Only the models the board lists: a model alone in its comparison component (on a slice, every model of the
    overall board that has no battle in the slice) is left off, as :func:`~biasboard.ranking.leaderboard.side_by_side`
    leaves it off the board; its "rank 1 of 1" would read as a top model.
    """
    shown = set(corrected.models) - set(left_off_models(corrected))
    # A model the naive board of battles does not rate (graded only: alone in its naive component) has no naive rank
    # on the leaderboard; ranked here, its naive interval read "1" (rank 1 of 1) beside the board's empty rank.
    naive_shown = shown - set(left_off_models(naive))
    return S.Ranks(
        level=RANK_LEVEL,
        source=RANK_SOURCES["bootstrap" if corrected.boot_theta is not None else corrected.uncertainty],
        draws=len(corrected.boot_theta) if corrected.boot_theta is not None else RANK_DRAWS,
        naive=_intervals(naive, seed, naive_shown),
        corrected=_intervals(corrected, seed, shown),
    )


def _intervals(fit: FitResult, seed: int, shown: set[str]) -> list[S.RankInterval]:
    """The rank intervals of the models ``shown``, ranked among themselves: a model the corrected board leaves off
    can share a component of the naive grades board (which pools every grade), where it took rank 1 and pushed
    every other rank down one."""
    keep = np.array([m in shown for m in fit.models], bool)
    low, high = fit.rank_interval(RANK_LEVEL, draws=RANK_DRAWS, seed=seed, among=keep)
    names = [m for m, k in zip(fit.models, keep, strict=True) if k]
    rows = zip(names, fit.ranks(among=keep), low, high, strict=True)
    return [S.RankInterval(m, int(r), int(lo), int(hi)) for m, r, lo, hi in rows]
