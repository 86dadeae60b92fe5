"""Rows dated outside their day folder: what that means, and how a batch is checked without a row loop.

A day-partitioned file's rows are filed under the day its folder names (``day=YYYY-MM-DD``, see
:mod:`biasboard.transforms.read`).  The folder is the partition of record, so they are counted there whatever
their ``ts`` says, and none is rejected for it.  But a file put in the wrong folder (a backfill's off-by-one, a
copy into the next day's folder) would file a day's battles under another day without a sound, so the ingest
counts, per day, the counted rows *dated outside the day* (:class:`OffDay`, kept in the day's manifest) and the
summary names the days that have any (:func:`~biasboard.transforms.day_warnings.off_day_warnings`).

What "outside" means
--------------------
A row is *on* its folder's day D when its instant falls on D in some time zone in use: from 14 hours before D's
UTC start (UTC+14:00, where D begins first) to 12 hours after D's UTC end (UTC−12:00, where it ends last), that
is in ``[D 00:00 − 14 h, D+1 00:00 + 12 h)`` UTC (:func:`day_window`).  So logs partitioned by a local day (a
Spark job's ``to_date`` in its session's zone, say US Pacific) are never flagged, while a file filed a day off
still shows: a day's rows filed under the day before are outside from 12:00 UTC on (about half of them), and a
file two or more days off has every row outside.  ISO text whose written date is D is on D whatever offset it
names (it is D where it was written).  A value without a time of day (a date, or ISO text ``YYYY-MM-DD``) is a
day, not an instant: it is on D only when it is D.  Otherwise the instant is the validator's
(:func:`~biasboard.schemas.rules.parse_timestamps`): tz-naive timestamps and text are UTC, a number is epoch
seconds.  Only counted rows are looked at: a rejected row is a dead letter already.
Files without a day in their path file each row under its own UTC date, so their rows are always on their day.

Cost
----
A batch of timestamps (not text) is checked as a whole first, from its ``ts`` column's minimum and maximum; when
both are on the day, as in every batch of a well-filed log, nothing else is done (~0.1 ms for 500k rows, against
~140 ms for the batch's validation and cells).  ISO text costs one prefix test a row (~3 ms for 500k): a value
written with the folder's date is on the day.  Only the counted rows that neither test settles (a batch that
crosses the day, or whose bounds are a rejected row's) are compared one by one, vectorised, and only they are
parsed.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import polars as pl
from biasboard.schemas.rules import is_text, parse_timestamps, timestamp_expr

#: How much earlier than its UTC start a day begins somewhere (UTC+14:00, the Line Islands) ...
EARLIEST_OFFSET = dt.timedelta(hours=14)
#: ... and how much later than its UTC end it ends somewhere (UTC−12:00, Baker Island).
LATEST_OFFSET = dt.timedelta(hours=12)


@dataclass(frozen=True)
class OffDay:
    """Counted rows dated outside their folder's day, and the UTC dates of the earliest and latest of them.

    Adds like the row counts it travels with (:class:`~biasboard.transforms.cells.IngestCounts`): over
    batches, files and days.
    """

    rows: int = 0
    first: str | None = None
    last: str | None = None

    def __add__(self, other: OffDay) -> OffDay:
        firsts = [d for d in (self.first, other.first) if d is not None]
        lasts = [d for d in (self.last, other.last) if d is not None]
        return OffDay(self.rows + other.rows, min(firsts, default=None), max(lasts, default=None))

    def to_dict(self) -> dict:
        """The manifest's keys beside the row counts; none when no row is outside (the manifest is unchanged)."""
        return {"off_day": self.rows, "off_day_first": self.first, "off_day_last": self.last} if self.rows else {}

    @classmethod
    def from_dict(cls, counts: Mapping) -> OffDay:
        """From a manifest's counts; a day aggregated before the check was made reads as none outside."""
        return cls(int(counts.get("off_day", 0)), counts.get("off_day_first"), counts.get("off_day_last"))

    def dates(self) -> str:
        """The UTC dates the rows fall on, as a warning says them: ``2024-03-05 … 2024-03-06``, or one date."""
        return str(self.first) if self.first == self.last else f"{self.first} … {self.last}"


