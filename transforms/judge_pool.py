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
judge, shrunk to the population as usual): nothing is dropped.  The column must exist in every
input file with rows and hold text or integers; both are checked from the files' footers before
the pipeline runs, and a missing or mistyped column fails in one line naming it and the file.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import polars as pl
import pyarrow as pa
from biasboard.schemas.errors import InputError
from biasboard.transforms.read import open_parquet

#: The rule kinds ``--judge-pool`` takes, with an example each (for messages).
KINDS = {"prefix": "prefix:/", "column": "column:voter_group"}


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
        return cls(kind, arg)

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


def check_pool_column(paths: Iterable[str], column: str | None) -> None:
    """InputError when a battle file with rows lacks ``column`` or holds it as neither text nor integers.

    Reads only each file's footer (as the up-front file check does), before any pipeline runs.
    """
    if not column:
        return
    for path in paths:
        reader = open_parquet(path)
        if reader.metadata.num_rows == 0:
            continue
        schema = reader.schema_arrow
        if column not in schema.names:
            raise InputError(
                f"--judge-pool column:{column}: {path} has no column '{column}' (has: {', '.join(schema.names)})"
            )
        dtype = schema.field(column).type
        if not _poolable(dtype):
            raise InputError(
                f"--judge-pool column:{column}: {path} holds '{column}' as {dtype}; expected text or integers"
            )
