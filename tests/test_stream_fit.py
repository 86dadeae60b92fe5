"""The streamed fit (cells coded bucket by bucket onto disk, read a shard at a time) against the in-memory one.

Both fit the same cells: the streamed path only sums the same per-cell terms in other groupings, so the
ratings, SEs, bias table, diagnostics and profiles must agree to ~1e-8, for LLM judges beside voter-judges,
on the dense and the judge-blocked solver, with tiny buckets (many shards).
"""

from __future__ import annotations

import dataclasses
import gc
import itertools
import os
import re
import tempfile
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp
from biasboard.pipelines.backfill import run_backfill
from biasboard.plan import Posterior
from biasboard.ranking import ModelConfig, stream
from biasboard.ranking.arrowhead import row_covariance
from biasboard.ranking.bootstrap import ShardRedraw
from biasboard.ranking.data import CellsFold, PairArrays, build_dataset
from biasboard.ranking.fit import bootstrap_replicates, fit_leaderboards, solve_bias_aware
from biasboard.ranking.problem import bias_aware_problem
from biasboard.ranking.reference import ANCHOR_JUDGE, Reference, fit_with_reference
from biasboard.ranking.solver import newton_factor, refit_nearby
from biasboard.ranking.spill import SpilledRows, as_table
from biasboard.ranking.stream import STORED, TableBuckets, stream_dataset
from biasboard.schemas.families import FamilyMap
from biasboard.schemas.summary import GLOBAL_JUDGE, to_jsonable
from biasboard.simulate import SimulationConfig, write_simulation
from biasboard.transforms import snapshot
from biasboard.transforms import state as state_module
from biasboard.transforms.anchors import as_anchor_rows
from biasboard.transforms.cells import partial_cells
from biasboard.transforms.judge_pool import pool_buckets, pool_table
from biasboard.transforms.snapshot import FitSpec, fit_state
from biasboard.transforms.state import load_cells, load_cells_by_judge

from tests.test_judge_blocks import _styled
from tests.test_ranking_model import _cells, _score_cells
from tests.test_refresh import _write_anchors

TOL = 1e-8
ANCHORS = Reference("anchors", (ANCHOR_JUDGE,))


@pytest.fixture(autouse=True)
def small_shards(monkeypatch):
    """Shards of 120 cells: these small data sets are then read in several shards, as a big history is (shards are
    cut at every :data:`~biasboard.ranking.stream.SHARD_CELLS` cells of the concatenated buckets)."""
    monkeypatch.setattr(stream, "SHARD_CELLS", 120)


def _merged(seed: int, style: bool = False) -> pa.Table:
    """LLM judges and voter-judges (family human: no affinity), merged and in key order as the state
    hands them to the fit (``load_cells(dictionary=True)``)."""
    rng = np.random.default_rng(seed)
    llm = _cells(rng, models=8, judges=3, cells=600)
    voters = _cells(rng, models=8, judges=40, cells=800)
    names = [s.replace("judge-", "pool/v") for s in voters.column("judge").to_pylist()]
    voters = voters.set_column(0, "judge", pa.array(names))
    voters = voters.set_column(1, "judge_family", pa.array(["human"] * voters.num_rows))
    if style:
        llm, voters = _styled(llm, rng), _styled(voters, rng)
    fold = CellsFold()
    fold.add(llm)
    fold.add(voters)
    fold.fold()
    return fold.table(dictionary=True)


def _numbers(frame: pl.DataFrame) -> dict[str, np.ndarray]:
    return {c: frame[c].to_numpy() for c, t in zip(frame.columns, frame.dtypes, strict=True) if t == pl.Float64}


def assert_same_boards(in_memory: tuple, streamed: tuple) -> None:
    """The (naive, bias-aware) fits of the same cells, in memory and streamed: ratings, SEs, CIs, top-k, battle
    counts, the bias table and the profile ranges equal to :data:`TOL`."""
    (naive_mem, mem), (naive, fit) = in_memory, streamed
    assert mem.models == fit.models and mem.converged and fit.converged
    for name in ("rating", "se", "ci_low", "ci_high", "p_top_k", "n_battles"):
        _close(getattr(naive_mem, name), getattr(naive, name), f"naive {name}")
        _close(getattr(mem, name), getattr(fit, name), name)
    assert mem.bias.drop(_numbers(mem.bias)).equals(fit.bias.drop(_numbers(fit.bias)))
    for column, values in _numbers(mem.bias).items():
        _close(values, fit.bias[column].to_numpy(), f"bias {column}")
    profiles = mem.diagnostics["profile_likelihood"]
    assert profiles and profiles.keys() == fit.diagnostics["profile_likelihood"].keys()
    for effect, info in profiles.items():
        _close(info["range_nats"], fit.diagnostics["profile_likelihood"][effect]["range_nats"], effect)


def _close(a, b, what: str) -> None:
    a, b = np.asarray(a, float), np.asarray(b, float)
    assert a.shape == b.shape, what
    assert np.array_equal(np.isnan(a), np.isnan(b)), what
    ok = ~np.isnan(a)
    assert np.max(np.abs(a[ok] - b[ok]), initial=0.0) < TOL, what


