"""Covariates of valid battles: families, the length covariate and its fixed bin.

* **Position** needs no column: ``model_a`` is the one shown first, and cells
  keep the ordered pair.
* **Length**: ``x = ln(len_a) − ln(len_b)``, unstandardised (see
  :mod:`biasboard.schemas.cells`).  A length of 0 (an empty answer) is taken as
  1 so that x stays finite: an empty answer is then as short as a one-unit one,
  which keeps the battle instead of dropping a real verdict.  A battle missing
  either length goes to :data:`~biasboard.schemas.cells.LEN_BIN_MISSING`.
* **Families**: a non-blank ``family_a``/``family_b``/``judge_family`` value in
  the data wins; otherwise the :class:`~biasboard.schemas.families.FamilyMap`
  assigns one from the name (``unknown`` when no rule matches).
"""

from __future__ import annotations

import numpy as np
import polars as pl
from biasboard.schemas.cells import length_bin
from biasboard.schemas.families import FamilyMap

#: (family column, name column it describes)
FAMILY_COLUMNS: tuple[tuple[str, str], ...] = (
    ("family_a", "model_a"),
    ("family_b", "model_b"),
    ("judge_family", "judge"),
)


def resolve_families(df: pl.DataFrame, family_map: FamilyMap, pairs=FAMILY_COLUMNS) -> pl.DataFrame:
    """Fill each family column from the data when given, else from the map."""
    columns = []
    for family_col, name_col in pairs:
        given = pl.col(family_col).cast(pl.String).str.strip_chars()
        mapped = family_map.assign(df.get_column(name_col))
        columns.append(pl.when(given.is_null() | (given == "")).then(mapped).otherwise(given).alias(family_col))
    return df.with_columns(columns)


def length_covariate(df: pl.DataFrame, len_a: str = "_len_a", len_b: str = "_len_b") -> pl.DataFrame:
    """Add ``_loga``, ``_logb``, ``_x`` (null when a length is unknown) and ``len_bin``."""
    df = df.with_columns(
        pl.col(len_a).clip(lower_bound=1.0).log().alias("_loga"),
        pl.col(len_b).clip(lower_bound=1.0).log().alias("_logb"),
    ).with_columns((pl.col("_loga") - pl.col("_logb")).alias("_x"))
    x = df.get_column("_x").to_numpy(allow_copy=True).astype(np.float64, copy=False)
    return df.with_columns(pl.Series("len_bin", length_bin(np.where(np.isfinite(x), x, np.nan))))


def attach_covariates(valid: pl.DataFrame, family_map: FamilyMap) -> pl.DataFrame:
    """Valid battles → the same rows with families resolved and the length covariate binned."""
    return length_covariate(resolve_families(valid, family_map))
