"""Covariates of valid battles: families, the length covariate and its fixed bin.

* **Position** needs no column: ``model_a`` is the one shown first, and cells
  keep the ordered pair.
* **Length**: ``x = ln(len_a) − ln(len_b)``, unstandardised (see
  :mod:`biasboard.schemas.cells`).  A length of 0 (an empty answer) is taken as
  1 so that x stays finite: an empty answer is then as short as a one-unit one,
  which keeps the battle instead of dropping a real verdict.  A battle missing
  either length goes to :data:`~biasboard.schemas.cells.LEN_BIN_MISSING`.
* **Style**: per feature, ``d = (c_a − c_b) / (c_a + c_b)`` (0 when both are
  0) and the signs' bin (see :mod:`biasboard.schemas.cells`); a battle lacking
  any of the six counts goes to :data:`~biasboard.schemas.cells.STYLE_BIN_MISSING`.
* **Families**: a non-empty ``family_a``/``family_b``/``judge_family`` value in
  the data wins (trimmed and lower-cased, as the map's families are); otherwise the
  :class:`~biasboard.schemas.families.FamilyMap` assigns one from the name (``unknown`` when no rule matches).
"""

from __future__ import annotations

import numpy as np
import polars as pl
from biasboard.schemas.battle import STYLE_COLUMNS
from biasboard.schemas.cells import STYLE_SQUARES, STYLE_SUMS, length_bin, style_bin
from biasboard.schemas.families import FamilyMap, family_text

#: (family column, name column it describes)
FAMILY_COLUMNS: tuple[tuple[str, str], ...] = (
    ("family_a", "model_a"),
    ("family_b", "model_b"),
    ("judge_family", "judge"),
)


def given_family(column: str) -> pl.Expr:
    """A family column as given in the data, trimmed and lower-cased as the map's families are; empty → null (the map
    decides).

    Why: taken exactly as written, ``OpenAI`` never met the map's ``openai`` (a judge's own family missed, no affinity
    measured), ``Unknown`` and ``Human`` were real families to the fit (two rows given ``Unknown`` were "one family",
    an affinity corrected between strangers), and a family of spaces was a family."""
    text = family_text(pl.col(column).cast(pl.String))
    return pl.when(text.str.len_bytes() == 0).then(None).otherwise(text).alias(column)


def _distinct_text(column: pl.Series) -> pl.Series:
    """The values of a text column to test (its distinct values when it is dictionary-coded: no string per row)."""
    if column.dtype == pl.Categorical:  # nulls dropped first: unique() of a Categorical with nulls is 2x slower
        return column.drop_nulls().unique().cast(pl.String)
    return column.cast(pl.String)


def families_to_normalise(df: pl.DataFrame, columns: list[str]) -> list[str]:
    """Those of ``columns`` holding a value :func:`given_family` changes (tested on the distinct values of a
    dictionary-coded column); usually none."""

    def needs(column: str) -> bool:
        text = _distinct_text(df.get_column(column))
        return bool((family_text(text) != text).any() or (text.str.len_bytes() == 0).any())

    return [c for c in columns if needs(c)]


def normalise_given(df: pl.DataFrame, columns: list[str]) -> pl.DataFrame:
    """Apply :func:`given_family` to ``columns``, skipping the pass when every value is already in its form (the usual
    case: :func:`families_to_normalise`)."""
    changed = families_to_normalise(df, columns)
    return df.with_columns(given_family(c) for c in changed) if changed else df


def resolve_families(df: pl.DataFrame, family_map: FamilyMap, pairs=FAMILY_COLUMNS) -> pl.DataFrame:
    """Fill each family column from the data when given (in its form: :func:`given_family`), else from the map.

    Cheap on cells (the map runs once per distinct name); it is applied after
    the per-batch aggregation, so never per battle.
    """
    return map_families(normalise_given(df, [family_col for family_col, _ in pairs]), family_map, pairs)


