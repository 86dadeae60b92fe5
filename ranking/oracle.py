"""The oracle fit of the bias-aware model: θ fit with every judge effect fixed at its true value.

On a finite sample, τ against the truth saturates at the oracle's τ, so an estimator is judged next
to the oracle (and next to naive BT), not by "higher τ than X" alone.  The truth is given per judge
as the simulator's ``truth.json`` spells it: ``gamma``, ``beta`` (per unit of raw log length ratio),
``lambda``, ``nu`` (Davidson), ``a`` (discrimination), ``alpha`` (severity); missing keys mean 0
(1 for ``a`` and ``nu``); with style counts, ``style`` (the header, list and bold effects per unit of the
normalised count difference, missing: 0).  Only θ (and the ordinal prompt/threshold parameters) are estimated.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
from biasboard.ranking.config import ModelConfig
from biasboard.ranking.data import CellsInput, Dataset, build_dataset
from biasboard.ranking.fit import solve_bias_aware
from biasboard.ranking.model import AFF, DISC, LEN, POS, SEV, STYLE_BLOCKS, TIE, fixed_scale_judges
from biasboard.ranking.problem import bias_aware_problem


def true_scale(
    cells: CellsInput | Dataset, judges: Mapping[str, Mapping[str, Any]], config: ModelConfig | None = None
) -> float:
    """exp(Σ_j w_j log a_j) of the true a_j, w_j judge j's share of the pair verdicts between two different models
    (self-battles aside): the scale the fit puts θ on when pairs alone set it (``Spec.disc_weights``).  The truth a
    fit estimates is then θ times this and each a_j divided by it (with grades beside the pairs: θ and a_j
    themselves).

    When ``config`` fixes some judges' a_j at 1 (``disabled`` discrimination) beside free ones, those judges' verdicts
    set the scale (:func:`~biasboard.ranking.model.fixed_scale_judges`): the mean is over them alone — exactly
    their a_j when they share one; if they do not, the fixed model is misspecified and this is its first-order
    scale.  Fixed judges of self-battles alone set nothing: the mean is then over the free judges, as the fit
    centres them (``Spec.disc_centring``)."""
    data = cells if isinstance(cells, Dataset) else build_dataset(cells)
    verdicts = data.judge_sums("n_versus")
    if config is not None:
        on = np.array([config.is_enabled(judge, "discrimination") for judge in data.judges], float)
        fixed = fixed_scale_judges(on, verdicts)
        if fixed.any() or 0 < on.sum() < on.size:  # none fixed, or every a_j (misspecified): over every judge
            verdicts = np.where(fixed if fixed.any() else on > 0, verdicts, 0.0)
    log_a = np.array([np.log(judges.get(judge, {}).get("a", 1.0)) for judge in data.judges])
    return float(np.exp(verdicts @ log_a / verdicts.sum()))


def fit_oracle(
    cells: CellsInput | Dataset,
    judges: Mapping[str, Mapping[str, Any]],
    score_cells: CellsInput | None = None,
    *,
    config: ModelConfig | None = None,
) -> tuple[tuple[str, ...], np.ndarray]:
    """(models, centred θ) of the bias-aware model with judge effects fixed at ``judges``' values.

    The judges' true β acts on the *unclipped* log length ratio (the simulator's
    length effect is linear), so the oracle always fits with ``length_clip=None``
    whatever ``config`` says; otherwise it would not be the oracle.  Likewise the true a_j act as they are:
    the fit's centring of log a_j (which sets θ's scale to the verdict-weighted average judge's when only pairs do:
    :func:`true_scale`) is off, or θ came out scaled by the geometric mean of the true a_j (1.16 with ``disc_sd``
    0.6: θ 0.12 RMS from truth on 200k battles, against 0.01 with grades, where log a_j is not centred).
    With style counts, the style effects are fixed at the truth too (they were estimated from the data).
    """
    config = replace(config or ModelConfig(profile=False), length_clip=None)
    data = cells if isinstance(cells, Dataset) else build_dataset(cells, score_cells)
    problem = bias_aware_problem(data, config)
    lay, spec = problem.layout, problem.spec
    if not data.ordinal_only:  # every judge's true a_j, uncentred (one judge alone is not fixed at a_j = 1)
        masks = spec.masks.copy()
        masks[DISC] = 1.0
        spec = replace(spec, masks=masks, centre_discrimination=False)
        problem = replace(problem, spec=spec)
    fixed: dict[int, float] = {lay.glob(t): 0.0 for t in lay.global_effects}
    for j, judge in enumerate(data.judges):
        true = judges.get(judge, {})
        fixed[lay.block(POS).start + j] = float(true.get("gamma", 0.0))
        fixed[lay.block(LEN).start + j] = float(true.get("beta", 0.0)) * spec.x_scale
        fixed[lay.block(AFF).start + j] = float(true.get("lambda", 0.0))
        fixed[lay.block(DISC).start + j] = float(np.log(true.get("a", 1.0)))
        fixed[lay.block(TIE).start + j] = float(np.log(true.get("nu", 1.0)))
        fixed[lay.block(SEV).start + j] = float(true.get("alpha", 0.0))
        style = true.get("style", (0.0,) * len(STYLE_BLOCKS))
        for k, t in enumerate(STYLE_BLOCKS[: lay.n_style]):  # per unit of normalised difference → fitted units
            fixed[lay.block(t).start + j] = float(style[k]) / spec.unit(t)
    solution = solve_bias_aware(problem, config, fixed=fixed)
    theta = solution.core[lay.theta]
    return data.models, theta - theta.mean()
