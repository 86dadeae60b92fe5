"""The style-kept board (issue 12.4): the published board has style removed; this one keeps it.

Why a second fit rather than adding the style terms back to θ: "style kept" means θ absorbs whatever
the judges rewarded in formatting, which is what a model *without* style covariates estimates —
LMArena's default board beside its style-controlled one.  The kept board is the snapshot's own
bias-aware fit (same reference, priors, length term) with ``ModelConfig(style=False)``; only its
point ratings are published (no bootstrap, no profile diagnostics: one more Newton solve), in
``summary.style`` (:class:`~biasboard.schemas.summary.StyleInfo`).  Cells without style counts skip
all of it: no second fit, ``summary.style`` is null.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from biasboard.ranking.config import STYLE_EFFECTS, ModelConfig
from biasboard.ranking.rank_stats import kendall_tau_b, ranks_within
from biasboard.ranking.result import FitResult
from biasboard.schemas import summary as S


def style_battles(cells: pa.Table) -> int:
    """Battles with all six style counts in the pair cells (0 for cells stored before style existed)."""
    if "n_style" not in cells.column_names or not cells.num_rows:
        return 0
    return int(pc.sum(cells.column("n_style")).as_py() or 0)


def kept_config(config: ModelConfig) -> ModelConfig:
    """The style-kept board's options: the snapshot's, without the style effects and without extras."""
    return dataclasses.replace(config, style=False).ratings_only()


def style_info(battles: int, corrected: FitResult, fit_kept: Callable[[], FitResult]) -> S.StyleInfo | None:
    """``summary.style`` of a snapshot: the global style effects and the style-kept board (None without style).

    ``battles``: battles with style counts (:func:`style_battles` of the cells); ``fit_kept()`` fits the
    style-kept board (called only when some battle carries style counts).
    """
    if battles == 0:
        return None
    kept = fit_kept()
    effects = []
    glob = corrected.judges.get("*")
    for feature in STYLE_EFFECTS:
        effect = getattr(glob, feature, None) if glob is not None else None
        if effect is not None:
            lo, hi = effect.conf_int(0.05)
            effects.append(S.StyleEffect(feature, effect.estimate, lo, hi, effect.identified))
    position = {m: i for i, m in enumerate(kept.models)}
    order = np.array([position[m] for m in corrected.models])
    rating = kept.rating[order]
    rank_kept = ranks_within(rating, corrected.component)
    rank_corrected = ranks_within(corrected.rating, corrected.component)
    board = [
        S.StyleModel(m, float(r), int(k), int(c))
        for m, r, k, c in zip(corrected.models, rating, rank_kept, rank_corrected, strict=True)
    ]
    board.sort(key=lambda row: (row.rank, row.model))
    split = corrected.component.size and corrected.component.max() > 0
    tau = kendall_tau_b(rating, corrected.rating, corrected.component if split else None)  # within components
    return S.StyleInfo(
        features=list(STYLE_EFFECTS),
        battles=battles,
        effects=effects,
        kendall_tau=None if np.isnan(tau) else float(tau),
        kept=board,
    )
