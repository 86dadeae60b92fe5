"""Partial cells of one record batch, and the monoid that merges them.

:func:`partial_cells` is THE per-batch computation: validate, attach
covariates, group by the cell key and sum.  The Beam ingest, the tests and the
benchmark all call it.  :func:`merge_cells` is the monoid operation
(concatenate, group by the key, sum); the empty table is its identity, so
partials of any split of the data, merged in any order, give the cells of the
whole (exactly for the counts; up to float rounding for the ``sum_*`` columns).

Counts travel with the cells as a plain dict (:class:`IngestCounts`), so the
conservation identity ``read = counted + Σ rejected`` can be checked at every
level: a batch, a day, a run.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
from biasboard.schemas.cells import (
    PAIR_CELL_KEYS,
    PAIR_CELL_MEASURES,
    PAIR_CELLS_SCHEMA,
    SCORE_CELL_KEYS,
    SCORE_CELLS_SCHEMA,
    SLICE_KEYS,
    STYLE_SQUARES,
    STYLE_SUMS,
    conform_pair_cells,
)
from biasboard.schemas.families import FamilyMap
from biasboard.schemas.folder_day import OffDay
from biasboard.schemas.names import AliasMap
from biasboard.transforms.covariates import (
    FAMILY_COLUMNS,
    families_to_normalise,
    given_family,
    length_measures,
    map_families,
    resolve_families,
    style_measures,
)
from biasboard.transforms.validate import (
    BATTLE_DEAD_LETTER_SCHEMA,
    SCORE,
    SCORE_DEAD_LETTER_SCHEMA,
    WINNER_CODE,
    Batch,
    SeenIds,
    Validated,
    validate_battles,
    validate_scores,
)


@dataclass
class IngestCounts:
    """Row accounting for a batch, a day or a run; adds like the cells do."""

    read: int = 0
    counted: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    self_battles: int = 0
    #: Input files with no rows (empty part files), skipped.
    empty_files: int = 0
    #: Counted rows whose judge or model name lost surrounding whitespace / was renamed by the alias map.
    trimmed: int = 0
    renamed: int = 0
    #: Counted rows dated outside the day their folder names (:mod:`biasboard.schemas.folder_day`).
    off_day: OffDay = field(default_factory=OffDay)
    #: The alias map's keys that renamed a counted row: kept in the day's manifest (``aliased``), not in
    #: :meth:`to_dict` (the summary's counts), for the note on entries that matched nothing.
    aliased: frozenset[str] = frozenset()

    def __add__(self, other: IngestCounts) -> IngestCounts:
        rejected = dict(self.rejected)
        for reason, n in other.rejected.items():
            rejected[reason] = rejected.get(reason, 0) + n
        return IngestCounts(
            self.read + other.read,
            self.counted + other.counted,
            dict(sorted(rejected.items())),  # one order whatever the days' (the sums are shown and hashed)
            self.self_battles + other.self_battles,
            self.empty_files + other.empty_files,
            self.trimmed + other.trimmed,
            self.renamed + other.renamed,
            self.off_day + other.off_day,
            self.aliased | other.aliased,
        )

    @property
    def rejected_total(self) -> int:
        return sum(self.rejected.values())

    @property
    def conserved(self) -> bool:
        """``read == counted + rejected``: no row was lost or counted twice."""
        return self.read == self.counted + self.rejected_total

    def to_dict(self) -> dict:
        """The counts as JSON; ``empty_files``, ``trimmed``, ``renamed`` and ``off_day`` appear only when not zero."""
        out = {
            "read": self.read,
            "counted": self.counted,
            "rejected": dict(sorted(self.rejected.items())),
            "rejected_total": self.rejected_total,
            "self_battles": self.self_battles,
        }
        for key in ("empty_files", "trimmed", "renamed"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        return out | self.off_day.to_dict()

    @classmethod
    def validated(cls, checked: Validated, counted: int, self_battles: int = 0) -> IngestCounts:
        """One batch's counts from its validation; ``counted``: its rows that reached the cells."""
        return cls(checked.read, counted, checked.rejected, self_battles, 0, checked.trimmed, checked.renamed,
                   checked.off_day, checked.aliased)  # fmt: skip

    @classmethod
    def from_dict(cls, d: dict) -> IngestCounts:
        return cls(
            int(d["read"]),
            int(d["counted"]),
            {k: int(v) for k, v in d["rejected"].items()},
            int(d.get("self_battles", 0)),
            int(d.get("empty_files", 0)),
            int(d.get("trimmed", 0)),
            int(d.get("renamed", 0)),
            OffDay.from_dict(d),
        )


