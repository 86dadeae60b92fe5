"""Validate a record batch of battles (or scores): split valid rows from dead letters.

The rules themselves (what is bad, and which reason wins) live in
:mod:`biasboard.schemas.rules`; this module applies them to a polars frame in a
handful of vectorised passes, detects repeated ids across every batch of a day
(:class:`SeenIds`), and builds dead-letter rows that keep the original values
as text.  Nothing here loops over rows in Python.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TypeAlias

import numpy as np
import polars as pl
import pyarrow as pa
from biasboard.schemas import rules
from biasboard.schemas.battle import (
    BATTLE_REQUIRED,
    BATTLE_SCHEMA,
    SCORE_REQUIRED,
    SCORE_SCHEMA,
    SLICE_COLUMNS,
    STYLE_COUNT_COLUMNS,
)
from biasboard.schemas.coerce import coerce_types
from biasboard.schemas.deadletter import REASON_DUPLICATE_ID, dead_letter_schema
from biasboard.schemas.errors import InputError
from biasboard.schemas.folder_day import OffDay, dated_outside
from biasboard.schemas.names import (
    BATTLE_NAME_COLUMNS,
    SCORE_NAME_COLUMNS,
    AliasMap,
    NameFixes,
    as_written,
    clean_names,
)
from biasboard.schemas.string_hash import string_hash

REASON = "_reason"
ROW = "_row"
#: Per row: true where ``ts`` holds a plausible instant, else null (:func:`~biasboard.schemas.rules.timestamps_valid`).
TS = "_ts"
WINNER_CODE = "_winner"
SCORE = "_score"
#: Optional column carrying each row's position in its file (set when rows were filtered before validation).
SOURCE_ROW = "_source_row"

#: A batch of rows: an Arrow table or record batch, or a polars frame (what the Parquet reader yields).
Batch: TypeAlias = pa.Table | pa.RecordBatch | pl.DataFrame

BATTLE_DEAD_LETTER_SCHEMA = dead_letter_schema(BATTLE_SCHEMA)
SCORE_DEAD_LETTER_SCHEMA = dead_letter_schema(SCORE_SCHEMA)

#: Two independently seeded 64-bit hashes of an id: a false "duplicate" needs both
#: to collide at once (~2^-128 per pair), far below any other failure rate.  The first is
#: :func:`~biasboard.schemas.string_hash.string_hash` (the one a day stores, so it must not change with a library
#: version), the second polars' own (faster; it never leaves the day's process).
_HASH_SEEDS = (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F)
#: The hash :meth:`SeenIds.kept_hashes` gives (a day's stored ids are compared only with ids hashed the same way).
ID_HASH_SCHEME = f"biasboard string_hash v1 seed {_HASH_SEEDS[0]:#x}"


def first_hash(ids: pl.Series) -> np.ndarray:
    """The first of an id's two hashes (the stored one), of every row."""
    return string_hash(ids, _HASH_SEEDS[0])


def second_hash(ids: pl.Series) -> np.ndarray:
    """The second of an id's two hashes, of every row."""
    return ids.hash(_HASH_SEEDS[1]).to_numpy()


def first_occurrences(ids: pl.Series, h1: np.ndarray | None = None, rows: np.ndarray | None = None) -> np.ndarray:
    """Mask of the first occurrence of each id among ``ids[rows]`` (None: every row), exact by value.

    Integer hashes find candidates fast (one sort of the hashes finds the
    repeated ones; numpy sorts 500k of them in a few ms); only
    rows whose hash repeats (true repeats, or the rare collision) are compared
    as strings.  ``h1`` is :func:`first_hash` of every row when the
    caller has it already (see :func:`_split`); ``rows`` picks the candidates
    without gathering their strings.
    """
    if h1 is None:
        h1 = first_hash(ids)
    hashes = h1 if rows is None else h1[rows]
    first = np.ones(len(hashes), dtype=bool)
    ordered = np.sort(hashes)
    repeated = ordered[1:][ordered[1:] == ordered[:-1]]
    if not len(repeated):
        return first
    shared = np.flatnonzero(pl.Series(hashes).is_in(pl.Series(repeated).implode()).to_numpy())  # hash repeats
    first[shared] = ids.gather(shared if rows is None else rows[shared]).is_first_distinct().to_numpy()
    return first


