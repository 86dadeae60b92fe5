"""Validation rules: which battle (or score) rows are dead-lettered, and why.

Every rule is a polars expression evaluated on a whole record batch at once;
nothing here loops over rows.  :func:`battle_reason_expr` returns, per row, the
ONE reason the row is rejected for (or null when the row is valid), so that a
row with several faults is counted once and the conservation identity
``read = counted + rejected`` holds by construction.

What is accepted
----------------
* **Required fields** (:data:`~biasboard.schemas.battle.BATTLE_REQUIRED`): null,
  empty, or nothing but whitespace and invisible characters → ``missing:<column>``.
* **Timestamp** ``ts`` (or FastChat's ``tstamp``) may be an Arrow timestamp
  (tz-naive is read as UTC), a date, numeric epoch **seconds** (FastChat's
  float ``tstamp``), or an ISO-8601 string in one of the forms
  ``YYYY-MM-DD``, ``YYYY-MM-DD[T| ]hh:mm:ss[.f]`` with an optional ``Z`` /
  ``±hh:mm`` offset (no offset = UTC).  Anything else, and any instant outside
  [:data:`TS_MIN`, :data:`TS_MAX`) — almost always epoch milliseconds mistaken
  for seconds, or a zero placeholder — → ``bad_timestamp``.
* **Winner**: FastChat's four values after trimming surrounding whitespace and
  lower-casing (``" Model_A"`` is ``model_a``).  Nothing else is guessed: a
  ``"tie(bothbad)"`` without the space, ``"A"``, ``"1"`` or ``"error"`` →
  ``bad_winner``.  Exact values only would reject rows whose meaning is not in
  doubt; wider guessing would silently invent verdicts.
* **Lengths** ``len_a``/``len_b`` are optional; null means unknown (the battle
  counts, in the missing-length bin).  A value that is not a number (NaN, or a
  string that does not parse) → ``bad_length``; negative → ``negative_length``;
  above :data:`~biasboard.schemas.deadletter.MAX_RESPONSE_LENGTH` (or infinite)
  → ``absurd_length``.  Zero is valid (an empty answer).
* **Style counts** (``header_count_a`` ... ``bold_count_b``) are optional; null
  means unknown (the battle counts and carries no style information).  A value
  that is not a non-negative whole number below
  :data:`~biasboard.schemas.deadletter.MAX_RESPONSE_LENGTH` → ``bad_style_count``.
* **Duplicates**: the first *valid* occurrence of a ``battle_id`` within a day
  partition is kept; later valid rows with the same id → ``duplicate_battle_id``.
  Duplicates are judged only among rows that pass every other rule, so a
  corrected resend after a malformed first attempt is kept.  (Detected by
  :mod:`biasboard.transforms.validate`, since it needs state across batches.)
* **Self-battles** (``model_a == model_b``) are valid and kept.
* Unknown extra columns are ignored; absent optional columns are nulls.

* **Column types** the rules cannot read (binary, nested, durations) are made
  text first by :mod:`biasboard.schemas.coerce`: invalid UTF-8 → ``bad_utf8:<col>``,
  a list, struct, map or duration value → ``bad_type:<col>``.

Precedence (first that applies wins): ``missing:<col>`` in the order of
:data:`BATTLE_REQUIRED`, then ``bad_type:<col>``/``bad_utf8:<col>`` in column
order, then ``bad_timestamp``, ``bad_winner``, ``bad_length``,
``negative_length``, ``absurd_length``, ``bad_style_count``, ``duplicate_battle_id``.  Scores use
``missing:<col>``, ``bad_type:<col>``/``bad_utf8:<col>``, ``bad_timestamp``, ``bad_score``, ``bad_length``,
``negative_length``, ``absurd_length``, ``duplicate_score_id``.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
import pyarrow as pa
from biasboard.schemas.battle import BATTLE_REQUIRED, FASTCHAT_COLUMN_MAP, SCORE_REQUIRED, WINNER_VALUES
from biasboard.schemas.coerce import decode_binary, flag_reasons
from biasboard.schemas.deadletter import (
    MAX_RESPONSE_LENGTH,
    REASON_ABSURD_LENGTH,
    REASON_BAD_SCORE,
    REASON_BAD_TIMESTAMP,
    REASON_BAD_WINNER,
    REASON_DUPLICATE_ID,
    REASON_MISSING_PREFIX,
    REASON_NEGATIVE_LENGTH,
)
from biasboard.schemas.names import INVISIBLE

if TYPE_CHECKING:
    from polars.datatypes import DataTypeClass
    from polars.expr.whenthen import ChainedThen, Then

#: A length that is present but not a number (NaN, unparseable text).
REASON_BAD_LENGTH = "bad_length"
#: A style count (``header_count_a`` ...) that is present but not a non-negative whole number.
REASON_BAD_STYLE_COUNT = "bad_style_count"
#: A repeated ``score_id`` in a score file (the battle reason names battles).
REASON_DUPLICATE_SCORE_ID = "duplicate_score_id"

#: Plausible instants: judge logs cannot predate 1990 or postdate 2100.
TS_MIN = dt.datetime(1990, 1, 1, tzinfo=dt.timezone.utc)
TS_MAX = dt.datetime(2100, 1, 1, tzinfo=dt.timezone.utc)


def undatable_day(day: dt.date) -> str | None:
    """Why no battle can be dated on ``day`` (outside [:data:`TS_MIN`, :data:`TS_MAX`), where every ``ts`` is
    rejected), or None when one can: for days given by a folder name or an option rather than by rows."""
    if TS_MIN.date() <= day < TS_MAX.date():
        return None
    last = TS_MAX.date() - dt.timedelta(days=1)
    return f"outside the days a battle can be dated on ({TS_MIN.date().isoformat()} to {last.isoformat()})"


#: Ordinal grades accepted in score rows: 1..MAX_SCORE on a half-point grid (8.5 is a grade; 8.25 is not).
MAX_SCORE = 100

#: ISO-8601 forms tried in turn (``%#z`` = ``Z`` or ``±hh[:mm]``); no offset means UTC.
ISO_FORMATS: tuple[tuple[str, bool], ...] = (
    ("%Y-%m-%dT%H:%M:%S%.f%#z", True),
    ("%Y-%m-%d %H:%M:%S%.f%#z", True),
    ("%Y-%m-%dT%H:%M:%S%.f", False),
    ("%Y-%m-%d %H:%M:%S%.f", False),
    ("%Y-%m-%d", False),
)

#: Winner value → code used by the cell measures (index into WINNER_VALUES).
WINNER_CODES: dict[str, int] = {value: code for code, value in enumerate(WINNER_VALUES)}


def apply_column_aliases(names: list[str]) -> dict[str, str]:
    """Renames that map FastChat/arena column names onto ours (only where ours is absent)."""
    present = set(names)
    return {src: dst for src, dst in FASTCHAT_COLUMN_MAP.items() if src in present and dst not in present}


def source_column(names: list[str], ours: str) -> str | None:
    """The column of a file with ``names`` that the reader takes as ``ours``: ours itself, else its FastChat alias
    (:func:`apply_column_aliases`, so a file with both ``ts`` and ``tstamp`` has its ``ts`` read); None if neither."""
    if ours in names:
        return ours
    return next((src for src, dst in apply_column_aliases(names).items() if dst == ours), None)


def _in_window(parsed: pl.Expr) -> pl.Expr:
    return pl.when(parsed.is_between(pl.lit(TS_MIN), pl.lit(TS_MAX), closed="left")).then(parsed).otherwise(None)


def _iso_expr(text: pl.Expr, fmt: str, has_zone: bool) -> pl.Expr:
    if has_zone:
        return text.str.to_datetime(fmt, strict=False, time_unit="us", time_zone="UTC")
    return text.str.to_datetime(fmt, strict=False, time_unit="us").dt.replace_time_zone("UTC")


def timestamp_expr(dtype: pl.DataType, column: str = "ts") -> pl.Expr:
    """``column`` of type ``dtype`` as Datetime(us, UTC); null where unparseable or implausible.

    For text this tries every ISO form on every row; :func:`parse_timestamps`
    gives the same answer faster by trying later forms only on rows still unparsed.
    """
    col = pl.col(column)
    if isinstance(dtype, pl.Datetime):
        parsed = col.dt.replace_time_zone("UTC") if dtype.time_zone is None else col.dt.convert_time_zone("UTC")
        parsed = parsed.dt.cast_time_unit("us")
    elif dtype == pl.Date:
        parsed = col.cast(pl.Datetime("us")).dt.replace_time_zone("UTC")
    elif dtype.is_numeric():
        seconds = col.cast(pl.Float64)
        in_range = seconds.is_between(TS_MIN.timestamp(), TS_MAX.timestamp(), closed="left")
        micros = pl.when(in_range).then((seconds * 1e6).round()).otherwise(None).cast(pl.Int64)
        parsed = micros.cast(pl.Datetime("us")).dt.replace_time_zone("UTC")
    elif is_text(dtype):
        text = col.cast(pl.String).str.strip_chars()
        parsed = pl.coalesce([_iso_expr(text, fmt, has_zone) for fmt, has_zone in ISO_FORMATS])
    else:  # a type that cannot hold an instant (bool, time, duration, list, all-null ...): everything is bad
        return pl.repeat(None, pl.len(), dtype=pl.Datetime("us", "UTC"))  # a column, not a 1-row literal
    return _in_window(parsed)


#: The ISO-8601 forms Arrow's string → timestamp cast parses exactly as the polars forms above do,
#: as one regular expression per target type: calendar-valid days (29 February aside), hours < 24,
#: minutes and seconds < 60, 1-6 fraction digits, ``Z`` or ``±hh:mm``.  Anything else takes the polars path.
_ISO_DATE = (
    r"\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\d|30)|02-(?:0[1-9]|1\d|2[0-8]))"
)
_ISO_TIME = r"[T ](?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d{1,6})?"
_ISO_ZONED = rf"^{_ISO_DATE}{_ISO_TIME}(?:Z|[+-](?:[01]\d|2[0-3]):[0-5]\d)$"
_ISO_NAIVE = f"^{_ISO_DATE}(?:{_ISO_TIME})?$"


def _arrow_iso(text: pl.Series) -> tuple[np.ndarray, np.ndarray]:
    """(µs since the epoch, parsed) per row for text in the common ISO forms (:data:`_ISO_ZONED`, :data:`_ISO_NAIVE`).

    Arrow's ISO-8601 cast is several times faster than polars' format parser,
    but strict (one bad value fails the whole cast), so the rows it gets are
    screened first by a regular expression that admits only values the cast
    accepts and the polars forms read the same way (tested against
    :func:`timestamp_expr` on generated text).
    """
    micros = np.zeros(len(text), dtype=np.int64)
    parsed = np.zeros(len(text), dtype=bool)
    todo = np.arange(len(text))
    for pattern, target in ((_ISO_ZONED, pa.timestamp("us", tz="UTC")), (_ISO_NAIVE, pa.timestamp("us"))):
        candidates = text if len(todo) == len(text) else text.gather(todo)
        match = candidates.str.contains(pattern).fill_null(False).to_numpy()
        if not match.any():
            continue
        try:
            cast = candidates.filter(pl.Series(match)).to_arrow(compat_level=pl.CompatLevel.oldest()).cast(target)
        except pa.ArrowInvalid:  # screened out above; kept as a guard: the polars path then reads these rows
            continue
        micros[todo[match]] = cast.cast(pa.int64()).to_numpy(zero_copy_only=False)
        parsed[todo[match]] = True
        todo = todo[~match]
        if not len(todo):
            break
    return micros, parsed


def parse_timestamps(df: pl.DataFrame, column: str = "ts") -> pl.Series:
    """:func:`timestamp_expr` evaluated on ``df``, fast for text.

    Text in the common ISO forms goes through :func:`_arrow_iso`; only the rest
    (blank, unparseable, or an unusual form) meets the polars forms, each later
    form tried only on the rows still unparsed.  So a batch whose bad rows are
    bad timestamps costs what a clean batch costs.
    """
    dtype = df.schema[column]
    if dtype == pl.Binary:  # text written without the UTF-8 annotation; invalid UTF-8 never parses
        text = decode_binary(df.get_column(column))[0]
    elif not is_text(dtype):
        return df.select(timestamp_expr(dtype, column)).to_series()
    else:
        text = df.get_column(column).cast(pl.String)
    micros, parsed = _text_micros(text)
    values = pa.array(micros, pa.timestamp("us", tz="UTC"), mask=~parsed)
    return pl.Series(column, values)


def _text_micros(text: pl.Series) -> tuple[np.ndarray, np.ndarray]:
    """(µs since the epoch, plausible instant) per row of ISO text: :func:`parse_timestamps` before the Series."""
    micros, parsed = _arrow_iso(text)
    rest = np.flatnonzero(~parsed & text.is_not_null().to_numpy())
    if len(rest):
        slow = _polars_iso(text.gather(rest)).dt.epoch("us")
        micros[rest] = slow.fill_null(0).to_numpy()
        parsed[rest] = slow.is_not_null().to_numpy()
    low, high = (int(t.timestamp()) * 1_000_000 for t in (TS_MIN, TS_MAX))
    parsed &= (micros >= low) & (micros < high)
    return micros, parsed


#: Years whose every instant is plausible whatever the UTC offset written (:data:`TS_MIN`, :data:`TS_MAX`).
_SURE_YEARS = (TS_MIN.year + 1, TS_MAX.year - 2)


def _four(text: str) -> int:
    """Four ASCII characters as the big-endian number that orders them as text."""
    return int.from_bytes(text.encode("ascii"), "big")


def _sure_year(text: pl.Series) -> np.ndarray | None:
    """Per value: its first four bytes are digits spelling a year in :data:`_SURE_YEARS`; None if not string views.

    Arrow's string views keep every value's first four bytes inline, so this reads no string data: the
    four bytes as one big-endian number order like the text, and four digits order like their year.
    A byte is a digit when it is ASCII, at least ``0`` (0x30: its high bit survives ``| 0x80`` minus
    0x30) and at most ``9`` (0x39: adding 0x46 leaves its high bit clear), tested on all four at once.
    """
    arr = text.to_arrow(compat_level=pl.CompatLevel.newest())
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if arr.type != pa.string_view():
        return None
    views = np.frombuffer(arr.buffers()[1], dtype="<u4").reshape(-1, 4)[arr.offset : arr.offset + len(arr)]
    head = views[:, 1].byteswap()  # the first four bytes, big-endian (zero bytes past a shorter value's end)
    high = np.uint32(0x80808080)
    digits = ((head | high) - np.uint32(0x30303030)) & ~(head + np.uint32(0x46464646)) & high
    low, top = (_four(str(year)) for year in _SURE_YEARS)
    return (digits == high) & ((head & high) == 0) & (head >= low) & (head <= top)


def timestamps_valid(df: pl.DataFrame, column: str = "ts") -> pl.Series:
    """True where :func:`parse_timestamps` gives an instant, null where it gives null; cheaper for text.

    The validator needs only which rows hold a plausible instant (no row's
    instant is stored).  A text value in the common ISO forms (the regular
    expressions of :func:`_arrow_iso`) whose year is 1991-2098 is one whatever
    its UTC offset, so those rows skip the Arrow cast; every other row (another
    form, a year near the window's edges, a bad value) gets :func:`parse_timestamps`.
    """
    sure_year = _sure_year(df.get_column(column)) if df.schema[column] == pl.String else None
    if sure_year is None:
        return parse_timestamps(df, column).is_not_null().replace(False, None).alias(column)
    text = df.get_column(column)
    valid = sure_year & text.str.contains(_ISO_ZONED).fill_null(False).to_numpy()
    todo = np.flatnonzero(sure_year & ~valid)
    if len(todo):  # the naive forms, on the (usually few) rows left
        valid[todo] = text.gather(todo).str.contains(_ISO_NAIVE).fill_null(False).to_numpy()
    rest = np.flatnonzero(~valid & text.is_not_null().to_numpy())
    if len(rest):
        valid[rest] = _text_micros(text.gather(rest))[1]
    return pl.Series(column, pa.array(np.ones(len(valid), dtype=bool), mask=~valid))


def _polars_iso(text: pl.Series) -> pl.Series:
    """The polars ISO forms in turn (stripped text), each only on the rows no earlier form parsed."""
    stripped = text.str.strip_chars()
    parsed = pl.Series("t", [], dtype=pl.Datetime("us", "UTC")).extend_constant(None, len(text))
    for fmt, has_zone in ISO_FORMATS:
        todo = np.flatnonzero((parsed.is_null() & stripped.is_not_null()).to_numpy())
        if not len(todo):
            break
        attempt = stripped.gather(todo).to_frame("t").select(_iso_expr(pl.col("t"), fmt, has_zone)).to_series()
        parsed = parsed.scatter(todo, attempt)
    return parsed


def is_text(dtype: pl.DataType | DataTypeClass) -> bool:
    """Whether a column of ``dtype`` holds text the rules read (String, Categorical or Enum)."""
    return dtype in (pl.String, pl.Categorical) or isinstance(dtype, pl.Enum)


def is_blank(column: str, dtype: pl.DataType | type[pl.DataType]) -> pl.Expr:
    """Null, or (for text) empty or nothing but whitespace and invisible characters (``"\u200b"``: a name that shows
    as nothing, :data:`~biasboard.schemas.names.INVISIBLE`)."""
    col = pl.col(column)
    if is_text(dtype):
        return col.is_null() | col.cast(pl.String).str.contains(f"^[\\s{INVISIBLE}]*$")
    return col.is_null()


def length_expr(column: str, dtype: pl.DataType) -> pl.Expr:
    """A length column as Float64 (null stays null; unparseable text becomes NaN, i.e. ``bad_length``)."""
    col = pl.col(column)
    if dtype == pl.Null:
        return pl.lit(None, dtype=pl.Float64)
    if dtype.is_numeric():
        return col.cast(pl.Float64)
    text = col.cast(pl.String).str.strip_chars()
    number = text.cast(pl.Float64, strict=False)
    return pl.when(text.is_null() | (text == "")).then(None).otherwise(number.fill_null(float("nan")))


def style_count_expr(column: str, dtype: pl.DataType) -> pl.Expr:
    """A style count column as Float64, read like a length (null stays null, unparseable text is NaN)."""
    return length_expr(column, dtype)


def _style_reasons(counts: tuple[str, ...]) -> list[tuple[pl.Expr, str]]:
    if not counts:
        return []
    exprs = [pl.col(c) for c in counts]
    ok = [(e.is_between(0, MAX_RESPONSE_LENGTH) & (e == e.round())).fill_null(True) for e in exprs]
    return [(~pl.all_horizontal(ok), REASON_BAD_STYLE_COUNT)]


def slice_label_expr(column: str) -> pl.Expr:
    """A slice label (``category``, ``language``) as trimmed text, blank read as null (unlabelled).

    Never a rejection: an unlabelled battle still counts on the overall board.
    """
    text = pl.col(column).cast(pl.String).str.strip_chars()
    return pl.when(text == "").then(None).otherwise(text).alias(column)


def order_known_expr(dtype: pl.DataType, column: str = "order_known") -> pl.Expr:
    """``order_known`` as a Boolean, null/absent read as true (known); text "false"/"0"/"no" is false.

    Never a rejection: a battle whose order is unknown is still counted (it informs everything but position).
    """
    col = pl.col(column)
    if dtype == pl.Boolean:
        return col.fill_null(True)
    if dtype.is_numeric():
        return (col != 0).fill_null(True)
    text = col.cast(pl.String).str.strip_chars().str.to_lowercase()
    return ~text.is_in(["false", "0", "no", "f"]).fill_null(False)


def _length_reasons(lengths: list[pl.Expr]) -> list[tuple[pl.Expr, str]]:
    bad = pl.any_horizontal([e.is_nan().fill_null(False) for e in lengths])
    negative = pl.any_horizontal([(e < 0).fill_null(False) for e in lengths])
    absurd = pl.any_horizontal([(e > MAX_RESPONSE_LENGTH).fill_null(False) for e in lengths])
    return [(bad, REASON_BAD_LENGTH), (negative, REASON_NEGATIVE_LENGTH), (absurd, REASON_ABSURD_LENGTH)]


def first_reason(conditions: list[tuple[pl.Expr, str]]) -> pl.Expr:
    """The reason of the first true condition, else null (one reason per row, by precedence)."""
    chain: Then | ChainedThen | None = None
    for condition, reason in conditions:
        chain = (pl.when(condition) if chain is None else chain.when(condition)).then(pl.lit(reason))
    assert chain is not None, "first_reason needs at least one condition"
    return chain.otherwise(pl.lit(None, dtype=pl.String))


def any_condition(conditions: list[tuple[pl.Expr, str]]) -> pl.Expr:
    """True where any rule rejects the row (cheap: used to find the few rows that need a reason)."""
    return pl.any_horizontal([condition for condition, _ in conditions])


def winner_expr(column: str = "winner") -> pl.Expr:
    """Winner normalised (trimmed, lower-cased); still a string."""
    return pl.col(column).cast(pl.String).str.strip_chars().str.to_lowercase()


def lookup_codes(column: pl.Series, keys: pl.Series, values: np.ndarray, default: object, null: object) -> np.ndarray:
    """Per row of a Categorical ``column``: ``values[i]`` where it holds ``keys[i]`` (values of ``column`` itself),
    ``default`` where another value, ``null`` where null: one gather through the dictionary codes, no string per row.
    """
    physical = column.to_physical()
    high = physical.max()
    table = np.full((high if isinstance(high, int) else 0) + 2, default, dtype=values.dtype)  # the last slot: null
    table[keys.to_physical().to_numpy()] = values
    table[-1] = null
    return table[physical.fill_null(len(table) - 1).to_numpy()]


def winner_codes(df: pl.DataFrame, column: str = "winner") -> pl.Series:
    """Winner code (index into WINNER_VALUES) per row, null when not one of the accepted values.

    Exact values are looked up directly; the trim/lower-case normalisation is
    only paid for on the rows (usually few) whose value did not match exactly.
    """
    raw = df.get_column(column)
    if raw.dtype == pl.Categorical:  # dictionary codes: look the distinct values up, then index by code
        distinct = raw.drop_nulls().unique()  # nulls first: unique() of a Categorical with nulls is 2x slower
        found = winner_codes(distinct.cast(pl.String).to_frame(column), column).fill_null(-1).to_numpy()
        coded = lookup_codes(raw, distinct, found, -1, -1)
        return pl.Series("_winner", pa.array(coded, mask=coded < 0))
    raw = raw.cast(pl.String)
    codes = raw.replace_strict(WINNER_CODES, default=None, return_dtype=pl.Int8)
    rest = np.flatnonzero((codes.is_null() & raw.is_not_null()).to_numpy())
    if len(rest):
        normalised = winner_expr(column).replace_strict(WINNER_CODES, default=None, return_dtype=pl.Int8)
        codes = codes.scatter(rest, raw.gather(rest).to_frame(column).select(normalised).to_series())
    return codes.alias("_winner")


def battle_conditions(
    schema: dict[str, pl.DataType],
    ts_parsed: str,
    winner_code: str | pl.Expr,
    lengths: tuple[str, str],
    style_counts: tuple[str, ...] = (),
) -> list[tuple[pl.Expr, str]]:
    """(condition, reason) pairs for battles in precedence order, before duplicate detection.

    ``schema`` is the batch's column → dtype (every required column present);
    ``ts_parsed`` names the column holding :func:`parse_timestamps`,
    ``winner_code`` the one holding :func:`winner_codes` (or an expression for
    it), ``lengths`` those holding :func:`length_expr` results, ``style_counts``
    those holding :func:`style_count_expr` results.
    """
    code = pl.col(winner_code) if isinstance(winner_code, str) else winner_code
    conditions = [(is_blank(c, schema[c]), REASON_MISSING_PREFIX + c) for c in BATTLE_REQUIRED]
    conditions.extend((pl.col(flag), reason) for flag, reason in flag_reasons(schema))
    conditions.append((pl.col(ts_parsed).is_null(), REASON_BAD_TIMESTAMP))
    conditions.append((code.is_null(), REASON_BAD_WINNER))
    conditions.extend(_length_reasons([pl.col(c) for c in lengths]))
    conditions.extend(_style_reasons(style_counts))
    return conditions


def battle_reason_expr(
    schema: dict[str, pl.DataType], ts_parsed: str, lengths: tuple[str, str], style_counts: tuple[str, ...] = ()
) -> pl.Expr:
    """The one rejection reason per battle row (null when valid), duplicates aside.

    The whole-frame form of :func:`battle_conditions` for callers (the importers)
    that validate a frame at once rather than batch by batch.
    """
    code = winner_expr().replace_strict(WINNER_CODES, default=None, return_dtype=pl.Int8)
    return first_reason(battle_conditions(schema, ts_parsed, code, lengths, style_counts))


def score_value_expr(dtype: pl.DataType, column: str = "score") -> pl.Expr:
    """A score as Float64 when it lies on the half-point grid in 1..MAX_SCORE, else null (``bad_score``).

    Judges asked for 1..10 sometimes answer 8.5 (MT-Bench's ``[[8.5]]``); such a grade is a category of
    its own, between 8 and 9 — the ordinal model uses the categories actually present, in order.
    """
    col = pl.col(column)
    if dtype == pl.Null:
        return pl.lit(None, dtype=pl.Float64)
    number = (
        col.cast(pl.Float64)
        if dtype.is_numeric()
        else col.cast(pl.String).str.strip_chars().cast(pl.Float64, strict=False)
    )
    ok = (2 * number == (2 * number).round()) & number.is_between(1, MAX_SCORE)
    return pl.when(ok).then(number).otherwise(None).cast(pl.Float64)


def score_conditions(
    schema: dict[str, pl.DataType], ts_parsed: str, score_parsed: str, length: str
) -> list[tuple[pl.Expr, str]]:
    """(condition, reason) pairs for score rows in precedence order, before duplicate detection."""
    conditions = [(is_blank(c, schema[c]), REASON_MISSING_PREFIX + c) for c in SCORE_REQUIRED]
    conditions.extend((pl.col(flag), reason) for flag, reason in flag_reasons(schema))
    conditions.append((pl.col(ts_parsed).is_null(), REASON_BAD_TIMESTAMP))
    conditions.append((pl.col(score_parsed).is_null(), REASON_BAD_SCORE))
    conditions.extend(_length_reasons([pl.col(length)]))
    return conditions


def score_reason_expr(schema: dict[str, pl.DataType], ts_parsed: str, score_parsed: str, length: str) -> pl.Expr:
    """The one rejection reason per score row (null when valid), duplicates aside: whole-frame form."""
    return first_reason(score_conditions(schema, ts_parsed, score_parsed, length))


#: Every reason a battle can be rejected for, in precedence order (tests enumerate these).
BATTLE_REASONS: tuple[str, ...] = (
    *(REASON_MISSING_PREFIX + c for c in BATTLE_REQUIRED),
    REASON_BAD_TIMESTAMP,
    REASON_BAD_WINNER,
    REASON_BAD_LENGTH,
    REASON_NEGATIVE_LENGTH,
    REASON_ABSURD_LENGTH,
    REASON_BAD_STYLE_COUNT,
    REASON_DUPLICATE_ID,
)
SCORE_REASONS: tuple[str, ...] = (
    *(REASON_MISSING_PREFIX + c for c in SCORE_REQUIRED),
    REASON_BAD_TIMESTAMP,
    REASON_BAD_SCORE,
    REASON_BAD_LENGTH,
    REASON_NEGATIVE_LENGTH,
    REASON_ABSURD_LENGTH,
    REASON_DUPLICATE_SCORE_ID,
)