class BatchCells:
    """What one batch (or a merged day) yields: cells, dead letters, counts.

    A batch's cells may come as the polars frame they were summed in, text keys still the batch's dictionary codes
    (Categorical: :func:`_aggregate_pairs`).  The day's writer stores that frame as it is (:attr:`stored`), and
    :attr:`cells` decodes it to an Arrow table in :data:`PAIR_CELLS_SCHEMA` only when read.  Why: a 1%-bad day's
    124k cells took 12 ms to decode to text and 29 ms for polars' writer to dictionary-encode them again, where
    writing the coded frame takes 15 ms, and every reader reads the same cells from either file.
    """

    def __init__(self, cells: pa.Table | pl.DataFrame, dead_letters: pa.Table, counts: IngestCounts):
        self._cells = cells
        self.dead_letters = dead_letters
        self.counts = counts

    @property
    def cells(self) -> pa.Table:
        """The cells as an Arrow table of the cells schema (decoded once from a coded frame)."""
        if isinstance(self._cells, pl.DataFrame):
            self._cells = pair_cells_table(self._cells)
        return self._cells

    @property
    def stored(self) -> pa.Table | pl.DataFrame:
        """The cells as the day's file stores them: the coded frame when there is one, else :attr:`cells`."""
        return self._cells

    @property
    def num_cells(self) -> int:
        """How many cells (rows), without decoding them."""
        return self._cells.height if isinstance(self._cells, pl.DataFrame) else self._cells.num_rows


#: The polars type of each column of :data:`PAIR_CELLS_SCHEMA` that is not text (text keys stay coded).
_PAIR_NUMBER_TYPES = pl.Schema(
    {name: dtype for name, dtype in pl.DataFrame(PAIR_CELLS_SCHEMA.empty_table()).schema.items() if dtype != pl.String}
)


def pair_cells_table(frame: pl.DataFrame) -> pa.Table:
    """Pair cells made as a polars frame (:func:`_aggregate_pairs`) → an Arrow table of :data:`PAIR_CELLS_SCHEMA`."""
    return frame.to_arrow().cast(PAIR_CELLS_SCHEMA)


def _constant(column: pl.Series) -> bool:
    """True when every value of ``column`` is null, or (numbers, booleans) all values are one non-null value.

    Cheap checks only (a text column is constant here only when all null): a key
    found constant is left out of the group-by and put back as a literal.
    """
    nulls = column.null_count()
    if nulls == len(column):
        return True
    if nulls or not (column.dtype.is_numeric() or column.dtype == pl.Boolean):
        return False
    return column.min() == column.max()


#: Key combinations a dense grouping step may span (:func:`group_ids`): a bitmap of this many flags and an
#: int32 renumbering of it, 10 MB, whatever the batch's size.
DENSE_SPAN = 1 << 21


def key_codes(column: pl.Series) -> tuple[np.ndarray, int]:
    """(code per row in ``[0, span)``, span) of one key column; equal values share a code, null is 0.

    A Categorical (the ingest reads text keys as dictionary codes, :func:`~biasboard.transforms.read.iter_batches`)
    gives its integer codes without touching a string; integers and booleans are their own codes; other text
    is dictionary-encoded first.
    """
    if column.dtype == pl.Boolean:
        column = column.cast(pl.Int8)
    elif not (column.dtype.is_integer() or column.dtype == pl.Categorical):
        column = column.cast(pl.String).cast(pl.Categorical)
    physical = column.to_physical()
    low, high = physical.min(), physical.max()
    if low is None:  # null throughout
        return np.zeros(len(column), dtype=np.int64), 1
    low, high = int(low), int(high)  # type: ignore[arg-type]
    if not physical.null_count():
        return physical.to_numpy().astype(np.int64) - low, high - low + 1
    codes = physical.fill_null(low).to_numpy().astype(np.int64) - (low - 1)
    codes[physical.is_null().to_numpy()] = 0
    return codes, high - low + 2


