"""report.html: one self-contained page a person reads to judge a snapshot.

Why this shape: the page is published beside the numbers and must open anywhere, offline, years
later — so it holds no script, no font, no stylesheet or image to fetch (inline CSS, inline SVG), and a
Content-Security-Policy that forbids loading anything.  Model and judge names come from battle logs we
do not control: every string from the data is escaped with ``html.escape(quote=True)`` in text,
attributes and SVG alike.

Inputs are typed: the leaderboard and bias tables (their columns are the contracts of
:mod:`biasboard.ranking.leaderboard` and :mod:`biasboard.ranking.result`) and the
:class:`~biasboard.schemas.summary.Summary` that ``refresh`` produced.  The page reads the Summary's
fields by name — no alternative spellings, no guessed keys; an optional part that is absent (no audit,
no gate, no rank intervals) is skipped.  It stays readable at phone width: wide tables scroll inside
their own box, never the page.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

import polars as pl
from biasboard.audit.measures import ClusterRecurrence
from biasboard.ranking.result import ELO_CENTER, ELO_PER_LOGIT
from biasboard.report.audit import count_text
from biasboard.report.judges import judge_key, keep, left_out_note, shown_judges
from biasboard.report.svg import (
    CORRECTED_COLOUR,
    DOWN_COLOUR,
    FLAT_COLOUR,
    NAIVE_COLOUR,
    Part,
    Series,
    esc,
    finite,
    fmt,
    forest_plot,
    hbar_chart,
    pct,
    slope_chart,
    split_bars,
)
from biasboard.schemas.summary import (
    AGREEMENT_BOARDS,
    GLOBAL_JUDGE,
    NAIVE_LAPLACE,
    NAIVE_SANDWICH,
    ORDINAL_ONLY,
    ORDINAL_ONLY_BOARDS,
    SUMMARY_JUDGES_MAX,
    TIED_TO_REFERENCE,
    Attribution,
    Counts,
    HeadToHead,
    JudgeCounts,
    ModelMove,
    RankInterval,
    Summary,
    agreement_listed_in,
    agreement_yardstick,
    judge_label,
    reference_keeps,
    zero_reference_effect,
)
from biasboard.schemas.wording import first_few

#: How many models the plots show at most: the top ``TOP_N`` by corrected rank plus the ``MOVERS``
#: largest rank changes outside them.  The full table always lists every model.
TOP_N = 25
MOVERS = 10
#: How many moved models the "what moved each model" list names (the largest rank changes; summary.json has all).
MOVES_LISTED = 15

#: Drawn widths of the wide charts: the desktop page, and a phone (about 400 px less the page margins).
WIDE = 860
NARROW = 370
#: Drawn width of one bias panel (two side by side on a desktop).
PANEL = 540

#: Plain-word meaning of each bias effect, and where its "no bias" line sits.
EFFECTS: dict[str, tuple[str, float | None]] = {
    "position": ("Position (γ): logit advantage of the answer shown first; above 0 favours the first answer.", 0.0),
    "length": (
        "Verbosity (β): logit change per unit of log length ratio ln(len_a/len_b), i.e. per e-fold "
        "longer answer{clip}; above 0 favours longer answers.",
        0.0,
    ),
    "affinity": ("Same-family affinity (λ): logit advantage for a model of the judge's own family.", 0.0),
    "tie": ("Tie propensity (ν): how readily the judge calls a tie; higher is less decisive.", None),
    "discrimination": (
        "Discrimination (a): the judge's scale on quality differences; 1 is average (each judge weighted by its "
        "verdicts), below 1 a lax judge that flattens the leaderboard.",
        1.0,
    ),
    "severity": ("Severity (α): how harshly the judge scores in ordinal grading.", 0.0),
    "position_sd": ("Spread of the judges' position effects: the SD across judges (MAP).", None),
    "length_sd": ("Spread of the judges' verbosity effects: the SD across judges (MAP).", None),
    "affinity_sd": ("Spread of the judges' same-family affinities: the SD across judges (MAP).", None),
    "tie_bothbad_share": ("Share of the judge's ties that were 'tie (bothbad)'.", None),
}

#: The effects a reference makes relative: a judge's row is its excess over the reference's.
RELATIVE_EFFECTS = frozenset({"position", "length", "affinity", "header", "list", "bold"})

CSS = """
:root { --fg:#24292f; --muted:#6b7580; --line:#d8dee4; --soft:#f6f8fa; --accent:#d9792b; --naive:#5b7db8; }
* { box-sizing: border-box; }
body { margin:0; color:var(--fg); background:#fff;
  font:14px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans","Helvetica Neue",Arial,sans-serif; }
main { max-width:1120px; margin:0 auto; padding:24px 28px 64px; }
h1 { font-size:26px; margin:0 0 4px; overflow-wrap:anywhere; }
h2 { font-size:19px; margin:40px 0 8px; padding-bottom:4px; border-bottom:1px solid var(--line); }
h3 { font-size:15px; margin:22px 0 6px; }
p, li { max-width:80ch; overflow-wrap:anywhere; }
.sub { color:var(--muted); margin:0 0 18px; }
.cards { display:flex; flex-wrap:wrap; gap:12px; margin:18px 0; }
.card { border:1px solid var(--line); border-radius:8px; padding:10px 14px; min-width:120px; background:var(--soft); }
.card .v { font-size:22px; font-weight:600; font-variant-numeric:tabular-nums; }
.card .k { color:var(--muted); font-size:12px; }
.warn { border-left:4px solid #d4a72c; background:#fff8e5; padding:10px 16px; border-radius:4px; margin:16px 0; }
.warn ul { margin:4px 0; padding-left:20px; }
.note { color:var(--muted); font-size:13px; }
ul.moves { padding-left:20px; font-size:14px; overflow-wrap:anywhere; }
.empty { color:var(--muted); font-style:italic; }
figure { margin:12px 0 20px; max-width:100%; overflow-x:auto; }
figure.narrow { display:none; }
figcaption { color:var(--muted); font-size:13px; margin-top:4px; }
svg { max-width:100%; height:auto; }
.scroll { max-width:100%; overflow-x:auto; margin:8px 0 16px; }
table { border-collapse:collapse; font-variant-numeric:tabular-nums; }
th, td { padding:4px 10px; border-bottom:1px solid var(--line); text-align:right; vertical-align:top; }
th { background:var(--soft); font-weight:600; }
th[colspan] { text-align:center; }
.panels { display:grid; grid-template-columns:repeat(auto-fit, minmax(min(500px, 100%), 1fr)); gap:4px 28px; }
.panels h3 { margin-top:14px; } .panels p { margin:0; }
td.l, th.l { text-align:left; }
td.name { text-align:left; min-width:12em; max-width:360px; overflow-wrap:anywhere; }
.scroll td.name:first-child, .scroll th.l:first-child { position:sticky; left:0; background:#fff; }
th { white-space:nowrap; } thead th { white-space:normal; min-width:4em; }
tbody tr:hover { background:#fafbfc; }
.grp-c { border-bottom:2px solid var(--accent); }
.grp-n { border-bottom:2px solid var(--naive); }
.up { color:#2a9d5b; } .down { color:#c8443a; } .flat { color:var(--muted); }
tr.group td { background:var(--soft); color:var(--muted); font-size:13px; }
tr.group span { position:sticky; left:10px; display:inline-block; max-width:min(560px, 85vw); white-space:normal; }
.ci { color:var(--muted); font-size:12px; white-space:nowrap; }
.tag { display:inline-block; font-size:11px; padding:0 6px; border-radius:9px; background:#eef1f4; color:var(--muted); }
.tag.bad { background:#fde8e6; color:#a4332a; } .tag.ok { background:#e6f4ea; color:#1f7a44; }
table.matrix td, table.matrix th { padding:2px 5px; font-size:12px; text-align:center; }
table.matrix th.l { text-align:left; white-space:nowrap; }
table.matrix td.self { background:#eef1f4; }
details > summary { cursor:pointer; color:var(--muted); margin:6px 0; }
.tabs { display:flex; flex-wrap:wrap; gap:4px; margin:12px 0; position:relative; }
.tabs > input { position:absolute; left:0; top:0; width:1px; height:1px; opacity:0; margin:0; }
.tabs > label { padding:3px 10px; border:1px solid var(--line); border-radius:6px; background:var(--soft);
  cursor:pointer; overflow-wrap:anywhere; max-width:100%; }
.tabs > input:checked + label { background:var(--fg); border-color:var(--fg); color:#fff; }
.tabs > input:checked + label .tag { background:#fff; }
.tabs > input:focus-visible + label { outline:2px solid var(--accent); outline-offset:2px; }
.tabs > .tab-panel { order:1; display:none; width:100%; min-width:0; border-top:2px solid var(--fg); }
.tabs > input:checked + label + .tab-panel { display:block; }
@media print { .tabs > .tab-panel { display:block; } .tabs > label { display:none; } }
footer { margin-top:48px; color:var(--muted); font-size:12px; }
@media (max-width:600px) {
  main { padding:12px 10px 40px; }
  h1 { font-size:21px; }
  .card { min-width:0; padding:6px 10px; } .card .v { font-size:18px; }
  th, td { padding:3px 6px; }
  figure.wide { display:none; } figure.narrow { display:block; }
}
"""

#: No fetch of any kind: the page must render from this one file.
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'none'; base-uri 'none'"


# --------------------------------------------------------------------------- small helpers


def _int(value: Any) -> str:
    f = finite(value)
    return "—" if f is None else f"{f:,.0f}"


def _count(value: Any) -> str:
    """A count that may carry weights (:func:`~biasboard.report.audit.count_text`), or an em dash."""
    f = finite(value)
    return "—" if f is None else count_text(f)


def _pct_pm(value: Any, se: Any, digits: int = 1) -> str:
    """``27.0% ± 2.2%`` (or the percentage alone, or an em dash): a rate with one standard error."""
    if finite(value) is None:
        return "—"
    return f"{pct(value, digits)} ± {pct(se, digits)}" if finite(se) is not None else pct(value, digits)


def _pm(value: Any, se: Any, digits: int = 3) -> str:
    """``value ± se`` (or the value alone, or an em dash)."""
    if finite(value) is None:
        return "—"
    return f"{fmt(value, digits)} ± {fmt(se, digits)}" if finite(se) is not None else fmt(value, digits)


def _int_or_zero(value: Any) -> int:
    """A component number from a board row (null, absent or NaN: 0, the main group)."""
    v = finite(value)
    return int(v) if v is not None else 0


def _rank_key(row: Mapping[str, Any], col: str) -> tuple[float, float, str]:
    r = finite(row.get(col))
    rating = finite(row.get(col.replace("rank", "rating")))
    return (r if r is not None else math.inf, -(rating if rating is not None else -math.inf), str(row.get("model")))


def _rank_move(row: Mapping[str, Any]) -> float | None:
    """Places gained after correction (naive rank − corrected rank): the published ``rank_change``."""
    return finite(row["rank_change"])


def _n(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def _section(anchor: str, heading: str, body: str) -> str:
    return f'<section id="{esc(anchor)}"><h2>{esc(heading)}</h2>{body}</section>'


def _figure(svg: str, caption: str = "") -> str:
    cap = f"<figcaption>{esc(caption)}</figcaption>" if caption else ""
    return f"<figure>{svg}{cap}</figure>"


def _responsive(draw: Callable[[int], str]) -> str:
    """A wide chart drawn twice, at full width and at phone width; CSS shows the one that fits.

    Why: an SVG scaled down to a phone shrinks its text to a few pixels, and one kept at full size
    hides half its data off screen; a chart laid out for the narrow width stays legible (no script).
    """
    return f'<figure class="wide">{draw(WIDE)}</figure><figure class="narrow">{draw(NARROW)}</figure>'


def _table(cls: str, head: str, rows: Iterable[str]) -> str:
    """A table in its own horizontally scrolling box, so a wide table never widens the page."""
    table = f'<table class="{esc(cls)}"><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table>'
    return f'<div class="scroll">{table}</div>'


def _cards(items: Iterable[tuple[str, str | None]]) -> str:
    html = "".join(
        f'<div class="card"><div class="v">{esc(v)}</div><div class="k">{esc(k)}</div></div>'
        for k, v in items
        if v is not None
    )
    return f'<div class="cards">{html}</div>' if html else ""


# --------------------------------------------------------------------------- sections


def _ordinal_only(summary: Summary) -> bool:
    return summary.board == ORDINAL_ONLY


def _graded(summary: Summary) -> bool:
    """A board of battles fit with grades beside them (``--input`` and ``--scores``): the grades set the ratings'
    scale there and the judges' discriminations are free, not centred on 1 (``docs/design-notes.md``, scale of θ)."""
    return not _ordinal_only(summary) and summary.score_counts is not None and summary.score_counts.counted > 0


def _grades_set_scale(summary: Summary) -> bool:
    """Whether the grades set the ratings' scale: a board of battles and grades, unless ω = 1 weighed the grades 0
    (the fit drops them, and the judges' verdict-weighted average sets the scale as without grades).  One test for
    the intervals' note and the discrimination panel: the panel had said "1 is the grades' scale" at ω = 1."""
    return _graded(summary) and summary.diagnostics.omega != 1.0


def _weighted(summary: Summary) -> bool:
    """A board whose battles and grades were weighed unequally (ω ∉ {0.5, 1} with grades): its corrected intervals
    are the Godambe sandwich (:mod:`biasboard.ranking.composite`), not the Laplace posterior.  Read from the
    summary's ``uncertainty``, not inferred from ω: a summary written before the sandwich had Laplace intervals."""
    return summary.uncertainty == "godambe"


def _header(title: str, lb: list[dict[str, Any]], summary: Summary) -> str:
    days = summary.days
    span = days.first if days.first == days.last else f"{days.first} to {days.last}"
    if _ordinal_only(summary):
        grades = summary.score_counts.counted if summary.score_counts is not None else None
        cards = _cards(
            [
                ("models", _int(len(lb))),
                ("grades counted", _int(grades)),
                ("Kendall τ naive vs corrected", fmt(summary.kendall_tau, 3)),
                ("Spearman ρ", fmt(summary.spearman, 3)),
            ]
        )
        sub = f"{_n(days.count, 'day', 'days')} of single grades, {span} · ordinal-only board (no battles)"
        note = (
            f'<p class="note">Ordinal-only board: {esc(ORDINAL_ONLY_BOARDS)}. Skipped, as they need battles: '
            "position, length and affinity corrections, the covariate and identifiability diagnostics, the "
            "head-to-head matrices and the judge audit. The battles column counts grades.</p>"
        )
        return f'<header><h1>{esc(title)}</h1><p class="sub">{esc(sub)}</p>{cards}{note}</header>'
    cards = _cards(
        [
            ("models", _int(len(lb))),
            ("judges", _int(summary.n_judges)),
            ("battles counted", _int(summary.counts.counted)),
            ("Kendall τ naive vs corrected", fmt(summary.kendall_tau, 3)),
            ("Spearman ρ", fmt(summary.spearman, 3)),
        ]
    )
    sub = f"{_n(days.count, 'day', 'days')} of battles, {span} · naive Bradley–Terry beside the judge-bias-aware model"
    return f'<header><h1>{esc(title)}</h1><p class="sub">{esc(sub)}</p>{cards}</header>'


def _warnings(summary: Summary) -> str:
    if not summary.warnings:
        return ""
    items = "".join(f"<li>{esc(w)}</li>" for w in summary.warnings)
    return f'<div class="warn" role="note"><strong>Warnings</strong><ul>{items}</ul></div>'


def _plot_subset(lb: list[dict[str, Any]], top_n: int, movers: int) -> list[dict[str, Any]]:
    """Rows to plot: the top ``top_n`` by corrected rank, plus the ``movers`` largest |rank change| others."""
    ordered = sorted(lb, key=lambda r: _rank_key(r, "rank_corrected"))
    if len(ordered) <= top_n + movers:
        return ordered
    head = ordered[:top_n]
    rest = [r for r in ordered[top_n:] if _rank_move(r) is not None]
    rest.sort(key=lambda r: (-abs(_rank_move(r) or 0.0), _rank_key(r, "rank_corrected")))
    picked = {id(r) for r in head} | {id(r) for r in rest[:movers] if _rank_move(r)}
    return [r for r in ordered if id(r) in picked]


@dataclass(frozen=True)
class PlotGroups:
    """The forest plot's rows in drawing order, where its dashed rules go, and what the scope note adds."""

    rows: list[dict[str, Any]]
    breaks: list[int]
    grouped: bool
    note: str = ""

    def prefix(self, row: Mapping[str, Any]) -> str:
        """``G2 `` before a row's rank when the board has several comparison groups, else nothing."""
        return f"G{_int_or_zero(row.get('component')) + 1} " if self.grouped else ""


def _plot_groups(subset: list[dict[str, Any]], top_n: int | None) -> PlotGroups:
    """The plotted rows grouped by comparison component, as the full table groups them.

    Why: ranks restart in each group and the groups' ratings are not comparable (no battle links them), yet the
    plot interleaved them on one axis in rank order (1, 1, 2, 2, ...: GenAI-Arena's editing and generation models),
    which reads as ties, and an order, across groups.  One group: rank order, with the rule under the top
    ``top_n`` when the plot shows only some models (``top_n`` None: all shown).
    """
    components = {_int_or_zero(r.get("component")) for r in subset}
    if len(components) <= 1:
        return PlotGroups(subset, [top_n] if top_n is not None else [], grouped=False)
    rows = sorted(subset, key=lambda r: _int_or_zero(r.get("component")))  # stable: rank order within a group
    comps = [_int_or_zero(r.get("component")) for r in rows]
    breaks = [i for i in range(1, len(rows)) if comps[i] != comps[i - 1]]
    note = (
        f" Rows are grouped by comparison group (G1 the largest; a dashed rule between groups), each in corrected "
        f"rank order: no battle links two groups, so ratings and ranks compare only within a group "
        f"({len(components)} groups here)."
    )
    return PlotGroups(rows, breaks, grouped=True, note=note)


def _leaderboard(lb: list[dict[str, Any]], summary: Summary, top_n: int, movers: int) -> str:
    if not lb:
        return _section("leaderboard", "Leaderboards", '<p class="empty">No models in this snapshot.</p>')
    ci_name = f"{summary.ci_level:.0%} CI"
    ptop = f"P(top {summary.top_k})"
    ordered = sorted(lb, key=lambda r: _rank_key(r, "rank_corrected"))
    subset = _plot_subset(lb, top_n, movers)
    shown = len(subset)
    plotted = _plot_groups(subset, top_n if shown < len(lb) else None)
    subset = plotted.rows
    if shown < len(lb):
        rule = "" if plotted.grouped else " (below the dashed rule)"
        scope = (
            f"Showing {shown} of {len(lb)} models: the top {top_n} by corrected rating and the "
            f"largest rank changes among the rest{rule}. Every model is in the table below."
        )
    else:
        scope = f"All {len(lb)} models." if plotted.grouped else f"All {len(lb)} models, ordered by corrected rank."
    scope += plotted.note
    labels = [f"{plotted.prefix(r)}{_int(r['rank_corrected'])}. {r['model']}" for r in subset]
    tips = [f"{r['model']} — corrected #{_int(r['rank_corrected'])}, naive #{_int(r['rank_naive'])}" for r in subset]
    forest = _responsive(
        lambda width: forest_plot(
            labels,
            [
                Series(
                    "naive",
                    NAIVE_COLOUR,
                    [r["rating_naive"] for r in subset],
                    [r["ci_low_naive"] for r in subset],
                    [r["ci_high_naive"] for r in subset],
                ),
                Series(
                    "corrected",
                    CORRECTED_COLOUR,
                    [r["rating_corrected"] for r in subset],
                    [r["ci_low_corrected"] for r in subset],
                    [r["ci_high_corrected"] for r in subset],
                ),
            ],
            title="Ratings with confidence intervals, naive and corrected",
            x_label=f"rating (Elo-like scale) with {ci_name}",
            tooltips=tips,
            breaks=plotted.breaks,
            width=width,
            label_px=None if width > NARROW else min(150, width // 3),
        )
    )
    slope = _responsive(
        lambda width: slope_chart(
            [str(r["model"]) for r in subset],
            [r["rank_naive"] for r in subset],
            [r["rank_corrected"] for r in subset],
            title="Rank change from the naive to the corrected leaderboard",
            left_title="naive rank" if width > NARROW else "naive",
            right_title="corrected rank" if width > NARROW else "corrected",
            width=width,
            groups=[_int_or_zero(r.get("component")) for r in subset] if plotted.grouped else None,
        )
    )
    moved = [m for m in (_rank_move(r) for r in lb) if m is not None]
    n_up = sum(1 for m in moved if m > 0)
    n_down = sum(1 for m in moved if m < 0)
    n_same = len(moved) - n_up - n_down
    change_note = (
        (
            f"{_n(n_up, 'model moves', 'models move')} up and {n_down} down once the judges' biases are "
            f"accounted for; {_n(n_same, 'keeps its', 'keep their')} rank."
        )
        if moved
        else ""
    )
    ranks = summary.ranks
    rank_note = (
        (
            f" The rank interval is the central {ranks.level:.0%} of each model's rank over {ranks.draws:,} "
            f"{ranks.source}: how far up or down the data allow a model to be."
        )
        if ranks
        else ""
    )
    body = [
        f'<p class="note">{esc(scope)} Dots are ratings, bars their {esc(ci_name)}s '
        f"({esc(_interval_source(summary))}). Intervals that overlap widely mean the data cannot order those models "
        f"with confidence{esc(_scale_note(summary))}.</p>",
        f'<p class="note">{esc(_corrected_meaning(summary))}</p>',
        forest,
        "<h3>Rank change</h3>",
        f'<p class="note">{esc(change_note)}</p>' if change_note else "",
        slope.replace(
            "</figure>",
            "<figcaption>Green: moves up after correction; red: moves down; grey: unchanged.</figcaption></figure>",
        ),
        _moves(summary.attribution),
        "<h3>Full table</h3>",
        f'<p class="note">{esc(rank_note.strip())}</p>' if rank_note else "",
        _leaderboard_table(ordered, ci_name, ptop, summary),
    ]
    return _section("leaderboard", "Leaderboards: naive and corrected", "".join(body))


def _moves(attribution: Attribution | None) -> str:
    """Which correction moved each model that moved: a line per model (phone-width: a list, not a wide table)."""
    if attribution is None:
        return ""
    moved = [r for r in attribution.models if r.rank_change]
    left_out = "; ".join(f"{effect}: {why}" for effect, why in attribution.left_out.items())
    left_note = f" Not corrected on this board, so not listed: {left_out}." if left_out else ""
    if not moved:
        if not left_note:
            return ""
        return f'<h3>What moved each model</h3><p class="note">{esc(left_note.strip())}</p>'
    moved.sort(key=lambda r: (-abs(r.rank_change or 0), r.rank_corrected, r.model))
    shown = moved[:MOVES_LISTED]
    more = (
        f" The {len(shown)} largest of {len(moved)} moves; every model's are in summary.json (attribution)."
        if len(shown) < len(moved)
        else ""
    )
    intro = (
        "Each correction's share of a model's rank change: the places it moves the model (its rank with that "
        "correction removed, every other kept, against its corrected rank) and the model's rating without it (a "
        "place also depends on how the correction moves the others). "
        "“Rest” is what the corrections do not account for one at a time: ties counted as half wins by the naive "
        "board, the judges' scales, and the corrections acting together."
    )
    items = "".join(f"<li>{_move_line(r)}</li>" for r in shown)
    return (
        f'<h3>What moved each model</h3><p class="note">{esc(intro + more + left_note)}</p>'
        f'<ul class="moves">{items}</ul>'
    )


def _move_line(row: ModelMove) -> str:
    """One model's move in words: "▲ 3 (naive #5 → #2): length +2 (41 points lower without it), rest +1" — the
    corrections that move it at least a place (else the one that moves its rating most), then what is left."""
    change = row.rank_change or 0
    arrow = f'<span class="up">▲ {change}</span>' if change > 0 else f'<span class="down">▼ {-change}</span>'
    ordered = sorted(row.corrections, key=lambda m: (-abs(m.places), -abs(m.delta_rating), m.effect))
    named = [m for m in ordered if m.places] or [m for m in ordered[:1] if abs(m.delta_rating) >= 0.5]
    parts = []
    for move in named:
        points = round(abs(move.delta_rating))
        side = "higher" if move.delta_rating > 0 else "lower"
        unit = "point" if points == 1 else "points"
        parts.append(f"{esc(move.effect)} {_signed(move.places)} ({points} {unit} {side} without it)")
    if row.unexplained:
        parts.append(f"rest {_signed(row.unexplained)}")
    ranks = f"naive #{_int(row.rank_naive)} → #{_int(row.rank_corrected)}"
    if row.rank_naive is not None and row.rank_change is not None and row.rank_naive - change != row.rank_corrected:
        # (the move is counted among the models both boards rank: a graded-only model above it is not passed)
        common = row.rank_naive - change
        ranks = f"naive #{_int(row.rank_naive)} → #{_int(common)} of the models both rank, #{_int(row.rank_corrected)}"
    return f"<strong>{esc(row.model)}</strong> {arrow} ({ranks}): {', '.join(parts) or 'no single correction'}"


#: What the two boards of single grades are and what their scale means: the partial-credit model's θ is on the
#: adjacent-category logit scale (P(k)/P(k−1) = exp(φ − τ_k)), so a rating difference is a factor in the odds of a
#: grade one step higher, not in odds of winning; nothing there is a Bradley–Terry fit or a tie.
ORDINAL_MEANING = (
    "Corrected: each model's quality with each judge's severity and each prompt's difficulty taken out (the "
    "partial-credit many-facet model of the grades). Naive: the same model with every grade pooled over judges and "
    "prompts, so it ranks the models as their mean grade does. On the Elo-like scale 400 points are a factor 10 in "
    "the odds of a grade one step higher rather than one step lower (100 points: a factor 1.78); no battle is "
    "fitted. The corrected points usually spread wider: pooling leaves the prompts' differences in difficulty in "
    "the noise, which pulls the naive ratings toward the centre, so compare ranks, not points, across the two "
    "columns."
)


def _corrected_meaning(summary: Summary) -> str:
    """What the corrected rating is, and why its points spread wider than the naive ones.

    An ordinal-only board gets :data:`ORDINAL_MEANING`: the pairwise text (position, length, ties as half wins,
    odds of winning) described models the board does not fit.
    """
    if _ordinal_only(summary):
        return ORDINAL_MEANING
    if summary.reference is not None and summary.reference.kind != "none":
        meaning = f"Corrected: {summary.reference.corrected_rating.rstrip('.')}."
    else:
        meaning = (
            "Corrected: each model's quality with every judge's preferences taken out — position, response length, "
            "same-family affinity (and style, where counted) — and each judge's tie propensity and scale fitted "
            "apart (the zero reference: no preference is kept)."
        )
    return (
        f"{meaning} Naive: plain Bradley–Terry on what the judges said, a tie as half a win. On the Elo-like scale "
        "400 points are a factor 10 in the odds of winning (100 points: 64%). The corrected points usually spread "
        "wider: ties as half wins and judges' noise pull the naive ratings toward the centre, so compare ranks, not "
        "points, across the two columns."
    )


def _scale_note(summary: Summary) -> str:
    """What sets the ratings' scale, after the intervals' sentence: nothing on an ordinal-only board (the grades'
    scale, said in its header), the grades on a board of battles and grades, a judge whose discrimination is fixed at
    1 where one does (``diagnostics.scale_judges``), else the judges' average."""
    if _ordinal_only(summary):
        return ""
    if _grades_set_scale(summary):
        return GRADED_SCALE_NOTE
    if summary.diagnostics.scale_judges:
        return FIXED_SCALE_NOTE.format(judges=_scale_judges(summary))
    return SCALE_NOTE


def _scale_judges(summary: Summary) -> str:
    """The judges whose fixed discrimination sets the scale, as the page names judges (the first few of many)."""
    return first_few([judge_label(j) for j in summary.diagnostics.scale_judges or []], 3)


def _interval_source(summary: Summary) -> str:
    """Where the plotted intervals come from.  A naive maximum-likelihood board of battles publishes the sandwich
    (:func:`~biasboard.ranking.fit.half_win_sandwich`), which the note must not call the Laplace posterior — unless the
    sandwich left a rating no variance and the fit kept its Laplace covariance, which the note must not call the
    sandwich (it did: the fit's choice was not recorded).  The summary's ``diagnostics.naive.covariance`` says which;
    a summary written before it was recorded is read as the fit then chose, the sandwich for a maximum-likelihood board
    of battles."""
    if summary.uncertainty == "bootstrap":
        return "percentiles of the bootstrap replicates"
    laplace = "from the Laplace approximation to the posterior"
    corrected = (
        "from the Godambe (sandwich) covariance of the ω-weighted likelihood, as a weighted likelihood's "
        "inverse Hessian is no calibrated covariance"
        if _weighted(summary)
        else laplace
    )
    naive = summary.diagnostics.naive
    by_ml = not _ordinal_only(summary) and naive.prior_theta_sd is None  # a maximum-likelihood board of battles
    if (naive.covariance or (NAIVE_SANDWICH if by_ml else NAIVE_LAPLACE)) == NAIVE_SANDWICH:
        return (
            f"corrected: {corrected}; naive: the sandwich covariance of its maximum-likelihood fit, as arena-rank "
            "publishes, since a tie as half a win is no likelihood of the three outcomes"
        )
    fallback = (
        "; the naive maximum-likelihood fit's sandwich covariance, which arena-rank publishes, left a rating no "
        "variance, as when every battle of a model is a tie between equals"
        if by_ml
        else ""
    )
    if corrected == laplace:
        return f"corrected and naive alike: {laplace}{fallback}" if by_ml else laplace
    return f"corrected: {corrected}; naive: {laplace}{fallback}"


def _rank_cell(intervals: Mapping[str, RankInterval], model: str) -> str:
    iv = intervals.get(model)
    if iv is None:
        return "<td>—</td>"
    text = str(iv.low) if iv.low == iv.high else f"{iv.low}–{iv.high}"
    return f'<td class="ci">{esc(text)}</td>'


def _slices(boards: pl.DataFrame | None, summary: Summary) -> str:
    """A tab per slice (``refresh --slices``): its naive and corrected board with rank intervals, or why not fit.

    Tabs without script: each tab is a radio button and its label, followed by its panel; CSS shows
    the panel after the checked button (``.tabs``).  Radio buttons keep the tabs reachable by keyboard
    (Tab to the group, arrow keys between slices) and announced by screen readers; printing shows every
    panel.  The first slice is open.
    """
    if not summary.slices:
        return ""
    tabs = []
    for i, info in enumerate(summary.slices):
        tab_id = f"slice-tab-{i}"
        count = f"{info.battles:,} battles, {info.models} models"
        label = f'<label for="{tab_id}">{esc(info.value)} <span class="tag">{esc(info.dimension)}</span></label>'
        head = f"<h3>{esc(info.slice)}</h3>"
        if not info.fitted or boards is None:
            body = f'<p class="note">{esc(count)}. {esc(info.note or "not fit")}</p>'
        else:
            rows = boards.filter(pl.col("slice") == info.slice).drop("slice").to_dicts()
            ordered = sorted(rows, key=lambda r: _rank_key(r, "rank_corrected"))
            tau = f" Kendall τ naive vs corrected: {fmt(info.kendall_tau, 3)}." if info.kendall_tau is not None else ""
            split = f" Note: {info.note}." if info.note else ""
            body = f'<p class="note">{esc(count)}: a fit on this slice\'s battles alone.{esc(tau + split)}</p>' + (
                _leaderboard_table(
                    ordered, f"{summary.ci_level:.0%} CI", f"P(top {info.top_k})", replace(summary, ranks=info.ranks)
                )
            )
        checked = " checked" if i == 0 else ""
        tabs.append(
            f'<input type="radio" name="slice-tab" id="{tab_id}"{checked}>{label}'
            f'<div class="tab-panel" role="group" aria-label="{esc(info.slice)}">{head}{body}</div>'
        )
    fitted = sum(1 for i in summary.slices if i.fitted)
    intro = (
        f'<p class="note">{_n(len(summary.slices), "slice", "slices")}, {fitted} fit (a slice needs at least '
        f"{summary.slices[0].min_battles:,} battles); battles without a label count on the overall board "
        "only, and a battle with several labels (a coding prompt that is also a hard prompt) is in each of "
        "their slices. Choose a slice for its naive and corrected board.</p>"
    )
    group = f'<div class="tabs" role="radiogroup" aria-label="Slices">{"".join(tabs)}</div>'
    return _section("slices", "Slices: a board per category or language", intro + group)


def _style(summary: Summary) -> str:
    """Style removed (the published corrected board) beside style kept (the same model without style effects)."""
    style = summary.style
    if style is None:
        return ""
    kept_by_reference = _reference_style(summary)
    # With a reference the global row of a feature is the reference's own effect where the rating keeps it, and the
    # judges' mean where the reference's is taken as zero (ranking.reference.reference_global_notes): said per feature.
    whose = (
        {f: " (the reference's own)" if f in kept_by_reference else " (the judges' mean)" for f in style.features}
        if summary.reference is not None
        else {}
    )
    effects = ", ".join(
        f"{e.feature} {fmt(e.estimate, 2)} [{fmt(e.ci_low, 2)}, {fmt(e.ci_high, 2)}]{whose.get(e.feature, '')}"
        for e in style.effects
    )
    tau = f" Kendall τ between the two boards: {fmt(style.kendall_tau, 3)}." if style.kendall_tau is not None else ""
    if kept_by_reference:
        removed = (
            "style <b>measured against the reference</b> (each judge's style effects are fitted beside length, per "
            "unit of (a − b)/(a + b), and only its excess over the reference's is removed; the reference's own "
            f"preference for {', '.join(kept_by_reference)} is kept at each model's typical style; global effects, "
            f"log-odds with 95% CI: {esc(effects)})"
        )
    else:
        removed = (
            "style <b>removed</b> (each judge's style effects are fitted beside length, per unit of "
            f"(a − b)/(a + b); global effects, log-odds with 95% CI: {esc(effects)})"
        )
    note = (
        f'<p class="note">{style.battles:,} battles carry header, list and bold counts. The corrected board '
        f"above has {removed}. Style <b>kept</b>: the same model without the style effects, so ratings keep what "
        f"the judges rewarded in formatting; its ratings are on the boards' Elo-like scale (1000 at the mean, 400 "
        f"points a factor of 10 in the odds).{esc(tau)}</p>"
    )
    rows = [
        f'<tr><td>{r.rank}</td><td class="l">{esc(r.model)}</td>'
        f"<td>{fmt(ELO_CENTER + ELO_PER_LOGIT * r.rating, 1)}</td>"
        f"<td>{r.rank_corrected}</td>"
        f"<td>{_signed(r.rank - r.rank_corrected)}</td></tr>"  # > 0: moves up once style is removed
        for r in style.kept
    ]
    head = (
        '<tr><th>rank kept</th><th class="l">model</th><th>rating kept</th><th>rank removed</th>'
        "<th>moves up by</th></tr>"
    )
    return _section("style", "Style removed and kept", note + _table("style", head, rows))


def _reference_style(summary: Summary) -> list[str]:
    """The style features whose reference preference the published rating keeps (estimated from the reference's
    verdicts and told from zero), in the summary's order; [] without a reference or without style."""
    reference, style = summary.reference, summary.style
    if reference is None or style is None:
        return []
    return [f for f in style.features if reference_keeps(f, reference.own_effects)]


def _signed(n: int) -> str:
    return "0" if n == 0 else f"{n:+d}"


def _leaderboard_table(ordered: list[dict[str, Any]], ci_name: str, ptop: str, summary: Summary) -> str:
    ranks = summary.ranks
    corrected = {iv.model: iv for iv in ranks.corrected} if ranks else {}
    naive = {iv.model: iv for iv in ranks.naive} if ranks else {}
    span = 3 if ranks else 2
    interval_head = f"<th>Rank {ranks.level:.0%} interval</th>" if ranks else ""
    head = (
        "<tr>"
        '<th class="l" rowspan="2">Model</th>'
        f'<th colspan="{span}" class="grp-c">Corrected</th>'
        f'<th colspan="{span}" class="grp-n">Naive</th>'
        '<th rowspan="2" title="naive rank − corrected rank">Change</th>'
        f'<th rowspan="2">{esc(ptop)}</th><th rowspan="2">Battles</th></tr>'
        f"<tr><th>Rank</th>{interval_head}<th>Rating ({esc(ci_name)})</th>"
        f"<th>Rank</th>{interval_head}<th>Rating ({esc(ci_name)})</th></tr>"
    )
    # Grouped by comparison component (0 = the largest), each in rank order: ranks restart in each group, and
    # interleaved (1, 1, 2, 2, ...) they read as ties across groups no battle links.
    ordered = sorted(ordered, key=lambda r: _int_or_zero(r.get("component")))
    sizes = Counter(_int_or_zero(r.get("component")) for r in ordered)
    groups = set(sizes)
    body = []
    for i, r in enumerate(ordered):
        comp = _int_or_zero(r.get("component"))
        if len(groups) > 1 and (i == 0 or _int_or_zero(ordered[i - 1].get("component")) != comp):
            body.append(
                f'<tr class="group"><td class="l" colspan="{1 + 2 * span + 3}"><span>Group {comp + 1} of '
                f"{len(groups)}: {_n(sizes[comp], 'model', 'models')}"
                f"{'' if comp == 0 else ' no battle links to the groups above'}; ranks, CIs and {esc(ptop)} hold "
                "within the group</span></td></tr>"
            )
        move = _rank_move(r)
        if move is None:
            change = '<span class="flat">—</span>'
        elif move > 0:
            change = f'<span class="up">▲ {move:.0f}</span>'
        elif move < 0:
            change = f'<span class="down">▼ {-move:.0f}</span>'
        else:
            change = '<span class="flat">0</span>'

        def rating(kind: str, r: Mapping[str, Any] = r) -> str:
            lo, hi = r[f"ci_low_{kind}"], r[f"ci_high_{kind}"]
            ci = (
                f' <span class="ci">[{fmt(lo)}, {fmt(hi)}]</span>'
                if finite(lo) is not None or finite(hi) is not None
                else ""
            )
            return f"{fmt(r[f'rating_{kind}'])}{ci}"

        model = str(r["model"])
        body.append(
            "<tr>"
            f'<td class="name">{esc(model)}</td>'
            f"<td>{_int(r['rank_corrected'])}</td>{_rank_cell(corrected, model) if ranks else ''}"
            f"<td>{rating('corrected')}</td>"
            f"<td>{_int(r['rank_naive'])}</td>{_rank_cell(naive, model) if ranks else ''}<td>{rating('naive')}</td>"
            f"<td>{change}</td><td>{fmt(r['p_top_k'], 2)}</td><td>{_int(r['n_battles'])}</td>"
            "</tr>"
        )
    return _table("leaderboard", head, body)


#: Battles at which a head-to-head cell shows half its colour: fewer battles, paler (0% from 2 battles was as
#: red as 0% from 200).
SHADE_BATTLES = 10


def _shade(rate: float | None, battles: float | None = None) -> str:
    """A cell background from red (the row model loses) through white to green (it wins), paler on few battles."""
    if rate is None:
        return ""
    t = max(-1.0, min(1.0, 2.0 * rate - 1.0))
    colour = (42, 157, 91) if t > 0 else (200, 68, 58)
    weight = 1.0 if battles is None else battles / (battles + SHADE_BATTLES)
    alpha = 0.55 * abs(t) * weight
    return f' style="background:rgba({colour[0]},{colour[1]},{colour[2]},{alpha:.2f})"'


def _matrix(cls: str, h2h: HeadToHead, cell) -> str:
    n = len(h2h.models)
    head = (
        '<tr><th class="l">row vs column</th>'
        + "".join(f'<th title="{esc(m)}">{i + 1}</th>' for i, m in enumerate(h2h.models))
        + "</tr>"
    )
    rows = []
    for i, m in enumerate(h2h.models):
        cells = "".join('<td class="self"></td>' if i == j else cell(i, j) for j in range(n))
        rows.append(f'<tr><th class="l">{i + 1}. {esc(m)}</th>{cells}</tr>')
    return _table(f"matrix {cls}", head, rows)


def _head_to_head(summary: Summary, component: Mapping[str, Any]) -> str:
    """The win-rate and battle-count matrices of the summary's top models; ``component``: each model's comparison
    group (the leaderboard's column), for the note to say where the listed models cross from one to the next."""
    h2h = summary.head_to_head
    if h2h is None or len(h2h.models) < 2 or _ordinal_only(summary):
        return ""
    groups = [_int_or_zero(component.get(m)) for m in h2h.models]
    crossing = [i + 1 for i in range(1, len(groups)) if groups[i] != groups[i - 1]]
    grouped = (
        f" Ranks restart in each comparison group (no battle links two groups): the largest group's models come "
        f"first, the other groups' from row {crossing[0]} on."
        if crossing
        else ""
    )

    def win(i: int, j: int) -> str:
        rate = h2h.win_rate[i][j]
        text = "·" if rate is None else f"{rate * 100:.0f}"
        return f"<td{_shade(rate, h2h.battles[i][j])}>{esc(text)}</td>"

    def count(i: int, j: int) -> str:
        n = h2h.battles[i][j]
        return f"<td>{_int(n) if n else '·'}</td>"

    body = (
        f'<p class="note">The top {len(h2h.models)} models by corrected rank, numbered as in the rows.{esc(grouped)} '
        "What the judges said, before any correction: all judges and both orders pooled, a tie counted as half a win. "
        f"A dot: the two never met. The colour fades with fewer battles (half strength at {SHADE_BATTLES}).</p>"
        "<h3>Win rate of the row model against the column model (%)</h3>"
        + _matrix("winrate", h2h, win)
        + "<h3>Battles between the two</h3>"
        + _matrix("battles", h2h, count)
    )
    return _section("head-to-head", "Head to head among the top models", body)


def _effect_order(effects: Iterable[str]) -> list[str]:
    known = list(EFFECTS)
    return sorted(set(effects), key=lambda e: (known.index(e) if e in known else len(known), e))


def _judge_order(judges: Iterable[Any]) -> list[Any]:
    """The global term first, then the judges in natural order (crowd/11 before crowd/107): :func:`judge_key`."""
    return sorted(set(judges), key=judge_key)


def _judge_battles(summary: Summary) -> dict[str, float]:
    """Battles per judge (from the cells; the audit's verdict counts when the summary has no judges)."""
    if summary.judges:
        return {j.judge: j.n for j in summary.judges}
    return {a.judge: a.slot_n or 0 for a in summary.diagnostics.order}


def _bias(table: pl.DataFrame, summary: Summary) -> str:
    """The bias panels and table: of the shown judges' rows, made Python rows only once the judges are chosen (a
    voter board's bias table has a row per voter and effect: made rows whole, bench/scale.py's 350k took +250 MB
    for a moment, the refresh's peak at N)."""
    if table.is_empty():
        return _section("bias", "Judge biases", '<p class="empty">No bias coefficients in this snapshot.</p>')
    names = table.get_column("judge").unique(maintain_order=True).to_list()
    judges = {str(j) for j in names} - {GLOBAL_JUDGE}
    battles = _judge_battles(summary)
    shown = shown_judges({j: battles.get(j, 0) for j in judges}) | {GLOBAL_JUDGE}
    relative = summary.reference is not None and summary.reference.kind != "none"
    line = (
        "With a reference (see Reference), a judge's position, length, affinity and style rows are its excess over "
        "the reference: the dashed line, 0, means it judges as the reference does. The reference's own rows are "
        "its effects, and so is the global term wherever the reference has one (its note says when it is the "
        "judges' mean instead)."
        if relative
        else "The dashed line marks no bias."
    )
    parts = [
        '<p class="note">Each panel is one effect; rows are judges (the global term first). Filled dots are '
        f"identified by the data; hollow dots are not identified, so their value comes from the prior. {line}</p>",
        # (the log's voters, pooled by --judge-pool into a few fitted judges, are not the bias table's judges: those
        # few are all in bias.json)
        left_out_note(
            *(
                _judges_where(summary, len(judges), len(shown) - 1, "bias.parquet and bias.json")
                if len(judges) > SUMMARY_JUDGES_MAX
                else (len(judges), len(shown) - 1, "bias.parquet and bias.json")
            )
        ),
    ]
    bias = table.filter(pl.col("judge").is_in(keep(names, lambda j: j, shown))).to_dicts()
    disabled: list[str] = []
    tied: list[str] = []
    withheld: list[str] = []  # tied as prior-selected though the gate supports the excess (not "see the gate")
    panels: list[str] = []
    for effect in _effect_order(str(r["effect"]) for r in bias):
        rows = sorted((r for r in bias if str(r["effect"]) == effect), key=lambda r: judge_key(r["judge"]))
        for r in rows:
            if r["enabled"] is False:
                note = str(r.get("note") or "")
                gated = note.startswith(TIED_TO_REFERENCE)
                listed = (withheld if "prior-selected" in note else tied) if gated else disabled
                listed.append(f"{effect} ({_bias_label(r, summary)})")
        rows = [r for r in rows if r["enabled"] is not False]
        if not rows or (effect == "tie_bothbad_share" and not any(r["estimate"] for r in rows)):
            continue  # (a source without both-bad ties: a panel of zeros)
        order = _judge_order(r["judge"] for r in rows)
        by_judge = {r["judge"]: r for r in rows}
        ordered = [by_judge[j] for j in order]
        desc, ref = EFFECTS.get(effect, ("", 0.0))
        desc = desc.format(clip=_clip_text(summary))
        if effect == "discrimination":
            desc = _discrimination_text(desc, ordered, summary)
        labels = [_bias_label(r, summary) for r in ordered]
        tips = [f"{label} · {effect}" for label in labels]  # a dot's tooltip names the panel's effect with the judge
        series = [
            Series(
                "",
                CORRECTED_COLOUR,
                [r["estimate"] for r in ordered],
                [r["ci_low"] for r in ordered],
                [r["ci_high"] for r in ordered],
                hollow=[r["identified"] is False for r in ordered],
            )
        ]

        def draw(
            width: int,
            labels: list[str] = labels,
            tips: list[str] = tips,
            series: list[Series] = series,
            ref: float | None = ref,
            title: str = (
                f"{effect}: excess over the reference, per judge"
                if relative and effect in RELATIVE_EFFECTS
                else f"{effect} coefficient per judge"
            ),
        ) -> str:
            panel = PANEL if width > NARROW else width
            return forest_plot(labels, series, title=title, reference=ref, width=panel, tooltips=tips)

        svg = _responsive(draw)
        panels.append(f'<div><h3>{esc(effect)}</h3><p class="note">{esc(desc)}</p>{svg}</div>')
    parts.append(f'<div class="panels">{"".join(panels)}</div>')
    if tied:
        parts.append(
            f'<p class="note">Tied to the reference (fitted and tested; no excess corrected, see the gate): '
            f"{esc(_listed(tied))}.</p>"
        )
    if withheld:
        parts.append(
            '<p class="note">Tied to the reference as prior-selected (the gate supports the excess, the data do not '
            f"identify it; --apply-unidentified applies it): {esc(_listed(withheld))}.</p>"
        )
    if disabled:
        parts.append(f'<p class="note">Not fitted (disabled): {esc(_listed(disabled))}.</p>')
    parts.append(_bias_table(bias, summary))
    return _section("bias", "Judge biases", "".join(parts))


def _bias_label(row: Mapping[str, Any], summary: Summary) -> str:
    """A bias row's judge as the panels and the table name it: a global row holding the reference's own effect is
    the reference's (:func:`~biasboard.schemas.summary.reference_keeps`, from the summary's ``own_effects``)."""
    own = summary.reference.own_effects if summary.reference is not None else {}
    return judge_label(row["judge"], reference_keeps(str(row["effect"]), own))


def _listed(items: list[str], most: int = 20) -> str:
    """The first ``most`` items, then how many more (a voter board lists hundreds)."""
    return ", ".join(items[:most]) + (f" and {len(items) - most} more (bias.parquet)" if len(items) > most else "")


def _bias_table(bias: list[dict[str, Any]], summary: Summary) -> str:
    order = {e: i for i, e in enumerate(_effect_order(str(r["effect"]) for r in bias))}
    rows = sorted(bias, key=lambda r: (order.get(str(r["effect"]), 0), judge_key(r["judge"])))

    def flag(value: Any, yes: str, no: str) -> str:
        if value is True:
            return f'<span class="tag ok">{yes}</span>'
        if value is False:
            return f'<span class="tag bad">{no}</span>'
        return "—"

    boot = any(finite(r["boot_ci_low"]) is not None for r in rows)

    def boot_cell(r: Mapping[str, Any]) -> str:
        return f'<td class="ci">[{fmt(r["boot_ci_low"], 3)}, {fmt(r["boot_ci_high"], 3)}]</td>' if boot else ""

    body = "".join(
        "<tr>"
        f'<td class="name">{esc(_bias_label(r, summary))}</td><td class="l">{esc(r["effect"])}</td>'
        f"<td>{fmt(r['estimate'], 3)}</td>"
        f'<td class="ci">[{fmt(r["ci_low"], 3)}, {fmt(r["ci_high"], 3)}]</td>{boot_cell(r)}'
        f"<td>{flag(r['identified'], 'identified', 'prior-selected')}</td>"
        f"<td>{flag(r['enabled'], 'on', 'off')}</td>"
        f'<td class="l">{esc(r["note"] or "")}</td>'
        "</tr>"
        for r in rows
    )
    head = (
        '<tr><th class="l">Judge</th><th class="l">Effect</th><th>Estimate</th>'
        f"<th>CI</th>{'<th>Bootstrap CI</th>' if boot else ''}"
        '<th>Identified</th><th>Enabled</th><th class="l">Note</th></tr>'
    )
    caption = f"<summary>All {len(rows)} coefficients as a table</summary>"
    return f"<details>{caption}{_table('bias', head, [body])}</details>"


def _clip_text(summary: Summary) -> str:
    clip = summary.diagnostics.length_clip
    if clip is None or finite(clip) is None:
        return ""
    return f", with |ln(len_a/len_b)| clipped at {clip:g} (a {math.exp(clip):.1f}× length ratio) where it saturates"


def _judge_audit(summary: Summary, corrected_rank: Mapping[str, Any]) -> str:
    """The judge audit, once: position split and flips, order-consistent win rates, length, own family."""
    diag = summary.diagnostics
    if not (diag.order or diag.order_models or diag.family):
        return ""
    body = [
        '<p class="note">What each judge does, measured on the battles themselves before any model is '
        "fitted: where the answers were shown, how long they were, whose family they came from.</p>"
    ]
    if diag.audit_clusters is not None:  # what the ± below do not cover, said beside them (a note, not a warning)
        recurring = ClusterRecurrence(**asdict(diag.audit_clusters)).note()
        if recurring:
            body.append(f'<p class="note">± is one standard error. {esc(recurring[0].upper() + recurring[1:])}.</p>')
    shown = shown_judges(_judge_battles(summary))
    order = sorted(keep(diag.order, lambda a: a.judge, shown), key=lambda a: judge_key(a.judge))
    if len(order) < len(diag.order):
        body.append(
            left_out_note(
                *_judges_where(summary, len(diag.order), len(order), "summary.json (diagnostics) and the audit files")
            )
        )
    if order:
        labels = [judge_label(a.judge) for a in order]
        parts = [
            Part(name, colour, values)
            for name, colour, values in (
                ("first shown (A) wins", NAIVE_COLOUR, [a.slot_first_share for a in order]),
                ("second shown (B) wins", CORRECTED_COLOUR, [a.slot_second_share for a in order]),
                ("tie", FLAT_COLOUR, [a.slot_tie_share for a in order]),
            )
        ]
        notes = [
            f"flip rate {pct(a.order_flip_rate)}"
            if finite(a.order_flip_rate) is not None
            else "not seen in both orders"
            for a in order
        ]
        split = _responsive(
            lambda width: split_bars(
                labels, parts, title="Verdict split by position, per judge", annotations=notes, width=width
            )
        )
        head = (
            '<tr><th class="l">Judge</th><th>Verdicts</th><th>A</th><th>B</th><th>Tie</th>'
            "<th>Pairs seen in both orders</th><th>Flip rate (± SE)</th><th>First won both</th>"
            "<th>Second won both</th></tr>"
        )
        rows = [
            f'<tr><td class="name">{esc(judge_label(a.judge))}</td><td>{_int(a.slot_n)}</td>'
            f"<td>{fmt(a.slot_first_share, 3)}</td><td>{fmt(a.slot_second_share, 3)}</td>"
            f"<td>{fmt(a.slot_tie_share, 3)}</td><td>{_int(a.order_pairs)}</td>"
            f"<td>{esc(_pct_pm(a.order_flip_rate, a.order_flip_rate_se))}</td>"
            f"<td>{pct(a.order_prefers_first_rate)}</td><td>{pct(a.order_prefers_second_rate)}</td></tr>"
            for a in order
        ]
        body += [
            "<h3>Position: split and flip rate per judge</h3>",
            '<p class="note">How each judge\'s verdicts split between the answer shown first (A), the one '
            "shown second (B) and a tie (plain and both-bad); and, where it saw the same prompt and pair in both "
            "orders on the same day (the audit pairs the two orders within a day), how often its verdict flipped "
            "with the order. An unbiased judge splits A and B evenly and rarely flips.</p>",
            split,
            _table("order", head, rows),
        ]
    seen = [m for m in diag.order_models if m.pairs]  # a model never seen in both orders has nothing to show
    if seen:
        models = sorted(seen, key=lambda m: (finite(corrected_rank.get(m.model)) or math.inf, m.model))
        head = (
            '<tr><th class="l">Model</th><th>Corrected rank</th><th>Pairs seen in both orders</th>'
            "<th>Order-consistent</th><th>Win rate among order-consistent pairs (± SE)</th>"
            "<th>Win rate averaged over both orders</th></tr>"
        )
        rows = [
            f'<tr><td class="name">{esc(m.model)}</td><td>{_int(corrected_rank.get(m.model))}</td>'
            f"<td>{_int(m.pairs)}</td><td>{_count(m.consistent)}</td>"
            f"<td>{esc(_pm(m.consistent_win_rate, m.consistent_win_rate_se))}</td>"
            f"<td>{fmt(m.averaged_win_rate, 3)}</td></tr>"
            for m in models
        ]
        body += [
            "<h3>Win rate among order-consistent pairs</h3>",
            '<p class="note">Per model, over every judge: among the prompts a judge saw in both orders and '
            "answered the same way both times (ties count half), how often this model won. Position cannot "
            "have decided these verdicts."
            + (
                f" {len(diag.order_models) - len(seen)} model(s) never seen in both orders are left out."
                if len(seen) < len(diag.order_models)
                else ""
            )
            + (
                " A prompt judged more than once in one order counts as one pair split by its verdicts' shares, "
                "so the order-consistent count can be fractional."
                if any(not float(m.consistent).is_integer() for m in seen)
                else ""
            )
            + "</p>",
            _table("consistent", head, rows),
        ]
    lengths = [a for a in order if a.len_n]
    if lengths:
        head = (
            '<tr><th class="l">Judge</th><th>Battles</th><th>Mean length chosen</th>'
            "<th>Mean length rejected</th><th>Longer answer wins (± SE)</th>"
            "<th>Agrees with pick-the-longer</th></tr>"
        )
        rows = [
            f'<tr><td class="name">{esc(judge_label(a.judge))}</td><td>{_int(a.len_n)}</td>'
            f"<td>{fmt(a.len_mean_chosen)}</td><td>{fmt(a.len_mean_rejected)}</td>"
            f"<td>{esc(_pm(a.len_longer_win_rate, a.len_longer_win_rate_se))}</td>"
            f"<td>{pct(a.len_agreement_pick_longer)}</td></tr>"
            for a in lengths
        ]
        body += ["<h3>Length profile of picks</h3>", _table("length", head, rows)]
    if diag.family:
        head = (
            '<tr><th class="l">Judge</th><th class="l">Family</th><th>Win rate under this judge</th>'
            "<th>Under other-family judges</th><th>Difference (± SE)</th></tr>"
        )
        rows = [
            f'<tr><td class="name">{esc(f.judge)}</td><td class="l">{esc(f.judge_family)}</td>'
            f"<td>{pct(f.win_rate_self)}</td><td>{pct(f.win_rate_other_judges)}</td>"
            f"<td>{esc(_pm(f.self_preference, f.self_preference_se))}</td></tr>"
            for f in sorted(keep(diag.family, lambda f: f.judge, shown), key=lambda f: judge_key(f.judge))
        ]
        body += [
            "<h3>Own-family preference</h3>",
            "<p class=\"note\">In battles between families: how often the judge's own family's models win "
            "under the judge, against how often they win under judges of other families.</p>",
            _table("family", head, rows),
        ]
    return _section("audit", "Judge audit", "".join(body))


def _identifiability_sentences(summary: Summary) -> list[str]:
    if summary.diagnostics.profiles == "off" and not _ordinal_only(summary):
        return [
            "The identifiability check was not run (--diagnostics off): no profile likelihood says whether these "
            "comparisons can tell the position, length and affinity effects from quality, so none is reported "
            "prior-selected; the bias table calls a global effect identified when its posterior variance is below "
            "half its prior's."
        ]
    out = []
    profiles = summary.diagnostics.profile_likelihood
    for cov, info in summary.diagnostics.identifiability.items():
        rng = finite(info.profile_range_nats)
        method = profiles[cov].method if cov in profiles else None
        how = f"; {method}" if method else ""
        rng_text = f" (profile-likelihood range {rng:.3g} nats{how})" if rng is not None else ""
        if info.prior_selected:
            s = f"The {cov} coefficient is prior-selected: these comparisons cannot tell it from quality{rng_text}."
        else:
            s = f"The {cov} coefficient is identified by the data{rng_text}."
        if finite(info.corr_theta) is not None:
            s += f" Correlation between the corrected ratings and mean {cov} per model: {info.corr_theta:.2f}"
            s += f" (correction starts to hurt near {info.crossing:.2f})." if finite(info.crossing) is not None else "."
        out.append(s)
    return out


def _connectivity_sentences(summary: Summary) -> list[str]:
    conn = summary.diagnostics.connectivity
    if conn.n_components <= 1:
        return ["The comparison graph is connected: every model can be compared with every other."]
    s = (
        f"The comparison graph falls into {conn.n_components} separate groups; ratings are comparable only within "
        "a group, never across groups."
    )
    groups = []
    for i, comp in enumerate(sorted(conn.components, key=len, reverse=True)[:10], 1):
        names = ", ".join(comp[:8]) + (", …" if len(comp) > 8 else "")
        groups.append(f"group {i} ({len(comp)} models): {names}")
    return [s + " " + "; ".join(groups) + "."]


def _judges_where(summary: Summary, listed: int, shown: int, files: str) -> tuple[int, int, str]:
    """(judges in all, judges shown, where every one is) for :func:`~biasboard.report.judges.left_out_note`: past
    :data:`SUMMARY_JUDGES_MAX` judges the JSON files keep the busiest only, so the note names the Parquet files that
    hold them all (it said bias.json and summary.json held every judge, which held 201 and 200 of 4,999)."""
    tables = summary.judge_tables
    if tables is None:
        return listed, shown, files
    every = ", ".join(sorted(set(tables.files.values())))
    return tables.total, shown, f"{every} (the JSON files keep the {tables.kept:,} with the most battles)"


def _diagnostics(summary: Summary) -> str:
    diag = summary.diagnostics
    sentences = []
    tau, rho = finite(summary.kendall_tau), finite(summary.spearman)
    if tau is not None:
        agree = (
            "the same order"
            if tau == 1.0
            else "almost the same order"
            if tau >= 0.9
            else "a similar order"
            if tau >= 0.7
            else "noticeably different orders"
        )
        s = f"Kendall τ between the naive and the corrected rankings is {tau:.3f}: the two leaderboards give {agree}."
        if rho is not None:
            s += f" Spearman ρ is {rho:.3f}."
        sentences.append(s)
    elif summary.models >= 2:  # the header's "—" needs its reason
        sentences.append(
            "Kendall τ and Spearman ρ between the naive and the corrected rankings are undefined: a leaderboard that "
            "rates every model the same (every battle a tie, say) has no order to compare."
        )
    sentences += _identifiability_sentences(summary) + _connectivity_sentences(summary)
    body = "".join(f"<p>{esc(s)}</p>" for s in sentences)
    head = '<tr><th class="l">Fit</th><th>Converged</th><th>Iterations</th><th>Gradient norm</th></tr>'
    rows = [
        f'<tr><td class="l">{esc(name)}</td><td>{"yes" if c.converged else "no"}</td><td>{c.iterations}</td>'
        f"<td>{esc(f'{c.grad_norm:.2g}' if finite(c.grad_norm) is not None else '—')}</td></tr>"
        for name, c in diag.convergence.items()
    ]
    body += "<h3>Convergence</h3>" + _table("convergence", head, rows)
    if _ordinal_only(summary):
        settings = ["ordinal-only: one likelihood, so ω and the length covariate do not apply"]
    else:
        settings = [
            # (ω weighs the grades against the battles: on a board without grades it does not apply)
            f"ω (weight of pairwise vs ordinal evidence) {fmt(diag.omega, 2)}"
            if diag.omega is not None and _graded(summary)
            else "",
            f"length covariate clipped at ±{diag.length_clip:g}"
            if diag.length_clip is not None
            else "length covariate unbounded",
            f"naive ties: {diag.naive.tie_convention}" if diag.naive.tie_convention else "",
        ]
    body += f'<p class="note">{esc("; ".join(s for s in settings if s))}.</p>'
    return _section("diagnostics", "Diagnostics", body)


def _reference_note(summary: Summary) -> str:
    """Which reference the corrected board is relative to, with the reference's own effects (95% CI).

    An effect the rating takes as zero (no verdicts of the reference carry it, or its estimate is not told from
    zero) says so beside its estimate: "length -0.03 [-0.09, 0.04]" alone read as the β_r the corrected rating
    applies, while it applied 0."""
    reference = summary.reference
    if reference is None:
        return ""
    effects = "; ".join(
        f"{name} {fmt(e.get('estimate'), 2)}"
        + (f" [{fmt(e.get('ci_low'), 2)}, {fmt(e.get('ci_high'), 2)}]" if e.get("ci_low") is not None else "")
        + (f" ({e['source']})" if zero_reference_effect(e) and e.get("source") else "")
        for name, e in reference.own_effects.items()
    )
    return (
        f'<p class="note">Reference: {esc(reference.description)}.'
        + (f" Its own effects: {esc(effects)}." if effects else "")
        + "</p>"
    )


#: The gate table's headers in words (the decisions' keys are the summary's).
GATE_COLUMNS: dict[str, str] = {
    "excess": "excess (all corrections on)",
    "gain_nats": "gain (nats)",
    "half_z2": "½z² (Wald)",
    "group_chi2": "joint χ²",
    "group_df": "df",
    "group_p": "joint p",
    "group_p_holm": "Holm p",
    "se": "SE",
}


#: Why neither a judge's z nor its ½z² switches its correction on (:data:`GATE_READING`).
GATE_DECIDES = (
    "Neither decides: an effect is switched on for all its judges or none, by the joint χ² of every judge's excess, "
    "Holm-corrected over the effects tested."
)
#: How the gate table's columns are read (a reader asked what "gain (nats)" is, and whether a judge's own z decides).
GATE_READING = (
    "z is a judge's excess over its SE; gain (nats) is ½z², about what freeing that one excess adds to the "
    "log-likelihood. " + GATE_DECIDES
)
#: The same for an ω-weighted fit's gate (its ½z² column ``half_z2``: :data:`~biasboard.ranking.gate.HALF_Z2_COLUMN`
#: says why it is no gain in nats there).
GATE_READING_WEIGHTED = (
    "z is a judge's excess over its SE from the Godambe (sandwich) covariance; ½z² (Wald) is half its Wald χ² on "
    "1 df — the likelihood is ω-weighted, so it is no log-likelihood gain in nats. " + GATE_DECIDES
)


def _gate_cell(column: str, value: Any) -> str:
    """A gate table cell: p-values to 3 significant digits (0.000 hid 7.75e-105), yes/no for flags."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3g}" if "_p" in column or column == "p" else fmt(value, 3)
    return "—" if value is None else str(value)


def _gate_godambe(summary: Summary) -> bool:
    """Whether the gate's z read the Godambe covariance, so its ½z² is half a Wald χ²(1), not a gain in nats
    (:data:`~biasboard.ranking.gate.HALF_Z2_COLUMN`).  Why from the fit and not from a ``half_z2`` column: a gate
    with no decision listed has no column, and its reading fell back to the plain likelihood's.  With --bootstrap
    the summary's ``uncertainty`` is "bootstrap" while the gate still reads the ω-weighted fit's sandwich: ω with
    grades says so there."""
    if summary.uncertainty == "bootstrap":
        return _grades_set_scale(summary) and summary.diagnostics.omega not in (None, 0.5)
    return _weighted(summary)


def _gate_heading(column: str, godambe: bool) -> str:
    """A gate column's header.  Why the ½z² column is headed by the fit (``godambe``, as its reading is) and not by
    its name: a summary written before the gate named it for the fit keeps ``gain_nats`` at ω ≠ 0.5, where its z read
    the Godambe covariance too, and its header "gain (nats)" stood under a reading that says it is no gain in nats."""
    if godambe and column == "gain_nats":
        column = "half_z2"
    return GATE_COLUMNS.get(column, column)


def _gate(summary: Summary) -> str:
    gate = summary.diagnostics.gate
    if gate is None and _ordinal_only(summary):  # no pairwise bias, so no reference to measure it from
        return ""
    if gate is None:
        note = _reference_note(summary) + _anchor_results(summary)
        return _section("gate", "Reference", note) if note else ""
    columns = list(dict.fromkeys(k for row in gate.decisions for k in row))
    godambe = _gate_godambe(summary)
    reading = GATE_READING_WEIGHTED if godambe else GATE_READING
    head = "<tr>" + "".join(f'<th class="l">{esc(_gate_heading(c, godambe))}</th>' for c in columns) + "</tr>"
    rows = [
        "<tr>" + "".join(f'<td class="l">{esc(_gate_cell(c, row.get(c)))}</td>' for c in columns) + "</tr>"
        for row in gate.decisions
    ]
    body = (
        _reference_note(summary) + f'<p class="note">{esc(gate.method)}: {gate.k} reference verdicts, '
        f"family-wise level {gate.level:g}. {esc(_gate_excess_meaning(summary))} {esc(reading)}</p>"
        + _table("gate", head, rows)
        + _anchor_results(summary)
    )
    return _section("gate", "Trusted-anchor gate", body)


def _gate_excess_meaning(summary: Summary) -> str:
    """What the gate's excess is beside the bias table's, in one sentence.

    Why: the two differ for the same judge and effect (a QA reader saw −0.111 here and −0.108 in the bias table)
    and neither is wrong.  The gate tests each effect in the fit with every correction on
    (:mod:`biasboard.ranking.gate`: the test comes before its decisions, so every correction is free in it), and the
    bias table is the published fit's, where what the gate (or the identifiability check) switched off is tied to
    the reference; the effects are fitted jointly, so tying one moves the others' estimates.
    """
    reference = summary.reference
    gate = summary.diagnostics.gate
    tied = gate is not None and any(row.get("enabled") is False for row in gate.decisions)
    unapplied = reference is not None and any(entry.get("applied") is False for entry in reference.unidentified)
    where = (
        "where the corrections switched off are tied to the reference, so it can differ there (the effects are fitted "
        "jointly)"
        if tied or unapplied
        else "here the same fit (no correction was switched off)"
    )
    return (
        "The excess here is each judge's in the fit with every correction on, where the test is made; the bias "
        f"table gives it in the published fit, {where}."
    )


def _listed_note(reference: Any) -> str:
    """`` Listed: …`` when the agreement table lists some of the judges only (voter-judges), else empty."""
    listed = agreement_listed_in(reference.kind, reference.notes)
    return f" Listed: {listed}." if listed else ""


def _anchor_results(summary: Summary) -> str:
    """How the judges fare against the trusted verdicts — the anchors', or the reference judges' with
    ``--reference JUDGE`` — each judge's fitted verdicts predicting them with and without its correction, and the
    audit's gold-label accuracy beside the random- and longest-pick baselines (both were in summary.json only)."""
    out = []
    reference = summary.reference
    agreement = reference.agreement if reference is not None else []
    whose = agreement_yardstick(reference.kind) if reference is not None else ""
    boards = {a["judge"]: a for a in agreement if a.get("judge") in AGREEMENT_BOARDS}
    agreement = [a for a in agreement if a.get("judge") not in boards]
    if agreement:
        head = (
            '<tr><th class="l">Judge</th><th>Accuracy, uncorrected</th><th>Accuracy, corrected</th>'
            "<th>Log loss, uncorrected</th><th>Log loss, corrected</th></tr>"
        )
        rows = [
            f'<tr><td class="name">{esc(judge_label(a.get("judge")))}</td>'
            f"<td>{pct(a.get('accuracy_uncorrected'))}</td><td>{pct(a.get('accuracy_corrected'))}</td>"
            f"<td>{fmt(a.get('log_loss_uncorrected'), 3)}</td><td>{fmt(a.get('log_loss_corrected'), 3)}</td></tr>"
            for a in agreement
        ]
        out += [
            f"<h3>Agreement with {esc(whose)}</h3>",
            f"<p class=\"note\">How well each judge's fitted verdicts predict the trusted ones on {esc(whose)}' pairs "
            "(decided verdicts; lower log loss is better): with its own effects, and with the reference's effects in "
            f"their place (its corrections applied).{esc(_listed_note(reference))}</p>",
            _table("agreement", head, rows),
        ]
    if boards:
        said = "; ".join(
            f"the {name}: accuracy {pct(b.get('accuracy_uncorrected'))}, "
            f"log loss {fmt(b.get('log_loss_uncorrected'), 3)}"
            for name, b in sorted(boards.items(), key=lambda kv: kv[0] != AGREEMENT_BOARDS[1])
        )
        out.append(f"<p class=\"note\">The boards' ratings alone predicting {esc(whose)}' verdicts: {esc(said)}.</p>")
    gold = [a for a in summary.diagnostics.order if a.gold_n_labeled]
    if gold:
        head = (
            '<tr><th class="l">Judge</th><th>Battles with a gold label</th><th>Accuracy (± SE)</th>'
            "<th>Random pick</th><th>Longest pick</th></tr>"
        )
        rows = [
            f'<tr><td class="name">{esc(judge_label(a.judge))}</td><td>{_int(a.gold_n_labeled)}</td>'
            f"<td>{esc(_pm(a.gold_accuracy, a.gold_accuracy_se))}</td><td>{fmt(a.gold_random_pick_baseline, 3)}</td>"
            f"<td>{fmt(a.gold_longest_pick_baseline, 3)}</td></tr>"
            for a in gold
        ]
        out += [
            "<h3>Gold-label accuracy</h3>",
            '<p class="note">The judge audit: on battles whose prompt and pair the anchors also judged, how often the '
            "judge picked the anchors' winner, beside always picking at random and always picking the longer answer "
            "(consistency is not validity: a judge can be consistent and wrong). ± is one standard error, a case "
            "judged in both orders counting once, not twice.</p>",
            _table("gold", head, rows),
        ]
    return "".join(out)


#: Why wide intervals at a pairwise board's ends need not mean an uncertain order (not said of an ordinal-only board,
#: whose scale the grade thresholds set: no judge has a discrimination there).  The average weighs each judge by its
#: verdicts, so a judge with a handful of them no longer widens the ends (docs/design-notes.md, "Scale of θ").
SCALE_NOTE = (
    " — though the ratings' scale is the judges' average discrimination (each judge weighted by its verdicts), and "
    "how well that is known widens the intervals at the board's ends without making the order less certain: the rank "
    "intervals say how well the order is known"
)
#: A board of battles and grades: the grades set the scale (each judge's discrimination is measured against it), so
#: :data:`SCALE_NOTE`'s average judge is not the scale there.
GRADED_SCALE_NOTE = (
    "; the ratings' scale is the grades' (each judge's discrimination measured against it), not the judges' average"
)
#: The discrimination panel's text on a board of battles and grades, where 1 is the grades' scale, not the average
#: judge's ("1 is average" beside judges all below 1 read as a board of lax judges).
GRADED_DISCRIMINATION = (
    "Discrimination (a): the judge's scale on quality differences; with grades beside the battles 1 is the grades' "
    "scale, not the judges' average{mean}, below 1 a judge that separates the models less sharply than the grades do."
)


#: The discrimination panel's text where a judge's discrimination is fixed at 1 and sets the scale
#: (``diagnostics.scale_judges``): 1 is that judge's, and the others are measured against it, not centred on 1.
FIXED_DISCRIMINATION = (
    "Discrimination (a): the judge's scale on quality differences; 1 is the discrimination of {judges}, fixed at 1 "
    "(it sets the ratings' scale), not the judges' average{mean}, below 1 a judge that separates the models less "
    "sharply than {judges} does."
)
#: :func:`_scale_note` on such a board: the scale is the fixed judge's, known exactly, not the judges' average.
FIXED_SCALE_NOTE = (
    "; the ratings' scale is the discrimination of {judges}, fixed at 1 (each other judge's discrimination measured "
    "against it), not the judges' average"
)


def _discrimination_text(desc: str, rows: list[dict[str, Any]], summary: Summary) -> str:
    """The discrimination panel's text: what its 1 is.  The grades' scale beside grades, the fixed judge's where one
    sets the scale, else ``desc`` (the judges' average).  Why: "1 is average" beside a board whose 1 is the grades' or
    one judge's read the judges below it as lax."""
    if _grades_set_scale(summary):
        return GRADED_DISCRIMINATION.format(mean=_mean_said(rows, summary))
    if summary.diagnostics.scale_judges:
        return FIXED_DISCRIMINATION.format(judges=_scale_judges(summary), mean=_mean_said(rows, summary))
    return desc


def _mean_said(rows: list[dict[str, Any]], summary: Summary) -> str:
    """`` (here 0.85: their geometric mean, …)``, the judges' average when it is not the scale; empty unknown."""
    mean = _judges_average_discrimination(rows, summary)
    return "" if mean is None else f" (here {mean:.2f}: their geometric mean, each weighted by its verdicts)"


def _judges_average_discrimination(rows: list[dict[str, Any]], summary: Summary) -> float | None:
    """The judges' average discrimination as the scale without grades defines it: the geometric mean of their a_j,
    each weighted by its battle verdicts (``Spec.disc_weights``).  Why weighted: the panel called the unweighted
    mean "the judges' average" beside notes that define that average by verdicts.

    The fit's own value over every judge (``diagnostics.judges_discrimination``) when the summary has it: a voter
    board's summary lists only its busiest judges, whose mean is not the average over all.  An older summary's is
    computed from the listed rows and ``summary.judges`` (a grader of no battle, the prior's a = 1, weighs 0; None
    when no judge listed has a verdict)."""
    if summary.diagnostics.judges_discrimination is not None:
        return summary.diagnostics.judges_discrimination
    verdicts = {j.judge: j.n for j in summary.judges}
    weighted = [(verdicts.get(r["judge"], 0), r["estimate"]) for r in rows if (r["estimate"] or 0) > 0]
    total = sum(n for n, _ in weighted)
    return math.exp(sum(n * math.log(a) for n, a in weighted) / total) if total > 0 else None


def _counts(summary: Summary) -> str:
    """The rows read, counted and rejected, with the dead letters by reason: of the battles, and of the grades
    (``--scores``) beside them.

    Why the grades' own block: a board fit on battles and grades showed the battle rows alone, so the grade rows a
    refresh read and rejected (``summary.json``'s ``score_counts``) were on no page, under "No row read was
    rejected" — below the 5% that makes a warning, a reader of the report never learnt of them.
    """
    if _ordinal_only(summary) and summary.score_counts is not None:
        body = _count_block(summary.score_counts, "reasons", grades=True)
    elif summary.score_counts is not None:
        body = "<h3>Battle rows</h3>" + _count_block(summary.counts, "reasons", grades=False)
        body += "<h3>Grade rows (--scores)</h3>" + _count_block(summary.score_counts, "grade-reasons", grades=True)
    else:
        body = _count_block(summary.counts, "reasons", grades=False)
    return _section("counts", "Counts", body + _import_rejections(summary))


def _count_block(counts: Counts, cls: str, *, grades: bool) -> str:
    """One kind of row's counts: cards, whether read = counted + rejected, and the rejected rows by reason.
    ``grades``: single grades, which have no self-battles and whose dead letters are grade rows."""
    reasons = _by_count(counts.rejected)
    cards = _cards(
        [
            ("rows read", _int(counts.read)),
            ("counted", _int(counts.counted)),
            ("rejected", _int(counts.rejected_total)),
            ("self-battles (same model on both sides)", None if grades else _int(counts.self_battles)),
        ]
    )
    body = cards
    if counts.conserved:
        body += '<p class="note">Every row read is either counted or a dead letter with a reason.</p>'
    else:
        body += (
            f'<p class="warn">Rows read ({_int(counts.read)}) ≠ counted ({_int(counts.counted)}) + rejected '
            f"({_int(counts.rejected_total)}): {_int(counts.read - counts.counted - counts.rejected_total)} "
            "rows are unaccounted for.</p>"
        )
    if reasons:
        kind = "grade " if grades else ""
        body += f"<h3>Dead letters by reason{' (grades)' if grades else ''}</h3>"
        body += _figure(
            hbar_chart(
                [k for k, _ in reasons],
                [v for _, v in reasons],
                title=f"Rejected {kind}rows by reason",
                colour=DOWN_COLOUR,
            )
        )
        body += _reasons_table(cls, reasons)
    else:
        body += f'<p class="note">No {"grade " if grades else ""}row read was rejected.</p>'
    return body


def _by_count(rejected: Mapping[str, int]) -> list[tuple[str, int]]:
    """Reasons, most rows first."""
    return sorted(rejected.items(), key=lambda kv: (-kv[1], kv[0]))


def _reasons_table(cls: str, reasons: list[tuple[str, int]]) -> str:
    """Rows per reason: one table for the refresh's dead letters and the import's, so the two read alike."""
    rows = [f'<tr><td class="name">{esc(k)}</td><td>{_int(v)}</td></tr>' for k, v in reasons]
    return _table(cls, '<tr><th class="l">Reason</th><th>Rows</th></tr>', rows)


def _import_rejections(summary: Summary) -> str:
    """The rows ``biasboard import`` rejected before this refresh read its folder: not among the rows read above,
    and shown apart, so a reader does not take every row of the source to have reached the board."""
    if not summary.import_rejected:
        return ""
    body = ["<h3>Rejected at import</h3>"]
    for found in summary.import_rejected:
        where = f"the {found.option} folder's {found.path.rstrip('/').rsplit('/', 1)[-1]}"
        if not found.rejected_total:
            body.append(f'<p class="note">The import that wrote the {esc(found.option)} folder rejected no row.</p>')
            continue
        one = found.rejected_total == 1
        body.append(
            f'<p class="note">{_int(found.rejected_total)} {"row" if one else "rows"} of the source never became '
            f"input: <code>biasboard import</code> rejected {'it' if one else 'them'} ({esc(where)}, counted at this "
            f"refresh). {'It is' if one else 'They are'} not among the rows read above.</p>"
        )
        body.append(_reasons_table("import-reasons", _by_count(found.rejected)))
    return "".join(body)


def _judges(summary: Summary) -> str:
    if not summary.judges:
        return ""
    head = (
        '<tr><th class="l">Judge</th><th class="l">Family</th><th>Battles</th><th>Models</th>'
        "<th>First shown wins</th><th>Second shown wins</th><th>Ties</th><th>Self-battles</th></tr>"
    )
    judges = keep(summary.judges, lambda j: j.judge, shown_judges(_judge_battles(summary)))
    rows = [
        f'<tr><td class="name">{esc(j.judge)}</td><td class="l">{esc(j.judge_family)}</td><td>{_int(j.n)}</td>'
        f"<td>{_int(j.models)}</td><td>{pct(j.win_a_share)}</td><td>{pct(j.win_b_share)}</td>"
        f"<td>{pct(j.tie_share)}</td><td>{_int(j.self_battles)}</td></tr>"
        for j in judges
    ]
    tables = summary.judge_tables
    where = tables.files.get("judges", "summary.json") if tables is not None else "summary.json"
    note = left_out_note(summary.n_judges, len(judges), where)
    return _section("judges", "Judges", note + _table("judges", head, rows) + _order_unknown_note(judges))


def _order_unknown_note(judges: list[JudgeCounts]) -> str:
    """Under the judges table, when some battles' shown order is unknown: what the first/second shares are of.

    Why: such a battle's ``model_a`` is only the listed answer (AlpacaEval's baseline), so its wins are no
    first-shown wins; the shares leave those battles out, and the reader must know the ties do not.
    """
    unknown = [(j, j.n - j.order_known) for j in judges if j.order_known is not None and j.order_known < j.n]
    if not unknown:
        return ""
    named = ", ".join(f"{esc(j.judge)} {_int(k)} of {_int(j.n)}" for j, k in unknown[:5])
    more = f" and {len(unknown) - 5} more judges" if len(unknown) > 5 else ""
    return (
        f'<p class="note">First and second shown wins are shares of the battles whose shown order the log records; '
        f"ties are shares of all battles. Shown order unknown (listed order only, so no first-shown answer): "
        f"{named}{more}. A dash: no battle of that judge has a known order.</p>"
    )


# --------------------------------------------------------------------------- the page


def render_report(
    leaderboard: pl.DataFrame,
    bias: pl.DataFrame,
    summary: Summary,
    title: str = "biasboard report",
    *,
    top_n: int = TOP_N,
    movers: int = MOVERS,
    slices: pl.DataFrame | None = None,
) -> str:
    """The whole report.html as one string (UTF-8 text; the caller writes it).

    ``leaderboard`` has the published leaderboard columns (one row per model), ``bias`` the bias table's
    (one row per judge × effect), ``summary`` is the snapshot's :class:`~biasboard.schemas.summary.Summary`;
    ``slices``: the per-slice boards (slices.parquet: ``slice`` then the leaderboard columns), when asked.
    """
    lb = leaderboard.to_dicts()
    corrected_rank = {r["model"]: r["rank_corrected"] for r in lb}
    sections = [
        _header(title, lb, summary),
        _warnings(summary),
        _leaderboard(lb, summary, top_n, movers),
        _slices(slices, summary),
        _style(summary),
        _head_to_head(summary, {r["model"]: r.get("component") for r in lb}),
        _bias(bias, summary),
        _judge_audit(summary, corrected_rank),
        _gate(summary),
        _diagnostics(summary),
        _counts(summary),
        _judges(summary),
    ]
    nav_items = [
        ("leaderboard", "Leaderboards"),
        ("slices", "Slices"),
        ("style", "Style"),
        ("head-to-head", "Head to head"),
        ("bias", "Biases"),
        ("audit", "Judge audit"),
        ("gate", "Gate"),
        ("diagnostics", "Diagnostics"),
        ("counts", "Counts"),
        ("judges", "Judges"),
    ]
    body = "".join(s for s in sections if s)
    nav = " · ".join(f'<a href="#{a}">{esc(t)}</a>' for a, t in nav_items if f'<section id="{a}">' in body)
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{esc(CSP)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head>"
        f'<body><main><nav class="note">{nav}</nav>{body}'
        "<footer>Generated by biasboard. This page is self-contained: it loads nothing from the network.</footer>"
        "</main></body></html>\n"
    )


__all__ = ["render_report"]
