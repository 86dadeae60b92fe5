"""A split comparison graph: each component's θ identified on its own, ranks/CIs/P(top-k) within it.

Two groups of models that never meet (like GenAI-Arena's two groups): before, the naive fit fell back to
a wide prior and every CI spanned the offset between the groups (±900 Elo), one rank ran across both
groups and every P(top-k) was 1.  Here the offset is not identified and is not published.
"""

from __future__ import annotations

import unicodedata

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from biasboard.ranking import ModelConfig, fit_leaderboards
from biasboard.ranking.leaderboard import side_by_side, top_k_warnings
from biasboard.ranking.rank_stats import kendall_tau_b
from biasboard.report.text import side_by_side_text

from tests.test_ranking_model import _cells


def _split_cells(seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    first = _cells(rng, models=6, judges=3, cells=400)
    second = _cells(rng, models=5, judges=3, cells=300)
    for name in ("model_a", "model_b"):
        column = pc.replace_substring(second[name], "m", "x")
        second = second.set_column(second.schema.get_field_index(name), second.schema.field(name), column)
    return pa.concat_tables([first, second])


def _connected_widths(seed: int = 0) -> float:
    naive, _ = fit_leaderboards(
        _cells(np.random.default_rng(seed), models=6, judges=3, cells=400),
        config=ModelConfig(profile=False, k=2, posterior_draws=500),
    )
    return float(np.max(naive.ci_high - naive.ci_low))


def test_two_components_are_ranked_and_centred_on_their_own():
    naive, corrected = fit_leaderboards(_split_cells(), config=ModelConfig(profile=False, k=2, posterior_draws=500))
    board = side_by_side(naive, corrected)
    assert sorted(set(board["component"].to_list())) == [0, 1]
    for fit in (naive, corrected):
        assert set(np.unique(fit.component)) == {0, 1}
        for c in (0, 1):
            members = fit.component == c
            assert abs(fit.rating[members].mean()) < 1e-9  # sum to zero within each component
            # P(top-2) within each component: exactly 2 places to share.
            assert abs(fit.p_top_k[members].sum() - 2.0) < 1e-9
        # No CI spans the (unidentified) offset between the groups: as narrow as a connected board's.
        assert np.max(fit.ci_high - fit.ci_low) < 3.0 * _connected_widths()
    for c in (0, 1):
        part = board.filter(board["component"] == c)
        assert sorted(part["rank_corrected"].to_list()) == list(range(1, part.height + 1))
        assert sorted(part["rank_naive"].to_list()) == list(range(1, part.height + 1))
    # The naive board no longer needs a fallback prior: each component has its own gauge.
    assert naive.diagnostics["prior_theta_sd"] is None
    split = [w for w in naive.diagnostics["warnings"] + corrected.diagnostics["warnings"] if "disconnected" in w]
    assert len(set(split)) == 1
    # τ naive vs corrected over the pairs within a component (across, the centres' offset would count)
    tau = corrected.diagnostics["naive_vs_corrected"]["kendall_tau"]
    assert tau == kendall_tau_b(naive.rating, corrected.rating, naive.component)
    within = [kendall_tau_b(naive.rating[naive.component == c], corrected.rating[naive.component == c]) for c in (0, 1)]
    assert min(within) - 1e-12 <= tau <= max(within) + 1e-12


def test_connected_board_has_one_component_column():
    naive, corrected = fit_leaderboards(
        _cells(np.random.default_rng(1), models=6, judges=3, cells=300),
        config=ModelConfig(profile=False, posterior_draws=200),
    )
    board = side_by_side(naive, corrected)
    assert board["component"].to_list() == [0] * board.height
    assert board["rank_corrected"].to_list() == list(range(1, board.height + 1))


def test_bootstrap_intervals_are_the_published_ones():
    """With bootstrap replicates the CIs, P(top-k) and rank intervals come from them (and say so)."""
    cells = _cells(np.random.default_rng(2), models=6, judges=3, cells=400)
    naive, fit = fit_leaderboards(cells, config=ModelConfig(profile=False, bootstrap=20, k=2, posterior_draws=500))
    for result in (naive, fit):
        assert result.uncertainty == "bootstrap"
        np.testing.assert_array_equal(result.ci_low, result.boot_ci_low)
        np.testing.assert_array_equal(result.ci_high, result.boot_ci_high)
        boot = result.boot_theta
        assert boot.shape == (20, 6)
        top = np.argsort(-boot, axis=1)[:, :2]
        expected = np.bincount(top.ravel(), minlength=6) / 20
        np.testing.assert_allclose(result.p_top_k, expected)
    board = side_by_side(naive, fit)
    elo = fit.elo()
    expected_low = 1000 + 400 / np.log(10) * np.percentile(fit.boot_theta, 2.5, axis=0, method="weibull")
    np.testing.assert_allclose(elo["ci_low"].to_numpy(), expected_low)
    row = board.filter(board["model"] == fit.models[0]).row(0, named=True)
    assert abs(row["ci_low_corrected"] - expected_low[0]) < 1e-9
    low, high = fit.rank_interval(0.95)
    assert np.all(low <= high)
    # The replicates redraw battles, not judges: per-judge effects get a bootstrap interval, the mean over judges
    # ('*' rows) only its Laplace one (the bootstrap's was ~15x narrower and missed the hyper-mean).
    rows = fit.bias.filter(pl.col("enabled") & pl.col("effect").is_in(["position", "length"]))
    judges, overall = rows.filter(pl.col("judge") != "*"), rows.filter(pl.col("judge") == "*")
    assert judges.height and judges["boot_ci_low"].is_finite().all() and judges["boot_ci_high"].is_finite().all()
    assert overall.height == 2 and overall["boot_ci_low"].is_nan().all() and overall["ci_low"].is_finite().all()


def test_terminal_view_prints_each_component_with_its_own_ranks():
    """refresh's printed board: a list mixing the components put their two number-1 models under ranks 1 and 2."""
    naive, corrected = fit_leaderboards(_split_cells(), config=ModelConfig(profile=False, k=2, posterior_draws=500))
    board = side_by_side(naive, corrected)
    text = side_by_side_text(board, top=10)
    blocks = text.split("\n-- component ")[1:]
    assert [b.split(":")[0] for b in blocks] == ["0", "1"]
    for c, block in enumerate(blocks):
        part = board.filter(board["component"] == c).sort("rank_corrected", "model")
        rows = block.splitlines()[1:]
        assert [int(r.split()[0]) for r in rows] == list(range(1, part.height + 1))
        assert [r.split()[-3] for r in rows] == part["model"].to_list()  # the corrected column, in its order
    one = side_by_side(*fit_leaderboards(_split_cells().slice(0, 400), config=ModelConfig(profile=False, k=2)))
    assert "component" not in side_by_side_text(one, top=10)


def test_terminal_view_prints_the_published_ranks_of_tied_models():
    """Two models with one rating share a rank in the leaderboard; the printed board numbered its rows, so they read 1
    and 2, and a side whose ties differ from the other's showed ranks that were neither side's."""
    board = pl.DataFrame(
        {
            "model": ["mx", "my", "mz", "mw"],
            "rating_naive": [1100.0, 1100.0, 1000.0, 900.0],
            "rating_corrected": [1090.0, 1080.0, 1000.0, 1000.0],
            "rank_naive": [1, 1, 3, 4],
            "rank_corrected": [1, 2, 3, 3],
            "rank_change": [0, -1, 0, 1],
        }
    )
    rows = [line.split() for line in side_by_side_text(board, top=4).splitlines()[2:]]
    assert [(r[0], r[1]) for r in rows] == [("1", "mx"), ("1", "my"), ("3", "mz"), ("4", "mw")]
    assert [(r[3], r[4]) for r in rows] == [("1", "mx"), ("2", "my"), ("3", "mw"), ("3", "mz")]


def test_a_model_seen_only_in_self_battles_is_left_off_the_board_and_named():
    """A model whose only battles are against itself links to no other model: its rating is its own component's
    centre by definition.  It used to be published as rank 1 with a zero-width CI and P(top-k) = 1."""
    cells = _cells(np.random.default_rng(3), models=6, judges=3, cells=400)
    alone = cells.slice(0, 1)
    for name in ("model_a", "model_b"):
        alone = alone.set_column(alone.schema.get_field_index(name), alone.schema.field(name), pa.array(["lonely"]))
    naive, corrected = fit_leaderboards(
        pa.concat_tables([cells, alone]), config=ModelConfig(profile=False, k=2, posterior_draws=200)
    )
    assert "lonely" in corrected.models  # fitted (its self-battle informs the judge's effects), not ranked
    board = side_by_side(naive, corrected)
    assert "lonely" not in board["model"].to_list() and board.height == 6
    assert board["component"].to_list() == [0] * 6
    assert sorted(board["rank_corrected"].to_list()) == list(range(1, 7))
    for fit in (naive, corrected):
        assert fit.diagnostics["unranked"] == ["lonely"]
        warnings = fit.diagnostics["warnings"]
        assert any("left off the leaderboard: lonely" in w for w in warnings), warnings
        assert not any("disconnected components" in w for w in warnings), warnings  # no split beyond it


def test_few_bootstrap_replicates_are_published_with_a_warning():
    """Percentile intervals of a handful of replicates can miss their own rating (one replicate: a zero-width
    interval at that replicate's value); the fit says so instead of publishing them silently."""
    cells = _cells(np.random.default_rng(2), models=6, judges=3, cells=400)
    for replicates, warned in ((1, True), (20, True), (100, False)):
        naive, fit = fit_leaderboards(cells, config=ModelConfig(profile=False, bootstrap=replicates, k=2))
        for result in (naive, fit):
            assert result.uncertainty == "bootstrap"
            flagged = [w for w in result.diagnostics["warnings"] if "bootstrap replicate(s)" in w]
            assert bool(flagged) == warned, (replicates, result.diagnostics["warnings"])
    naive, fit = fit_leaderboards(cells, config=ModelConfig(profile=False, k=2))
    assert not any("bootstrap" in w for w in naive.diagnostics["warnings"] + fit.diagnostics["warnings"])


def test_a_k_as_large_as_the_ranked_group_is_published_with_a_warning():
    """P(top k) is 1 for every model of a group of at most k models: the summary says so rather than print 1.00s."""
    naive, corrected = fit_leaderboards(_split_cells(), config=ModelConfig(profile=False, k=6, posterior_draws=200))
    board = side_by_side(naive, corrected)
    largest = board.filter(pl.col("component") == 0)
    assert largest.height == 6 and largest["p_top_k"].to_list() == [1.0] * 6  # what the warning claims
    (warning,) = top_k_warnings(6, board)
    assert warning.startswith("--k 6: the board's largest group ranks only 6 models together")
    assert top_k_warnings(5, board) == []
    connected = side_by_side(*fit_leaderboards(_split_cells().slice(0, 400), config=ModelConfig(profile=False, k=9)))
    assert top_k_warnings(9, connected)[0].startswith("--k 9: the board ranks only 6 models together")
    two = board.filter(pl.col("component") == 0).head(2)  # (read 'a k below 2 tells the models apart')
    assert top_k_warnings(2, two) == ["--k 2: the board ranks only 2 models together, so every P(top 2) is 1; --k 1 "
                                      "tells the two apart"]  # fmt: skip


def test_terminal_view_keeps_its_columns_with_wide_model_names():
    """A CJK model name is two terminal columns a character: padded by its length in characters it pushed its row's
    ratings out of their column (the QA pass).  Each column now ends at the same terminal column on every row."""

    def columns(text: str) -> int:  # terminal columns: East Asian wide / full-width characters take two
        return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)

    board = pl.DataFrame(
        {
            "model": ["通义千问-72B", "gpt-4", "Llama-2-70b-chat-hf-long-name"],
            "rating_naive": [1100.0, 1050.0, 1000.0],
            "rating_corrected": [1090.0, 1060.0, 1000.0],
            "rank_naive": [1, 2, 3],
            "rank_corrected": [1, 2, 3],
            "rank_change": [0, 0, 0],
        }
    )
    rows = side_by_side_text(board, top=3).splitlines()[2:]
    assert len(rows) == 3
    naive = [str(int(r)) for r in board["rating_naive"]]
    assert len({columns(row[: row.index(r) + len(r)]) for row, r in zip(rows, naive, strict=True)}) == 1, rows
    assert len({columns(row) for row in rows}) == 1, rows


