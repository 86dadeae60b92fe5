"""Column types the rules cannot read directly, made text, with a per-row flag that dead-letters the value.

A Parquet column can hold any Arrow type.  The rules in :mod:`biasboard.schemas.rules`
read text, numbers, booleans and times; everything else is turned into text here,
column by column, before any rule runs, so no input type can crash validation:

* **Binary** (strings written without the UTF-8 annotation, as older Hive and
  Spark writers do): decoded as UTF-8.  A value that is not valid UTF-8 is kept
  as ``hex:<bytes in hex>`` and its row is rejected as ``bad_utf8:<column>``.
* **Nested and durations** (list, fixed-size list, struct, map; duration): no
  field of a battle or score can be one of these.  Each non-null value is kept
  as JSON text and its row is rejected as ``bad_type:<column>``.
* Everything else (text, numbers, booleans, dates, times, decimals, the all-null
  type) is left as it is; the field's own rule decides (a boolean ``ts`` is a
  ``bad_timestamp``, a null one ``missing:ts``).

The flags are columns named ``__flag:<reason>`` in the frame; the rules turn each
into a condition placed right after the ``missing:<column>`` ones.  A check that
finds invalid UTF-8 casts the column in slices and looks at single values only
inside slices that fail, so a clean binary column costs one cast.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import polars as pl
import pyarrow as pa

REASON_BAD_TYPE_PREFIX = "bad_type:"
REASON_BAD_UTF8_PREFIX = "bad_utf8:"
#: Prefix of the per-row flag columns; the rest of the name is the reason.
FLAG_PREFIX = "__flag:"

#: Slices of a binary column below this many values are checked value by value.
_SMALL = 64


def flag_reasons(names: Iterable[str]) -> list[tuple[str, str]]:
    """(flag column, reason) for every flag column among ``names``, in order."""
    return [(n, n[len(FLAG_PREFIX) :]) for n in names if n.startswith(FLAG_PREFIX)]


def _no_text_form(dtype: pl.DataType) -> bool:
    return isinstance(dtype, (pl.List, pl.Array, pl.Struct, pl.Duration)) or type(dtype).__name__ == "Map"


def utf8_valid(values: pa.Array) -> np.ndarray:
    """Per value of a binary array: True when it is valid UTF-8 (or null)."""
    ok = np.ones(len(values), dtype=bool)
    target = pa.large_string() if pa.types.is_large_binary(values.type) else pa.string()

    def check(start: int, stop: int) -> None:
        piece = values.slice(start, stop - start)
        try:
            piece.cast(target)
            return
        except pa.ArrowInvalid:
            pass
        if stop - start <= _SMALL:
            for i, value in enumerate(piece.to_pylist()):  # only inside a small slice known to hold a bad value
                if value is not None:
                    try:
                        value.decode("utf-8")
                    except UnicodeDecodeError:
                        ok[start + i] = False
            return
        middle = (start + stop) // 2
        check(start, middle)
        check(middle, stop)

    if len(values):
        check(0, len(values))
    return ok


def decode_binary(column: pl.Series) -> tuple[pl.Series, pl.Series]:
    """(text, invalid flag) of a binary column: UTF-8 where valid, ``hex:...`` where not."""
    values = column.to_arrow(compat_level=pl.CompatLevel.oldest())
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    values = values.cast(pa.large_binary())
    valid = utf8_valid(values)
    invalid = pl.Series(~valid)
    if valid.all():
        return pl.Series(column.name, values.cast(pa.large_string())), invalid
    cleaned = pa.compute.if_else(pa.array(valid), values, pa.scalar(None, pa.large_binary()))
    text = pl.Series(column.name, cleaned.cast(pa.large_string()))
    hexed = pl.lit("hex:") + pl.lit(column).bin.encode("hex")
    frame = pl.DataFrame({"t": text, "bad": invalid})
    shown = frame.select(pl.when(pl.col("bad")).then(hexed).otherwise(pl.col("t")).alias(column.name))
    return shown.to_series(), invalid


def _as_json(column: str) -> pl.Expr:
    """A nested value as JSON text (the value alone, not wrapped in its column name); a duration as its count."""
    wrapped = pl.struct(pl.col(column)).struct.json_encode()
    prefix = len(column.encode("utf-8")) + 4  # {"<name>":
    return wrapped.str.slice(prefix, wrapped.str.len_chars() - prefix - 1)


def coerce_types(df: pl.DataFrame, columns: Iterable[str]) -> pl.DataFrame:
    """``columns`` of ``df`` that rules cannot read made text, plus a flag column per rejected kind.

    Columns absent from ``df`` are ignored; a frame whose columns all have a
    readable type is returned unchanged.
    """
    replaced: list[pl.Series | pl.Expr] = []
    for name in dict.fromkeys(columns):  # a name listed twice (schema and carry: prompt_id) is coerced once
        if name not in df.columns:
            continue
        dtype = df.schema[name]
        if dtype == pl.Binary:
            text, invalid = decode_binary(df.get_column(name))
            replaced.append(text)
            if invalid.any():
                replaced.append(invalid.alias(FLAG_PREFIX + REASON_BAD_UTF8_PREFIX + name))
        elif _no_text_form(dtype):
            if isinstance(dtype, pl.Duration):
                text_expr = pl.col(name).cast(pl.Int64).cast(pl.String) + pl.lit(f" {dtype.time_unit}")
            else:
                text_expr = _as_json(name)
            replaced.append(pl.when(pl.col(name).is_not_null()).then(text_expr).alias(name))
            replaced.append(pl.col(name).is_not_null().alias(FLAG_PREFIX + REASON_BAD_TYPE_PREFIX + name))
    return df.with_columns(replaced) if replaced else df
