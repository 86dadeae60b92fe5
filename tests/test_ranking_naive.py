"""The naive leaderboard: Bradley–Terry with ties as half wins, checked exactly against Evalica on LLMFAO."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
from biasboard.ranking import fit_naive
from biasboard.schemas.cells import conform_pair_cells
from conftest import real_data


def _cells_from_verdicts(frame: pl.DataFrame, judge: str = "crowd") -> pa.Table:
    """left/right/winner verdict rows → pair cells (left = shown first), lengths unknown (bin −1)."""
    winner = pl.col("winner")
    cells = (
        frame.group_by(["left", "right"])
        .agg(
            pl.len().alias("n"),
            (winner == "left").sum().alias("win_a"),
            (winner == "right").sum().alias("win_b"),
            (winner == "tie").sum().alias("tie"),
        )
        .rename({"left": "model_a", "right": "model_b"})
        .with_columns(
            judge=pl.lit(judge),
            judge_family=pl.lit("human"),
            family_a=pl.lit("unknown"),
            family_b=pl.lit("unknown"),
            len_bin=pl.lit(-1, pl.Int16),
            order_known=pl.lit(True),
            category=pl.lit(None, pl.String),
            language=pl.lit(None, pl.String),
            tie_bothbad=pl.lit(0),
            n_len=pl.lit(0),
            sum_x=pl.lit(0.0),
            sum_x2=pl.lit(0.0),
            sum_loglen_a=pl.lit(0.0),
            sum_loglen_b=pl.lit(0.0),
        )
    )
    return conform_pair_cells(cells.to_arrow())  # no style counts


def test_llmfao_matches_evalica_bradley_terry_exactly():
    """Evalica's BT (win + ½·tie matrix, MM iterations, scores normalised to sum 1) on crowd-comparisons.csv."""
    folder = real_data("llmfao")
    crowd = pl.read_csv(folder / "crowd-comparisons.csv")
    golden = pl.read_csv(folder / "evalica_llmfao-golden.csv").filter(pl.col("algorithm") == "bradley_terry")
    fit = fit_naive(_cells_from_verdicts(crowd))
    assert fit.converged and fit.rel_grad < 1e-8
    assert fit.diagnostics["warnings"] == []
    strength = np.exp(fit.rating)
    ours = dict(zip(fit.models, strength / strength.sum(), strict=True))
    assert set(ours) == set(golden["item"].to_list())
    expected = golden["score"].to_numpy()
    actual = np.array([ours[item] for item in golden["item"]])
    np.testing.assert_allclose(actual, expected, rtol=1e-4)
    # The ordering is the golden one too (Evalica's scores are all distinct).
    assert list(np.argsort(-actual)) == list(np.argsort(-expected))


def _two_model_cells(win_a: int, win_b: int, tie: int) -> pa.Table:
    n = win_a + win_b + tie
    return conform_pair_cells(
        pa.table(
            {
                "judge": ["j"],
                "judge_family": ["human"],
                "model_a": ["x"],
                "model_b": ["y"],
                "family_a": ["unknown"],
                "family_b": ["unknown"],
                "len_bin": pa.array([-1], pa.int16()),
                "order_known": [True],
                "category": pa.array([None], pa.string()),
                "language": pa.array([None], pa.string()),
                "n": [n],
                "win_a": [win_a],
                "win_b": [win_b],
                "tie": [tie],
                "tie_bothbad": [0],
                "n_len": [0],
                "sum_x": [0.0],
                "sum_x2": [0.0],
                "sum_loglen_a": [0.0],
                "sum_loglen_b": [0.0],
            }
        )
    )


def test_a_tie_is_half_a_win_for_each_side():
    # 3 wins, 1 loss, 2 ties → x earned 4 points of 6: θx − θy = ln(4/2).
    fit = fit_naive(_two_model_cells(3, 1, 2))
    assert fit.rating[0] - fit.rating[1] == pytest.approx(math.log(2.0), rel=1e-12)
    assert fit.rating.sum() == pytest.approx(0.0, abs=1e-12)


