"""A stored day's file that cannot be read: the refresh's one line names the day and a recovery that works.

It said only "unreadable state file", and every later fit failed the same way: nothing said that the day
must be aggregated again, nor how.  Both recoveries the line names are followed here, as an operator
would, and give back the day's cells byte for byte and the same board.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from biasboard.pipelines import cli
from biasboard.pipelines.backfill import run_backfill
from biasboard.pipelines.refresh import RefreshOptions, refresh
from biasboard.schemas.errors import StateError
from biasboard.simulate import SimulationConfig, write_simulation
from biasboard.transforms import state

SIM = SimulationConfig(battles=3000, models=6, judges=3, days=3, seed=11)
OPTIONS = RefreshOptions(audit=False)
DAY = "2024-01-02"


@pytest.fixture(scope="module")
def refreshed(tmp_path_factory) -> tuple[Path, Path, bytes, bytes]:
    """The simulation, a state refreshed from it, the day's good cells and the board's leaderboard."""
    root = tmp_path_factory.mktemp("refreshed")
    sim = write_simulation(SIM, root / "sim")
    done = refresh(_glob(sim), str(root / "state"), str(root / "out"), [], OPTIONS)
    cells = (root / "state" / "cells" / f"day={DAY}" / state.PAIR_CELLS_FILE).read_bytes()
    return sim, root / "state", cells, (Path(done.published.path) / "leaderboard.parquet").read_bytes()


def _glob(sim: Path) -> str:
    return str(sim / "battles" / "day=*" / "*.parquet")


def _damaged(refreshed, tmp_path: Path) -> tuple[Path, str]:
    """A copy of the state whose day's cells file was cut short, and the refit's one line about it."""
    sim, good, cells, _ = refreshed
    st = tmp_path / "state"
    shutil.copytree(good, st)
    (st / "cells" / f"day={DAY}" / state.PAIR_CELLS_FILE).write_bytes(cells[:1000])
    with pytest.raises(StateError) as refused:
        refresh(_glob(sim), str(st), str(tmp_path / "out"), [], RefreshOptions(audit=False, refit=True))
    line = str(refused.value)
    assert "\n" not in line and "unreadable state file" in line and f"day {DAY}'s stored partition is damaged" in line
    return st, line


def _same_day_and_board(refreshed, st: Path, tmp_path: Path) -> None:
    sim, _, cells, leaderboard = refreshed
    assert (st / "cells" / f"day={DAY}" / state.PAIR_CELLS_FILE).read_bytes() == cells
    again = refresh(_glob(sim), str(st), str(tmp_path / "out2"), [], OPTIONS)
    assert (Path(again.published.path) / "leaderboard.parquet").read_bytes() == leaderboard


@pytest.mark.slow
def test_deleting_the_manifest_the_line_names_and_refreshing_mends_the_day(refreshed, tmp_path):
    st, line = _damaged(refreshed, tmp_path)
    (named,) = re.findall(r"delete (\S+) \(the day's commit mark\)", line)
    assert Path(named) == st / "manifests" / f"day={DAY}.json"
    Path(named).unlink()
    again = refresh(_glob(refreshed[0]), str(st), str(tmp_path / "out"), [], OPTIONS)
    assert again.aggregated_days == [DAY]
    _same_day_and_board(refreshed, st, tmp_path)


@pytest.mark.slow
def test_the_backfill_the_line_names_mends_the_day(refreshed, tmp_path):
    st, line = _damaged(refreshed, tmp_path)
    assert f"biasboard backfill --from {DAY} --to {DAY}" in line
    run_backfill(_glob(refreshed[0]), str(st), [], day_range=(DAY, DAY))
    _same_day_and_board(refreshed, st, tmp_path)


@pytest.mark.parametrize("damage", [b"", b'{"inputs": [', b"[]", b"null"])
def test_a_damaged_manifest_is_refused_in_one_line_naming_the_recovery_that_mends_it(
    refreshed, tmp_path, capsys, damage
):
    """A day's manifest emptied or cut short said only "unreadable manifest" (no way on); a JSON list raised
    AttributeError's traceback; ``null`` read as no manifest at all.  Each is refused naming the recovery, which
    is followed here and gives back the same board."""
    sim, good, _, _ = refreshed
    st = tmp_path / "state"
    shutil.copytree(good, st)
    manifest = st / "manifests" / f"day={DAY}.json"
    manifest.write_bytes(damage)
    argv = ["refresh", "--no-audit", "--input", _glob(sim), "--state", str(st), "--out", str(tmp_path / "out")]
    assert cli.main(argv) == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith(f"biasboard refresh: error: {manifest}: unreadable manifest: ") and "\n" not in line
    (named,) = re.findall(r"delete (\S+) \(the day's commit mark\)", line)
    Path(named).unlink()
    _same_day_and_board(refreshed, st, tmp_path)
