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
    SCORE_CELL_KEYS,
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


def merge_pair_cells(cells: CellsInput) -> pl.DataFrame:
    """Merge pair-cell tables (e.g. one per day) by group-by-sum over the cell key."""
    frames = _as_frames(cells, PAIR_CELLS_SCHEMA, "pair cells")
    if not frames:
        raise InputError("pair cells: no tables given")
    frame = pl.concat(frames, how="vertical_relaxed")
    merged = frame.group_by(list(PAIR_CELL_KEYS)).agg([pl.col(m).sum() for m in PAIR_CELL_MEASURES])
    return merged.sort(list(PAIR_CELL_KEYS))


def merge_score_cells(cells: CellsInput | None) -> pl.DataFrame | None:
    """Merge score-cell tables by group-by-sum; ``None`` when there are none."""
    frames = _as_frames(cells, SCORE_CELLS_SCHEMA, "score cells")
    frames = [f for f in frames if f.height]
    if not frames:
        return None
    merged = pl.concat(frames, how="vertical_relaxed").group_by(list(SCORE_CELL_KEYS)).agg(pl.col("n").sum())
    return merged.sort(list(SCORE_CELL_KEYS))


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


def _codes(values: pl.Series, names: Sequence[str]) -> np.ndarray:
    lookup = pl.DataFrame({"_name": list(names), "_code": np.arange(len(names), dtype=np.int64)})
    coded = pl.DataFrame({"_name": values}).join(lookup, on="_name", how="left", maintain_order="left")
    return coded["_code"].to_numpy().astype(np.int64)


def _affinity(family: pl.Series, judge_family: pl.Series) -> np.ndarray:
    same = (family == judge_family) & ~family.is_in(list(NO_AFFINITY_FAMILIES))
    return same.to_numpy().astype(np.float64)


def build_dataset(pair_cells: CellsInput, score_cells: CellsInput | None = None) -> Dataset:
    """Merge and code the cells; checks counts add up and names the column when they do not."""
    pairs = merge_pair_cells(pair_cells)
    scores = merge_score_cells(score_cells)
    for col in ("n", "win_a", "win_b", "tie", "tie_bothbad", "n_len"):
        if pairs.height and pairs[col].min() < 0:
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

    model_names = set(pairs["model_a"].unique().to_list()) | set(pairs["model_b"].unique().to_list())
    judge_names = set(pairs["judge"].unique().to_list())
    prompts: tuple[str, ...] = ()
    if scores is not None:
        if scores["n"].min() < 0:
            raise InputError("score cells: column n has negative counts")
        scores = scores.filter(pl.col("n") > 0)
        model_names |= set(scores["model"].unique().to_list())
        judge_names |= set(scores["judge"].unique().to_list())
        prompts = tuple(sorted(scores["prompt_id"].unique().to_list()))
    models = tuple(sorted(model_names))
    judges = tuple(sorted(judge_names))

    fam = pairs.group_by("judge").agg(pl.col("judge_family").first())
    if scores is not None:
        fam = pl.concat([fam, scores.group_by("judge").agg(pl.col("judge_family").first())]).unique("judge")
    fam_map = dict(zip(fam["judge"].to_list(), fam["judge_family"].to_list(), strict=True))
    judge_families = tuple(fam_map.get(j, UNKNOWN_FAMILY) for j in judges)

    n_len = pairs["n_len"].to_numpy().astype(np.float64)
    sum_x = pairs["sum_x"].to_numpy()
    x = np.divide(sum_x, n_len, out=np.zeros_like(sum_x), where=n_len > 0)
    # Battles without lengths sit in their own cells (len_bin −1) with n_len = 0: x = 0 there, so the
    # length term vanishes for them.  A cell mixing both would give the known part's mean to all.
    arrays = PairArrays(
        a=_codes(pairs["model_a"], models),
        b=_codes(pairs["model_b"], models),
        j=_codes(pairs["judge"], judges),
        win_a=pairs["win_a"].to_numpy().astype(np.float64),
        win_b=pairs["win_b"].to_numpy().astype(np.float64),
        tie=(pairs["tie"] + pairs["tie_bothbad"]).to_numpy().astype(np.float64),
        bothbad=pairs["tie_bothbad"].to_numpy().astype(np.float64),
        n=pairs["n"].to_numpy().astype(np.float64),
        x=x,
        ds=_affinity(pairs["family_a"], pairs["judge_family"]) - _affinity(pairs["family_b"], pairs["judge_family"]),
        n_len=n_len,
        sum_x2=pairs["sum_x2"].to_numpy(),
        sum_loglen_a=pairs["sum_loglen_a"].to_numpy(),
        sum_loglen_b=pairs["sum_loglen_b"].to_numpy(),
    )

    score_arrays = None
    min_score = 0
    if scores is not None and scores.height:
        min_score = int(scores["score"].min())
        n_cat = int(scores["score"].max()) - min_score + 1
        if n_cat < 2:
            raise InputError("score cells: column score takes a single value; the ordinal part needs two or more")
        wide = (
            scores.with_columns((pl.col("score") - min_score).alias("_k"))
            .group_by(["judge", "model", "prompt_id"])
            .agg(pl.col("_k"), pl.col("n"))
            .sort(["judge", "model", "prompt_id"])
        )
        counts = np.zeros((wide.height, n_cat))
        row_idx = np.repeat(np.arange(wide.height), wide["_k"].list.len().to_numpy())
        np.add.at(counts, (row_idx, wide["_k"].explode().to_numpy()), wide["n"].explode().to_numpy().astype(float))
        score_arrays = ScoreArrays(
            j=_codes(wide["judge"], judges),
            m=_codes(wide["model"], models),
            p=_codes(wide["prompt_id"], prompts),
            counts=counts,
        )
    return Dataset(models, judges, judge_families, prompts, min_score, arrays, score_arrays)


def shard_indices(n_cells: int, shards: int) -> list[np.ndarray]:
    """Split cell indices into ``shards`` contiguous parts (a hash split would do as well: sums add)."""
    if shards < 1:
        raise ValueError(f"shards must be >= 1, got {shards}")
    return np.array_split(np.arange(n_cells), shards)
