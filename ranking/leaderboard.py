"""The published leaderboard: naive and corrected side by side (columns in docs/running.md, Elo-like scale)."""

from __future__ import annotations

import numpy as np
import polars as pl
from biasboard.ranking.graph import unranked_components
from biasboard.ranking.rank_stats import ranks_within
from biasboard.ranking.result import FitResult

LEADERBOARD_COLUMNS: tuple[str, ...] = (
    "model",
    "n_battles",
    "rank_naive",
    "rating_naive",
    "ci_low_naive",
    "ci_high_naive",
    "rank_corrected",
    "rating_corrected",
    "ci_low_corrected",
    "ci_high_corrected",
    "rank_change",
    "p_top_k",
    "component",
)


def side_by_side(naive: FitResult, corrected: FitResult, anchor: str | None = None) -> pl.DataFrame:
    """One row per model, sorted by component then corrected rank; ``rank_change`` = rank_naive −
    rank_corrected (> 0: moved up), the corrected rank counted among the models the naive board ranks too (the
    same unless the corrected board rates a model the naive one does not).

    Models the naive fit lacks (seen only in ordinal scores) get null naive columns.  ``p_top_k`` is the
    corrected posterior's top-k membership probability.  ``component`` numbers the comparison graph's
    connected components (0 = the largest): ranks, CIs and P(top-k) hold within a component, each
    centred on its own — models no battle chain links are never ranked against each other.

    A model alone in its component (no battle against another model — only self-battles, or none, as a model only
    graded has at ω = 1, which leaves the grades out — and no grade linking it) is left off the board when other
    models are ranked: its rating is its component's centre by definition, so it would read as rank 1 with a
    zero-width CI and P(top-k) = 1.  The fit's diagnostics name it
    (:func:`~biasboard.ranking.diagnostics.connectivity_report`).
    """
    # A model the naive fit has no battle for (graded only) is its own component there, rated at that component's
    # centre by definition: not a naive rating, so its naive columns are left empty (it read rank 1, 1000 points).
    unrated = left_off_models(naive)
    # A model the corrected board leaves off (alone in its component: on a grades board, no same-judge same-prompt
    # grade links it, while the naive board pools every grade and ranks it) is not ranked on the naive side either:
    # counted there, it pushed every naive rank down one and each model read "+1" for a move nobody made.
    left_off = set(left_off_models(corrected))
    keep = np.array([name not in left_off and name not in unrated for name in naive.models], bool)
    nv = naive.elo(anchor if anchor in naive.models else None).filter(pl.Series(keep))
    nv = nv.with_columns(pl.Series("rank_naive", naive.ranks(among=keep)))
    cr = corrected.elo(anchor).with_columns(
        pl.Series("rank_corrected", ranks_within(corrected.rating, corrected.component)),
        pl.Series("p_top_k", corrected.p_top_k),
        pl.Series("n_battles", corrected.n_battles.astype(np.int64)),
        pl.Series("component", _components(corrected)),
    )
    nv = nv.rename({"rating": "rating_naive", "ci_low": "ci_low_naive", "ci_high": "ci_high_naive"})
    cr = cr.rename({"rating": "rating_corrected", "ci_low": "ci_low_corrected", "ci_high": "ci_high_corrected"})
    # The move is counted among the models both boards rank: a model only the corrected board rates (graded, never
    # in a battle) would otherwise push every corrected rank below it down one, and each model read "-1" for a move
    # nobody made (one that passed a naive rival read "=").
    ranked = set(nv.get_column("model").to_list())
    both = np.array([name in ranked for name in corrected.models], bool)
    common = pl.DataFrame(
        {"model": [name for name, on in zip(corrected.models, both, strict=True) if on],
         "_rank_common": corrected.ranks(among=both)},
        schema={"model": pl.String, "_rank_common": pl.Int64},
    )  # fmt: skip
    table = (
        cr.join(nv, on="model", how="left")
        .join(common, on="model", how="left")
        .with_columns(
            (pl.col("rank_naive").cast(pl.Int64) - pl.col("_rank_common")).alias("rank_change"),
            pl.col("rank_naive").cast(pl.Int64),
            pl.col("rank_corrected").cast(pl.Int64),
        )
    )
    table = table.filter(pl.col("component").is_in(unranked_components(corrected.component)).not_())
    return table.select(LEADERBOARD_COLUMNS).sort(["component", "rank_corrected", "model"])


def top_k_warnings(k: int, leaderboard: pl.DataFrame) -> list[str]:
    """A warning when ``k`` reaches the size of the board's largest ranked group: every model in it is then in the
    top k in every draw, so its P(top k) reads 1 and says nothing (``plan`` refuses such a k; a scheduled refresh
    publishes and says why, as the models on a board may fall below a k chosen when there were more)."""
    if leaderboard.height == 0:
        return []
    largest = leaderboard.filter(pl.col("component") == 0).height
    if k < largest:
        return []
    group = "the board ranks" if largest == leaderboard.height else "the board's largest group ranks"
    remedy = {1: "no k tells one model apart", 2: "--k 1 tells the two apart"}.get(
        largest, f"a k below {largest} tells the models apart"
    )
    together = "1 model" if largest == 1 else f"{largest} models together"
    return [f"--k {k}: {group} only {together}, so every P(top {k}) is 1; {remedy}"]


def _components(fit: FitResult) -> np.ndarray:
    return fit.component.astype(np.int64) if fit.component.size else np.zeros(fit.n_models, np.int64)


def left_off_models(fit: FitResult) -> list[str]:
    """The models a board leaves off (:func:`side_by_side`, the summary's rank intervals): alone in their comparison
    component while other models are ranked."""
    component = _components(fit)
    return [fit.models[i] for i in np.flatnonzero(np.isin(component, unranked_components(fit.component)))]