def hash_ids(ids: pl.Series) -> tuple[np.ndarray, np.ndarray]:
    """Two independent 64-bit hashes of each id (uint64 arrays)."""
    ids = ids.cast(pl.String)
    return first_hash(ids), second_hash(ids)


#: Blank checks the screen in :func:`_split` may skip: a blank ``ts`` never parses and a blank
#: ``winner`` (or score) never has a code, so the parse condition already flags those rows
#: (their reason is still the blank one: :func:`~biasboard.schemas.rules.first_reason` runs the full chain).
_IMPLIED_BLANKS = frozenset(rules.REASON_MISSING_PREFIX + c for c in ("ts", "winner", "score"))


def blank_mask(text: pl.Series) -> pl.Series:
    """:func:`~biasboard.schemas.rules.is_blank` of a String column, without stripping every value.

    A value whose first byte is printable, non-space ASCII is never blank, and
    Arrow's string views keep every value's first bytes inline, so one numpy
    look at the views clears almost every row; only the rest (null, empty,
    leading space or non-ASCII) go through the exact strip check.
    """
    arr = text.to_arrow(compat_level=pl.CompatLevel.newest())
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if arr.type != pa.string_view():  # not the layout we read below: the plain check
        return text.to_frame("t").select(rules.is_blank("t", pl.String)).to_series()
    views = np.frombuffer(arr.buffers()[1], dtype=np.uint8).reshape(-1, 16)[arr.offset : arr.offset + len(arr)]
    first = views[:, 4]  # the first byte of the value (0 for an empty one)
    suspect = np.flatnonzero((first < 0x21) | (first > 0x7E) | text.is_null().to_numpy())
    blank = np.zeros(len(text), dtype=bool)
    if len(suspect):
        checked = text.gather(suspect).to_frame("t").select(rules.is_blank("t", pl.String)).to_series()
        blank[suspect] = checked.to_numpy()
    return pl.Series(blank)


