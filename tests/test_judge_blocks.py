"""The judge-blocked (Schur-complement) Newton solver against the dense one, on small cases.

Both solve the same MAP problem; the blocked path eliminates each judge's 6 × 6 block and keeps the
centring of log a_j and a profile's sum-to-zero gauge as rank-one (Woodbury) terms.  They must agree to
1e-8 on the estimates, the Laplace covariance the leaderboard and the bias table publish, the profile
likelihoods and the bootstrap replicates.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from biasboard.ranking import ModelConfig, arrowhead
from biasboard.ranking.arrowhead import BlockCovariance, glob_index
from biasboard.ranking.data import build_dataset
from biasboard.ranking.fit import fit_bias_aware, solve_bias_aware
from biasboard.ranking.problem import bias_aware_problem
from biasboard.ranking.solver import laplace_covariance

from tests.test_ranking_model import _cells

TOL = 1e-8


def _both(data, **kwargs):
    out = {}
    for solver in ("dense", "blocked"):
        config = ModelConfig(judge_solver=solver, **kwargs)
        problem = bias_aware_problem(data, config)
        assert problem.spec.judge_blocks == (solver == "blocked")
        solution = solve_bias_aware(problem, config)
        assert solution.converged
        out[solver] = (problem, solution, laplace_covariance(solution))
    return out["dense"], out["blocked"]


@pytest.mark.parametrize("seed,judges", [(1, 12), (2, 5)])
def test_blocked_newton_equals_the_dense_solve(seed, judges):
    data = build_dataset(_cells(np.random.default_rng(seed), models=8, judges=judges, cells=500))
    (pd, sd, cd), (_, sb, cb) = _both(data)
    assert isinstance(cb, BlockCovariance) and isinstance(cd, np.ndarray)
    assert np.max(np.abs(sd.core - sb.core)) < TOL
    lay = pd.layout
    gi = glob_index(lay)
    assert np.max(np.abs(cd[np.ix_(gi, gi)] - cb.glob)) < TOL
    # Every judge's total effect (global + deviation; log a_j centred): its variance from the blocks.
    E = pd.spec.effective_map().toarray()
    for t in range(6):
        rows = E[lay.eff_block(t)]
        dense_var = np.einsum("ri,ij,rj->r", rows, cd, rows)
        blocked_var = cb.judge_var[:, t].copy()
        if t < 3:
            blocked_var += cb.glob[lay.n_models + t, lay.n_models + t] + 2 * cb.judge_glob[:, t, t]
        assert np.max(np.abs(dense_var - blocked_var * pd.spec.masks[t])) < TOL


@pytest.mark.parametrize("share", [0, 10**9])
def test_sparse_and_dense_schur_rows_equal_the_dense_solve(monkeypatch, share):
    """Judges meeting few models enter the Schur complement through sparse products, the others through dense
    rows (``DENSE_SHARE``): forced all one way, then all the other, both equal the dense solve."""
    monkeypatch.setattr(arrowhead, "DENSE_SHARE", share)
    data = build_dataset(_cells(np.random.default_rng(9), models=10, judges=30, cells=300))
    (pd, sd, cd), (_, sb, cb) = _both(data)
    gi = glob_index(pd.layout)
    assert np.max(np.abs(sd.core - sb.core)) < TOL
    assert np.max(np.abs(cd[np.ix_(gi, gi)] - cb.glob)) < TOL


def test_blocked_fit_publishes_the_dense_tables():
    """Leaderboard CIs, bias table (with profile likelihoods: the gauge path) and bootstrap agree."""
    data = build_dataset(_cells(np.random.default_rng(3), models=7, judges=6, cells=400))
    fits = {
        s: fit_bias_aware(data, config=ModelConfig(judge_solver=s, bootstrap=3, posterior_draws=500))
        for s in ("dense", "blocked")
    }
    d, b = fits["dense"], fits["blocked"]
    for name in ("rating", "ci_low", "ci_high", "boot_ci_low", "boot_ci_high", "p_top_k"):
        assert np.max(np.abs(getattr(d, name) - getattr(b, name))) < TOL, name
    for name, info in d.diagnostics["profile_likelihood"].items():
        assert abs(info["range_nats"] - b.diagnostics["profile_likelihood"][name]["range_nats"]) < 1e-6
    assert d.bias.columns == b.bias.columns and d.bias.height == b.bias.height
    assert d.bias.select("judge", "effect", "identified", "enabled", "note").equals(
        b.bias.select("judge", "effect", "identified", "enabled", "note")
    )
    for col in ("estimate", "ci_low", "ci_high", "boot_ci_low", "boot_ci_high"):
        x, y = d.bias[col].to_numpy(), b.bias[col].to_numpy()
        assert np.array_equal(np.isnan(x), np.isnan(y))
        ok = ~np.isnan(x)
        assert np.max(np.abs(x[ok] - y[ok])) < 1e-7, col
    assert b.bias.filter(pl.col("effect") == "discrimination")["enabled"].all()


def test_blocked_solver_with_fixed_effects_and_disabled_effects():
    """Fixed parameters (the oracle's) and switched-off effects are identity rows in the blocks."""
    data = build_dataset(_cells(np.random.default_rng(4), models=6, judges=4, cells=300))
    disabled = frozenset({("*", "affinity"), (data.judges[0], "length")})
    (pd, sd, _), (pb, sb, _) = _both(data, disabled=disabled)
    assert np.max(np.abs(sd.core - sb.core)) < TOL
    lay = pd.layout
    fixed = {lay.block(0).start + j: 0.1 * j for j in range(lay.n_judges)}
    fixed.update({lay.block(3).start + j: 0.0 for j in range(lay.n_judges)})
    cores = [solve_bias_aware(p, ModelConfig(), fixed=fixed).core for p in (pd, pb)]
    assert np.max(np.abs(cores[0] - cores[1])) < TOL


def test_blocked_fit_with_a_reference_judge():
    """Deviations tied to the reference (``Spec.tied``) act through the global coefficient only."""
    data = build_dataset(_cells(np.random.default_rng(6), models=7, judges=5, cells=400))
    fits = {
        s: fit_bias_aware(
            data,
            config=ModelConfig(
                judge_solver=s,
                reference=frozenset({data.judges[1]}),
                disabled=frozenset({(data.judges[2], "position")}),
                posterior_draws=200,
            ),
        )
        for s in ("dense", "blocked")
    }
    d, b = fits["dense"], fits["blocked"]
    assert np.max(np.abs(d.rating - b.rating)) < TOL and np.max(np.abs(d.ci_low - b.ci_low)) < TOL
    for col in ("estimate", "ci_low", "ci_high"):
        x, y = d.bias[col].to_numpy(), b.bias[col].to_numpy()
        ok = ~np.isnan(x)
        assert np.max(np.abs(x[ok] - y[ok])) < 1e-7, col


def test_blocked_solver_refuses_ordinal_scores():
    from tests.test_ranking_model import _score_cells

    rng = np.random.default_rng(5)
    data = build_dataset(_cells(rng), _score_cells(rng))
    with pytest.raises(ValueError, match="pair cells only"):
        bias_aware_problem(data, ModelConfig(judge_solver="blocked"))
