"""The dense pair partials take each judge's sums over its run of cells (cells sorted by judge, few judges) by
small matrix products: the same value, gradient and Hessian as a bincount per entry, sorted or not."""

from __future__ import annotations

import numpy as np
import pytest
from biasboard.ranking import ModelConfig, model
from biasboard.ranking.data import build_dataset
from biasboard.ranking.problem import bias_aware_problem

from tests.test_ranking_model import _cells


@pytest.mark.parametrize("seed", [0, 5])
def test_run_sums_equal_the_bincounts(seed, monkeypatch):
    rng = np.random.default_rng(seed)
    data = build_dataset(_cells(rng, models=7, judges=5, cells=500))
    assert model.judge_runs(data.pairs.j, 5) is not None  # the coded cells come sorted by judge
    problem = bias_aware_problem(data, ModelConfig(judge_solver="dense"))
    objective = problem.objective()
    core, diag = problem.zeros()
    core = core + rng.normal(0, 0.3, core.size)  # away from zero: every term non-trivial
    runs = objective.evaluate(core, diag)
    monkeypatch.setattr(model, "RUN_JUDGES", 0)  # a bincount per entry
    assert model.judge_runs(data.pairs.j, 5) is None
    counts = objective.evaluate(core, diag)
    assert runs.f == pytest.approx(counts.f, rel=1e-13)
    np.testing.assert_allclose(runs.g, counts.g, rtol=1e-11, atol=1e-11 * np.abs(counts.g).max())
    np.testing.assert_allclose(runs.H, counts.H, rtol=1e-11, atol=1e-11 * np.abs(counts.H).max())


def test_unsorted_judges_fall_back_to_bincounts():
    j = np.array([0, 2, 1, 1])
    assert model.judge_runs(j, 3) is None
    assert model.judge_runs(np.array([0, 0, 2, 2]), 3) == [(0, slice(0, 2)), (2, slice(2, 4))]  # judge 1: no cells
    assert model.judge_runs(np.zeros(0, np.int64), 3) is None