@dataclass
class SeenIds:
    """The ids kept so far in one day, as sorted runs of (h1, h2) hash pairs.

    A log-structured set: each batch adds one sorted run, and runs of similar
    size are merged like a binary counter, so a day of n ids costs
    O(n log² n) numpy work and 16 bytes per id, with no Python per id.  Queries
    are sorted before they are looked up, so the binary searches walk memory
    in order.  An id counts as seen only when both hashes match (h2 is checked
    against every h1 match, so an h1-only collision is never a duplicate).
    The newest run is sorted only when the next batch arrives, so a day that
    fits in one batch never sorts at all, nor computes its second hashes.
    """

    runs: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)
    pending: tuple[np.ndarray, np.ndarray | Callable[[], np.ndarray]] | None = None

    def __len__(self) -> int:
        return sum(len(h1) for h1, _ in self.runs) + (len(self.pending[0]) if self.pending is not None else 0)

    def _contains_sorted(self, s1: np.ndarray, s2: np.ndarray) -> np.ndarray:
        found = np.zeros(len(s1), dtype=bool)
        for run_h1, run_h2 in self.runs:
            lo = np.searchsorted(run_h1, s1, side="left")
            hi = np.searchsorted(run_h1, s1, side="right")
            width = hi - lo
            single = width == 1
            found[single] |= run_h2[lo[single]] == s2[single]
            for i in np.flatnonzero(width > 1):  # an h1 shared by several kept ids: astronomically rare
                found[i] |= bool(np.any(run_h2[lo[i] : hi[i]] == s2[i]))
        return found

    def _add_sorted(self, s1: np.ndarray, s2: np.ndarray) -> None:
        if len(s1) == 0:
            return
        self.runs.append((s1, s2))
        while len(self.runs) > 1 and len(self.runs[-2][0]) <= 2 * len(self.runs[-1][0]):
            (a1, a2), (b1, b2) = self.runs[-2], self.runs.pop()
            m1, m2 = np.concatenate([a1, b1]), np.concatenate([a2, b2])
            order = np.argsort(m1, kind="stable")  # two sorted runs: timsort merges them in linear time
            self.runs[-1] = (m1[order], m2[order])

    def _settle(self) -> None:
        """Sort the run added last (sorting is deferred until a later batch needs to look ids up)."""
        if self.pending is not None:
            h1, h2 = self.pending
            self.pending = None
            h2 = h2() if callable(h2) else h2
            order = np.argsort(h1, kind="stable")
            self._add_sorted(h1[order], h2[order])

    def kept_hashes(self) -> np.ndarray:
        """The first hashes (``h1``) of every id kept, unsorted: what a day stores to find its ids on other days
        (:mod:`~biasboard.transforms.repeated_ids`)."""
        parts = [h1 for h1, _ in self.runs] + ([self.pending[0]] if self.pending is not None else [])
        return np.concatenate(parts) if parts else np.zeros(0, np.uint64)

    def admit(self, h1: np.ndarray, h2: np.ndarray | Callable[[], np.ndarray]) -> np.ndarray:
        """Mask of rows whose id was not kept before; those ids are added to the set.

        The rows given must already be distinct within their batch (see
        :func:`_split`, which keeps the first occurrence exactly, by value).
        ``h2`` may be a function giving them: the day's first batch has nothing
        to look up, so its second hashes are computed only if a later batch comes.
        """
        self._settle()
        if self.runs:
            h2 = h2() if callable(h2) else h2
            order = np.argsort(h1, kind="stable")
            fresh_sorted = ~self._contains_sorted(h1[order], h2[order])
            fresh = np.empty(len(h1), dtype=bool)
            fresh[order] = fresh_sorted
            self.pending = (h1[fresh], h2[fresh])
        else:  # the day's first batch: nothing to look up
            fresh = np.ones(len(h1), dtype=bool)
            self.pending = (h1, h2)
        return fresh


def normalise_columns(
    batch: Batch, kind: str = "battle", source: str = "", carry: tuple[str, ...] = ()
) -> pl.DataFrame:
    """Batch → polars frame with our column names; absent optional columns added as nulls.

    Columns of a type the rules cannot read are made text with a flag that
    dead-letters their rows (:func:`~biasboard.schemas.coerce.coerce_types`).

    ``carry`` names extra columns (e.g. an audit's ``gold``) kept when present.
    """
    df = batch if isinstance(batch, pl.DataFrame) else pl.from_arrow(batch)
    assert isinstance(df, pl.DataFrame)
    schema, required = (BATTLE_SCHEMA, BATTLE_REQUIRED) if kind == "battle" else (SCORE_SCHEMA, SCORE_REQUIRED)
    renames = rules.apply_column_aliases(df.columns)
    if renames:
        df = df.rename(renames)
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise InputError(f"{source or 'batch'}: required column(s) missing: {', '.join(missing)}")
    absent = [pl.lit(None, dtype=pl.String).alias(f.name) for f in schema if f.name not in df.columns]
    extra = [c for c in (SOURCE_ROW, *carry) if c in df.columns and c not in schema.names]
    keep = [f.name for f in schema if f.name in df.columns] + extra
    df = df.select(keep).with_columns(absent) if absent else df.select(keep)
    return coerce_types(df, [*schema.names, *carry])


