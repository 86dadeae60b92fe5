"""The FitResult API others call: Elo scale, posterior draws, the side-by-side leaderboard, the bias table,
switched-off effects, bootstrap, connectivity, rank statistics, and clear input errors."""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
from biasboard.ranking import ModelConfig, NaiveConfig, build_dataset, fit_bias_aware, fit_leaderboards, fit_naive
from biasboard.ranking.leaderboard import LEADERBOARD_COLUMNS, side_by_side
from biasboard.ranking.rank_stats import kendall_tau_b, spearman
from biasboard.schemas.cells import PAIR_CELLS_SCHEMA
from biasboard.schemas.errors import InputError
from scipy import stats

SMALL = ModelConfig(profile=False, posterior_draws=400, k=2)


def _cells(rows: list[tuple]) -> pa.Table:
    """rows: (judge, judge_family, model_a, model_b, family_a, family_b, win_a, win_b, tie, bothbad, x)."""
    cols: dict[str, list] = {name: [] for name in PAIR_CELLS_SCHEMA.names}
    for judge, jf, a, b, fa, fb, wa, wb, t, bb, x in rows:
        n = wa + wb + t + bb
        for name, value in zip(
            PAIR_CELLS_SCHEMA.names,
            (
                judge,
                jf,
                a,
                b,
                fa,
                fb,
                0,
                True,
                None,
                None,
                -1,  # style_bin: no style counts
                n,
                wa,
                wb,
                t,
                bb,
                n,
                x * n,
                x * x * n + 0.01 * n,
                5.0 * n,
                (5.0 - x) * n,
                0,  # n_style and the six style sums
                *[0.0] * 6,
            ),
            strict=True,
        ):
            cols[name].append(value)
    return pa.table(cols, schema=PAIR_CELLS_SCHEMA)


def _league(rng: np.random.Generator, models=6, judges=("j1", "j2"), judge_family="google") -> pa.Table:
    """Every ordered pair, 40 battles per judge; models alternate openai/meta families."""
    theta = np.linspace(1.0, -1.0, models)
    rows = []
    for judge in judges:
        for a in range(models):
            for b in range(models):
                x = rng.normal(0, 0.3)
                p = 1 / (1 + np.exp(-(theta[a] - theta[b] + 0.2 * x)))
                wins = rng.binomial(40, p)
                ties = rng.binomial(40 - wins, 0.2)
                rows.append(
                    (
                        judge,
                        judge_family,
                        f"m{a}",
                        f"m{b}",
                        "meta" if a % 2 else "openai",
                        "meta" if b % 2 else "openai",
                        wins,
                        40 - wins - ties,
                        ties // 2,
                        ties - ties // 2,
                        x,
                    )
                )
    return _cells(rows)


def test_elo_scale_mean_and_anchor():
    fit = fit_naive(_league(np.random.default_rng(0)))
    elo = fit.elo()
    assert elo["rating"].mean() == pytest.approx(1000.0, abs=1e-9)
    assert elo["rating"][0] - elo["rating"][1] == pytest.approx(
        400 / math.log(10) * (fit.rating[0] - fit.rating[1]), rel=1e-12
    )
    anchored = fit.elo(anchor="m3")
    row = anchored.filter(pl.col("model") == "m3").row(0, named=True)
    assert row["rating"] == pytest.approx(1000.0) and row["ci_low"] == pytest.approx(1000.0, abs=1e-6)
    with pytest.raises(KeyError):
        fit.elo(anchor="nope")


def test_posterior_samples_match_the_laplace_covariance():
    fit = fit_bias_aware(_league(np.random.default_rng(1)), config=SMALL)
    draws = fit.posterior_samples(20_000, np.random.default_rng(2))
    assert draws.shape == (20_000, fit.n_models)
    np.testing.assert_allclose(draws.mean(axis=0), fit.rating, atol=4 * fit.se.max() / np.sqrt(20_000) * 3)
    np.testing.assert_allclose(draws.std(axis=0), fit.se, rtol=0.05)
    assert np.all(fit.ci_low < fit.rating) and np.all(fit.rating < fit.ci_high)
    assert fit.p_top_k.sum() == pytest.approx(fit.k, abs=1e-9)
    assert fit.p_top_k[0] > 0.5  # m0 is the best by construction


