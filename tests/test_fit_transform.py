"""FitModels on the real FnApiRunner: the state's cells in, a staged snapshot out, the same fits as the core."""

from __future__ import annotations

import io
import json

import apache_beam as beam
import numpy as np
import polars as pl
from biasboard.pipelines.backfill import run_backfill
from biasboard.pipelines.options import beam_options
from biasboard.ranking import ModelConfig, fit_leaderboards
from biasboard.ranking.leaderboard import side_by_side
from biasboard.schemas.cells import SCORE_CELLS_SCHEMA
from biasboard.schemas.families import FamilyMap
from biasboard.simulate import SimulationConfig, simulate_days, write_simulation
from biasboard.transforms import publish
from biasboard.transforms.cells import merge_cells, partial_cells, partial_score_cells
from biasboard.transforms.fit import FitModels
from biasboard.transforms.snapshot import FitSpec

CONFIG = ModelConfig(profile=False, posterior_draws=300, k=3)
SIM = SimulationConfig(battles=6_000, models=8, judges=3, days=3, seed=2, scores=0.2, prompts=30)


def test_fit_stage_stages_the_fits_the_core_makes_of_day_partitioned_cells(tmp_path):
    logs = write_simulation(SIM, tmp_path / "logs")
    state, out = str(tmp_path / "state"), str(tmp_path / "out")
    run_backfill(
        str(logs / "battles" / "day=*" / "*.parquet"),
        state,
        scores_glob=str(logs / "scores" / "day=*" / "*.parquet"),
    )
    family_map = FamilyMap.with_user_rules()
    days, score_days = [], []
    for _, battles, scores in simulate_days(SIM):
        days.append(partial_cells(battles, family_map).cells)
        score_days.append(partial_score_cells(scores, family_map).cells)
    naive, corrected = fit_leaderboards(merge_cells(days), merge_cells(score_days, SCORE_CELLS_SCHEMA), config=CONFIG)

    staging = publish.new_staging(out)
    with beam.Pipeline(options=beam_options(["--runner=FnApiRunner"])) as p:
        _ = p | "NothingNew" >> beam.Create([]) | FitModels(state, staging, FitSpec(CONFIG), min_ram="1GB")

    record = publish.read_run_record(staging)
    assert record["days_committed"] == 0 and record["models"] == SIM.models and record["n_cells"] > 0
    folder = tmp_path / "out" / "staging" / staging.rsplit("/", 1)[-1]
    board = pl.read_parquet(io.BytesIO((folder / "leaderboard.parquet").read_bytes()))
    expected = side_by_side(naive, corrected)
    assert board.columns == expected.columns and board["model"].to_list() == expected["model"].to_list()
    for column in ("rating_naive", "ci_low_naive", "rating_corrected", "ci_low_corrected", "p_top_k"):
        assert np.max(np.abs(board[column].to_numpy() - expected[column].to_numpy())) < 1e-6, column
    assert board["rank_corrected"].to_list() == expected["rank_corrected"].to_list()
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["score_counts"]["counted"] > 0  # the ordinal cells reached the fit
    published = publish.publish_staged(out, staging, {"job": "test"})
    assert publish.latest_snapshot_id(out) == published.snapshot_id


def test_fit_stage_runs_with_one_blas_thread_and_gives_the_process_its_threads_back(tmp_path, monkeypatch):
    """The fit's small factorisations are slower with OpenBLAS's threads (transforms/fit.py); the limit is the
    stage's own: BLAS has its threads again once the stage is done."""
    from biasboard.transforms import fit as fit_module
    from threadpoolctl import threadpool_info, threadpool_limits

    sim = SimulationConfig(battles=1_500, models=5, judges=2, days=1, seed=3)
    logs = write_simulation(sim, tmp_path / "logs")
    state = str(tmp_path / "state")
    run_backfill(str(logs / "battles" / "day=*" / "*.parquet"), state)

    def blas_threads() -> set[int]:
        return {pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"}

    seen: list[set[int]] = []
    real_fit_state = fit_module.fit_state

    def recording_fit_state(*args, **kwargs):
        seen.append(blas_threads())
        return real_fit_state(*args, **kwargs)

    monkeypatch.setattr(fit_module, "fit_state", recording_fit_state)
    fn = fit_module.FitSnapshotFn(state, publish.new_staging(str(tmp_path / "out")), FitSpec(CONFIG), None, "t")
    with threadpool_limits(limits=2, user_api="blas"):  # whatever the environment pins, the process has 2 here
        assert blas_threads() == {2}
        staged = list(fn.process(1))
        assert blas_threads() == {2}
    assert seen == [{fit_module.FIT_BLAS_THREADS}] and len(staged) == 1
