"""The results object in the statsmodels manner: named judge effects, conf_int(alpha), summary(), params.

Checked against the simulator's known truth: the (1 − α) intervals of the named effects cover the true
judge effects at close to their nominal rate, at α = 0.05 and at α = 0.5, so ``alpha`` really sets the level.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import polars as pl
import pytest
from biasboard.ranking import ModelConfig, fit_bias_aware, fit_naive
from biasboard.ranking.oracle import true_scale
from biasboard.ranking.rank_stats import ranks_within
from biasboard.ranking.result import Z95, z_value
from biasboard.schemas.families import FamilyMap
from biasboard.simulate import SimulationConfig, simulate_days, truth
from biasboard.transforms.cells import merge_batches, partial_cells

#: The simulator's length effect is linear (unbounded), so the fit uses the unbounded covariate here.
FAST = ModelConfig(profile=False, posterior_draws=500, length_clip=None)


def _simulated(seed: int):
    """(cells, truth) with the truth's ``fit_scale``: the scale the fit puts θ and the a_j on (``true_scale``)."""
    config = SimulationConfig(days=1, battles=20_000, models=12, judges=4, seed=seed)
    cells = merge_batches([partial_cells(b, FamilyMap.with_user_rules()) for _, b, _ in simulate_days(config)]).cells
    tr = truth(config)
    return cells, {**tr, "fit_scale": true_scale(cells, {j["judge"]: j for j in tr["judges"]})}


@pytest.fixture(scope="module")
def fits():
    return [(fit_bias_aware(cells, config=FAST), tr) for cells, tr in (_simulated(seed) for seed in (21, 22, 23))]


def test_named_effects_are_the_bias_table(fits):
    fit, _ = fits[0]
    for row in fit.bias.filter(
        pl.col("effect").is_in(["position", "length", "affinity", "tie", "discrimination"])
    ).to_dicts():
        effect = getattr(fit.judges[row["judge"]], row["effect"])
        assert effect.estimate == row["estimate"]
        lo, hi = effect.conf_int(0.05)  # z(0.05) is Z95 to 1e-15: the table's own interval
        assert lo == pytest.approx(row["ci_low"], rel=1e-9, abs=1e-12)
        assert hi == pytest.approx(row["ci_high"], rel=1e-9, abs=1e-12)
    judge = next(j for j in fit.judges if j != "*")
    length = fit.judges[judge].length
    assert length is not None and not length.log_scale
    lo90, hi90 = length.conf_int(0.10)
    lo95, hi95 = length.conf_int(0.05)
    assert (hi90 - lo90) / (hi95 - lo95) == pytest.approx(z_value(0.10) / Z95, rel=1e-12)
    assert length.se == pytest.approx((hi95 - lo95) / (2 * Z95), rel=1e-9)
    disc = fit.judges[judge].discrimination
    assert disc is not None and disc.log_scale
    lo, hi = disc.conf_int(0.05)
    assert lo < disc.estimate < hi and math.log(disc.estimate) - math.log(lo) == pytest.approx(
        math.log(hi) - math.log(disc.estimate), rel=1e-9
    )  # symmetric on the log scale
    with pytest.raises(ValueError, match="alpha"):
        length.conf_int(1.5)


@pytest.mark.parametrize("alpha, low, high", [(0.05, 0.85, 1.0), (0.5, 0.3, 0.7)])
def test_intervals_cover_the_true_judge_effects_at_their_level(fits, alpha, low, high):
    hits = []
    for fit, tr in fits:
        g = tr["fit_scale"]
        for j in tr["judges"]:
            named = fit.judges[j["judge"]]
            truths = {"position": j["gamma"], "length": j["beta"], "tie": j["nu"], "discrimination": j["a"] / g}
            for name, value in truths.items():
                lo, hi = getattr(named, name).conf_int(alpha)
                hits.append(lo <= value <= hi)
    coverage = float(np.mean(hits))
    assert low <= coverage <= high, (alpha, coverage, len(hits))