def _renumber(combined: np.ndarray, span: int) -> tuple[np.ndarray, int]:
    """Codes in ``[0, span)`` → dense codes ``[0, distinct)`` (a bitmap within :data:`DENSE_SPAN`, else a sort)."""
    if span <= DENSE_SPAN:
        present = np.zeros(span, dtype=bool)
        present[combined] = True
        distinct = np.flatnonzero(present)
        dense = np.zeros(span, dtype=np.int32)
        dense[distinct] = np.arange(len(distinct), dtype=np.int32)
        return dense[combined], len(distinct)
    values, inverse = np.unique(combined, return_inverse=True)
    return inverse.astype(np.int64, copy=False), len(values)


def group_ids(frame: pl.DataFrame, keys: list[str]) -> tuple[np.ndarray, int]:
    """(group per row in ``[0, groups)``, groups): rows share a group exactly when they agree on every key.

    Integer work only: each key's codes (:func:`key_codes`) are packed into one
    mixed-radix number while the product of the spans stays within
    :data:`DENSE_SPAN`, then renumbered densely (so the packed number never
    outgrows the batch), and packing goes on.  Grouping six text keys this way
    costs a few numpy passes instead of hashing six strings per row.
    """
    group = np.zeros(frame.height, dtype=np.int64)
    groups = 1
    for name in keys:
        codes, span = key_codes(frame.get_column(name))
        if groups * span > DENSE_SPAN and groups > 1:
            group, groups = _renumber(group, groups)
        group = np.multiply(group, span, dtype=np.int64) + codes
        groups *= span
    return _renumber(group, groups) if frame.height else (group, 0)


def _aggregate_pairs(rows: pl.DataFrame, family_map: FamilyMap, kept: np.ndarray | None = None) -> pl.DataFrame:
    """Valid battles → pair cells: per-row measures, group by the key, sum; families resolved on the cells.

    The cells come as a polars frame in :data:`PAIR_CELLS_SCHEMA`'s columns and number types, its text keys as
    read (Categorical codes, on the ingest's path: :class:`BatchCells` says why they stay so).

    ``rows``: validated rows, of which ``kept`` (None: all) are the valid ones
    (see :class:`~biasboard.transforms.validate.Validated`); only the key and
    measure columns are cut to them.  Keys constant over the batch (no slice
    labels, no style counts, every order known: the usual case) and sums that
    are zero for every battle (no style counts) stay out of the grouping and
    are put back as literals.  The grouping is integer work (:func:`group_ids`)
    and the sums are ``np.bincount``; each cell's keys are read off one of its
    rows.  Family columns take part in the grouping only when the data gives
    some, and the map is applied to the grouped names: a batch of 250k battles
    meets the map a few thousand times, not 250k.
    """
    rows = length_measures(style_measures(rows))
    # each family beside the name it describes: the packed codes of a name and its family stay few
    keys = ["judge", "judge_family", "model_a", "family_a", "model_b", "family_b", "len_bin", "order_known"]
    keys += [*SLICE_KEYS, "style_bin"]
    wins = ("win_a", "win_b", "tie", "tie_bothbad")
    sums = [m for m in PAIR_CELL_MEASURES if m != "n" and m not in wins]
    unstyled = ["n_style", *STYLE_SUMS, *STYLE_SQUARES]  # zero for every battle without style counts
    rows = rows.select(*keys, WINNER_CODE, *sums)
    fixed: dict[str, pl.Series] = {}
    styled = True
    if kept is not None and kept.any():
        # what holds for every row of the batch holds for its valid rows: keys constant over the batch and
        # (without style counts) the zero sums are read off the whole batch, and only the rest is cut
        fixed = {k: rows.get_column(k)[:1] for k in keys if _constant(rows.get_column(k))}
        styled = bool(rows.get_column("n_style").max())
        rows = rows.drop([*fixed, *([] if styled else unstyled)])
    if kept is not None:
        rows = rows.filter(pl.Series(kept))
    styled = styled and bool(rows.get_column("n_style").max())
    zero = [] if styled else unstyled
    if rows.height:
        fixed |= {k: rows.get_column(k)[:1] for k in keys if k not in fixed and _constant(rows.get_column(k))}
    fixed = {k: fixed[k] for k in keys if k in fixed}  # in key order, as the grouping reads them
    given = [c for c, _ in FAMILY_COLUMNS if c not in fixed]
    varying = [k for k in keys if k not in fixed]
    group, groups = group_ids(rows, varying)
    representative = np.empty(groups, dtype=np.int64)
    representative[group] = np.arange(rows.height)  # any row of a cell carries its keys
    winner = rows.get_column(WINNER_CODE).cast(pl.Int64).to_numpy()
    won = np.bincount(group * len(wins) + winner, minlength=groups * len(wins)).reshape(groups, len(wins))
    measures = [pl.Series("n", np.bincount(group, minlength=groups).astype(np.int64))]
    measures += [pl.Series(name, won[:, k].astype(np.int64)) for k, name in enumerate(wins)]
    for m in sums:
        if m in zero:
            continue
        column = rows.get_column(m)
        weights = column.fill_null(0).to_numpy().astype(np.float64, copy=False)
        total = np.bincount(group, weights=weights, minlength=groups)
        measures.append(pl.Series(m, total.astype(np.int64) if column.dtype.is_integer() else total))
    grouped = rows.select(varying)[representative].with_columns(measures)
    grouped = grouped.with_columns(
        *(pl.repeat(value[0], grouped.height, dtype=value.dtype).alias(k) for k, value in fixed.items()),
        *(pl.repeat(0, grouped.height, dtype=pl.Float64).alias(m) for m in zero),
    )
    # Given families not in their form (``OpenAI``, blank) are put in it on the cells, not on every battle (the check
    # took 7.6 ms of a 1%-bad day on its 500k rows, 2.4 on its 124k cells).
    renamed = families_to_normalise(grouped, given)
    grouped = grouped.with_columns(given_family(c) for c in renamed)
    # text for the families the map fills in (dictionary codes otherwise, kept so: BatchCells)
    mapped = [c for c in given if grouped.get_column(c).null_count()]
    grouped = grouped.with_columns(pl.col(c).cast(pl.String) for c in mapped)
    cells = map_families(grouped, family_map).select(PAIR_CELLS_SCHEMA.names).cast(_PAIR_NUMBER_TYPES)
    if renamed or mapped:  # cells a family was renamed or mapped in may now share a key
        merged = pl.from_arrow(merge_cells([pair_cells_table(cells)], sort=False))
        assert isinstance(merged, pl.DataFrame)
        return merged
    return cells


