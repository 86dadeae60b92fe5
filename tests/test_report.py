"""report.html: offline, escaped, well-formed, faithful to the snapshot it is published with.

Every fixture comes from the real producer: a small simulated log (with hostile model and judge
names written into the battle files) goes through ``refresh`` — ingest, audit, fit, ``build_summary``
— and the page is checked against the tables and the typed Summary that the same run published.
"""

from __future__ import annotations

import dataclasses
import html
import itertools
import json
import math
import re
import subprocess
import xml.etree.ElementTree as ET
import zlib
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from biasboard.pipelines.refresh import RefreshOptions, refresh
from biasboard.report.html import render_report
from biasboard.report.svg import Part, Series, esc, forest_plot, nice_ticks, slope_chart, split_bars, text_width
from biasboard.report.text import PRINTED_AGREEMENT, agreement_text
from biasboard.schemas.summary import Counts, ReferenceInfo, Summary, agreement_listed_note
from biasboard.simulate import SimulationConfig, write_simulation
from biasboard.transforms import publish, state

HOSTILE = [
    "<script>alert(1)</script>",
    "quote \"double\" & 'single'",
    "模型-α",
    "Модель",
    "a&amp;b",  # an already-escaped-looking name must come back literally
    "https://evil.example/x.js",
    "</style><img src=x onerror=alert(2)>",
    "MEGA-WIDE-MODEL-NAME-OMEGA-MAXIMUM-WWMM-2025",  # capitals: wider than 0.6 em a letter, it ran off the charts
]
HOSTILE_JUDGES = ["<script>judge</script>", 'J & "K"', "审判官"]
VOID = {"area", "br", "col", "hr", "img", "input", "link", "meta", "wbr", "source", "track", "embed", "base"}
SVG_RE = re.compile(r"<svg\b.*?</svg>", re.S)
SIM = SimulationConfig(
    battles=4000, models=len(HOSTILE), judges=len(HOSTILE_JUDGES), days=2, both_orders=True, bad_rows=0.01, seed=7
)


def _rename_logs(root: Path) -> dict[str, str]:
    """Give the simulated models and judges hostile names, in the battle files themselves."""
    truth = json.loads((root / "truth.json").read_text())
    models = {m["model"]: HOSTILE[i] for i, m in enumerate(truth["models"])}
    judges = {j["judge"]: HOSTILE_JUDGES[i] for i, j in enumerate(truth["judges"])}
    for path in root.glob("battles/day=*/*.parquet"):
        frame = pl.read_parquet(path).with_columns(
            pl.col("model_a").replace(models), pl.col("model_b").replace(models), pl.col("judge").replace(judges)
        )
        frame.write_parquet(path)
    return models


@dataclasses.dataclass
class Published:
    leaderboard: pl.DataFrame
    bias: pl.DataFrame
    summary: Summary
    page: str
    snapshot: Path
    state: Path
    true_theta: dict[str, float]


@pytest.fixture(scope="module")
def published(tmp_path_factory) -> Published:
    root = tmp_path_factory.mktemp("report")
    logs = write_simulation(SIM, root / "logs")
    names = _rename_logs(logs)
    theta = {names[m["model"]]: m["theta"] for m in json.loads((logs / "truth.json").read_text())["models"]}
    outcome = refresh(
        str(logs / "battles" / "day=*" / "*.parquet"),
        str(root / "state"),
        str(root / "out"),
        [],
        RefreshOptions(k=3, title='Report <script>x</script> "t"'),
    )
    snap = Path(publish.resolve_snapshot(str(root / "out")))
    summary = Summary.from_json(json.loads((snap / "summary.json").read_text()))
    assert summary.to_json() == outcome.summary.to_json()  # the reader sees exactly what the producer made
    return Published(
        pl.read_parquet(snap / "leaderboard.parquet"),
        pl.read_parquet(snap / "bias.parquet"),
        summary,
        (snap / "report.html").read_text(encoding="utf-8"),
        snap,
        root / "state",
        theta,
    )


@pytest.fixture(scope="module")
def page(published) -> str:
    return published.page


# --------------------------------------------------------------------------- parsing helpers


