"""Which judges a per-judge table or chart of the report shows: all of them, up to a readable number.

Why: an arena log names each voter as a judge, so a snapshot can hold 50,000 judges.  A page with a row (or
a forest-plot line) per judge in every section would be hundreds of megabytes and unreadable; every number
stays in the snapshot's data files (bias.parquet, summary.json, audit_*.parquet).  Past
:data:`MAX_JUDGES_SHOWN`, the report shows the judges with the most battles (names break ties) and says how
many it left out and where they are.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterable, Mapping

from biasboard.report.svg import esc
from biasboard.schemas.summary import GLOBAL_JUDGE

#: Judges a per-judge table or chart shows at most (the ones with the most battles).
MAX_JUDGES_SHOWN = 40


def shown_judges(battles: Mapping[str, float], limit: int = MAX_JUDGES_SHOWN) -> set[str]:
    """The judges to show: every one when there are at most ``limit``, else the ``limit`` with most battles."""
    if len(battles) <= limit:
        return set(battles)
    return {j for _, j in heapq.nsmallest(limit, ((-float(n or 0), str(j)) for j, n in battles.items()))}


def left_out_note(total: int, shown: int, where: str) -> str:
    """One HTML sentence saying how many judges a table leaves out and which file holds them ('' when none)."""
    if total <= shown:
        return ""
    return (
        f'<p class="note">Showing the {shown:,} judges with the most battles of {total:,}; '
        f"every judge is in {esc(where)}.</p>"
    )


def keep(rows: Iterable, judge_of, shown: set[str]) -> list:
    """The rows whose judge (``judge_of(row)``) is shown, in their order."""
    return [r for r in rows if str(judge_of(r)) in shown]


def judge_key(judge: object) -> tuple[bool, list[tuple[int, int | str]]]:
    """The order every per-judge panel, table and list of the report shows judges in: the global term first, then
    the judges in natural order, reading digit runs as numbers (crowd/17 before crowd/165).

    Why one key: the bias panels read voters in this order while the bias table, its lists and the audit's tables
    sorted them as text (crowd/165, crowd/17, crowd/170), so one judge sat at different places in each.
    """
    name = str(judge)
    return judge != GLOBAL_JUDGE, [(0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", name) if p]