def test_conf_int_params_and_summary(fits):
    fit, _ = fits[0]
    table = fit.conf_int(0.1)
    assert table.columns == ["name", "estimate", "low", "high"]
    ratings = table.filter(pl.col("name").str.starts_with("rating["))
    assert ratings.height == fit.n_models
    half = (ratings["high"] - ratings["low"]).to_numpy() / 2
    assert np.allclose(half, z_value(0.1) * fit.se)
    params = fit.params
    assert all(isinstance(v, float) for v in params.values())  # estimates only: no solver arrays
    assert params[f"rating[{fit.models[0]}]"] == fit.rating[0]
    assert params["position[*]"] == fit.judges["*"].position.estimate
    assert set(params) == set(table["name"])
    text = fit.summary(alpha=0.1)
    assert "90% interval" in text and "converged" in text
    assert all(m in text for m in fit.models) and "discrimination" in text
    assert fit.state.core.ndim == 1  # the solver's end state lives apart from the estimates


def test_naive_fit_has_ratings_and_no_judges(fits):
    cells, _ = _simulated(21)
    naive = fit_naive(cells)
    assert naive.judges == {}
    assert set(naive.params) == {f"rating[{m}]" for m in naive.models}
    assert "effect" not in naive.summary() and "judges" not in naive.summary()


def test_models_of_the_same_rating_share_their_rank_as_on_the_leaderboard(fits):
    """Two models with mirror-identical records get the same rating: the leaderboard gave both rank 2, summary.json's
    ranks (``FitResult.ranks``) 2 and 3 by index, in opposite orders on the two boards."""
    fit, _ = fits[0]
    rating = fit.rating.copy()
    order = np.argsort(-rating)
    rating[order[2]] = rating[order[1]]  # the second and third best tied
    tied = dataclasses.replace(fit, rating=rating)
    ranks = tied.ranks()
    assert ranks[order[1]] == ranks[order[2]] == 2 and ranks[order[3]] == 4
    assert (ranks == ranks_within(rating, fit.component)).all()


def test_rank_interval_holds_the_rank(fits):
    fit, _ = fits[0]
    low, high = fit.rank_interval(0.95, draws=1000, seed=1)
    rank = fit.ranks()
    assert np.all(low <= rank) and np.all(rank <= high)
    narrow_low, narrow_high = fit.rank_interval(0.5, draws=1000, seed=1)
    assert np.all(narrow_low >= low) and np.all(narrow_high <= high)
    with pytest.raises(ValueError, match="level"):
        fit.rank_interval(1.0)


def test_draws_that_tie_share_ranks_and_top_k_places():
    """Bootstrap replicates can rate models exactly equal (every battle a tie): the ties were broken by index, so the
    first model by name had P(top 1) = 1 and rank interval [1, 1], the others [2, 2] … [4, 4] against a published
    rank 1 each.  Tied models now share the best rank of their run and the top-k places left (r places, s models:
    r/s each), as scipy's "min" ranks; untied draws are ranked as before."""
    from biasboard.ranking.result import rank_draws
    from biasboard.ranking.uncertainty import top_k_probabilities
    from scipy.stats import rankdata

    ties = np.zeros((50, 4)) + 1e-15 * np.arange(4)  # equal up to a solve's round-off
    assert (rank_draws(ties) == 1).all()
    assert np.allclose(top_k_probabilities(ties, 1), 0.25) and np.allclose(top_k_probabilities(ties, 3), 0.75)
    rng = np.random.default_rng(0)
    draws = rng.integers(0, 4, (300, 7)).astype(float)  # many ties at every place
    want = rankdata(-draws, method="min", axis=1)
    assert np.array_equal(rank_draws(draws), want)
    for k in (1, 2, 5):
        expected = np.clip((k - (want - 1)) / np.array([np.sum(row == row[:, None], axis=1) for row in draws]), 0, 1)
        assert np.allclose(top_k_probabilities(draws, k), expected.mean(axis=0))
        assert math.isclose(top_k_probabilities(draws, k).sum(), k)
    continuous = rng.standard_normal((200, 6))
    assert np.array_equal(rank_draws(continuous), rankdata(-continuous, method="ordinal", axis=1))