def test_side_by_side_has_exactly_the_design_columns():
    naive, corrected = fit_leaderboards(_league(np.random.default_rng(3)), config=SMALL)
    board = side_by_side(naive, corrected)
    assert tuple(board.columns) == LEADERBOARD_COLUMNS
    assert board.height == 6
    assert board["rank_corrected"].to_list() == sorted(board["rank_corrected"].to_list())
    assert (board["rank_change"] == board["rank_naive"] - board["rank_corrected"]).all()
    assert board["rating_corrected"].mean() == pytest.approx(1000.0)
    assert json.dumps(corrected.diagnostics)  # JSON-serialisable
    assert corrected.diagnostics["naive_vs_corrected"]["kendall_tau"] > 0.5


def test_bias_table_rows_and_switched_off_effects():
    cells = _league(np.random.default_rng(4))
    config = ModelConfig(profile=False, posterior_draws=200, disabled=frozenset({("j1", "length"), ("*", "affinity")}))
    fit = fit_bias_aware(cells, config=config)
    bias = fit.bias
    assert set(bias.columns) >= {"judge", "effect", "estimate", "ci_low", "ci_high", "identified", "enabled", "note"}
    j1_len = bias.filter((pl.col("judge") == "j1") & (pl.col("effect") == "length")).row(0, named=True)
    assert not j1_len["enabled"] and j1_len["estimate"] == 0.0 and "disabled" in j1_len["note"]
    j2_len = bias.filter((pl.col("judge") == "j2") & (pl.col("effect") == "length")).row(0, named=True)
    assert j2_len["enabled"] and j2_len["ci_low"] < j2_len["estimate"] < j2_len["ci_high"]
    assert not bias.filter(pl.col("effect") == "affinity")["enabled"].any()
    share = bias.filter((pl.col("judge") == "*") & (pl.col("effect") == "tie_bothbad_share")).row(0, named=True)
    assert 0.3 < share["estimate"] < 0.7  # half of the ties were bothbad, by construction
    assert bias.filter(pl.col("effect") == "severity")["enabled"].sum() == 0  # no ordinal scores
    with pytest.raises(ValueError, match="not one of"):
        ModelConfig(disabled=frozenset({("j1", "colour")}))


def test_a_board_without_lengths_says_it_is_not_corrected_for_verbosity():
    """Cells whose battles carry no lengths (a file without len_a/len_b) switch the length correction off for every
    judge: the bias table's notes said so row by row and the summary's warnings said nothing.  Now they do; a board
    where one judge has lengths does not warn."""
    from biasboard.ranking.fit import NO_LENGTHS_WARNING

    cells = _league(np.random.default_rng(4))

    def without_lengths(table: pa.Table) -> pa.Table:
        for name in ("n_len", "sum_x", "sum_x2"):
            zeros = pa.array(np.zeros(table.num_rows)).cast(table.schema.field(name).type)
            table = table.set_column(table.schema.get_field_index(name), name, zeros)
        return table.cast(cells.schema)

    assert NO_LENGTHS_WARNING in fit_bias_aware(without_lengths(cells), config=SMALL).diagnostics["warnings"]
    assert NO_LENGTHS_WARNING not in fit_bias_aware(cells, config=SMALL).diagnostics["warnings"]
    j1 = pa.compute.equal(cells.column("judge"), "j1")
    mixed = pa.concat_tables([without_lengths(cells.filter(j1)), cells.filter(pa.compute.invert(j1))])
    assert NO_LENGTHS_WARNING not in fit_bias_aware(mixed, config=SMALL).diagnostics["warnings"]


