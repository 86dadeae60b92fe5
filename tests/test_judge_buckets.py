"""The merge by judge bucket on disk (``state.load_cells_by_judge``): the same table as the in-memory merge,
bit for bit, whatever the buckets, the merge points and the cache."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from biasboard.ranking.data import CellsFold
from biasboard.ranking.spill import BucketedFold, as_table, bucket_bounds, judge_cuts, scratch_folder, spill_rows
from biasboard.schemas.cells import PAIR_CELLS_SCHEMA
from biasboard.schemas.errors import StateError
from biasboard.transforms import state

DAYS = [f"2024-02-{d:02d}" for d in range(1, 11)]


def day_cells(seed: int, rows: int = 300, judges: int = 40, dense: bool = False) -> pa.Table:
    """Random cells over a small key space (days share keys), rounding-sensitive sums, null slice labels;
    ``dense``: so few keys that a group meets a row on most days (long sums, where the merge points show)."""
    rng = np.random.default_rng(seed)
    models = np.array([f"m{i}" for i in range(2 if dense else 6)])
    names = np.array([f"judge/{i:03d}" for i in range(judges)])
    a, b = rng.integers(0, len(models), rows), rng.integers(0, len(models), rows)
    labels = np.array(["code", None] if dense else ["code", "math", None], dtype=object)
    columns = {}
    for field in PAIR_CELLS_SCHEMA:
        name = field.name
        if name == "judge":
            columns[name] = names[np.minimum(rng.geometric(0.08, rows) - 1, judges - 1)]  # a few busy judges
        elif name == "judge_family":
            columns[name] = np.full(rows, "fam")
        elif name in ("model_a", "family_a"):
            columns[name] = models[a]
        elif name in ("model_b", "family_b"):
            columns[name] = models[b]
        elif name in ("category", "language"):
            columns[name] = pa.array(labels[rng.integers(0, len(labels), rows)], pa.string())
        elif name == "order_known":
            columns[name] = rng.random(rows) < (1.0 if dense else 0.9)
        elif pa.types.is_int16(field.type):
            columns[name] = rng.integers(-1, 0 if dense else 2, rows).astype(np.int16)
        elif pa.types.is_int64(field.type):
            columns[name] = rng.integers(0, 50, rows)
        else:
            columns[name] = rng.normal(size=rows) * 10.0 ** rng.integers(-3, 4, rows)
    return pa.table(columns, schema=PAIR_CELLS_SCHEMA)


def store(st: Path, days: list[str], seed: int = 0, **kw) -> None:
    for i, day in enumerate(days):
        state.write_day(str(st), day, {"counts": {}}, {state.PAIR_CELLS_FILE: day_cells(seed + i, **kw)})


@pytest.fixture
def small_merges(monkeypatch):
    """Merge points every few days, so the history has several."""
    monkeypatch.setattr(state, "MERGE_EVERY_ROWS", 700)


def bucketed(st: Path, bucket_rows: int, **kw) -> tuple[pa.Table, int]:
    buckets = state.load_cells_by_judge(str(st), bucket_rows=bucket_rows, **kw)
    tables = list(buckets.tables())
    assert [t.num_rows for t in tables] == list(buckets.rows) and buckets.n_rows == sum(buckets.rows)
    dictionaries = {name: [t[name].chunk(0).dictionary for t in tables] for name in ("judge", "model_a")}
    for values in dictionaries.values():  # every bucket carries the same (global) vocabulary
        assert all(v.equals(values[0]) for v in values)
    judges = [set(t["judge"].to_pylist()) for t in tables]
    assert sum(len(j) for j in judges) == len(set().union(*judges))  # disjoint judges
    return (pa.concat_tables(tables) if tables else None), buckets.n_buckets


@pytest.mark.parametrize("bucket_rows", [1, 250, 10**9])
def test_buckets_equal_the_in_memory_merge_bit_for_bit(tmp_path: Path, small_merges, bucket_rows: int):
    st = tmp_path / "state"
    store(st, DAYS)
    state.write_day(str(st), "2024-02-20", {"counts": {}}, {state.PAIR_CELLS_FILE: day_cells(0, rows=0)})  # empty
    table, n = bucketed(st, bucket_rows)
    expected = state.load_cells(str(st), dictionary=True)
    assert table is not None and table.equals(expected)
    assert n == (1 if bucket_rows > 10**6 else n) and (bucket_rows > 10**6 or n > 3)
    assert table.column("category").null_count > 0  # null slice labels kept (and sorted first)


def test_long_sums_keep_the_in_memory_merge_points(tmp_path: Path, monkeypatch):
    """A group summed over many days in one fold: the pairwise sum's bits depend on the merge points, so
    the buckets must fold where the in-memory fold does (the bucket fold's points follow global row counts)."""
    st = tmp_path / "state"
    days = [f"2024-03-{d:02d}" for d in range(1, 29)]
    store(st, days, judges=6, dense=True)
    monkeypatch.setattr(state, "MERGE_EVERY_ROWS", 10**9)
    once = state.load_cells(str(st), dictionary=True)
    monkeypatch.setattr(state, "MERGE_EVERY_ROWS", 2_500)
    expected = state.load_cells(str(st), dictionary=True)
    assert not once.equals(expected)  # the merge points show in the last bits: this test can fail
    table, n = bucketed(st, 2_000)
    assert n > 1 and table is not None and table.equals(expected)


def test_one_judge_and_no_cells(tmp_path: Path, small_merges):
    st = tmp_path / "state"
    store(st, DAYS[:4], judges=1)
    table, n = bucketed(st, 1)
    assert n == 1 and table is not None and table.equals(state.load_cells(str(st), dictionary=True))
    empty = tmp_path / "empty"
    state.write_day(str(empty), DAYS[0], {"counts": {}}, {state.PAIR_CELLS_FILE: day_cells(0, rows=0)})
    buckets = state.load_cells_by_judge(str(empty), bucket_rows=5)
    assert buckets.n_buckets == 0 and buckets.n_rows == 0 and not list(buckets.tables())


def test_bucket_bounds_cut_sorted_names_without_splitting_a_judge():
    names = ["c", "a", "d", "b", "e"]
    rows = np.array([5, 1, 1, 10, 1])
    bounds = bucket_bounds(names, rows, 4)
    assert list(bounds) == sorted(bounds) and set(bounds) <= set(names)
    assert bucket_bounds(names, rows, 100) == ()
    assert len(bucket_bounds(names, np.ones(5, np.int64), 1)) == 4  # one judge each


def test_judge_cuts_end_every_run_where_a_judge_ends():
    codes = np.array([0, 0, 0, 1, 1, 2, 2, 2, 2, 3])
    assert judge_cuts(codes, 3) == [0, 3, 5, 9, 10]  # judge 2 (4 rows) a run of its own
    assert judge_cuts(codes, 100) == [0, 10] and judge_cuts(codes[:0], 3) == [0, 0]
    assert judge_cuts(codes, 1) == [0, 3, 5, 9, 10]


def test_bucket_batches_are_the_tables_cut_at_judges_ends_and_read_unmapped(tmp_path: Path):
    """A bucket written in record batches (:meth:`BucketedFold.finish`'s ``batch_rows``, what the audit's sum
    reads) holds the bucket's rows, each batch ending where a judge's rows end, read into memory of its own."""
    days = [day_cells(seed) for seed in range(3)]
    names = sorted({str(judge) for cells in days for judge in cells["judge"].to_pylist()})
    fold = BucketedFold(CellsFold(), "judge", names[10::10], str(tmp_path))
    for cells in days:
        fold.add(cells)
    buckets = fold.finish(str(tmp_path), batch_rows=7)
    batches = []
    for batch in buckets.batches():
        assert not any(p in Path("/proc/self/maps").read_text() for p in buckets.paths)
        batches.append(batch)
    assert len(batches) > 2 * buckets.n_buckets > 2
    assert pa.concat_tables(batches).equals(pa.concat_tables(list(buckets.tables())))
    ends = [batch["judge"].to_pylist()[-1] for batch in batches[:-1]]
    starts = [batch["judge"].to_pylist()[0] for batch in batches[1:]]
    assert all(end < start for end, start in zip(ends, starts, strict=True))  # no judge split between batches


def cached_days(st: Path) -> list[str]:
    return [day for day, _ in json.loads((st / state.BUCKETS_DIR / "manifest.json").read_text())["days"]]


def test_the_bucketed_cache_reads_only_new_days_and_equals_the_full_merge(tmp_path: Path, small_merges, monkeypatch):
    read: list[str] = []
    fold_file = state._fold_file
    monkeypatch.setattr(state, "_fold_file", lambda fold, path: (read.append(path), fold_file(fold, path)))
    st = tmp_path / "state"
    store(st, DAYS[:5])
    first, _ = bucketed(st, 300, cache=True)
    assert first is not None and first.equals(state.load_cells(str(st), dictionary=True))
    covered = cached_days(st)
    assert covered == DAYS[: len(covered)]
    for extra in range(5, len(DAYS)):
        state.write_day(str(st), DAYS[extra], {"counts": {}}, {state.PAIR_CELLS_FILE: day_cells(extra)})
        read.clear()
        cached, _ = bucketed(st, 300, cache=True)
        assert read and not [p for p in read for day in covered if f"day={day}" in p]  # cached days not re-read
        read.clear()
        assert cached is not None and cached.equals(state.load_cells(str(st), dictionary=True))
        covered = cached_days(st)
    assert len(covered) > 5
    manifest = json.loads((st / state.BUCKETS_DIR / "manifest.json").read_text())
    files = {Path(f).name for f in [manifest["vocab"], *(b[2] for b in manifest["buckets"])]}
    assert {p.name for p in (st / state.BUCKETS_DIR).glob("*.parquet")} == files  # stale files removed


def test_the_bucketed_cache_with_unlabelled_cells(tmp_path: Path, small_merges):
    """Slice labels all null (a vocabulary the cache does not use): the cache still reads back."""
    st = tmp_path / "state"

    def unlabelled(seed: int) -> pa.Table:
        table = day_cells(seed)
        for name in ("category", "language"):
            table = table.set_column(table.schema.get_field_index(name), name, pa.nulls(table.num_rows, pa.string()))
        return table

    for i, day in enumerate(DAYS):
        state.write_day(str(st), day, {"counts": {}}, {state.PAIR_CELLS_FILE: unlabelled(i)})
        cached, _ = bucketed(st, 300, cache=True)
        assert cached is not None and cached.equals(state.load_cells(str(st), dictionary=True))
    assert len(cached_days(st)) > 3


def test_a_changed_day_or_a_broken_bucketed_cache_falls_back_to_the_full_merge(tmp_path: Path, small_merges):
    st = tmp_path / "state"
    store(st, DAYS)
    bucketed(st, 300, cache=True)
    state.write_day(str(st), DAYS[1], {"counts": {}}, {state.PAIR_CELLS_FILE: day_cells(77)})  # re-aggregated
    changed, _ = bucketed(st, 300, cache=True)
    assert changed is not None and changed.equals(state.load_cells(str(st), dictionary=True))
    other, _ = bucketed(st, 500, cache=True)  # other bucket sizes: not this cache
    assert other is not None and other.equals(changed)
    for data in (st / state.BUCKETS_DIR).glob("bucket-*.parquet"):
        data.unlink()
        break
    again, _ = bucketed(st, 500, cache=True)
    assert again is not None and again.equals(changed)
    (st / state.BUCKETS_DIR / "manifest.json").write_text("{not json")
    again, _ = bucketed(st, 500, cache=True)
    assert again is not None and again.equals(changed)


def test_bucket_rows_from_the_environment(monkeypatch):
    monkeypatch.setenv(state.BUCKET_ROWS_ENV, "123")
    assert state.bucket_rows_setting() == 123
    monkeypatch.setenv(state.BUCKET_ROWS_ENV, "many")
    with pytest.raises(StateError, match="BIASBOARD_BUCKET_ROWS"):
        state.bucket_rows_setting()


def test_a_corrupt_cached_bucket_is_said_and_recomputed_a_corrupt_day_is_a_state_error(
    tmp_path: Path, small_merges, caplog
):
    """Caches are derived data: a cached bucket or vocabulary whose bytes are garbage is a warning naming the
    file and the merge starts again from the stored days (and writes a good cache); the stored days are the
    truth, so a day's cells file that cannot be read is a StateError naming it."""
    st = tmp_path / "state"
    store(st, DAYS)
    full, _ = bucketed(st, 300, cache=True)
    for kind in ("bucket", "vocab"):
        manifest = json.loads((st / state.BUCKETS_DIR / "manifest.json").read_text())
        broken = manifest["buckets"][-1][2] if kind == "bucket" else manifest["vocab"]
        (st / broken).write_bytes(b"PAR1 not a parquet file PAR1")
        caplog.clear()
        with caplog.at_level("WARNING", logger="biasboard.transforms.state"):
            again, _ = bucketed(st, 300, cache=True)
        assert again is not None and full is not None and again.equals(full)
        warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert len(warnings) == 1 and Path(broken).name in warnings[0] and "broken cache file" in warnings[0]
        assert not (st / broken).exists()  # a new cache replaced it
        caplog.clear()
        with caplog.at_level("WARNING", logger="biasboard.transforms.state"):
            bucketed(st, 300, cache=True)
        assert not caplog.records  # the new cache reads back
    state.write_day(str(st), "2024-03-01", {"counts": {}}, {state.PAIR_CELLS_FILE: day_cells(50)})
    day_file = st / "cells" / "day=2024-03-01" / state.PAIR_CELLS_FILE
    day_file.write_bytes(b"garbage")
    with pytest.raises(StateError, match="day=2024-03-01"):
        state.load_cells_by_judge(str(st), cache=True, bucket_rows=300)


def test_a_scratch_folder_goes_when_its_object_is_collected(tmp_path):
    """The merged buckets' scratch folder (GBs at scale) is removed once nothing holds it, not kept to exit."""
    import gc

    folder = scratch_folder(str(tmp_path))
    path = Path(folder.name)
    (path / "bucket-0.arrow").write_bytes(b"x" * 100)
    del folder
    gc.collect()
    assert not path.exists()
    kept = scratch_folder(str(tmp_path))
    kept.cleanup()
    assert not Path(kept.name).exists()


def test_spilled_rows_read_back_the_same_a_batch_at_a_time_and_leave_no_file(tmp_path):
    """Rows held for later (the judged pairs through the fit) come back equal, a batch per chunk with each chunk's
    dictionary, in memory of their own (no mapping of the file keeps them resident); their scratch file goes with
    them."""
    a = pa.table({"judge": pa.array(["x", "y", "x"]).dictionary_encode(), "n": pa.array([1, 2, 3], pa.int64())})
    b = pa.table({"judge": pa.array(["z", "y"]).dictionary_encode(), "n": pa.array([4, 5], pa.int64())})
    table = pa.concat_tables([a, b])
    spilled = spill_rows(table, str(tmp_path))
    assert spilled.num_rows == 5 and len(list(tmp_path.iterdir())) == 1
    batches = []
    for batch in spilled.to_batches():
        assert spilled.path not in Path("/proc/self/maps").read_text()  # read into memory, not mapped
        batches.append(batch)
    assert [batch.num_rows for batch in batches] == [3, 2]
    assert [batch.column("judge").dictionary.to_pylist() for batch in batches] == [["x", "y"], ["z", "y"]]
    assert spilled.read_all().equals(table) and as_table(spilled).equals(table) and as_table(table) is table
    del spilled, batches
    gc.collect()
    assert list(tmp_path.iterdir()) == []


def test_a_wider_fold_gets_fewer_rows_a_bucket_and_the_same_bytes(monkeypatch):
    """The audit's order pairs (3 string keys as int32 codes, 40 float64 sums: 332 bytes a row) are cut into
    buckets of the bytes a cells bucket takes, not of its rows."""
    from biasboard.ranking.data import CellsFold
    from biasboard.transforms.audit import _order_pairs_fold
    from biasboard.transforms.audit_cache import ORDER_PAIRS_SCHEMA

    pairs = _order_pairs_fold([], np.zeros(0, np.int64))  # no rows: the audit's fold in memory, not bucketed
    assert pairs.row_bytes() == 3 * 4 + (len(ORDER_PAIRS_SCHEMA) - 3) * 8
    monkeypatch.setenv(state.BUCKET_ROWS_ENV, str(1 << 20))
    rows = state.bucket_rows_for(pairs)
    cells_bytes = (1 << 20) * CellsFold().row_bytes()
    assert rows * pairs.row_bytes() <= cells_bytes < (rows + 1) * pairs.row_bytes()
    assert rows < 1 << 20
    assert state.bucket_rows_for(CellsFold()) == 1 << 20
    monkeypatch.setenv(state.BUCKET_ROWS_ENV, "1")  # tests' tiny buckets stay at least a row
    assert state.bucket_rows_for(pairs) == 1
