"""``--judge-pool``: one judge effect per pool of judges, by name prefix or by a battle column.

Two rules, one option:

* ``prefix:SEP`` pools judges by their name up to SEP (``arena/voter-17`` → ``arena``).  It is
  applied when the fit codes the cells (:func:`biasboard.ranking.data.pool_judge_names`), so the
  stored cells keep every voter and the option can change without re-aggregating a day.
* ``column:NAME`` makes each battle's judge the value of its column NAME (e.g. a ``voter_group``
  the log carries beside the voter).  The pool is a property of the battle, not of the judge's
  name, so it is applied where battles are read — the ingest and the audit, before validation —
  and the stored cells hold the pools, not the voters: a day aggregated under ``column:NAME``
  gives the same cells as the same battles with the pool already written in ``judge``.  The rule
  is therefore part of each day's ingest settings (:func:`biasboard.transforms.ingest.ingest_settings`),
  so changing it re-aggregates every day rather than mixing pooled and unpooled days.

A battle whose pool value is null or blank keeps its own judge (a voter with no group is its own
judge, shrunk to the population as usual): nothing is dropped.  Grades (``--scores``) are pooled by
the same column: a voter's grades and battles are one judge's, and grades that kept their voters
fitted each voter's severity as a judge apart from its battles' pool (a board of 63 judges under
``prefix:/`` had 663 under ``column:``, without a word).  The column must exist in every battle and
grade file with rows and hold text or integers (null where a row keeps its own judge, e.g. an LLM
grader); both are checked from the files' footers before the pipeline runs, and a missing or
mistyped column fails in one line naming it and the file.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import polars as pl
import pyarrow as pa
from biasboard.ranking.data import CellsFold, pool_judge_names
from biasboard.ranking.spill import BucketedFold, JudgeBuckets, bucket_bounds, scratch_folder
from biasboard.schemas.battle import STYLE_COUNT_COLUMNS
from biasboard.schemas.errors import InputError
from biasboard.schemas.names import in_name_form
from biasboard.transforms.read import open_parquet
from biasboard.transforms.state import merge_due

#: The rule kinds ``--judge-pool`` takes, with an example each (for messages).
KINDS = {"prefix": "prefix:/", "column": "column:voter_group"}


#: Battle columns no ``column:`` pool may be: they describe the battle, so pooling by them would make the verdict
#: (``column:winner``), the models or the time the judge.  ``judge_family`` and the slice labels may be pools.
NOT_A_POOL = frozenset(
    {"battle_id", "ts", "model_a", "model_b", "winner", "prompt_id", "len_a", "len_b", "family_a", "family_b",
     "order_known", "strength", *STYLE_COUNT_COLUMNS}
)  # fmt: skip


@dataclass(frozen=True)
class JudgePool:
    """A parsed ``--judge-pool`` rule; ``None`` text means no pooling."""

    kind: str | None = None
    arg: str = ""

    @classmethod
    def parse(cls, text: str | None) -> JudgePool:
        if text is None:
            return cls()
        kind, _, arg = text.partition(":")
        if kind not in KINDS or not arg:
            examples = " or ".join(f"'{k}:{'SEP' if k == 'prefix' else 'NAME'}' (e.g. {e!r})" for k, e in KINDS.items())
            raise InputError(f"--judge-pool {text!r}: expected {examples}")
        if kind == "column" and arg in NOT_A_POOL:
            raise InputError(
                f"--judge-pool {text!r}: {arg} is part of the battle itself (who met whom, the verdict, when, its "
                "answers), not a group of judges: pool by a column the log carries beside the judge (e.g. "
                f"{KINDS['column']!r}, or judge_family)"
            )
        # a separator in the names' form (composed), as the names it splits are; a column's name is the file's own
        return cls(kind, in_name_form(arg) if kind == "prefix" else arg)

    @property
    def fit_rule(self) -> str | None:
        """What the fit pools by (:attr:`ModelConfig.judge_pool`): the prefix rule; a column is applied at ingest."""
        return f"prefix:{self.arg}" if self.kind == "prefix" else None

    @property
    def column(self) -> str | None:
        """The battle column whose value becomes the judge, for ``column:NAME``; else None."""
        return self.arg if self.kind == "column" else None


def carry(column: str | None) -> tuple[str, ...]:
    """The extra column a battle reader must keep for :func:`pool_by_column`."""
    return (column,) if column else ()


def pool_by_column(batch: pl.DataFrame, column: str | None) -> pl.DataFrame:
    """``batch`` with ``judge`` replaced by ``column``'s value where that is not null or blank.

    One vectorised expression per batch; a null or blank pool value keeps the row's own judge.  The
    column itself stays (the validator keeps only the battle columns it knows).
    """
    if not column or column not in batch.columns or "judge" not in batch.columns:
        return batch  # no rule, or a file with no rows: nothing to pool
    if batch.schema["judge"].is_nested():  # an unreadable judge: left for validation to dead-letter
        return batch
    pool = pl.col(column).cast(pl.String).str.strip_chars()
    judge = pl.when(pool.is_not_null() & (pool != "")).then(pool).otherwise(pl.col("judge").cast(pl.String))
    return batch.with_columns(judge.alias("judge"))


def _poolable(dtype: pa.DataType) -> bool:
    if pa.types.is_dictionary(dtype):
        dtype = dtype.value_type
    return (
        pa.types.is_string(dtype)
        or pa.types.is_large_string(dtype)
        or pa.types.is_string_view(dtype)
        or pa.types.is_integer(dtype)
        or pa.types.is_null(dtype)
    )


def check_pool_column(paths: Iterable[str], column: str | None, kind: str = "battle") -> None:
    """InputError when a ``kind`` (battle or grade) file with rows lacks ``column`` or holds it as neither text nor
    integers.

    Reads only each file's footer (as the up-front file check does), before any pipeline runs.  A grade file
    without the column is refused rather than read unpooled: its graders would be fitted as judges apart from
    the pools their battles joined.
    """
    if not column:
        return
    for path in paths:
        with open_parquet(path) as reader:
            rows, schema = reader.metadata.num_rows, reader.schema_arrow
        if rows == 0:
            continue
        if column not in schema.names:
            hint = (
                f"; grades are pooled by it too: add '{column}' (null where a grader is its own judge)"
                if kind == "grade"
                else ""
            )
            raise InputError(
                f"--judge-pool column:{column}: {kind} file {path} has no column '{column}' "
                f"(has: {', '.join(schema.names)}){hint}"
            )
        dtype = schema.field(column).type
        if not _poolable(dtype):
            raise InputError(
                f"--judge-pool column:{column}: {path} holds '{column}' as {dtype}; expected text or integers"
            )


def pool_buckets(buckets: JudgeBuckets, rule: str, bucket_rows: int, scratch: str | None = None) -> JudgeBuckets:
    """The cells of ``buckets`` with each judge replaced by its pool under the prefix ``rule``, summed by key, as
    judge buckets again, of pool names: what a streamed fit (:func:`~biasboard.ranking.stream.stream_dataset`)
    takes for one effect per pool.

    Why: above the streaming size the stored cells are merged by judge bucket on disk, and they keep every voter
    (the prefix rule is applied by the fit).  A pool's voters span many buckets, and a streamed fit needs each
    judge's cells whole in one bucket: so each voter bucket's rows are renamed to their pools and added to buckets
    of pool names, which fold as the merge does (:class:`~biasboard.ranking.spill.BucketedFold`).  Memory: one
    bucket at a time, not the history (holding the merged voter cells for ``build_dataset(..., judge_pool=rule)``
    grew with it).  The pooled cells are those ``build_dataset`` groups, their float sums added in another order.
    Two passes over ``buckets``: the first counts each pool's rows, for the new bounds (:func:`bucket_bounds`);
    when no judge's name holds the separator, nothing pools and ``buckets`` come back as they are.
    """
    recode = _PoolCodes(rule)
    rows: dict[str, int] = {}
    for table in buckets.tables():
        for chunk in recode(table.column("judge")).chunks:
            counts = np.bincount(chunk.indices.to_numpy(), minlength=len(chunk.dictionary))
            pools = chunk.dictionary.to_pylist()
            for i in np.flatnonzero(counts):
                rows[pools[i]] = rows.get(pools[i], 0) + int(counts[i])
    if not recode.renamed:  # every judge its own pool (no name holds the separator): the buckets as they are
        return buckets
    folder = scratch_folder(scratch)
    fold = BucketedFold(
        CellsFold(), "judge", bucket_bounds(list(rows), np.array(list(rows.values())), bucket_rows), folder.name
    )
    for table in buckets.tables():
        fold.add([recode.table(table)])
        del table
        if merge_due(fold):
            fold.fold()
    out = fold.finish(folder.name)
    out.scratch = folder
    return out


def pool_table(table: pa.Table, rule: str) -> pa.Table:
    """``table`` (cells with a ``judge`` column: the score cells beside :func:`pool_buckets`' pair cells) with each
    judge replaced by its pool under the prefix ``rule``, as ``build_dataset(..., judge_pool=rule)`` pools them."""
    return _PoolCodes(rule).table(table)


class _PoolCodes:
    """A judge column's codes re-coded to its pools under a prefix rule: the mapping made once per distinct
    dictionary (every bucket of a merge carries the same global judge dictionary: made once in all)."""

    def __init__(self, rule: str):
        self.rule = rule
        self.renamed = False  # some judge's pool is not its own name
        self._names: pa.Array | None = None
        self._pools = pa.array([], pa.string())
        self._to_pool = np.zeros(0, np.int32)

    def __call__(self, column: pa.ChunkedArray) -> pa.ChunkedArray:
        chunks = []
        for chunk in column.chunks:
            if not pa.types.is_dictionary(chunk.type):
                chunk = chunk.dictionary_encode()
            if self._names is None or not chunk.dictionary.equals(self._names):
                self._map(chunk.dictionary)
            indices = self._to_pool[chunk.indices.to_numpy(zero_copy_only=False)]
            chunks.append(pa.DictionaryArray.from_arrays(pa.array(indices), self._pools))
        return pa.chunked_array(chunks, pa.dictionary(pa.int32(), pa.string()))

    def table(self, table: pa.Table) -> pa.Table:
        """``table`` with its judge column re-coded to pools."""
        return table.set_column(table.schema.get_field_index("judge"), "judge", self(table.column("judge")))

    def _map(self, names: pa.Array) -> None:
        judges = names.to_pylist()
        of_name = pool_judge_names(judges, self.rule)
        self.renamed = self.renamed or of_name != tuple(judges)
        pools = sorted(set(of_name))
        position = {pool: i for i, pool in enumerate(pools)}
        self._names, self._pools = names, pa.array(pools, pa.string())
        self._to_pool = np.array([position[pool] for pool in of_name], np.int32)