def test_unidentified_affinity_widens_theta_intervals_honestly():
    """Both judges are of the "meta" family, so s_m is the same for a model in every battle: the affinity
    covariate is constant within each model, so its split from θ is prior-selected and θ's CIs say so."""
    cells = _league(np.random.default_rng(5), judge_family="meta")
    fit = fit_bias_aware(cells, config=ModelConfig(posterior_draws=200))
    assert fit.diagnostics["profile_likelihood"]["affinity"]["range_nats"] < 1e-4
    row = fit.bias.filter((pl.col("judge") == "*") & (pl.col("effect") == "affinity")).row(0, named=True)
    assert not row["identified"] and "prior-selected" in row["note"]
    unaffected = fit_bias_aware(_league(np.random.default_rng(5)), config=ModelConfig(profile=False))
    assert np.all(fit.se > 2 * unaffected.se)


def test_poisson_bootstrap_gives_intervals_near_laplace():
    cells = _league(np.random.default_rng(5))
    fit = fit_bias_aware(cells, config=ModelConfig(profile=False, posterior_draws=200, bootstrap=40, seed=1))
    width_boot = fit.boot_ci_high - fit.boot_ci_low
    width_laplace = fit.ci_high - fit.ci_low
    assert np.all(np.isfinite(width_boot))
    assert 0.6 < np.median(width_boot / width_laplace) < 1.5
    assert fit.bias["boot_ci_low"].is_not_nan().sum() > 0
    naive = fit_naive(cells, config=NaiveConfig(bootstrap=10))
    assert naive.boot_ci_low is not None and np.all(naive.boot_ci_low <= naive.boot_ci_high)


def test_disconnected_components_are_named_and_not_ranked_across():
    rows = [
        ("j", "meta", "a1", "a2", "x", "x", 5, 3, 1, 0, 0.0),
        ("j", "meta", "a2", "a3", "x", "x", 4, 4, 1, 0, 0.0),
        ("j", "meta", "a3", "a1", "x", "x", 2, 5, 1, 0, 0.0),
        ("j", "meta", "b1", "b2", "x", "x", 6, 2, 0, 0, 0.0),
        ("j", "meta", "b2", "b1", "x", "x", 3, 4, 1, 0, 0.0),
    ]
    for fitter in (
        lambda c: fit_naive(c, config=NaiveConfig(k=1)),
        lambda c: fit_bias_aware(c, config=ModelConfig(profile=False, k=1)),
    ):
        fit = fitter(_cells(rows))
        assert fit.diagnostics["n_components"] == 2
        assert fit.diagnostics["components"][1] == ["b1", "b2"]
        assert any("disconnected" in w and "b1, b2" in w for w in fit.diagnostics["warnings"])
        # top-1 within each component: probabilities sum to 1 in each.
        comp = fit.component
        for c in (0, 1):
            assert fit.p_top_k[comp == c].sum() == pytest.approx(1.0)


def test_rank_statistics_match_scipy():
    rng = np.random.default_rng(7)
    x, y = rng.normal(size=30), rng.normal(size=30)
    y[:5] = y[5]  # ties
    assert kendall_tau_b(x, y) == pytest.approx(stats.kendalltau(x, y).statistic)
    assert spearman(x, y) == pytest.approx(stats.spearmanr(x, y).statistic)
    assert kendall_tau_b(x, x) == pytest.approx(1.0)
    assert math.isnan(kendall_tau_b(x, np.ones(30)))