def test_mle_that_does_not_exist_falls_back_to_a_prior_and_says_so():
    fit = fit_naive(_two_model_cells(5, 0, 0))
    assert np.all(np.isfinite(fit.rating))
    assert fit.rating[0] > fit.rating[1]
    assert any("do not exist" in w for w in fit.diagnostics["warnings"])


def test_the_naive_fit_on_pair_totals_is_the_fit_on_every_cell(monkeypatch):
    """The naive likelihood sees only each ordered pair's counts: solved on the cells summed per pair (judges,
    length bins and self-battles together) it gives the ratings, SEs and log-likelihood of the solve on every
    cell, to rounding."""
    from biasboard.ranking import fit as fit_module
    from biasboard.ranking.data import build_dataset

    from tests.test_ranking_model import _cells

    data = build_dataset(_cells(np.random.default_rng(5), models=7, judges=3, cells=400))
    totals = fit_module.pair_totals(data.pairs, len(data.models))
    assert len(totals) < len(data.pairs) and totals.n.sum() == data.pairs.n.sum()
    pooled = fit_naive(data)
    monkeypatch.setattr(fit_module, "pair_totals", lambda pairs, m: pairs)
    every = fit_naive(data)
    np.testing.assert_allclose(pooled.rating, every.rating, rtol=0, atol=1e-12)
    np.testing.assert_allclose(pooled.se, every.se, rtol=1e-10)
    assert pooled.loglik == pytest.approx(every.loglik, rel=1e-13)


def test_naive_intervals_are_the_half_win_sandwich_not_the_laplace():
    """30 wins, 10 losses, 60 ties: p̂ = 0.6, H = n p(1 − p) = 24, and the battles' scores (1 − p, −p, ½ − p)
    square to J = 30·0.16 + 10·0.36 + 60·0.01 = 9, so Var(θx − θy) = J / H² = 1/64 and each centred rating's SE
    is 1/16.  The Laplace SE (1/√96 = 0.102: every tie taken for a coin flip) was 1.6 times too wide."""
    fit = fit_naive(_two_model_cells(30, 10, 60))
    assert fit.rating[0] - fit.rating[1] == pytest.approx(math.log(1.5), rel=1e-10)
    np.testing.assert_allclose(fit.se, [1 / 16, 1 / 16], rtol=1e-8)


def test_genai_arena_naive_board_matches_arena_rank_ratings_and_intervals():
    """GenAI-Arena's anonymous battles among its generation models (one comparison component): the naive ratings
    and 95% interval widths are arena-rank 0.1.1's ``BradleyTerry`` with ``ci_method="sandwich"`` on the same
    battles (ties and both-bad ties as ½; numbers from that package, run outside this project)."""
    from biasboard.importers.common import ImportOptions
    from biasboard.importers.registry import import_path
    from biasboard.schemas.families import FamilyMap
    from biasboard.transforms.cells import partial_cells

    arena_rank = {  # model: (rating, upper − lower)
        "imagenhub_LCM_generation": (849.638, 46.151),
        "imagenhub_OpenJourney_generation": (921.314, 44.675),
        "imagenhub_PixArtAlpha_generation": (1078.404, 48.358),
        "imagenhub_PlayGroundV2_generation": (1151.306, 53.959),
        "imagenhub_SDXLTurbo_generation": (972.132, 44.154),
        "imagenhub_SDXL_generation": (1027.206, 45.415),
    }
    path = real_data("arena-clean-battle-samples", "genai-arena", "clean_battle_20240220.json.gz")
    battles = import_path("fastchat", path, ImportOptions(anony_only=True)).rows
    battles = battles.filter(pa.compute.ends_with(battles["model_a"], "_generation"))
    fit = fit_naive(partial_cells(battles, FamilyMap.with_user_rules()).cells)
    board = {row["model"]: row for row in fit.elo().to_dicts()}
    assert set(board) == set(arena_rank)
    for model, (rating, width) in arena_rank.items():
        assert board[model]["rating"] == pytest.approx(rating, abs=0.01), model
        assert board[model]["ci_high"] - board[model]["ci_low"] == pytest.approx(width, abs=0.02), model