def test_buckets_hold_whole_judges_and_every_row():
    table = _merged(0)
    buckets = TableBuckets(table, 100)
    seen: list[str] = []
    rows = 0
    for part in buckets.tables():
        judges = set(part.column("judge").to_pylist())
        assert not judges & set(seen)  # a judge is never split across buckets
        seen += sorted(judges)
        rows += part.num_rows
    assert rows == table.num_rows and buckets.n_buckets > 5
    assert pa.concat_tables(list(buckets.tables())).equals(table)


def test_cell_totals_of_buckets_equal_those_of_the_whole_table():
    """The summary's totals summed bucket by bucket (the model pairs as a running sum) are the whole table's."""
    table = _merged(1, style=True)
    buckets = TableBuckets(table, 100)
    assert buckets.n_buckets > 5
    whole, parts = snapshot.CellTotals.of(table), snapshot.CellTotals.of_buckets(buckets.tables())
    assert parts.judges.equals(whole.judges)
    assert parts.style_battles == whole.style_battles > 0
    key = [("model_a", "ascending"), ("model_b", "ascending")]
    assert parts.model_pairs.sort_by(key).equals(whole.model_pairs.sort_by(key))
    judged = ["judge", "model_a", "model_b"]  # dictionary codes (each bucket's table its own): compared by name

    def by_name(pairs: pa.Table | SpilledRows) -> pl.DataFrame:
        return pl.from_arrow(as_table(pairs)).with_columns(pl.col(judged).cast(pl.String)).sort(judged)

    assert by_name(parts.judge_pairs).equals(by_name(whole.judge_pairs))


@pytest.mark.parametrize("solver,style", [("dense", False), ("blocked", False), ("blocked", True)])
def test_streamed_fit_equals_the_in_memory_fit(solver, style):
    table = _merged(1, style)
    config = ModelConfig(judge_solver=solver, diagnostics="fast", posterior_draws=300)
    naive_mem, mem = fit_leaderboards(build_dataset(table), config=config)
    data = stream_dataset(TableBuckets(table, 120))
    assert data.stream is not None and len(data.stream.files.shards) >= 8
    folder = data.stream.files.folder
    try:
        naive, streamed = fit_leaderboards(data, config=config)
    finally:
        data.stream.close()
    assert not folder.exists()  # the scratch folder goes with the store
    assert_same_boards((naive_mem, mem), (naive, streamed))
    for key, value in mem.diagnostics["covariates"].items():
        if isinstance(value, float):
            _close(value, streamed.diagnostics["covariates"][key], key)
    assert mem.diagnostics["n_components"] == streamed.diagnostics["n_components"]


@pytest.mark.parametrize("solver", ["dense", "blocked"])
def test_streamed_fit_with_score_cells_equals_the_in_memory_one(solver):
    """Single grades beside the streamed battles: coded with the same vocabularies (a judge that only grades
    included) and held in memory, as the in-memory data set holds them; the same boards, bias tables (severity
    included) and profiles, on both solvers (judge-blocked: the graders' severities among the globals, the judge
    with grades alone in no piece of the couplings).  Before, score cells kept the whole fit in memory."""
    table = _merged(5)
    rng = np.random.default_rng(5)
    grades = _score_cells(rng, models=8, judges=3, prompts=6, rows=300)
    only = _score_cells(rng, models=8, judges=1, prompts=6, rows=60)  # a judge with grades and no battles
    only = only.set_column(0, grades.schema.field("judge"), pa.array(["grader"] * only.num_rows))
    grades = pa.concat_tables([grades, only])
    config = ModelConfig(diagnostics="fast", posterior_draws=300, judge_solver=solver)
    mem_data = build_dataset(table, grades)
    naive_mem, mem = fit_leaderboards(mem_data, config=config)
    data = stream_dataset(TableBuckets(table, 120), score_cells=grades)
    assert data.stream is not None and len(data.stream.files.shards) >= 8
    assert data.judges == mem_data.judges and data.judge_families == mem_data.judge_families
    assert "grader" in data.judges and data.prompts == mem_data.prompts and data.score_values == mem_data.score_values
    try:
        naive, streamed = fit_leaderboards(data, config=config)
    finally:
        data.stream.close()
    assert_same_boards((naive_mem, mem), (naive, streamed))
    assert (streamed.bias["effect"] == "severity").any()


def _pool_rows(table: pa.Table) -> np.ndarray:
    """Which cells are the voter pool's (judges ``pool/v…``)."""
    return np.array([str(name).startswith("pool/") for name in table.column("judge").to_pylist()])