def partial_cells(
    batch: Batch,
    family_map: FamilyMap,
    seen: SeenIds | None = None,
    source_file: str = "",
    row_offset: int = 0,
    aliases: AliasMap | None = None,
    day: str | None = None,
) -> BatchCells:
    """One batch of battle rows → (pair cells, dead letters, counts).

    ``seen`` holds the ids already kept earlier in the same day (pass one
    :class:`SeenIds` per day; None checks duplicates within this batch only).
    ``source_file``/``row_offset`` locate dead letters in their input file;
    ``aliases`` renames judges and models (see :mod:`biasboard.schemas.names`);
    ``day``: the day the batch's folder names, whose counted rows dated outside
    it are counted (:mod:`biasboard.schemas.folder_day`; None: not checked).
    """
    checked = validate_battles(batch, seen, source_file, row_offset, aliases=aliases, day=day)
    cells = _aggregate_pairs(checked.rows, family_map, checked.kept)
    self_battles = int(cells.filter(pl.col("model_a") == pl.col("model_b")).get_column("n").sum())
    counts = IngestCounts.validated(checked, checked.counted, self_battles)
    return BatchCells(cells, checked.dead_letters, counts)


def partial_score_cells(
    batch: Batch,
    family_map: FamilyMap,
    seen: SeenIds | None = None,
    source_file: str = "",
    row_offset: int = 0,
    aliases: AliasMap | None = None,
    day: str | None = None,
) -> BatchCells:
    """One batch of score rows → (score cells, dead letters, counts); see :func:`partial_cells`."""
    checked = validate_scores(batch, seen, source_file, row_offset, aliases=aliases, day=day)
    valid = resolve_families(checked.valid, family_map, (("family", "model"), ("judge_family", "judge")))
    cells = valid.with_columns(pl.col(SCORE).alias("score")).group_by(list(SCORE_CELL_KEYS)).agg(pl.len().alias("n"))
    counts = IngestCounts.validated(checked, valid.height)
    return BatchCells(cells.to_arrow().cast(SCORE_CELLS_SCHEMA), checked.dead_letters, counts)


