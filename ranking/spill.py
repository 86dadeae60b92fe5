"""A :class:`~biasboard.ranking.data.CodedFold` spilled to disk by judge range: memory one bucket, not the history.

Why: the in-memory fold holds the whole running total (~175 B a cell), and with voter-judges the cells hardly
merge, so the merge of a long history grows with it (docs/performance.md, Scale).  Here each coded day is cut by
judge into *buckets* — contiguous ranges of the judge names, so the buckets concatenated in order are the key
order — and each bucket's rows are appended to its own file; a fold folds one bucket at a time, from disk.

Same bits as the in-memory fold: the fold points are the in-memory fold's (the caller decides them from the
row counts, :attr:`CodedFold.pending_rows` and :attr:`CodedFold.total_rows`, which this class keeps as
sums over the buckets), and within a bucket a fold concatenates the running total and the pending days in
the order they came, as :meth:`CodedFold.fold` does, so a group meets the same rows in the same order and
:func:`~biasboard.ranking.data._group_sum` gives the same sums.  The vocabularies are shared by every
bucket and sorted once at the end (:meth:`BucketedFold.finish`), so each bucket's table carries the same
global dictionaries, its codes those of the in-memory table.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
from biasboard.ranking.allocator import release_freed_memory
from biasboard.ranking.data import CellsInput, CodedFold, _code_tables, _group_sum

#: Loads a bucket's starting running total (e.g. from the merged-cells cache) into the first rows of the
#: coded columns it is given (allocated for the total and the pending rows: no second copy).
TotalLoader = Callable[[dict[str, np.ndarray]], None]


#: Where batches read back from scratch files a batch at a time are allocated (:meth:`JudgeBuckets.batches`,
#: :meth:`SpilledRows.to_batches`): malloc's, each read's freed batches handed back after it
#: (:func:`~biasboard.ranking.allocator.release_freed_memory`).  Left in malloc's heap or in Arrow's default pool
#: (mimalloc, which kept them even when asked to release between batches), a pass over the plan's judged pairs kept
#: the file's size (+24 MB at bench/scale.py --scale 0.1) under the posterior's columns allocated next.
READ_POOL = pa.system_memory_pool()


def bucket_bounds(names: Sequence[str], rows: np.ndarray, bucket_rows: int) -> tuple[str, ...]:
    """The first judge name of every bucket after the first: ``names`` (any order) cut into contiguous sorted
    ranges of about ``bucket_rows`` rows each (``rows``: each name's rows); a judge is never split."""
    order = sorted(range(len(names)), key=names.__getitem__)
    counts = np.asarray(rows, np.int64)[order]
    total = int(counts.sum())
    n_buckets = max(1, -(-total // max(1, bucket_rows)))
    if n_buckets == 1:
        return ()
    start = np.cumsum(counts) - counts  # rows before each judge, in name order
    bucket = np.minimum(start * n_buckets // max(total, 1), n_buckets - 1)
    first = np.flatnonzero(np.diff(bucket) > 0) + 1
    return tuple(names[order[i]] for i in first)


class BucketedFold(CodedFold):
    """:class:`CodedFold`'s fold with its running total and pending rows kept per judge bucket on disk.

    ``bounds``: sorted names; bucket ``i`` holds the ``column`` values ``v`` with ``bounds[i-1] <= v <
    bounds[i]`` (:func:`bucket_bounds`).  ``folder``: where the bucket files go (a scratch folder the
    caller owns).  Memory: one coded input table while it is added, one bucket while it is folded.
    """

    def __init__(self, template: CodedFold, column: str, bounds: Sequence[str], folder: str) -> None:
        super().__init__(template.schema, template.keys, [], template.nullable)
        self.vocabs = template.vocabs
        self.column = column
        self.bounds = tuple(bounds)
        if list(self.bounds) != sorted(set(self.bounds)):
            raise ValueError("bucket bounds must be sorted and distinct")
        self._bounds = np.array(self.bounds, dtype=str)
        self.folder = folder
        self.n_buckets = len(self.bounds) + 1
        self._of_code = np.zeros(0, np.int32)  # provisional code of ``column`` → bucket
        self._dtypes = self.coded_dtypes()
        self.bucket_total = [0] * self.n_buckets
        self.bucket_pending = [0] * self.n_buckets
        self._blocks: list[list[int]] = [[] for _ in range(self.n_buckets)]  # rows of each pending block
        self._loaders: dict[int, TotalLoader] = {}
        self.scratch: ScratchFolder | None = None  # a scratch folder the fold keeps alive

    # -- files ------------------------------------------------------------------------------------------
    def _path(self, bucket: int, kind: str) -> str:
        return os.path.join(self.folder, f"bucket-{bucket:05d}.{kind}")

    def _write(self, path: str, columns: dict[str, np.ndarray], rows: slice | np.ndarray, mode: str) -> None:
        """Append ``rows`` of every column to ``path``, a column after another (a block: columns stay
        contiguous on disk and in memory, which the fold's gathers need to be fast)."""
        with open(path, mode) as sink:
            for name in self.schema.names:
                np.ascontiguousarray(columns[name][rows], self._dtypes[name]).tofile(sink)

    def set_total(self, bucket: int, rows: int, loader: TotalLoader) -> None:
        """Start ``bucket`` from a running total of ``rows`` rows that ``loader`` codes when it is first needed
        (the merged-cells cache: a bucket untouched until the end is read once)."""
        self._loaders[bucket] = loader
        self.bucket_total[bucket] = rows
        self.total_rows += rows

    def bucket_of(self, values: Sequence[str]) -> np.ndarray:
        """The bucket of each name (where it sorts among the bounds)."""
        if not self.bounds:
            return np.zeros(len(values), np.int32)
        return np.searchsorted(self._bounds, np.array(values, dtype=str), side="right").astype(np.int32)

    # -- the fold ---------------------------------------------------------------------------------------
    def add(self, cells: CellsInput, what: str = "cells") -> None:
        """Code ``cells`` and append each bucket's rows to its pending file (in the order they came)."""
        coded = _code_tables(cells, self.schema, what, self.vocabs, nullable=self.nullable)
        if coded is None:
            return
        vocab = self.vocabs[self.column]
        if len(self._of_code) < len(vocab.index):
            new = list(vocab.index)[len(self._of_code) :]
            self._of_code = np.concatenate([self._of_code, self.bucket_of(new)])
        rows = len(coded[self.column])
        bucket = self._of_code[coded[self.column]]
        order = np.argsort(bucket, kind="stable")
        counts = np.bincount(bucket, minlength=self.n_buckets)
        start = 0
        for b in np.flatnonzero(counts):
            end = start + int(counts[b])
            # each bucket's rows gathered a column at a time as they are written, not the whole table reordered
            # first: a copy of the input (a day's audit order pairs: 100 MB) was the fold's add's peak
            taken = order[start:end] if self.bounds else slice(start, end)
            self._write(self._path(int(b), "pending"), coded, taken, "ab")
            self.bucket_pending[b] += end - start
            self._blocks[b].append(end - start)
            start = end
        self.pending_rows += rows

    def _load(self, bucket: int) -> dict[str, np.ndarray]:
        """The bucket's running total followed by its pending rows (in the order they came), as columns."""
        total, pending = self.bucket_total[bucket], self.bucket_pending[bucket]
        columns = {name: np.empty(total + pending, self._dtypes[name]) for name in self.schema.names}
        if bucket in self._loaders:
            self._loaders.pop(bucket)(columns)
        elif total:
            self._read(self._path(bucket, "total"), columns, [total], 0)
        if pending:
            self._read(self._path(bucket, "pending"), columns, self._blocks[bucket], total)
        return columns

    def _read(self, path: str, columns: dict[str, np.ndarray], blocks: list[int], start: int) -> None:
        """Fill ``columns`` from row ``start`` on with the blocks of ``path`` (:meth:`_write`), in order."""
        with open(path, "rb") as source:
            for rows in blocks:
                for name in self.schema.names:
                    view = columns[name][start : start + rows].view(np.uint8)
                    if source.readinto(view.data) != view.nbytes:
                        raise OSError(f"{path}: bucket file shorter than expected")
                start += rows

    def fold(self) -> None:
        """Fold every bucket with pending rows into its running total on disk."""
        if not self.pending_rows:
            return
        for bucket in range(self.n_buckets):
            if not self.bucket_pending[bucket]:
                continue
            columns = _group_sum(self._load(bucket), self.keys, self.measures)
            os.remove(self._path(bucket, "pending"))
            self.bucket_pending[bucket] = 0
            self._blocks[bucket] = []
            rows = len(columns[self.keys[0]])
            self._write(self._path(bucket, "total"), columns, slice(None), "wb")
            del columns  # before the next bucket is loaded: memory one bucket, not two
            self.total_rows += rows - self.bucket_total[bucket]
            self.bucket_total[bucket] = rows
        self.pending_rows = 0

    def finish(
        self,
        folder: str,
        on_total: Callable[[int, dict[str, np.ndarray]], None] | None = None,
        batch_rows: int | None = None,
    ) -> JudgeBuckets:
        """Fold every bucket, sort the vocabularies, and write each bucket's table (as :meth:`CodedFold.table`
        makes it: rows in key order, dictionary-encoded keys with the global vocabularies) under ``folder``.

        ``on_total``: called with each non-empty bucket's running total as of the last :meth:`fold` (provisional
        codes; views, not to be kept) before the pending rows join it — what the merged-cells cache stores.
        ``batch_rows``: write each table as record batches of about that many rows, each ending where a judge's rows
        end, for a reader that takes a batch at a time (:meth:`JudgeBuckets.batches`); None: a batch per bucket.
        """
        vocabularies, remaps = {}, {}
        for vocab in dict.fromkeys(self.vocabs.values()):
            names, remaps[id(vocab)] = vocab.finish()
            vocabularies[id(vocab)] = pa.array(names, pa.string())
        paths, rows = [], []
        for bucket in range(self.n_buckets):
            total = self.bucket_total[bucket]
            if not total and not self.bucket_pending[bucket]:
                continue
            columns = self._load(bucket)
            if on_total is not None and total:
                on_total(bucket, {name: values[:total] for name, values in columns.items()})
            columns = _group_sum(columns, self.keys, self.measures)
            for key, vocab in self.vocabs.items():
                remap = remaps[id(vocab)]
                if remap.size:
                    codes = columns[key]
                    columns[key] = np.where(codes >= 0, remap[np.maximum(codes, 0)], np.int32(-1))
            columns = _group_sum(columns, self.keys, self.measures)  # distinct keys: only a sort
            n = len(columns[self.keys[0]])
            cuts = [0, n] if batch_rows is None else judge_cuts(columns[self.column], batch_rows)
            table = self._arrow(columns, vocabularies, dictionary=True)  # (takes the columns)
            path = os.path.join(folder, f"table-{bucket:05d}.arrow")
            with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
                for start, end in itertools.pairwise(cuts):
                    writer.write_table(table.slice(start, end - start))
            del table
            paths.append(path)
            rows.append(n)
            for kind in ("total", "pending"):
                if os.path.exists(self._path(bucket, kind)):
                    os.remove(self._path(bucket, kind))
        self.total_rows = self.pending_rows = 0
        return JudgeBuckets(tuple(paths), tuple(rows))


def judge_cuts(codes: np.ndarray, rows: int) -> list[int]:
    """Row offsets (0 first, ``len(codes)`` last) cutting sorted judge ``codes`` into runs of about ``rows`` rows,
    each ending where a judge's rows end (a judge of more rows is a run of its own)."""
    cuts, start = [0], 0
    while start < len(codes):
        end = start + rows
        if end < len(codes):
            cut = int(np.searchsorted(codes, codes[end], side="left"))
            end = cut if cut > start else int(np.searchsorted(codes, codes[start], side="right"))
        end = min(end, len(codes))
        cuts.append(end)
        start = end
    return cuts if len(cuts) > 1 else [0, 0]


@dataclass
class JudgeBuckets:
    """Merged cells as judge-range buckets on disk: each bucket a table with the global dictionaries.

    ``tables()`` reads the buckets again on every call, one at a time (memory one bucket); concatenated
    in order they are the merged table in key order (the buckets are contiguous sorted judge ranges).
    The files are removed with the folder they live in (``scratch``: removed when this is collected).
    """

    paths: tuple[str, ...]
    rows: tuple[int, ...]
    scratch: ScratchFolder | None = field(default=None, repr=False)

    @property
    def n_rows(self) -> int:
        return sum(self.rows)

    @property
    def n_buckets(self) -> int:
        return len(self.paths)

    def tables(self) -> Iterator[pa.Table]:
        """Each bucket's table, read from disk (memory-mapped: its pages are the file's, freed with the table)."""
        for path in self.paths:
            yield pa.ipc.open_file(pa.memory_map(path)).read_all()

    def batches(self) -> Iterator[pa.Table]:
        """Each bucket's record batches in turn (:meth:`BucketedFold.finish`'s ``batch_rows``), each as a table read
        into memory of its own: memory one batch.  Why not :meth:`tables`' mapped files: a mapped table's pages,
        once read, stay resident until the whole table is dropped, so reading one through held the whole bucket
        (the audit's summed order pairs, ~330 bytes a row: +190 MB at bench/scale.py's tenth-size N)."""
        for path in self.paths:
            with pa.OSFile(path, memory_pool=READ_POOL) as source:
                reader = pa.ipc.open_file(source, memory_pool=READ_POOL)
                for i in range(reader.num_record_batches):
                    yield pa.Table.from_batches([reader.get_batch(i)])
            release_freed_memory()

    def table(self) -> pa.Table:
        """All buckets as one table (for tests and small states: this holds the whole history)."""
        tables = list(self.tables())
        return pa.concat_tables(tables) if tables else pa.table({})


class ScratchFolder:
    """A scratch folder (``name``) removed when this object is collected, at exit, or by :meth:`cleanup`.

    Why not ``tempfile.TemporaryDirectory`` with a finalizer calling its ``cleanup``: that bound method holds the
    object, so the finalizer kept every folder (the merged buckets' files, GBs at scale) until the process exited;
    and the directory's own finalizer warns when it is the one that cleans up."""

    def __init__(self, parent: str | None = None) -> None:
        self.name = tempfile.mkdtemp(prefix="biasboard-buckets-", dir=parent)
        self._remove = weakref.finalize(self, shutil.rmtree, self.name, ignore_errors=True)

    def cleanup(self) -> None:
        self._remove()


def scratch_folder(parent: str | None = None) -> ScratchFolder:
    """A scratch folder removed when its object is collected (or at exit)."""
    return ScratchFolder(parent)


@dataclass
class SpilledRows:
    """Rows set aside on disk until they are read again, a record batch at a time (:func:`spill_rows`).

    Why not the table memory-mapped, as before: a mapped file's pages, once read, stay in the process's resident
    set until the whole table is dropped, so reading it through (the plan's posterior after the fit: the judged
    pairs, 68 / 103 MB at bench/scale.py's N / 2N) held every batch at once, at the refresh's peak.  A batch read
    here is the process's own memory, freed with it: the reader holds one batch.
    """

    path: str
    schema: pa.Schema
    num_rows: int
    scratch: ScratchFolder = field(repr=False)

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        """The rows' record batches as written (one per chunk of the table spilled, each with its dictionaries)."""
        with pa.OSFile(self.path, memory_pool=READ_POOL) as source:
            yield from pa.ipc.open_stream(source, memory_pool=READ_POOL)
        release_freed_memory()

    def read_all(self) -> pa.Table:
        """Every row as one table (for small tables and tests: this holds them all)."""
        batches = list(self.to_batches())
        return pa.Table.from_batches(batches, self.schema)


def spill_rows(table: pa.Table, parent: str | None = None) -> SpilledRows:
    """``table`` written to a scratch file (removed when the result is collected): rows held for later leave the
    process's memory until they are read again.  An IPC stream, not a file: a stream takes each chunk's own
    dictionaries (a table concatenated from judge buckets)."""
    scratch = scratch_folder(parent)
    path = os.path.join(scratch.name, "rows.arrows")
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return SpilledRows(path, table.schema, table.num_rows, scratch)


def as_table(rows: pa.Table | SpilledRows) -> pa.Table:
    """``rows`` as a table (spilled rows read back whole)."""
    return rows.read_all() if isinstance(rows, SpilledRows) else rows
