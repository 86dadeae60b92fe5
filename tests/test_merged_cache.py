"""The merged-cells cache of the state (``state.load_cells(..., cache=True)``).

The cache stores the running total of the fold at its last merge point, so a refresh that appends a day
reads the cache and the days after it instead of the whole history.  It must give the same bits as the
full merge, and a changed or removed older day must invalidate it (never a stale total).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from biasboard.schemas.cells import PAIR_CELLS_SCHEMA
from biasboard.schemas.errors import StateError
from biasboard.transforms import state

DAYS = [f"2024-01-{d:02d}" for d in range(1, 13)]


def day_cells(seed: int, rows: int = 400) -> pa.Table:
    """Random pair cells over a small key space (so days share keys and the merge sums them)."""
    rng = np.random.default_rng(seed)
    models = np.array([f"m{i}" for i in range(12)])
    judges = np.array([f"j{i}" for i in range(5)])
    a, b = rng.integers(0, 12, rows), rng.integers(0, 12, rows)
    columns = {}
    for field in PAIR_CELLS_SCHEMA:
        name = field.name
        if name in ("judge", "judge_family"):
            columns[name] = judges[rng.integers(0, 5, rows)]
        elif name in ("model_a", "family_a"):
            columns[name] = models[a]
        elif name in ("model_b", "family_b"):
            columns[name] = models[b]
        elif name in ("category", "language"):
            columns[name] = pa.array([None] * rows, pa.string())
        elif name == "order_known":
            columns[name] = np.ones(rows, bool)
        elif pa.types.is_int16(field.type):
            columns[name] = rng.integers(-1, 4, rows).astype(np.int16)
        elif pa.types.is_int64(field.type):
            columns[name] = rng.integers(0, 50, rows)
        else:
            columns[name] = rng.normal(size=rows) * 10.0 ** rng.integers(-3, 4, rows)  # rounding-sensitive sums
    return pa.table(columns, schema=PAIR_CELLS_SCHEMA)


def store(state_dir: Path, days: list[str], seed: int = 0) -> None:
    for i, day in enumerate(days):
        state.write_day(str(state_dir), day, {"counts": {}}, {state.PAIR_CELLS_FILE: day_cells(seed + i)})


@pytest.fixture
def small_merges(monkeypatch):
    """Merge points every ~3 days of 400 rows, so a 12-day history has several."""
    monkeypatch.setattr(state, "MERGE_EVERY_ROWS", 1_000)


def recording(paths: list[str], read):
    """``read`` (state._read_table) that also notes each path it reads."""

    def wrapper(path: str, schema=None):
        paths.append(path)
        return read(path, schema)

    return wrapper


def cached_days(state_dir: Path) -> list[str]:
    manifest = json.loads(Path(state.merged_manifest_path(str(state_dir))).read_text())
    return [day for day, _ in manifest["days"]]


def test_appending_days_reuses_the_cache_and_equals_the_full_merge(tmp_path: Path, small_merges):
    st = tmp_path / "state"
    store(st, DAYS[:6])
    first = state.load_cells(str(st), cache=True)
    assert first.equals(state.load_cells(str(st)))
    covered = cached_days(st)
    assert covered and covered == DAYS[: len(covered)]
    for extra in range(6, len(DAYS)):  # one day arrives at a time, as in a daily refresh
        state.write_day(str(st), DAYS[extra], {"counts": {}}, {state.PAIR_CELLS_FILE: day_cells(extra)})
        read: list[str] = []
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(state, "_read_table", recording(read, state._read_table))
            cached = state.load_cells(str(st), cache=True)
        assert not [path for path in read for day in covered if f"day={day}" in path]  # cached days not re-read
        assert cached.equals(state.load_cells(str(st)))  # the same bits as the full merge
        covered = cached_days(st)
    assert len(covered) > 6  # the cache moved forward with the history
    assert len(list((st / state.MERGED_DIR).glob("*.parquet"))) == 1  # older cache files are removed


def test_a_changed_or_removed_old_day_invalidates_the_cache(tmp_path: Path, small_merges):
    st = tmp_path / "state"
    store(st, DAYS)
    state.load_cells(str(st), cache=True)
    covered = cached_days(st)
    assert DAYS[1] in covered
    state.write_day(str(st), DAYS[1], {"counts": {}}, {state.PAIR_CELLS_FILE: day_cells(99)})  # re-aggregated
    changed = state.load_cells(str(st), cache=True)
    assert changed.equals(state.load_cells(str(st)))
    stored = [state._read_table(str(path)) for path in st.glob("cells/day=*/pair_cells.parquet")]
    assert pc.sum(changed.column("n")).as_py() == sum(pc.sum(t.column("n")).as_py() for t in stored)
    state.delete_day(str(st), DAYS[0])
    removed = state.load_cells(str(st), cache=True)
    assert removed.equals(state.load_cells(str(st)))
    assert DAYS[0] not in cached_days(st)


def test_a_broken_cache_falls_back_to_the_full_merge(tmp_path: Path, small_merges):
    st = tmp_path / "state"
    store(st, DAYS)
    full = state.load_cells(str(st), cache=True)
    for data in (st / state.MERGED_DIR).glob("*.parquet"):
        data.unlink()  # the manifest names a file that is gone
    assert state.load_cells(str(st), cache=True).equals(full)
    Path(state.merged_manifest_path(str(st))).write_text("{not json")
    assert state.load_cells(str(st), cache=True).equals(full)


def test_a_corrupt_cache_file_is_said_and_a_corrupt_day_is_a_state_error(tmp_path: Path, small_merges, caplog):
    """A cached total whose bytes are garbage: a warning naming it, the full merge (and a new cache); a stored
    day's file that cannot be read is a StateError naming it, cache or not (a day the cache covers is not read)."""
    st = tmp_path / "state"
    store(st, DAYS)
    full = state.load_cells(str(st), cache=True)
    (cached,) = (st / state.MERGED_DIR).glob("*.parquet")
    cached.write_bytes(b"PAR1 garbage PAR1")
    with caplog.at_level("WARNING", logger="biasboard.transforms.state"):
        assert state.load_cells(str(st), cache=True).equals(full)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and cached.name in warnings[0] and "broken cache file" in warnings[0]
    assert not cached.exists()  # replaced by a good one
    Path(state.merged_manifest_path(str(st))).write_text("[1, 2]")
    caplog.clear()
    with caplog.at_level("WARNING", logger="biasboard.transforms.state"):
        assert state.load_cells(str(st), cache=True).equals(full)
    assert [r for r in caplog.records if "manifest.json" in r.getMessage()]
    state.write_day(str(st), "2024-02-01", {"counts": {}}, {state.PAIR_CELLS_FILE: day_cells(40)})  # not cached
    (st / "cells" / "day=2024-02-01" / state.PAIR_CELLS_FILE).write_bytes(b"garbage")
    for cache in (True, False):
        with pytest.raises(StateError, match="day=2024-02-01"):
            state.load_cells(str(st), cache=cache)
