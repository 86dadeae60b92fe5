"""The terminal view of a snapshot: the top of both leaderboards side by side, numbers rounded for people.

``refresh`` and ``demo`` end by printing this, so a person sees the result without opening a file.
"""

from __future__ import annotations

import unicodedata

import polars as pl
from biasboard.report.svg import fmt, pct
from biasboard.schemas.summary import (
    AGREEMENT_BOARDS,
    ReferenceInfo,
    agreement_listed_in,
    agreement_yardstick,
    judge_label,
)

__all__ = ["ORDINAL_TITLES", "PAIRWISE_TITLES", "agreement_text", "fmt", "side_by_side_text"]


#: Column titles of the two boards: battles (the default) and single grades alone (ordinal-only).
PAIRWISE_TITLES = ("naive (plain Bradley-Terry)", "corrected for judge biases")
ORDINAL_TITLES = ("naive (mean grade, pooled)", "corrected for severity, difficulty")


#: At most this many of a disconnected board's components are printed (the largest first); the rest are counted.
PRINTED_COMPONENTS = 5
#: At most this many judges of the agreement with the reference are printed (the report lists them all).
PRINTED_AGREEMENT = 10


def display_width(text: str) -> int:
    """Terminal columns ``text`` takes: East Asian wide and full-width characters two, combining marks none (a
    CJK model name padded by its length in characters pushed its row's numbers out of their column)."""
    return sum(0 if unicodedata.combining(ch) else 2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _pad(text: str, width: int) -> str:
    """``text`` padded with spaces to ``width`` terminal columns (:func:`display_width`)."""
    return text + " " * max(0, width - display_width(text))


def side_by_side_text(board: pl.DataFrame, top: int, titles: tuple[str, str] = PAIRWISE_TITLES) -> str:
    """The two top-``top`` lists as aligned text: naive on the left, corrected (with its move) on the right.

    ``board`` is the published leaderboard (``rank_*``, ``rating_*``, ``rank_change`` columns).  A model
    the naive fit lacks (seen only in ordinal scores) has no naive rank and is left out of that column.
    When the comparison graph is disconnected (``component``: 0 the largest), ranks hold only within a
    component, so each of the first :data:`PRINTED_COMPONENTS` is its own block with its own ranks: one list
    mixing them would put two number-1 models under ranks 1 and 2.
    """
    width = max(12, *(display_width(m) for m in board["model"].to_list())) if board.height else 12
    column = width + 8
    head = f"{'#':>3}  {titles[0]:<{column}}  {'#':>3}  {titles[1]:<{column}}  move"
    components = board["component"].unique().sort().to_list() if "component" in board.columns else []
    if len(components) <= 1:
        return "\n".join([head, "-" * len(head), *_rows(board, top, width)])
    lines = [head]
    for k in components[:PRINTED_COMPONENTS]:
        part = board.filter(pl.col("component") == k)
        label = "the largest" if k == 0 else "not linked to the others by any battle"
        lines.append(f"-- component {k}: {part.height} models, {label}; ratings compare only within it --")
        lines.extend(_rows(part, top, width))
    if len(components) > PRINTED_COMPONENTS:
        rest = board.filter(pl.col("component") >= components[PRINTED_COMPONENTS]).height
        more = len(components) - PRINTED_COMPONENTS
        lines.append(f"-- {more} more components ({rest} models): see the leaderboard's column 'component' --")
    return "\n".join(lines)


def _rows(board: pl.DataFrame, top: int, width: int) -> list[str]:
    """The aligned rows of one board (or one component of it): its top ``top`` by each fit's rank, each side with
    its own published rank (tied ratings share one, as in the leaderboard: a row number gave two tied models 1
    and 2, and the two sides may tie differently)."""
    naive = board.filter(pl.col("rank_naive").is_not_null()).sort("rank_naive", "model").head(top)
    corrected = board.sort("rank_corrected", "model").head(top)
    lines = []
    for i in range(min(top, board.height)):
        c = corrected.row(i, named=True)
        left = " " * (width + 13)
        if i < naive.height:
            n = naive.row(i, named=True)
            left = f"{n['rank_naive']:>3}  {_pad(n['model'], width)} {fmt(n['rating_naive'], 0):>7}"
        change = c["rank_change"]
        move = "new" if change is None else "=" if not change else (f"+{change}" if change > 0 else str(change))
        right = f"{c['rank_corrected']:>3}  {_pad(c['model'], width)} {fmt(c['rating_corrected'], 0):>7}"
        lines.append(f"{left}  {right}  {move:>4}")
    return lines


def agreement_text(reference: ReferenceInfo | None) -> str:
    """The agreement with the reference (``ReferenceInfo.agreement``) as aligned text, or "" without one: each
    judge's accuracy and log loss on the reference's decided verdicts, uncorrected → corrected, then the boards'.

    Printed after the boards: whether the correction moved the judges toward the reference is the question a
    reference is named to answer, and a scheduled refresh's log is often all anyone reads.  The first
    :data:`PRINTED_AGREEMENT` judges (in the summary's order); the rest are counted."""
    rows = reference.agreement if reference is not None else []
    if reference is None or not rows:
        return ""
    judges = [r for r in rows if r.get("judge") not in AGREEMENT_BOARDS]
    boards = [r for r in rows if r.get("judge") in AGREEMENT_BOARDS]
    names = [judge_label(r.get("judge")) for r in rows]
    width = max(12, *(display_width(n) for n in names))
    whose = agreement_yardstick(reference.kind)
    lines = [
        f"Agreement with {whose} (their decided verdicts; uncorrected -> corrected):",
        f"  {_pad('judge', width)}  {'accuracy':<17}  log loss",
    ]
    for r in judges[:PRINTED_AGREEMENT]:
        accuracy = f"{pct(r.get('accuracy_uncorrected'))} -> {pct(r.get('accuracy_corrected'))}"
        loss = f"{fmt(r.get('log_loss_uncorrected'), 3)} -> {fmt(r.get('log_loss_corrected'), 3)}"
        lines.append(f"  {_pad(judge_label(r.get('judge')), width)}  {accuracy:<17}  {loss}")
    more = len(judges) - PRINTED_AGREEMENT
    if more > 0:
        lines.append(f"  ... {more} more judges in the report and summary.json")
    for r in boards:
        accuracy, loss = pct(r.get("accuracy_uncorrected")), fmt(r.get("log_loss_uncorrected"), 3)
        lines.append(f"  {_pad(str(r.get('judge')), width)}  {accuracy:<17}  {loss}")
    listed = agreement_listed_in(reference.kind, reference.notes)
    if listed:
        lines.append(f"  (listed: {listed})")
    return "\n".join(lines)