def test_a_rating_the_verdicts_do_not_bound_is_named_on_the_corrected_board():
    """A model that never loses has no maximum-likelihood rating.  The naive board said so and fell back to a prior;
    the corrected board, whose N(0, 2²) prior keeps it finite, published its rating and interval with no word (a
    model winning its two battles: 1195 [883, 1507]).  It now names the model; a board where every model wins and
    loses says nothing."""
    cells = pl.from_arrow(_cells(np.random.default_rng(2), models=6, judges=3, cells=400))
    assert not any("put no bound" in w for w in fit_leaderboards(cells.to_arrow())[1].diagnostics["warnings"])
    other = pl.col("model_a") != pl.col("model_b")
    as_a, as_b = (pl.col("model_a") == "m5") & other, (pl.col("model_b") == "m5") & other  # m5 always loses
    given = pl.col("win_a") + pl.col("win_b") + pl.col("tie") + pl.col("tie_bothbad")
    unbeaten = cells.with_columns(
        pl.when(as_a).then(0).when(as_b).then(given).otherwise(pl.col("win_a")).alias("win_a"),
        pl.when(as_b).then(0).when(as_a).then(given).otherwise(pl.col("win_b")).alias("win_b"),
        *(pl.when(as_a | as_b).then(0).otherwise(pl.col(c)).alias(c) for c in ("tie", "tie_bothbad")),
    )
    naive, corrected = fit_leaderboards(unbeaten.to_arrow(), config=ModelConfig(profile=False))
    (said,) = [w for w in corrected.diagnostics["warnings"] if "put no bound" in w]
    assert said.startswith("corrected board: m5 never wins or never loses") and "N(0, 2^2) prior" in said, said
    assert any("maximum-likelihood ratings do not exist" in w for w in naive.diagnostics["warnings"])


