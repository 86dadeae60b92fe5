"""Ordinal-only boards: ``refresh --scores`` without battles (issue 12.6), end to end.

The corrected board is the partial-credit many-facet model alone (model quality, judge severity, prompt
difficulty); the naive board pools every grade of a model over judges and prompts, so it ranks models as
their mean grade category does (what MT-Bench and Arena-Bench publish).  Pair-only parts (position, length,
affinity, the audit, head to head) are skipped, and options that need battles are refused in one line.

Bounds used below, measured with :func:`_grades` over seeds 0-19 (the ranking API, 6,000 grades, 10
models, 3 judges of severity -1/0/+1, each model graded 70% by "its" judge): Kendall τ against the true
qualities 0.29-0.60 naive and 0.78-1.00 corrected, the gain at least 0.31, every judge's severity within
0.046 of the truth.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from biasboard.pipelines import cli
from biasboard.pipelines.refresh import RefreshOptions, refresh
from biasboard.ranking import ModelConfig
from biasboard.ranking.data import build_dataset
from biasboard.ranking.fit import fit_leaderboards
from biasboard.ranking.problem import ONE_GRADER_NOTE, ORDINAL_ONLY_NOTE
from biasboard.ranking.rank_stats import kendall_tau_b, ranks_desc
from biasboard.schemas.battle import SCORE_SCHEMA
from biasboard.schemas.errors import InputError
from biasboard.schemas.families import FamilyMap
from biasboard.schemas.summary import ORDINAL_ONLY
from biasboard.simulate import SimulationConfig, write_simulation
from biasboard.simulate.simulator import sample_grades
from biasboard.transforms import publish
from biasboard.transforms.cells import partial_score_cells
from biasboard.transforms.plan import make_plan

DATA = Path(__file__).parent / "data"
ARENA_BENCH = DATA / "arena-bench-v1-single"
SEVERITY = np.array([-1.0, 0.0, 1.0])


def _grades(seed: int, n: int = 6000, models: int = 10, prompts: int = 40, own: float = 0.7):
    """Simulated single grades 1..10 with known severities and an unbalanced design: model m is graded by
    judge m mod 3 with probability ``own`` (else by another), so a mean grade mixes quality and severity.
    Returns (rows as a polars frame with judge/model/prompt/score, true θ by model name)."""
    rng = np.random.default_rng(seed)
    theta = np.sort(rng.normal(0.0, 0.5, models))
    delta = rng.normal(0.0, 0.5, prompts)
    tau = np.linspace(-2.0, 2.0, 9)
    m = rng.integers(0, models, n)
    home = m % SEVERITY.size
    j = np.where(rng.random(n) < own, home, (home + rng.integers(1, SEVERITY.size, n)) % SEVERITY.size)
    p = rng.integers(0, prompts, n)
    score = sample_grades(theta[m] - delta[p] - SEVERITY[j], tau, rng).astype(np.float64)
    names = [f"m{i:02d}" for i in range(models)]
    rows = pl.DataFrame(
        {
            "judge": [f"judge-{i}" for i in j],
            "model": [names[i] for i in m],
            "prompt_id": [f"p{i:03d}" for i in p],
            "score": score,
        }
    )
    return rows, dict(zip(names, theta, strict=True))


def _write_day(rows: pl.DataFrame, folder: Path, day: dt.date, offset: int = 0) -> None:
    """``rows`` as one day's score file in the ingest's score schema."""
    start = dt.datetime(day.year, day.month, day.day, tzinfo=dt.timezone.utc)
    table = rows.with_columns(
        pl.format("s{}-{}", pl.lit(day.isoformat()), pl.int_range(offset, offset + rows.height)).alias("score_id"),
        pl.lit(start).dt.cast_time_unit("us").alias("ts"),
        pl.lit(None, dtype=pl.Int64).alias("len"),
        pl.lit(None, dtype=pl.String).alias("family"),
        pl.lit(None, dtype=pl.String).alias("judge_family"),
    )
    path = folder / f"day={day.isoformat()}" / "part-00000.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table.select(SCORE_SCHEMA.names).to_arrow().cast(SCORE_SCHEMA), path)


def _snapshot(out: Path) -> Path:
    return Path(publish.resolve_snapshot(str(out)))


def _board(out: Path) -> pl.DataFrame:
    return pl.read_parquet(_snapshot(out) / "leaderboard.parquet")


def _tau(board: pl.DataFrame, column: str, truth: dict[str, float]) -> float:
    return kendall_tau_b(board[column].to_numpy(), np.array([truth[m] for m in board["model"]]))


# --------------------------------------------------------------------------- real data, the CLI


@pytest.fixture(scope="module")
def arena_bench_scores(tmp_path_factory) -> Path:
    """Arena-Bench-v1 single grades (16 models, one GPT-4 judge) imported as score Parquet."""
    out = tmp_path_factory.mktemp("arena-bench") / "imported"
    argv = ["import", "--format", "mtbench-single", "--in", str(ARENA_BENCH / "judgments.jsonl.gz"),
            "--judge", "gpt-4", "--out", str(out)]  # fmt: skip
    assert cli.main(argv) == 0
    return out


def test_arena_bench_grades_alone_make_both_boards(arena_bench_scores, tmp_path, capsys):
    capsys.readouterr()
    out, st = tmp_path / "site", tmp_path / "state"
    argv = ["refresh", "--scores", str(arena_bench_scores / "scores" / "day=*" / "*.parquet"), "--state", str(st),
            "--out", str(out), "--runner=FnApiRunner"]  # fmt: skip
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert "ordinal-only board" in printed
    assert "naive (mean grade, pooled)" in printed and "corrected for severity, difficulty" in printed
    assert re.search(r"^Kendall tau naive vs corrected: \d\.\d{3}$", printed, re.MULTILINE)

    snapshot = _snapshot(out)
    summary = json.loads((snapshot / "summary.json").read_text())
    assert summary["board"] == ORDINAL_ONLY
    assert summary["score_counts"]["counted"] == 4760 and summary["counts"]["read"] == 0
    # the manifest's counts mean what the summary's do (it held the grades' under "counts")
    manifest = json.loads((snapshot / "manifest.json").read_text())
    assert (manifest["counts"], manifest["score_counts"]) == (summary["counts"], summary["score_counts"])
    board = _board(out)
    assert board.height == 16
    # The battles column counts each model's valid grades (SOURCE.md: e.g. 297 of 300 for gpt-4-1106-preview).
    grades = dict(zip(board["model"], board["n_battles"], strict=True))
    assert grades["gpt-4-1106-preview"] == 297 and grades["claude-instant-1"] == 300
    assert board.filter(pl.col("rank_corrected") == 1)["model"].item() == "gpt-4-1106-preview"
    assert board["ci_low_corrected"].is_not_null().all()
    assert (board["ci_low_corrected"] < board["rating_corrected"]).all()
    assert (board["rating_corrected"] < board["ci_high_corrected"]).all()

    # The published ranking is the mean grade over valid scores (the repo's show_result.py).
    published = (
        pl.read_csv(ARENA_BENCH / "scores.csv").drop_nulls("score").group_by("model").agg(pl.col("score").mean())
    )
    mean = dict(zip(published["model"], published["score"], strict=True))
    # The naive board ranks exactly as the mean grade (its sufficient statistic: integer grades here).
    assert _tau(board, "rating_naive", mean) == pytest.approx(1.0)
    # The corrected one adds prompt difficulty; every model graded on (nearly) all 300 prompts by one judge,
    # so it should keep the order: measured tau 1.000; >= 0.95 allows up to 3 swapped pairs of 120.
    assert _tau(board, "rating_corrected", mean) >= 0.95

    bias = pl.read_parquet(snapshot / "bias.parquet")
    assert bias["effect"].unique().to_list() == ["severity"]
    assert bias["judge"].to_list() == ["gpt-4"]
    report = (snapshot / "report.html").read_text()
    assert "Ordinal-only board" in report and "Judge audit" not in report
    # The leaderboard's note says what these two boards are: it described the pairwise ones (position, length,
    # ties as half wins, odds of winning), none of which an ordinal-only board fits.
    assert "the odds of a grade one step higher rather than one step lower" in report
    assert "half a win" not in report and "half wins" not in report and "odds of winning" not in report
    # Nor the pairwise boards' scale (the judges' average discrimination: none here), nor "no judge has data" for
    # position, length and affinity, which no grade could carry.
    assert "average discrimination" not in report and "no judge has data" not in report
    left_out = summary["attribution"]["left_out"]
    assert left_out["position"] == ORDINAL_ONLY_NOTE and left_out["length"] == ORDINAL_ONLY_NOTE, left_out


def test_mtbench_single_grades_alone(tmp_path):
    """FastChat MT-Bench single grades of two forks (9 models, GPT-4, half points and a regraded model)."""
    judgments = DATA / "fastchat-llm-judge-samples" / "*" / "mt_bench" / "model_judgment" / "gpt-4_single.jsonl.gz"
    imported = tmp_path / "imported"
    assert cli.main(["import", "--format", "mtbench-single", "--in", str(judgments), "--out", str(imported)]) == 0
    scores = str(imported / "scores" / "day=*" / "*.parquet")
    outcome = refresh(None, str(tmp_path / "state"), str(tmp_path / "site"), [], RefreshOptions(scores_glob=scores))
    assert outcome.summary is not None and outcome.summary.board == ORDINAL_ONLY
    board = _board(tmp_path / "site")
    assert board.height == 9
    # FastChat's show_result.py: the mean of the valid grades per model (SOURCE.md's table).
    rows = pl.read_parquet(scores, hive_partitioning=False)
    mean = dict(rows.group_by("model").agg(pl.col("score").mean()).iter_rows())
    assert mean["mistral-orpo-trl"] == pytest.approx(7.166, abs=1e-3)
    # Measured: tau 1.000 for both boards.  The naive board ranks by mean grade *category*, which the half
    # points (8.5, 9.5: categories of their own) make slightly uneven; >= 0.94 allows one swapped pair of 36.
    assert _tau(board, "rating_naive", mean) >= 0.94
    assert _tau(board, "rating_corrected", mean) >= 0.94
    # GPT-4 the only grader: its severity is 0 by definition (measured from the graders' mean), as its note says, not
    # an estimate of "neither harsh nor lenient"; it was marked identified, a filled dot at 0 in the report.
    bias = pl.read_parquet(_snapshot(tmp_path / "site") / "bias.parquet").filter(pl.col("effect") == "severity")
    assert bias.select("judge", "estimate", "identified", "note").rows() == [("gpt-4", 0.0, False, ONE_GRADER_NOTE)]
    # A plan of pairwise comparisons from it was written ("info 0.000 nats" each) where refresh --plan-budget refuses.
    with pytest.raises(InputError, match=r"an ordinal-only board \(single grades, no battles\) has no pairwise"):
        make_plan(str(tmp_path / "site"), 10)


def test_refresh_needs_battles_or_grades(tmp_path, capsys, arena_bench_scores):
    capsys.readouterr()
    base = ["refresh", "--state", str(tmp_path / "st"), "--out", str(tmp_path / "out"), "--runner=FnApiRunner"]
    assert cli.main(base) == 2
    assert "refresh needs --input (battle files), --scores (single-grade files), or both" in capsys.readouterr().err
    scores = ["--scores", str(arena_bench_scores / "scores" / "day=*" / "*.parquet")]
    for extra in (["--slices", "category"], ["--plan-budget", "10"], ["--reference", "gpt-4"]):
        assert cli.main([*base, *scores, *extra]) == 2
        assert f"{extra[0]}: need battles (--input)" in capsys.readouterr().err
    # A column pool pools grades too: grade files without the column are refused (they cannot be pooled by it).
    assert cli.main([*base, *scores, "--judge-pool", "column:voter_group"]) == 2
    assert "--judge-pool column:voter_group: grade file" in capsys.readouterr().err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


# --------------------------------------------------------------------------- simulation, known severity


def test_severity_correction_recovers_the_truth_through_refresh(tmp_path):
    """Two days of grades: the second refresh aggregates only the new day, and equals a refresh of both."""
    rows, truth = _grades(seed=0)
    half = rows.height // 2
    scores = tmp_path / "scores"
    _write_day(rows.head(half), scores, dt.date(2024, 5, 1))
    glob = str(scores / "day=*" / "*.parquet")
    out, st = tmp_path / "site", tmp_path / "state"
    first = refresh(None, str(st), str(out), [], RefreshOptions(scores_glob=glob, k=3))
    assert first.aggregated_days == ["2024-05-01"]
    _write_day(rows.tail(rows.height - half), scores, dt.date(2024, 5, 2), offset=half)
    second = refresh(None, str(st), str(out), [], RefreshOptions(scores_glob=glob, k=3))
    assert second.aggregated_days == ["2024-05-02"]  # incremental: the stored day is not read again
    assert second.summary is not None and second.summary.board == ORDINAL_ONLY
    board = _board(out)
    assert int(board["n_battles"].sum()) == rows.height

    again = refresh(None, str(st), str(out), [], RefreshOptions(scores_glob=glob, k=3))
    assert again.published is not None and again.published.reused  # nothing new: LATEST stays
    fresh = refresh(None, str(tmp_path / "state2"), str(tmp_path / "site2"), [], RefreshOptions(scores_glob=glob, k=3))
    assert fresh.aggregated_days == ["2024-05-01", "2024-05-02"]
    assert _board(tmp_path / "site2").equals(board)

    naive, corrected = _tau(board, "rating_naive", truth), _tau(board, "rating_corrected", truth)
    assert corrected >= 0.75 and corrected - naive >= 0.25, (naive, corrected)
    bias = pl.read_parquet(_snapshot(out) / "bias.parquet").sort("judge")
    assert bias["effect"].to_list() == ["severity"] * 3
    assert np.abs(bias["estimate"].to_numpy() - (SEVERITY - SEVERITY.mean())).max() <= 0.15
    assert (bias["ci_low"] < bias["estimate"]).all() and (bias["estimate"] < bias["ci_high"]).all()


def _score_cells(rows: pl.DataFrame) -> pa.Table:
    frame = rows.with_columns(
        pl.format("s{}", pl.int_range(0, rows.height)).alias("score_id"),
        pl.lit(dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc)).dt.cast_time_unit("us").alias("ts"),
        pl.lit(None, dtype=pl.Int64).alias("len"),
        pl.lit(None, dtype=pl.String).alias("family"),
        pl.lit(None, dtype=pl.String).alias("judge_family"),
    )
    return partial_score_cells(frame.select(SCORE_SCHEMA.names), FamilyMap.with_user_rules()).cells


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_naive_ordinal_board_is_the_mean_grade_order_and_severity_helps(seed):
    rows, truth = _grades(seed)
    naive, corrected = fit_leaderboards(None, _score_cells(rows), config=ModelConfig(diagnostics="off"))
    mean = dict(rows.group_by("model").agg(pl.col("score").mean()).iter_rows())
    names = list(naive.models)
    assert kendall_tau_b(naive.rating, np.array([mean[m] for m in names])) == pytest.approx(1.0)
    true = np.array([truth[m] for m in names])
    assert kendall_tau_b(corrected.rating, true) - kendall_tau_b(naive.rating, true) >= 0.25
    assert corrected.diagnostics["board"] == ORDINAL_ONLY
    assert naive.converged and corrected.converged


def test_models_of_one_mean_grade_share_their_naive_rank_whatever_their_number_of_grades():
    """The naive grades board ranks by mean grade, exactly: two models of mean 7.0 over 20 and over 2,000 grades were
    1st and 2nd, 7e-5 logits apart, a soft gauge on Σθ pulled against the thresholds' prior moving each rating by
    ~1/n.  They now share rank and rating (to round-off, which the published ranks treat as a tie)."""
    rng = np.random.default_rng(0)
    grades = {f"m{i}": rng.choice(np.arange(1, 11), 300).tolist() for i in range(5)}
    grades |= {"few": [7.0] * 20, "many": [6.0, 8.0] * 1000}
    rows = pl.DataFrame(
        [
            {"judge": "gpt-4", "model": model, "prompt_id": f"p{i % 80:03d}", "score": float(g)}
            for model, given in grades.items()
            for i, g in enumerate(given)
        ]
    )
    naive, _ = fit_leaderboards(None, _score_cells(rows), config=ModelConfig(diagnostics="off"))
    few, many = naive.models.index("few"), naive.models.index("many")
    assert abs(naive.rating[few] - naive.rating[many]) < 1e-9
    ranks = ranks_desc(naive.rating)
    assert ranks[few] == ranks[many]


def test_no_battles_and_no_grades_is_an_input_error():
    with pytest.raises(InputError, match="no battles and no grades"):
        build_dataset(None, None)
    data = build_dataset(None, _score_cells(_grades(0, n=300)[0]))
    assert data.ordinal_only and len(data.pairs) == 0 and len(data.judges) == 3


def test_ordinal_only_bootstrap_intervals():
    rows, _ = _grades(0, n=1500)
    config = ModelConfig(diagnostics="off", bootstrap=8)
    naive, corrected = fit_leaderboards(None, _score_cells(rows), config=config)
    for fit in (naive, corrected):
        assert fit.uncertainty == "bootstrap"
        assert fit.boot_theta is not None and fit.boot_theta.shape == (8, len(fit.models))
        assert np.all(np.isfinite(fit.ci_low)) and np.all(fit.ci_high - fit.ci_low > 0)
    severity = corrected.bias.filter(pl.col("effect") == "severity")
    assert severity.height == 3 and severity["boot_ci_low"].is_finite().all()


def test_battles_all_rejected_stay_an_error_with_grades(tmp_path, capsys):
    """Grades alone make an ordinal-only board; an --input whose every battle was rejected is an error."""
    sim = write_simulation(
        SimulationConfig(battles=300, models=4, judges=2, days=1, scores=0.5, seed=3), tmp_path / "s"
    )
    path = next(sim.glob("battles/day=*/*.parquet"))
    pl.read_parquet(path).with_columns(pl.lit("bogus").alias("winner")).write_parquet(path)
    argv = ["refresh", "--input", str(sim / "battles" / "day=*" / "*.parquet"),
            "--scores", str(sim / "scores" / "day=*" / "*.parquet"), "--state", str(tmp_path / "st"),
            "--out", str(tmp_path / "out"), "--runner=FnApiRunner"]  # fmt: skip
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "no valid battle to fit in the 1 stored day(s): all 300 rows read were rejected (bad_winner 300)" in err


def _lonely_grader() -> pl.DataFrame:
    """40 grades of one model by a judge that grades nothing else, on prompts the others grade: a model no grade links
    to the board (left off the corrected one) and a grader no other grader's models link to."""
    return pl.DataFrame(
        {
            "judge": ["judge-lonely"] * 40,
            "model": ["m-lonely"] * 40,
            "prompt_id": [f"p{i:03d}" for i in range(40)],
            "score": [10.0, 9.0] * 20,
        }
    )