@dataclass
class Validated:
    """One batch split: valid rows (only the columns cells need) and the dead letters.

    The batch's rows are kept unfiltered (``rows``) beside the mask of the valid
    ones (``kept``; None: every row), and :attr:`valid` cuts them on first use:
    the ingest's cells never need the cut frame (they filter integer codes and
    measures instead, :func:`~biasboard.transforms.cells.partial_cells`), and
    cutting a frame of text columns costs more than all of that.
    """

    rows: pl.DataFrame
    kept: np.ndarray | None
    dead_letters: pa.Table
    read: int
    rejected: dict[str, int]
    #: Valid rows whose judge or model name was trimmed / renamed by the alias map (see schemas.names).
    trimmed: int = 0
    renamed: int = 0
    #: Valid rows dated outside the day their folder names (:mod:`biasboard.schemas.folder_day`; checked when given).
    off_day: OffDay = field(default_factory=OffDay)
    #: The alias map's keys that renamed a valid row (:meth:`~biasboard.schemas.names.NameFixes.aliased`).
    aliased: frozenset[str] = frozenset()

    @cached_property
    def valid(self) -> pl.DataFrame:
        """The valid rows, in batch order."""
        return self.rows if self.kept is None else self.rows.filter(pl.Series(self.kept))

    @property
    def counted(self) -> int:
        """How many rows are valid."""
        return self.rows.height if self.kept is None else int(self.kept.sum())


def _dead_letters(rejected: pl.DataFrame | None, schema: pa.Schema, source_file: str, row_offset: int) -> pa.Table:
    """Rejected rows (with ``_reason`` and their batch position ``_row``) → dead letters in batch order, their names
    as the input wrote them (:func:`~biasboard.schemas.names.as_written`), not trimmed, composed or renamed."""
    if rejected is None or rejected.height == 0:
        return schema.empty_table()
    originals = [f.name for f in schema if f.name not in {"reason", "source_file", "source_row"}]
    source_row = pl.col(SOURCE_ROW) if SOURCE_ROW in rejected.columns else pl.col(ROW) + row_offset
    out = rejected.sort(ROW).select(
        *[as_written(c, rejected.columns).cast(pl.String) for c in originals],  # names as the input wrote them
        pl.col(REASON).alias("reason"),
        pl.lit(source_file, dtype=pl.String).alias("source_file"),
        source_row.cast(pl.Int64).alias("source_row"),
    )
    return out.to_arrow().cast(schema)


def _fast_blank(df: pl.DataFrame, reason: str, blanks: dict[str, pl.Series]) -> pl.Expr:
    """The ``missing:<column>`` condition as a precomputed mask (String columns) or the rule's expression.

    ``blanks``: blank values of the name columns, found by :func:`~biasboard.schemas.names.clean_names`
    among their distinct values (a Categorical's other columns find theirs here).
    """
    column = reason[len(rules.REASON_MISSING_PREFIX) :]
    if df.schema[column] == pl.String:
        return pl.lit(blank_mask(df.get_column(column)))
    if df.schema[column] == pl.Categorical:  # dictionary codes: the check runs on the distinct values
        values = df.get_column(column)
        blank = blanks.get(column)
        if blank is None:
            distinct = values.drop_nulls().unique()  # nulls first: unique() of a Categorical with nulls is 2x slower
            blank = distinct.filter(distinct.to_frame("t").select(rules.is_blank("t", pl.Categorical)).to_series())
        if not len(blank):
            return pl.lit(values.is_null())
        return pl.lit(values.is_in(blank.implode()).fill_null(True))
    return rules.is_blank(column, df.schema[column])


def _slice_label(df: pl.DataFrame, column: str) -> pl.Expr:
    """:func:`~biasboard.schemas.rules.slice_label_expr`, or the column as null text when it is null throughout."""
    if df.get_column(column).null_count() == df.height:
        return pl.lit(None, dtype=pl.String).alias(column)
    return rules.slice_label_expr(column)


