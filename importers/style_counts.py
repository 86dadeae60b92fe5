"""The six style counts (headers, lists, bold, per answer) from a FastChat battle's ``conv_metadata``.

The arena's logs write each count as an object of sub-counts (``header_count_a: {"h1": 1, "h2": 0}``, summed here);
other logs write a plain number, or a number as text.  A log may mix them, row by row: the reader then keeps the
field as text (:mod:`biasboard.importers.json_kinds`), an object as its JSON, and each row is read here as its own
representation would be read alone — an object's sub-counts summed, a number as it is, text as the number it
writes.  Why: the reader had typed such a field by its objects and made every plain number null (the battle
imported without style, counted as missing by the style coverage warning, and nothing named the cause), or by its
text, so that every object became unreadable and its battle was dead-lettered as a bad style count.

A value no representation reads (a list, an object that is not JSON or whose sub-counts are objects or lists) gives
its battle no style, and a note names the field, the cause and the number of rows.  A count that is read but is not
one (negative, fractional, text that is no number) still dead-letters its row as ``bad_style_count``, as the
ingest's rules do.
"""

from __future__ import annotations

import json
import math

import polars as pl
from biasboard.importers.common import DType, nested_field
from biasboard.schemas.battle import STYLE_COUNT_COLUMNS

#: Where FastChat's battle logs keep the counts.
META = "conv_metadata"


def _sub_count(part: pl.Expr, dtype: DType) -> pl.Expr:
    """One sub-count of a style count (``h1`` of ``header_count_a`` ...) as a number to sum.

    Why: a sub-count written as text (``"4"``: a log whose JSON type varies) was summed as text, the sum
    concatenating the digits (``"0" + "4" + "0"`` read as 40): a header count of 40,000 for an answer with four
    headers, and no word.  Text is read as a number, as a plain count is; text that is not one is NaN, so the
    ingest rejects the row as ``bad_style_count`` rather than sum around it.
    """
    if dtype.is_numeric() or dtype == pl.Null:
        return part
    text = part.cast(pl.String).str.strip_chars()
    number = text.cast(pl.Float64, strict=False)
    return pl.when(text.is_null() | (text == "")).then(None).otherwise(number.fill_null(float("nan")))


def _json_container(text: pl.Expr) -> pl.Expr:
    """Whether text is an object's or a list's JSON (how the reader keeps one among values of other kinds)."""
    return text.str.strip_chars_start().str.contains(r"^[\[{]").fill_null(False)


def _struct_total(value: pl.Expr, dtype: pl.Struct) -> tuple[pl.Expr, pl.Expr]:
    """(the sum of an object's sub-counts, whether a sub-count is itself an object or list: no count to sum).

    Every sub-count null (the row has no such field) is unknown, not zero.
    """
    flat = [f for f in dtype.fields if not f.dtype.is_nested()]
    parts = [_sub_count(value.struct.field(f.name), f.dtype) for f in flat]
    nested = [value.struct.field(f.name).is_not_null() for f in dtype.fields if f.dtype.is_nested()]
    # (a sub-count whose kind varies is text: an object or list there is JSON text)
    nested += [_json_container(value.struct.field(f.name)) for f in flat if f.dtype == pl.String]
    unreadable = pl.any_horizontal(nested).fill_null(False) if nested else pl.lit(False)
    if not parts:
        return pl.lit(None, dtype=pl.Float64), unreadable
    total = pl.when(pl.any_horizontal(p.is_not_null() for p in parts) & ~unreadable).then(pl.sum_horizontal(parts))
    return total, unreadable


def _counts_object(text: str | None) -> bool:
    """Whether ``text`` is a JSON object of scalar sub-counts polars can decode (the slow check, run only when the
    field's objects cannot be decoded together)."""
    if text is None:
        return False
    try:
        found = json.loads(text)
    except ValueError:
        return False
    if not isinstance(found, dict):
        return False
    return all(
        v is None
        or isinstance(v, (str, bool))
        or (isinstance(v, int) and -(2**63) <= v < 2**63)
        or (isinstance(v, float) and math.isfinite(v))
        for v in found.values()
    )


