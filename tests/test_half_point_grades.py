"""Single grades on a half-point grid (MT-Bench's ``[[8.5]]``) are kept, end to end through ``refresh``.

The ingest accepts grades on the half-point grid, the score cells store them as they are, and the ordinal
part of the fit gives every grade actually used a category of its own, in order (an 8.5 between 8 and 9;
a grade nobody gave adds no threshold).  Off-grid values (7.25) stay ``bad_score``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
from biasboard.pipelines import cli
from biasboard.ranking.data import build_dataset
from biasboard.simulate import SimulationConfig, write_simulation
from biasboard.transforms import publish, state

SIM = SimulationConfig(battles=3000, models=6, judges=2, days=1, scores=0.6, grades=10, seed=4)


def _with_half_points(folder) -> tuple[int, int]:
    """Move a tenth of the grades below 10 up by half a point, make one off-grid; (half points, rows)."""
    path = next(folder.glob("scores/day=*/*.parquet"))
    frame = pl.read_parquet(path)
    rows = np.arange(frame.height)
    half = (rows % 10 == 3) & (frame["score"].to_numpy() < 10)
    score = frame["score"].to_numpy() + np.where(half, 0.5, 0.0)
    score[np.flatnonzero(~half)[0]] = 7.25
    frame.with_columns(pl.Series("score", score)).write_parquet(path)
    return int(half.sum()), frame.height


def test_half_point_grades_are_kept_and_get_their_own_categories(tmp_path, capsys):
    sim = write_simulation(SIM, tmp_path / "sim")
    halves, rows = _with_half_points(sim)
    out, st = tmp_path / "site", tmp_path / "state"
    argv = ["refresh", "--input", str(sim / "battles" / "day=*" / "*.parquet"),
            "--scores", str(sim / "scores" / "day=*" / "*.parquet"), "--state", str(st), "--out", str(out),
            "--runner=FnApiRunner"]  # fmt: skip
    assert cli.main(argv) == 0
    capsys.readouterr()
    summary = json.loads((Path(publish.resolve_snapshot(str(out))) / "summary.json").read_text())
    counts = summary["score_counts"]
    assert counts["read"] == rows and counts["counted"] == rows - 1
    assert counts["rejected"] == {"bad_score": 1}  # only the off-grid 7.25

    cells = pl.from_arrow(state.load_score_cells(str(st)))
    assert cells.filter(pl.col("score") % 1 == 0.5)["n"].sum() == halves
    data = build_dataset(state.load_cells(str(st)), state.load_score_cells(str(st)))
    used = sorted(set(cells["score"].to_list()))
    assert list(data.score_values) == used and data.n_categories == len(used) > 10
    # Category k counts exactly the grade score_values[k].
    totals = dict(cells.group_by("score").agg(pl.col("n").sum()).iter_rows())
    assert data.scores is not None
    assert np.allclose(data.scores.counts.sum(axis=0), [totals[v] for v in data.score_values])