def _text(df: pl.DataFrame, column: str) -> pl.Expr:
    """A text column of the valid rows: as text, or as its dictionary codes when read so (see cells.group_ids)."""
    return pl.col(column) if df.schema[column] == pl.Categorical else pl.col(column).cast(pl.String)


def _split(
    df: pl.DataFrame,
    conditions: list[tuple[pl.Expr, str]],
    id_column: str,
    duplicate_reason: str,
    seen: SeenIds | None,
    keep: list[pl.Expr],
    dead_schema: pa.Schema,
    source_file: str,
    row_offset: int,
    fixes: NameFixes,
) -> Validated:
    """Rows failing a rule or repeating a kept id → dead letters (one reason each); the rest → valid.

    One mask pass finds the rows any rule rejects; the reason chain is then
    evaluated on those (usually few) rows only, duplicates are looked for among
    the rest, and the valid rows are a mask over the batch's columns cells need
    (:class:`Validated`).  A batch with bad rows thus costs what a clean batch
    costs, plus work proportional to its bad rows.
    """
    screen = [(_fast_blank(df, r, fixes.blanks) if r.startswith(rules.REASON_MISSING_PREFIX) else c, r)
              for c, r in conditions if r not in _IMPLIED_BLANKS]  # fmt: skip
    bad = df.select(rules.any_condition(screen)).to_series().to_numpy()
    good = np.flatnonzero(~bad)
    # every row's id hashed once, the rows that pass picked from the hashes (no id string gathered)
    ids = df.get_column(id_column).cast(pl.String)
    h1 = first_hash(ids)
    admitted = first_occurrences(ids, h1, good if len(good) < df.height else None)
    if seen is not None:  # the same two hashes as hash_ids, h1 computed once (h2 when needed)
        first = good[admitted]
        admitted[np.flatnonzero(admitted)] = seen.admit(h1[first], lambda: second_hash(ids)[first])
    kept = None
    if len(good) < df.height or not admitted.all():
        kept = np.zeros(df.height, dtype=bool)
        kept[good[admitted]] = True
    bad_rows, repeat_rows = np.flatnonzero(bad), good[~admitted]
    parts = []
    if len(bad_rows):
        parts.append(df[bad_rows].with_columns(rules.first_reason(conditions).alias(REASON), pl.Series(ROW, bad_rows)))
    if len(repeat_rows):
        parts.append(df[repeat_rows].with_columns(pl.lit(duplicate_reason).alias(REASON), pl.Series(ROW, repeat_rows)))
    rejected: dict[str, int] = {}
    for part in parts:
        for reason, n in part.get_column(REASON).value_counts().iter_rows():
            rejected[str(reason)] = rejected.get(str(reason), 0) + int(n)
    # In reason order: value_counts' order changes from run to run, and a dict shown as it is (the anchors' note)
    # then changed the snapshot's content, so an unchanged board was published again on every refit.
    rejected = dict(sorted(rejected.items()))
    dead = _dead_letters(pl.concat(parts) if parts else None, dead_schema, source_file, row_offset)
    trimmed, renamed = fixes.counts(good[admitted])
    aliased = fixes.aliased(good[admitted])
    return Validated(df.select(*keep), kept, dead, df.height, rejected, trimmed, renamed, aliased=aliased)


def _check_day(checked: Validated, df: pl.DataFrame, day: str | None) -> Validated:
    """``checked`` with its valid rows dated outside ``day`` (the folder's) counted; None: not checked."""
    if day is not None:
        checked.off_day = dated_outside(df, day, checked.kept)
    return checked


