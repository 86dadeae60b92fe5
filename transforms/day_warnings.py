"""Warnings about the rows a run rejected and about single stored days, read from their counts and manifests: what a
nightly operator must hear about the data.

Every row of a day is accounted for (counted or dead-lettered with its reason), yet a day can still be wrong in a
way no total shows: most of its rows rejected (a file with an integer ``winner`` column), or rows filed under a
day they are not dated on (a file in the wrong ``day=`` folder).  These functions read the stored days' manifests,
so the summary of a refresh that aggregated only the new day still names the older days; ``backfill`` prints
the same lines for the days it wrote.  Over all days, a notable share of rejected rows is one line
(:func:`rejected_share_warnings`), printed by refresh (from the summary) and backfill alike; when one day holds
every rejected row, it and that day's line are one (:func:`rejection_warnings`).
"""

from __future__ import annotations

import io

import numpy as np
import polars as pl
from biasboard.schemas.deadletter import REASON_BAD_TIMESTAMP
from biasboard.transforms import storage
from biasboard.transforms.cells import IngestCounts
from biasboard.transforms.state import DEAD_LETTERS_FILE, SCORE_DEAD_LETTERS_FILE

#: A day that rejected more than this share of the rows it read is named in the summary's warnings.
REJECTED_DAY_SHARE: float = 0.5
#: Rows rejected over all days at or above this share of the rows read warn once (:func:`rejected_share_warnings`).
#: 5%: above the background of a healthy log (the simulator's 2% of bad rows; a repeated battle here and there), well
#: below the 30% of a half-broken export that used to publish without a word because no single day lost half.
REJECTED_SHARE_WARNING: float = 0.05
#: The share warning names at most this many reasons, the commonest; the others are counted (all are in the summary).
REASONS_NAMED = 3
#: The warning about rows dated outside their day names at most this many days (those with the most such rows);
#: the rest are summed in one line.  A history misfiled wholesale (every file a day off) is one problem, not 3,000.
OFF_DAY_DAYS_NAMED = 10


def _day_counts(days: list[str], manifests: list[dict], key: str = "counts") -> list[tuple[str, IngestCounts]]:
    """(day, its ``key`` counts) for the days whose manifest has them (score counts: only with score files)."""
    return [(day, IngestCounts.from_dict(m[key])) for day, m in zip(days, manifests, strict=True) if key in m]


def _reasons(counts: IngestCounts, named: int | None = None) -> str:
    """``bad_winner 267, duplicate_battle_id 3``: the rejection reasons, the commonest first; with ``named``, only
    that many and a count of the rest."""
    ranked = sorted(counts.rejected.items(), key=lambda kv: (-kv[1], kv[0]))
    text = ", ".join(f"{reason} {n:,}" for reason, n in ranked[:named])
    rest = len(ranked) - len(ranked[:named])
    return text + (f" and {rest} more reason{'s' if rest > 1 else ''}" if rest else "")


def rejection_warnings(counts: IngestCounts, days: list[str], manifests: list[dict], state_dir: str) -> list[str]:
    """The battle rows' rejection warnings: the days that rejected most of what they read (one line each), then the
    run's share (:func:`rejected_share_warnings`), each said once.

    When one day holds every row the run rejected, both lines told the same count with the same reasons (a
    one-day run: "1,800 of the 3,000 rows read (60.0%) were rejected (bad_winner 1,800)" and "day 2024-01-01
    rejected 1,800 of the 3,000 rows it read (bad_winner 1,800)"): they become one line that names the day, the
    share of the run's rows and that day's dead-letter file.  With rejections on other days too, or several days
    that lost most of their rows, each line says something the other does not, and both stay.
    """
    share = rejected_share_warnings(counts, state_dir)
    worst = _days_rejecting_most(days, manifests)
    if share and len(worst) == 1 and worst[0][1].rejected_total == counts.rejected_total:
        return [_one_day_holds_every_rejection(*worst[0], counts, state_dir)]
    return [*(_day_line(day, day_counts) for day, day_counts in worst), *share]