def _walk(a, b, path: str = ""):
    """(path, relative difference) of every number in two JSON-like trees of the same shape; any other leaf
    must be equal (AssertionError naming its path otherwise)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), path
        for key in a:
            yield from _walk(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            yield from _walk(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        if not (np.isnan(a) and np.isnan(b)):
            yield path, abs(a - b) / max(1.0, abs(a))
    else:
        assert a == b, (path, a, b)


@pytest.mark.parametrize("solver,style", [("dense", False), ("blocked", False), ("blocked", True)])
def test_streamed_reference_fit_equals_the_in_memory_one(solver, style):
    """A pool of voter-judges as the reference: the three fits, the gate, the reference rating and the summary's
    reference section from streamed cells as from cells in memory (before, the number of reference verdicts
    read the pair totals' judge index −1 as the last judge: 20,570 instead of 11,754, silently)."""
    table = _merged(3, style)
    config = ModelConfig(judge_solver=solver, diagnostics="fast", posterior_draws=300)
    reference = Reference("judges", ("pool/*",))
    mem = fit_with_reference(build_dataset(table), reference=reference, config=config)
    data = stream_dataset(TableBuckets(table, 120))
    assert data.stream is not None and len(data.stream.files.shards) >= 8
    try:
        streamed = fit_with_reference(data, reference=reference, config=config)
    finally:
        data.stream.close()
    assert_same_boards((mem.naive, mem.corrected), (streamed.naive, streamed.corrected))
    assert_same_boards((mem.naive, mem.all_on), (streamed.naive, streamed.all_on))
    a, b = to_jsonable(mem.summary()), to_jsonable(streamed.summary())
    assert a["verdicts"] == int(np.sum(table.column("n").to_numpy()[_pool_rows(table)])) and a["gate"]["decisions"]
    assert max(d for _, d in _walk(a, b)) < TOL


def _anchor_cells(table: pa.Table, seed: int) -> pl.DataFrame:
    """Trusted verdicts as the anchors' cells (:func:`~biasboard.transforms.anchors.read_anchors`): 400 battles
    between the models of ``table``, the better-named model winning 70% of them, in both orders."""
    rng = np.random.default_rng(seed)
    models = sorted(set(table.column("model_a").to_pylist()))
    a, b = rng.choice(len(models), (2, 400))
    keep = a != b
    a, b = a[keep], b[keep]
    rows = pl.DataFrame(
        {
            "battle_id": [f"anchor-{i}" for i in range(a.size)],
            "ts": ["2024-01-01T00:00:00Z"] * a.size,
            "judge": ["trusted"] * a.size,
            "model_a": [models[i] for i in a],
            "model_b": [models[i] for i in b],
            "winner": np.where((a < b) == (rng.random(a.size) < 0.7), "model_a", "model_b").tolist(),
        }
    )
    return pl.from_arrow(partial_cells(as_anchor_rows(rows), FamilyMap.with_user_rules()).cells)


@pytest.mark.parametrize("solver", ["dense", "blocked"])
def test_streamed_anchor_fit_equals_the_in_memory_one(solver):
    """Trusted anchors as the reference of a streamed data set: added as one more judge after the streamed shards
    (before, the streamed fit refused them: the history was held in memory), the same three fits, gate, agreement
    and reference section as in memory, where they are added to the coded cells the same way."""
    table = _merged(4)
    anchors = _anchor_cells(table, 4)
    config = ModelConfig(judge_solver=solver, diagnostics="fast", posterior_draws=300)
    mem = fit_with_reference(build_dataset(table), reference=ANCHORS, anchor_cells=anchors, config=config)
    data = stream_dataset(TableBuckets(table, 120))
    assert data.stream is not None and len(data.stream.files.shards) >= 8
    folder = data.stream.files.folder
    try:
        streamed = fit_with_reference(data, reference=ANCHORS, anchor_cells=anchors, config=config)
        assert ANCHOR_JUDGE not in data.judges  # the battles' data set is left as it was
    finally:
        data.stream.close()
    assert not folder.exists()  # the added judge's shards go with the store they were added to
    assert_same_boards((mem.naive, mem.corrected), (streamed.naive, streamed.corrected))
    assert_same_boards((mem.naive, mem.all_on), (streamed.naive, streamed.all_on))
    assert mem.corrected.bias["judge"].to_list()[-1] == ANCHOR_JUDGE  # the anchors are the last judge in both
    a, b = to_jsonable(mem.summary()), to_jsonable(streamed.summary())
    assert a["verdicts"] == int(anchors["n"].sum()) and a["gate"]["decisions"]
    assert max(d for _, d in _walk(a, b)) < TOL
    assert [r["judge"] for r in mem.agreement] == [r["judge"] for r in streamed.agreement]
    for x, y in zip(mem.agreement, streamed.agreement, strict=True):
        numbers = [key for key, value in x.items() if isinstance(value, float)]
        _close([x[key] for key in numbers], [y[key] for key in numbers], f"agreement of {x['judge']}")


def test_streamed_pair_totals_have_no_judge():
    data = stream_dataset(TableBuckets(_merged(2), 200))
    assert data.stream is not None
    try:
        with pytest.raises(ValueError, match="negative"):  # the pair totals have no judge: loud, not wrong
            np.bincount(data.pairs.j, weights=data.pairs.tie)
    finally:
        data.stream.close()


@pytest.mark.parametrize("solver", ["dense", "blocked"])
def test_streamed_replicates_are_refits_of_the_redrawn_shards(solver):
    """A streamed bootstrap replicate redraws each shard's counts as it is read (the same counts on every read,
    whichever process): it lands where the in-memory problem's warm refit of those counts, gathered, does; it is
    the same in one process and in two; and the replicates differ."""
    table = _merged(3)
    config = ModelConfig(judge_solver=solver, diagnostics="off")
    data = stream_dataset(TableBuckets(table, 120))
    assert data.stream is not None and len(data.stream.files.shards) >= 8
    try:
        streamed = bias_aware_problem(data, config)
        solution = solve_bias_aware(streamed, config)
        assert streamed.data.stream is not None
        one = bootstrap_replicates(streamed, solution, 3, 1, 7, TOL, 200, workers=1)[1]
        two = bootstrap_replicates(streamed, solution, 3, 1, 7, TOL, 200, workers=2)[1]
        assert np.array_equal(one, two)
        assert np.ptp(one[:, streamed.layout.theta], axis=0).min() > 1e-3
        problem = bias_aware_problem(build_dataset(table), config)
        at_map = solve_bias_aware(problem, config)
        newton = newton_factor(at_map.evaluation, at_map.free)
        for r in range(3):
            store = streamed.data.stream.redrawn(ShardRedraw(7, r))
            reads = [PairArrays.concat([s.pairs for s in store.shards(STORED)]) for _ in range(2)]
            assert np.array_equal(reads[0].win_a, reads[1].win_a) and np.array_equal(reads[0].n, reads[1].n)
            assert not np.array_equal(reads[0].n, PairArrays.concat([s.pairs for s in streamed.data.stream.shards()]).n)
            refit = refit_nearby(problem.objective(pairs=reads[0]), at_map, newton, tol=TOL, max_iter=200)
            assert np.max(np.abs(refit.core - one[r])) < 1e-9
    finally:
        data.stream.close()


def test_streamed_bootstrap_publishes_intervals_near_the_in_memory_ones():
    """``--bootstrap`` on a streamed data set: both boards' intervals from replicates (the naive board's from its
    pair totals redrawn), as wide as the in-memory replicates' (other draws: equal in distribution, not in value)."""
    table = _merged(4)
    config = ModelConfig(judge_solver="blocked", diagnostics="off", posterior_draws=200, bootstrap=40, seed=2)
    in_memory = fit_leaderboards(build_dataset(table), config=config)
    data = stream_dataset(TableBuckets(table, 120))
    try:
        streamed = fit_leaderboards(data, config=config)
    finally:
        data.stream.close()
    for mem, fit in zip(in_memory, streamed, strict=True):
        assert mem.uncertainty == fit.uncertainty == "bootstrap"
        _close(mem.rating, fit.rating, "rating")
        width, want = fit.boot_ci_high - fit.boot_ci_low, mem.boot_ci_high - mem.boot_ci_low
        assert 0.75 < np.median(width / want) < 1.33
        assert np.all(fit.boot_ci_low <= fit.rating) and np.all(fit.rating <= fit.boot_ci_high)
        assert not np.array_equal(width, want)  # the streamed replicates are drawn shard by shard


SIM = SimulationConfig(battles=4_000, models=6, judges=3, days=3, seed=5)


def _snapshot(state: str, monkeypatch, stream: bool, spec: FitSpec):
    if stream:
        monkeypatch.setenv("BIASBOARD_STREAM_CELLS", "0")
        monkeypatch.setenv("BIASBOARD_BUCKET_ROWS", "300")  # the merge's judge buckets: several
    else:
        monkeypatch.delenv("BIASBOARD_STREAM_CELLS", raising=False)
    return fit_state(state, spec)


def test_fit_state_streams_above_the_size_and_publishes_the_same_snapshot(tmp_path, monkeypatch, caplog):
    logs = write_simulation(SIM, tmp_path / "logs")
    state = str(tmp_path / "state")
    run_backfill(str(logs / "battles" / "day=*" / "*.parquet"), state)
    spec = FitSpec(ModelConfig(diagnostics="fast", posterior_draws=300, k=3))
    mem = _snapshot(state, monkeypatch, False, spec)
    with caplog.at_level("INFO", logger=snapshot.__name__):
        streamed = _snapshot(state, monkeypatch, True, spec)
    assert re.search(r"fit: streamed \d+ pair cells \(([2-9]|\d\d+) judge buckets", caplog.text)
    assert not list(Path(tempfile.gettempdir()).glob("biasboard-fit-*"))  # the scratch folder is removed
    assert mem.n_cells == streamed.n_cells
    assert mem.leaderboard.drop(_numbers(mem.leaderboard)).equals(
        streamed.leaderboard.drop(_numbers(streamed.leaderboard))
    )
    for column, values in _numbers(mem.leaderboard).items():
        _close(values, streamed.leaderboard[column].to_numpy(), column)
    a, b = to_jsonable(mem.summary), to_jsonable(streamed.summary)
    assert a["judges"] == b["judges"] and a["head_to_head"] == b["head_to_head"]


def test_streamed_shards_do_not_depend_on_the_buckets(monkeypatch):
    """The same merged cells cut into other judge buckets (as a state's bucket cache keeps the bounds it was made
    with) are coded into the same shards: the same fit and the same bootstrap replicates, bit for bit (shards cut
    per bucket summed the objective in another order and redrew other counts, each replicate drawn by shard)."""
    monkeypatch.setattr(stream, "SHARD_CELLS", 97)
    table = _merged(3)
    config = ModelConfig(judge_solver="blocked", diagnostics="off")
    replicates, shards = [], []
    for bucket_rows in (120, 350):
        data = stream_dataset(TableBuckets(table, bucket_rows))
        try:
            shards.append([s.n for s in data.stream.files.shards])
            problem = bias_aware_problem(data, config)
            solution = solve_bias_aware(problem, config)
            replicates.append(bootstrap_replicates(problem, solution, 3, 1, 7, TOL, 200, workers=1)[1])
        finally:
            data.stream.close()
    assert shards[0] == shards[1] and set(shards[0][:-1]) == {97}
    assert np.array_equal(replicates[0], replicates[1])


def test_a_state_grown_day_by_day_streams_the_fresh_states_board(tmp_path, monkeypatch, caplog):
    """A refresh that appends a day with a new judge starts from the bucket cache, whose bounds were cut before
    that judge came (it joins the first bucket): its streamed board, bootstrap intervals included, is a fresh
    state's bit for bit, where the judge has a bucket of its own.  It was not: the shards followed the buckets, so
    the intervals moved by points with the order the days arrived in."""
    monkeypatch.setattr(state_module, "MERGE_EVERY_ROWS", 500)  # a merge point (and so a cache) before the last day
    monkeypatch.setenv("BIASBOARD_STREAM_CELLS", "0")
    monkeypatch.setenv("BIASBOARD_BUCKET_ROWS", "100")  # a bucket per judge, when the bounds are cut
    logs = write_simulation(SIM, tmp_path / "logs")
    last = sorted((logs / "battles").glob("day=*/*.parquet"))[-1]
    battles = pl.read_parquet(last)
    battles.with_columns(judge=pl.col("judge").str.replace("^gpt", "aaa")).write_parquet(last)  # a new judge
    glob = str(logs / "battles" / "day=*" / "*.parquet")
    days = sorted(p.parent.name.removeprefix("day=") for p in (logs / "battles").glob("day=*/*.parquet"))
    spec = FitSpec(ModelConfig(diagnostics="off", posterior_draws=300, k=3, bootstrap=10))
    grown, fresh = str(tmp_path / "grown"), str(tmp_path / "fresh")
    run_backfill(glob, grown, day_range=(days[0], days[-2]))
    fit_state(grown, spec)  # writes the bucket cache
    run_backfill(glob, grown, day_range=(days[-1], days[-1]))
    run_backfill(glob, fresh)
    boards, buckets = [], []
    for st in (grown, fresh):
        caplog.clear()
        with caplog.at_level("INFO", logger=snapshot.__name__):
            boards.append(fit_state(st, spec))
        buckets += re.findall(r"\((\d+) judge buckets", caplog.text)
    assert buckets == ["3", "4"]  # other buckets, the same cells
    assert boards[0].leaderboard.equals(boards[1].leaderboard)
    assert boards[0].bias.equals(boards[1].bias)


def test_fit_state_streams_a_reference_of_judges(tmp_path, monkeypatch, caplog):
    """``refresh --reference JUDGE`` above the size: streamed (it was held in memory), the same snapshot."""
    logs = write_simulation(SIM, tmp_path / "logs")
    state = str(tmp_path / "state")
    run_backfill(str(logs / "battles" / "day=*" / "*.parquet"), state)
    reference = Reference("judges", ("claude-sim-judge-1",))
    spec = FitSpec(ModelConfig(diagnostics="fast", posterior_draws=300, k=3), reference=reference)
    mem = _snapshot(state, monkeypatch, False, spec)
    with caplog.at_level("INFO", logger=snapshot.__name__):
        streamed = _snapshot(state, monkeypatch, True, spec)
    assert "fit: streamed" in caplog.text and "not streamed" not in caplog.text
    for column, values in _numbers(mem.leaderboard).items():
        _close(values, streamed.leaderboard[column].to_numpy(), column)
    a, b = to_jsonable(mem.summary.reference), to_jsonable(streamed.summary.reference)
    assert a["verdicts"] == 1355 and a["gate"]["decisions"]
    assert max(d for _, d in _walk(a, b)) < TOL


def test_fit_state_streams_with_slices_and_publishes_the_same_slice_boards(tmp_path, monkeypatch, caplog):
    """``refresh --slices`` above the size: the overall board streams (it was held in memory with the labelled
    table) and each slice is cut from the judge buckets on disk and streamed through its fits: the same boards.  One
    category shows each pair first-by-name only: its streamed slice's note says so as the in-memory one does (its
    orders are summed over the buckets; a streamed slice was not checked)."""
    logs = write_simulation(dataclasses.replace(SIM, categories=3), tmp_path / "logs")
    for path in (logs / "battles").glob("day=*/*.parquet"):
        table = pl.read_parquet(path)
        one_order = (pl.col("category") != table["category"].min()) | (pl.col("model_a") < pl.col("model_b"))
        table.filter(one_order).write_parquet(path)
    state = str(tmp_path / "state")
    run_backfill(str(logs / "battles" / "day=*" / "*.parquet"), state)
    spec = FitSpec(
        ModelConfig(diagnostics="fast", posterior_draws=300, k=3), slices=("category",), slice_min_battles=50
    )
    mem = _snapshot(state, monkeypatch, False, spec)
    with caplog.at_level("INFO"):
        streamed = _snapshot(state, monkeypatch, True, spec)
    assert "fit: streamed" in caplog.text and "not streamed" not in caplog.text
    assert len(re.findall(r"slice category=\S+: \d+ battles, fit, streamed", caplog.text)) == 3
    assert mem.slices is not None and streamed.slices is not None and mem.slices.height > 0
    for board_mem, board in ((mem.leaderboard, streamed.leaderboard), (mem.slices, streamed.slices)):
        assert board_mem.drop(_numbers(board_mem)).equals(board.drop(_numbers(board)))
        for column, values in _numbers(board_mem).items():
            _close(values, board[column].to_numpy(), column)
    a, b = to_jsonable(mem.summary.slices), to_jsonable(streamed.summary.slices)
    assert [s["battles"] for s in a] == [s["battles"] for s in b] and all(s["fitted"] for s in a)
    assert sum("transitivity alone" in s["note"] for s in a) == 1, [s["note"] for s in a]
    assert max(d for _, d in _walk(a, b)) < TOL


def test_fit_state_streams_judges_pooled_by_prefix(tmp_path, monkeypatch, caplog):
    """``refresh --judge-pool prefix:/`` above the size: each judge's battles cast by 7 voters (``judge/vN``), the
    voter buckets renamed to their pools and cut into buckets of pools on disk, then streamed (it held the merged
    voter cells in memory): the same boards, and the summary still counts the stored voters."""
    logs = write_simulation(SIM, tmp_path / "logs")
    for path in (logs / "battles").glob("day=*/*.parquet"):
        table = pq.read_table(path)
        voter = pa.array(np.char.add("v", (np.arange(table.num_rows) % 7).astype(str)))
        voters = pc.binary_join_element_wise(table.column("judge"), voter, "/")
        pq.write_table(table.set_column(table.schema.get_field_index("judge"), "judge", voters), path)
    state = str(tmp_path / "state")
    run_backfill(str(logs / "battles" / "day=*" / "*.parquet"), state)
    spec = FitSpec(ModelConfig(diagnostics="fast", posterior_draws=300, k=3, judge_pool="prefix:/"))
    mem = _snapshot(state, monkeypatch, False, spec)
    with caplog.at_level("INFO", logger=snapshot.__name__):
        streamed = _snapshot(state, monkeypatch, True, spec)
    assert "fit: pooled the judges by prefix:/" in caplog.text and "not streamed" not in caplog.text
    assert re.search(r"fit: streamed \d+ pair cells \(([2-9]|\d\d+) judge buckets", caplog.text)
    assert mem.leaderboard.drop(_numbers(mem.leaderboard)).equals(
        streamed.leaderboard.drop(_numbers(streamed.leaderboard))
    )
    for column, values in _numbers(mem.leaderboard).items():
        _close(values, streamed.leaderboard[column].to_numpy(), column)
    assert mem.bias is not None and streamed.bias is not None
    assert set(mem.bias["judge"]) == set(streamed.bias["judge"]) == {GLOBAL_JUDGE, *_sim_judges(state)}
    a, b = to_jsonable(mem.summary), to_jsonable(streamed.summary)
    assert a["judges"] == b["judges"] and all("/" in judge["judge"] for judge in a["judges"])  # voters, as stored
    # what plan --no-repeat reads: each pool has judged what any of its voters judged, in both paths
    judged = [Posterior.from_bytes(parts.extra_files["posterior.npz"]) for parts in (mem, streamed)]
    assert judged[0].judges == judged[1].judges == tuple(sorted(_sim_judges(state)))
    assert np.array_equal(judged[0].past_counts(None), judged[1].past_counts(None))
    assert judged[0].past_counts(None).sum() == 2 * sum(judge["n"] - judge["self_battles"] for judge in a["judges"])


def test_pool_buckets_leaves_judges_without_the_separator_as_they_are(tmp_path):
    """No judge name holds the separator: nothing pools, the voter buckets come back themselves (no second pass
    writing the same cells); a separator that does rename gives the same battles per pool."""
    logs = write_simulation(SIM, tmp_path / "logs")
    state = str(tmp_path / "state")
    run_backfill(str(logs / "battles" / "day=*" / "*.parquet"), state)
    buckets = load_cells_by_judge(state, bucket_rows=300)
    assert buckets.n_buckets >= 2
    assert pool_buckets(buckets, "prefix:/", 300) is buckets
    pooled = pool_buckets(buckets, "prefix:-sim", 300).table()
    voters = pl.from_arrow(buckets.table().select(["judge", "n"])).with_columns(pl.col("judge").cast(pl.String))
    by_pool = voters.group_by(pl.col("judge").str.split("-sim").list.first()).agg(pl.col("n").sum()).sort("judge")
    got = pl.from_arrow(pooled.select(["judge", "n"])).with_columns(pl.col("judge").cast(pl.String))
    assert got.group_by("judge").agg(pl.col("n").sum()).sort("judge").equals(by_pool)
    assert got.height == voters.height  # one judge a pool here: renamed, no cells merged (the fit_state test merges)


def test_pooled_score_cells_code_as_build_dataset_pools_them():
    """``--judge-pool prefix:/`` with grades, streamed: the pair buckets pooled on disk and the score cells'
    judges by :func:`pool_table` give the judges and ordinal cells ``build_dataset(..., judge_pool=rule)`` gives."""
    table = _merged(6)
    rng = np.random.default_rng(6)
    grades = _score_cells(rng, models=8, judges=3, prompts=6, rows=300)
    voters = [f"pool/v{k}" for k in rng.integers(0, 40, grades.num_rows)]  # graded by voters of the pool, too
    grades = pa.concat_tables([grades, grades.set_column(0, grades.schema.field("judge"), pa.array(voters))])
    mem = build_dataset(table, grades, judge_pool="prefix:/")
    buckets = pool_buckets(TableBuckets(table, 120), "prefix:/", 120)
    data = stream_dataset(buckets, score_cells=pool_table(grades, "prefix:/"))
    try:
        assert data.judges == mem.judges and "pool" in data.judges and data.judge_families == mem.judge_families
        assert data.scores is not None and mem.scores is not None
        for name in ("j", "m", "p", "counts"):
            assert np.array_equal(getattr(data.scores, name), getattr(mem.scores, name)), name
    finally:
        data.stream.close()


def test_fit_state_streams_with_anchors(tmp_path, monkeypatch, caplog):
    """``refresh --anchors`` above the size: streamed (it was held in memory), the same snapshot."""
    logs = write_simulation(SIM, tmp_path / "logs")
    state = str(tmp_path / "state")
    run_backfill(str(logs / "battles" / "day=*" / "*.parquet"), state)
    spec = FitSpec(
        ModelConfig(diagnostics="fast", posterior_draws=300, k=3),
        reference=Reference("anchors", (ANCHOR_JUDGE,)),
        anchors=_write_anchors(logs, tmp_path / "anchors"),
    )
    mem = _snapshot(state, monkeypatch, False, spec)
    with caplog.at_level("INFO", logger=snapshot.__name__):
        streamed = _snapshot(state, monkeypatch, True, spec)
    assert re.search(r"fit: streamed \d+ pair cells \(([2-9]|\d\d+) judge buckets", caplog.text)
    assert "not streamed" not in caplog.text
    assert not list(Path(tempfile.gettempdir()).glob("biasboard-fit-*"))  # the scratch folder is removed
    for column, values in _numbers(mem.leaderboard).items():
        _close(values, streamed.leaderboard[column].to_numpy(), column)
    a, b = to_jsonable(mem.summary.reference), to_jsonable(streamed.summary.reference)
    assert a["kind"] == "anchors" and a["verdicts"] == 30 and a["gate"]["decisions"]
    assert max(d for _, d in _walk(a, b)) < TOL


def _sim_judges(state: str) -> set[str]:
    """The simulation's judges: the pools of the stored voters."""
    return {name.split("/")[0] for name in load_cells(state).column("judge").unique().to_pylist()}


def test_fit_state_streams_with_score_cells(tmp_path, monkeypatch, caplog):
    """Grades stored beside the battles, above the size: the battles streamed (they were held in memory), the
    grades coded with them; the same board."""
    config = dataclasses.replace(SIM, scores=0.2, prompts=30)
    logs = write_simulation(config, tmp_path / "logs")
    state = str(tmp_path / "state")
    run_backfill(
        str(logs / "battles" / "day=*" / "*.parquet"), state, scores_glob=str(logs / "scores" / "day=*" / "*.parquet")
    )
    spec = FitSpec(ModelConfig(diagnostics="fast", posterior_draws=300, k=3))
    mem = _snapshot(state, monkeypatch, False, spec)
    with caplog.at_level("INFO", logger=snapshot.__name__):
        streamed = _snapshot(state, monkeypatch, True, spec)
    assert re.search(r"fit: streamed \d+ pair cells \(([2-9]|\d\d+) judge buckets", caplog.text)
    assert "not streamed" not in caplog.text and "score cells" in caplog.text
    for column, values in _numbers(mem.leaderboard).items():
        _close(values, streamed.leaderboard[column].to_numpy(), column)
    for frame in (mem.bias, streamed.bias):
        assert (frame["effect"] == "severity").any()
    assert mem.bias.drop(_numbers(mem.bias)).equals(streamed.bias.drop(_numbers(streamed.bias)))
    for column, values in _numbers(mem.bias).items():
        _close(values, streamed.bias[column].to_numpy(), f"bias {column}")


def test_fit_state_streams_with_bootstrap(tmp_path, monkeypatch, caplog):
    """``refresh --bootstrap`` above the size: streamed (it was held in memory), its intervals from replicates."""
    logs = write_simulation(SIM, tmp_path / "logs")
    state = str(tmp_path / "state")
    run_backfill(str(logs / "battles" / "day=*" / "*.parquet"), state)
    spec = FitSpec(ModelConfig(profile=False, posterior_draws=200, k=3, bootstrap=10))
    mem = _snapshot(state, monkeypatch, False, spec)
    with caplog.at_level("INFO", logger=snapshot.__name__):
        streamed = _snapshot(state, monkeypatch, True, spec)
    assert "fit: streamed" in caplog.text
    assert mem.summary.uncertainty == streamed.summary.uncertainty == "bootstrap"
    for column in ("rating_corrected", "rating_naive"):
        _close(mem.leaderboard[column].to_numpy(), streamed.leaderboard[column].to_numpy(), column)
    for column in ("ci_low_corrected", "ci_high_corrected", "ci_low_naive", "ci_high_naive"):
        assert streamed.leaderboard[column].is_finite().all()


@pytest.mark.parametrize("style", [False, True])
def test_spilled_couplings_factor_solve_and_covariance_equal_the_held_ones(monkeypatch, style):
    """The streamed Hessian's θ × judge rows spilled to disk piece by piece (judge ranges a shard completes,
    with tiny shards so judges straddle them) give the held Hessian's sums, and the Schur complement, the
    Newton solves (damped, with fixed parameters), the products with H and the covariance made a piece at a
    time equal the held ones to 1e-8.  A factorisation reads the couplings back once: its solves read the sparse
    matrices it kept on disk (:class:`~biasboard.ranking.stream.SpilledSparse`), removed with it."""
    reads = []  # one item per read of a Hessian's couplings
    read_pieces = stream.SpilledCouplings.pieces

    def counted_pieces(self):
        reads.append(1)
        yield from read_pieces(self)

    monkeypatch.setattr(stream.SpilledCouplings, "pieces", counted_pieces)
    table = _merged(3, style)
    config = ModelConfig(judge_solver="blocked")
    held = bias_aware_problem(build_dataset(table), config)
    monkeypatch.setattr(stream, "SHARD_CELLS", 97)
    data = stream_dataset(TableBuckets(table, 150))
    try:
        files = data.stream.files
        judges = [set(shard.pairs.j.tolist()) for shard in data.stream.shards(("j",))]
        assert any(a & b for a, b in itertools.pairwise(judges))  # a judge straddles two shards
        spilled = bias_aware_problem(data, config)
        lay = held.layout
        # Near the MAP (where the Hessian is positive definite), not at it (g ≠ 0).
        core = solve_bias_aware(held, config).core + np.random.default_rng(4).normal(0.0, 0.05, lay.n_core)
        ev_h = held.objective().evaluate(core, np.zeros(0))
        ev_s = spilled.objective().evaluate(core, np.zeros(0))
        H_h, H_s = ev_h.H, ev_s.H
        assert isinstance(H_s.couplings, stream.SpilledCouplings) and len(H_s.couplings.parts) >= 8
        assert any(folder.name.startswith("couplings-") for folder in files.folder.iterdir())
        for name in ("H", "A", "Xg"):
            _close(getattr(H_h, name), getattr(H_s, name), name)
        _close(H_h.Xc, np.concatenate([p.X for p in H_s.couplings.pieces()]), "couplings")
        v = np.random.default_rng(5).normal(size=lay.n_core)
        _close(H_h.matvec(v), H_s.matvec(v), "H v")
        free = np.ones(lay.n_core, bool)
        fixed = free.copy()
        fixed[[0, lay.n_models + 1, lay.block(0).start + 2, lay.tau.start - 1]] = False
        for mask, mu in ((free, 0.0), (free, 0.7), (fixed, 0.0)):
            reads.clear()
            f_h, f_s = newton_factor(ev_h, mask, mu), newton_factor(ev_s, mask, mu)
            assert f_h is not None and f_s is not None
            assert len(reads) == 1 and any(folder.name.startswith("sparse-") for folder in files.folder.iterdir())
            _close(f_h.S, f_s.S, "Schur complement")
            _close(f_h.solve(ev_h.g[mask], np.zeros(0))[0], f_s.solve(ev_s.g[mask], np.zeros(0))[0], "solve")
            assert len(reads) == 1  # the solves read the kept matrices, not the couplings
            c_h, c_s = f_h.covariance(), f_s.covariance()
            for name in ("glob", "judge_var", "judge_glob"):
                _close(getattr(c_h, name), getattr(c_s, name), name)
            # The gate's covariance of linear functions (rows over the judges' entries and the globals): its
            # products with the couplings a piece at a time (it read the held factor's one matrix, and failed).
            rows = sp.random(5, lay.n_core, density=0.01, random_state=6, format="csr")
            r_h, r_s = row_covariance(f_h, rows), row_covariance(f_s, rows)
            _close(r_h.dense(), r_s.dense(), "row covariance")
            _close(r_h.diagonal(), r_s.diagonal(), "row covariance's diagonal")
        del ev_s, H_s, f_s, r_s
        gc.collect()
        assert not any(folder.name.startswith(("couplings-", "sparse-")) for folder in files.folder.iterdir())
    finally:
        data.stream.close()


def test_spilled_couplings_are_removed_by_their_own_process_only(tmp_path):
    """A forked profile worker that drops an inherited Hessian must not remove the parent's coupling files."""
    folder = tmp_path / "couplings-x"
    folder.mkdir()
    stream._remove_spilled(str(folder), os.getpid() + 1)  # another process's: left alone
    assert folder.exists()
    stream._remove_spilled(str(folder), os.getpid())
    assert not folder.exists()


def test_the_stream_threshold_from_the_environment_is_a_whole_number_or_a_one_line_error(monkeypatch):
    """``BIASBOARD_STREAM_CELLS=abc`` raised a ValueError traceback from inside the fit stage, after every day had
    been aggregated; the other knobs (``BIASBOARD_BOOTSTRAP_WORKERS``, ``BIASBOARD_BUCKET_ROWS``) say it in one line."""
    from biasboard.schemas.errors import InputError

    monkeypatch.delenv("BIASBOARD_STREAM_CELLS", raising=False)
    assert stream.stream_min_cells() == stream.STREAM_MIN_CELLS
    monkeypatch.setenv("BIASBOARD_STREAM_CELLS", "0")
    assert stream.stream_min_cells() == 0 and stream.streaming_wanted(1)
    for bad in ("abc", "-5", "1e6"):
        monkeypatch.setenv("BIASBOARD_STREAM_CELLS", bad)
        with pytest.raises(InputError, match="BIASBOARD_STREAM_CELLS must be a whole number of cells >= 0"):
            stream.stream_min_cells()
