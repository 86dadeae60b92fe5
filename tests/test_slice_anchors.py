"""A slice's corrected board takes the anchors of that slice only, as it takes its battles."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.compute as pc
import pyarrow.parquet as pq
from biasboard.pipelines.refresh import RefreshOptions, refresh
from biasboard.simulate import SimulationConfig, write_simulation

CONFIG = SimulationConfig(
    battles=16_000, models=8, judges=4, human_judges=1, days=1, categories=2, category_sd=1.0, seed=11
)


def test_a_slice_is_corrected_toward_its_own_anchors_only(tmp_path):
    logs = write_simulation(CONFIG, tmp_path / "logs")
    (day,) = sorted((logs / "battles").glob("day=*"))
    table = pq.read_table(next(day.glob("*.parquet")))
    human = pc.equal(table.column("judge"), "human-pool-1")
    (tmp_path / "battles" / day.name).mkdir(parents=True)
    pq.write_table(table.filter(pc.invert(human)), tmp_path / "battles" / day.name / "part.parquet")
    anchors = table.filter(human)
    pq.write_table(anchors, tmp_path / "anchors.parquet")
    label = "coding"
    only = pc.equal(table.column("category"), label)
    (tmp_path / "one" / day.name).mkdir(parents=True)
    pq.write_table(table.filter(pc.and_(pc.invert(human), only)), tmp_path / "one" / day.name / "part.parquet")
    pq.write_table(anchors.filter(pc.equal(anchors.column("category"), label)), tmp_path / "one_anchors.parquet")

    def board(battles: str, anchors: str, out: str, **options) -> Path:
        outcome = refresh(
            battles,
            str(tmp_path / f"state-{out}"),
            str(tmp_path / out),
            [],
            RefreshOptions(k=3, audit=False, diagnostics="off", anchors=anchors, **options),
        )
        assert outcome.published is not None
        return Path(outcome.published.path)

    sliced = (
        pl.read_parquet(
            board(str(tmp_path / "battles"), str(tmp_path / "anchors.parquet"), "sliced", slices="category")
            / "slices.parquet"
        )
        .filter(pl.col("slice") == f"category={label}")
        .sort("model")
    )
    alone = pl.read_parquet(
        board(str(tmp_path / "one"), str(tmp_path / "one_anchors.parquet"), "alone") / "leaderboard.parquet"
    ).sort("model")
    assert sliced["model"].to_list() == alone["model"].to_list()
    np.testing.assert_allclose(sliced["rating_corrected"].to_numpy(), alone["rating_corrected"].to_numpy(), atol=1e-6)
    # Labels are compared without case, as the slices are cut: anchors labelled "CODING" are the coding slice's.
    shouted = pl.from_arrow(anchors).with_columns(pl.col("category").str.to_uppercase())
    shouted.write_parquet(tmp_path / "shouted_anchors.parquet")
    spelled = board(str(tmp_path / "battles"), str(tmp_path / "shouted_anchors.parquet"), "shouted", slices="category")
    again = pl.read_parquet(spelled / "slices.parquet").filter(pl.col("slice") == f"category={label}").sort("model")
    np.testing.assert_allclose(again["rating_corrected"].to_numpy(), alone["rating_corrected"].to_numpy(), atol=1e-6)