@pytest.mark.parametrize("solver", ["dense", "blocked"])
def test_a_judge_that_never_ties_or_always_ties_has_a_prior_set_tie_propensity(solver):
    """Never tying, judge-1's tie propensity has its maximum-likelihood value at 0 (and always tying, judge-2's at
    infinity): 0.0056 [0.0012, 0.027] and 656 [156, 2764] were published as identified.  They are not, and say why;
    judge-0, which ties sometimes, is identified as before.  Both solvers' tables agree."""
    cells = pl.from_arrow(_cells(np.random.default_rng(4), models=6, judges=3, cells=600))
    never, always = pl.col("judge") == "judge-1", pl.col("judge") == "judge-2"
    every = pl.col("win_a") + pl.col("win_b") + pl.col("tie") + pl.col("tie_bothbad")
    bounded = cells.with_columns(
        pl.when(never).then(pl.col("win_a") + pl.col("tie") + pl.col("tie_bothbad")).when(always).then(0)
        .otherwise(pl.col("win_a")).alias("win_a"),
        pl.when(always).then(0).otherwise(pl.col("win_b")).alias("win_b"),
        pl.when(never).then(0).when(always).then(every).otherwise(pl.col("tie")).alias("tie"),
        pl.when(never | always).then(0).otherwise(pl.col("tie_bothbad")).alias("tie_bothbad"),
    )  # fmt: skip
    fit = fit_leaderboards(bounded.to_arrow(), config=ModelConfig(profile=False, judge_solver=solver))[1]
    tie = fit.bias.filter(pl.col("effect") == "tie").sort("judge")
    assert tie["identified"].to_list() == [True, False, False]
    notes = tie["note"].to_list()
    assert notes[1].startswith("no tie among this judge's verdicts") and notes[2].startswith("every verdict")
    assert tie["estimate"][1] < 0.05 and tie["estimate"][2] > 20


