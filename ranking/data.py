"""Cells → the integer-coded arrays the models are fit on.

Cells arrive as one table or as several days' tables; they are merged first by
the monoid law of :mod:`biasboard.schemas.cells` (concatenate, group by the key,
sum), then coded: models and judges become indices, the length covariate
becomes each cell's mean log length ratio, and the affinity covariate
``s_a − s_b`` is read from the families.  Nothing here loops over rows.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
from biasboard.ranking.pages import base_pages
from biasboard.schemas.cells import (
    PAIR_CELL_DEFAULTS,
    PAIR_CELL_KEYS,
    PAIR_CELL_MEASURES,
    PAIR_CELLS_SCHEMA,
    SCORE_CELLS_SCHEMA,
    SLICE_KEYS,
    STYLE_SQUARES,
    STYLE_SUMS,
    UNKNOWN_FAMILY,
    conform_pair_cells,
)
from biasboard.schemas.errors import InputError
from biasboard.schemas.summary import GLOBAL_JUDGE

if TYPE_CHECKING:
    from biasboard.ranking.stream import PairStore

#: Families that never count as "the judge's own family".
NO_AFFINITY_FAMILIES: frozenset[str] = frozenset({UNKNOWN_FAMILY, "human"})

CellsInput: TypeAlias = pa.Table | pl.DataFrame | Iterable[pa.Table | pa.RecordBatch | pl.DataFrame]

#: Pair-cell measures that are counts: coded straight to float64 (exact below 2^53), the dtype the fit uses.
_PAIR_COUNTS: frozenset[str] = frozenset({"n", "win_a", "win_b", "tie", "tie_bothbad", "n_len", "n_style"})


def _is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


class _Vocab:
    """Strings seen so far → provisional integer codes, sorted into the final vocabulary at the end.

    Codes are made per Arrow chunk from the chunk's dictionary (a Parquet column read with
    ``read_dictionary``, a polars Categorical) or from ``dictionary_encode`` of a plain string column, so
    the only Python loop is over *distinct* values, and no string column is ever copied.
    """

    def __init__(self) -> None:
        self.index: dict[str, int] = {}

    def codes(self, column: pa.ChunkedArray, nulls: bool = False) -> np.ndarray:
        """Provisional codes of ``column``; with ``nulls`` a null is code −1 (sorts first), else not allowed."""
        parts = []
        for chunk in column.chunks:
            if not pa.types.is_dictionary(chunk.type):
                chunk = pc.dictionary_encode(chunk)
            index = self.index
            lut = np.array([index.setdefault(v, len(index)) for v in chunk.dictionary.to_pylist()], np.int32)
            indices = chunk.indices
            if nulls and indices.null_count:
                indices = pc.fill_null(indices, len(lut))
                lut = np.append(lut, np.int32(-1))
            idx = indices.to_numpy(zero_copy_only=False)
            parts.append(lut[idx] if lut.size else np.zeros(len(chunk), np.int32))
        if not parts:
            return np.zeros(0, np.int32)
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

    def finish(self) -> tuple[tuple[str, ...], np.ndarray]:
        """(sorted vocabulary, array mapping each provisional code to its position in it)."""
        names = list(self.index)
        order = sorted(range(len(names)), key=names.__getitem__)
        remap = np.empty(len(names), np.int32)
        remap[order] = np.arange(len(names), dtype=np.int32)
        return tuple(names[i] for i in order), remap


class _BatchVocab(_Vocab):
    """A :class:`_Vocab` for one pass that ends in :meth:`finish` (:func:`build_dataset`): a chunk's codes are its
    dictionary indices offset by the size of the dictionaries before it, and the strings are made distinct and
    sorted once, in Arrow, at the end.  No Python string per chunk's dictionary value but the final
    vocabulary's: at 50k voter-judges the judges' dictionaries cost ~25 ms of dict look-ups and a Python sort.
    Not for a fold (:class:`CodedFold`, the streamed fit), whose codes must name one string each before the end.
    Arrow orders strings by their UTF-8 bytes, which is Python's order of ``str`` (code points).
    """

    def __init__(self) -> None:
        super().__init__()
        self.dictionaries: list[pa.Array] = []
        self.size = 0

    def codes(self, column: pa.ChunkedArray, nulls: bool = False) -> np.ndarray:
        """Provisional codes of ``column`` (no nulls: every key :func:`build_dataset` codes is required)."""
        if nulls:
            raise NotImplementedError("_BatchVocab codes keys without nulls only")
        parts = []
        for chunk in column.chunks:
            if not pa.types.is_dictionary(chunk.type):
                chunk = pc.dictionary_encode(chunk)
            parts.append(np.add(chunk.indices.to_numpy(zero_copy_only=False), self.size, dtype=np.int32))
            self.dictionaries.append(chunk.dictionary)
            self.size += len(chunk.dictionary)
        if not parts:
            return np.zeros(0, np.int32)
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

    def finish(self) -> tuple[tuple[str, ...], np.ndarray]:
        if not self.dictionaries:
            return (), np.zeros(0, np.int32)
        values = pa.concat_arrays([d.cast(pa.large_string()) for d in self.dictionaries])
        distinct = pc.unique(values)
        names = distinct.take(pc.array_sort_indices(distinct))
        remap = pc.index_in(values, value_set=names).to_numpy(zero_copy_only=False).astype(np.int32)
        return tuple(names.to_pylist()), remap


#: The pair cells as the fit reads them: the slice labels are left out, so the fit sums over them (the
#: overall board); a slice's board is fit on the cells of its label (biasboard.transforms.slices).
_FIT_PAIR_SCHEMA = pa.schema([f for f in PAIR_CELLS_SCHEMA if f.name not in SLICE_KEYS])
_FIT_PAIR_KEYS: tuple[str, ...] = tuple(k for k in PAIR_CELL_KEYS if k not in SLICE_KEYS)


def _code_tables(
    cells: CellsInput | None,
    schema: pa.Schema,
    what: str,
    vocabs: dict[str, _Vocab],
    counts: frozenset[str] = frozenset(),
    nullable: frozenset[str] = frozenset(),
) -> dict[str, np.ndarray] | None:
    """Every input table's columns as numpy arrays, string keys as provisional codes of ``vocabs[col]``.

    Tables are consumed one at a time (an iterator of record batches streams), each coded at once into
    compact arrays — int32 codes, the contract's numeric types (``counts`` as float64) — so neither the
    strings nor a second copy of the table are held; empty tables are skipped.  None when no rows.
    A numeric column already of its type is not copied (a one-table input's arrays view its buffers).
    ``nullable``: string keys whose nulls are kept (code −1, see :meth:`_Vocab.codes`).
    """
    if cells is None:
        return None
    items: Iterable = [cells] if isinstance(cells, pa.Table | pa.RecordBatch | pl.DataFrame) else cells
    parts: dict[str, list[np.ndarray]] = {name: [] for name in schema.names}
    # A cells file's batches (read_cells) say how many rows come: each column is then made once at its full
    # size and filled batch by batch, so a batch's Arrow buffers are freed as soon as it is coded (its pages
    # reused by the next batch) and no column is copied twice — per-batch parts and their concatenation
    # touched ~100 MB of fresh pages more at 650k cells (page faults: system time).
    rows = cells.num_rows if isinstance(cells, CellBatches) else None
    filled: dict[str, np.ndarray] = {}
    at = 0
    for i, item in enumerate(items):
        if isinstance(item, pl.DataFrame):
            item = item.to_arrow()
        if isinstance(item, pa.RecordBatch):
            item = pa.Table.from_batches([item])
        if not isinstance(item, pa.Table):
            raise InputError(f"{what} #{i}: expected a pyarrow Table or polars DataFrame, got {type(item).__name__}")
        if schema in (_FIT_PAIR_SCHEMA, PAIR_CELLS_SCHEMA) and any(
            k not in item.column_names for k in PAIR_CELL_DEFAULTS
        ):
            item = conform_pair_cells(item)  # cells stored before order_known existed: order known
        missing = [name for name in schema.names if name not in item.column_names]
        if missing:
            raise InputError(f"{what} #{i}: missing column(s) {', '.join(missing)}")
        if not item.num_rows:
            continue
        if rows is not None and at + item.num_rows > rows:
            raise ValueError(f"{what}: more rows than the {rows} the file's footer gives")
        for field in schema:
            column = item[field.name]
            if column.null_count and field.name not in nullable:
                raise InputError(f"{what} #{i}: column {field.name} has {column.null_count} null value(s)")
            try:
                if field.name in vocabs:
                    kind = column.type.value_type if pa.types.is_dictionary(column.type) else column.type
                    if not _is_string(kind):
                        column = column.cast(field.type)
                    values = vocabs[field.name].codes(column, field.name in nullable)
                else:
                    values = column.cast(field.type).to_numpy()
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as err:
                raise InputError(f"{what} #{i}: columns do not match the cells contract ({err})") from None
            dtype = np.float64 if field.name in counts else values.dtype
            if rows is None:
                parts[field.name].append(values.astype(dtype, copy=False))
            else:
                if field.name not in filled:
                    filled[field.name] = np.empty(rows, dtype)
                filled[field.name][at : at + item.num_rows] = values
        at += item.num_rows
        del item, column  # a table handed over by an iterator is freed here, but for the buffers viewed
    if filled:
        return {name: filled[name][:at] for name in schema.names}
    if not parts[schema.names[0]]:
        return None
    out = {}
    for name in schema.names:  # one column at a time: the parts of the others are not copied meanwhile
        chunks = parts.pop(name)
        out[name] = np.concatenate(chunks) if len(chunks) > 1 else chunks[0]
        del chunks
    return out


def _recode(columns: dict[str, np.ndarray], vocabs: dict[str, _Vocab], remaps: dict[int, np.ndarray]) -> None:
    """Provisional codes → positions in the sorted vocabularies, in place of the columns.

    Written into the code arrays themselves (coding made them: writeable, int32 as the remaps), a slice at
    a time: no second set of code columns (~16 MB of fresh pages at 650k cells), and ``np.take``'s intp
    copy of the indices stays a slice's.  Codes are in range by construction, so ``clip`` never clips (and
    spares ``take`` its buffered ``out``).
    """
    for name, vocab in vocabs.items():
        codes, remap = columns[name], remaps[id(vocab)]
        if not (codes.flags.writeable and codes.dtype == remap.dtype):
            columns[name] = remap[codes]
            continue
        for start in range(0, codes.size, _RECODE_SLICE):
            part = codes[start : start + _RECODE_SLICE]
            np.take(remap, part, out=part, mode="clip")


#: Codes recoded at a time by :func:`_recode` (its index temporary: 512 KB).
_RECODE_SLICE = 1 << 16


def _group_sum(columns: dict[str, np.ndarray], keys: Sequence[str], measures: Sequence[str]) -> dict[str, np.ndarray]:
    """The cells monoid on coded columns: group by ``keys``, sum ``measures``, rows sorted by the key.

    The integer key columns are packed into one int64 (mixed radix), so grouping is one stable argsort and
    one ``np.add.reduceat`` per measure — no hash table and no string.  Cells that are already merged and
    in key order (a stored, merged table) come back as they are, without a copy; otherwise each input
    column is released as soon as its grouped version exists.
    """
    packed = _packed_key(columns, keys)
    if np.all(packed[1:] > packed[:-1]):
        return {name: columns[name] for name in (*keys, *measures)}
    order = np.argsort(packed, kind="stable")
    packed = packed[order]
    starts = np.flatnonzero(np.concatenate([[True], packed[1:] != packed[:-1]]))
    del packed
    out = {}
    for k in keys:  # the first row of each group holds its key: no decoding of the packed key needed
        out[k] = columns.pop(k)[order[starts]]
    for m in measures:
        out[m] = np.add.reduceat(columns.pop(m)[order], starts)
    return {name: out[name] for name in (*keys, *measures)}


def _packed_key(columns: dict[str, np.ndarray], keys: Sequence[str]) -> np.ndarray:
    """The integer key columns as one int64 per row, ordered as the keys are (mixed radix, first key major).

    When the radixes' product would pass 2^62, the key packed so far is replaced by its rank among its
    distinct values (``np.unique``'s inverse: the same order, a radix of at most the row count), so any
    number of keys packs.
    """
    packed = np.zeros(len(columns[keys[0]]), np.int64)
    span = 1.0
    for k in keys:
        low = int(columns[k].min())
        radix = int(columns[k].max()) - low + 1
        if span * radix >= 2.0**62:
            distinct, packed = np.unique(packed, return_inverse=True)
            packed = packed.astype(np.int64, copy=False)
            span = float(len(distinct))
            del distinct
        packed *= radix
        packed += columns[k]
        packed -= low
        span *= radix
    return packed


class CodedFold:
    """A monoid of keyed tables (group by the keys, sum the rest) as a fold in integer codes.

    Why: merging a long history's cells as Arrow tables through polars held the concatenated strings, the
    group-by's hash keys, its output and the sorted copy at once (~1 KB per cell at the merge, bench/scale.py).
    Here each table is coded as it arrives (:func:`_code_tables`: int32 codes for the strings, the
    schema's numeric types), :meth:`fold` sums the tables added so far into the running total
    (:func:`_group_sum`: one argsort of a packed int64 key, one ``reduceat`` per column, a column at a
    time), and :meth:`table` hands the total back in key order, numeric columns sharing numpy's buffers.
    Codes are provisional (first seen, first numbered) until :meth:`table` sorts the vocabularies; a
    group's rows are summed in the order they were added, so equal inputs in equal order give equal bits
    however the rows are laid out.  ``shared``: groups of string keys with one vocabulary (a model's name
    is one code as ``model_a`` and as ``model_b``); ``nullable`` keys keep nulls (code −1, sorted first,
    as polars sorts them).
    """

    def __init__(
        self,
        schema: pa.Schema,
        keys: Sequence[str],
        shared: Sequence[Sequence[str]],
        nullable: frozenset[str] = frozenset(),
    ) -> None:
        self.schema = schema
        self.keys = tuple(keys)
        self.measures = tuple(name for name in schema.names if name not in self.keys)
        self.vocabs: dict[str, _Vocab] = {}
        for group in shared:
            vocab = _Vocab()
            self.vocabs.update(dict.fromkeys(group, vocab))
        self.nullable = nullable
        self.total: dict[str, np.ndarray] | None = None
        self.pending: list[dict[str, np.ndarray]] = []
        self.total_rows = 0
        self.pending_rows = 0

    def coded_dtypes(self) -> dict[str, np.dtype]:
        """Each column's type as :func:`_code_tables` codes it: int32 codes for string keys, the schema's type else."""
        numeric = {f.name: pa.array([], f.type).to_numpy(zero_copy_only=False).dtype for f in self.schema}
        return {name: np.dtype(np.int32) if name in self.vocabs else dtype for name, dtype in numeric.items()}

    def row_bytes(self) -> int:
        """Bytes a coded row takes (what a bucket of rows costs in memory, column by column)."""
        return sum(dtype.itemsize for dtype in self.coded_dtypes().values())

    def add(self, cells: CellsInput, what: str = "cells") -> None:
        """Code ``cells`` (tables or record batches of the schema) and keep them until the next fold."""
        coded = _code_tables(cells, self.schema, what, self.vocabs, nullable=self.nullable)
        if coded is not None:
            self.pending.append(coded)
            self.pending_rows += len(coded[self.keys[0]])

    def fold(self) -> None:
        """Sum the running total and every table added since the last fold into the new running total."""
        parts = ([self.total] if self.total is not None else []) + self.pending
        self.total, self.pending, self.pending_rows = None, [], 0
        if not parts:
            return
        columns = {}
        for name in self.schema.names:  # a column at a time, each part's column freed once copied
            chunks = [part.pop(name) for part in parts]
            columns[name] = np.concatenate(chunks) if len(chunks) > 1 else chunks[0]
            del chunks
        del parts
        self.total = _group_sum(columns, self.keys, self.measures)
        self.total_rows = len(self.total[self.keys[0]])

    def table(self, dictionary: bool = False) -> pa.Table:
        """The sum of everything added, in the schema, rows in key order.

        String keys are ordered as their strings (null labels first); ``dictionary``: as dictionary arrays
        (a few bytes per row) instead of strings.  The numeric columns share the fold's buffers: the total
        is handed over, and the fold is empty afterwards.
        """
        self.fold()
        columns, self.total, self.total_rows = self.total, None, 0
        if columns is None:
            return self.schema.empty_table()
        vocabularies = {}
        for vocab in dict.fromkeys(self.vocabs.values()):  # each shared vocabulary once
            names, remap = vocab.finish()
            for key, owner in self.vocabs.items():
                if owner is vocab and remap.size:  # (an empty vocabulary: every label is null, code −1)
                    codes = columns[key]
                    columns[key] = np.where(codes >= 0, remap[np.maximum(codes, 0)], np.int32(-1))
            vocabularies[id(vocab)] = pa.array(names, pa.string())
        columns = _group_sum(columns, self.keys, self.measures)  # distinct keys: only a sort
        return self._arrow(columns, vocabularies, dictionary)

    def total_table(self) -> pa.Table:
        """The running total as it stands (after the last :meth:`fold`), rows and codes as folded, string
        keys dictionary-encoded; it shares the fold's buffers and leaves the fold as it is (for the merged-cells
        cache: :func:`biasboard.transforms.state.load_cells`)."""
        if self.total is None:
            return self.schema.empty_table()
        vocabularies = {id(v): pa.array(list(v.index), pa.string()) for v in self.vocabs.values()}
        return self._arrow(dict(self.total), vocabularies, dictionary=True)

    def _arrow(self, columns: dict[str, np.ndarray], vocabularies: dict[int, pa.Array], dictionary: bool) -> pa.Table:
        arrays = []
        for field in self.schema:
            values = columns.pop(field.name)
            if field.name in self.vocabs:
                codes = pa.array(values, pa.int32(), mask=values < 0 if field.name in self.nullable else None)
                vocabulary = vocabularies[id(self.vocabs[field.name])]
                arrays.append(
                    pa.DictionaryArray.from_arrays(codes, vocabulary) if dictionary else vocabulary.take(codes)
                )
            else:
                arrays.append(pa.array(values, field.type))
            del values
        fields = [pa.field(f.name, a.type, f.nullable) for f, a in zip(self.schema, arrays, strict=True)]
        return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


class CellsFold(CodedFold):
    """:class:`CodedFold` of pair cells (:data:`PAIR_CELLS_SCHEMA`): the cells monoid
    (:func:`biasboard.transforms.cells.merge_cells`) over a long history in integer codes."""

    def __init__(self) -> None:
        shared = [
            ("judge",),
            ("judge_family", "family_a", "family_b"),
            ("model_a", "model_b"),
            *((k,) for k in SLICE_KEYS),
        ]
        super().__init__(PAIR_CELLS_SCHEMA, PAIR_CELL_KEYS, shared, nullable=frozenset(SLICE_KEYS))


@dataclass(frozen=True)
class PairArrays:
    """Pair cells as arrays, one entry per cell (self-battles included)."""

    a: np.ndarray  # int64 model index shown first
    b: np.ndarray  # int64 model index shown second
    j: np.ndarray  # int64 judge index
    win_a: np.ndarray  # float64 counts
    win_b: np.ndarray
    tie: np.ndarray  # plain + bothbad
    bothbad: np.ndarray
    n: np.ndarray
    x: np.ndarray  # cell mean of ln(len_a/len_b), raw units; 0 when lengths unknown
    ds: np.ndarray  # s_a − s_b (same-family affinity), in {−1, 0, 1}
    n_len: np.ndarray
    sum_x2: np.ndarray
    sum_loglen_a: np.ndarray
    sum_loglen_b: np.ndarray
    pos: np.ndarray  # 1.0 where the shown order is known, 0.0 where not (the position term is multiplied by it)
    #: (cells, 3) cell means of the normalised style differences (header, list, bold); 0 without style counts.
    style: np.ndarray | None = None
    n_style: np.ndarray | None = None  # battles with style counts
    style_sq: np.ndarray | None = None  # (cells, 3) Σ d² (the fit's style scale)

    def __len__(self) -> int:
        return int(self.a.shape[0])

    def take(self, idx: np.ndarray | slice) -> PairArrays:
        """Cells at ``idx`` (a slice gives views, no copy)."""
        fields: dict[str, Any] = {name: getattr(self, name) for name in self.__dataclass_fields__}
        taken: dict[str, Any] = {name: v if v is None else v[idx] for name, v in fields.items()}  # style may be None
        return PairArrays(**taken)

    @property
    def has_style(self) -> bool:
        """Whether any cell carries style counts (else the style effects are left out of the model)."""
        return self.n_style is not None and bool(np.any(self.n_style > 0))

    @staticmethod
    def concat(parts: Sequence[PairArrays]) -> PairArrays:
        """The cells of ``parts`` one after the other; style counts where only some parts have them are 0 in the
        others (as a cell without style counts holds them)."""
        if len(parts) == 1:
            return parts[0]
        fields: dict[str, Any] = {}
        for name in PairArrays.__dataclass_fields__:
            values = [getattr(p, name) for p in parts]
            if all(v is None for v in values):
                fields[name] = None
                continue
            shape = {"style": (3,), "style_sq": (3,)}.get(name, ())
            filled = [np.zeros((len(p), *shape)) if v is None else v for p, v in zip(parts, values, strict=True)]
            fields[name] = np.concatenate(filled)
        return PairArrays(**fields)

    def with_counts(self, win_a: np.ndarray, win_b: np.ndarray, tie: np.ndarray, bothbad: np.ndarray) -> PairArrays:
        fields = {name: getattr(self, name) for name in self.__dataclass_fields__}
        fields.update(win_a=win_a, win_b=win_b, tie=tie, bothbad=bothbad, n=win_a + win_b + tie)
        return PairArrays(**fields)


def clip_length(pairs: PairArrays, clip: float | None) -> PairArrays:
    """The pair arrays with the length covariate clipped at ±``clip`` (exact from the cells; ``None``: as is).

    Why it is exact: cells are grouped by fixed length bins and ``clip`` is a bin edge, so every battle
    of a cell lies on one side of ±clip.  A cell beyond it has every clipped x equal to ±clip, so its
    clipped mean is ±clip and its clipped Σx² is n_len·clip²; a cell inside keeps its mean and Σx².
    The cell's mean lies in its bin, so clipping the mean says which case a cell is — no bin index
    needed — and equals the mean of the battles' clipped x.  The fit's length scale (RMS of the
    covariate) and every length diagnostic then see the covariate the model uses.
    """
    if clip is None:
        return pairs
    x = np.clip(pairs.x, -clip, clip)
    beyond = np.abs(pairs.x) >= clip
    sum_x2 = np.where(beyond, pairs.n_len * clip * clip, pairs.sum_x2)
    fields = {name: getattr(pairs, name) for name in pairs.__dataclass_fields__}
    fields.update(x=x, sum_x2=sum_x2)
    return PairArrays(**fields)


@dataclass(frozen=True)
class ScoreArrays:
    """Score cells pivoted to one row per (judge, model, prompt) with a count per category."""

    j: np.ndarray
    m: np.ndarray
    p: np.ndarray
    counts: np.ndarray  # (rows, K) float64; category k = the k-th smallest grade used (Dataset.score_values)

    def __len__(self) -> int:
        return int(self.j.shape[0])

    def take(self, idx: np.ndarray | slice) -> ScoreArrays:
        return ScoreArrays(self.j[idx], self.m[idx], self.p[idx], self.counts[idx])


def judge_totals(pairs: PairArrays, n_judges: int, what: str) -> np.ndarray:
    """:meth:`Dataset.judge_sums` of in-memory pair cells (zeros for ``n_style`` without style counts)."""
    if what == "affinity":
        weights = np.abs(pairs.ds) * pairs.n
    elif what == "n_pos":  # battles of known shown order: what a position effect is told from
        weights = pairs.pos * pairs.n
    elif what == "n_versus":  # battles of two different models: a self-battle says nothing of θ or a_j
        weights = np.where(pairs.a != pairs.b, pairs.n, 0.0)
    elif what == "n_style" and pairs.n_style is None:
        return np.zeros(n_judges)
    else:
        weights = getattr(pairs, what)
    return np.bincount(pairs.j, weights=weights, minlength=n_judges)


@dataclass(frozen=True)
class Dataset:
    """Everything a fit needs, coded once."""

    models: tuple[str, ...]
    judges: tuple[str, ...]
    judge_families: tuple[str, ...]
    prompts: tuple[str, ...]
    min_score: float
    pairs: PairArrays
    scores: ScoreArrays | None
    #: The grades the ordinal part's categories stand for, in order (only those used: 1..10 plus an 8.5 is 11).
    score_values: tuple[float, ...] = ()
    #: A streamed data set (:mod:`biasboard.ranking.stream`, a history too big to hold): the cells are on disk,
    #: read a shard at a time by the objective, and ``pairs`` holds them summed per ordered model pair — what
    #: the naive fit, the comparison graph, the battle counts and the covariate report read (its judge index
    #: is −1, so a per-judge sum of it fails loudly: per-judge sums come from :meth:`judge_sums`).
    stream: PairStore | None = None

    def __post_init__(self) -> None:
        """Refuse a judge named :data:`~biasboard.schemas.summary.GLOBAL_JUDGE` (``*``): the fit's global effects
        go by that name in the bias table, in switched-off (judge, effect) pairs, in ``--reference``'s patterns
        and in ``plan --judge``, so an input judge of that name would be read as all judges."""
        if GLOBAL_JUDGE in self.judges:
            raise InputError(
                f"a judge is named {GLOBAL_JUDGE!r}, the name of the global effects (all judges together) in the "
                "bias table, --reference and plan --judge; rename it (e.g. with --aliases)"
            )

    def judge_sums(self, what: str) -> np.ndarray:
        """Per judge: the sum over its pair cells of ``what`` — ``n``, ``n_len``, ``n_pos`` (battles of known shown
        order), ``n_versus`` (battles of two different models, self-battles aside), ``n_style``, ``tie``, ``bothbad``
        or ``affinity`` (|s_a − s_b|·n: battles where a model of the judge's family met another)."""
        if self.stream is not None:
            return self.stream.judge_sums(what)
        return judge_totals(self.pairs, len(self.judges), what)

    def cell_parts(self, columns: Sequence[str]) -> Iterator[PairArrays]:
        """The pair cells, judge by judge as stored: ``pairs`` itself in memory, each shard (``columns`` read, the
        length covariate clipped as the stream is) when streamed, whose ``pairs`` are per-pair totals without a
        judge or an affinity covariate — what a diagnostic that needs the cells themselves must not read."""
        if self.stream is None:
            yield self.pairs
            return
        for shard in self.stream.shards(columns):
            yield shard.pairs

    def judge_pairs(self, judges: np.ndarray) -> PairArrays:
        """The pair cells of the judges ``judges`` selects (bool over the judges): the anchors, or a reference's
        thousands of voter-judges in one pass (read from disk for a streamed data set, whose ``pairs`` are totals)."""
        if self.stream is not None:
            return self.stream.judge_pairs(judges)
        return self.pairs.take(np.flatnonzero(judges[self.pairs.j]))

    @property
    def n_categories(self) -> int:
        return 0 if self.scores is None else int(self.scores.counts.shape[1])

    @property
    def ordinal_only(self) -> bool:
        """No battles, only single grades: the board is the ordinal (many-facet) model alone."""
        return len(self.pairs) == 0


def pool_judge_names(judges: Sequence[str], rule: str) -> tuple[str, ...]:
    """Each judge's pool under ``rule``: ``prefix:SEP`` pools a judge by its name up to the first SEP
    (``arena/voter-17`` → ``arena`` with ``prefix:/``); a name without SEP is its own pool."""
    kind, _, sep = rule.partition(":")
    if kind != "prefix" or not sep:
        raise InputError(f"judge pool {rule!r}: expected 'prefix:SEP' (e.g. 'prefix:/')")
    return tuple(name.split(sep, 1)[0] for name in judges)


def _checked_pair_counts(pairs: dict[str, np.ndarray], judges, models) -> dict[str, np.ndarray]:
    """Coded pair cells (final codes) checked — counts not negative, n the sum of the verdicts, n_len and
    n_style at most n — and without their empty cells (n = 0); InputError naming the column otherwise."""
    for name in ("n", "win_a", "win_b", "tie", "tie_bothbad", "n_len", "n_style"):
        if pairs[name].size and pairs[name].min() < 0:
            raise InputError(f"pair cells: column {name} has negative counts")
    bad = np.flatnonzero(pairs["n"] != pairs["win_a"] + pairs["win_b"] + pairs["tie"] + pairs["tie_bothbad"])
    if bad.size:
        i = bad[0]
        raise InputError(
            f"pair cells: column n != win_a + win_b + tie + tie_bothbad in {bad.size} cell(s), e.g. judge "
            f"{judges[pairs['judge'][i]]!r} {models[pairs['model_a'][i]]!r} vs {models[pairs['model_b'][i]]!r}"
        )
    for name in ("n_len", "n_style"):
        if np.any(pairs[name] > pairs["n"]):
            raise InputError(f"pair cells: column {name} exceeds n")
    keep = pairs["n"] > 0
    return pairs if keep.all() else {name: values[keep] for name, values in pairs.items()}


def no_affinity_of(families: Sequence[str]) -> np.ndarray:
    """Per family code: True for the families that never count as a judge's own (:data:`NO_AFFINITY_FAMILIES`)."""
    return np.array([f in NO_AFFINITY_FAMILIES for f in families], bool)


def _pair_arrays(col: dict[str, np.ndarray], no_affinity: np.ndarray) -> PairArrays:
    """Merged, coded pair cells (:func:`_group_sum`'s columns) → the fit's :class:`PairArrays`.

    The columns the fit does not keep (the sums x and the style sums are made from, ``tie``) hold the new
    columns where coding made them (writeable: not a view of the caller's buffers), so the fresh memory is
    the int64 codes and ``pos`` (~35 MB fewer fresh pages at 650k cells: page faults are system time).
    """

    def affinity(fam: np.ndarray, judge_family: np.ndarray) -> np.ndarray:
        return (fam == judge_family) & ~no_affinity[fam]

    n_len = col["n_len"]
    # Battles without lengths sit in their own cells (len_bin −1) with n_len = 0: x = 0 there, so the
    # length term vanishes for them.  A cell mixing both would give the known part's mean to all.
    known = n_len > 0
    x = np.divide(col["sum_x"], n_len, out=_writable(col["sum_x"]), where=known)
    x[~known] = 0.0
    # Style likewise: battles without counts sit in style bin −1 with n_style = 0, their style terms vanish.
    n_style = col["n_style"]
    style = None
    if np.any(n_style > 0):
        style = np.column_stack([col[name] for name in STYLE_SUMS])
        counted = n_style[:, None] > 0
        np.divide(style, n_style[:, None], out=style, where=counted)
        style[~counted[:, 0]] = 0.0
    ds = affinity(col["family_a"], col["judge_family"]).astype(np.float64)
    ds -= affinity(col["family_b"], col["judge_family"])
    # The measures are float64 already (counts were coded so): no copies here but the new columns.
    return PairArrays(
        a=col["model_a"].astype(np.int64, copy=False),
        b=col["model_b"].astype(np.int64, copy=False),
        j=col["judge"].astype(np.int64, copy=False),
        win_a=col["win_a"],
        win_b=col["win_b"],
        tie=np.add(col["tie"], col["tie_bothbad"], out=_writable(col["tie"])),
        bothbad=col["tie_bothbad"],
        n=col["n"],
        x=x,
        ds=ds,
        n_len=n_len,
        sum_x2=col["sum_x2"],
        sum_loglen_a=col["sum_loglen_a"],
        sum_loglen_b=col["sum_loglen_b"],
        pos=col["order_known"].astype(np.float64),
        style=style,
        n_style=n_style if style is not None else None,
        style_sq=None if style is None else np.column_stack([col[name] for name in STYLE_SQUARES]),
    )


def _writable(values: np.ndarray) -> np.ndarray:
    """``values`` itself to write a result into when coding made it (writeable), else a new array like it: a
    column viewing the caller's buffers (a one-table input, zero-copy) is read-only and left as it is."""
    return values if values.flags.writeable else np.empty_like(values)


def pair_vocabularies(kind: type[_Vocab] = _Vocab) -> dict[str, _Vocab]:
    """A pair-cell column → its vocabulary (of ``kind``), shared where the columns share one (models, families)."""
    judge_v, model_v, family_v = kind(), kind(), kind()
    return {
        "judge": judge_v,
        "judge_family": family_v,
        "model_a": model_v,
        "model_b": model_v,
        "family_a": family_v,
        "family_b": family_v,
    }


def build_dataset(
    pair_cells: CellsInput | None, score_cells: CellsInput | None = None, *, judge_pool: str | None = None
) -> Dataset:
    """Merge (group-by-sum) and code the cells; checks counts add up and names the column when they do not.

    Pair cells may be absent (None or only empty tables) when score cells are given: the data set is then
    *ordinal-only* (:attr:`Dataset.ordinal_only`, empty pair arrays), e.g. MT-Bench single grades alone.

    ``pair_cells`` may be one table, several (days), or an iterator of tables or record batches, consumed
    once: each is coded to compact arrays as it arrives.  String key columns may be plain or
    dictionary-encoded (e.g. ``pq.read_table(..., read_dictionary=[...])``), which keeps a big input small.
    ``judge_pool`` (:func:`pool_judge_names`) gives one judge per pool: the pool's cells add up (the cells
    monoid), so a pooled fit is the fit of cells aggregated under the pool's name.

    The columns are made on base pages (:func:`~biasboard.ranking.pages.base_pages`): written once, at full
    size, as the batches stream in.
    """
    with base_pages():
        return _build_dataset(pair_cells, score_cells, judge_pool)


def _build_dataset(pair_cells: CellsInput | None, score_cells: CellsInput | None, judge_pool: str | None) -> Dataset:
    """:func:`build_dataset`'s work."""
    pair_vocabs = pair_vocabularies(_BatchVocab)
    judge_v, model_v, family_v, prompt_v = (
        pair_vocabs["judge"],
        pair_vocabs["model_a"],
        pair_vocabs["family_a"],
        _BatchVocab(),
    )
    score_vocabs = score_vocabularies(pair_vocabs, prompt_v)
    pairs = _code_tables(pair_cells, _FIT_PAIR_SCHEMA, "pair cells", pair_vocabs, _PAIR_COUNTS)
    scores = _code_tables(score_cells, SCORE_CELLS_SCHEMA, "score cells", score_vocabs)
    if pairs is None and scores is None:
        raise InputError("no battles and no grades: pair cells and score cells are both empty")
    if pairs is None:  # ordinal-only: the same code path on zero pair cells
        pairs = {f.name: np.zeros(0, np.int32 if f.name in pair_vocabs else np.float64) for f in _FIT_PAIR_SCHEMA}
    vocabs = {}
    remaps: dict[int, np.ndarray] = {}
    for name, vocab in (("judges", judge_v), ("models", model_v), ("families", family_v), ("prompts", prompt_v)):
        vocabs[name], remaps[id(vocab)] = vocab.finish()
    if judge_pool is not None:
        pooled = pool_judge_names(vocabs["judges"], judge_pool)
        vocabs["judges"] = tuple(sorted(set(pooled)))
        position = {name: i for i, name in enumerate(vocabs["judges"])}
        to_pool = np.array([position[name] for name in pooled], np.int32)
        remaps[id(judge_v)] = to_pool[remaps[id(judge_v)]]
    judges, models, families, prompts = vocabs["judges"], vocabs["models"], vocabs["families"], vocabs["prompts"]
    _recode(pairs, pair_vocabs, remaps)
    if scores is not None:
        _recode(scores, score_vocabs, remaps)

    pairs = _checked_pair_counts(pairs, judges, models)
    if not len(pairs["n"]) and scores is None:
        raise InputError("pair cells: no battles (every cell has n = 0)")
    scores = _checked_score_counts(scores)
    if scores is None and not len(pairs["n"]):
        raise InputError("score cells: no grades (every cell has n = 0) and no battles")

    col = _group_sum(pairs, _FIT_PAIR_KEYS, PAIR_CELL_MEASURES) if len(pairs["n"]) else pairs
    del pairs
    fam_of_judge = np.full(len(judges), -1, np.int64)
    fam_of_judge[col["judge"]] = col["judge_family"]
    _add_score_judge_families(fam_of_judge, scores)
    # One gather for 10⁴-10⁶ (voter-)judges, not a Python loop over numpy scalars: −1 (no family) takes the last.
    judge_families = tuple(np.array([*families, UNKNOWN_FAMILY], dtype=object)[fam_of_judge].tolist())
    arrays = _pair_arrays(col, no_affinity_of(families))
    del col

    score_arrays, min_score, values = _score_arrays(scores)
    return Dataset(models, judges, judge_families, prompts, min_score, arrays, score_arrays, values)


def score_vocabularies(pair_vocabs: dict[str, _Vocab], prompts: _Vocab) -> dict[str, _Vocab]:
    """A score-cell column → its vocabulary: the pair cells' judges, models and families (one coding of each),
    and ``prompts``."""
    return {
        "judge": pair_vocabs["judge"],
        "judge_family": pair_vocabs["judge_family"],
        "model": pair_vocabs["model_a"],
        "family": pair_vocabs["family_a"],
        "prompt_id": prompts,
    }


def _checked_score_counts(scores: dict[str, np.ndarray] | None) -> dict[str, np.ndarray] | None:
    """Coded score cells without their empty cells (n = 0; None when every one is), InputError on a negative n."""
    if scores is None:
        return None
    if scores["n"].min() < 0:
        raise InputError("score cells: column n has negative counts")
    keep = scores["n"] > 0
    return {name: values[keep] for name, values in scores.items()} if keep.any() else None


def _add_score_judge_families(fam_of_judge: np.ndarray, scores: dict[str, np.ndarray] | None) -> None:
    """The family of each judge that only grades (no pair cell gave it one), from its score cells, in place."""
    if scores is not None:
        sj, sf = scores["judge"], scores["judge_family"]
        missing = fam_of_judge[sj] < 0
        fam_of_judge[sj[missing]] = sf[missing]


def _score_arrays(scores: dict[str, np.ndarray] | None) -> tuple[ScoreArrays | None, float, tuple[float, ...]]:
    """Coded, checked score cells → (:class:`ScoreArrays`, the lowest grade, the grades used), or (None, 0, ())."""
    if scores is None:
        return None, 0.0, ()
    # Categories are the grades actually used, in order: a half point (8.5) is a category between 8 and 9,
    # and a grade nobody gave adds no threshold the data cannot identify.
    used, scores["score"] = np.unique(scores["score"], return_inverse=True)
    values, min_score, n_cat = tuple(float(v) for v in used), float(used[0]), len(used)
    if n_cat < 2:
        raise InputError("score cells: column score takes a single value; the ordinal part needs two or more")
    coded = _group_sum(scores, ("judge", "model", "prompt_id", "score"), ("n",))
    key = np.stack([coded[c] for c in ("judge", "model", "prompt_id")], axis=1)
    first = np.ones(len(key), bool)  # rows are sorted by key: a new (judge, model, prompt) starts a row
    first[1:] = np.any(key[1:] != key[:-1], axis=1)
    row = np.cumsum(first) - 1
    counts = np.zeros((int(row[-1]) + 1, n_cat))
    np.add.at(counts, (row, coded["score"]), coded["n"].astype(np.float64))
    starts = np.flatnonzero(first)
    arrays = ScoreArrays(
        j=coded["judge"][starts].astype(np.int64),
        m=coded["model"][starts].astype(np.int64),
        p=coded["prompt_id"][starts].astype(np.int64),
        counts=counts,
    )
    return arrays, min_score, values


def with_judge(data: Dataset, cells: CellsInput) -> Dataset:
    """``data`` with one more judge: ``cells``, pair cells all of one judge not in ``data`` (trusted anchors), coded
    against ``data``'s models and added as its last judge (in memory, or as shards after a streamed data set's).

    Nothing of ``data`` is coded again — its judges keep their numbers, its score cells too — so a fit with the
    judge and one without share one coding (a streamed history is not streamed twice).  The judge is never pooled
    (``judge_pool``): it is a rater of its own.  InputError when ``cells`` name a model ``data`` does not have (the
    caller leaves those out first) or a judge ``data`` has already."""
    pairs, name, family = _code_judge_cells(cells, data.judges, data.models)
    if data.stream is not None:
        return data.stream.with_judge(data, name, family, pairs)
    return replace(
        data,
        judges=(*data.judges, name),
        judge_families=(*data.judge_families, family),
        pairs=PairArrays.concat([data.pairs, pairs]),
    )


def _code_judge_cells(cells: CellsInput, judges: Sequence[str], models: Sequence[str]) -> tuple[PairArrays, str, str]:
    """:func:`with_judge`'s coding: the cells as :func:`build_dataset` makes them, as judge number ``len(judges)``;
    with the judge's name and family."""
    vocabs = pair_vocabularies()
    vocabs["model_a"].index.update((name, i) for i, name in enumerate(models))  # models sorted: their codes stay
    coded = _code_tables(cells, _FIT_PAIR_SCHEMA, "pair cells of the added judge", vocabs, _PAIR_COUNTS)
    if coded is None:
        raise InputError("pair cells of the added judge: no rows")
    unknown = sorted(set(vocabs["model_a"].index) - set(models))
    if unknown:
        raise InputError(f"pair cells of the added judge: model(s) the battles do not have: {', '.join(unknown[:5])}")
    names, _ = vocabs["judge"].finish()
    if len(names) != 1 or names[0] in judges:
        raise InputError(f"pair cells of the added judge: one judge the battles do not have expected, got {names}")
    families, _ = vocabs["family_a"].finish()
    _recode(coded, vocabs, {id(v): v.finish()[1] for v in {id(v): v for v in vocabs.values()}.values()})
    coded = _checked_pair_counts(coded, names, models)
    if not len(coded["n"]):
        raise InputError("pair cells of the added judge: no battles (every cell has n = 0)")
    coded["judge"] = np.full(len(coded["n"]), len(judges), np.int32)
    col = _group_sum(coded, _FIT_PAIR_KEYS, PAIR_CELL_MEASURES)
    family = families[int(col["judge_family"][0])]
    return _pair_arrays(col, no_affinity_of(families)), names[0], family


class CellBatches(Iterator[pa.RecordBatch]):
    """A Parquet file of cells as record batches, string columns dictionary-encoded, and its row count.

    Iterated once.  ``num_rows`` (the file's footer) lets :func:`build_dataset` make each column once at its
    full size instead of concatenating per-batch parts.
    """

    def __init__(self, source, batch_rows: int = 1 << 16) -> None:
        import pyarrow.parquet as pq

        strings = [f.name for f in pq.ParquetFile(source).schema_arrow if _is_string(f.type)]
        self._reader = pq.ParquetFile(source, read_dictionary=strings)
        self.num_rows = int(self._reader.metadata.num_rows)
        self._batches = self._read(batch_rows)

    def _read(self, batch_rows: int) -> Iterator[pa.RecordBatch]:
        reader = self._reader
        try:
            for group in range(reader.num_row_groups):
                yield from reader.read_row_group(group, use_threads=False).to_batches(batch_rows)
        finally:
            reader.close()
            pa.default_memory_pool().release_unused()  # the decoder's buffers, back to the system

    def __next__(self) -> pa.RecordBatch:
        return next(self._batches)


def read_cells(source, batch_rows: int = 1 << 16) -> CellBatches:
    """A Parquet file of cells (path or file-like) as record batches, string columns dictionary-encoded.

    For :func:`build_dataset`: the batches are coded as they stream, so a big cells file never sits in
    memory as a table of strings (at 530k cells that table takes ~165 MB of RSS; this path ~60 MB).
    """
    return CellBatches(source, batch_rows)


def shard_indices(n_cells: int, shards: int) -> list[slice]:
    """Split cells into ``shards`` contiguous parts (a hash split would do as well: sums add)."""
    if shards < 1:
        raise ValueError(f"shards must be >= 1, got {shards}")
    bounds = np.linspace(0, n_cells, shards + 1).round().astype(int)
    return [slice(int(lo), int(hi)) for lo, hi in itertools.pairwise(bounds)]