def merge_cells(
    tables: Iterable[pa.Table],
    schema: pa.Schema = PAIR_CELLS_SCHEMA,
    keys: tuple[str, ...] | None = None,
    sort: bool = True,
    dictionary: bool = False,
) -> pa.Table:
    """The monoid operation: concatenate, group by the key, sum every measure.

    With ``sort`` (the default) the result is sorted by the key, so equal
    inputs give byte-identical outputs whatever order the partials came in
    (idempotent rewrites of a day produce the same file); intermediate merges
    skip the sort.  Works for pair cells (default) and score cells.

    String keys are grouped and sorted as integer codes into their sorted
    vocabulary (:func:`_coded_keys`; the same order as the strings): grouping a
    long history's cells by seven string columns cost six times the table's
    size in hash keys (1.2 GB for 165 MB of cells, bench/scale.py).  With
    ``dictionary`` the string keys come back dictionary-encoded (what the fit
    reads: a few bytes per row), else as plain strings.
    """
    if keys is None:
        keys = PAIR_CELL_KEYS if schema == PAIR_CELLS_SCHEMA else SCORE_CELL_KEYS
    measures = [f.name for f in schema if f.name not in keys]
    conform = conform_pair_cells if schema == PAIR_CELLS_SCHEMA else (lambda t: t.cast(schema))
    parts = [conform(t) for t in tables if t.num_rows]
    if not parts:
        return _decoded(schema.empty_table(), {}, schema, dictionary)
    coded, vocabularies = _coded_keys(pa.concat_tables(parts), keys)
    del parts
    frame = pl.from_arrow(coded)
    assert isinstance(frame, pl.DataFrame)
    del coded
    merged = frame.group_by(list(keys)).agg(pl.col(m).sum() for m in measures)
    del frame
    return _decoded((merged.sort(list(keys)) if sort else merged).to_arrow(), vocabularies, schema, dictionary)


def _coded_keys(table: pa.Table, keys: tuple[str, ...]) -> tuple[pa.Table, dict[str, pa.Array]]:
    """``table`` with each string key column replaced by int32 codes into its sorted distinct values.

    Codes follow the strings' order, so sorting by the codes sorts by the strings; nulls stay null.
    """
    vocabularies = {}
    for name in keys:
        column = table.column(name)
        if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            continue
        vocabulary = pc.unique(column).drop_null().sort()
        vocabularies[name] = vocabulary
        codes = pc.index_in(column, value_set=vocabulary).cast(pa.int32())
        table = table.set_column(table.schema.get_field_index(name), name, codes)
    return table, vocabularies


def _decoded(table: pa.Table, vocabularies: dict[str, pa.Array], schema: pa.Schema, dictionary: bool) -> pa.Table:
    """Codes back to the schema's strings (or dictionary arrays over the same values), columns in schema order."""
    columns = []
    for field_ in schema:
        column = table.column(field_.name)
        if field_.name in vocabularies:
            codes = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
            vocabulary = vocabularies[field_.name].cast(field_.type)
            if dictionary:
                column = pa.DictionaryArray.from_arrays(codes.cast(pa.int32()), vocabulary)
            else:
                column = vocabulary.take(codes)
        elif dictionary and pa.types.is_string(field_.type):
            column = pc.dictionary_encode(column.cast(field_.type))
        else:
            column = column.cast(field_.type)
        columns.append(column)
    fields_ = [pa.field(f.name, c.type, f.nullable) for f, c in zip(schema, columns, strict=True)]
    return pa.Table.from_arrays(columns, schema=pa.schema(fields_))


def merge_batches(
    results: Iterable[BatchCells], schema: pa.Schema = PAIR_CELLS_SCHEMA, sort: bool = True
) -> BatchCells:
    """Merge several batches' results into one (cells merged, dead letters concatenated, counts added)."""
    results = list(results)
    if len(results) == 1 and not sort:
        return results[0]
    dead_schema = BATTLE_DEAD_LETTER_SCHEMA if schema == PAIR_CELLS_SCHEMA else SCORE_DEAD_LETTER_SCHEMA
    dead = [r.dead_letters for r in results if r.dead_letters.num_rows]
    counts = sum((r.counts for r in results), IngestCounts())
    return BatchCells(
        merge_cells((r.cells for r in results), schema, sort=sort),
        pa.concat_tables(dead) if dead else dead_schema.empty_table(),
        counts,
    )