def test_a_model_with_grades_but_no_battle_is_ranked_by_the_corrected_board_with_empty_naive_columns():
    """m6 and m7 have grades and no battle.  Their component was taken from the battles alone, so they were left off
    the leaderboard as having "only self-battles" (they have none), though the corrected fit rates them from their
    grades.  They are ranked now, their naive columns empty (the naive board of battles does not rate them), and the
    naive board says why; two groups linked by grades alone are one group."""
    from tests.test_ranking_model import _score_cells

    rng = np.random.default_rng(3)
    battles, grades = _cells(rng, models=6, judges=3, cells=400), _score_cells(rng, models=8, rows=400)
    naive, corrected = fit_leaderboards(battles, grades, config=ModelConfig(profile=False))
    board = side_by_side(naive, corrected)
    graded_only = board.filter(pl.col("model").is_in(["m6", "m7"]))
    assert graded_only.height == 2 and (graded_only["component"] == 0).all()
    assert graded_only["rank_naive"].null_count() == 2 and graded_only["rating_naive"].null_count() == 2
    assert graded_only["rank_corrected"].null_count() == 0 and board.height == 8
    assert not any("only self-battles" in w for w in naive.diagnostics["warnings"] + corrected.diagnostics["warnings"])
    (said,) = [w for w in naive.diagnostics["warnings"] if "have grades but no battle" in w]
    assert said.endswith("m6, m7")
    assert "m6" in side_by_side_text(board, 10)