@pytest.mark.parametrize("n", [2, 3, 4, 5, 9, 40])
def test_rank_correlations_of_a_perfect_agreement_are_exactly_one(n):
    """Two boards in the same (or the reverse) order: τ-b and ρ are exactly ±1, never one ulp off (a two-model slice
    published τ = 0.9999999999999999 and three models 1.0000000000000002), also with ties and within groups."""
    rng = np.random.default_rng(n)
    x = rng.normal(size=n)
    tied = np.where(np.arange(n) % 3 == 0, x[0], x)  # a third of the scores one tie (when n > 3)
    for a, b in ((x, 2 * x + 1), (tied, tied**3 + 1)):
        assert (kendall_tau_b(a, b), spearman(a, b)) == (1.0, 1.0)
        assert (kendall_tau_b(a, -b), spearman(a, -b)) == (-1.0, -1.0)
    groups = np.arange(n) % 2
    if n >= 4:
        assert (kendall_tau_b(x, x, groups), spearman(x, x, groups)) == (1.0, 1.0)


def test_spearman_within_groups_of_different_sizes_is_the_pooled_within_group_correlation():
    """Ranks within a group of 7 average 4, within one of 5, 3: pooled around one mean, that difference agreed with
    itself and two components each in exactly the reverse order read ρ = −0.857; singletons (a graded-only model,
    alone on the naive board) pulled 20 reversed models to −0.477.  Centred within each group, ρ is −1, as τ is,
    and with groups of one size it equals the mean-free pooled scipy value."""
    x = np.r_[np.arange(7.0), np.arange(5.0) + 100]
    groups = np.r_[np.zeros(7, int), np.ones(5, int)]
    assert (kendall_tau_b(x, -x, groups), spearman(x, -x, groups)) == (-1.0, -1.0)
    x, y = np.r_[np.arange(20.0), 0, 0, 0], np.r_[-np.arange(20.0), 5, 6, 7]
    assert spearman(x, y, np.r_[np.zeros(20, int), 1, 2, 3]) == -1.0
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=12), rng.normal(size=12)
    halves = np.arange(12) // 6
    expected = stats.pearsonr(
        np.r_[stats.rankdata(a[:6]), stats.rankdata(a[6:])], np.r_[stats.rankdata(b[:6]), stats.rankdata(b[6:])]
    ).statistic
    assert spearman(a, b, halves) == pytest.approx(expected, rel=1e-12)


def test_rank_correlations_stay_inside_minus_one_to_one_and_match_scipy():
    """Random boards with many ties: every τ-b and ρ is within [-1, 1] and equals scipy's to 1e-12."""
    rng = np.random.default_rng(12)
    for _ in range(200):
        n = int(rng.integers(2, 30))
        x, y = rng.integers(0, 5, size=n).astype(float), rng.integers(0, 5, size=n).astype(float)
        if np.ptp(x) == 0 or np.ptp(y) == 0:
            continue
        tau, rho = kendall_tau_b(x, y), spearman(x, y)
        assert -1.0 <= tau <= 1.0 and -1.0 <= rho <= 1.0
        assert tau == pytest.approx(stats.kendalltau(x, y).statistic, rel=1e-12, abs=1e-12)
        assert rho == pytest.approx(stats.spearmanr(x, y).statistic, rel=1e-12, abs=1e-12)


def test_bad_cells_raise_input_errors_naming_the_column():
    good = _league(np.random.default_rng(8))
    with pytest.raises(InputError, match="missing column"):
        fit_naive(good.drop_columns(["win_a"]))
    broken = good.set_column(good.schema.get_field_index("n"), "n", pa.array(np.ones(good.num_rows, np.int64)))
    with pytest.raises(InputError, match="column n"):
        fit_naive(broken)
    with pytest.raises(InputError, match="no battles"):
        fit_naive(good.slice(0, 0))