def _text_total(frame: pl.DataFrame, value: pl.Expr) -> tuple[pl.Expr, pl.Expr, str]:
    """(a count written as text, an object's JSON or a number, as Float64; whether the row's value is unreadable;
    what the unreadable values hold, for the note).

    Objects are decoded together (vectorised) with every sub-count as text, then summed like an object read as
    one; only when they cannot be (text that merely starts with ``{``) is each checked on its own.
    """
    text = value.str.strip_chars()
    is_object = text.str.starts_with("{").fill_null(False)
    objects = pl.when(is_object).then(text)
    texts = frame.select(objects).to_series()
    try:
        inferred = texts.str.json_decode(infer_schema_length=None).dtype
    except pl.exceptions.PolarsError:
        readable = pl.Series([_counts_object(t) for t in texts.to_list()], dtype=pl.Boolean)
        inferred = texts.filter(readable).str.json_decode(infer_schema_length=None).dtype
        objects = pl.when(is_object & pl.lit(readable)).then(text)
        bad_object = is_object & ~pl.lit(readable)
    else:
        bad_object = pl.lit(False)
    if isinstance(inferred, pl.Struct) and inferred.fields:
        as_text = pl.Struct({f.name: f.dtype if f.dtype.is_nested() else pl.String for f in inferred.fields})
        # Decoded once, here: as an expression polars decoded every row's text again for each sub-count it read
        # (one odd value among 200k nested records: 5.4 s of the import's 12.5 s, profiled).
        decoded = frame.select(objects.str.json_decode(as_text)).to_series()
        total, nested = _struct_total(pl.lit(decoded), as_text)
    else:  # no object on any row, or only empty ones
        total, nested = pl.lit(None, dtype=pl.Float64), pl.lit(False)
    is_list = text.str.starts_with("[").fill_null(False)
    unreadable = is_list | bad_object | (is_object & nested)
    count = pl.when(unreadable).then(None).when(is_object).then(total).otherwise(_sub_count(value, pl.String))
    return count, unreadable, "a list, or an object that is not one of counts"


def meta_field(frame: pl.DataFrame, name: str) -> tuple[pl.Expr, DType] | None:
    """``conv_metadata.<name>`` and its type, or None when the log has no such field.

    Where ``conv_metadata`` is text (it was something else than an object on some rows, so the reader kept the
    field as text on every row) each row's object is read from its JSON on its own (JSONPath: an object there as
    its JSON, a number or text as text).  Why: every battle of such a log had lost its style counts and token
    lengths, with no word.
    """
    meta = frame.schema.get(META)
    if meta != pl.String:
        return nested_field(frame, META, name)
    value = pl.col(META).str.json_path_match(f"$.{name}")
    return (value, pl.String) if frame.select(value.is_not_null().any()).item() else None


def _not_objects_note(frame: pl.DataFrame) -> list[str]:
    """A note counting the rows whose ``conv_metadata`` is no object (their battles have no counts nor lengths)."""
    if frame.schema.get(META) != pl.String:
        return []
    text = pl.col(META).str.strip_chars()
    if not (lost := frame.select((text.is_not_null() & ~text.str.starts_with("{")).sum()).item()):
        return []
    return [f"{META}: {lost} row(s) hold something else than an object: those battles have no style counts or lengths"]


def style_counts(frame: pl.DataFrame, notes: list[str]) -> list[pl.Expr]:
    """The six style count columns from ``conv_metadata``, when present: each an object of sub-counts (summed), a
    number, or text — on different rows of one log too — and a note for each field with values none of them reads."""
    notes.extend(_not_objects_note(frame))
    out = []
    for name in STYLE_COUNT_COLUMNS:
        found = meta_field(frame, name)
        if found is None or found[1] == pl.Null:
            continue
        value, kind = found
        if isinstance(kind, pl.Struct) and kind.fields:
            count, unreadable = _struct_total(value, kind)
            what = "an object whose sub-counts are objects or lists"
        elif kind == pl.String:
            count, unreadable, what = _text_total(frame, value)
        else:
            out.append(value.alias(name))
            continue
        if lost := frame.select(unreadable.sum()).item():
            notes.append(
                f"{META}.{name}: {lost} row(s) hold {what}, not a count: those battles have no style information "
                "(counted as missing, not rejected)"
            )
        out.append(count.alias(name))
    return out
