"""Validate a record batch of battles (or scores): split valid rows from dead letters.

The rules themselves (what is bad, and which reason wins) live in
:mod:`biasboard.schemas.rules`; this module applies them to a polars frame in a
handful of vectorised passes, detects repeated ids across every batch of a day
(:class:`SeenIds`), and builds dead-letter rows that keep the original values
as text.  Nothing here loops over rows in Python.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl
import pyarrow as pa
from biasboard.schemas import rules
from biasboard.schemas.battle import BATTLE_REQUIRED, BATTLE_SCHEMA, SCORE_REQUIRED, SCORE_SCHEMA
from biasboard.schemas.deadletter import REASON_DUPLICATE_ID, dead_letter_schema
from biasboard.schemas.errors import InputError

REASON = "_reason"
ROW = "_row"
TS = "_ts"
WINNER_CODE = "_winner"
SCORE = "_score"
#: Optional column carrying each row's position in its file (set when rows were filtered before validation).
SOURCE_ROW = "_source_row"

BATTLE_DEAD_LETTER_SCHEMA = dead_letter_schema(BATTLE_SCHEMA)
SCORE_DEAD_LETTER_SCHEMA = dead_letter_schema(SCORE_SCHEMA)

#: Two independently seeded 64-bit hashes of an id: a false "duplicate" needs both
#: to collide at once (~2^-128 per pair), far below any other failure rate.
_HASH_SEEDS = (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F)


def hash_ids(ids: pl.Series) -> tuple[np.ndarray, np.ndarray]:
    """Two independent 64-bit hashes of each id (uint64 arrays)."""
    ids = ids.cast(pl.String)
    return tuple(ids.hash(seed).to_numpy() for seed in _HASH_SEEDS)  # type: ignore[return-value]


@dataclass
class SeenIds:
    """The ids seen so far in one day, as sorted runs of (h1, h2) hash pairs.

    A log-structured set: each batch adds one sorted run; runs of similar size
    are merged like a binary counter, so a day of n ids costs O(n log² n) numpy
    work and 16 bytes per id, with no Python per id.  Membership needs both
    hashes to match (h2 is checked against every h1 match, so an h1-only
    collision is never taken for a duplicate).
    """

    runs: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)

    def __len__(self) -> int:
        return sum(len(h1) for h1, _ in self.runs)

    def contains(self, h1: np.ndarray, h2: np.ndarray) -> np.ndarray:
        found = np.zeros(len(h1), dtype=bool)
        for run_h1, run_h2 in self.runs:
            lo = np.searchsorted(run_h1, h1, side="left")
            hi = np.searchsorted(run_h1, h1, side="right")
            width = hi - lo
            single = width == 1
            found[single] |= run_h2[lo[single]] == h2[single]
            for i in np.flatnonzero(width > 1):  # h1 collisions inside a run: astronomically rare
                found[i] |= bool(np.any(run_h2[lo[i] : hi[i]] == h2[i]))
        return found

    def add(self, h1: np.ndarray, h2: np.ndarray) -> None:
        if len(h1) == 0:
            return
        order = np.argsort(h1, kind="stable")
        self.runs.append((h1[order], h2[order]))
        while len(self.runs) > 1 and len(self.runs[-2][0]) <= 2 * len(self.runs[-1][0]):
            (a1, a2), (b1, b2) = self.runs[-2], self.runs.pop()
            m1, m2 = np.concatenate([a1, b1]), np.concatenate([a2, b2])
            order = np.argsort(m1, kind="stable")
            self.runs[-1] = (m1[order], m2[order])


def normalise_columns(batch: pa.Table | pa.RecordBatch, kind: str = "battle", source: str = "") -> pl.DataFrame:
    """Batch → polars frame with our column names; absent optional columns added as nulls."""
    df = pl.from_arrow(batch)
    assert isinstance(df, pl.DataFrame)
    schema, required = (BATTLE_SCHEMA, BATTLE_REQUIRED) if kind == "battle" else (SCORE_SCHEMA, SCORE_REQUIRED)
    renames = rules.apply_column_aliases(df.columns)
    if renames:
        df = df.rename(renames)
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise InputError(f"{source or 'batch'}: required column(s) missing: {', '.join(missing)}")
    absent = [pl.lit(None, dtype=pl.String).alias(f.name) for f in schema if f.name not in df.columns]
    keep = [f.name for f in schema if f.name in df.columns] + [c for c in (SOURCE_ROW,) if c in df.columns]
    return df.select(keep).with_columns(absent) if absent else df.select(keep)


@dataclass
class Validated:
    """One batch split: valid rows (with parsed helper columns) and the dead letters."""

    valid: pl.DataFrame
    dead_letters: pa.Table
    read: int
    rejected: dict[str, int]


def _dead_letters(df: pl.DataFrame, mask: pl.Series, schema: pa.Schema, source_file: str, row_offset: int) -> pa.Table:
    rejected = df.filter(mask)
    if rejected.height == 0:
        return schema.empty_table()
    originals = [f.name for f in schema if f.name not in {"reason", "source_file", "source_row"}]
    out = rejected.select(
        *[pl.col(c).cast(pl.String) for c in originals],
        pl.col(REASON).alias("reason"),
        pl.lit(source_file, dtype=pl.String).alias("source_file"),
        (pl.col(SOURCE_ROW) if SOURCE_ROW in df.columns else pl.col(ROW) + row_offset)
        .cast(pl.Int64)
        .alias("source_row"),
    )
    return out.to_arrow().cast(schema)


def _mark_duplicates(df: pl.DataFrame, id_column: str, reason: str, seen: SeenIds | None) -> pl.DataFrame:
    """Set ``reason`` on valid rows whose id was already kept (this batch or earlier in the day)."""
    candidates = df.filter(pl.col(REASON).is_null()).select(ROW, pl.col(id_column).cast(pl.String))
    if candidates.height == 0:
        return df
    first = candidates.get_column(id_column).is_first_distinct().to_numpy()
    dup = ~first
    if seen is not None:
        h1, h2 = hash_ids(candidates.get_column(id_column))
        unique_idx = np.flatnonzero(first)
        earlier = seen.contains(h1[unique_idx], h2[unique_idx])
        dup[unique_idx[earlier]] = True
        keep = unique_idx[~earlier]
        seen.add(h1[keep], h2[keep])
    if not dup.any():
        return df
    dup_rows = candidates.get_column(ROW).to_numpy()[dup]
    is_dup = np.zeros(df.height, dtype=bool)
    is_dup[dup_rows] = True
    return df.with_columns(pl.when(pl.Series(is_dup)).then(pl.lit(reason)).otherwise(pl.col(REASON)).alias(REASON))


def _split(df: pl.DataFrame, schema: pa.Schema, source_file: str, row_offset: int) -> Validated:
    bad = pl.col(REASON).is_not_null()
    counts = df.filter(bad).get_column(REASON).value_counts()
    rejected = {str(r): int(n) for r, n in counts.iter_rows()}
    dead = _dead_letters(df, df.select(bad).to_series(), schema, source_file, row_offset)
    return Validated(df.filter(~bad), dead, df.height, rejected)


def validate_battles(
    batch: pa.Table | pa.RecordBatch, seen: SeenIds | None = None, source_file: str = "", row_offset: int = 0
) -> Validated:
    """Apply the battle rules to one batch.

    ``seen`` carries the day's kept ids between batches (None: duplicates are
    only detected within this batch).  Valid rows gain ``_ts`` (UTC instant),
    ``_winner`` (code, index into WINNER_VALUES) and numeric ``len_a``/``len_b``.
    """
    df = normalise_columns(batch, "battle", source_file)
    schema = df.schema
    df = df.with_row_index(ROW).with_columns(
        rules.timestamp_expr(schema["ts"]).alias(TS),
        rules.length_expr("len_a", schema["len_a"]).alias("_len_a"),
        rules.length_expr("len_b", schema["len_b"]).alias("_len_b"),
    )
    df = df.with_columns(rules.battle_reason_expr(schema, TS, ("_len_a", "_len_b")).alias(REASON))
    df = _mark_duplicates(df, "battle_id", REASON_DUPLICATE_ID, seen)
    out = _split(df, BATTLE_DEAD_LETTER_SCHEMA, source_file, row_offset)
    out.valid = out.valid.with_columns(
        rules.winner_expr().replace_strict(rules.WINNER_CODES, return_dtype=pl.Int8).alias(WINNER_CODE),
        *(pl.col(c).cast(pl.String) for c in ("judge", "model_a", "model_b")),
    )
    return out


def validate_scores(
    batch: pa.Table | pa.RecordBatch, seen: SeenIds | None = None, source_file: str = "", row_offset: int = 0
) -> Validated:
    """Apply the score rules to one batch (see :func:`validate_battles`); valid rows gain ``_score``."""
    df = normalise_columns(batch, "score", source_file)
    schema = df.schema
    df = df.with_row_index(ROW).with_columns(
        rules.timestamp_expr(schema["ts"]).alias(TS),
        rules.length_expr("len", schema["len"]).alias("_len"),
        rules.score_value_expr(schema["score"]).alias(SCORE),
    )
    df = df.with_columns(rules.score_reason_expr(schema, TS, SCORE, "_len").alias(REASON))
    df = _mark_duplicates(df, "score_id", rules.REASON_DUPLICATE_SCORE_ID, seen)
    out = _split(df, SCORE_DEAD_LETTER_SCHEMA, source_file, row_offset)
    out.valid = out.valid.with_columns(
        *(pl.col(c).cast(pl.String) for c in ("judge", "model", "prompt_id")),
    )
    return out