def test_warm_chord_bootstrap_matches_cold_refits():
    """Replicates refit from the MAP with its factorised Hessian land where cold-started fits do."""
    from biasboard.ranking.fit import bootstrap_replicates, solve_bias_aware
    from biasboard.ranking.problem import bias_aware_problem
    from biasboard.ranking.uncertainty import percentile_interval

    config = ModelConfig(profile=False)
    problem = bias_aware_problem(build_dataset(_league(np.random.default_rng(5), judges=("j1", "j2", "j3"))), config)
    solution = solve_bias_aware(problem, config)
    runs = [
        bootstrap_replicates(problem, solution, 8, 1, 2, config.tol, config.max_iter, mode=mode)
        for mode in ("fast", "cold")
    ]
    (warm_theta, warm_core, _), (cold_theta, cold_core, _) = runs
    assert np.ptp(warm_theta, axis=0).min() > 1e-3  # the replicates differ: the comparison is not vacuous
    assert np.max(np.abs(warm_core - cold_core)) < 1e-7
    for warm, cold in zip(percentile_interval(warm_theta), percentile_interval(cold_theta), strict=True):
        assert np.max(np.abs(warm - cold)) < 1e-7


def test_dictionary_encoded_and_streamed_cells_give_the_same_dataset(tmp_path):
    """Plain strings, dictionary-encoded columns and a Parquet stream of small batches code identically."""
    import pyarrow.parquet as pq
    from biasboard.ranking.data import _FIT_PAIR_KEYS, read_cells

    cells = _league(np.random.default_rng(3), models=5, judges=("j2", "j1"))
    cells = cells.take(np.random.default_rng(0).permutation(cells.num_rows))  # not in key order
    path = tmp_path / "cells.parquet"
    pq.write_table(cells, path, row_group_size=7)
    encoded = pa.table(
        {
            name: (col.dictionary_encode() if pa.types.is_string(col.type) else col)
            for name, col in zip(cells.column_names, cells.columns, strict=True)
        }
    )
    plain = build_dataset(cells)
    # In key order, one table: the coded columns view its (read-only) buffers and are never written into.
    ordered = cells.sort_by([(key, "ascending") for key in _FIT_PAIR_KEYS])
    for other in (
        build_dataset(encoded),
        build_dataset(read_cells(path, batch_rows=5)),
        build_dataset([cells.slice(0, 30), cells.slice(30)]),
        build_dataset(ordered),
    ):
        assert other.models == plain.models and other.judges == plain.judges
        assert other.judge_families == plain.judge_families
        for name in plain.pairs.__dataclass_fields__:
            np.testing.assert_array_equal(getattr(other.pairs, name), getattr(plain.pairs, name))
    with pytest.raises(InputError, match="column judge has 1 null"):
        build_dataset(cells.set_column(0, "judge", pa.array([None] + ["j1"] * (cells.num_rows - 1), pa.string())))


def test_names_sort_as_python_strings_across_batches():
    """Judge names coded batch by batch (each batch its own dictionary, names repeated across batches) come out
    distinct and in Python's order of str, non-ASCII included (Arrow sorts UTF-8 bytes), each cell with its own
    judge."""
    names = ("é", "z", "ä", "Z", "a", "😀", "ß", "a b", "ab")
    cells = _league(np.random.default_rng(5), models=3, judges=names)
    batches = cells.to_batches(max_chunksize=7)  # 9 cells a judge: batches share and split judges
    data = build_dataset(batches)
    assert data.judges == tuple(sorted(names))
    plain = build_dataset(cells)
    assert plain.judges == data.judges
    for name in plain.pairs.__dataclass_fields__:
        np.testing.assert_array_equal(getattr(data.pairs, name), getattr(plain.pairs, name))
    # Each cell's judge code names its judge: the per-judge battle counts follow the names.
    n = np.bincount(data.pairs.j, weights=data.pairs.n, minlength=len(names))
    expected = pl.from_arrow(cells).group_by("judge").agg(pl.col("n").sum()).sort("judge")
    assert dict(zip(data.judges, n, strict=True)) == dict(expected.iter_rows())


