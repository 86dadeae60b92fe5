"""Cells → the integer-coded arrays the models are fit on.

Cells arrive as one table or as several days' tables; they are merged first by
the monoid law of :mod:`biasboard.schemas.cells` (concatenate, group by the key,
sum), then coded: models and judges become indices, the length covariate
becomes each cell's mean log length ratio, and the affinity covariate
``s_a − s_b`` is read from the families.  Nothing here loops over rows.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
from biasboard.schemas.cells import (
    PAIR_CELL_KEYS,
    PAIR_CELL_MEASURES,
    PAIR_CELLS_SCHEMA,
    SCORE_CELLS_SCHEMA,
    UNKNOWN_FAMILY,
)
from biasboard.schemas.errors import InputError

#: Families that never count as "the judge's own family".
NO_AFFINITY_FAMILIES: frozenset[str] = frozenset({UNKNOWN_FAMILY, "human"})

CellsInput = pa.Table | pl.DataFrame | Sequence[pa.Table | pl.DataFrame]


def _as_tables(cells: CellsInput | None, schema: pa.Schema, what: str) -> list[pa.Table]:
    """The inputs as Arrow tables in the contract's columns and types (empty tables dropped)."""
    if cells is None:
        return []
    items: Iterable = [cells] if isinstance(cells, pa.Table | pl.DataFrame) else cells
    tables = []
    for i, item in enumerate(items):
        if isinstance(item, pl.DataFrame):
            item = item.to_arrow()
        if not isinstance(item, pa.Table):
            raise InputError(f"{what} #{i}: expected a pyarrow Table or polars DataFrame, got {type(item).__name__}")
        missing = [name for name in schema.names if name not in item.column_names]
        if missing:
            raise InputError(f"{what} #{i}: missing column(s) {', '.join(missing)}")
        try:
            table = item.select(schema.names).cast(schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as err:
            raise InputError(f"{what} #{i}: columns do not match the cells contract ({err})") from None
        if table.num_rows:
            tables.append(table)
    return tables


def _vocab(tables: Sequence[pa.Table], *columns: str) -> tuple[str, ...]:
    values: set[str] = set()
    for table in tables:
        for col in columns:
            values.update(pc.unique(table[col]).to_pylist())
    return tuple(sorted(values))


def _encode(tables: Sequence[pa.Table], names: dict[str, Sequence[str]]) -> dict[str, np.ndarray]:
    """Concatenated columns as numpy arrays, every string key replaced by its integer code (its position in
    ``names[col]``).  Coding in Arrow keeps the strings out of every later copy."""
    value_sets = {col: pa.array(list(vocab), pa.string()) for col, vocab in names.items()}
    columns: dict[str, list[np.ndarray]] = {}
    for table in tables:
        for name in table.column_names:
            if name in value_sets:
                values = pc.index_in(table[name], value_set=value_sets[name]).to_numpy().astype(np.int64)
            else:
                values = table[name].to_numpy()
            columns.setdefault(name, []).append(values)
    return {name: np.concatenate(parts) if len(parts) > 1 else parts[0] for name, parts in columns.items()}


def _group_sum(columns: dict[str, np.ndarray], keys: Sequence[str], measures: Sequence[str]) -> dict[str, np.ndarray]:
    """The cells monoid on coded columns: group by ``keys``, sum ``measures``, rows sorted by the key.

    The integer key columns are packed into one int64 (mixed radix), so grouping is one stable argsort and
    one ``np.add.reduceat`` per measure — no hash table and no string, with memory a few arrays of cells.
    """
    offsets = {k: int(columns[k].min()) for k in keys}
    radix = [int(columns[k].max()) - offsets[k] + 1 for k in keys]
    if float(np.prod(np.array(radix, dtype=float))) >= 2.0**62:
        raise InputError("cells: too many distinct keys to group (more than 2^62 combinations)")
    packed = np.zeros(len(columns[keys[0]]), np.int64)
    for k, r in zip(keys, radix, strict=True):
        packed = packed * r + (columns[k].astype(np.int64) - offsets[k])
    order = np.argsort(packed, kind="stable")
    packed = packed[order]
    starts = np.flatnonzero(np.concatenate([[True], packed[1:] != packed[:-1]]))
    out = {}
    rest = packed[starts]
    for k, r in reversed(list(zip(keys, radix, strict=True))):
        out[k] = rest % r + offsets[k]
        rest = rest // r
    for m in measures:
        out[m] = np.add.reduceat(columns[m][order], starts)
    return {name: out[name] for name in (*keys, *measures)}


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

    def __len__(self) -> int:
        return int(self.a.shape[0])

    def take(self, idx: np.ndarray | slice) -> PairArrays:
        """Cells at ``idx`` (a slice gives views, no copy)."""
        return PairArrays(**{name: getattr(self, name)[idx] for name in self.__dataclass_fields__})

    def with_counts(self, win_a: np.ndarray, win_b: np.ndarray, tie: np.ndarray, bothbad: np.ndarray) -> PairArrays:
        fields = {name: getattr(self, name) for name in self.__dataclass_fields__}
        fields.update(win_a=win_a, win_b=win_b, tie=tie, bothbad=bothbad, n=win_a + win_b + tie)
        return PairArrays(**fields)


@dataclass(frozen=True)
class ScoreArrays:
    """Score cells pivoted to one row per (judge, model, prompt) with a count per category."""

    j: np.ndarray
    m: np.ndarray
    p: np.ndarray
    counts: np.ndarray  # (rows, K) float64; category k = score − min_score

    def __len__(self) -> int:
        return int(self.j.shape[0])

    def take(self, idx: np.ndarray | slice) -> ScoreArrays:
        return ScoreArrays(self.j[idx], self.m[idx], self.p[idx], self.counts[idx])


@dataclass(frozen=True)
class Dataset:
    """Everything a fit needs, coded once."""

    models: tuple[str, ...]
    judges: tuple[str, ...]
    judge_families: tuple[str, ...]
    prompts: tuple[str, ...]
    min_score: int
    pairs: PairArrays
    scores: ScoreArrays | None

    @property
    def n_categories(self) -> int:
        return 0 if self.scores is None else int(self.scores.counts.shape[1])


def build_dataset(pair_cells: CellsInput, score_cells: CellsInput | None = None) -> Dataset:
    """Merge (group-by-sum) and code the cells; checks counts add up and names the column when they do not."""
    pair_tables = _as_tables(pair_cells, PAIR_CELLS_SCHEMA, "pair cells")
    if not pair_tables:
        raise InputError("pair cells: no battles (no cells given)")
    score_tables = _as_tables(score_cells, SCORE_CELLS_SCHEMA, "score cells")
    models = tuple(sorted(set(_vocab(pair_tables, "model_a", "model_b")) | set(_vocab(score_tables, "model"))))
    judges = tuple(sorted(set(_vocab(pair_tables, "judge")) | set(_vocab(score_tables, "judge"))))
    families = tuple(sorted(set(_vocab(pair_tables, "judge_family", "family_a", "family_b"))
                            | set(_vocab(score_tables, "judge_family", "family"))))
    prompts = _vocab(score_tables, "prompt_id")

    pairs = _encode(pair_tables, {"judge": judges, "judge_family": families, "model_a": models,
                                  "model_b": models, "family_a": families, "family_b": families})
    for col in ("n", "win_a", "win_b", "tie", "tie_bothbad", "n_len"):
        if pairs[col].min() < 0:
            raise InputError(f"pair cells: column {col} has negative counts")
    bad = np.flatnonzero(pairs["n"] != pairs["win_a"] + pairs["win_b"] + pairs["tie"] + pairs["tie_bothbad"])
    if bad.size:
        i = bad[0]
        raise InputError(
            f"pair cells: column n != win_a + win_b + tie + tie_bothbad in {bad.size} cell(s), e.g. judge "
            f"{judges[pairs['judge'][i]]!r} {models[pairs['model_a'][i]]!r} vs {models[pairs['model_b'][i]]!r}"
        )
    if np.any(pairs["n_len"] > pairs["n"]):
        raise InputError("pair cells: column n_len exceeds n")
    keep = pairs["n"] > 0
    if not keep.any():
        raise InputError("pair cells: no battles (every cell has n = 0)")
    if not keep.all():
        pairs = {name: values[keep] for name, values in pairs.items()}
    scores = None
    if score_tables:
        scores = _encode(score_tables, {"judge": judges, "judge_family": families, "model": models,
                                        "family": families, "prompt_id": prompts})
        if scores["n"].min() < 0:
            raise InputError("score cells: column n has negative counts")
        keep = scores["n"] > 0
        scores = {name: values[keep] for name, values in scores.items()} if keep.any() else None

    col = _group_sum(pairs, PAIR_CELL_KEYS, PAIR_CELL_MEASURES)
    del pairs
    fam_of_judge = np.full(len(judges), -1, np.int64)
    fam_of_judge[col["judge"]] = col["judge_family"]
    if scores is not None:
        sj, sf = scores["judge"], scores["judge_family"]
        missing = fam_of_judge[sj] < 0
        fam_of_judge[sj[missing]] = sf[missing]
    judge_families = tuple(families[f] if f >= 0 else UNKNOWN_FAMILY for f in fam_of_judge)
    no_affinity = np.array([f in NO_AFFINITY_FAMILIES for f in families])

    def affinity(fam: np.ndarray) -> np.ndarray:
        return ((fam == col["judge_family"]) & ~no_affinity[fam]).astype(np.float64)

    n_len = col["n_len"].astype(np.float64)
    sum_x = col["sum_x"].astype(np.float64)
    # Battles without lengths sit in their own cells (len_bin −1) with n_len = 0: x = 0 there, so the
    # length term vanishes for them.  A cell mixing both would give the known part's mean to all.
    x = np.divide(sum_x, n_len, out=np.zeros_like(sum_x), where=n_len > 0)
    arrays = PairArrays(
        a=col["model_a"],
        b=col["model_b"],
        j=col["judge"],
        win_a=col["win_a"].astype(np.float64),
        win_b=col["win_b"].astype(np.float64),
        tie=(col["tie"] + col["tie_bothbad"]).astype(np.float64),
        bothbad=col["tie_bothbad"].astype(np.float64),
        n=col["n"].astype(np.float64),
        x=x,
        ds=affinity(col["family_a"]) - affinity(col["family_b"]),
        n_len=n_len,
        sum_x2=col["sum_x2"].astype(np.float64),
        sum_loglen_a=col["sum_loglen_a"].astype(np.float64),
        sum_loglen_b=col["sum_loglen_b"].astype(np.float64),
    )

    score_arrays = None
    min_score = 0
    if scores is not None:
        min_score = int(scores["score"].min())
        n_cat = int(scores["score"].max()) - min_score + 1
        if n_cat < 2:
            raise InputError("score cells: column score takes a single value; the ordinal part needs two or more")
        coded = _group_sum(scores, ("judge", "model", "prompt_id", "score"), ("n",))
        key = np.stack([coded[c] for c in ("judge", "model", "prompt_id")], axis=1)
        first = np.ones(len(key), bool)  # rows are sorted by key: a new (judge, model, prompt) starts a row
        first[1:] = np.any(key[1:] != key[:-1], axis=1)
        row = np.cumsum(first) - 1
        counts = np.zeros((int(row[-1]) + 1, n_cat))
        np.add.at(counts, (row, coded["score"] - min_score), coded["n"].astype(float))
        starts = np.flatnonzero(first)
        score_arrays = ScoreArrays(j=coded["judge"][starts], m=coded["model"][starts], p=coded["prompt_id"][starts],
                                   counts=counts)
    return Dataset(models, judges, judge_families, prompts, min_score, arrays, score_arrays)


def shard_indices(n_cells: int, shards: int) -> list[slice]:
    """Split cells into ``shards`` contiguous parts (a hash split would do as well: sums add)."""
    if shards < 1:
        raise ValueError(f"shards must be >= 1, got {shards}")
    bounds = np.linspace(0, n_cells, shards + 1).round().astype(int)
    return [slice(int(lo), int(hi)) for lo, hi in itertools.pairwise(bounds)]