def judge_summary(cells: pa.Table) -> pa.Table:
    """Per-judge totals of pair cells: battles, shares of first-shown wins, second-shown wins, ties.

    ``win_a_share`` / ``win_b_share`` are shares of the ``order_known`` battles (null when the judge has none):
    in a battle whose shown order the log does not record, ``model_a`` is only the listed one (AlpacaEval's
    baseline), so counting its wins as first-shown wins read as a position preference the data cannot show
    (AlpacaEval 1: "first shown wins 20.5%, second 79.0%" with no order known).  ``tie_share`` (both kinds of
    tie; ``bothbad_share`` the ``tie (bothbad)`` part) is of every battle, the order not mattering to a tie.
    ``self_battles`` counts battles of a model against itself.
    """
    # Only the columns it reads, string keys as they come (a dictionary column is a polars Categorical): casting
    # a merged history's dictionary-encoded keys to strings cost ~100 bytes a cell (bench/scale.py).
    used = ["judge", "judge_family", "model_a", "model_b", "order_known", "n", "win_a", "win_b", "tie", "tie_bothbad"]
    frame = pl.from_arrow(cells.select(used) if cells.num_rows else PAIR_CELLS_SCHEMA.empty_table().select(used))
    assert isinstance(frame, pl.DataFrame)
    frame = frame.with_columns(pl.col(c).cast(pl.Int64) for c in used[5:])
    n = pl.col("n").sum()
    known = pl.col("order_known")
    n_known = pl.col("n").filter(known).sum()

    def known_share(column: str) -> pl.Expr:
        return pl.when(n_known > 0).then(pl.col(column).filter(known).sum() / n_known).otherwise(None)

    summary = (
        frame.group_by("judge", "judge_family")
        .agg(
            n.alias("n"),
            n_known.alias("order_known"),
            known_share("win_a").alias("win_a_share"),
            known_share("win_b").alias("win_b_share"),
            ((pl.col("tie").sum() + pl.col("tie_bothbad").sum()) / n).alias("tie_share"),
            (pl.col("tie_bothbad").sum() / n).alias("bothbad_share"),
            pl.col("n").filter(pl.col("model_a") == pl.col("model_b")).sum().alias("self_battles"),
            # both columns of the group, one after the other (a list per cell, exploded: 15x the CPU on 530k cells)
            pl.col("model_a").append(pl.col("model_b")).n_unique().alias("models"),
        )
        .with_columns(pl.col("judge", "judge_family").cast(pl.String))
        .sort("judge", "judge_family")
    )
    return summary.to_arrow()


def head_to_head(cells: pa.Table, models: list[str]) -> dict[str, list]:
    """Battles and observed win rates (ties half) among ``models``, over every judge and both orders.

    ``battles[i][j]`` counts battles between ``models[i]`` and ``models[j]`` (self-battles excluded);
    ``win_rate[i][j]`` is i's share of them, None where the two never met.  Read off the cells without
    a fit, so it shows what the judges said, before any correction.
    """
    frame = pl.from_arrow(cells.select(["model_a", "model_b", "n", "win_a", "win_b", "tie", "tie_bothbad"]))
    assert isinstance(frame, pl.DataFrame)
    index = {m: i for i, m in enumerate(models)}
    frame = frame.with_columns(pl.col("model_a").cast(pl.String), pl.col("model_b").cast(pl.String)).filter(
        pl.col("model_a").is_in(models) & pl.col("model_b").is_in(models) & (pl.col("model_a") != pl.col("model_b"))
    )
    half = 0.5 * (pl.col("tie") + pl.col("tie_bothbad"))
    per = frame.group_by("model_a", "model_b").agg(pl.col("n").sum(), (pl.col("win_a") + half).sum().alias("score_a"))
    m = len(models)
    battles = np.zeros((m, m), np.int64)
    score = np.zeros((m, m))
    i = np.array([index[x] for x in per["model_a"].to_list()], np.int64)
    j = np.array([index[x] for x in per["model_b"].to_list()], np.int64)
    n = per["n"].to_numpy()
    np.add.at(battles, (i, j), n)
    np.add.at(battles, (j, i), n)
    np.add.at(score, (i, j), per["score_a"].to_numpy())
    np.add.at(score, (j, i), n - per["score_a"].to_numpy())
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = score / battles
    win_rate = [[None if battles[a, b] == 0 else float(rate[a, b]) for b in range(m)] for a in range(m)]
    return {"battles": battles.tolist(), "win_rate": win_rate}


__all__ = [
    "PAIR_CELL_MEASURES",
    "BatchCells",
    "IngestCounts",
    "head_to_head",
    "judge_summary",
    "merge_batches",
    "merge_cells",
    "partial_cells",
    "partial_score_cells",
]
