"""The report's judge-audit section: the audit's tables as an HTML fragment.

Renders an :class:`~biasboard.audit.AuditResult` or the document of
``audit.json`` (the same numbers); every name that comes from the data is
escaped.  The flip rate, the longer-wins rate, the own-family difference and the
gold accuracy are shown as ``x% ± y%``: one standard error, clustered on a
judge's verdicts on one prompt over every day, or within a day where a note says so (:data:`SE_NOTE`).
The audit job writes the fragment as ``audit_section.html`` and the report
embeds it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import polars as pl
from biasboard.audit import COUNT_DECIMALS, AuditResult, records
from biasboard.audit.measures import ClusterRecurrence
from biasboard.report.judges import keep, left_out_note, shown_judges
from biasboard.report.svg import esc


def count_text(value: float) -> str:
    """A count as a person reads it: ``1,234``; a weighted count (the audit's consistent pairs, 378⅓) to
    :data:`~biasboard.audit.measures.COUNT_DECIMALS` (``378.33``, ``12.5``), not to the 2⁻²⁰ grid it is summed on."""
    rounded = round(value, COUNT_DECIMALS)
    return f"{rounded:,.0f}" if rounded.is_integer() else f"{rounded:,.{COUNT_DECIMALS}f}".rstrip("0")


def _fmt(value: Any, kind: str = "rate") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    if kind == "rate":
        return f"{100 * float(value):.1f}%"
    if kind == "count":
        return count_text(float(value))
    if kind == "num":
        return f"{float(value):,.1f}"
    return esc(str(value))


def _with_se(value: Any, se: Any) -> str:
    """A rate and one standard error, ``27.0% ± 2.2%``; the rate alone when it has no SE (a dash when no rate)."""
    shown = _fmt(value)
    if shown == "–" or se is None or (isinstance(se, float) and not math.isfinite(se)):
        return shown
    return f"{shown} ± {_fmt(se)}"


#: What the ± on the page means (the audit's CONVENTIONS["se"] in fewer words).
SE_NOTE = (
    "± is one standard error. The flip rate, longer-wins, own-family, gold accuracy and consistent win rate SEs "
    "are cluster-robust, a judge's verdicts on one prompt (both orders, repeats, every pair, every day unless a note "
    "says within a day) one cluster, with the small-sample factor G/(G − 1) (a gold case judged in both orders "
    "counts once, not twice; a flip on a prompt whose answer meets several opponents is not counted as independent "
    "of the prompt's other flips)."
)


def _table(caption: str, headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return (
        f'<table class="audit"><caption>{esc(caption)}</caption><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table>"
    )


def _records(audit: Mapping[str, Any], name: str) -> list[dict[str, Any]]:
    tables = audit.get("tables", audit)
    return list(tables.get(name, []))


def _judge_verdicts(audit: AuditResult | Mapping[str, Any]) -> dict[str, float | None]:
    """Each audited judge's verdicts (``slot_n``): what the judges shown are chosen by."""
    if isinstance(audit, AuditResult):
        names = audit.judges.get_column("judge").cast(pl.String).to_list()
        return dict(zip(names, audit.judges.get_column("slot_n").to_list(), strict=True))
    return {str(r.get("judge")): r.get("slot_n") for r in _records(audit, "judges")}


def _shown_rows(audit: AuditResult | Mapping[str, Any], name: str, shown: set[str]) -> list[dict[str, Any]]:
    """Table ``name``'s rows of the ``shown`` judges, in their order.  Of an :class:`AuditResult`, only those rows
    are made Python rows: a voter board's audit has a row per voter (made whole, bench/scale.py's 50,020 judges' rows
    took +141 MB for a moment as the audit was written, the report's ``_bias`` did the same with the bias rows)."""
    if isinstance(audit, AuditResult):
        frame = getattr(audit, name)
        return records(frame.filter(pl.col("judge").cast(pl.String).is_in(sorted(shown))))
    return keep(_records(audit, name), lambda r: r.get("judge"), shown)


def _clusters(audit: AuditResult | Mapping[str, Any]) -> ClusterRecurrence:
    """How many clusters recur across days, from the result or audit.json's ``clusters``."""
    if isinstance(audit, AuditResult):
        return audit.clusters
    return ClusterRecurrence.from_json(audit.get("clusters"))


def render_audit_section(audit: AuditResult | Mapping[str, Any]) -> str:
    """The audit as an HTML fragment (``<section>``) for the report; every name from the data is escaped.

    Accepts an :class:`AuditResult` or the document of ``audit.json``.
    """
    verdicts = _judge_verdicts(audit)
    name = lambda r: esc(str(r.get("judge")))  # noqa: E731
    parts = ['<section class="audit" id="judge-audit"><h2>Judge audit</h2>']
    if not verdicts:
        parts.append("<p>No battles to audit.</p></section>")
        return "".join(parts)
    shown = shown_judges({judge: n or 0 for judge, n in verdicts.items()})
    judges = _shown_rows(audit, "judges", shown)
    parts.append(left_out_note(len(verdicts), len(judges), "audit_judges.parquet and audit_family.parquet"))
    recurring = _clusters(audit).note()  # said where the ± is explained: it qualifies the ±
    recurring_text = f" {esc(recurring[0].upper() + recurring[1:])}." if recurring else ""
    parts.append(f'<p class="note">{esc(SE_NOTE)}{recurring_text}</p>')
    parts.append(
        _table(
            "Position: verdict split and order consistency (pairs judged in both orders)",
            [
                "judge",
                "verdicts",
                "first",
                "second",
                "tie",
                "pairs",
                "flip rate ± SE",
                "first won both",
                "second won both",
                "consistency (PBA)",
            ],
            [
                [
                    name(r),
                    _fmt(r.get("slot_n"), "count"),
                    _fmt(r.get("slot_first_share")),
                    _fmt(r.get("slot_second_share")),
                    _fmt(r.get("slot_tie_share")),
                    _fmt(r.get("order_pairs"), "count"),
                    _with_se(r.get("order_flip_rate"), r.get("order_flip_rate_se")),
                    _fmt(r.get("order_prefers_first_rate")),
                    _fmt(r.get("order_prefers_second_rate")),
                    _fmt(r.get("pba_consistency_rate")),
                ]
                for r in judges
            ],
        )
    )
    identical = [r for r in judges if r.get("identical_n")]
    if identical:
        parts.append(
            _table(
                "Identical answers (self-battles): an unbiased judge calls them ties",
                ["judge", "battles", "first", "second", "tie", "winner declared"],
                [
                    [
                        name(r),
                        _fmt(r.get("identical_n"), "count"),
                        _fmt(r.get("identical_first"), "count"),
                        _fmt(r.get("identical_second"), "count"),
                        _fmt((r.get("identical_tie") or 0) + (r.get("identical_bothbad") or 0), "count"),
                        _fmt(r.get("identical_declared_share")),
                    ]
                    for r in identical
                ],
            )
        )
    lengths = [r for r in judges if r.get("len_n")]
    if lengths:
        parts.append(
            _table(
                "Length profile of picks",
                [
                    "judge",
                    "battles",
                    "mean length chosen",
                    "mean length rejected",
                    "longer wins ± SE",
                    "agrees with pick-the-longer",
                ],
                [
                    [
                        name(r),
                        _fmt(r.get("len_n"), "count"),
                        _fmt(r.get("len_mean_chosen"), "num"),
                        _fmt(r.get("len_mean_rejected"), "num"),
                        _with_se(r.get("len_longer_win_rate"), r.get("len_longer_win_rate_se")),
                        _fmt(r.get("len_agreement_pick_longer")),
                    ]
                    for r in lengths
                ],
            )
        )
    family = _shown_rows(audit, "family", shown)
    if family:
        parts.append(
            _table(
                "Own-family preference (cross-family battles)",
                ["judge", "family", "win rate under this judge", "under other-family judges", "difference ± SE"],
                [
                    [
                        name(r),
                        esc(str(r.get("judge_family"))),
                        _fmt(r.get("win_rate_self")),
                        _fmt(r.get("win_rate_other_judges")),
                        _with_se(r.get("self_preference"), r.get("self_preference_se")),
                    ]
                    for r in family
                ],
            )
        )
    gold = [r for r in judges if r.get("gold_n_discriminative")]
    if gold:
        parts.append(
            _table(
                "Gold labels: accuracy on the discriminative subset",
                [
                    "judge",
                    "cases",
                    "accuracy ± SE",
                    "random pick",
                    "longest pick",
                    "lift over random",
                    "lift over longest",
                ],
                [
                    [
                        name(r),
                        _fmt(r.get("gold_n_discriminative"), "count"),
                        _with_se(r.get("gold_accuracy"), r.get("gold_accuracy_se")),
                        _fmt(r.get("gold_random_pick_baseline")),
                        _fmt(r.get("gold_longest_pick_baseline")),
                        _fmt(r.get("gold_lift_over_random")),
                        _fmt(r.get("gold_lift_over_longest")),
                    ]
                    for r in gold
                ],
            )
        )
    parts.append("</section>")
    return "".join(parts)
