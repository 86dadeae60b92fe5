"""The bounded (clipped) length covariate: exact from the cells, bounded credit, validated option.

Battles are built per battle with known lengths and go through the real ingest function
(:func:`biasboard.transforms.cells.partial_cells`), so the cells are exactly what the pipeline stores.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
from biasboard.ranking import ModelConfig, build_dataset, fit_leaderboards
from biasboard.ranking.data import clip_length
from biasboard.ranking.problem import bias_aware_problem
from biasboard.schemas.battle import BATTLE_SCHEMA, STYLE_COUNT_COLUMNS
from biasboard.schemas.cells import length_bin
from biasboard.schemas.families import FamilyMap
from biasboard.transforms.cells import partial_cells

FAST = ModelConfig(profile=False, posterior_draws=200)


def _battles(
    a: np.ndarray, b: np.ndarray, len_a: np.ndarray, len_b: np.ndarray, win_a: np.ndarray, judge: str = "judge-1"
) -> pa.Table:
    n = a.size
    return pa.table(
        {
            "battle_id": [f"b{i}" for i in range(n)],
            "ts": pa.array(np.full(n, datetime(2024, 5, 1, tzinfo=timezone.utc)), pa.timestamp("us", tz="UTC")),
            "judge": [judge] * n,
            "model_a": [f"m{k}" for k in a],
            "model_b": [f"m{k}" for k in b],
            "winner": np.where(win_a, "model_a", "model_b").tolist(),
            "prompt_id": [f"p{i % 50}" for i in range(n)],
            "len_a": len_a.astype(np.int64),
            "len_b": len_b.astype(np.int64),
            "family_a": ["fam-x"] * n,
            "family_b": ["fam-x"] * n,
            "judge_family": ["fam-judge"] * n,
            "order_known": [None] * n,
            "strength": [None] * n,
            "category": [None] * n,
            "language": [None] * n,
            **{c: [None] * n for c in STYLE_COUNT_COLUMNS},  # no style counts
        },
        schema=BATTLE_SCHEMA,
    )


def _cells(battles: pa.Table) -> pa.Table:
    batch = partial_cells(battles, FamilyMap.with_user_rules())
    assert batch.counts.conserved and batch.counts.rejected_total == 0
    return batch.cells


def _extreme_battles(rng: np.random.Generator, n: int = 6000, models: int = 6) -> pa.Table:
    """Battles whose log length ratios spread far past ±2.5 (ratios up to ~e^4), many near bin edges."""
    a = rng.integers(0, models, n)
    b = (a + rng.integers(1, models, n)) % models
    len_b = rng.integers(50, 400, n)
    x = rng.normal(0.0, 1.6, n)
    x[: n // 10] = rng.choice([-1.5, -1.0, 1.0, 1.5], n // 10)  # exactly on an edge (up to rounding to integers)
    len_a = np.maximum(1, np.rint(len_b * np.exp(x)))
    return _battles(a, b, len_a, len_b, rng.random(n) < 0.5)


@pytest.mark.parametrize("clip", [0.5, 1.0, 1.5, 2.5])
def test_clipped_cell_covariate_equals_the_mean_of_clipped_battles(clip):
    """Per cell: clipped mean and clipped Σx² from the cells == the same sums over the cell's battles' clipped x."""
    battles = _extreme_battles(np.random.default_rng(3))
    data = build_dataset(_cells(battles))
    pairs = clip_length(data.pairs, clip)
    frame = pl.from_arrow(battles)
    x = np.log(np.maximum(frame["len_a"].to_numpy(), 1)) - np.log(np.maximum(frame["len_b"].to_numpy(), 1))
    xc = np.clip(x, -clip, clip)
    assert (np.abs(x) > clip).mean() > 0.05  # the check is about the clipped battles: there are many
    reference = (
        frame.select("model_a", "model_b")
        .with_columns(pl.Series("bin", length_bin(x)), pl.Series("xc", xc))
        .group_by("model_a", "model_b", "bin")
        .agg(pl.len().alias("n"), pl.col("xc").sum().alias("sx"), (pl.col("xc") ** 2).sum().alias("sx2"))
        .sort("model_a", "model_b", "sx")
    )
    ours = pl.DataFrame(
        {
            "model_a": [data.models[i] for i in pairs.a],
            "model_b": [data.models[i] for i in pairs.b],
            "n": pairs.n_len.astype(np.int64),
            "sx": pairs.x * pairs.n_len,
            "sx2": pairs.sum_x2,
        }
    ).sort("model_a", "model_b", "sx")
    assert ours["model_a"].to_list() == reference["model_a"].to_list()
    assert ours["model_b"].to_list() == reference["model_b"].to_list()
    assert ours["n"].to_list() == reference["n"].to_list()
    np.testing.assert_allclose(ours["sx"].to_numpy(), reference["sx"].to_numpy(), rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(ours["sx2"].to_numpy(), reference["sx2"].to_numpy(), rtol=1e-12, atol=1e-9)
    # The fit standardises by the RMS of the covariate it uses: that of the battles' clipped x.
    problem = bias_aware_problem(data, ModelConfig(length_clip=clip))
    assert problem.spec.x_scale == pytest.approx(float(np.sqrt(np.mean(xc**2))), rel=1e-12)
    np.testing.assert_array_equal(problem.data.pairs.x, pairs.x)


def test_unclipped_config_leaves_the_covariate_as_it_was():
    data = build_dataset(_cells(_extreme_battles(np.random.default_rng(4))))
    problem = bias_aware_problem(data, ModelConfig(length_clip=None))
    assert problem.data.pairs is data.pairs
    assert np.abs(data.pairs.x).max() > 2.5


def _gamed_league(rng: np.random.Generator, beta: float, per_pair: int = 700):
    """Eight ordinary models plus m8, whose answers are ~30x shorter; the judge rewards length, saturating at ±1.5.

    Ordinary models' log lengths differ by well under ±1.5, where the judge's length effect is linear;
    m8's short answers sit far beyond, where the judge's effect has saturated.  m8 is truly mediocre
    (θ = 0, the middle of the league).
    """
    models = 9
    theta = np.append(np.linspace(-0.8, 0.8, 8), 0.0)
    mu = np.append(np.log(300.0) + rng.normal(0.0, 0.25, 8), np.log(300.0 / 30.0))
    pa_, pb_ = np.triu_indices(models, 1)
    a = np.concatenate([np.repeat(pa_, per_pair), np.repeat(pb_, per_pair)])
    b = np.concatenate([np.repeat(pb_, per_pair), np.repeat(pa_, per_pair)])
    log_a = mu[a] + rng.normal(0.0, 0.3, a.size)
    log_b = mu[b] + rng.normal(0.0, 0.3, a.size)
    len_a, len_b = np.maximum(1, np.rint(np.exp(log_a))), np.maximum(1, np.rint(np.exp(log_b)))
    x = np.log(len_a) - np.log(len_b)
    eta = theta[a] - theta[b] + beta * np.clip(x, -1.5, 1.5)
    win = rng.random(a.size) < 1.0 / (1.0 + np.exp(-eta))
    return _cells(_battles(a, b, len_a, len_b, win)), theta


def test_brevity_gaming_model_is_not_credited_beyond_the_clip():
    """30x shorter answers (x ≈ −3.4): the unbounded term over-credits them; the clipped one gives at most c·β."""
    beta = 0.8
    cells, theta = _gamed_league(np.random.default_rng(11), beta)
    data = build_dataset(cells)
    gamed = data.models.index("m8")
    ordinary = [i for i in range(len(data.models)) if i != gamed]
    true_rel = theta[8] - theta[:8].mean()  # m8 against the ordinary models' mean: 0

    def fit(clip: float | None) -> tuple[float, float, dict]:
        """(m8's relative rating, its change from naive, the global length row) of a fit with ``clip``."""
        naive, corrected = fit_leaderboards(data, config=replace(FAST, length_clip=clip))
        assert corrected.converged
        row = corrected.bias.filter((pl.col("judge") == "*") & (pl.col("effect") == "length")).row(0, named=True)
        rel = [f.rating[gamed] - f.rating[ordinary].mean() for f in (naive, corrected)]
        return rel[1], rel[1] - rel[0], row

    rel_clipped, credit_clipped, row_clipped = fit(1.5)
    rel_unbounded, credit_unbounded, _ = fit(None)
    assert row_clipped["ci_low"] <= beta <= row_clipped["ci_high"]
    # The covariate of every m8 battle is at the clip, so the length term moves it by at most 1.5·β̂.
    pairs = bias_aware_problem(data, replace(FAST, length_clip=1.5)).data.pairs
    involved = ((pairs.a == gamed) | (pairs.b == gamed)) & (pairs.a != pairs.b)
    np.testing.assert_allclose(np.abs(pairs.x[involved]), 1.5)
    # The clipped fit hands back about what the judge's saturated penalty (β·1.5) took, and puts m8 at its
    # true mid-table place; the unbounded fit extrapolates the line to x ≈ −3.4 and lifts m8 far above it.
    assert 0.0 < credit_clipped <= 1.5 * beta + 0.15
    assert abs(rel_clipped - true_rel) < 0.15
    assert credit_unbounded > 1.5 * beta + 1.0
    assert rel_unbounded - true_rel > 1.0


@pytest.mark.parametrize("bad", [1.3, 0.0, -1.5, 3.0, 2.6])
def test_length_clip_must_be_a_positive_bin_edge(bad):
    with pytest.raises(ValueError, match="length_clip must be None or a positive length-bin edge"):
        ModelConfig(length_clip=bad)


def test_length_clip_accepts_every_positive_edge_and_none():
    for clip in (0.25, 1.0, 1.5, 2.5, None):
        assert ModelConfig(length_clip=clip).length_clip == clip


def test_models_whose_correction_the_clip_sets_are_named_as_the_battles_give_them() -> None:
    """AlpacaEval 2's ``gpt4_gamed`` (68-character answers against GPT-4 Turbo's ~2,000) has 36 of its 805 battles
    inside ±1.5: its correction is the clip's cap, 1.5·β, with β measured on other models' battles, and nothing said
    so.  The fit names the models with 90% or more of their battles beyond the clip, with shares counted from the
    cells that equal the battles' own (tests/data extract); none without a clip or with the length effect off."""
    from biasboard.importers.registry import import_path
    from biasboard.transforms.cells import merge_batches

    from tests.conftest import real_data

    rows = import_path(
        "alpacaeval", real_data("alpacaeval", "annotations_weighted_alpaca_eval_gpt4_turbo.jsonl.gz")
    ).rows
    battles = pl.from_arrow(rows).filter(pl.col("model_a") != pl.col("model_b"))
    x = (pl.col("len_a") / pl.col("len_b")).log().abs()
    share = (
        pl.concat([battles.select(model=name, beyond=x >= 1.5) for name in ("model_a", "model_b")])
        .group_by("model")
        .agg(pl.col("beyond").mean())
        .filter(pl.col("beyond") >= 0.9)
    )
    expected = dict(zip(share["model"], share["beyond"], strict=True))
    assert list(expected) == ["gpt4_gamed"] and 0.95 < expected["gpt4_gamed"] < 0.96

    cells = merge_batches([partial_cells(rows, FamilyMap.with_user_rules())]).cells
    _, corrected = fit_leaderboards(cells, config=FAST)
    named = corrected.diagnostics["covariates"]["clip_bound_models"]
    assert named == {model: round(value, 4) for model, value in expected.items()}
    warned = corrected.diagnostics["warnings"]
    assert any(w.startswith("1 model(s) have 90% or more of their battles beyond the length clip") for w in warned)
    for config in (replace(FAST, length_clip=None), replace(FAST, disabled=frozenset({("*", "length")}))):
        _, other = fit_leaderboards(cells, config=config)
        assert "clip_bound_models" not in other.diagnostics["covariates"]
        assert not any("beyond the length clip" in w for w in other.diagnostics["warnings"])
