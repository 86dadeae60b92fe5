"""``diagnostics="fast"``: the quadratic (Wald) profile from the centre's factorisation, against the full solves."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from biasboard.ranking import ModelConfig
from biasboard.ranking.data import build_dataset
from biasboard.ranking.diagnostics import profile_ranges
from biasboard.ranking.fit import fit_bias_aware, solve_bias_aware
from biasboard.ranking.problem import bias_aware_problem

from tests.test_ranking_model import _cells


@pytest.mark.parametrize("solver", ["dense", "blocked"])
def test_fast_profiles_agree_with_full_ones(solver):
    data = build_dataset(_cells(np.random.default_rng(7), models=8, judges=4, cells=600))
    config = ModelConfig(judge_solver=solver)
    problem = bias_aware_problem(data, config)
    solution = solve_bias_aware(problem, config)
    full = profile_ranges(problem, solution, config)
    fast = profile_ranges(problem, solution, replace(config, diagnostics="fast"))
    assert full.keys() == fast.keys() and full
    for name, info in full.items():
        got = fast[name]
        # The quadratic approximation is not the profile: it promises the same verdict and the size.
        assert 0.5 * info["range_nats"] <= got["range_nats"] <= 2.0 * info["range_nats"] + 0.01, name
        assert got["note"].split(":")[0] == info["note"].split(":")[0], name  # same identification verdict
        assert got["grid"] == info["grid"]


def test_diagnostics_off_skips_the_profiles():
    data = build_dataset(_cells(np.random.default_rng(8), models=6, judges=3, cells=300))
    fit = fit_bias_aware(data, config=ModelConfig(diagnostics="off", posterior_draws=100))
    assert fit.diagnostics["profile_likelihood"] == {}
    with pytest.raises(ValueError, match="diagnostics"):
        ModelConfig(diagnostics="some")


def test_refresh_takes_diagnostics_and_judge_pool(tmp_path):
    """The refresh hooks: --diagnostics off publishes no profiles; --judge-pool fits one judge per pool."""
    import json

    from biasboard.pipelines.refresh import RefreshOptions, refresh
    from biasboard.simulate import SimulationConfig, write_simulation

    logs = write_simulation(SimulationConfig(battles=3000, models=6, judges=3, days=1, seed=3), tmp_path / "logs")
    outcome = refresh(
        str(logs / "battles" / "day=*" / "*.parquet"),
        str(tmp_path / "state"),
        str(tmp_path / "out"),
        [],
        RefreshOptions(k=3, audit=False, diagnostics="off", judge_pool="prefix:-sim"),
    )
    assert outcome.published is not None
    summary = json.loads((tmp_path / "out" / "snapshots" / outcome.published.snapshot_id / "summary.json").read_text())
    assert summary["diagnostics"]["profile_likelihood"] == {}
    model_options = json.loads(
        (tmp_path / "out" / "snapshots" / outcome.published.snapshot_id / "manifest.json").read_text()
    )
    assert "prefix:-sim" in json.dumps(model_options)
    import polars as pl

    bias = pl.read_parquet(tmp_path / "out" / "snapshots" / outcome.published.snapshot_id / "bias.parquet")
    judges = set(bias["judge"].to_list()) - {"*"}
    assert judges and not any("-sim" in judge for judge in judges)  # one judge per pool (family prefix)
