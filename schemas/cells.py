"""The Cells contract: additive sufficient statistics the models are fit on.

One row of pair cells counts the battles of one judge between one ordered pair
(``model_a`` shown first) in one length bin.  Every measure column is a sum, so
cells form a commutative monoid under "concatenate, group by the key, sum":
cells(A) ⊕ cells(B) = cells(A ∪ B).  Days are stored as separate partitions and
a day re-aggregated replaces its partition rather than adding to it.

Length covariate
----------------
``x = ln(len_a) - ln(len_b)`` (the log length ratio, first minus second), kept
unstandardised so that it does not depend on the data seen so far; the fit
standardises at fit time from the cells' own sums.  Bins have **fixed** edges
(:data:`LEN_BIN_EDGES`), so two days binned separately merge exactly; the exact
within-cell sums ``sum_x`` and ``sum_x2`` are kept, so the fit uses each cell's
mean covariate rather than the bin centre.  Battles without both lengths go to
bin :data:`LEN_BIN_MISSING` with zero sums (and do not count in ``n_len``).

Shown order
-----------
``order_known`` is part of the key: battles whose shown order the log does not
record sit in their own cells (``order_known`` false, ``model_a`` = the listed
first model), which the fit uses for everything but the position effect.
Cells written before the column existed read as known
(:func:`conform_pair_cells`).

Slices
------
``category`` and ``language`` (optional battle columns) are keys too, null when
the battle carries no label, so one pass over the battles yields every slice's
cells: the fit sums the cells over the slice keys (the overall board), and a
slice's board is a fit on the cells of that label.  Cells
stored before the columns existed read as unlabelled.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from biasboard.schemas.battle import STYLE_FEATURES

#: Width of a length bin in log-ratio units (0.25 ≈ a 28% length difference).
LEN_BIN_WIDTH: float = 0.25
#: Interior edges from -2.5 to 2.5 (ratios from 1/12 to 12); 0 is an edge, so
#: the sign of x (which answer was longer) is recoverable from the bin alone.
#: Bin ``0`` holds x < -2.5, bin ``len(LEN_BIN_EDGES)`` holds x >= 2.5.
LEN_BIN_EDGES: np.ndarray = np.round(np.arange(-2.5, 2.5 + 1e-9, LEN_BIN_WIDTH), 10)
#: Bin for battles whose lengths are unknown.
LEN_BIN_MISSING: int = -1
#: Style bin of battles without style counts.
STYLE_BIN_MISSING: int = -1
#: Per style feature, the cell sums of its normalised difference and of its square.
STYLE_SUMS: tuple[str, ...] = tuple(f"sum_d_{f}" for f in STYLE_FEATURES)
STYLE_SQUARES: tuple[str, ...] = tuple(f"sum_d2_{f}" for f in STYLE_FEATURES)

PAIR_CELL_KEYS: tuple[str, ...] = (
    "judge",
    "judge_family",
    "model_a",
    "model_b",
    "family_a",
    "family_b",
    "len_bin",
    "order_known",
    "category",
    "language",
    "style_bin",
)
PAIR_CELL_MEASURES: tuple[str, ...] = (
    "n",  # battles in the cell
    "win_a",  # first-shown model won
    "win_b",  # second-shown model won
    "tie",  # plain ties
    "tie_bothbad",  # "tie (bothbad)"; total ties = tie + tie_bothbad
    "n_len",  # battles with both lengths known
    "sum_x",  # Σ ln(len_a / len_b) over those
    "sum_x2",  # Σ x² (within-cell spread, for diagnostics)
    "sum_loglen_a",  # Σ ln(len_a): absolute length profile per model
    "sum_loglen_b",  # Σ ln(len_b)
    "n_style",  # battles with all six style counts known
    *STYLE_SUMS,  # Σ d_k over those, d_k = (c_a − c_b)/(c_a + c_b)
    *STYLE_SQUARES,  # Σ d_k²
)

PAIR_CELLS_SCHEMA = pa.schema(
    [
        pa.field("judge", pa.string(), nullable=False),
        pa.field("judge_family", pa.string(), nullable=False),
        pa.field("model_a", pa.string(), nullable=False),
        pa.field("model_b", pa.string(), nullable=False),
        pa.field("family_a", pa.string(), nullable=False),
        pa.field("family_b", pa.string(), nullable=False),
        pa.field("len_bin", pa.int16(), nullable=False),
        pa.field("order_known", pa.bool_(), nullable=False),
        pa.field("category", pa.string()),  # slice labels: null = unlabelled
        pa.field("language", pa.string()),
        pa.field("style_bin", pa.int16(), nullable=False),  # signs of the style differences; -1: no style counts
        pa.field("n", pa.int64(), nullable=False),
        pa.field("win_a", pa.int64(), nullable=False),
        pa.field("win_b", pa.int64(), nullable=False),
        pa.field("tie", pa.int64(), nullable=False),
        pa.field("tie_bothbad", pa.int64(), nullable=False),
        pa.field("n_len", pa.int64(), nullable=False),
        pa.field("sum_x", pa.float64(), nullable=False),
        pa.field("sum_x2", pa.float64(), nullable=False),
        pa.field("sum_loglen_a", pa.float64(), nullable=False),
        pa.field("sum_loglen_b", pa.float64(), nullable=False),
        pa.field("n_style", pa.int64(), nullable=False),
        *(pa.field(name, pa.float64(), nullable=False) for name in (*STYLE_SUMS, *STYLE_SQUARES)),
    ]
)

#: Columns that older cells may lack, with the value they stand for (the order was known, no slice label, no
#: style information).
PAIR_CELL_DEFAULTS: dict[str, object] = {
    "order_known": True,
    "category": None,
    "language": None,
    "style_bin": STYLE_BIN_MISSING,
    "n_style": 0,
    **dict.fromkeys((*STYLE_SUMS, *STYLE_SQUARES), 0.0),
}
#: The optional slice keys (battle columns of the same names); null = the battle carries no such label.
SLICE_KEYS: tuple[str, ...] = ("category", "language")


def conform_pair_cells(table: pa.Table) -> pa.Table:
    """Pair cells in :data:`PAIR_CELLS_SCHEMA`, adding the key columns cells stored before them lack.

    ``order_known`` reads as true, the slice labels as null (unlabelled), the style columns as no style
    information (bin :data:`STYLE_BIN_MISSING`, zero sums).
    """
    for name, value in PAIR_CELL_DEFAULTS.items():
        if name not in table.column_names:
            field = PAIR_CELLS_SCHEMA.field(name)
            table = table.append_column(field, pa.array([value] * table.num_rows, field.type))
    return table.select(PAIR_CELLS_SCHEMA.names).cast(PAIR_CELLS_SCHEMA)


#: Ordinal score cells: counts of each grade per (judge, model, prompt).
SCORE_CELL_KEYS: tuple[str, ...] = ("judge", "judge_family", "model", "family", "prompt_id", "score")
SCORE_CELLS_SCHEMA = pa.schema(
    [
        pa.field("judge", pa.string(), nullable=False),
        pa.field("judge_family", pa.string(), nullable=False),
        pa.field("model", pa.string(), nullable=False),
        pa.field("family", pa.string(), nullable=False),
        pa.field("prompt_id", pa.string(), nullable=False),
        pa.field("score", pa.float64(), nullable=False),  # a grade on the half-point grid
        pa.field("n", pa.int64(), nullable=False),
    ]
)

#: Family assigned when neither a column nor the family map names one.
UNKNOWN_FAMILY: str = "unknown"


def style_bin(d: np.ndarray) -> np.ndarray:
    """Style bin of normalised differences ``d`` (rows: battles, columns: features; NaN row → missing)."""
    signs = np.sign(np.nan_to_num(d)).astype(np.int16) + 1
    bins = (signs * (3 ** np.arange(d.shape[1], dtype=np.int16))).sum(axis=1).astype(np.int16)
    bins[np.isnan(d).any(axis=1)] = STYLE_BIN_MISSING
    return bins


def length_bin(x: np.ndarray) -> np.ndarray:
    """Fixed-edge bin index of log length ratios ``x`` (NaN → :data:`LEN_BIN_MISSING`)."""
    bins = np.zeros(len(x), dtype=np.int16)
    for edge in LEN_BIN_EDGES:  # edges passed (searchsorted's side="right"): a few passes beat a binary search
        bins += x >= edge
    bins[np.isnan(x)] = LEN_BIN_MISSING
    return bins