def test_a_model_left_off_the_corrected_grades_board_takes_no_naive_rank_from_the_others():
    """A model graded only by a judge that grades nothing else shares no same-judge same-prompt grade with the
    board: the corrected board leaves it off, but the naive board pools every grade and ranked it.  Counted in the
    naive ranks (with a mean grade above everyone's it took rank 1, unseen), it pushed every naive rank down one, so
    each listed model read rank_change +1 and summary.json's naive ranks started at 2."""
    from biasboard.ranking.leaderboard import side_by_side
    from biasboard.transforms.ranks import rank_intervals

    rows, _ = _grades(seed=1, n=3000, models=6)
    lonely = _lonely_grader()
    cells = _score_cells(pl.concat([rows, lonely]))
    naive, corrected = fit_leaderboards(None, cells, config=ModelConfig(diagnostics="off"))
    board = side_by_side(naive, corrected)
    assert "m-lonely" not in board["model"].to_list()
    assert sorted(board["rank_naive"].to_list()) == list(range(1, board.height + 1))
    mean = dict(rows.group_by("model").agg(pl.col("score").mean()).iter_rows())
    by_mean = sorted(mean, key=lambda m: -mean[m])
    assert board.sort("rank_naive")["model"].to_list() == by_mean
    ranks = rank_intervals(naive, corrected, seed=0)
    assert sorted(r.rank for r in ranks.naive) == list(range(1, board.height + 1))
    assert all(1 <= r.low <= r.rank <= r.high <= board.height for r in ranks.naive)