def validate_battles(
    batch: Batch,
    seen: SeenIds | None = None,
    source_file: str = "",
    row_offset: int = 0,
    carry: tuple[str, ...] = (),
    aliases: AliasMap | None = None,
    day: str | None = None,
) -> Validated:
    """Apply the battle rules to one batch.

        ``seen`` carries the day's kept ids between batches (None: duplicates are
        only detected within this batch).  Valid rows carry ``judge``, ``model_a``,
        ``model_b``, the three family columns as given, ``_winner`` (code: index
        into WINNER_VALUES), the numeric lengths ``_len_a``/``_len_b`` and
        ``order_known`` (Boolean, null read as true), the slice labels
    ``category``/``language`` (trimmed text, blank → null), the style counts
    ``_header_count_a`` ... ``_bold_count_b`` (Float64, null = unknown) — what the
        cells need, nothing more, since this is the ingest's hot path.  Callers that
        need more of each valid row (the audit: ``prompt_id``, ``gold``) name those
        columns in ``carry``; absent ones come back null.  Judge and model names
        are trimmed and renamed by ``aliases`` first (:mod:`biasboard.schemas.names`).
        ``day``: the day the batch's folder names; its valid rows dated outside it
        are counted (:attr:`Validated.off_day`), never rejected.
    """
    df, fixes = clean_names(normalise_columns(batch, "battle", source_file, carry), BATTLE_NAME_COLUMNS, aliases)
    schema = df.schema
    df = df.with_columns(
        rules.timestamps_valid(df).alias(TS),
        rules.winner_codes(df).alias(WINNER_CODE),
        rules.length_expr("len_a", schema["len_a"]).alias("_len_a"),
        rules.length_expr("len_b", schema["len_b"]).alias("_len_b"),
        *(rules.style_count_expr(c, schema[c]).alias(f"_{c}") for c in STYLE_COUNT_COLUMNS),
    )
    style = tuple(f"_{c}" for c in STYLE_COUNT_COLUMNS)
    # a count that is null throughout the batch can fault no row: its rule is left out (most logs carry no counts)
    counted = tuple(c for c in style if df.get_column(c).null_count() < df.height)
    conditions = rules.battle_conditions(schema, TS, WINNER_CODE, ("_len_a", "_len_b"), counted)
    keep = [
        *(_text(df, c) for c in ("judge", "model_a", "model_b", "family_a", "family_b", "judge_family")),
        pl.col(WINNER_CODE),
        pl.col("_len_a"),
        pl.col("_len_b"),
        rules.order_known_expr(schema["order_known"]).alias("order_known"),
        *(_slice_label(df, c) for c in SLICE_COLUMNS),
        *(pl.col(c) for c in style),
        *(pl.col(c).cast(pl.String) if c in df.columns else pl.lit(None, dtype=pl.String).alias(c) for c in carry),
    ]
    checked = _split(df, conditions, "battle_id", REASON_DUPLICATE_ID, seen, keep, BATTLE_DEAD_LETTER_SCHEMA,
                     source_file, row_offset, fixes)  # fmt: skip
    return _check_day(checked, df, day)


def validate_scores(
    batch: Batch,
    seen: SeenIds | None = None,
    source_file: str = "",
    row_offset: int = 0,
    aliases: AliasMap | None = None,
    day: str | None = None,
) -> Validated:
    """Apply the score rules to one batch (see :func:`validate_battles`); valid rows carry ``_score``."""
    df, fixes = clean_names(normalise_columns(batch, "score", source_file), SCORE_NAME_COLUMNS, aliases)
    schema = df.schema
    df = df.with_columns(
        rules.timestamps_valid(df).alias(TS),
        rules.length_expr("len", schema["len"]).alias("_len"),
        rules.score_value_expr(schema["score"]).alias(SCORE),
    )
    conditions = rules.score_conditions(schema, TS, SCORE, "_len")
    keep = [
        *(pl.col(c).cast(pl.String) for c in ("judge", "model", "prompt_id", "family", "judge_family")),
        pl.col(SCORE),
    ]
    checked = _split(df, conditions, "score_id", rules.REASON_DUPLICATE_SCORE_ID, seen, keep,
                     SCORE_DEAD_LETTER_SCHEMA, source_file, row_offset, fixes)  # fmt: skip
    return _check_day(checked, df, day)
