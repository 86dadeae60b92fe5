"""The state folder: per-day cells, dead letters and manifests, through Beam's FileSystems.

Layout (``STATE`` may be local or ``gs://``)::

    STATE/cells/day=YYYY-MM-DD/pair_cells.parquet
    STATE/cells/day=YYYY-MM-DD/score_cells.parquet        (only when scores were given)
    STATE/deadletters/day=YYYY-MM-DD/dead_letters.parquet
    STATE/deadletters/day=YYYY-MM-DD/score_dead_letters.parquet
    STATE/manifests/day=YYYY-MM-DD.json                  inputs + fingerprints, counts, files + their sha256
    STATE/merged/manifest.json + pair_cells-<id>.parquet  cache: the merged cells of the oldest days
    STATE/merged-buckets/manifest.json + bucket-*.parquet  the same cache per judge bucket (load_cells_by_judge)
    STATE/audit_days/day=YYYY-MM-DD/, audit_days/merged/  the audit's per-day partials, their cached sum
                                                         (transforms.audit, transforms.audit_cache)
    STATE/last_fit.json                                  the last fit's inputs digest and the snapshot it made
                                                         (pipelines.refresh)
    STATE/dropped_days.json                              days --drop-missing-days removed that no published
                                                         snapshot lists yet (pipelines.refresh)

The manifest is the commit marker of a day: readers only trust days that have
one.  Rewriting a day (:func:`write_day`) writes every file under a temporary
name first, then removes the old manifest, renames the files into place
(replacing the old ones, deleting ones this run no longer produces) and
finally writes the new manifest the same way.  A crash at any point leaves
either the old day intact or a day without a manifest (re-done by the next
run) — never a half-new day that readers trust.  Re-aggregating a day
therefore replaces its partition; it never adds to it.

The merged-cells cache (:func:`load_cells` with ``cache``) is derived data:
its manifest lists the days it covers with a hash of each day's manifest, so
rewriting or deleting an older day invalidates it, and deleting ``merged/``
only costs the next refresh a full merge.  So does a broken cache file: it is
said (:func:`warn_broken_cache`) and the stored days are read instead.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import re
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems
from biasboard.ranking.allocator import release_freed_memory
from biasboard.ranking.data import CellsFold, CodedFold, _Vocab, read_cells
from biasboard.ranking.spill import BucketedFold, JudgeBuckets, bucket_bounds, scratch_folder
from biasboard.schemas.cells import PAIR_CELLS_SCHEMA, SCORE_CELLS_SCHEMA, conform_pair_cells
from biasboard.schemas.errors import StateError, StorageUnreachable, raise_if_unreachable
from biasboard.transforms import storage
from biasboard.transforms.cells import merge_cells

PAIR_CELLS_FILE = "pair_cells.parquet"
SCORE_CELLS_FILE = "score_cells.parquet"
DEAD_LETTERS_FILE = "dead_letters.parquet"
SCORE_DEAD_LETTERS_FILE = "score_dead_letters.parquet"
#: The sorted hashes of the battle ids a day counted (:mod:`biasboard.transforms.repeated_ids`).
BATTLE_IDS_FILE = "battle_ids.parquet"
MANIFEST_VERSION = 1

_LOG = logging.getLogger(__name__)


def _join(*parts: str) -> str:
    head, *rest = parts
    return FileSystems.join(head.rstrip("/"), *rest) if rest else head


def cells_dir(state_dir: str, day: str) -> str:
    return _join(state_dir, "cells", f"day={day}")


def deadletters_dir(state_dir: str, day: str) -> str:
    return _join(state_dir, "deadletters", f"day={day}")


def manifest_path(state_dir: str, day: str) -> str:
    return _join(state_dir, "manifests", f"day={day}.json")


def _temp_name(path: str) -> str:
    folder, name = FileSystems.split(path)
    return _join(folder, f".tmp-{uuid.uuid4().hex}-{name}")


def _write_bytes(path: str, data: bytes) -> None:
    storage.write_bytes(path, data)


#: Row-group size of stored cells: readers (``ranking.data.read_cells``) stream a day one group at a time.
CELLS_ROW_GROUP = 1 << 16


def _parquet_bytes(table: pa.Table | pl.DataFrame) -> bytes:
    """Snappy, dictionary-encoded strings, row groups of CELLS_ROW_GROUP, no column statistics.

    Every reader of the state reads whole row groups (no predicate pushdown),
    so min/max statistics would never prune anything.  Cells (a day holds
    ~350k of them) go through polars' writer, which encodes columns in
    parallel (~2.5x faster than pyarrow's here); a day's cells come as the
    frame they were summed in (``table`` a polars frame:
    :class:`~biasboard.transforms.cells.BatchCells`), whose text keys it stores
    from their codes as dictionary columns, the rest as ``large_string``, and it
    drops the not-null flags; every reader undoes both (:func:`_read_table` casts
    to the cells schema; ``ranking.data.read_cells`` takes any string type,
    dictionary-encoded or not).  Dead letters and a day's id hashes keep pyarrow's
    writer, since :func:`load_dead_letters` returns them as stored, with a
    dictionary for text columns only: the id hashes are distinct by design, and
    trying a dictionary on them took 31 of the 33 ms a 500k-battle day's hashes
    took to write (2.5 ms without it, and 4.0 MB on disk instead of 5.0).
    """
    if isinstance(table, pl.DataFrame) or table.schema in (PAIR_CELLS_SCHEMA, SCORE_CELLS_SCHEMA):
        frame = table if isinstance(table, pl.DataFrame) else pl.from_arrow(table)
        assert isinstance(frame, pl.DataFrame)
        buffer = io.BytesIO()
        frame.write_parquet(buffer, compression="snappy", row_group_size=CELLS_ROW_GROUP, statistics=False)
        return buffer.getvalue()
    sink = pa.BufferOutputStream()
    text = [f.name for f in table.schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]
    pq.write_table(
        table, sink, compression="snappy", row_group_size=CELLS_ROW_GROUP, write_statistics=False, use_dictionary=text
    )
    return sink.getvalue().to_pybytes()


def _exists(path: str) -> bool:
    """Does ``path`` exist; a path that cannot be checked counts as absent, unless storage could not be reached
    (that day is not "uncommitted": the job stops and says so)."""
    try:
        return FileSystems.exists(path)
    except Exception as err:
        raise_if_unreachable(err)
        return False


def _replace(temp: str, final: str) -> None:
    """Move ``temp`` over ``final`` (rename replaces on POSIX; on GCS it is copy-over + delete)."""
    FileSystems.rename([temp], [final])


def write_day(
    state_dir: str,
    day: str,
    manifest: dict,
    tables: dict[str, pa.Table | pl.DataFrame],
) -> dict:
    """Replace day ``day``'s partition with ``tables`` ({file name: table}) and its manifest.

    File names are those of this module (``PAIR_CELLS_FILE`` ...): cells files
    go under ``cells/``, dead letters under ``deadletters/``.  Files the day
    had before and ``tables`` lacks are deleted.  Returns the manifest written.
    """
    targets = {}
    for name, table in tables.items():
        folder = deadletters_dir(state_dir, day) if "dead_letters" in name else cells_dir(state_dir, day)
        targets[_join(folder, name)] = table
    temps, hashes = {}, {}
    for final, table in targets.items():
        temp = _temp_name(final)
        data = _parquet_bytes(table)
        storage.write_synced_bytes(temp, data)  # on disk before the manifest commits it (a power cut)
        temps[final] = temp
        hashes[_relative(state_dir, final)] = hashlib.sha256(data).hexdigest()
    manifest = {
        **manifest,
        "day": day,
        "version": MANIFEST_VERSION,
        "files": sorted(hashes),
        "sha256": hashes,  # so the manifest changes whenever a file does (the merged-cells cache's key)
    }
    manifest_file = manifest_path(state_dir, day)
    manifest_temp = _temp_name(manifest_file)
    storage.write_synced_bytes(manifest_temp, json.dumps(manifest, indent=2, sort_keys=True).encode())
    if _exists(manifest_file):
        FileSystems.delete([manifest_file])
    for final, temp in temps.items():
        _replace(temp, final)
    every = [PAIR_CELLS_FILE, SCORE_CELLS_FILE, DEAD_LETTERS_FILE, SCORE_DEAD_LETTERS_FILE, BATTLE_IDS_FILE]
    for name in every:
        folder = deadletters_dir(state_dir, day) if "dead_letters" in name else cells_dir(state_dir, day)
        stale = _join(folder, name)
        if stale not in targets and _exists(stale):
            FileSystems.delete([stale])
    _remove_leftover_temps(state_dir, day)
    for folder in {FileSystems.split(final)[0] for final in targets}:
        storage.sync_folder(folder)  # the files' renames are on disk before the manifest's
    _replace(manifest_temp, manifest_file)
    storage.sync_folder(FileSystems.split(manifest_file)[0])
    return manifest


def _remove_leftover_temps(state_dir: str, day: str) -> None:
    """Delete the day's temporary files a killed write left (``.tmp-<random>-<name>``: no later write looks for its
    random name, so on a bucket they stayed for good, 472 kB a day's cells).  This write's own are renamed by now."""
    for folder in (cells_dir(state_dir, day), deadletters_dir(state_dir, day)):
        left = [info.path for info in storage.list_files(folder) if FileSystems.split(info.path)[1].startswith(".tmp-")]
        storage.delete(left)


def delete_day(state_dir: str, day: str) -> None:
    """Remove day ``day``'s partition: its manifest first, then its cells and dead letters.

    The manifest is the commit marker, so once it is gone no reader trusts the
    day; a crash after that leaves files no reader looks at, replaced if the
    day is ever aggregated again.  A missing day is not an error.
    """
    storage.delete([manifest_path(state_dir, day)])
    storage.delete_tree(cells_dir(state_dir, day))
    storage.delete_tree(deadletters_dir(state_dir, day))


def _relative(state_dir: str, path: str) -> str:
    return path[len(state_dir.rstrip("/")) + 1 :]


def read_day_manifest(state_dir: str, day: str) -> dict | None:
    """The manifest of ``day``, or None when the day is not (completely) stored."""
    path = manifest_path(state_dir, day)
    if not _exists(path):
        return None
    try:
        with FileSystems.open(path, compression_type="uncompressed") as handle:
            manifest = json.loads(handle.read().decode())
        if not isinstance(manifest, dict):  # (a list raised AttributeError's traceback, null read as no manifest)
            raise ValueError(f"a JSON {type(manifest).__name__}, not an object")
    except Exception as err:
        raise StateError(f"{path}: unreadable manifest: {err}{_recovery(state_dir, day)}") from err
    return manifest


#: How a reader names a selected day without a manifest (:func:`read_committed_manifests`).
NO_MANIFEST = "has no committed partition (no manifest)"


def read_committed_manifests(state_dir: str, days: list[str], missing: str) -> dict[str, dict]:
    """Each day's manifest, in ``days``' order; a day without one is a :class:`StateError` (``missing`` says why)."""
    manifests = {}
    for day in days:
        manifest = read_day_manifest(state_dir, day)
        if manifest is None:
            raise StateError(f"{state_dir}: day {day} {missing}")
        manifests[day] = manifest
    return manifests


def list_state_days(state_dir: str) -> list[str]:
    """Days with a committed partition (a manifest), sorted."""
    pattern = _join(state_dir, "manifests", "day=*.json")
    try:
        metadata = FileSystems.match([pattern])[0].metadata_list
    except Exception as err:  # nothing stored yet; unreachable storage is no empty state
        raise_if_unreachable(err)
        return []
    names = (m.path.rstrip("/").rsplit("/", 1)[-1] for m in metadata)
    return sorted(n[len("day=") : -len(".json")] for n in names if n.startswith("day=") and n.endswith(".json"))


@contextmanager
def _state_file(path: str) -> Iterator[pa.BufferReader]:
    """A stored file's bytes, for the body to decode: a failure to read them or in the body is a
    :class:`StateError` naming the file (the one message every reader of the state gives)."""
    try:
        with FileSystems.open(path, compression_type="uncompressed") as handle:
            data = handle.read()
        yield pa.BufferReader(data)
    except Exception as err:
        recovery = _day_recovery(path)
        detail = str(err).rstrip(". ") if recovery else err
        raise StateError(f"{path}: unreadable state file: {detail}{recovery}") from err


#: A stored day's own file: ``STATE/cells/day=D/...`` or ``STATE/deadletters/day=D/...``.
_DAY_FILE = re.compile(r"^(?P<state>.+)/(?:cells|deadletters)/day=(?P<day>\d{4}-\d{2}-\d{2})/[^/]+$")


def _day_recovery(path: str) -> str:
    """How to mend a stored day whose file cannot be read (empty for a file of no day: a cache is recomputed).

    Every later fit reads the day, so the state stays broken until the day is aggregated again.  Deleting the
    day's manifest (its commit mark) makes the next refresh find the day new and aggregate it from its input
    with the refresh's own flags; ``backfill --from D --to D`` does the same if given those flags.  Both were
    checked to write the day's cells back byte for byte.  Neither can help a day whose input is gone.
    """
    found = _DAY_FILE.match(path.replace(os.sep, "/"))
    return "" if found is None else _recovery(found["state"], found["day"])


def _recovery(state_dir: str, day: str) -> str:
    """How to mend ``day``'s stored partition, a file of which (or its manifest) cannot be read; see
    :func:`_day_recovery`."""
    manifest = manifest_path(state_dir, day)
    return (
        f"; day {day}'s stored partition is damaged: delete {manifest} (the day's commit mark) and run the refresh "
        f"again, which aggregates day {day} anew from its input (or run `biasboard backfill --from {day} --to {day}` "
        "with the refresh's --state and input flags); if the day's input files are gone, restore the file from a "
        "backup instead (without its manifest the day would leave the board)"
    )


def _read_table(path: str, schema: pa.Schema | None = None) -> pa.Table:
    with _state_file(path) as data:
        table = pq.read_table(data)
    if schema == PAIR_CELLS_SCHEMA:
        return conform_pair_cells(table)  # cells stored before ``order_known`` existed read as known
    return table.cast(schema) if schema is not None else table


def _committed_file(state_dir: str, day: str, manifest: dict, name: str) -> str | None:
    """The path of day ``day``'s stored ``name`` file, or None when its committed manifest names no such file."""
    folder = deadletters_dir(state_dir, day) if "dead_letters" in name else cells_dir(state_dir, day)
    path = _join(folder, name)
    return path if _relative(state_dir, path) in manifest.get("files", []) else None


def _day_table(state_dir: str, day: str, manifest: dict, name: str, schema: pa.Schema | None) -> pa.Table | None:
    """Day ``day``'s stored ``name`` table, or None when its committed manifest names no such file."""
    path = _committed_file(state_dir, day, manifest, name)
    return None if path is None else _read_table(path, schema)


def read_day_table(state_dir: str, day: str, manifest: dict, name: str) -> pa.Table | None:
    """Day ``day``'s stored ``name`` table as written, or None when its committed manifest names no such file."""
    return _day_table(state_dir, day, manifest, name, None)


def _tables(state_dir: str, name: str, schema: pa.Schema | None, days: Iterable[str] | None) -> Iterator[pa.Table]:
    """Each selected day's stored ``name`` table, in day order, read one at a time."""
    selected = list_state_days(state_dir) if days is None else sorted(set(days))
    for day, manifest in read_committed_manifests(state_dir, selected, NO_MANIFEST).items():
        table = _day_table(state_dir, day, manifest, name, schema)
        if table is not None:
            yield table


def _load(state_dir: str, name: str, schema: pa.Schema | None, days: Iterable[str] | None) -> list[pa.Table]:
    return list(_tables(state_dir, name, schema, days))


#: Day tables' rows read before they are merged into the running total (see :func:`load_cells`).
MERGE_EVERY_ROWS = 1 << 18
#: ... or this share of the running total, if more: a fold holds the total, the unmerged rows and their
#: concatenation, so the share bounds the merge's peak (~1.25× the total) while keeping folds few.
MERGE_SHARE = 4
#: The merged-cells cache: the running total of :func:`load_cells`'s fold at its last merge point.
MERGED_DIR = "merged"
MERGED_MANIFEST = "manifest.json"
MERGED_VERSION = 2  # 2: the numpy fold (CellsFold); a cache of the polars fold may differ in the last bits


def merged_manifest_path(state_dir: str) -> str:
    return _join(state_dir, MERGED_DIR, MERGED_MANIFEST)


def warn_broken_cache(path: str, err: object) -> None:
    """Say that a cache file could not be read back, and that the stored days are read instead.

    Every cache of the state (the merged cells, their judge buckets, the audit's summed partials) is derived
    data, so a cache file that is missing, truncated or otherwise unreadable costs a full recomputation from
    the stored days, never the refresh; a stored day's own file that cannot be read is a :class:`StateError`.
    Storage that could not be reached is no broken cache: its :class:`StorageUnreachable` is raised instead.
    """
    if isinstance(err, BaseException):
        raise_if_unreachable(err)
    _LOG.warning("%s: broken cache file, ignored (%s); recomputing from the stored days", path, err)


def failure_reason(err: Exception) -> BaseException:
    """What went wrong reading a file: a :class:`StateError`'s cause (it already names the file), else ``err``
    (unreachable storage is itself the reason)."""
    wrapper = isinstance(err, StateError) and not isinstance(err, StorageUnreachable)
    return err.__cause__ if wrapper and err.__cause__ is not None else err


class BrokenCache(Exception):
    """A cache file found unreadable while it was being used (the caller recomputes without the cache)."""

    def __init__(self, path: str, err: object) -> None:
        super().__init__(f"{path}: {err}")
        self.path, self.err = path, err


def _day_key(manifest: dict) -> str:
    """A day's identity in the cache: the hash of its manifest, which names its files' hashes (:func:`write_day`)."""
    return hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()


def _fold_file(fold: CodedFold, path: str) -> None:
    """Add a stored cells file to ``fold``, read as record batches with dictionary-encoded strings (what
    :class:`CellsFold` codes); an unreadable or malformed file is a :class:`StateError`."""
    with _state_file(path) as data:
        fold.add(read_cells(data), what=path)


def _cached_fold(state_dir: str, keys: list[tuple[str, str]]) -> tuple[CellsFold, int]:
    """A fold holding the cached running total, and how many of ``keys`` (sorted (day, key)) it covers.

    An empty fold and 0 on a miss.  A hit needs the cache's days to be exactly the first days of ``keys``,
    each with the same key: a changed, removed or inserted older day or another :data:`MERGE_EVERY_ROWS`
    is a miss, and a broken cache file (:func:`warn_broken_cache`) falls back to the full merge.
    """
    path = merged_manifest_path(state_dir)
    if not _exists(path):
        return CellsFold(), 0
    try:
        cache = json.loads(storage.read_text(path))
        if not isinstance(cache, dict):
            raise ValueError(f"a JSON {type(cache).__name__}, not an object")
    except Exception as err:
        warn_broken_cache(path, err)
        return CellsFold(), 0
    covered = [tuple(entry) for entry in cache.get("days", [])]
    if (
        cache.get("version") != MERGED_VERSION
        or cache.get("merge_every_rows") != [MERGE_EVERY_ROWS, MERGE_SHARE]
        or not covered
        or covered != keys[: len(covered)]
    ):
        return CellsFold(), 0
    fold, file = CellsFold(), _join(state_dir, str(cache.get("file")))
    try:
        _fold_file(fold, file)
    except StateError as err:
        warn_broken_cache(file, failure_reason(err))
        return CellsFold(), 0
    if fold.pending_rows != cache.get("rows"):
        warn_broken_cache(file, f"{fold.pending_rows} rows, its manifest says {cache.get('rows')}")
        return CellsFold(), 0
    fold.fold()  # the running total (its keys are distinct: a sort, no sum)
    return fold, len(covered)


def _write_fold(state_dir: str, table: pa.Table, keys: list[tuple[str, str]]) -> None:
    """Store the running total after ``keys``' days: data file under a fresh name, then the manifest naming it.

    The manifest is replaced atomically and is the commit marker: a crash
    leaves either the old cache or the new one (plus an orphan file, deleted
    by the next write), never a manifest naming a half-written file.
    """
    folder = _join(state_dir, MERGED_DIR)
    name = f"pair_cells-{uuid.uuid4().hex}.parquet"
    _write_bytes(_join(folder, name), _parquet_bytes(table))
    manifest = {
        "version": MERGED_VERSION,
        "merge_every_rows": [MERGE_EVERY_ROWS, MERGE_SHARE],  # the merge points depend on both
        "file": f"{MERGED_DIR}/{name}",
        "rows": table.num_rows,
        "days": [list(k) for k in keys],
    }
    storage.atomic_write_text(merged_manifest_path(state_dir), json.dumps(manifest, indent=1))
    stale = [f.path for f in storage.list_files(folder) if f.path.endswith(".parquet") and not f.path.endswith(name)]
    storage.delete(stale)


def _fold_days(fold: CodedFold, state_dir: str, selected: list[str], manifests: dict[str, dict], start: int) -> int:
    """Add the stored cells of ``selected[start:]`` to ``fold`` in day order, folding at the merge points
    (:func:`load_cells`); returns how many of ``selected`` the running total covers at the last one.

    The merge points depend only on the row counts (the days' and the running total's), so every fold
    that keeps them — in memory (:class:`CellsFold`) or by judge bucket on disk (:class:`BucketedFold`) —
    sums each group's rows in the same order and gives the same bits.
    """
    folded = start
    for index in range(start, len(selected)):
        day = selected[index]
        path = _committed_file(state_dir, day, manifests[day], PAIR_CELLS_FILE)
        if path is None:
            continue
        _fold_file(fold, path)
        if merge_due(fold):
            fold.fold()
            folded = index + 1
    return folded


def merge_due(fold: CodedFold) -> bool:
    """Whether ``fold``'s unmerged rows are due to be folded into its running total (see :func:`load_cells`)."""
    return fold.pending_rows >= max(MERGE_EVERY_ROWS, fold.total_rows // MERGE_SHARE)


def load_cells(
    state_dir: str, days: Iterable[str] | None = None, dictionary: bool = False, cache: bool = False
) -> pa.Table:
    """All stored pair cells (or those of ``days``), merged into one table by the monoid, in key order.

    Days are read in order, coded to integer columns as they are read
    (:class:`~biasboard.ranking.data.CellsFold`) and folded into the running
    total whenever the unmerged rows reach :data:`MERGE_EVERY_ROWS` (or a
    :data:`MERGE_SHARE`-th of the running total, if more), so memory is bounded by the merged cells
    plus a chunk of days, not by the history, and no string of the cells is
    held: the fold's integer columns take ~175 bytes a cell, where merging
    Arrow tables through polars peaked at ~1 KB a cell (bench/scale.py).  The
    merge points depend only on the days up to them, so a fresh and an
    incremental state give the same bits.

    ``cache`` (all days only): start from the running total stored at the last
    merge point (``STATE/merged/``) when the days it covers are unchanged, and
    store the new last merge point.  A refresh that appends a day then reads the
    cached total, the few days after it and the new day — not the history — and
    the result is the same fold, so the same bits as without the cache.

    ``dictionary``: string keys dictionary-encoded (the fit's input), else plain strings; the numeric
    columns share the fold's numpy buffers.
    """
    selected = list_state_days(state_dir) if days is None else sorted(set(days))
    manifests = read_committed_manifests(state_dir, selected, NO_MANIFEST)
    cache = cache and days is None
    keys = [(day, _day_key(manifests[day])) for day in selected]
    fold, start = _cached_fold(state_dir, keys) if cache else (CellsFold(), 0)
    folded = _fold_days(fold, state_dir, selected, manifests, start)
    if cache and folded > start:
        _write_fold(state_dir, fold.total_table(), keys[:folded])  # the running total at the last merge point
    table = fold.table(dictionary=dictionary)
    release_freed_memory()  # the day files' decoded row groups and the fold's scratch: the fit starts without them
    return table


#: Input rows per judge bucket of :func:`load_cells_by_judge` (a bucket's merged cells are at most these);
#: ``BIASBOARD_BUCKET_ROWS`` overrides it (tests force many tiny buckets).
BUCKET_ROWS = 1 << 20
BUCKET_ROWS_ENV = "BIASBOARD_BUCKET_ROWS"
#: The bucketed merged-cells cache: ``STATE/merged-buckets/manifest.json``, a Parquet file per bucket
#: (the bucket's running total at the last merge point, string keys as codes) and the names the codes stand for.
BUCKETS_DIR = "merged-buckets"
BUCKETS_VERSION = 1


def bucket_rows_setting() -> int:
    """Rows per judge bucket: :data:`BUCKET_ROWS`, or ``BIASBOARD_BUCKET_ROWS`` when set."""
    value = os.environ.get(BUCKET_ROWS_ENV)
    if not value:
        return BUCKET_ROWS
    try:
        rows = int(value)
    except ValueError:
        rows = 0
    if rows < 1:
        raise StateError(f"{BUCKET_ROWS_ENV}={value!r}: expected a positive number of rows")
    return rows


def bucket_rows_for(fold: CodedFold) -> int:
    """Input rows per judge bucket of ``fold``: as many coded bytes as :func:`bucket_rows_setting` rows of pair
    cells take (172 bytes a row), so a wider table's bucket costs the memory a cells bucket costs.  The audit's
    order pairs take 332 bytes a row: at the cells' row count their fold held two buckets of ~330 MB at once
    (bench/scale.py, 50,000 voter-judges: the audit's sum peaked at ~1,180 MB in its adds and folds on the N state)."""
    return max(1, bucket_rows_setting() * CellsFold().row_bytes() // fold.row_bytes())


def stored_battles(state_dir: str) -> int:
    """Battles counted over the stored days (their manifests): an upper bound of the merged cells, known
    before any cells file is read — what decides between the in-memory and the bucketed merge."""
    manifests = read_committed_manifests(state_dir, list_state_days(state_dir), NO_MANIFEST)
    return sum(int((m.get("counts") or {}).get("counted", 0)) for m in manifests.values())


def judge_rows(paths: list[str]) -> tuple[list[str], np.ndarray]:
    """Each judge's rows over the stored cells files (the judge column alone is decoded): the bucket bounds'
    input (:func:`~biasboard.ranking.spill.bucket_bounds`)."""
    vocab, rows = _Vocab(), np.zeros(0, np.int64)
    for path in paths:
        with _state_file(path) as data:
            column = pq.read_table(data, columns=["judge"], read_dictionary=["judge"])["judge"]
        codes = vocab.codes(column, nulls=True)
        counts = np.bincount(codes[codes >= 0], minlength=len(vocab.index))
        counts[: len(rows)] += rows
        rows = counts
    return list(vocab.index), rows


def _buckets_manifest_path(state_dir: str) -> str:
    return _join(state_dir, BUCKETS_DIR, MERGED_MANIFEST)


def _cache_settings(bucket_rows: int) -> dict:
    return {"version": BUCKETS_VERSION, "merge_every_rows": [MERGE_EVERY_ROWS, MERGE_SHARE], "bucket_rows": bucket_rows}


def _cached_buckets(state_dir: str, keys: list[tuple[str, str]], bucket_rows: int) -> dict | None:
    """The bucketed cache's manifest when it covers the first days of ``keys`` unchanged (and was made with the
    same settings) and its files are there; None otherwise (the full merge; a broken manifest or a missing
    file is said, :func:`warn_broken_cache`)."""
    path = _buckets_manifest_path(state_dir)
    try:
        cache = json.loads(storage.read_text(path)) if _exists(path) else None
        if cache is not None and not isinstance(cache, dict):
            raise ValueError(f"a JSON {type(cache).__name__}, not an object")
    except Exception as err:
        warn_broken_cache(path, err)
        return None
    if cache is None or any(cache.get(k) != v for k, v in _cache_settings(bucket_rows).items()):
        return None
    covered = [tuple(entry) for entry in cache.get("days", [])]
    if not covered or covered != keys[: len(covered)]:
        return None
    files = [cache.get("vocab"), *(entry[2] for entry in cache.get("buckets", []))]
    missing = [f for f in files if not (isinstance(f, str) and _exists(_join(state_dir, f)))]
    if missing:
        warn_broken_cache(path, f"names {len(missing)} missing file(s), the first {missing[0]}")
        return None
    return cache


def _seed_vocabularies(fold: BucketedFold, state_dir: str, cache: dict) -> dict[str, np.ndarray]:
    """Code the cached totals' names into ``fold``'s vocabularies; per vocabulary (named by its first column),
    the array mapping a code in the cache files to the fold's code.  An unreadable file is a :class:`BrokenCache`."""
    path = _join(state_dir, cache["vocab"])
    try:
        names = _read_table(path)
        luts = {group: np.zeros(0, np.int32) for group in fold.vocabs}  # a vocabulary unused by the cache: none
        for group in dict.fromkeys(names["group"].to_pylist()):
            part = names.filter(pc.equal(names["group"], group))
            codes = part["code"].to_numpy()
            lut = np.full(int(codes.max()) + 1 if len(codes) else 0, -1, np.int32)
            lut[codes] = fold.vocabs[group].codes(part["name"])
            luts[group] = lut
    except Exception as err:
        raise BrokenCache(path, failure_reason(err)) from err
    return luts


def _vocab_groups(fold: CodedFold) -> dict[str, str]:
    """Each string key's vocabulary, named by the first key that uses it (as the bucketed cache names them)."""
    return {key: next(k for k, v in fold.vocabs.items() if v is vocab) for key, vocab in fold.vocabs.items()}


def _cached_total(state_dir: str, file: str, rows: int, fold: BucketedFold, luts: dict[str, np.ndarray]):
    """A loader of one cached bucket's running total, its codes turned into the fold's; a file that cannot be
    read back as the manifest says is a :class:`BrokenCache` (raised when the fold first needs the bucket)."""
    group_of = _vocab_groups(fold)

    def load(out: dict[str, np.ndarray]) -> None:
        path = _join(state_dir, file)
        try:
            with _state_file(path) as data:
                reader = pq.ParquetFile(data)
            if reader.metadata.num_rows != rows:
                raise ValueError(f"{reader.metadata.num_rows} rows, the merged-cells cache says {rows}")
            start = 0
            for number in range(reader.num_row_groups):  # a row group at a time, into the fold's columns
                group = reader.read_row_group(number, use_threads=False)
                for name in group.column_names:
                    values = group[name].to_numpy()
                    lut = luts[group_of[name]] if name in group_of else None
                    if lut is not None and lut.size:  # (an empty one: every value is a null label, −1)
                        values = np.where(values >= 0, lut[np.maximum(values, 0)], np.int32(-1))
                    out[name][start : start + group.num_rows] = values
                start += group.num_rows
        except Exception as err:
            raise BrokenCache(path, failure_reason(err)) from err

    return load


class _BucketCache:
    """Writes the bucketed cache: each bucket's total as the fold hands it over (:meth:`BucketedFold.finish`'s
    ``on_total``), then the names its codes use, then the manifest (the commit marker), then removes stale files."""

    def __init__(self, state_dir: str, fold: BucketedFold) -> None:
        self.state_dir, self.fold = state_dir, fold
        self.tag = uuid.uuid4().hex
        self.entries: list[list] = []
        self.used = {id(v): np.zeros(len(v.index), bool) for v in fold.vocabs.values()}

    def write(self, bucket: int, columns: dict[str, np.ndarray]) -> None:
        for key, vocab in self.fold.vocabs.items():
            codes = columns[key]
            self.used[id(vocab)][codes[codes >= 0]] = True
        file = f"{BUCKETS_DIR}/bucket-{bucket:05d}-{self.tag}.parquet"
        table = pa.table({name: np.ascontiguousarray(values) for name, values in columns.items()})
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, compression="snappy", row_group_size=CELLS_ROW_GROUP, write_statistics=False)
        _write_bytes(_join(self.state_dir, file), sink.getvalue().to_pybytes())
        self.entries.append([bucket, table.num_rows, file])

    def commit(self, keys: list[tuple[str, str]], bucket_rows: int) -> None:
        groups, codes, names = [], [], []
        for group in dict.fromkeys(_vocab_groups(self.fold).values()):
            vocab = self.fold.vocabs[group]
            used = np.flatnonzero(self.used[id(vocab)])
            every = list(vocab.index)
            groups += [group] * len(used)
            codes.append(used.astype(np.int32))
            names += [every[i] for i in used]
        vocab_file = f"{BUCKETS_DIR}/vocab-{self.tag}.parquet"
        table = pa.table({"group": groups, "code": np.concatenate(codes), "name": pa.array(names, pa.string())})
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, compression="snappy")
        _write_bytes(_join(self.state_dir, vocab_file), sink.getvalue().to_pybytes())
        manifest = {
            **_cache_settings(bucket_rows),
            "bounds": list(self.fold.bounds),
            "days": [list(k) for k in keys],
            "vocab": vocab_file,
            "buckets": self.entries,
            "rows": self.fold.total_rows,
        }
        storage.atomic_write_text(_buckets_manifest_path(self.state_dir), json.dumps(manifest, indent=1))
        keep = {_join(self.state_dir, f) for f in [vocab_file, *(e[2] for e in self.entries)]}
        folder = _join(self.state_dir, BUCKETS_DIR)
        storage.delete(
            [f.path for f in storage.list_files(folder) if f.path.endswith(".parquet") and f.path not in keep]
        )


def load_cells_by_judge(
    state_dir: str, *, cache: bool = False, bucket_rows: int | None = None, scratch: str | None = None
) -> JudgeBuckets:
    """All stored pair cells merged as :func:`load_cells` merges them, by judge bucket on disk.

    Each day is read in order, coded, and its rows appended to the files of their judge's bucket (a
    contiguous range of the sorted judge names, sized to ``bucket_rows`` input rows from a first pass
    over the days' judge columns); the buckets fold at :func:`load_cells`'s merge points, one at a time
    (:class:`~biasboard.ranking.spill.BucketedFold`).  Memory: one day plus one bucket, not the history.
    The result's :meth:`~biasboard.ranking.spill.JudgeBuckets.tables` concatenated are
    ``load_cells(state_dir, dictionary=True)``, bit for bit: the same sums in the same order, the same
    global dictionaries in every bucket.

    ``cache``: as :func:`load_cells`'s, per bucket (``STATE/merged-buckets/``): a refresh that appends a
    day reads each bucket's cached running total and the days after the last merge point.  The bucket
    bounds are kept with the cache (new judges fall between them), so another ``bucket_rows`` is a miss.
    A cache file found broken (:class:`BrokenCache`) is said and the merge starts again from the stored days
    (writing a new cache); a stored day's file that cannot be read is a :class:`StateError`.
    ``scratch``: the parent of the scratch folder (default: the system's temporary folder); the folder
    goes when the result is collected.
    """
    bucket_rows = bucket_rows or bucket_rows_setting()
    try:
        return _load_by_judge(state_dir, cache, cache, bucket_rows, scratch)
    except BrokenCache as broken:
        warn_broken_cache(broken.path, broken.err)
        return _load_by_judge(state_dir, False, cache, bucket_rows, scratch)


def _load_by_judge(state_dir: str, reuse: bool, store: bool, bucket_rows: int, scratch: str | None) -> JudgeBuckets:
    """:func:`load_cells_by_judge`, starting from the cache when ``reuse``, writing it when ``store``."""
    selected = list_state_days(state_dir)
    manifests = read_committed_manifests(state_dir, selected, NO_MANIFEST)
    keys = [(day, _day_key(manifests[day])) for day in selected]
    hit = _cached_buckets(state_dir, keys, bucket_rows) if reuse else None
    if hit is None:
        paths = [_committed_file(state_dir, day, manifests[day], PAIR_CELLS_FILE) for day in selected]
        bounds = bucket_bounds(*judge_rows([p for p in paths if p is not None]), bucket_rows)
    else:
        bounds = tuple(hit["bounds"])
    folder = scratch_folder(scratch)
    fold = BucketedFold(CellsFold(), "judge", bounds, folder.name)
    start = 0
    if hit is not None:
        luts = _seed_vocabularies(fold, state_dir, hit)
        for bucket, rows, file in hit["buckets"]:
            fold.set_total(bucket, rows, _cached_total(state_dir, file, rows, fold, luts))
        start = len(hit["days"])
    folded = _fold_days(fold, state_dir, selected, manifests, start)
    writer = _BucketCache(state_dir, fold) if store and folded > start else None
    buckets = fold.finish(folder.name, on_total=writer.write if writer else None)
    if writer is not None:
        writer.commit(keys[:folded], bucket_rows)
    buckets.scratch = folder
    release_freed_memory()
    return buckets


def load_score_cells(state_dir: str, days: Iterable[str] | None = None) -> pa.Table:
    """All stored score cells (or those of ``days``), merged."""
    return merge_cells(_load(state_dir, SCORE_CELLS_FILE, SCORE_CELLS_SCHEMA, days), SCORE_CELLS_SCHEMA)


def load_dead_letters(state_dir: str, days: Iterable[str] | None = None, scores: bool = False) -> pa.Table | None:
    """Stored dead letters concatenated (None when there are none)."""
    tables = _load(state_dir, SCORE_DEAD_LETTERS_FILE if scores else DEAD_LETTERS_FILE, None, days)
    return pa.concat_tables(tables) if tables else None
