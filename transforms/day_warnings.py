"""Warnings about single stored days, read from their manifests: what a nightly operator must hear about a day.

Every row of a day is accounted for (counted or dead-lettered with its reason), yet a day can still be wrong in a
way no total shows: most of its rows rejected (a file with an integer ``winner`` column), or rows filed under a
day they are not dated on (a file in the wrong ``day=`` folder).  These functions read the stored days' manifests,
so the summary of a refresh that aggregated only the new day still names the older days; ``backfill`` prints
the same lines for the days it wrote.
"""

from __future__ import annotations

from biasboard.transforms.cells import IngestCounts

#: A day that rejected more than this share of the rows it read is named in the summary's warnings.
REJECTED_DAY_SHARE: float = 0.5
#: The warning about rows dated outside their day names at most this many days (those with the most such rows);
#: the rest are summed in one line.  A history misfiled wholesale (every file a day off) is one problem, not 3,000.
OFF_DAY_DAYS_NAMED = 10


def _day_counts(days: list[str], manifests: list[dict], key: str = "counts") -> list[tuple[str, IngestCounts]]:
    """(day, its ``key`` counts) for the days whose manifest has them (score counts: only with score files)."""
    return [(day, IngestCounts.from_dict(m[key])) for day, m in zip(days, manifests, strict=True) if key in m]


def _reasons(counts: IngestCounts) -> str:
    """``bad_winner 267, duplicate_battle_id 3``: the rejection reasons, the commonest first."""
    return ", ".join(f"{reason} {n:,}" for reason, n in sorted(counts.rejected.items(), key=lambda kv: -kv[1]))


def rejected_days_warnings(days: list[str], manifests: list[dict]) -> list[str]:
    """The days that rejected most of what they read: every row is still accounted for, but a nightly operator should
    hear that a day's file came with (say) an integer ``winner`` column or was copied twice into its day (measured:
    5,100 of 5,100 rows ``bad_winner``, published with exit 0 and no warning)."""
    return [
        f"day {day} rejected {counts.rejected_total:,} of the {counts.read:,} rows it read ({_reasons(counts)}): "
        "see its dead letters"
        for day, counts in _day_counts(days, manifests)
        if counts.read and counts.rejected_total > REJECTED_DAY_SHARE * counts.read
    ]


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
    return (
        f"{where}: all {counts.read:,} rows read were rejected ({_reasons(counts)}); "
        f"each day's dead letters are under {state_dir.rstrip('/')}/deadletters/"
    )


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
