"""The audit's summed-days cache: the stored days' audit partials summed, so a refresh reads it and the new days.

Why: the refresh keeps each day's audit partials (``STATE/audit_days/day=D/``) and sums them on every run
(:func:`biasboard.transforms.audit.write_stored_sum`); without a cache a +1 day refresh read every stored
day again — its time grew with the history.  The sum is kept beside the days
(``STATE/audit_days/merged/``): its manifest names the days it sums, each with the key it was audited under
(the day's input digest and the audit settings), so a day re-audited with another key, or one no longer
summed, makes it a miss and the days are summed from scratch (and the cache written again).

Why the result is the same bytes as a full sum: every audit measure is a count or sits on a 2⁻²⁰ grid
(:func:`biasboard.audit.measures._on_exact_grid`), so the sums are exact whatever the grouping, and the
finished tables are in key order.  The cache holds the summed tables as plain Parquet: the per-judge
partials (small), the order pairs (about one row per cell with voter-judges: read back a row group at a
time, never whole) and the rows each judge has in them (the bucket bounds' input, so the big file is not
read twice).

The manifest is written last (the commit marker) and names files carrying a fresh tag; a crash leaves the
old cache or the new one, and the next commit removes files no manifest names.  A cache file that cannot
be read is a warning naming it and a full sum (:func:`biasboard.transforms.state.warn_broken_cache`): it
is derived data; a stored day's file that cannot be read is a :class:`StateError`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.io.filesystems import CompressionTypes, FileSystems
from biasboard.audit import AuditPartials
from biasboard.audit.measures import PAIR_KEYS, PAIR_MEASURES
from biasboard.ranking.data import CodedFold
from biasboard.transforms import publish, state, storage
from biasboard.transforms.cells import IngestCounts

#: The summed order pairs as :class:`~biasboard.ranking.data.CodedFold` codes them (and the cache stores them).
ORDER_PAIRS_SCHEMA = pa.schema(
    [*(pa.field(k, pa.string()) for k in PAIR_KEYS), *(pa.field(m, pa.float64()) for m in PAIR_MEASURES)]
)
#: Under the days' folder: ``manifest.json`` and the tagged Parquet files it names.
SUM_CACHE = "merged"
SUM_MANIFEST = "manifest.json"
SUM_CACHE_VERSION = 7  # 3: the gold partial carries sums over clusters (its clustered SE); 4: the order pairs
# carry the flip rate's and the consistent win rates' sums over (judge, prompt) clusters (more columns); 5: the
# summed days' ``recurrence`` sketch (a table more: an older manifest names no file for it); 6: the order pairs
# carry the per-model sums over prompt clusters across judges (``pcl_*``, more columns); 7: the clusters' keyed
# sums summed over the cached days (``closed_clusters``, ``closed_pairs``: empty when the history is closed within
# each day) and the clusters' counts (CR1's G, more columns)
#: The per-judge partial tables (everything but the order and cluster rows, reduced within a day, and the order pairs),
#: and the clusters' keyed sums: small when kept (few distinct keys, the history closure), else empty.
SMALL_TABLES = tuple(
    f.name for f in dataclasses.fields(AuditPartials) if f.name not in ("order_rows", "cluster_rows", "order_pairs")
)
#: Rows per row group of the cached order pairs (what is read back at a time).
ROW_GROUP = 1 << 16


def manifest_path(days_dir: str) -> str:
    return storage.join(days_dir, SUM_CACHE, SUM_MANIFEST)


@dataclass
class CachedSum:
    """A readable cache: the days it sums (day → key), their per-judge partials and row counts, where its
    order pairs are and how many, and each judge's rows in them."""

    days: dict[str, str]
    partials: AuditPartials
    counts: IngestCounts
    pairs_path: str
    pairs_rows: int
    judge_rows: tuple[list[str], np.ndarray]

    def add_pairs(self, fold: CodedFold, fold_when_due) -> None:
        """Add the cached order pairs to ``fold`` a row group at a time (``fold_when_due(fold)`` after each);
        a file that cannot be read back as the manifest says is a :class:`~state.BrokenCache`."""
        try:
            with FileSystems.open(self.pairs_path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
                reader = pq.ParquetFile(handle, read_dictionary=list(PAIR_KEYS))
                if reader.metadata.num_rows != self.pairs_rows:
                    raise ValueError(f"{reader.metadata.num_rows} rows, its manifest says {self.pairs_rows}")
                if reader.schema_arrow.names != ORDER_PAIRS_SCHEMA.names:
                    raise ValueError(f"columns {reader.schema_arrow.names}, expected {ORDER_PAIRS_SCHEMA.names}")
                for number in range(reader.num_row_groups):
                    fold.add(reader.read_row_group(number, use_threads=False), what=self.pairs_path)
                    fold_when_due(fold)
        except Exception as err:
            raise state.BrokenCache(self.pairs_path, err) from err


def _frame(path: str, template: pl.DataFrame) -> pl.DataFrame:
    """A cached table with ``template``'s columns and types; unreadable: a :class:`~state.BrokenCache`."""
    try:
        return pl.read_parquet(io.BytesIO(storage.read_bytes(path))).select(template.columns).cast(template.schema)
    except Exception as err:
        raise state.BrokenCache(path, err) from err


def read_cache(days_dir: str, keys: Mapping[str, str]) -> CachedSum | None:
    """The cache when every day it sums is among ``keys`` (day → key) with the same key; None otherwise.

    A broken manifest or an unreadable per-judge table is said (:func:`state.warn_broken_cache`) and None;
    the order pairs are checked as they are read (:meth:`CachedSum.add_pairs`).
    """
    path = manifest_path(days_dir)
    if not storage.exists(path):
        return None
    try:
        cache = json.loads(storage.read_text(path))
        version, covered = cache["version"], {str(day): str(key) for day, key in cache["days"]}
        files = {str(name): storage.join(days_dir, str(rel)) for name, rel in cache["files"].items()}
        counts, pairs_rows = IngestCounts.from_dict(cache["counts"]), int(cache["pairs_rows"])
    except Exception as err:
        state.warn_broken_cache(path, err)
        return None
    if version != SUM_CACHE_VERSION or not covered or any(keys.get(day) != key for day, key in covered.items()):
        return None  # a summed day changed or is no longer summed: every day is summed again
    empty = AuditPartials()
    try:
        missing = [n for n in (*SMALL_TABLES, "order_pairs", "judge_rows") if n not in files]
        if missing:
            raise state.BrokenCache(path, f"names no file for {', '.join(missing)}")
        frames = {name: _frame(files[name], getattr(empty, name)) for name in SMALL_TABLES}
        judges = _frame(files["judge_rows"], pl.DataFrame(schema={"judge": pl.String, "rows": pl.Int64}))
        if not storage.exists(files["order_pairs"]):
            raise state.BrokenCache(files["order_pairs"], "missing")
    except state.BrokenCache as broken:
        state.warn_broken_cache(broken.path, broken.err)
        return None
    judge_rows = (judges["judge"].to_list(), judges["rows"].to_numpy())
    return CachedSum(covered, AuditPartials(**frames), counts, files["order_pairs"], pairs_rows, judge_rows)


def cached_recurrence(days_dir: str) -> pl.DataFrame | None:
    """The cached sum's (judge, prompt) keys' sketch alone (its manifest and one 4 KB file), whatever days it
    sums; None without a readable cache of this version.  For a guess at the history's size before the new days
    are audited (:func:`biasboard.transforms.audit.stored_history_sketch`), not for the sum itself."""
    path = manifest_path(days_dir)
    try:
        if not storage.exists(path):
            return None
        cache = json.loads(storage.read_text(path))
        if cache.get("version") != SUM_CACHE_VERSION or "recurrence" not in cache.get("files", {}):
            return None
        return _frame(storage.join(days_dir, str(cache["files"]["recurrence"])), AuditPartials().recurrence)
    except (state.BrokenCache, ValueError, OSError, TypeError, AttributeError):
        return None  # the sum says what is broken (read_cache)


def add_judge_rows(*parts: tuple[list[str], np.ndarray]) -> tuple[list[str], np.ndarray]:
    """Judge rows (names, rows) added by name: the cache's and the new days'."""
    names = list(dict.fromkeys(name for part in parts for name in part[0]))
    index = {name: i for i, name in enumerate(names)}
    rows = np.zeros(len(names), np.int64)
    for part_names, part_rows in parts:
        np.add.at(rows, np.array([index[n] for n in part_names], np.int64), np.asarray(part_rows, np.int64))
    return names, rows


class _AbandonableSink(io.RawIOBase):
    """The order pairs file as the Parquet writer's sink, which a failed sum can abandon.

    Why: the file is written as the sum streams by, so it is open while the sum can still fail.  Left open, the
    garbage collector later closed it, and closing finishes a file: on a bucket that uploaded a partial Parquet
    after the job had failed (or spent the requests' retries at exit when storage was gone).  Abandoned, an upload
    is cancelled (:func:`~biasboard.transforms.storage.abandon_upload`) and a local file removed; the Parquet
    writer's last bytes, written as it closes, then go nowhere.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._file = FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED)
        self._written = 0
        self._abandoned = False

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:  # a buffer (bytes, memoryview, pyarrow Buffer)
        if not self._abandoned:
            self._file.write(data)
        size = memoryview(data).nbytes
        self._written += size
        return size

    def tell(self) -> int:
        return self._written

    def close(self) -> None:
        if not self._abandoned and not self.closed:
            self._file.close()
        super().close()

    def abandon(self) -> None:
        """Leave no file: cancel an upload, remove a local file (best effort: the sum's own error is the news)."""
        if self._abandoned or self.closed:
            return
        self._abandoned = True
        if storage.is_remote(self.path):
            storage.abandon_upload(self._file)
            return
        with contextlib.suppress(Exception):
            self._file.close()
            storage.delete([self.path])


class SumCacheWriter:
    """Writes the cache as the sum is finished: the summed order pairs as they stream by (:meth:`tee`), then
    the per-judge partials, the judge rows and the manifest (:meth:`commit`), then removes stale files."""

    def __init__(self, days_dir: str) -> None:
        self.days_dir = days_dir
        self.folder = storage.join(days_dir, SUM_CACHE)
        self.tag = uuid.uuid4().hex
        self.rows = 0
        self.judges: dict[str, int] = {}
        storage.ensure_dir(self.folder)
        self._sink = _AbandonableSink(self._path("order_pairs"))
        self._writer = pq.ParquetWriter(self._sink, ORDER_PAIRS_SCHEMA, compression="zstd", write_statistics=False)

    def _relative(self, name: str) -> str:
        return f"{SUM_CACHE}/{name}-{self.tag}.parquet"

    def _path(self, name: str) -> str:
        return storage.join(self.days_dir, self._relative(name))

    def tee(self, tables: Iterable[pa.Table]) -> Iterator[pa.Table]:
        """``tables`` (the summed order pairs in key order), each written to the cache as it passes."""
        for table in tables:
            if table.num_rows:
                plain = table.cast(ORDER_PAIRS_SCHEMA)
                self._writer.write_table(plain, row_group_size=ROW_GROUP)
                self.rows += plain.num_rows
                counted = pc.value_counts(plain["judge"])
                judges, rows = counted.field("values").to_pylist(), counted.field("counts").to_pylist()
                for judge, n in zip(judges, rows, strict=True):  # a judge's rows are in one table (per judge)
                    self.judges[judge] = self.judges.get(judge, 0) + n
                del plain, counted  # not held while the table is finished downstream (a bucket's size, strings)
            yield table

    def abandon(self) -> None:
        """Give the cache up, for a sum that failed: its order pairs file goes unfinished (see
        :class:`_AbandonableSink`), and the cache that was there before stays the cache."""
        self._sink.abandon()
        with contextlib.suppress(Exception):  # the sum's own error is the news
            self._writer.close()  # its footer goes nowhere

    def commit(self, keys: Mapping[str, str], partials: AuditPartials, counts: IngestCounts) -> None:
        """Finish the files and write the manifest naming them (the commit marker) for the days of ``keys``."""
        self._writer.close()
        self._sink.close()
        files = {"order_pairs": self._relative("order_pairs")}
        tables = {name: getattr(partials, name) for name in SMALL_TABLES}
        tables["judge_rows"] = pl.DataFrame(
            {"judge": list(self.judges), "rows": list(self.judges.values())},
            schema={"judge": pl.String, "rows": pl.Int64},
        )
        for name, frame in tables.items():
            storage.write_bytes(self._path(name), publish.table_bytes(frame, "parquet"))
            files[name] = self._relative(name)
        manifest = {
            "version": SUM_CACHE_VERSION,
            "days": [[day, keys[day]] for day in sorted(keys)],
            "counts": counts.to_dict(),
            "pairs_rows": self.rows,
            "files": files,
        }
        storage.atomic_write_text(manifest_path(self.days_dir), json.dumps(manifest, indent=1))
        stale = [f.path for f in storage.list_files(self.folder) if f.path.endswith(".parquet")]
        storage.delete([path for path in stale if self.tag not in path])