def map_families(df: pl.DataFrame, family_map: FamilyMap, pairs=FAMILY_COLUMNS) -> pl.DataFrame:
    """Fill each family column's nulls from the map (:func:`resolve_families` for given families already in their
    form)."""
    columns = []
    for family_col, name_col in pairs:
        if df.get_column(family_col).null_count() == 0:
            continue  # every row names its family: the map is not consulted
        mapped = family_map.assign(df.get_column(name_col))
        columns.append(pl.coalesce(pl.col(family_col), pl.lit(mapped)).alias(family_col))
    return df.with_columns(columns) if columns else df


def length_measures(df: pl.DataFrame, len_a: str = "_len_a", len_b: str = "_len_b") -> pl.DataFrame:
    """Add per-battle length measures: ``len_bin``, ``n_len`` (0/1), ``sum_x``, ``sum_x2``, ``sum_loglen_a/b``.

    They are per-row values of the cell sums (zero when a length is unknown),
    so aggregating is a plain sum of columns.
    """
    logs = df.select(pl.col(c).clip(lower_bound=1.0).log() for c in (len_a, len_b))  # each log taken once
    loga, logb = (logs.get_column(c).to_numpy(allow_copy=True).astype(np.float64, copy=False) for c in logs.columns)
    x = loga - logb  # NaN where a length is missing
    has = ~np.isnan(x)
    return df.with_columns(
        pl.Series("n_len", has.astype(np.uint8)),
        pl.Series("sum_loglen_a", np.where(has, loga, 0.0)),
        pl.Series("sum_loglen_b", np.where(has, logb, 0.0)),
        pl.Series("len_bin", length_bin(x)),
        pl.Series("sum_x", np.where(has, x, 0.0)),
        pl.Series("sum_x2", np.where(has, x * x, 0.0)),
    )


def style_measures(df: pl.DataFrame, prefix: str = "_") -> pl.DataFrame:
    """Add per-battle style measures: ``style_bin``, ``n_style`` (0/1), ``sum_d_<k>``, ``sum_d2_<k>``.

    ``prefix`` + each style column names the parsed counts (Float64, null = unknown).  Like
    :func:`length_measures`, per-row values of the cell sums (zero without counts).  A batch with no
    style counts at all (the usual case) skips the arithmetic: every row gets the missing bin.
    """
    counts = [pl.col(prefix + c) for pair in STYLE_COLUMNS for c in pair]
    if all(df.get_column(prefix + c).null_count() == df.height for pair in STYLE_COLUMNS for c in pair):
        return df.with_columns(
            pl.lit(-1, dtype=pl.Int16).alias("style_bin"),
            pl.lit(0, dtype=pl.UInt8).alias("n_style"),
            *(pl.lit(0.0).alias(name) for name in (*STYLE_SUMS, *STYLE_SQUARES)),
        )
    has = pl.all_horizontal(c.is_not_null() for c in counts)
    diffs = []
    for a, b in STYLE_COLUMNS:
        total = pl.col(prefix + a) + pl.col(prefix + b)
        d = pl.when(total > 0).then((pl.col(prefix + a) - pl.col(prefix + b)) / total).otherwise(0.0)
        diffs.append(pl.when(has).then(d).otherwise(None))
    df = df.with_columns(has.cast(pl.UInt8).alias("n_style"), *(d.alias(f"_d{k}") for k, d in enumerate(diffs)))
    signs = np.column_stack(
        [df.get_column(f"_d{k}").to_numpy(allow_copy=True).astype(np.float64) for k in range(len(diffs))]
    )
    return df.with_columns(
        pl.Series("style_bin", style_bin(signs)),
        *(pl.col(f"_d{k}").fill_null(0.0).alias(name) for k, name in enumerate(STYLE_SUMS)),
        *((pl.col(f"_d{k}") ** 2).fill_null(0.0).alias(name) for k, name in enumerate(STYLE_SQUARES)),
    ).drop([f"_d{k}" for k in range(len(diffs))])