class Checker(HTMLParser):
    """Collects tags, attributes and text, and records any imbalance of open/close tags."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.attrs: list[tuple[str, str, str | None]] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs.extend((tag, k, v) for k, v in attrs)
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs.extend((tag, k, v) for k, v in attrs)

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1] if self.stack else 'nothing'}")
            return
        self.stack.pop()


def check(page: str) -> Checker:
    c = Checker()
    c.feed(page)
    c.close()
    assert c.errors == []
    assert c.stack == []
    return c


class TableRows(HTMLParser):
    """Text of each cell of every row of the first table with the given class."""

    def __init__(self, cls: str) -> None:
        super().__init__(convert_charrefs=True)
        self.cls, self.depth, self.rows, self.cell = cls, 0, [], None
        self.in_body = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table" and self.cls in (a.get("class") or "").split() and self.depth == 0:
            self.depth = 1
        elif self.depth and tag == "tbody":
            self.in_body = True
        elif self.depth and self.in_body and tag == "tr":
            self.rows.append([])
        elif self.depth and self.in_body and tag == "td":
            self.cell = ""

    def handle_endtag(self, tag):
        if self.depth and tag == "td" and self.cell is not None:
            self.rows[-1].append(self.cell.strip())
            self.cell = None
        elif self.depth and tag == "table":
            self.depth = 0
            self.in_body = False

    def handle_data(self, data):
        if self.cell is not None:
            self.cell += data


def table_rows(page: str, cls: str) -> list[list[str]]:
    t = TableRows(cls)
    t.feed(page)
    return t.rows


def text_of(page: str) -> str:
    class T(HTMLParser):
        def __init__(self):
            super().__init__(convert_charrefs=True)
            self.parts = []

        def handle_data(self, data):
            self.parts.append(data)

    t = T()
    t.feed(page)
    return " ".join(t.parts)


# --------------------------------------------------------------------------- the page


def test_no_script_from_data_or_anywhere(page):
    assert "<script" not in page.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    # the hostile </style> name cannot close the stylesheet or open an img
    assert page.lower().count("</style>") == 1
    assert "<img" not in page.lower()
    c = check(page)
    assert "script" not in c.tags and "img" not in c.tags
    assert not any(k.startswith("on") for _, k, _ in c.attrs)


def test_nothing_loads_from_the_network(page):
    c = check(page)
    url_attrs = [(t, k, v) for t, k, v in c.attrs if k in {"src", "href", "xlink:href", "action", "srcset", "data"}]
    for tag, key, value in url_attrs:
        assert value is not None and value.startswith("#"), (tag, key, value)
    assert not re.search(r"url\s*\(", page, re.I)
    assert "@import" not in page
    # a URL may appear only as escaped text from a model name, never in markup
    for found in re.finditer(r"https://([^<…\s]*)", page):  # chart labels may truncate the name with "…"
        text, name = found.group(1), "evil.example/x.js"
        assert name.startswith(text) or text.startswith(name), page[found.start() - 80 : found.end() + 20]
    assert "http://" not in page
    csp = [v for t, k, v in c.attrs if t == "meta" and k == "content" and v and "default-src" in v]
    assert csp and "default-src 'none'" in csp[0]


def test_every_svg_is_well_formed_xml(page):
    svgs = SVG_RE.findall(page)
    assert len(svgs) >= 5  # forest, slope, bias panels, position split, dead letters
    for svg in svgs:
        root = ET.fromstring(svg)
        assert root.tag == "svg"
        assert not [el for el in root.iter() if el.tag in {"script", "foreignObject", "image", "use"}]


def test_svg_text_roundtrips_hostile_names(page):
    texts = " ".join("".join(ET.fromstring(s).itertext()) for s in SVG_RE.findall(page))
    for name in ["<script>alert(1)</script>", "模型-α", "Модель", "a&amp;b", "<script>judge</script>"]:
        assert name in texts


def test_every_section_appears_once(page):
    ids = re.findall(r'<section id="([^"]+)">', page)
    assert len(ids) == len(set(ids))
    assert {"leaderboard", "head-to-head", "bias", "audit", "diagnostics", "counts", "judges"} <= set(ids)
    headings = re.findall(r"<h[23]>(.*?)</h[23]>", page)
    assert len(headings) == len(set(headings)), headings  # no section or sub-section twice
    assert {"Judge audit", "Position: split and flip rate per judge", "Diagnostics", "Convergence"} <= set(headings)


def test_leaderboard_table_matches_the_published_board_and_rank_intervals(published):
    lb, summary = published.leaderboard, published.summary
    rows = table_rows(published.page, "leaderboard")
    assert len(rows) == lb.height
    by_model = {r[0]: r for r in rows}
    assert set(by_model) == set(HOSTILE)  # names come back exactly, after unescaping
    ranks = summary.ranks
    assert ranks is not None and ranks.level == 0.95
    corrected = {iv.model: iv for iv in ranks.corrected}
    naive = {iv.model: iv for iv in ranks.naive}
    for rec in lb.to_dicts():
        r = by_model[rec["model"]]
        c, n = corrected[rec["model"]], naive[rec["model"]]
        assert c.rank == rec["rank_corrected"] and n.rank == rec["rank_naive"]
        assert c.low <= c.rank <= c.high and n.low <= n.rank <= n.high
        assert r[1] == str(rec["rank_corrected"])
        assert r[2] == (str(c.low) if c.low == c.high else f"{c.low}–{c.high}")
        assert r[3] == (
            f"{rec['rating_corrected']:.1f} [{rec['ci_low_corrected']:.1f}, {rec['ci_high_corrected']:.1f}]"
        )
        assert r[4] == str(rec["rank_naive"])
        assert r[5] == (str(n.low) if n.low == n.high else f"{n.low}–{n.high}")
        assert r[6] == f"{rec['rating_naive']:.1f} [{rec['ci_low_naive']:.1f}, {rec['ci_high_naive']:.1f}]"
        move = rec["rank_naive"] - rec["rank_corrected"]
        assert r[7] == ("0" if move == 0 else f"▲ {move}" if move > 0 else f"▼ {-move}")
        assert r[8] == f"{rec['p_top_k']:.2f}"
        assert r[9] == f"{rec['n_battles']:,}"
    assert [int(r[1]) for r in rows] == sorted(int(r[1]) for r in rows)


def test_rank_intervals_cover_the_true_ranks(published):
    """The simulator's true order: the corrected 95% rank intervals hold each model's true rank."""
    order = sorted(published.true_theta, key=published.true_theta.get, reverse=True)
    true_rank = {m: i + 1 for i, m in enumerate(order)}
    assert published.summary.ranks is not None
    missed = [iv for iv in published.summary.ranks.corrected if not iv.low <= true_rank[iv.model] <= iv.high]
    assert len(missed) <= 1, missed
    assert any(iv.high - iv.low < len(order) - 1 for iv in published.summary.ranks.corrected)  # not vacuous


def test_bias_table_matches_the_published_bias(published):
    bias = published.bias
    rows = table_rows(published.page, "bias")
    assert len(rows) == bias.height
    assert all(len(r) == 7 for r in rows)  # no bootstrap column when there is no bootstrap CI
    seen = {(r[0], r[1]): r for r in rows}
    for rec in bias.to_dicts():
        judge = "all judges (global)" if rec["judge"] == "*" else rec["judge"]
        r = seen[(judge, rec["effect"])]
        assert r[2] == (f"{rec['estimate']:.3f}" if math.isfinite(rec["estimate"]) else "—")
        assert r[4] == ("identified" if rec["identified"] else "prior-selected")
        assert r[5] == ("on" if rec["enabled"] else "off")
        assert r[6] == rec["note"]


def test_length_effect_is_labelled_per_log_length_ratio(page):
    text = text_of(page)
    assert "per unit of log length ratio ln(len_a/len_b)" in text
    assert "clipped at 1.5 (a 4.5× length ratio)" in text
    assert "per SD" not in text


def test_summary_numbers_and_plain_words(published):
    text, summary = text_of(published.page), published.summary
    assert f"{summary.kendall_tau:.3f}" in text and f"{summary.spearman:.3f}" in text
    for cov, info in summary.diagnostics.identifiability.items():
        word = "prior-selected" if info.prior_selected else "identified by the data"
        assert f"The {cov} coefficient is {word}" in text
        if info.corr_theta is not None:  # of the fitted ratings, not of the (unknown) quality itself
            assert f"Correlation between the corrected ratings and mean {cov} per model: {info.corr_theta:.2f}" in text
    assert any(info.corr_theta is not None for info in summary.diagnostics.identifiability.values())
    assert "The comparison graph is connected" in text
    rows = {r[0]: r[1] for r in table_rows(published.page, "reasons")}
    assert rows == {k: f"{v:,}" for k, v in summary.counts.rejected.items()} and rows
    assert f"{summary.counts.read:,}" in text and f"{summary.counts.counted:,}" in text
    assert "Every row read is either counted or a dead letter" in text


def test_position_table_is_the_audit_of_each_judge(published):
    order = {r[0]: r for r in table_rows(published.page, "order")}
    assert set(order) == set(HOSTILE_JUDGES)
    for a in published.summary.diagnostics.order:
        r = order[a.judge]
        assert r[1] == f"{a.slot_n:,}"
        assert r[2:5] == [f"{a.slot_first_share:.3f}", f"{a.slot_second_share:.3f}", f"{a.slot_tie_share:.3f}"]
        assert a.order_flip_rate_se is not None and a.order_flip_rate_se > 0
        assert r[6] == f"{a.order_flip_rate:.1%} ± {a.order_flip_rate_se:.1%}"


def test_order_consistent_win_rate_is_filled_for_every_model(published):
    """The column that was always "—": producer and reader now share the typed field."""
    rows = table_rows(published.page, "consistent")
    assert {r[0] for r in rows} == set(HOSTILE)
    by_model = {m.model: m for m in published.summary.diagnostics.order_models}
    for r in rows:
        m = by_model[r[0]]
        assert r[4] == f"{m.consistent_win_rate:.3f} ± {m.consistent_win_rate_se:.3f}", r
    # the best model by truth wins most of its order-consistent pairs
    best = max(published.true_theta, key=published.true_theta.get)
    assert by_model[best].consistent_win_rate == max(m.consistent_win_rate for m in by_model.values())


def test_models_never_seen_in_both_orders_are_counted_not_listed(published):
    """LLMFAO's crowd saw no prompt in both orders: the table was 70 rows of "0 | 0 | — | —"."""
    models = published.summary.diagnostics.order_models
    unseen = dataclasses.replace(models[0], pairs=0, consistent=0, consistent_win_rate=None)
    diagnostics = dataclasses.replace(published.summary.diagnostics, order_models=[unseen, *models[1:]])
    page = render_report(
        published.leaderboard, published.bias, dataclasses.replace(published.summary, diagnostics=diagnostics)
    )
    assert {r[0] for r in table_rows(page, "consistent")} == {m.model for m in models[1:]}
    assert "1 model(s) never seen in both orders are left out." in page


def test_head_to_head_colour_fades_with_few_battles():
    """0% from 2 battles was shaded as red as 0% from 200: the colour now carries the evidence."""
    from biasboard.report.html import _shade

    def alpha(style: str) -> float:
        return float(style.rsplit(",", 1)[1].rstrip(')"'))

    assert alpha(_shade(0.0, 2)) < 0.5 * alpha(_shade(0.0, 200)) and alpha(_shade(0.0, 10)) == pytest.approx(0.28)
    assert _shade(None, 5) == "" and alpha(_shade(1.0)) == pytest.approx(0.55)


def test_judges_in_natural_order_and_no_panel_of_zero_bothbad_shares(published):
    """Voters read crowd/11 before crowd/107; a source without both-bad ties drew a bias panel of zeros."""
    from biasboard.report.html import _judge_order

    assert _judge_order(["crowd/107", "crowd/11", "*", "crowd/2", "gpt4"]) == [
        "*", "crowd/2", "crowd/11", "crowd/107", "gpt4"
    ]  # fmt: skip
    zero = published.bias.with_columns(
        pl.when(pl.col("effect") == "tie_bothbad_share").then(0.0).otherwise(pl.col("estimate")).alias("estimate")
    )
    assert "<h3>tie_bothbad_share</h3>" in render_report(published.leaderboard, published.bias, published.summary)
    assert "<h3>tie_bothbad_share</h3>" not in render_report(published.leaderboard, zero, published.summary)


def test_gold_label_accuracy_is_on_the_page(published):
    """The audit's accuracy against trusted labels was in summary.json only."""
    order = published.summary.diagnostics.order
    graded = dataclasses.replace(
        order[0], gold_n_labeled=1007, gold_accuracy=0.5683, gold_accuracy_se=0.0171,
        gold_random_pick_baseline=0.5, gold_longest_pick_baseline=0.5162,
    )  # fmt: skip
    diagnostics = dataclasses.replace(published.summary.diagnostics, order=[graded, *order[1:]])
    summary = dataclasses.replace(published.summary, diagnostics=diagnostics)
    page = render_report(published.leaderboard, published.bias, summary)
    assert table_rows(page, "gold") == [[order[0].judge, "1,007", "0.568 ± 0.017", "0.500", "0.516"]]
    assert "± is one standard error, a case judged in both orders counting once" in page


def test_head_to_head_matrices_match_the_cells(published):
    h2h = published.summary.head_to_head
    assert h2h is not None
    lb = published.leaderboard.sort("rank_corrected")
    assert h2h.models == lb["model"].to_list()[:20]
    cells = pl.from_arrow(state.load_cells(str(published.state)))
    for (i, a), (j, b) in itertools.permutations(enumerate(h2h.models), 2):
        ab = cells.filter((pl.col("model_a") == a) & (pl.col("model_b") == b))
        ba = cells.filter((pl.col("model_a") == b) & (pl.col("model_b") == a))
        n = int(ab["n"].sum() + ba["n"].sum())
        assert h2h.battles[i][j] == n
        ties = ab["tie"].sum() + ab["tie_bothbad"].sum() + ba["tie"].sum() + ba["tie_bothbad"].sum()
        wins = ab["win_a"].sum() + ba["win_b"].sum() + 0.5 * ties
        assert h2h.win_rate[i][j] == (pytest.approx(wins / n) if n else None)
    win = table_rows(published.page, "winrate")  # data cells only; the diagonal is blank
    for i, j in itertools.permutations(range(len(h2h.models)), 2):
        rate = h2h.win_rate[i][j]
        assert win[i][j] == ("·" if rate is None else f"{rate * 100:.0f}")
    battles = table_rows(published.page, "battles")
    assert [battles[i][i] for i in range(len(h2h.models))] == [""] * len(h2h.models)
    assert battles[1][0] == f"{h2h.battles[1][0]:,}"