def test_at_omega_1_a_graded_only_model_left_off_the_board_is_not_said_to_have_only_self_battles():
    """ω = 1 drops the grades, so m6 and m7 (graded, in no battle) are left off the corrected board; its warning said
    they "have only self-battles", though they are in no battle at all.  It says so now, and why they are unrated."""
    from tests.test_ranking_model import _score_cells

    rng = np.random.default_rng(3)
    battles, grades = _cells(rng, models=6, judges=3, cells=400), _score_cells(rng, models=8, rows=400)
    corrected = fit_leaderboards(battles, grades, config=ModelConfig(profile=False, omega=1.0))[1]
    warnings = corrected.diagnostics["warnings"]
    assert not any("only self-battles" in w for w in warnings), warnings
    (said,) = [w for w in warnings if "left off the leaderboard" in w]
    assert said.startswith("2 model(s) are in no battle") and "ω = 1" in said and said.endswith("m6, m7"), said


def test_a_model_with_grades_but_no_battle_has_no_naive_rank_interval():
    """The leaderboard leaves a graded-only model's naive rank empty, but the summary's rank intervals ranked it on
    the naive side alone in its component: "rank 1, interval 1" in summary.json, and the report's naive "Rank 95%
    interval" read 1 beside an empty naive rank."""
    from biasboard.transforms.ranks import rank_intervals

    from tests.test_ranking_model import _score_cells

    rng = np.random.default_rng(3)
    battles, grades = _cells(rng, models=6, judges=3, cells=400), _score_cells(rng, models=8, rows=400)
    naive, corrected = fit_leaderboards(battles, grades, config=ModelConfig(profile=False))
    board = side_by_side(naive, corrected)
    ranks = rank_intervals(naive, corrected, seed=0)
    naive_ranked = board.filter(pl.col("rank_naive").is_not_null())
    assert sorted(r.model for r in ranks.naive) == sorted(naive_ranked["model"].to_list())  # not m6, m7
    assert {r.model: r.rank for r in ranks.naive} == dict(naive_ranked.select("model", "rank_naive").iter_rows())
    assert sorted(r.model for r in ranks.corrected) == sorted(board["model"].to_list())  # m6, m7 ranked there