def test_kendall_tau_naive_vs_corrected_is_over_the_models_both_boards_rank():
    """The same lonely model: the corrected board leaves it off (its rating is its component's centre by
    definition), yet summary.json's τ naive vs corrected compared it there: 0.333 over 7 models, where the 6
    published read 0.067.  τ is now the published board's, over its models."""
    from biasboard.ranking.leaderboard import side_by_side
    from biasboard.ranking.rank_stats import kendall_tau_b

    rows, _ = _grades(seed=1, n=3000, models=6)
    lonely = _lonely_grader()
    naive, corrected = fit_leaderboards(
        None, _score_cells(pl.concat([rows, lonely])), config=ModelConfig(diagnostics="off")
    )
    board = side_by_side(naive, corrected)
    published = kendall_tau_b(board["rating_naive"].to_numpy(), board["rating_corrected"].to_numpy())
    summary = corrected.diagnostics["naive_vs_corrected"]
    assert summary["n_models"] == board.height == 6
    assert summary["kendall_tau"] == pytest.approx(published, abs=1e-12)


def test_a_grader_that_gives_every_answer_one_grade_is_named():
    """A grader that gave 7 to every answer says nothing about the models, yet pulls the shared thresholds toward 7:
    the board was compressed (slope 1.11 → 0.77 on the truth) with no word.  It is named; the others are not."""
    rows, _ = _grades(4, n=2000)
    constant = rows.head(600).with_columns(pl.lit("judge-flat").alias("judge"), pl.lit(7.0).alias("score"))
    config = ModelConfig(diagnostics="off")
    _, alone = fit_leaderboards(None, _score_cells(rows), config=config)
    assert not any("same grade" in w for w in alone.diagnostics["warnings"])
    _, with_it = fit_leaderboards(None, _score_cells(pl.concat([rows, constant])), config=config)
    (said,) = [w for w in with_it.diagnostics["warnings"] if "same grade" in w]
    assert said.startswith("grades: judge-flat (600 grades) gave every answer the same grade"), said