def test_rank_statistics_on_a_split_board_count_pairs_within_a_component_only(monkeypatch):
    """Ratings of two components are each centred on their own: τ-b counts the pairs within one (the definition,
    checked by brute force over pairs), Spearman ranks within one, and neither moves when one component shifts."""
    from biasboard.ranking import rank_stats

    monkeypatch.setattr(rank_stats, "_TAU_BLOCK", 5)
    rng = np.random.default_rng(4)
    groups = np.repeat([0, 1, 2], [6, 9, 4])
    x, y = rng.normal(size=19).round(1), rng.normal(size=19).round(1)
    pairs = [(i, j) for i in range(19) for j in range(i + 1, 19) if groups[i] == groups[j]]
    sx = np.array([np.sign(x[i] - x[j]) for i, j in pairs])
    sy = np.array([np.sign(y[i] - y[j]) for i, j in pairs])
    expected = (sx * sy).sum() / np.sqrt(np.count_nonzero(sx) * np.count_nonzero(sy))
    assert kendall_tau_b(x, y, groups) == pytest.approx(expected, rel=1e-12)
    shifted = x + 5.0 * (groups == 1)
    assert kendall_tau_b(shifted, y, groups) == kendall_tau_b(x, y, groups)
    assert kendall_tau_b(shifted, y) != pytest.approx(kendall_tau_b(x, y))  # pooled: the offset counts
    assert spearman(shifted, y, groups) == pytest.approx(spearman(x, y, groups), rel=1e-12)
    assert kendall_tau_b(x, y, np.zeros(19, int)) == pytest.approx(stats.kendalltau(x, y).statistic, rel=1e-12)
    assert spearman(x, y, np.zeros(19, int)) == pytest.approx(stats.spearmanr(x, y).statistic, rel=1e-12)


def test_rank_statistics_match_scipy_with_heavy_ties_and_blocks(monkeypatch):
    """Many ties and more rows than one block of the pairwise sign matrices; ranks as scipy's rankdata."""
    from biasboard.ranking import rank_stats

    monkeypatch.setattr(rank_stats, "_TAU_BLOCK", 7)
    rng = np.random.default_rng(11)
    x, y = rng.integers(0, 6, size=50).astype(float), rng.normal(size=50).round(1)
    assert kendall_tau_b(x, y) == pytest.approx(stats.kendalltau(x, y).statistic, rel=1e-12)
    assert spearman(x, y) == pytest.approx(stats.spearmanr(x, y).statistic, rel=1e-12)
    assert (rank_stats.ranks_desc(y) == stats.rankdata(-y, method="min")).all()
    assert math.isnan(spearman(x, np.full(50, 2.0)))


def test_scores_a_few_ulps_apart_are_ties_in_ranks_and_rank_correlations():
    """A fit rates two models with the same record a few ulps apart (AlpacaEval 2's naive board: four such pairs,
    5.6e-17 to 7.2e-16 logits apart), which ranked them 16th and 17th and counted the pair as ordered in τ
    (0.725348 against 0.725401 on the ties).  They are one value now, as scipy sees exact ties."""
    from biasboard.ranking import rank_stats
    from biasboard.ranking.rank_stats import ranks_within

    exact = np.array([0.18701347831793463, 0.18701347831793463, -0.05236286373871902, 0.9, -0.4])
    noisy = exact + np.array([5.551115123125783e-17, 0.0, 2.42861286636753e-16, 0.0, 0.0])
    other = np.array([0.3, 0.1, 0.2, 0.8, -0.2])
    assert (rank_stats.ranks_desc(noisy) == [2, 2, 4, 1, 5]).all()
    assert (ranks_within(noisy, np.array([0, 0, 0, 0, 1])) == [2, 2, 4, 1, 1]).all()
    assert kendall_tau_b(noisy, other) == pytest.approx(stats.kendalltau(exact, other).statistic, rel=1e-12)
    assert spearman(noisy, other) == pytest.approx(stats.spearmanr(exact, other).statistic, rel=1e-12)
    assert kendall_tau_b(noisy, other) != pytest.approx(stats.kendalltau(noisy, other).statistic, rel=1e-9)
    apart = np.array([0.1, 0.1 + 1e-6, 0.3])  # 1e-6 logits: a difference, however small
    assert (rank_stats.ranks_desc(apart) == [3, 2, 1]).all()