def test_judge_audit_comes_from_the_summary_not_an_html_fragment(published):
    """The audit job's HTML fragment is not embedded: the section is rendered from typed fields."""
    bare = dataclasses.replace(
        published.summary,
        diagnostics=dataclasses.replace(published.summary.diagnostics, order=[], order_models=[], family=[]),
    )
    page = render_report(published.leaderboard, published.bias, bare)
    assert 'id="audit"' not in page and 'href="#audit"' not in page
    assert (published.snapshot / "audit_section.html").read_text(encoding="utf-8") not in published.page


def test_recurring_clusters_are_said_beside_the_standard_errors_not_warned(published):
    """The simulated days reuse their prompts, so many of the audit's (judge, prompt) clusters recur on other days.
    Their keys are few, so the audit closes the clusters over the history (``closed_over: history``) and the
    page says nothing of it; an audit that closed them within each day (more keys than the bound) counts them
    as independent: the summary carries the measured share and the judge audit says it in a note — not in the
    warnings (the quick start's demo must not print an alarm); below the threshold it says nothing."""
    clusters = published.summary.diagnostics.audit_clusters
    audit_json = json.loads((published.snapshot / "audit.json").read_text())
    assert clusters is not None and dataclasses.asdict(clusters) == audit_json["clusters"]
    assert clusters.days == SIM.days and clusters.recurring_share > 0.1  # measured 0.25
    assert clusters.closed_over == "history"
    assert "clusters repeat one judged on another day" not in text_of(published.page)
    assert not [w for w in published.summary.warnings if "another day" in w]

    def page_with(audit_clusters) -> str:
        diagnostics = dataclasses.replace(published.summary.diagnostics, audit_clusters=audit_clusters)
        summary = dataclasses.replace(published.summary, diagnostics=diagnostics)
        return text_of(render_report(published.leaderboard, published.bias, summary))

    by_day = dataclasses.replace(clusters, closed_over="day")
    assert "clusters repeat one judged on another day" in page_with(by_day)
    assert "clusters repeat one judged on another day" not in page_with(
        dataclasses.replace(by_day, recurring_share=0.04)
    )


def test_conservation_mismatch_is_called_out(published):
    counts = dataclasses.replace(published.summary.counts, read=published.summary.counts.read + 50)
    page = render_report(published.leaderboard, published.bias, dataclasses.replace(published.summary, counts=counts))
    assert "50 rows are unaccounted for" in text_of(page)


def test_empty_board_says_so(published):
    page = render_report(published.leaderboard.clear(), published.bias.clear(), published.summary)
    check(page)
    text = text_of(page)
    assert "No models in this snapshot." in text and "No bias coefficients in this snapshot." in text


def test_plot_shows_the_top_and_the_largest_movers_and_the_table_lists_all(published):
    lb = published.leaderboard
    top_n, movers = 2, 1
    page = render_report(lb, published.bias, published.summary, top_n=top_n, movers=movers)
    assert len(table_rows(page, "leaderboard")) == lb.height
    forest = ET.fromstring(SVG_RE.findall(page)[0])
    # each row label carries its tooltip "<name> — corrected #<rank>, naive #<rank>"
    plotted = [
        int(re.search(r"corrected #(\d+)", "".join(t.itertext())).group(1))
        for t in forest.iter("text")
        if t.get("text-anchor") == "end"
    ]
    ordered = lb.sort("rank_corrected")
    rest = ordered.slice(top_n).filter(pl.col("rank_change") != 0)
    expected = ordered["rank_corrected"].to_list()[:top_n]
    if rest.height:
        biggest = rest.with_columns(pl.col("rank_change").abs().alias("m")).sort(
            ["m", "rank_corrected"], descending=[True, False]
        )
        expected += biggest["rank_corrected"].to_list()[:movers]
    assert plotted == sorted(expected)
    assert len(plotted) < lb.height


def test_what_moved_each_model_is_the_published_attribution(published):
    # Every model of the board has its corrections' moves in summary.json, consistent with the leaderboard; the page
    # names each model that moved, with each correction's places as published and the rest it leaves.
    att = published.summary.attribution
    assert att is not None and att.effects == ["position", "length", "affinity"]
    lb = {r["model"]: r for r in published.leaderboard.to_dicts()}
    assert {r.model for r in att.models} == set(lb)
    for r in att.models:
        assert (r.rank_naive, r.rank_corrected, r.rank_change) == tuple(
            lb[r.model][c] for c in ("rank_naive", "rank_corrected", "rank_change")
        )
        assert [m.effect for m in r.corrections] == att.effects
        assert all(m.places == m.rank_without - r.rank_corrected for m in r.corrections)
        assert r.unexplained == r.rank_change - sum(m.places for m in r.corrections)
    items = re.findall(r'<ul class="moves">(.*?)</ul>', published.page, re.S)
    assert len(items) == 1
    lines = re.findall(r"<li>(.*?)</li>", items[0], re.S)
    moved = [r for r in att.models if r.rank_change]
    assert moved and len(lines) == min(len(moved), 15)
    by_name = {html.escape(r.model, quote=True): r for r in moved}
    for line in lines:
        row = by_name[re.match(r"<strong>(.*?)</strong>", line).group(1)]
        assert f"naive #{row.rank_naive} → #{row.rank_corrected}" in line
        for m in row.corrections:
            if m.places:
                assert f"{m.effect} {m.places:+d} (" in line
        assert (f"rest {row.unexplained:+d}" in line) == bool(row.unexplained)


def test_summary_json_round_trips_and_refuses_other_versions(published):
    doc = published.summary.to_json()
    assert Summary.from_json(json.loads(json.dumps(doc))).to_json() == doc
    from biasboard.schemas.errors import InputError

    with pytest.raises(InputError, match="version"):
        Summary.from_json({**doc, "version": 1})
    with pytest.raises(InputError, match="lacks the required field 'counts'"):
        Summary.from_json({k: v for k, v in doc.items() if k != "counts"})
    with pytest.raises(InputError, match=r"summary.counts.read must be int"):
        Summary.from_json({**doc, "counts": {**doc["counts"], "read": "many"}})
    assert np.isnan(Summary.from_json({**doc, "spearman": None}).spearman or math.nan)


SANDWICH_SOURCE = "naive: the sandwich covariance of its maximum-likelihood fit"


