"""The oracle fit of the bias-aware model: θ fit with every judge effect fixed at its true value.

On a finite sample, τ against the truth saturates at the oracle's τ, so an estimator is judged next
to the oracle (and next to naive BT), not by "higher τ than X" alone.  The truth is given per judge
as the simulator's ``truth.json`` spells it: ``gamma``, ``beta`` (per unit of raw log length ratio),
``lambda``, ``nu`` (Davidson), ``a`` (discrimination), ``alpha`` (severity); missing keys mean 0
(1 for ``a`` and ``nu``).  Only θ (and the ordinal prompt/threshold parameters) are estimated.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np
from biasboard.ranking.config import ModelConfig
from biasboard.ranking.data import CellsInput, Dataset, build_dataset
from biasboard.ranking.fit import solve_bias_aware
from biasboard.ranking.model import AFF, DISC, LEN, POS, SEV, TIE
from biasboard.ranking.problem import bias_aware_problem


def fit_oracle(
    cells: CellsInput | Dataset,
    judges: Mapping[str, Mapping[str, float]],
    score_cells: CellsInput | None = None,
    *,
    config: ModelConfig | None = None,
) -> tuple[tuple[str, ...], np.ndarray]:
    """(models, centred θ) of the bias-aware model with judge effects fixed at ``judges``' values.

    The judges' true β acts on the *unclipped* log length ratio (the simulator's
    length effect is linear), so the oracle always fits with ``length_clip=None``
    whatever ``config`` says; otherwise it would not be the oracle.
    """
    config = replace(config or ModelConfig(profile=False), length_clip=None)
    data = cells if isinstance(cells, Dataset) else build_dataset(cells, score_cells)
    problem = bias_aware_problem(data, config)
    lay, spec = problem.layout, problem.spec
    fixed: dict[int, float] = {lay.glob(POS): 0.0, lay.glob(LEN): 0.0, lay.glob(AFF): 0.0}
    for j, judge in enumerate(data.judges):
        true = judges.get(judge, {})
        fixed[lay.block(POS).start + j] = float(true.get("gamma", 0.0))
        fixed[lay.block(LEN).start + j] = float(true.get("beta", 0.0)) * spec.x_scale
        fixed[lay.block(AFF).start + j] = float(true.get("lambda", 0.0))
        fixed[lay.block(DISC).start + j] = float(np.log(true.get("a", 1.0)))
        fixed[lay.block(TIE).start + j] = float(np.log(true.get("nu", 1.0)))
        fixed[lay.block(SEV).start + j] = float(true.get("alpha", 0.0))
    solution = solve_bias_aware(problem, config, fixed=fixed)
    theta = solution.core[lay.theta]
    return data.models, theta - theta.mean()