def _dead_letters(state_dir: str, day: str = "*", noun: str = "rows") -> str:
    """Where the dead letters of ``day`` (``*``: every day) are, each row with its reason."""
    file = SCORE_DEAD_LETTERS_FILE if noun.startswith("score") else DEAD_LETTERS_FILE
    return f"the dead letters, each row with its reason, are in {state_dir.rstrip('/')}/deadletters/day={day}/{file}"


def _share(counts: IngestCounts) -> str:
    """``60.0%``: the rejected share of the rows read."""
    return f"{counts.rejected_total / counts.read:.1%}"


#: Said beside the rejected share: the threshold it is warned at.
_WARNED_AT = f"warned at {REJECTED_SHARE_WARNING:.0%} or more"


def rejected_share_warnings(counts: IngestCounts, state_dir: str, noun: str = "rows") -> list[str]:
    """One line when the rows rejected reach :data:`REJECTED_SHARE_WARNING` of those read: how many, the share, the
    commonest reasons and where the dead letters are.

    Why: the only warning was a day that rejected most of its rows, so 1,530 of 5,100 rows rejected (30%, spread
    over days) published with no word on the terminal.  ``noun``: ``rows`` (battles) or ``score rows``.
    """
    if not counts.read or counts.rejected_total < REJECTED_SHARE_WARNING * counts.read:
        return []
    return [
        f"{counts.rejected_total:,} of the {counts.read:,} {noun} read ({_share(counts)}, {_WARNED_AT}) were rejected "
        f"({_reasons(counts, REASONS_NAMED)}): {_dead_letters(state_dir, noun=noun)}"
    ]


def _days_rejecting_most(days: list[str], manifests: list[dict]) -> list[tuple[str, IngestCounts]]:
    """(day, counts) of the days that rejected more than :data:`REJECTED_DAY_SHARE` of the rows they read.

    Every row is still accounted for, but a nightly operator should hear that a day's file came with (say) an
    integer ``winner`` column or was copied twice into its day (measured: 5,100 of 5,100 rows ``bad_winner``,
    published with exit 0 and no warning)."""
    return [
        (day, counts)
        for day, counts in _day_counts(days, manifests)
        if counts.read and counts.rejected_total > REJECTED_DAY_SHARE * counts.read
    ]


def _day_line(day: str, counts: IngestCounts) -> str:
    """``day D rejected N of the M rows it read (reasons): see its dead letters``."""
    head = f"day {day} rejected {counts.rejected_total:,} of the {counts.read:,} rows it read"
    return f"{head} ({_reasons(counts)}): see its dead letters"


def _one_day_holds_every_rejection(day: str, day_counts: IngestCounts, counts: IngestCounts, state_dir: str) -> str:
    """:func:`rejection_warnings`' one line for a day that holds every row the run rejected."""
    head = f"day {day} rejected {day_counts.rejected_total:,} of the {day_counts.read:,} rows it read"
    if day_counts.read == counts.read:  # the run's only day that read rows
        middle = f" ({_share(counts)}, {_WARNED_AT}; {_reasons(counts, REASONS_NAMED)})"
    else:
        middle = (
            f" ({_reasons(counts, REASONS_NAMED)}), every row the run rejected: {_share(counts)} of the "
            f"{counts.read:,} rows read ({_WARNED_AT})"
        )
    return f"{head}{middle}: {_dead_letters(state_dir, day)}"


def battle_rows_read(days: list[str], manifests: list[dict]) -> int:
    """Battle rows the stored days read (0 on an ordinal-only state: score files alone)."""
    return sum(counts.read for _, counts in _day_counts(days, manifests))


def no_battle_message(state_dir: str, days: list[str], manifests: list[dict]) -> str:
    """Why the stored days hold no battle to fit, in one line: what was read and, by reason, why it was rejected.

    Why: the refresh said only "every row was rejected", also of a day file that holds no row at all, and a user
    had to open the dead letters to learn that (say) all 267 rows had an integer ``winner``.
    """
    counts = sum((c for _, c in _day_counts(days, manifests)), IngestCounts())
    where = f"{state_dir}: no valid battle to fit in the {len(days):,} stored day(s)"
    if counts.read == 0:
        empty = f" ({counts.empty_files:,} empty file(s) skipped)" if counts.empty_files else ""
        return f"{where}: their input files hold no battle row{empty}"
    hint = epoch_unit_hint(state_dir, days) if counts.rejected.get(REASON_BAD_TIMESTAMP) else ""
    return (
        f"{where}: all {counts.read:,} rows read were rejected ({_reasons(counts)}){hint}; "
        f"each day's dead letters are under {state_dir.rstrip('/')}/deadletters/"
    )