def day_window(day: str) -> tuple[dt.datetime, dt.datetime]:
    """``[start, end)`` in UTC of the instants that fall on ``day`` (``YYYY-MM-DD``) in some time zone in use."""
    midnight = dt.datetime.combine(dt.date.fromisoformat(day), dt.time(), dt.timezone.utc)
    return midnight - EARLIEST_OFFSET, midnight + dt.timedelta(days=1) + LATEST_OFFSET


def dated_outside(df: pl.DataFrame, day: str, kept: np.ndarray | None = None, column: str = "ts") -> OffDay:
    """The rows of ``df`` that ``kept`` picks (None: every row) dated outside ``day``, the folder's (module doc).

    ``column`` holds the timestamps as read, of any type the validator accepts; the rows ``kept`` picks are
    the counted ones, whose timestamps are plausible instants.
    """
    values = df.get_column(column)
    if is_text(values.dtype):  # written with the folder's date: on the day, told by one prefix test a row
        todo = ~values.cast(pl.String).str.starts_with(day).fill_null(True).to_numpy()
        kept = todo if kept is None else todo & kept
        if not kept.any():
            return OffDay()
    elif _all_on_day(values, day):
        return OffDay()
    dates = _outside_dates(values if kept is None else values.filter(pl.Series(kept)), day)
    if not dates.len():
        return OffDay()
    return OffDay(dates.len(), str(dates.min()), str(dates.max()))


def _outside_dates(values: pl.Series, day: str) -> pl.Series:
    """The UTC date of each of ``values`` dated outside ``day`` (a day's own date for a value without a time)."""
    if values.dtype == pl.Date:
        return values.filter(values != dt.date.fromisoformat(day))
    if not is_text(values.dtype):
        return _outside_instants(values, day)
    text = values.cast(pl.String).str.strip_chars()
    text = text.filter(~text.str.starts_with(day).fill_null(True))  # written with the folder's date: on the day
    date_only = (text.str.len_bytes() == len(day)).to_numpy()
    return pl.concat([text.filter(date_only).str.to_date(), _outside_instants(text.filter(~date_only), day)])


def _outside_instants(values: pl.Series, day: str) -> pl.Series:
    """The UTC date of each of ``values`` (timestamps of any accepted type) whose instant is not on ``day``."""
    instants = parse_timestamps(values.to_frame("ts"), "ts")
    start, end = day_window(day)
    return instants.filter(~instants.is_between(start, end, closed="left").fill_null(True)).dt.date()


def _all_on_day(values: pl.Series, day: str) -> bool:
    """Whether every timestamp of a batch (not text) is on ``day``, told from the column's minimum and maximum.

    False only says "not known": a bound that is no plausible instant (a rejected row's), or a batch that
    crosses the day, goes to the row-by-row comparison of the counted rows.
    """
    if values.null_count() == values.len():
        return True
    if values.dtype == pl.Date or isinstance(values.dtype, pl.Datetime):  # two Python values (an expression: 1 ms)
        try:
            low, high = values.min(), values.max()
        except (OverflowError, ValueError):  # beyond Python's years 1-9999 (epoch ms written with a unit of seconds)
            return False
        if values.dtype == pl.Date:
            return low == high == dt.date.fromisoformat(day)
        if not (isinstance(low, dt.datetime) and isinstance(high, dt.datetime)):
            return False
        start, end = day_window(day)
        low, high = (b if b.tzinfo else b.replace(tzinfo=dt.timezone.utc) for b in (low, high))
        return start <= low and high < end
    start, end = day_window(day)
    bounds = values.to_frame().select(pl.concat([pl.col(values.name).min(), pl.col(values.name).max()]))
    instants = bounds.select(timestamp_expr(values.dtype, values.name)).to_series()
    return bool(instants.is_between(start, end, closed="left").fill_null(False).all())
