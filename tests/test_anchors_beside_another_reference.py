"""Anchors given beside another reference (named judges, or none) are not fitted, and the summary says so."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from biasboard.pipelines.refresh import RefreshOptions, refresh
from biasboard.simulate import SimulationConfig, write_simulation

CONFIG = SimulationConfig(battles=6_000, models=6, judges=4, human_judges=1, days=1, seed=5)


@pytest.mark.parametrize("reference", ["human-pool-1", "none"])
def test_anchors_beside_another_reference_are_said_to_be_left_out_of_the_fit(tmp_path, reference):
    logs = write_simulation(CONFIG, tmp_path / "logs")
    (day,) = sorted((logs / "battles").glob("day=*"))
    table = pq.read_table(next(day.glob("*.parquet")))
    pq.write_table(table.filter(pc.equal(table.column("judge"), "human-pool-1")), tmp_path / "anchors.parquet")

    def published(out: str, anchors: str | None) -> Path:
        outcome = refresh(
            str(logs / "battles"),
            str(tmp_path / f"state-{out}"),
            str(tmp_path / out),
            [],
            RefreshOptions(k=3, audit=False, diagnostics="off", anchors=anchors, reference=reference),
        )
        assert outcome.published is not None
        return Path(outcome.published.path)

    with_anchors = published("with", str(tmp_path / "anchors.parquet"))
    without = published("without", None)
    # The anchors change nothing on the board: the reference is not them ...
    board = [pl.read_parquet(path / "leaderboard.parquet").sort("model") for path in (with_anchors, without)]
    assert board[0]["rating_corrected"].to_list() == board[1]["rating_corrected"].to_list()
    # ... and the note that counts them says they are not in the fit (it read "kept" alone).
    notes = json.loads((with_anchors / "summary.json").read_text())["reference"]["notes"]
    (note,) = [n for n in notes if n.startswith("anchors:")]
    assert "not in the fit" in note and f"the reference is {'judges' if reference != 'none' else 'none'}" in note