#: Magnitudes of a number read as epoch seconds that are another unit's epoch of a plausible day (1973 to 5138 in
#: that unit), for :func:`epoch_unit_hint`.
_EPOCH_UNITS = ((1e11, 1e14, "milliseconds"), (1e14, 1e17, "microseconds"), (1e17, 1e20, "nanoseconds"))
#: Days and rows :func:`epoch_unit_hint` reads at most: a hint needs a sample, not the history.
_HINT_DAYS, _HINT_ROWS = 3, 1000


def epoch_unit_hint(state_dir: str, days: list[str]) -> str:
    """``" (the rejected ts are numbers near 1.7e+12: epoch milliseconds? numbers are read as epoch seconds)"``, or
    "" when the ``bad_timestamp`` dead letters of the first few ``days`` are not numbers of another epoch unit.

    Why: logs stamped in epoch milliseconds (JavaScript's ``Date.now()``, Kafka) are rejected row by row as
    ``bad_timestamp`` (their seconds fall past 2100), and the refresh only said that every row was rejected."""
    values: list[float] = []
    for day in days[:_HINT_DAYS]:
        path = storage.join(state_dir, "deadletters", f"day={day}", DEAD_LETTERS_FILE)
        if not storage.exists(path):
            continue
        frame = pl.read_parquet(io.BytesIO(storage.read_bytes(path)))
        column = next((c for c in ("ts", "tstamp") if c in frame.columns), None)
        if column is None:
            continue
        stamps = frame.filter(pl.col("reason") == REASON_BAD_TIMESTAMP)[column].head(_HINT_ROWS)
        values += stamps.str.strip_chars().cast(pl.Float64, strict=False).drop_nulls().drop_nans().to_list()
    if not values:
        return ""
    typical = float(np.median(np.abs(values)))
    unit = next((name for low, high, name in _EPOCH_UNITS if low <= typical < high), None)
    if unit is None:
        return ""
    return f" (the rejected ts are numbers near {typical:.2g}: epoch {unit}? numbers are read as epoch seconds)"


def off_day_warnings(days: list[str], manifests: list[dict]) -> list[str]:
    """The stored days whose counted rows include rows dated outside the day (:mod:`biasboard.schemas.folder_day`).

    The rows stay counted under their folder's day, but a backfill that put a file in the wrong ``day=`` folder
    should hear which day and how many rows, with the dates they carry.  Read from every stored day's manifest,
    so a refresh that aggregated only the new day still names the older days (until their inputs change).
    """
    return [
        *_off_day_lines(_day_counts(days, manifests), "rows"),
        *_off_day_lines(_day_counts(days, manifests, "score_counts"), "score rows"),
    ]


def _off_day_lines(day_counts: list[tuple[str, IngestCounts]], noun: str) -> list[str]:
    """:func:`off_day_warnings` of one kind of row: the :data:`OFF_DAY_DAYS_NAMED` busiest days in day order, then
    the rest in one line."""
    busiest = sorted((dc for dc in day_counts if dc[1].off_day.rows), key=lambda dc: -dc[1].off_day.rows)
    out = [
        f"day={day}: {counts.off_day.rows:,} of the {counts.counted:,} {noun} it counted are dated outside the day "
        f"({counts.off_day.dates()}, UTC); they stay counted under {day}, the day their folder names: is a file in "
        "the wrong day= folder?"
        for day, counts in sorted(busiest[:OFF_DAY_DAYS_NAMED], key=lambda dc: dc[0])
    ]
    rest = [counts.off_day.rows for _, counts in busiest[OFF_DAY_DAYS_NAMED:]]
    if rest:
        out.append(
            f"and {len(rest):,} more days with {sum(rest):,} {noun} dated outside the day (each in its manifest)"
        )
    return out
