"""Cells → the integer-coded arrays the models are fit on.

Cells arrive as one table or as several days' tables; they are merged first by
the monoid law of :mod:`biasboard.schemas.cells` (concatenate, group by the key,
sum), then coded: models and judges become indices, the length covariate
becomes each cell's mean log length ratio, and the affinity covariate
``s_a − s_b`` is read from the families.  Nothing here loops over rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl
import pyarrow as pa
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


def _as_frames(cells: CellsInput | None, schema: pa.Schema, what: str) -> list[pl.DataFrame]:
    if cells is None:
        return []
    items: Iterable = [cells] if isinstance(cells, pa.Table | pl.DataFrame) else cells
    frames = []
    for i, item in enumerate(items):
        frame = pl.from_arrow(item) if isinstance(item, pa.Table) else item
        if not isinstance(frame, pl.DataFrame):
            raise InputError(f"{what} #{i}: expected a pyarrow Table or polars DataFrame, got {type(item).__name__}")
        missing = [name for name in schema.names if name not in frame.columns]
        if missing:
            raise InputError(f"{what} #{i}: missing column(s) {', '.join(missing)}")
        frames.append(frame.select(schema.names))
    return frames


def _concat(cells: CellsInput | None, schema: pa.Schema, what: str) -> pl.DataFrame | None:
    frames = [f for f in _as_frames(cells, schema, what) if f.height]
    return pl.concat(frames, how="vertical_relaxed") if frames else None


def _encoded_merge(frame: pl.DataFrame, keys: Sequence[str], measures: Sequence[str],
                   names: dict[str, Sequence[str]]) -> pl.DataFrame:
    """Group-by-sum over the key after replacing every string key by its integer code.

    Integer keys make the group-by and the (determinism-giving) sort an order of magnitude faster than
    on strings; ``names[col]`` is the sorted vocabulary whose positions are the codes.
    """
    encoded = frame.with_columns(
        pl.col(col).cast(pl.Enum(list(vocab))).to_physical().cast(pl.Int64) for col, vocab in names.items()
    )
    return encoded.group_by(list(keys)).agg([pl.col(m).sum() for m in measures]).sort(list(keys))


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

    def take(self, idx: np.ndarray) -> PairArrays:
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

    def take(self, idx: np.ndarray) -> ScoreArrays:
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
    pairs = _concat(pair_cells, PAIR_CELLS_SCHEMA, "pair cells")
    if pairs is None:
        raise InputError("pair cells: no battles (no cells given)")
    scores = _concat(score_cells, SCORE_CELLS_SCHEMA, "score cells")
    for col in ("n", "win_a", "win_b", "tie", "tie_bothbad", "n_len"):
        if pairs[col].min() < 0:
            raise InputError(f"pair cells: column {col} has negative counts")
    bad = pairs.filter(pl.col("n") != pl.col("win_a") + pl.col("win_b") + pl.col("tie") + pl.col("tie_bothbad"))
    if bad.height:
        row = bad.row(0, named=True)
        raise InputError(
            f"pair cells: column n != win_a + win_b + tie + tie_bothbad in {bad.height} cell(s), e.g. judge "
            f"{row['judge']!r} {row['model_a']!r} vs {row['model_b']!r}"
        )
    if (pairs["n_len"] > pairs["n"]).any():
        raise InputError("pair cells: column n_len exceeds n")
    pairs = pairs.filter(pl.col("n") > 0)
    if pairs.height == 0:
        raise InputError("pair cells: no battles (every cell has n = 0)")
    if scores is not None:
        if scores["n"].min() < 0:
            raise InputError("score cells: column n has negative counts")
        scores = scores.filter(pl.col("n") > 0)
        scores = scores if scores.height else None

    def vocab(*series: pl.Series) -> tuple[str, ...]:
        return tuple(sorted(set().union(*(set(s.unique().to_list()) for s in series))))

    models = vocab(pairs["model_a"], pairs["model_b"], *(() if scores is None else (scores["model"],)))
    judges = vocab(pairs["judge"], *(() if scores is None else (scores["judge"],)))
    families = vocab(pairs["judge_family"], pairs["family_a"], pairs["family_b"],
                     *(() if scores is None else (scores["judge_family"],)))
    prompts = () if scores is None else vocab(scores["prompt_id"])

    merged = _encoded_merge(
        pairs, PAIR_CELL_KEYS, PAIR_CELL_MEASURES,
        {"judge": judges, "judge_family": families, "model_a": models, "model_b": models,
         "family_a": families, "family_b": families},
    )
    col = {name: merged[name].to_numpy() for name in merged.columns}
    fam_of_judge = np.full(len(judges), -1, np.int64)
    fam_of_judge[col["judge"]] = col["judge_family"]
    if scores is not None:
        sj = scores.select(pl.col("judge").cast(pl.Enum(list(judges))).to_physical().cast(pl.Int64),
                           pl.col("judge_family").cast(pl.Enum(list(families))).to_physical().cast(pl.Int64))
        missing = fam_of_judge[sj["judge"].to_numpy()] < 0
        fam_of_judge[sj["judge"].to_numpy()[missing]] = sj["judge_family"].to_numpy()[missing]
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
        coded = _encoded_merge(
            scores.with_columns(pl.col("score") - min_score), ("judge", "model", "prompt_id", "score"), ("n",),
            {"judge": judges, "model": models, "prompt_id": prompts},
        )
        key = np.stack([coded[c].to_numpy() for c in ("judge", "model", "prompt_id")], axis=1)
        first = np.ones(len(key), bool)  # rows are sorted by key: a new (judge, model, prompt) starts a row
        first[1:] = np.any(key[1:] != key[:-1], axis=1)
        row = np.cumsum(first) - 1
        counts = np.zeros((int(row[-1]) + 1, n_cat))
        np.add.at(counts, (row, coded["score"].to_numpy()), coded["n"].to_numpy().astype(float))
        starts = np.flatnonzero(first)
        score_arrays = ScoreArrays(
            j=coded["judge"].to_numpy()[starts],
            m=coded["model"].to_numpy()[starts],
            p=coded["prompt_id"].to_numpy()[starts],
            counts=counts,
        )
    return Dataset(models, judges, judge_families, prompts, min_score, arrays, score_arrays)


def shard_indices(n_cells: int, shards: int) -> list[np.ndarray]:
    """Split cell indices into ``shards`` contiguous parts (a hash split would do as well: sums add)."""
    if shards < 1:
        raise ValueError(f"shards must be >= 1, got {shards}")
    return np.array_split(np.arange(n_cells), shards)