def test_the_interval_note_names_the_covariance_the_naive_board_used(published, tmp_path):
    """Two models whose every battle is a tie: the half-win scores (½ − p at p = ½) are all 0, the sandwich leaves the
    ratings no variance, and the naive fit keeps its Laplace covariance.  The report said the naive intervals were
    the sandwich's all the same; the summary now records which covariance was used and the note follows it."""
    n = 40
    day = tmp_path / "in" / "day=2024-01-01"
    day.mkdir(parents=True)
    pl.DataFrame(
        {
            "battle_id": [f"b{i}" for i in range(n)],
            "ts": ["2024-01-01T12:00:00Z"] * n,
            "judge": ["j"] * n,
            "model_a": ["x", "y"] * (n // 2),
            "model_b": ["y", "x"] * (n // 2),
            "winner": ["tie"] * n,
        }
    ).write_parquet(day / "part-0.parquet")
    refresh(str(tmp_path / "in"), str(tmp_path / "state"), str(tmp_path / "out"), [], RefreshOptions(k=1))
    snap = Path(publish.resolve_snapshot(str(tmp_path / "out")))
    summary = Summary.from_json(json.loads((snap / "summary.json").read_text()))
    assert summary.diagnostics.naive.covariance == "laplace" and summary.diagnostics.naive.prior_theta_sd is None
    board = pl.read_parquet(snap / "leaderboard.parquet")
    # The Laplace SE of a centred rating: Var(θx − θy) = 1 / (n · ¼) = 0.1, each SE half its root (0.158 logits).
    half_width = (board["ci_high_naive"] - board["ci_low_naive"]) / 2 / (400 / math.log(10))
    np.testing.assert_allclose(half_width, 1.959964 * math.sqrt(0.1) / 2, rtol=1e-4)
    text = text_of((snap / "report.html").read_text(encoding="utf-8"))
    assert SANDWICH_SOURCE not in text and "corrected and naive alike: from the Laplace approximation" in text
    # A board of battles with decided verdicts keeps the sandwich, and a summary written before the covariance was
    # recorded reads as before.
    assert published.summary.diagnostics.naive.covariance == "sandwich" and SANDWICH_SOURCE in text_of(published.page)
    doc = published.summary.to_json()
    del doc["diagnostics"]["naive"]["covariance"]
    older = Summary.from_json(doc)
    assert older.diagnostics.naive.covariance is None
    assert SANDWICH_SOURCE in text_of(render_report(published.leaderboard, published.bias, older))


# --------------------------------------------------------------------------- svg builders


def test_nice_ticks_cover_the_range():
    for lo, hi in [(0.0, 1.0), (-0.37, 0.52), (812.3, 1293.8), (5.0, 5.0), (1e-4, 3e-4)]:
        t = nice_ticks(lo, hi)
        assert t[0] <= lo and t[-1] >= hi and len(t) >= 2
        steps = {round(b - a, 9) for a, b in itertools.pairwise(t)}
        assert len(steps) == 1


def test_forest_plot_skips_non_finite_and_escapes_attributes():
    svg = forest_plot(
        ['a"b', "<c>"],
        [Series('s "1"', "#000", [1.0, float("nan")], [0.5, None], [1.5, math.inf])],
        title='t "q" <x>',
        reference=0.0,
    )
    root = ET.fromstring(svg)
    assert root.get("aria-label") == 't "q" <x>'
    assert len(root.findall("circle")) == 2  # legend dot + the one finite point
    assert len([ln for ln in root.findall("line") if ln.get("stroke") == "#000"]) == 1


def _tick_values(root: ET.Element) -> list[float]:
    labels = [t.text or "" for t in root.findall("text") if t.get("font-size") == "11"]
    return [float(t) for t in labels if t.replace(".", "", 1).lstrip("-").isdigit()]


def test_forest_plot_axis_is_not_stretched_by_one_outlying_interval():
    """One row's interval far wider than every other (on LLMFAO's crowd a model with 12 battles had a naive
    bootstrap interval up to 3,700, and the other 34 rows were squeezed into a tenth of the plot) ends at the axis
    edge in an arrowhead, its bounds kept in the tooltips; intervals equally wide are all drawn whole."""
    labels = [f"m{i}" for i in range(10)]
    values = [1000.0 + 20 * i for i in range(10)]
    highs = [v + 60 for v in values]
    highs[3] = 3700.0
    svg = forest_plot(labels, [Series("naive", "#000", values, [v - 60 for v in values], highs)], title="t")
    root = ET.fromstring(svg)
    assert max(_tick_values(root)) < 1500 and min(_tick_values(root)) <= 940
    (arrow,) = root.findall("polygon")
    assert "3700.00" in (arrow.findtext("title") or "")
    assert any("3700.00" in (c.findtext("title") or "") for c in root.findall("circle"))
    assert any("past the axis" in (t.text or "") for t in root.findall("text"))
    wide = Series("s", "#000", values, [v - 900 for v in values], [v + 900 for v in values])
    root = ET.fromstring(forest_plot(labels, [wide], title="t"))
    assert not root.findall("polygon") and max(_tick_values(root)) >= max(values) + 900


def test_slope_and_split_builders_escape_and_parse():
    svg = slope_chart(["<a>", "b&c"], [1, 2], [2, 1], title="s")
    texts = "".join(ET.fromstring(svg).itertext())
    assert "#1 <a>" in texts and "#2 <a>" in texts and "#1 b&c" in texts
    svg = split_bars(["<j>"], [Part("A", "#111", [3]), Part("B", "#222", [1])], title="p", annotations=["f<1>"])
    root = ET.fromstring(svg)
    widths = [
        float(r.get("width"))
        for r in root.iter("rect")
        if r.get("fill") in ("#111", "#222") and float(r.get("width")) > 11
    ]
    assert widths[0] == pytest.approx(3 * widths[1], rel=1e-2)
    assert "f<1>" in "".join(root.itertext())
    assert esc('"') == "&quot;" and esc("'") == "&#x27;"


def test_slope_chart_keeps_its_columns_apart_at_phone_width_with_long_names():
    """At 370 px a long model name (Position-Bias-Analyzer's, LLMFAO's) put the left column right of the right one,
    its labels overprinting: the labels are truncated instead, the columns keep the gap the lines need."""
    names = ["a-very-long-model-name-from-a-real-leaderboard-v1.3", "another-long-model-name-13b-chat-hf"]
    root = ET.fromstring(slope_chart(names, [1, 2], [2, 1], title="s", width=370))
    for group in root.iter("g"):
        left, right = (float(c.get("cx")) for c in group.iter("circle"))
        assert right - left >= 60, (left, right)  # the naive column left of the corrected one, lines between
    assert all(0 <= float(t.get("x")) <= 370 for t in root.iter("text"))


#: The position split's legend as the report draws it (html._judge_audit).
SPLIT_NAMES = ("first shown (A) wins", "second shown (B) wins", "tie")


def test_split_legend_wraps_inside_the_chart_at_phone_width():
    """At 370 px beside a column of judge names the legend ran on in one row from the bars' left edge: "second shown
    (B) wins" and "tie" fell outside the SVG, clipped.  It wraps instead, every entry whole and above the bars, and
    keeps its one row where that fits (a desktop's 860 px)."""
    judges = ["<script>judge</script>", "claude-sim-judge-1"]
    parts = [Part(name, f"#00000{i}", [0.4, 0.3]) for i, name in enumerate(SPLIT_NAMES)]
    for width in (370, 860):
        root = ET.fromstring(split_bars(judges, parts, title="p", annotations=["flip rate 52.3%"] * 2, width=width))
        legend = [t for t in root.iter("text") if t.text in SPLIT_NAMES]
        assert [t.text for t in legend] == list(SPLIT_NAMES)
        for t in legend:
            x = float(t.get("x") or "nan")
            assert x >= 0 and x + text_width(t.text or "") <= width, (width, t.text)
        marks = [r for r in root.iter("rect") if r.get("width") == "11"]
        assert len(marks) == 3 and all(0 <= float(r.get("x")) <= width - 11 for r in marks)
        rows = {t.get("y") for t in legend}
        assert len(rows) == (2 if width == 370 else 1), (width, rows)
        bars = [float(r.get("y")) for r in root.iter("rect") if r.get("height") == "20"]
        assert min(bars) > max(float(y) for y in rows)  # the bars start below the legend's last row


def test_a_zero_tick_reads_0_never_minus_0():
    """Ticks were a running sum of steps, which drifted below zero (−1.0 plus 0.2 five times is −5.6e-17) and
    printed "-0.0" under a bias panel whose axis ends at 0."""
    ticks = nice_ticks(-0.95, 0.05)
    assert 0.0 in ticks and all(math.copysign(1.0, t) == 1.0 for t in ticks if t == 0)
    values = [-0.9, -0.5, -0.1]
    series = [Series("", "#000", values, [v - 0.01 for v in values], [v + 0.01 for v in values])]
    root = ET.fromstring(forest_plot(["j1", "j2", "j3"], series, title="t"))
    labels = [t.text for t in root.findall("text") if t.get("font-size") == "11"]
    assert labels[-1] == "0" and not {"-0.0", "-0", "0.0"} & set(labels), labels


def test_every_bias_dot_names_its_effect_in_its_tooltip(page):
    """A bias panel's dots read "judge · : 0.12" (the panel's one series has no name): each names its effect."""
    section = re.search(r'<section id="bias">.*?</section>', page, re.S)
    assert section
    dots = 0
    for svg in SVG_RE.findall(section.group(0)):
        root = ET.fromstring(svg)
        effect = (root.get("aria-label") or "").split(" ")[0].rstrip(":")
        for circle in root.iter("circle"):
            title = circle.findtext("title") or ""
            assert f" · {effect}: " in title and " · : " not in title, title
            dots += 1
    assert dots


@pytest.fixture(scope="module")
def referenced(tmp_path_factory) -> Published:
    """A board corrected toward a human pool, where the gate ties the judges' length excesses to the pool."""
    root = tmp_path_factory.mktemp("report-reference")
    config = SimulationConfig(battles=6000, models=8, judges=4, human_judges=1, days=1, seed=61)
    logs = write_simulation(config, root / "logs")
    options = RefreshOptions(k=3, audit=False, reference="human-pool-1")
    refresh(str(logs / "battles"), str(root / "state"), str(root / "out"), [], options)
    snap = Path(publish.resolve_snapshot(str(root / "out")))
    summary = Summary.from_json(json.loads((snap / "summary.json").read_text()))
    page = (snap / "report.html").read_text(encoding="utf-8")
    leaderboard, bias = pl.read_parquet(snap / "leaderboard.parquet"), pl.read_parquet(snap / "bias.parquet")
    return Published(leaderboard, bias, summary, page, snap, root / "state", {})


def test_the_gate_says_which_fit_its_excess_is_from(referenced):
    """QA read −0.111 in the gate table and −0.108 in the bias table for one judge's effect.  Both are right: the
    gate tests in the fit with every correction on, the bias table is the published fit's, where the corrections
    the gate switched off are tied to the reference (tests/test_reference.py shows it).  The gate section says so."""
    summary, gate = referenced.summary, referenced.summary.diagnostics.gate
    assert gate is not None and any(row["enabled"] is False for row in gate.decisions)
    published = {(r["judge"], r["effect"]): r["estimate"] for r in referenced.bias.to_dicts()}
    moved = [
        r for r in gate.decisions if r["enabled"] and abs(r["excess"] - published[(r["judge"], r["effect"])]) > 1e-4
    ]
    assert moved  # one excess, two numbers: the case the sentence is for
    section = re.search(r'<section id="gate">.*?</section>', referenced.page, re.S)
    assert section
    text = text_of(section.group(0))
    assert "excess (all corrections on)" in text
    assert (
        "The excess here is each judge's in the fit with every correction on, where the test is made; the bias table "
        "gives it in the published fit, where the corrections switched off are tied to the reference, so it can "
        "differ there (the effects are fitted jointly)."
    ) in text
    # Nothing switched off: one fit, and the sentence says so rather than promise a difference.
    all_on = dataclasses.replace(gate, decisions=[{**row, "enabled": True} for row in gate.decisions])
    untied = dataclasses.replace(summary, diagnostics=dataclasses.replace(summary.diagnostics, gate=all_on))
    page = render_report(referenced.leaderboard, referenced.bias, untied)
    assert "gives it in the published fit, here the same fit (no correction was switched off)." in text_of(page)


def test_the_gate_says_what_gain_is_and_that_the_joint_test_decides(referenced):
    """A reader asked what the gate table's "gain (nats)" is, and why a judge with |z| > 2 was not corrected: the
    decision is the effect's joint test, not a judge's own z.  The section says both, and this fixture shows why it
    must: an effect's judges' own z differ while one decision covers them all."""
    decisions = referenced.summary.diagnostics.gate.decisions
    by_effect: dict[str, set[bool]] = {}
    for row in decisions:
        by_effect.setdefault(row["effect"], set()).add(row["enabled"])
    assert all(len(flags) == 1 for flags in by_effect.values())  # one decision per effect
    text = text_of(re.search(r'<section id="gate">.*?</section>', referenced.page, re.S).group(0))
    assert "gain (nats) is ½z², about what freeing that one excess adds to the log-likelihood" in text
    assert "an effect is switched on for all its judges or none, by the joint χ² of every judge's excess" in text


def test_the_gate_of_a_weighted_fit_calls_its_half_z2_a_wald_quantity_not_a_gain_in_nats(referenced):
    """At ω ≠ 0.5 the gate's z reads the Godambe covariance and its ½z² (the summary's ``half_z2``) is half a Wald
    χ²(1), no log-likelihood's gain: the table's header and the reading above it said "gain (nats)" regardless."""
    doc = _weighted_summary(referenced.summary, "godambe")
    for row in doc["diagnostics"]["gate"]["decisions"]:
        row["half_z2"] = row.pop("gain_nats")  # what an ω-weighted fit's gate writes (tests/test_reference_blocked.py)
    page = render_report(referenced.leaderboard, referenced.bias, Summary.from_json(doc))
    text = text_of(re.search(r'<section id="gate">.*?</section>', page, re.S).group(0))
    assert "½z² (Wald)" in text and "half its Wald χ² on 1 df" in text and "no log-likelihood gain in nats" in text
    assert "gain (nats)" not in text and "adds to the log-likelihood" not in text
    assert "an effect is switched on for all its judges or none, by the joint χ² of every judge's excess" in text


def test_a_global_row_that_holds_the_reference_own_effect_is_labelled_the_reference(referenced):
    """Under a reference the '*' row of an effect the rating keeps is the reference's own effect (its note says so:
    ranking/reference.py ``reference_global_notes``), but the bias table and the panels labelled it "all judges
    (global)".  It is labelled the reference's from the summary's ``own_effects``; the '*' row of an effect the
    reference has no data of (affinity here) is still the judges' mean."""
    own = referenced.summary.reference.own_effects
    assert own["length"]["ci_low"] is not None and own["affinity"]["ci_low"] is None  # kept, and taken as zero
    table = re.search(r'<table[^>]*>(?:(?!</table>).)*<th class="l">Note</th>.*?</table>', referenced.page, re.S)
    assert table
    labels = {}
    for row in re.findall(r"<tr>(.*?)</tr>", table.group(0), re.S):
        cells = [text_of(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        if cells:
            labels.setdefault(cells[1], []).append(cells[0])
    assert all("the reference (its own effect)" in labels[effect] for effect in ("length", "position"))
    assert "all judges (global)" not in labels["length"] + labels["position"]
    assert "all judges (global)" in labels["affinity"] and "the reference (its own effect)" not in labels["affinity"]
    assert "the reference (its own effect) · length" in referenced.page  # the panel's dot says it too


def _weighted_summary(summary: Summary, uncertainty: str) -> dict:
    """``summary``'s JSON as an ω = 0.9 fit of battles and grades writes it, its intervals from ``uncertainty``."""
    doc = summary.to_json()
    doc["uncertainty"], doc["diagnostics"]["omega"] = uncertainty, 0.9
    doc["score_counts"] = dataclasses.asdict(Counts(read=1000, counted=1000, rejected={}, rejected_total=0))
    return doc


@pytest.mark.parametrize("uncertainty", ["godambe", "bootstrap"])
def test_a_weighted_fit_gate_without_decisions_still_reads_its_z_by_the_godambe_covariance(referenced, uncertainty):
    """The reading was chosen by whether a ``half_z2`` column was among the decisions, so an ω-weighted fit's gate
    with no decision listed read "gain (nats) ... adds to the log-likelihood", the plain likelihood's reading.  It is
    chosen from the fit (``uncertainty``; with --bootstrap, ω with grades), whose gate reads the Godambe SE."""
    doc = _weighted_summary(referenced.summary, uncertainty)
    doc["diagnostics"]["gate"]["decisions"] = []
    page = render_report(referenced.leaderboard, referenced.bias, Summary.from_json(doc))
    text = text_of(re.search(r'<section id="gate">.*?</section>', page, re.S).group(0))
    assert "no log-likelihood gain in nats" in text and "adds to the log-likelihood" not in text, text


@pytest.mark.parametrize("uncertainty", ["godambe", "bootstrap"])
def test_an_older_weighted_summary_gate_column_is_headed_as_its_reading_says(referenced, uncertainty):
    """A summary written before the gate named its ½z² column for the fit keeps ``gain_nats`` at ω ≠ 0.5 too, though
    its z read the Godambe covariance there as well.  The reading above the table (chosen from the fit) says the
    column is "½z² (Wald) ... no log-likelihood gain in nats", while its header still read "gain (nats)": the page
    contradicted itself.  The header follows the reading."""
    doc = _weighted_summary(referenced.summary, uncertainty)
    assert all("gain_nats" in row for row in doc["diagnostics"]["gate"]["decisions"])  # as the old gate wrote it
    page = render_report(referenced.leaderboard, referenced.bias, Summary.from_json(doc))
    section = re.search(r'<section id="gate">.*?</section>', page, re.S).group(0)
    heads = [text_of(h) for h in re.findall(r"<th[^>]*>(.*?)</th>", section, re.S)]
    assert "no log-likelihood gain in nats" in text_of(section)
    assert "½z² (Wald)" in heads and "gain (nats)" not in heads, heads


# --------------------------------------------------------------------------- in a real browser

#: Headless Chromium binaries, in the order tried (Debian: ``apt-get install chromium-headless-shell``).
BROWSERS = ("chromium-headless-shell", "chrome-headless-shell", "chromium", "chromium-browser", "google-chrome")
#: Appended to a copy of the page (whose CSP forbids scripts): records the layout for ``--dump-dom``.
LAYOUT_PROBE = """<script>
var root = document.documentElement;
var wide = Array.from(document.querySelectorAll("body *")).filter(function (e) {
  return e.getBoundingClientRect().right > innerWidth + 0.5 && !e.closest(".scroll, figure");
}).slice(0, 5).map(function (e) { return e.tagName + "." + e.className; });
document.body.setAttribute("data-layout", JSON.stringify({scroll: root.scrollWidth, inner: innerWidth, wide: wide}));
</script>"""


@pytest.fixture(scope="module")
def browser() -> str:
    import shutil

    found = next((path for name in BROWSERS if (path := shutil.which(name))), None)
    if found is None:
        pytest.skip(f"no headless Chromium on PATH (tried {', '.join(BROWSERS)}); `make install` adds it via apt")
    return found


def _chromium(browser: str, width: int, *args: str) -> subprocess.CompletedProcess[str]:
    command = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
        f"--window-size={width},1000",
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def _png_pixels(path: Path) -> tuple[int, int, bytes]:
    """Width, height and the decompressed scanlines of a PNG (enough to tell a blank image)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, width, height, idat = 8, 0, 0, b""
    while pos < len(data):
        length = int.from_bytes(data[pos : pos + 4], "big")
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height = int.from_bytes(body[:4], "big"), int.from_bytes(body[4:8], "big")
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    return width, height, zlib.decompress(idat)


def _probe(browser: str, page: str, width: int, tmp_path: Path, script: str, attribute: str):
    """Run ``script`` at the end of a copy of ``page`` (without its CSP, which forbids scripts) in Chromium at
    ``width`` px; the JSON it left in the body's ``attribute``."""
    probe = tmp_path / f"probe-{attribute}-{width}.html"
    probe.write_text(
        re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page).replace("</body>", script + "</body>"),
        encoding="utf-8",
    )
    dom = _chromium(browser, width, "--dump-dom", probe.as_uri()).stdout
    found = re.search(rf'{attribute}="([^"]*)"', dom)
    assert found, f"the {attribute} probe did not run at {width} px"
    return json.loads(html.unescape(found.group(1)))


def _layout(browser: str, page: str, width: int, tmp_path: Path) -> dict:
    return _probe(browser, page, width, tmp_path, LAYOUT_PROBE, "data-layout")


@pytest.mark.parametrize("width", [400, 1280])
def test_report_renders_in_chromium_without_horizontal_overflow(published, browser, width, tmp_path):
    shot = tmp_path / f"report-{width}.png"
    result = _chromium(browser, width, f"--screenshot={shot}", (published.snapshot / "report.html").as_uri())
    assert shot.exists(), result.stderr[-2000:]
    w, h, pixels = _png_pixels(shot)
    assert (w, h) == (width, 1000)
    assert len(set(pixels)) > 32, "the screenshot is blank"
    layout = _layout(browser, published.page, width, tmp_path)
    assert layout["inner"] == width
    assert layout["scroll"] <= layout["inner"] and layout["wide"] == [], layout  # wide tables scroll in their box


def test_layout_probe_sees_an_overflowing_element(published, browser, tmp_path):
    """The overflow check can fail: a 2000-px block outside any scroll box is reported."""
    wide = published.page.replace("<footer>", '<div class="too-wide" style="width:2000px">x</div><footer>')
    layout = _layout(browser, wide, 400, tmp_path)
    assert layout["scroll"] > layout["inner"] and "DIV.too-wide" in layout["wide"]


#: Appended to a copy of the page: the texts of every shown chart that lie outside their SVG (where it clips
#: them) or past the window's right edge, as [chart, text].
CLIPPED_PROBE = """<script>
var clipped = [];
document.querySelectorAll("figure svg").forEach(function (svg) {
  var box = svg.getBoundingClientRect();
  if (!box.width) return;  // the other width's copy of a chart (display: none)
  svg.querySelectorAll("text").forEach(function (t) {
    var r = t.getBoundingClientRect();
    if (r.width && (r.left < box.left - 0.5 || r.right > box.right + 0.5 || r.right > innerWidth + 0.5)) {
      clipped.push([svg.getAttribute("aria-label"), t.textContent]);
    }
  });
});
document.body.setAttribute("data-clipped", JSON.stringify(clipped));
</script>"""


@pytest.mark.parametrize("width", [390, 1280])
def test_every_chart_text_is_inside_its_chart_in_chromium(published, browser, width, tmp_path):
    """At a phone's 390 px the position split's legend ran out of its SVG: "second shown (B) wins" and "tie" were
    cut off.  Measured in the browser, every text of every chart shown at this width lies inside its chart."""
    assert _probe(browser, published.page, width, tmp_path, CLIPPED_PROBE, "data-clipped") == []


def test_clip_probe_sees_a_clipped_text(published, browser, tmp_path):
    """The clipping check can fail: a text drawn past its SVG's right edge is reported."""
    svg = (
        '<svg width="100" height="20" viewBox="0 0 100 20" aria-label="probe"><text x="80" y="15">cut off</text></svg>'
    )
    page = published.page.replace("<footer>", f"<figure>{svg}</figure><footer>")
    assert ["probe", "cut off"] in _probe(browser, page, 390, tmp_path, CLIPPED_PROBE, "data-clipped")


# --------------------------------------------------------------------------- slices: a tab per slice

#: Category labels written into the simulated battles: a hostile one, two overlapping ones (one label
#: naming both), and a small one that is listed but not fit.
SLICE_LABELS = ("<b>coding</b>", "hard|math", "tiny")


@pytest.fixture(scope="module")
def sliced(tmp_path_factory) -> Published:
    root = tmp_path_factory.mktemp("report-slices")
    config = dataclasses.replace(SIM, days=1, both_orders=False, bad_rows=0.0, categories=3, seed=8)
    logs = write_simulation(config, root / "logs")
    for path in logs.glob("battles/day=*/*.parquet"):
        frame = pl.read_parquet(path).with_row_index("i")
        label = pl.col("category").replace_strict(
            {f"{c}": label for c, label in zip(sorted(frame["category"].unique()), SLICE_LABELS, strict=True)}
        )
        tiny = (label == "tiny") & (pl.col("i") % 20 != 0)
        frame.with_columns(pl.when(tiny).then(pl.lit("hard|math")).otherwise(label).alias("category")).drop(
            "i"
        ).write_parquet(path)
    options = RefreshOptions(k=3, audit=False, slices="category", slice_min_battles=200)
    refresh(str(logs / "battles" / "day=*" / "*.parquet"), str(root / "state"), str(root / "out"), [], options)
    snap = Path(publish.resolve_snapshot(str(root / "out")))
    summary = Summary.from_json(json.loads((snap / "summary.json").read_text()))
    page = (snap / "report.html").read_text(encoding="utf-8")
    return Published(pl.read_parquet(snap / "slices.parquet"), pl.DataFrame(), summary, page, snap, root, {})


def _slice_section(page: str) -> str:
    found = re.search(r'<section id="slices">.*?</section>', page, re.S)
    assert found, "no slices section"
    return found.group(0)


def test_each_slice_is_a_tab_with_its_boards_and_rank_intervals(sliced):
    check(sliced.page)
    section = _slice_section(sliced.page)
    infos = sliced.summary.slices
    assert [i.value for i in infos] == ["<b>coding</b>", "hard", "math", "tiny"]
    assert [i.fitted for i in infos] == [True, True, True, False]
    radios = re.findall(r'<input type="radio" name="slice-tab" id="([^"]+)"( checked)?>', section)
    labels = re.findall(r'<label for="([^"]+)">', section)
    assert [r[0] for r in radios] == labels and len(labels) == len(infos) == len(set(labels))
    assert [bool(r[1]) for r in radios] == [True, False, False, False]  # the first tab is open
    panels = re.findall(r'<div class="tab-panel" role="group" aria-label="([^"]*)">', section)
    assert [html.unescape(p) for p in panels] == [i.slice for i in infos]
    assert "&lt;b&gt;coding&lt;/b&gt;" in section and "<b>coding" not in section  # escaped like any name
    assert "fewer than the 200 a slice needs to be fit" in section
    # Every fitted tab: the slice's naive and corrected board with its own rank intervals.
    chunks = section.split('<div class="tab-panel"')[1:]
    for info, chunk in zip(infos, chunks, strict=True):
        if not info.fitted:
            assert "<table" not in chunk
            continue
        assert info.ranks is not None and "Rank 95% interval" in chunk
        rows = table_rows(chunk, "leaderboard")
        board = sliced.leaderboard.filter(pl.col("slice") == info.slice)
        assert len(rows) == board.height
        corrected = {iv.model: iv for iv in info.ranks.corrected}
        for cells in rows:
            iv = corrected[cells[0]]
            assert cells[1] == str(iv.rank)
            assert cells[2] == (str(iv.low) if iv.low == iv.high else f"{iv.low}–{iv.high}")


#: Appended to a copy of the slices page: which tab panels are displayed, before and after another tab
#: is chosen (the CSS alone decides; this script only reads the layout and checks a radio button).
TAB_PROBE = """<script>
function shown() {
  return Array.from(document.querySelectorAll(".tab-panel")).map(function (p) {
    return getComputedStyle(p).display !== "none";
  });
}
var before = shown();
document.getElementById("slice-tab-2").checked = true;
document.body.setAttribute("data-tabs", JSON.stringify({before: before, after: shown()}));
</script>"""


@pytest.mark.parametrize("width", [400, 1280])
def test_slice_tabs_show_one_panel_and_fit_a_phone(sliced, browser, width, tmp_path):
    layout = _layout(browser, sliced.page, width, tmp_path)
    assert layout["scroll"] <= layout["inner"] and layout["wide"] == [], layout
    tabs = _probe(browser, sliced.page, width, tmp_path, TAB_PROBE, "data-tabs")
    assert tabs == {"before": [True, False, False, False], "after": [False, False, True, False]}


def _two_groups(board: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """``board`` (in corrected rank order) with its last 3 models made a comparison group of their own, ranked 1..3
    within it, as a board of two groups no battle links (GenAI-Arena's) is published; and those 3 models."""
    second = board.tail(3)["model"].to_list()
    split = board.with_columns(
        pl.when(pl.col("model").is_in(second)).then(1).otherwise(0).cast(pl.Int64).alias("component"),
        pl.when(pl.col("model").is_in(second))
        .then(pl.col("rank_corrected") - board.height + 3)
        .otherwise(pl.col("rank_corrected"))
        .alias("rank_corrected"),
    )
    return split, second


def test_the_full_table_groups_models_by_comparison_component(published):
    """A board of two groups no battle links (GenAI-Arena's): each group's ranks restart at 1. Sorted by rank alone
    the table interleaved them (1, 1, 2, 2, ...), reading as ties across groups; now each group is listed apart,
    under a row that says what its ranks mean."""
    board = published.leaderboard.sort("rank_corrected")
    split, second = _two_groups(board)
    page = render_report(split, published.bias, published.summary)
    table = page[page.index("<h3>Full table</h3>") :]
    first = [m for m in board["model"].to_list() if m not in second]
    at = {m: table.index(f'<td class="name">{html.escape(m)}</td>') for m in board["model"].to_list()}
    group_1, group_2 = table.index("Group 1 of 2: "), table.index("Group 2 of 2: 3 models no battle links")
    assert group_1 < min(at[m] for m in first) and max(at[m] for m in first) < group_2 < min(at[m] for m in second)
    assert "Group 1 of" not in published.page  # a connected board has no group rows


def test_the_forest_plot_groups_models_by_comparison_component(published):
    """The ratings plot interleaved two groups no battle links in rank order (GenAI-Arena: '1. Prompt2prompt_edition,
    1. PlayGroundV2_generation, 2. ...' on one axis), reading as ties and an order across groups, as the full table
    did before it was grouped.  Now each group's rows come together, labelled G1/G2, a dashed rule between them, and
    the note says ratings compare only within a group."""
    board = published.leaderboard.sort("rank_corrected")
    split, second = _two_groups(board)
    page = render_report(split, published.bias, published.summary)
    plot = page[page.index("Ratings with confidence intervals, naive and corrected") :]
    plot = plot[: plot.index("</svg>")]
    labels = re.findall(r"</title>(G[12] \d+\. [^<]*)</text>", plot)
    assert len(labels) == board.height
    assert [label[:2] for label in labels] == ["G1"] * (board.height - 3) + ["G2"] * 3
    assert [label.split(" ", 2)[1:] for label in labels[-3:]] == [
        [f"{i}.", html.escape(m)] for i, m in enumerate(second, 1)
    ]
    assert plot.count('stroke-dasharray="6 4"') == 1  # the rule between the groups
    assert "Rows are grouped by comparison group (G1 the largest; a dashed rule between groups)" in page
    assert "G1 1. " not in published.page  # a connected board's labels carry no group


def test_the_slope_chart_groups_models_by_comparison_component(published):
    """The rank-change chart stacked two groups no battle links by rank alone, interleaved (#1, #1, #2, #2 ...: the
    QA pass on GenAI-Arena), after the ratings plot was grouped.  Each side now stacks group after group, labelled
    G1 #r / G2 #r."""
    board = published.leaderboard.sort("rank_corrected")
    split, second = _two_groups(board)
    in_second = pl.col("model").is_in(second)
    split = split.with_columns(
        pl.when(in_second).then(pl.col("rank_naive").rank("ordinal").over("component")).otherwise(pl.col("rank_naive"))
    )
    page = render_report(split, published.bias, published.summary)
    chart = page[page.index("Rank change from the naive to the corrected leaderboard") :]
    chart = chart[: chart.index("</svg>")]
    rows = re.findall(r'<text x="([\d.]+)" y="([\d.]+)"[^>]*>(G[12]) #(\d+) ([^<]*)</text>', chart)
    assert len(rows) == 2 * board.height
    for side in {x for x, *_ in rows}:
        stacked = sorted((float(y), g) for x, y, g, _, _ in rows if x == side)
        assert [g for _, g in stacked] == ["G1"] * (board.height - 3) + ["G2"] * 3
    assert {html.unescape(name) for _, _, g, _, name in rows if g == "G2"} == set(second)
    assert "G1 #1" not in published.page  # a connected board's labels carry no group


def test_the_console_agreement_lists_the_first_judges_counts_the_rest_and_says_which_are_listed():
    """A voter pool as reference scores 50 judges; the console prints the first :data:`PRINTED_AGREEMENT` and the
    boards, counts the rest, and repeats which judges the summary lists; without a reference it prints nothing."""
    judges = [f"voter-{i:02d}" for i in range(PRINTED_AGREEMENT + 3)]
    scores = {"accuracy_uncorrected": 0.6, "accuracy_corrected": 0.7, "log_loss_uncorrected": 0.65}
    rows = [{"judge": judge, **scores, "log_loss_corrected": 0.6} for judge in judges]
    boards = [{"judge": b, **scores, "accuracy_corrected": None, "log_loss_corrected": None} for b in ("naive board",)]
    note = agreement_listed_note("judges", len(judges), 400)
    reference = ReferenceInfo("judges", ["pool/*"], "", "", 10, agreement=rows + boards, notes=[note])
    lines = agreement_text(reference).splitlines()
    assert lines[0].startswith("Agreement with the reference judges")
    listed = [line.split() for line in lines if line.split()[:1] and line.split()[0].startswith("voter-")]
    assert [r[0] for r in listed] == judges[:PRINTED_AGREEMENT]
    assert listed[0][1:] == ["60.0%", "->", "70.0%", "0.650", "->", "0.600"]
    assert "... 3 more judges in the report and summary.json" in lines[-3]
    assert lines[-2].split() == ["naive", "board", "60.0%", "0.650"]
    assert lines[-1] == f"  (listed: the {len(judges)} judges with the most battles of 400)"
    assert agreement_text(None) == "" == agreement_text(dataclasses.replace(reference, agreement=[]))


def test_a_board_of_ties_says_why_its_rank_correlations_are_undefined(tmp_path):
    """Every battle a tie: every model rates 1000 on both boards, the summary's τ and ρ are null and the report's
    header shows "—", with no word of why (the diagnostics left the τ sentence out); now a warning and a sentence
    say it."""
    write_simulation(SimulationConfig(battles=3000, models=5, judges=2, days=1, seed=6), tmp_path / "sim")
    folder = tmp_path / "ties" / "day=2024-01-01"
    folder.mkdir(parents=True)
    battles = pl.read_parquet(tmp_path / "sim" / "battles" / "*" / "*.parquet")
    battles.with_columns(winner=pl.lit("tie")).write_parquet(folder / "part-0.parquet")
    outcome = refresh(
        str(tmp_path / "ties"), str(tmp_path / "st"), str(tmp_path / "out"), [], RefreshOptions(audit=False)
    )
    assert outcome.published is not None and outcome.summary is not None
    assert outcome.summary.kendall_tau is None
    assert any(
        w.startswith("Kendall tau and Spearman rho naive vs corrected are undefined") for w in outcome.summary.warnings
    )
    page = (Path(outcome.published.path) / "report.html").read_text()
    assert "Kendall τ and Spearman ρ between the naive and the corrected rankings are undefined" in page


def test_head_to_head_lists_the_largest_comparison_group_first(tmp_path):
    """Two groups no battle links: ranks restart in each, and the head-to-head's top models were sorted by rank
    alone, so the small group's leader was row "1." above the largest group's, the two groups interleaved (1, 1,
    2, 2, ...) and the matrices filled with pairs that never met.  Now the largest group comes first, in rank
    order, and the note says where the next group starts."""
    write_simulation(SimulationConfig(battles=3000, models=24, judges=2, days=1, seed=5), tmp_path / "sim")
    folder = tmp_path / "split" / "day=2024-01-01"
    folder.mkdir(parents=True)
    small = [f"-{i:02d}" for i in range(4)]  # models ending -00 .. -03: a group of their own

    def in_small(column: str) -> pl.Expr:
        return pl.col(column).str.slice(-3).is_in(small)

    battles = pl.read_parquet(tmp_path / "sim" / "battles" / "*" / "*.parquet")
    battles.filter(in_small("model_a") == in_small("model_b")).write_parquet(folder / "part-0.parquet")
    outcome = refresh(
        str(tmp_path / "split"), str(tmp_path / "st"), str(tmp_path / "out"), [], RefreshOptions(audit=False)
    )
    assert outcome.published is not None and outcome.summary is not None
    board = pl.read_parquet(Path(outcome.published.path) / "leaderboard.parquet")
    assert board["component"].n_unique() == 2
    h2h = outcome.summary.head_to_head
    assert h2h is not None
    expected = board.sort("component", "rank_corrected", "model")["model"].head(20).to_list()
    assert h2h.models == expected  # the 20 largest group's top (20 of its 20 models), never the small group's
    assert set(board.filter(pl.col("component") == 0)["model"]) >= set(h2h.models)
    page = text_of((Path(outcome.published.path) / "report.html").read_text())
    assert "Ranks restart in each comparison group" not in page  # one group listed: nothing to say
    # a board whose listed models cross into the second group says from which row
    two = board.with_columns(
        pl.when(pl.col("model") == expected[-1]).then(1).otherwise(pl.col("component")).alias("component")
    )
    summary = dataclasses.replace(outcome.summary, head_to_head=h2h)
    crossed = text_of(render_report(two, pl.read_parquet(Path(outcome.published.path) / "bias.parquet"), summary))
    assert "the largest group's models come first, the other groups' from row 20 on." in crossed


def test_the_counts_show_the_grade_rows_beside_the_battle_rows(published):
    """A board of battles and grades (``--scores``): the Counts section showed the battle rows alone, so grade rows
    the refresh rejected (``summary.json``'s ``score_counts``, 250 bad scores of 5,250 in a simulation: under the 5%
    that warns) were on no page, below "No row read was rejected"."""
    from biasboard.schemas.summary import Counts

    grades = Counts(read=5250, counted=5000, rejected={"bad_score": 250}, rejected_total=250)
    summary = dataclasses.replace(published.summary, score_counts=grades)
    page = render_report(published.leaderboard, published.bias, summary)
    counts = text_of(page[page.index('<section id="counts">') :])
    assert "Battle rows" in counts and "Grade rows (--scores)" in counts
    grade_part = counts[counts.index("Grade rows (--scores)") :]
    assert "5,250 rows read" in grade_part and "250 rejected" in grade_part
    assert table_rows(page, "grade-reasons") == [["bad_score", "250"]]
    assert "self-battles" not in grade_part  # grades have none
    assert "Grade rows" not in text_of(published.page)  # a board without --scores: the battle rows alone
    # ω weighs the grades against the battles: said beside grades, not on a board without any (it read "ω 0.50")
    assert "weight of pairwise vs ordinal evidence" in text_of(page)
    assert "weight of pairwise vs ordinal evidence" not in text_of(published.page)


def test_voter_judges_are_in_natural_order_in_every_table_and_list(published):
    """Voters read crowd/17 before crowd/165 in the bias table, its Not fitted list and the audit's tables, as in
    the bias panels; they sorted as text there (crowd/165, crowd/17, crowd/170)."""
    voters = dict(zip(HOSTILE_JUDGES, ["crowd/170", "crowd/17", "crowd/165"], strict=True))
    natural = ["crowd/17", "crowd/165", "crowd/170"]
    bias = published.bias.with_columns(
        pl.col("judge").replace(voters),
        pl.when(pl.col("effect") == "position").then(False).otherwise(pl.col("enabled")).alias("enabled"),
    )
    diagnostics = published.summary.diagnostics
    renamed = dataclasses.replace(
        published.summary,
        judges=[dataclasses.replace(j, judge=voters.get(j.judge, j.judge)) for j in published.summary.judges],
        diagnostics=dataclasses.replace(
            diagnostics,
            order=[dataclasses.replace(a, judge=voters.get(a.judge, a.judge)) for a in diagnostics.order],
            family=[dataclasses.replace(f, judge=voters.get(f.judge, f.judge)) for f in diagnostics.family],
        ),
    )
    page = render_report(published.leaderboard, bias, renamed)
    table = [r[0] for r in table_rows(page, "bias") if r[1] == "length"]
    assert table == ["all judges (global)", *natural], table
    assert [r[0] for r in table_rows(page, "order")] == natural
    assert [r[0] for r in table_rows(page, "length")] == natural
    family = [r[0] for r in table_rows(page, "family")]
    assert family == [j for j in natural if j in family] and family
    listed = re.search(r"Not fitted \(disabled\): (.*?)\.</p>", page)
    assert listed is not None
    judges = [name for name in re.findall(r"position \(([^)]*)\)", html.unescape(listed.group(1))) if "crowd" in name]
    assert judges == natural, listed.group(1)


def test_a_board_of_battles_and_grades_says_the_grades_set_the_scale(tmp_path, published):
    """With grades beside the battles the judges' discriminations are free (the grades set the ratings' scale), so
    they need not average 1: on a simulation of 5 judges their geometric mean was 0.85, every judge below 1, beside
    the page's "1 is average, below 1 a lax judge" and "the ratings' scale is the judges' average discrimination"."""
    config = SimulationConfig(battles=6000, models=6, judges=4, human_judges=1, days=1, scores=0.3, grades=5, seed=5)
    logs = write_simulation(config, tmp_path / "logs")
    outcome = refresh(
        str(logs / "battles" / "day=*" / "*.parquet"),
        str(tmp_path / "state"),
        str(tmp_path / "out"),
        [],
        RefreshOptions(k=3, scores_glob=str(logs / "scores" / "day=*" / "*.parquet")),
    )
    snap = Path(publish.resolve_snapshot(str(tmp_path / "out")))
    bias = pl.read_parquet(snap / "bias.parquet").filter(pl.col("effect") == "discrimination")
    board = pl.read_parquet(snap / "leaderboard.parquet")
    # The judges' average as the scale without grades defines it: weighted by each judge's verdicts.
    verdicts = {j.judge: j.n for j in outcome.summary.judges}
    weights = np.array([verdicts[j] for j in bias["judge"]], float)
    mean = math.exp(float(np.average(np.log(bias["estimate"].to_numpy()), weights=weights)))
    assert abs(mean - 1.0) > 0.01  # not centred on 1: the grades set the scale
    page = text_of(render_report(board, bias, outcome.summary))
    assert "1 is average" not in page and "the ratings' scale is the judges' average discrimination" not in page
    said = "(here {:.2f}: their geometric mean, each weighted by its verdicts)"
    assert said.format(mean) in page
    assert outcome.summary.diagnostics.judges_discrimination == pytest.approx(mean, rel=1e-9)  # the fit's own
    assert "the ratings' scale is the grades'" in page
    # A summary written before the fit recorded it: the mean of the listed judges, weighted, not the plain mean the
    # panel showed — one judge with 100× the verdicts pulls the mean to its a_j.
    older = dataclasses.replace(outcome.summary.diagnostics, judges_discrimination=None)
    heavy = [dataclasses.replace(j, n=j.n * (100 if i == 0 else 1)) for i, j in enumerate(outcome.summary.judges)]
    first = dict(zip(bias["judge"], bias["estimate"], strict=True))[heavy[0].judge]
    weights = np.array([{j.judge: j.n for j in heavy}[j] for j in bias["judge"]], float)
    pulled = math.exp(float(np.average(np.log(bias["estimate"].to_numpy()), weights=weights)))
    assert abs(pulled - first) < abs(mean - first) and f"{pulled:.2f}" != f"{mean:.2f}"
    page = text_of(render_report(board, bias, dataclasses.replace(outcome.summary, judges=heavy, diagnostics=older)))
    assert said.format(pulled) in page
    # ω = 1 weighs the grades 0 (the fit drops them): the panel said "1 is the grades' scale" there.
    at_one = dataclasses.replace(outcome.summary.diagnostics, omega=1.0)
    page = text_of(render_report(board, bias, dataclasses.replace(outcome.summary, diagnostics=at_one)))
    assert "1 is the grades' scale" not in page and "1 is average (each judge weighted by its verdicts)" in page
    # A board of battles alone keeps the average judge's wording.
    assert "1 is average" in text_of(published.page)
    assert "the ratings' scale is the judges' average discrimination" in text_of(published.page)


def test_a_board_whose_scale_a_fixed_judge_sets_says_1_is_that_judges_discrimination(published):
    """A judge's discrimination fixed at 1 (``ModelConfig.disabled``) sets the ratings' scale, the others measured
    against it: the page still said "1 is average (each judge weighted by its verdicts)" and "the ratings' scale is
    the judges' average discrimination".  It names the judge (escaped: a hostile name) and says 1 is its own."""
    from biasboard.schemas.summary import judge_label

    fixed = HOSTILE_JUDGES[0]
    off = (pl.col("effect") == "discrimination") & (pl.col("judge") == fixed)
    bias = published.bias.with_columns(pl.when(off).then(False).otherwise(pl.col("enabled")).alias("enabled"))
    diagnostics = dataclasses.replace(published.summary.diagnostics, scale_judges=[fixed])
    page = render_report(published.leaderboard, bias, dataclasses.replace(published.summary, diagnostics=diagnostics))
    text = text_of(page)
    assert "1 is average" not in text and "the ratings' scale is the judges' average discrimination" not in text
    label = judge_label(fixed)
    said = f"1 is the discrimination of {label}, fixed at 1 (it sets the ratings' scale), not the judges' average"
    assert said in text
    assert f"less sharply than {label} does" in text
    assert f"the ratings' scale is the discrimination of {label}, fixed at 1" in text
    assert fixed not in page  # escaped
    checker = Checker()
    checker.feed(page)
    assert not checker.errors and not checker.stack
    assert "1 is average" in text_of(published.page)  # a board without a fixed judge keeps its wording


def test_a_move_past_a_graded_only_model_reads_in_the_ranks_it_is_counted_in():
    """A move is counted among the models both boards rank; with a graded-only model above it a model's "▲ 1" read
    "(naive #6 → #6)", its corrected rank counting the model it never passed."""
    from biasboard.report.html import _move_line
    from biasboard.schemas.summary import ModelMove

    row = ModelMove("m", 0, rank_naive=6, rank_corrected=6, rank_change=1, corrections=[], rank_without_all=6,
                    unexplained=1)  # fmt: skip
    assert "(naive #6 → #5 of the models both rank, #6)" in _move_line(row)
    plain = dataclasses.replace(row, rank_corrected=5)
    assert "(naive #6 → #5)" in _move_line(plain)


def test_a_board_weighed_at_omega_off_one_half_says_its_intervals_are_the_godambe_sandwich(published) -> None:
    """With grades at ω ∉ {0.5, 1} the corrected intervals are the sandwich of the weighted likelihood
    (``ranking/composite.py``), not its Laplace posterior: the note under the intervals says so, and at ω = 0.5
    it still names the Laplace approximation."""
    summary = published.summary
    grades = Counts(read=10, counted=10, rejected={}, rejected_total=0)
    for omega, godambe in ((0.8, True), (0.5, False), (1.0, False)):
        diagnostics = dataclasses.replace(summary.diagnostics, omega=omega)
        uncertainty = "godambe" if godambe else "laplace"  # (what the fit writes: test_ranking_recovery)
        page = render_report(
            published.leaderboard,
            published.bias,
            dataclasses.replace(summary, diagnostics=diagnostics, score_counts=grades, uncertainty=uncertainty),
        )
        assert ("Godambe (sandwich) covariance of the ω-weighted likelihood" in page) == godambe, omega
        assert ("from the Laplace approximation to the posterior" in page) != godambe, omega
        graded_scale = "discrimination measured against it), not the judges"  # (GRADED_SCALE_NOTE, escaped apart)
        assert (graded_scale in page) == (omega != 1.0), omega  # ω = 1 weighs the grades 0: they set no scale