def test_bootstrap_intervals_on_few_grades_a_prompt_are_warned_about():
    """Each replicate re-estimates every prompt's difficulty from its few redrawn grades: at ~6 grades a prompt the
    bootstrap intervals held the truth 0.65 of the time (Laplace 0.90), with no word.  Warned below 30 a prompt,
    and only with --bootstrap."""
    config = ModelConfig(diagnostics="off", bootstrap=5)
    for prompts, warned in ((400, True), (40, False)):
        rows, _ = _grades(5, n=2000, prompts=prompts)
        _, board = fit_leaderboards(None, _score_cells(rows), config=config)
        said = [w for w in board.diagnostics["warnings"] if "bootstrap replicate re-estimates" in w]
        assert bool(said) is warned, (prompts, board.diagnostics["warnings"])
    _, laplace = fit_leaderboards(None, _score_cells(_grades(5, n=2000, prompts=400)[0]), config=ModelConfig())
    assert not any("bootstrap replicate re-estimates" in w for w in laplace.diagnostics["warnings"])


def test_a_grader_linked_to_no_other_moves_no_other_graders_severity():
    """A grader whose grades link to no other grader's (it alone grades its model) has a severity only the prior
    sets.  Measured from the mean over *every* grader, it moved each other grader's severity by +0.23 to +0.25 with
    intervals ~5× wider.  Severities are measured within each group of graders whose models are comparable: the
    others' stay where they are without it (measured: within 0.002, what its grades still move the shared
    thresholds; checked within 0.01), and its
    own is 0 by definition, not identified, with a note saying why."""
    rows, _ = _grades(seed=1, n=3000, models=6)
    lonely = _lonely_grader()
    config = ModelConfig(diagnostics="off")

    def severities(frame: pl.DataFrame) -> pl.DataFrame:
        _, corrected = fit_leaderboards(None, _score_cells(frame), config=config)
        return corrected.bias.filter(pl.col("effect") == "severity").sort("judge")

    alone, with_it = severities(rows), severities(pl.concat([rows, lonely]))
    others = with_it.filter(pl.col("judge") != "judge-lonely")
    assert others["judge"].to_list() == alone["judge"].to_list()
    assert np.abs(others["estimate"].to_numpy() - alone["estimate"].to_numpy()).max() < 0.01
    width = lambda t: (t["ci_high"] - t["ci_low"]).to_numpy()  # noqa: E731
    assert np.all(width(others) < 1.2 * width(alone))
    assert others["identified"].to_list() == alone["identified"].to_list() == [True] * 3
    (lone,) = with_it.filter(pl.col("judge") == "judge-lonely").select("estimate", "identified", "note").rows()
    assert lone[:2] == (0.0, False) and "no other grader" in lone[2], lone
