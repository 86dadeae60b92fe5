"""report.html: one self-contained page a person reads to judge a snapshot.

Why this shape: the page is published beside the numbers and must open anywhere, offline, years
later — so it holds no script, no font, no stylesheet or image to fetch (inline CSS, inline SVG), and a
Content-Security-Policy that forbids loading anything even if some fragment tried.  Model and judge
names come from battle logs we do not control: every string from the data is escaped with
``html.escape(quote=True)`` in text, attributes and SVG alike; the audit fragment is passed through an
allow-by-default, deny-the-dangerous re-serializer (:func:`sanitize_fragment`).

Inputs are the snapshot contracts of DESIGN §6.  The page is tolerant by design: whatever part of
``summary`` (or a column of the tables) is absent is skipped, never guessed and never a crash.  The
``summary["diagnostics"]`` shapes it reads (all optional, each also accepted as a list of dicts carrying
the key field):

- ``order`` (or ``per_judge`` / ``position``): ``{judge: {"flip_rate", "split": {"A", "B", "tie"},
  "n_pairs", "consistent_win_rate", "consistent_win_rate_se"}}`` — the seed-001 statistics, for judges
  whose data has both orders;
- ``identifiability``: ``{covariate: {"profile_range_nats", "prior_selected", "corr_theta",
  "crossing", "message"}}``;
- ``connectivity``: ``{"n_components", "components": [[model, ...], ...]}``.

Any other diagnostics key is shown as a small generic table so nothing the fit reports is lost.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from html.parser import HTMLParser
from typing import Any

import polars as pl
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
    slope_chart,
    split_bars,
)

#: How many models the plots show at most: the top ``TOP_N`` by corrected rank plus the ``MOVERS``
#: largest rank changes outside them.  The full table always lists every model.
TOP_N = 25
MOVERS = 10

GLOBAL_JUDGE = "*"

#: Plain-word meaning of each bias effect, and where its "no bias" line sits.
EFFECTS: dict[str, tuple[str, float | None]] = {
    "position": ("Position (γ): logit advantage of the answer shown first; above 0 favours the first answer.", 0.0),
    "length": ("Verbosity (β): logit change per SD of log-length difference; above 0 favours longer answers.", 0.0),
    "affinity": ("Same-family affinity (λ): logit advantage for a model of the judge's own family.", 0.0),
    "tie": ("Tie propensity (ν): how readily the judge calls a tie; higher is less decisive.", None),
    "discrimination": ("Discrimination (a): the judge's scale on quality differences; 1 is average, "
                       "below 1 a lax judge that flattens the leaderboard.", 1.0),
    "severity": ("Severity (α): how harshly the judge scores in ordinal grading.", 0.0),
    "position_sd": ("Spread of per-judge position effects, SD(u_j).", 0.0),
}

CSS = """
:root { --fg:#24292f; --muted:#6b7580; --line:#d8dee4; --soft:#f6f8fa; --accent:#d9792b; --naive:#5b7db8; }
* { box-sizing: border-box; }
body { margin:0; color:var(--fg); background:#fff;
  font:14px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans","Helvetica Neue",Arial,sans-serif; }
main { max-width:1120px; margin:0 auto; padding:24px 28px 64px; }
h1 { font-size:26px; margin:0 0 4px; }
h2 { font-size:19px; margin:40px 0 8px; padding-bottom:4px; border-bottom:1px solid var(--line); }
h3 { font-size:15px; margin:22px 0 6px; }
p, li { max-width:80ch; }
.sub { color:var(--muted); margin:0 0 18px; }
.cards { display:flex; flex-wrap:wrap; gap:12px; margin:18px 0; }
.card { border:1px solid var(--line); border-radius:8px; padding:10px 14px; min-width:120px; background:var(--soft); }
.card .v { font-size:22px; font-weight:600; font-variant-numeric:tabular-nums; }
.card .k { color:var(--muted); font-size:12px; }
.warn { border-left:4px solid #d4a72c; background:#fff8e5; padding:10px 16px; border-radius:4px; margin:16px 0; }
.warn ul { margin:4px 0; padding-left:20px; }
.note { color:var(--muted); font-size:13px; }
.empty { color:var(--muted); font-style:italic; }
figure { margin:12px 0 20px; overflow-x:auto; }
figcaption { color:var(--muted); font-size:13px; margin-top:4px; }
svg { max-width:100%; height:auto; }
table { border-collapse:collapse; font-variant-numeric:tabular-nums; margin:8px 0 16px; }
th, td { padding:4px 10px; border-bottom:1px solid var(--line); text-align:right; vertical-align:top; }
th { background:var(--soft); font-weight:600; position:sticky; top:0; }
th[colspan] { text-align:center; }
.panels { display:grid; grid-template-columns:repeat(auto-fit, minmax(500px, 1fr)); gap:4px 28px; }
.panels h3 { margin-top:14px; } .panels p { margin:0; }
td.l, th.l { text-align:left; }
td.name { text-align:left; max-width:360px; overflow-wrap:anywhere; }
tbody tr:hover { background:#fafbfc; }
.grp-c { border-bottom:2px solid var(--accent); }
.grp-n { border-bottom:2px solid var(--naive); }
.up { color:#2a9d5b; } .down { color:#c8443a; } .flat { color:var(--muted); }
.ci { color:var(--muted); font-size:12px; }
.tag { display:inline-block; font-size:11px; padding:0 6px; border-radius:9px; background:#eef1f4; color:var(--muted); }
.tag.bad { background:#fde8e6; color:#a4332a; } .tag.ok { background:#e6f4ea; color:#1f7a44; }
details > summary { cursor:pointer; color:var(--muted); margin:6px 0; }
.audit { border:1px solid var(--line); border-radius:8px; padding:4px 16px 12px; }
footer { margin-top:48px; color:var(--muted); font-size:12px; }
"""

#: No fetch of any kind: the page must render from this one file.
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'none'; base-uri 'none'"


# --------------------------------------------------------------------------- small tolerant helpers


def _rows(frame: pl.DataFrame | Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
    """Rows of a polars frame (or an already-materialised list of dicts); nothing → []."""
    if frame is None:
        return []
    if isinstance(frame, pl.DataFrame):
        return frame.to_dicts()
    return [dict(r) for r in frame]


def _get(mapping: Any, *path: str, default: Any = None) -> Any:
    """``mapping[path[0]][path[1]]…`` or ``default`` as soon as a step is missing or not a mapping."""
    cur = mapping
    for key in path:
        if not isinstance(cur, Mapping) or key not in cur:
            return default
        cur = cur[key]
    return cur


def _first(mapping: Any, keys: Iterable[str]) -> Any:
    """The value of the first of ``keys`` present (and not None) in ``mapping``."""
    if not isinstance(mapping, Mapping):
        return None
    for key in keys:
        if mapping.get(key) is not None:
            return mapping[key]
    return None


def _keyed(value: Any, key_field: str) -> list[tuple[str, Any]]:
    """``{name: stats}`` or ``[{key_field: name, ...}]`` → ``[(name, stats)]``; anything else → []."""
    if isinstance(value, Mapping):
        return [(str(k), v) for k, v in value.items()]
    if isinstance(value, list):
        return [(str(v.get(key_field, "?")), v) for v in value if isinstance(v, Mapping)]
    return []


def _int(value: Any) -> str:
    f = finite(value)
    return "—" if f is None else f"{f:,.0f}"


def _pct(value: Any, digits: int = 1) -> str:
    f = finite(value)
    return "—" if f is None else f"{f:.{digits}%}"


def _judge_label(judge: Any) -> str:
    return "all judges (global)" if judge == GLOBAL_JUDGE else str(judge)


def _rank_key(row: Mapping[str, Any], col: str) -> tuple[float, float, str]:
    r = finite(row.get(col))
    rating = finite(row.get(col.replace("rank", "rating")))
    return (r if r is not None else math.inf, -(rating if rating is not None else -math.inf), str(row.get("model")))


def _rank_move(row: Mapping[str, Any]) -> float | None:
    """Places gained after correction (naive rank − corrected rank), from the ranks themselves.

    Falls back to the ``rank_change`` column only when a rank is missing, so the arrow shown always
    agrees with the two rank columns printed next to it.
    """
    a, b = finite(row.get("rank_naive")), finite(row.get("rank_corrected"))
    if a is not None and b is not None:
        return a - b
    return finite(row.get("rank_change"))


def _n(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def _section(anchor: str, heading: str, body: str) -> str:
    return f'<section id="{esc(anchor)}"><h2>{esc(heading)}</h2>{body}</section>'


def _figure(svg: str, caption: str = "") -> str:
    cap = f"<figcaption>{esc(caption)}</figcaption>" if caption else ""
    return f"<figure>{svg}{cap}</figure>"


# --------------------------------------------------------------------------- sections


def _header(title: str, lb: list[dict[str, Any]], summary: Mapping[str, Any]) -> str:
    counts = summary.get("counts") if isinstance(summary.get("counts"), Mapping) else {}
    judges = summary.get("judges")
    n_judges = len(judges) if isinstance(judges, (list, tuple, Mapping)) else finite(judges)
    cards = [
        ("models", _int(len(lb)) if lb else None),
        ("judges", _int(n_judges) if n_judges is not None else None),
        ("battles counted", _int(counts.get("counted")) if "counted" in counts else None),
        ("Kendall τ naive vs corrected", fmt(summary.get("kendall_tau"), 3) if "kendall_tau" in summary else None),
        ("Spearman ρ", fmt(summary.get("spearman"), 3) if "spearman" in summary else None),
    ]
    card_html = "".join(
        f'<div class="card"><div class="v">{esc(v)}</div><div class="k">{esc(k)}</div></div>'
        for k, v in cards
        if v is not None
    )
    sub = []
    for key, label in (("snapshot_id", "snapshot"), ("snapshot", "snapshot"), ("generated_at", "generated")):
        val = summary.get(key)
        if isinstance(val, (str, int, float)) and not isinstance(val, bool):
            sub.append(f"{label} {val}")
    sub.append("naive Bradley–Terry beside the judge-bias-aware model")
    return f"<header><h1>{esc(title)}</h1><p class=\"sub\">{esc(' · '.join(sub))}</p>" + (
        f'<div class="cards">{card_html}</div>' if card_html else ""
    ) + "</header>"


def _warnings(summary: Mapping[str, Any]) -> str:
    warns = summary.get("warnings")
    if isinstance(warns, str):
        warns = [warns]
    if not isinstance(warns, (list, tuple)) or not warns:
        return ""
    items = "".join(f"<li>{esc(w)}</li>" for w in warns)
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


def _leaderboard(lb: list[dict[str, Any]], summary: Mapping[str, Any], top_n: int, movers: int) -> str:
    if not lb:
        return _section("leaderboard", "Leaderboards", '<p class="empty">No models in this snapshot.</p>')
    ci_level = finite(summary.get("ci_level"))
    ci_name = f"{ci_level:.0%} CI" if ci_level is not None and 0 < ci_level < 1 else "CI"
    k = finite(summary.get("top_k"))
    ptop = f"P(top {k:.0f})" if k is not None else "P(top k)"
    ordered = sorted(lb, key=lambda r: _rank_key(r, "rank_corrected"))
    subset = _plot_subset(lb, top_n, movers)
    shown = len(subset)
    if shown < len(lb):
        scope = (f"Showing {shown} of {len(lb)} models: the top {top_n} by corrected rating and the "
                 f"largest rank changes among the rest (below the dashed rule). Every model is in the table below.")
    else:
        scope = f"All {len(lb)} models, ordered by corrected rank."
    labels = [f"{_int(r.get('rank_corrected'))}. {r.get('model')}" for r in subset]
    tips = [
        f"{r.get('model')} — corrected #{_int(r.get('rank_corrected'))}, naive #{_int(r.get('rank_naive'))}"
        for r in subset
    ]
    forest = forest_plot(
        labels,
        [
            Series("naive", NAIVE_COLOUR, [r.get("rating_naive") for r in subset],
                   [r.get("ci_low_naive") for r in subset], [r.get("ci_high_naive") for r in subset]),
            Series("corrected", CORRECTED_COLOUR, [r.get("rating_corrected") for r in subset],
                   [r.get("ci_low_corrected") for r in subset], [r.get("ci_high_corrected") for r in subset]),
        ],
        title="Ratings with confidence intervals, naive and corrected",
        x_label=f"rating (Elo-like scale) with {ci_name}",
        tooltips=tips,
        breaks=[top_n] if shown < len(lb) else [],
        width=860,
    )
    slope = slope_chart(
        [str(r.get("model")) for r in subset],
        [r.get("rank_naive") for r in subset],
        [r.get("rank_corrected") for r in subset],
        title="Rank change from the naive to the corrected leaderboard",
        left_title="naive rank",
        right_title="corrected rank",
        width=860,
    )
    moved = [m for m in (_rank_move(r) for r in lb) if m is not None]
    n_up = sum(1 for m in moved if m > 0)
    n_down = sum(1 for m in moved if m < 0)
    n_same = len(moved) - n_up - n_down
    change_note = (f"{_n(n_up, 'model moves', 'models move')} up and {n_down} down once the judges' biases are "
                   f"accounted for; {_n(n_same, 'keeps its', 'keep their')} rank.") if moved else ""

    body = [
        f'<p class="note">{esc(scope)} Dots are ratings, bars their {esc(ci_name)}s. '
        "Overlapping intervals mean the data cannot order those models with confidence.</p>",
        _figure(forest),
        "<h3>Rank change</h3>",
        f'<p class="note">{esc(change_note)}</p>' if change_note else "",
        _figure(slope, "Green: moves up after correction; red: moves down; grey: unchanged."),
        "<h3>Full table</h3>",
        _leaderboard_table(ordered, ci_name, ptop),
    ]
    return _section("leaderboard", "Leaderboards: naive and corrected", "".join(body))


def _leaderboard_table(ordered: list[dict[str, Any]], ci_name: str, ptop: str) -> str:
    head = (
        "<thead><tr>"
        '<th class="l" rowspan="2">Model</th>'
        '<th colspan="2" class="grp-c">Corrected</th>'
        '<th colspan="2" class="grp-n">Naive</th>'
        '<th rowspan="2" title="naive rank − corrected rank">Change</th>'
        f'<th rowspan="2">{esc(ptop)}</th><th rowspan="2">Battles</th></tr>'
        f'<tr><th>Rank</th><th>Rating ({esc(ci_name)})</th><th>Rank</th><th>Rating ({esc(ci_name)})</th></tr>'
        "</thead>"
    )
    body = []
    for r in ordered:
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
            lo, hi = r.get(f"ci_low_{kind}"), r.get(f"ci_high_{kind}")
            ci = (f' <span class="ci">[{fmt(lo)}, {fmt(hi)}]</span>'
                  if finite(lo) is not None or finite(hi) is not None else "")
            return f"{fmt(r.get(f'rating_{kind}'))}{ci}"

        body.append(
            "<tr>"
            f'<td class="name">{esc(r.get("model", "—"))}</td>'
            f"<td>{_int(r.get('rank_corrected'))}</td><td>{rating('corrected')}</td>"
            f"<td>{_int(r.get('rank_naive'))}</td><td>{rating('naive')}</td>"
            f"<td>{change}</td><td>{fmt(r.get('p_top_k'), 2)}</td><td>{_int(r.get('n_battles'))}</td>"
            "</tr>"
        )
    return f'<table class="leaderboard">{head}<tbody>{"".join(body)}</tbody></table>'


def _effect_order(effects: Iterable[str]) -> list[str]:
    known = list(EFFECTS)
    return sorted(set(effects), key=lambda e: (known.index(e) if e in known else len(known), e))


def _judge_order(judges: Iterable[Any]) -> list[Any]:
    return sorted(set(judges), key=lambda j: (j != GLOBAL_JUDGE, str(j)))


def _bias(bias: list[dict[str, Any]]) -> str:
    if not bias:
        return _section("bias", "Judge biases", '<p class="empty">No bias coefficients in this snapshot.</p>')
    parts = [
        '<p class="note">Each panel is one effect; rows are judges (the global term first). Filled dots are '
        "identified by the data; hollow dots are not identified, so their value comes from the prior. "
        "The dashed line marks no bias.</p>"
    ]
    disabled: list[str] = []
    panels: list[str] = []
    for effect in _effect_order(str(r.get("effect")) for r in bias):
        rows = [r for r in bias if str(r.get("effect")) == effect]
        for r in rows:
            if r.get("enabled") is False:
                disabled.append(f"{effect} ({_judge_label(r.get('judge'))})")
        rows = [r for r in rows if r.get("enabled") is not False]
        if not rows:
            continue
        order = _judge_order(r.get("judge") for r in rows)
        by_judge = {r.get("judge"): r for r in rows}
        ordered = [by_judge[j] for j in order]
        desc, ref = EFFECTS.get(effect, ("", 0.0))
        svg = forest_plot(
            [_judge_label(r.get("judge")) for r in ordered],
            [Series("", CORRECTED_COLOUR, [r.get("estimate") for r in ordered],
                    [r.get("ci_low") for r in ordered], [r.get("ci_high") for r in ordered],
                    hollow=[r.get("identified") is False for r in ordered])],
            title=f"{effect} coefficient per judge",
            reference=ref,
            width=540,
        )
        panels.append(f'<div><h3>{esc(effect)}</h3><p class="note">{esc(desc)}</p>{_figure(svg)}</div>')
    parts.append(f'<div class="panels">{"".join(panels)}</div>')
    if disabled:
        parts.append(f'<p class="note">Not fitted (disabled): {esc(", ".join(disabled))}.</p>')
    parts.append(_bias_table(bias))
    return _section("bias", "Judge biases", "".join(parts))


def _bias_table(bias: list[dict[str, Any]]) -> str:
    order = {e: i for i, e in enumerate(_effect_order(str(r.get("effect")) for r in bias))}
    rows = sorted(bias, key=lambda r: (order.get(str(r.get("effect")), 0), r.get("judge") != GLOBAL_JUDGE,
                                       str(r.get("judge"))))

    def flag(value: Any, yes: str, no: str) -> str:
        if value is True:
            return f'<span class="tag ok">{yes}</span>'
        if value is False:
            return f'<span class="tag bad">{no}</span>'
        return "—"

    boot = any(finite(r.get("boot_ci_low")) is not None for r in rows)

    def boot_cell(r: Mapping[str, Any]) -> str:
        return f'<td class="ci">[{fmt(r.get("boot_ci_low"), 3)}, {fmt(r.get("boot_ci_high"), 3)}]</td>' if boot else ""

    body = "".join(
        "<tr>"
        f'<td class="name">{esc(_judge_label(r.get("judge")))}</td><td class="l">{esc(r.get("effect", "—"))}</td>'
        f"<td>{fmt(r.get('estimate'), 3)}</td>"
        f'<td class="ci">[{fmt(r.get("ci_low"), 3)}, {fmt(r.get("ci_high"), 3)}]</td>{boot_cell(r)}'
        f"<td>{flag(r.get('identified'), 'identified', 'prior-selected')}</td>"
        f"<td>{flag(r.get('enabled'), 'on', 'off')}</td>"
        f'<td class="l">{esc(r.get("note") or "")}</td>'
        "</tr>"
        for r in rows
    )
    return (
        f"<details><summary>All {len(rows)} coefficients as a table</summary>"
        '<table class="bias"><thead><tr><th class="l">Judge</th><th class="l">Effect</th><th>Estimate</th>'
        f'<th>CI</th>{"<th>Bootstrap CI</th>" if boot else ""}'
        '<th>Identified</th><th>Enabled</th><th class="l">Note</th></tr></thead>'
        f"<tbody>{body}</tbody></table></details>"
    )


#: Accepted spellings of the split's parts; the ``slot_*`` ones are the audit's per-judge table columns.
_SPLIT_KEYS = {
    "A": ("A", "a", "first", "model_a", "share_a", "a_share", "first_share", "slot_first_share"),
    "B": ("B", "b", "second", "model_b", "share_b", "b_share", "second_share", "slot_second_share"),
    "tie": ("tie", "ties", "share_tie", "tie_share", "slot_tie_share"),
}
_FLIP_KEYS = ("flip_rate", "order_flip_rate")
#: Where the diagnostics may keep per-judge order statistics (a mapping judge → stats, or records with "judge").
_ORDER_KEYS = ("order", "per_judge", "position", "order_stats", "judges")
_PAIRS_KEYS = ("n_pairs", "order_pairs", "pairs")


def _order_stats(diag: Mapping[str, Any]) -> tuple[str | None, list[tuple[str, dict[str, Any]]]]:
    """Per-judge order statistics (flip rate, A/B/tie split) and the diagnostics key they were found under.

    The first of ``_ORDER_KEYS`` holding any judge with a flip rate or a split wins; a key holding something
    else is left for the generic diagnostics table.
    """
    for key in _ORDER_KEYS:
        out = []
        for judge, stats in _keyed(diag.get(key), "judge"):
            if not isinstance(stats, Mapping):
                continue
            split_src = stats.get("split") if isinstance(stats.get("split"), Mapping) else stats
            split = {k: finite(_first(split_src, keys)) for k, keys in _SPLIT_KEYS.items()}
            flip = finite(_first(stats, _FLIP_KEYS))
            if flip is None and all(v is None for v in split.values()):
                continue
            out.append((judge, {**stats, "flip_rate": flip, "split_norm": split}))
        if out:
            return key, sorted(out, key=lambda js: (js[0] != GLOBAL_JUDGE, js[0]))
    return None, []


def _position(diag: Mapping[str, Any]) -> str:
    _, stats = _order_stats(diag)
    if not stats:
        return ""
    labels = [_judge_label(j) for j, _ in stats]
    parts = [Part(name, colour, [s["split_norm"][key] for _, s in stats])
             for key, name, colour in (("A", "first shown (A) wins", NAIVE_COLOUR),
                                       ("B", "second shown (B) wins", CORRECTED_COLOUR),
                                       ("tie", "tie", FLAT_COLOUR))]
    notes = [f"flip rate {_pct(s['flip_rate'])}" if s["flip_rate"] is not None else "not seen in both orders"
             for _, s in stats]
    svg = split_bars(labels, parts, title="Verdict split by position, per judge", annotations=notes, width=860)
    rows = []
    for judge, s in stats:
        wr, se = finite(s.get("consistent_win_rate")), finite(s.get("consistent_win_rate_se"))
        wr_text = "—" if wr is None else (f"{wr:.3f} ± {se:.3f}" if se is not None else f"{wr:.3f}")
        split = s["split_norm"]
        rows.append(
            f'<tr><td class="name">{esc(_judge_label(judge))}</td>'
            f"<td>{_int(_first(s, _PAIRS_KEYS))}</td><td>{_pct(s['flip_rate'])}</td>"
            f"<td>{fmt(split['A'], 3)}</td><td>{fmt(split['B'], 3)}</td><td>{fmt(split['tie'], 3)}</td>"
            f"<td>{esc(wr_text)}</td></tr>"
        )
    table = (
        '<table class="order"><thead><tr><th class="l">Judge</th><th>Pairs seen in both orders</th><th>Flip rate</th>'
        "<th>A</th><th>B</th><th>Tie</th><th>Win rate among order-consistent pairs (± SE)</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )
    body = (
        '<p class="note">How each judge\'s verdicts split between the answer shown first (A), the one shown '
        "second (B) and a tie; and, where it saw the same pair in both orders, how often its verdict flipped "
        "with the order. An unbiased judge splits A and B evenly and rarely flips.</p>" + _figure(svg) + table
    )
    return _section("position", "Position: split and flip rate per judge", body)


def _identifiability_sentences(diag: Mapping[str, Any]) -> list[str]:
    out = []
    for cov, info in _keyed(diag.get("identifiability"), "covariate"):
        if not isinstance(info, Mapping):
            continue
        rng = finite(_first(info, ("profile_range_nats", "profile_range", "range_nats")))
        rng_text = f" (profile-likelihood range {rng:.3g} nats)" if rng is not None else ""
        prior = info.get("prior_selected")
        if prior is True:
            s = f"The {cov} coefficient is prior-selected: these comparisons cannot tell it from quality{rng_text}."
        elif prior is False:
            s = f"The {cov} coefficient is identified by the data{rng_text}."
        elif rng is not None:
            s = f"The {cov} coefficient has a profile-likelihood range of {rng:.3g} nats."
        else:
            s = ""
        corr = finite(_first(info, ("corr_theta", "corr", "correlation")))
        if corr is not None:
            s += f" Correlation between model quality and mean {cov} per model: {corr:.2f}"
            cross = finite(info.get("crossing"))
            s += f" (correction starts to hurt near {cross:.2f})." if cross is not None else "."
        msg = info.get("message")
        if isinstance(msg, str) and msg:
            s += f" {msg}"
        if s.strip():
            out.append(s.strip())
    return out


def _connectivity_sentences(diag: Mapping[str, Any]) -> list[str]:
    conn = diag.get("connectivity")
    comps = conn.get("components") if isinstance(conn, Mapping) else conn if isinstance(conn, list) else None
    n = finite(_get(conn, "n_components"))
    if isinstance(comps, list):
        comps = [c for c in comps if isinstance(c, (list, tuple))]
        n = float(len(comps)) if n is None else n
    if n is None:
        return []
    if n <= 1:
        return ["The comparison graph is connected: every model can be compared with every other."]
    s = (f"The comparison graph falls into {n:.0f} separate groups; ratings are comparable only within a group, "
         "never across groups.")
    if isinstance(comps, list):
        groups = []
        for i, comp in enumerate(sorted(comps, key=len, reverse=True)[:10], 1):
            names = ", ".join(str(m) for m in comp[:8]) + (", …" if len(comp) > 8 else "")
            groups.append(f"group {i} ({len(comp)} models): {names}")
        s += " " + "; ".join(groups) + "."
    return [s]



def _generic(value: Any, depth: int = 0) -> str:
    """Any JSON-like value as small escaped HTML (nested mappings become tables, long lists are cut)."""
    if isinstance(value, Mapping):
        if depth >= 3 or not value:
            return esc(f"{len(value)} entries") if value else "—"
        items = list(value.items())
        rows = "".join(f'<tr><th class="l">{esc(k)}</th><td class="l">{_generic(v, depth + 1)}</td></tr>'
                       for k, v in items[:40])
        more = f'<tr><td class="l" colspan="2">… {len(items) - 40} more</td></tr>' if len(items) > 40 else ""
        return f"<table>{rows}{more}</table>"
    if isinstance(value, (list, tuple)):
        shown = ", ".join(_generic(v, depth + 1) if isinstance(v, (Mapping, list, tuple)) else
                          (fmt(v, 3) if isinstance(v, float) else esc(v)) for v in value[:20])
        return shown + (esc(f", … ({len(value)} in all)") if len(value) > 20 else "")
    if isinstance(value, float):
        return esc(f"{value:.4g}") if math.isfinite(value) else "—"
    return esc(value)


def _diagnostics(summary: Mapping[str, Any]) -> str:
    diag = summary.get("diagnostics")
    diag = diag if isinstance(diag, Mapping) else {}
    sentences = _identifiability_sentences(diag) + _connectivity_sentences(diag)
    tau, rho = finite(summary.get("kendall_tau")), finite(summary.get("spearman"))
    if tau is not None:
        agree = ("almost the same order" if tau >= 0.9 else "a similar order" if tau >= 0.7
                 else "noticeably different orders")
        s = f"Kendall τ between the naive and the corrected rankings is {tau:.3f}: the two leaderboards give {agree}."
        if rho is not None:
            s += f" Spearman ρ is {rho:.3f}."
        sentences.insert(0, s)
    known = {"identifiability", "connectivity", _order_stats(diag)[0]}
    others = {k: v for k, v in diag.items() if k not in known}
    if not sentences and not others:
        return ""
    body = "".join(f"<p>{esc(s)}</p>" for s in sentences)
    if others:
        body += "<h3>Other diagnostics</h3>" + _generic(others)
    return _section("diagnostics", "Diagnostics", body)


def _counts(summary: Mapping[str, Any]) -> str:
    counts = summary.get("counts")
    if not isinstance(counts, Mapping):
        return ""
    rejected = counts.get("rejected")
    by_reason = rejected if isinstance(rejected, Mapping) else counts.get("rejected_by_reason")
    by_reason = by_reason if isinstance(by_reason, Mapping) else {}
    reasons = sorted(by_reason.items(), key=lambda kv: (-(finite(kv[1]) or 0.0), str(kv[0])))
    if isinstance(rejected, Mapping):
        total_rejected: float | None = sum(finite(v) or 0.0 for v in by_reason.values())
    else:
        total_rejected = finite(rejected) if rejected is not None else finite(counts.get("rejected_total"))
    read, counted = finite(counts.get("read")), finite(counts.get("counted"))
    cards = "".join(
        f'<div class="card"><div class="v">{_int(v)}</div><div class="k">{esc(k)}</div></div>'
        for k, v in (("rows read", read), ("counted", counted), ("rejected", total_rejected),
                     ("self-battles (same model on both sides)", finite(counts.get("self_battles"))))
        if v is not None
    )
    body = f'<div class="cards">{cards}</div>'
    if read is not None and counted is not None and total_rejected is not None:
        if read == counted + total_rejected:
            body += '<p class="note">Every row read is either counted or a dead letter with a reason.</p>'
        else:
            body += (f'<p class="warn">Rows read ({_int(read)}) ≠ counted ({_int(counted)}) + rejected '
                     f"({_int(total_rejected)}): {_int(read - counted - total_rejected)} rows are unaccounted for."
                     "</p>")
    if reasons:
        body += "<h3>Dead letters by reason</h3>"
        body += _figure(hbar_chart([str(k) for k, _ in reasons], [v for _, v in reasons],
                                   title="Rejected rows by reason", colour=DOWN_COLOUR))
        body += ('<table class="reasons"><thead><tr><th class="l">Reason</th><th>Rows</th></tr></thead><tbody>'
                 + "".join(f'<tr><td class="name">{esc(k)}</td><td>{_int(v)}</td></tr>' for k, v in reasons)
                 + "</tbody></table>")
    elif total_rejected == 0:
        body += '<p class="note">No row was rejected.</p>'
    return _section("counts", "Counts", body)


def _judges(summary: Mapping[str, Any]) -> str:
    judges = summary.get("judges")
    if isinstance(judges, Mapping):
        return _section("judges", "Judges", _generic(judges))
    if isinstance(judges, (list, tuple)) and judges:
        names = ", ".join(_judge_label(j) if not isinstance(j, Mapping) else str(j.get("judge", j)) for j in judges)
        return _section("judges", "Judges", f"<p>{esc(names)}</p>")
    return ""


# --------------------------------------------------------------------------- the audit fragment


_DROP_WITH_CONTENT = {"script", "iframe", "object", "embed", "noscript", "template", "frame", "frameset",
                      "applet", "title", "head", "textarea", "select", "noembed", "noframes", "xmp"}
_DROP_TAG = {"link", "meta", "base", "form", "input", "button", "html", "body", "img", "image", "video", "audio",
             "source", "track", "picture", "use", "foreignobject", "animate", "set", "animatetransform",
             "animatemotion", "portal", "feimage"}
_URL_ATTRS = {"href", "src", "xlink:href", "action", "formaction", "background", "poster", "srcset", "data",
              "lowsrc", "ping", "cite", "codebase", "dynsrc", "longdesc", "manifest", "usemap"}
_VOID = {"area", "br", "col", "hr", "wbr"}
_BAD_CSS = ("url(", "@import", "expression(", "javascript:", "behavior:", "-moz-binding", "\\")


class _Sanitizer(HTMLParser):
    """Re-serialise an HTML fragment, dropping anything that runs code or fetches something.

    Why re-serialise rather than regex-filter: the output is built only from parsed tokens, with every
    attribute value and text node escaped again, so malformed input cannot smuggle markup through, and
    open tags are closed so the fragment cannot swallow the rest of the page.
    """

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.stack: list[str] = []
        self.skip: list[str] = []

    def _attrs(self, attrs: list[tuple[str, str | None]]) -> str:
        kept = []
        for name, value in attrs:
            low = name.lower()
            if low.startswith("on") or not all(c.isalnum() or c in "-_:." for c in low):
                continue
            v = "" if value is None else value
            if low in _URL_ATTRS and not v.strip().startswith("#"):
                continue
            if low == "style" and any(b in v.lower() for b in _BAD_CSS):
                continue
            kept.append(f' {low}="{esc(v)}"')
        return "".join(kept)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.skip:
            if tag == self.skip[-1]:
                self.skip.append(tag)
            return
        if tag in _DROP_WITH_CONTENT:
            self.skip.append(tag)
            return
        if tag in _DROP_TAG:
            return
        self.out.append(f"<{tag}{self._attrs(attrs)}>")
        if tag not in _VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.skip or tag in _DROP_WITH_CONTENT or tag in _DROP_TAG:
            return
        self.out.append(f"<{tag}{self._attrs(attrs)}/>" if tag not in _VOID else f"<{tag}{self._attrs(attrs)}>")

    def handle_endtag(self, tag: str) -> None:
        if self.skip:
            if tag == self.skip[-1]:
                self.skip.pop()
            return
        if tag in self.stack:
            while self.stack:
                top = self.stack.pop()
                self.out.append(f"</{top}>")
                if top == tag:
                    break

    def handle_data(self, data: str) -> None:
        if self.skip:
            return
        if self.stack and self.stack[-1] == "style":
            if not any(b in data.lower() for b in (*_BAD_CSS, "</")):
                self.out.append(data)
            return
        self.out.append(esc(data))

    def result(self) -> str:
        self.close()
        return "".join(self.out) + "".join(f"</{t}>" for t in reversed(self.stack))


def sanitize_fragment(fragment: str) -> str:
    """An HTML fragment made safe to embed: no script, no event handler, no external fetch, tags balanced."""
    s = _Sanitizer()
    s.feed(fragment)
    return s.result()


# --------------------------------------------------------------------------- the page


def render_report(
    leaderboard: pl.DataFrame | None,
    bias: pl.DataFrame | None,
    summary: Mapping[str, Any] | None,
    audit_html: str | None = None,
    title: str = "biasboard report",
    *,
    top_n: int = TOP_N,
    movers: int = MOVERS,
) -> str:
    """The whole report.html as one string (UTF-8 text; the caller writes it).

    ``leaderboard`` and ``bias`` follow DESIGN §6 (one row per model; one row per judge × effect),
    ``summary`` is the parsed summary.json, ``audit_html`` an HTML fragment from the audit job (sanitised
    again here). Missing parts are skipped; nothing here raises on absent keys or columns.
    """
    summary = summary if isinstance(summary, Mapping) else {}
    lb = _rows(leaderboard)
    bs = _rows(bias)
    diag = summary.get("diagnostics") if isinstance(summary.get("diagnostics"), Mapping) else {}
    sections = [
        _header(title, lb, summary),
        _warnings(summary),
        _leaderboard(lb, summary, top_n, movers),
        _bias(bs),
        _position(diag),
        _diagnostics(summary),
        _counts(summary),
        _judges(summary),
    ]
    if audit_html:
        sections.append(_section("audit", "Judge audit", f'<div class="audit">{sanitize_fragment(audit_html)}</div>'))
    nav_items = [("leaderboard", "Leaderboards"), ("bias", "Biases"), ("position", "Position"),
                 ("diagnostics", "Diagnostics"), ("counts", "Counts"), ("audit", "Audit")]
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


__all__ = ["render_report", "sanitize_fragment"]