def test_a_graded_only_model_does_not_move_the_models_it_outranks():
    """A model graded but never in a battle is rated by the corrected board alone.  Counted in the move, it pushed
    every corrected rank below it down one: each model read "-1" for a move nobody made, and one that passed a naive
    rival read "=" (a refresh of battles and grades with one graded-only model: all eight moves off by one, beside
    a Kendall tau of 1).  The move is counted among the models both boards rank."""
    from tests.test_ranking_model import _score_cells

    rng = np.random.default_rng(3)
    battles, grades = _cells(rng, models=6, judges=3, cells=400), _score_cells(rng, models=8, rows=400)
    naive, corrected = fit_leaderboards(battles, grades, config=ModelConfig(profile=False))
    board = side_by_side(naive, corrected)
    both = board.filter(pl.col("rank_naive").is_not_null())
    assert both.height == 6 and board.height == 8
    among_both = both.with_columns(pl.col("rating_corrected").rank("min", descending=True).cast(pl.Int64).alias("r"))
    expected = dict(among_both.select("model", pl.col("rank_naive") - pl.col("r")).iter_rows())
    assert dict(both.select("model", "rank_change").iter_rows()) == expected
    graded_only = board.filter(pl.col("rank_naive").is_null())
    assert graded_only["rank_change"].null_count() == 2
    assert graded_only["rank_corrected"].min() < both["rank_corrected"].max()  # they sit among the others' ranks


def test_the_naive_vs_corrected_comparison_leaves_out_the_models_the_naive_board_does_not_rate():
    """A graded-only model is its own component on the naive side, rated at that component's centre by definition.
    Kept in the comparison it was a group of one, ranked 1 within it on both sides: a perfect agreement added to ρ
    (0.857 -> 0.887 on a refresh of 8 models and one graded-only model) and one model to ``n_models``."""
    from biasboard.ranking.diagnostics import compare_rankings
    from biasboard.ranking.rank_stats import spearman

    from tests.test_ranking_model import _score_cells

    rng = np.random.default_rng(3)
    battles, grades = _cells(rng, models=6, judges=3, cells=400), _score_cells(rng, models=8, rows=400)
    naive, corrected = fit_leaderboards(battles, grades, config=ModelConfig(profile=False))
    board = side_by_side(naive, corrected).filter(pl.col("rank_naive").is_not_null())
    compared = compare_rankings(naive, corrected.rating, corrected.models)
    assert compared["n_models"] == board.height == 6
    x, y = board["rating_naive"].to_numpy(), board["rating_corrected"].to_numpy()
    assert compared["spearman"] == pytest.approx(spearman(x, y))
    assert compared["kendall_tau"] == pytest.approx(kendall_tau_b(x, y))


def test_rank_intervals_of_a_weighted_fit_name_the_godambe_draws():
    """With grades at ω ∉ {0.5, 1} the corrected draws come from the Godambe sandwich (``ranking/composite.py``),
    which the report's interval note names, but the rank-interval note said "2,000 Laplace posterior draws"."""
    from biasboard.transforms.ranks import rank_intervals

    from tests.test_ranking_model import _score_cells

    rng = np.random.default_rng(3)
    battles, grades = _cells(rng, models=6, judges=3, cells=400), _score_cells(rng, models=6, rows=400)
    for omega, source in ((0.8, "draws from the Godambe (sandwich) covariance"), (0.5, "Laplace posterior draws")):
        naive, corrected = fit_leaderboards(battles, grades, config=ModelConfig(profile=False, omega=omega))
        assert rank_intervals(naive, corrected, seed=0).source == source, omega
