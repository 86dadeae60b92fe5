"""The trusted-anchor gate (seed 000) on simulated judges: enable where correction helps, never where it cannot."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from biasboard.ranking.gate import GateSettings, run_gate, sign_flip_p_value
from biasboard.schemas.families import FamilyMap
from biasboard.simulate import SimulationConfig, draw_parameters, simulate_days
from biasboard.transforms.cells import partial_cells


def simulated(config: SimulationConfig):
    """Pair cells of a simulation (through the real ingest) and its drawn truth."""
    family_map = FamilyMap.with_user_rules()
    cells = [partial_cells(battles, family_map).cells for _, battles, _ in simulate_days(config)]
    return cells, draw_parameters(config)


def trusted_anchors(params, k: int, seed: int) -> pl.DataFrame:
    """K verdicts of a trusted judge that always prefers the truly better model, on random distinct pairs."""
    rng = np.random.default_rng(seed)
    m = len(params.model_names)
    pairs = set()
    while len(pairs) < k:
        a, b = rng.choice(m, 2, replace=False)
        pairs.add((int(a), int(b)))
    rows = [
        (params.model_names[a], params.model_names[b], "model_a" if params.theta[a] > params.theta[b] else "model_b")
        for a, b in sorted(pairs)
    ]
    return pl.DataFrame(rows, schema=["model_a", "model_b", "winner"], orient="row")


def test_sign_flip_test_exact_and_monte_carlo() -> None:
    rng = np.random.default_rng(0)
    assert sign_flip_p_value(np.ones(10), 1000, rng) == pytest.approx(1 / 1024)
    assert sign_flip_p_value(np.array([1.0, -1.0] * 5), 1000, rng) > 0.5
    p = sign_flip_p_value(np.ones(30), 5000, rng)
    assert p == pytest.approx(1 / 5001)


def test_never_enables_below_ten_anchors() -> None:
    with pytest.raises(ValueError, match="at least 10"):
        GateSettings(min_anchors=5)
    config = SimulationConfig(battles=2000, models=6, judges=1, days=1, beta0=2.0, sd_beta=0.0, seed=3)
    cells, params = simulated(config)
    result = run_gate(cells, trusted_anchors(params, 9, seed=1), effects=("length",))
    assert result.k == 9
    assert not result.decisions["enabled"].any()
    assert result.disabled == {(params.judge_names[0], "length")}
    assert "only 9 anchors" in result.decisions["reason"][0]


# One judge with a strong length preference, length uncorrelated with quality, and
# within-model length variation (so β is identified): naive ratings are apparent
# quality θ + β·μ; the corrected ones are close to θ.
BIASED = dict(
    battles=30_000,
    models=16,
    judges=1,
    days=1,
    both_orders=True,
    theta_sd=0.6,
    beta0=2.0,
    sd_beta=0.0,
    len_model_sd=0.6,
    gamma0=0.0,
    sd_u=0.0,
    lambda0=0.0,
    sd_lambda=0.0,
    corr_length=0.0,
)


def test_enables_length_correction_for_a_length_biased_judge() -> None:
    cells, params = simulated(SimulationConfig(seed=11, **BIASED))
    anchors = trusted_anchors(params, 60, seed=5)
    result = run_gate(cells, anchors, effects=("length", "position"))
    row, position = result.decisions.to_dicts()
    assert row["enabled"], row
    # This judge has no position preference and saw both orders: nothing to correct there.
    assert not position["enabled"], position
    assert result.disabled == {(params.judge_names[0], "position")}
    assert row["improvement"] > 0.01 and row["p_value"] <= 0.05
    assert result.config().is_enabled(params.judge_names[0], "length")
    json.dumps(result.to_json())


def test_does_not_enable_a_correction_that_is_not_needed() -> None:
    # Same design, but the judge has no length preference: a length correction cannot
    # predict the trusted verdicts better, so the gate must leave it off.
    unbiased = {**BIASED, "beta0": 0.0}
    cells, params = simulated(SimulationConfig(seed=12, **unbiased))
    anchors = trusted_anchors(params, 60, seed=6)
    result = run_gate(cells, anchors, effects=("length", "affinity", "position"))
    assert not result.decisions["enabled"].any(), result.decisions
    judge = params.judge_names[0]
    assert result.disabled == {(judge, "length"), (judge, "affinity"), (judge, "position")}
    assert not result.config().is_enabled(judge, "length")
