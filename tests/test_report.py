"""report.html: offline, escaped, well-formed, faithful to its inputs, and calm about missing parts."""

from __future__ import annotations

import itertools
import math
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import polars as pl
import pytest
from biasboard.report.html import MOVERS, TOP_N, render_report, sanitize_fragment
from biasboard.report.svg import Part, Series, esc, forest_plot, nice_ticks, slope_chart, split_bars

HOSTILE = [
    "<script>alert(1)</script>",
    'quote "double" & \'single\'',
    "模型-α",
    "Модель",
    "a&amp;b",  # an already-escaped-looking name must come back literally
    "https://evil.example/x.js",
    "</style><img src=x onerror=alert(2)>",
]
JUDGES = ["*", "<script>judge</script>", "J & \"K\"", "审判官"]
VOID = {"area", "br", "col", "hr", "img", "input", "link", "meta", "wbr", "source", "track", "embed", "base"}
SVG_RE = re.compile(r"<svg\b.*?</svg>", re.S)


def make_inputs(n: int = 7, names: list[str] | None = None):
    names = list(names or HOSTILE)[:n] + [f"model-{i:03d}" for i in range(max(0, n - len(names or HOSTILE)))]
    rating_c = [1000 + 10.0 * (n - i) + 0.25 for i in range(n)]  # corrected rank i + 1
    # naive: swap the first two and the last two so some ranks change
    naive_order = list(range(n))
    if n >= 2:
        naive_order[0], naive_order[1] = 1, 0
    if n >= 4:
        naive_order[-1], naive_order[-2] = naive_order[-2], naive_order[-1]
    rank_n = [0] * n
    for pos, i in enumerate(naive_order):
        rank_n[i] = pos + 1
    rating_n = [1000 + 9.0 * (n - rank_n[i] + 1) - 0.35 for i in range(n)]
    lb = pl.DataFrame(
        {
            "model": names,
            "n_battles": [100 + 7 * i for i in range(n)],
            "rank_naive": rank_n,
            "rating_naive": rating_n,
            "ci_low_naive": [r - 12.5 for r in rating_n],
            "ci_high_naive": [r + 13.25 for r in rating_n],
            "rank_corrected": list(range(1, n + 1)),
            "rating_corrected": rating_c,
            "ci_low_corrected": [r - 15.0 for r in rating_c],
            "ci_high_corrected": [r + 14.75 for r in rating_c],
            "rank_change": [rank_n[i] - (i + 1) for i in range(n)],
            "p_top_k": [max(0.0, 1 - i / 5) for i in range(n)],
        }
    )
    bias_rows = []
    for k, effect in enumerate(["position", "length", "affinity", "tie", "discrimination"]):
        for j, judge in enumerate(JUDGES):
            est = 0.1 * k + 0.01 * j + (1.0 if effect == "discrimination" else 0.0)
            bias_rows.append(
                {"judge": judge, "effect": effect, "estimate": est, "ci_low": est - 0.05, "ci_high": est + 0.07,
                 "identified": effect != "length", "enabled": not (effect == "affinity" and j == 2),
                 "note": "<b>note</b> & more" if j == 1 else ""}
            )
    bias_rows.append({"judge": "*", "effect": "position_sd", "estimate": 0.123, "ci_low": 0.05, "ci_high": 0.2,
                      "identified": True, "enabled": True, "note": ""})
    summary = {
        "kendall_tau": 0.8123,
        "spearman": 0.9311,
        "counts": {"read": 1000, "counted": 950,
                   "rejected": {"bad_winner": 30, "missing:judge": 15, "<script>reason</script>": 5}},
        "judges": JUDGES[1:],
        "diagnostics": {
            "order": {
                JUDGES[1]: {"flip_rate": 0.125, "split": {"A": 0.5, "B": 0.3, "tie": 0.2}, "n_pairs": 400,
                            "consistent_win_rate": 0.61, "consistent_win_rate_se": 0.014},
                JUDGES[2]: {"flip_rate": 0.0625, "split": {"A": 120, "B": 100, "tie": 30}, "n_pairs": 250},
            },
            "identifiability": {
                "length": {"profile_range_nats": 0.0012, "prior_selected": True, "corr_theta": 0.41},
                "position": {"profile_range_nats": 154.2, "prior_selected": False},
            },
            "connectivity": {"n_components": 2, "components": [names[:-1], names[-1:]]},
            "solver": {"iterations": 12, "grad_norm": 3e-12},
        },
        "warnings": ["Judge <i>x</i> saw few battles & should be read with care."],
    }
    return lb, pl.DataFrame(bias_rows), summary


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


@pytest.fixture(scope="module")
def page() -> str:
    lb, bias, summary = make_inputs()
    audit = "<h3>Order audit</h3><p>flip <b>12%</b></p><script>alert(3)</script>"
    return render_report(lb, bias, summary, audit_html=audit, title='Report <script>x</script> "t"')


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
    assert page.count("https://") == page.count("https://evil.example/x.js")
    assert "http://" not in page
    csp = [v for t, k, v in c.attrs if t == "meta" and k == "content" and v and "default-src" in v]
    assert csp and "default-src 'none'" in csp[0]


def test_every_svg_is_well_formed_xml(page):
    svgs = SVG_RE.findall(page)
    assert len(svgs) >= 4  # forest, slope, bias panels, position split, dead letters
    for svg in svgs:
        root = ET.fromstring(svg)
        assert root.tag == "svg"
        assert "<script" not in svg
        assert not [el for el in root.iter() if el.tag in {"script", "foreignObject", "image", "use"}]


def test_svg_text_roundtrips_hostile_names(page):
    texts = " ".join("".join(ET.fromstring(s).itertext()) for s in SVG_RE.findall(page))
    for name in ["<script>alert(1)</script>", "模型-α", "Модель", "a&amp;b"]:
        assert name in texts


def test_leaderboard_table_matches_inputs(page):
    lb, _, _ = make_inputs()
    rows = table_rows(page, "leaderboard")
    assert len(rows) == lb.height
    by_model = {r[0]: r for r in rows}
    assert set(by_model) == set(lb["model"].to_list())  # names come back exactly, after unescaping
    for rec in lb.to_dicts():
        r = by_model[rec["model"]]
        assert r[1] == str(rec["rank_corrected"])
        assert r[2] == (f"{rec['rating_corrected']:.1f} [{rec['ci_low_corrected']:.1f}, "
                        f"{rec['ci_high_corrected']:.1f}]")
        assert r[3] == str(rec["rank_naive"])
        assert r[4] == f"{rec['rating_naive']:.1f} [{rec['ci_low_naive']:.1f}, {rec['ci_high_naive']:.1f}]"
        move = rec["rank_naive"] - rec["rank_corrected"]
        assert r[5] == ("0" if move == 0 else f"▲ {move}" if move > 0 else f"▼ {-move}")
        assert r[6] == f"{rec['p_top_k']:.2f}"
        assert r[7] == f"{rec['n_battles']:,}"
    # ordered by corrected rank
    assert [int(r[1]) for r in rows] == sorted(int(r[1]) for r in rows)


def test_bias_table_matches_inputs(page):
    _, bias, _ = make_inputs()
    rows = table_rows(page, "bias")
    assert len(rows) == bias.height
    assert all(len(r) == 7 for r in rows)  # no bootstrap column when there is no bootstrap CI
    seen = {(r[0], r[1]): r for r in rows}
    for rec in bias.to_dicts():
        judge = "all judges (global)" if rec["judge"] == "*" else rec["judge"]
        r = seen[(judge, rec["effect"])]
        assert r[2] == f"{rec['estimate']:.3f}"
        assert r[3] == f"[{rec['ci_low']:.3f}, {rec['ci_high']:.3f}]"
        assert r[4] == ("identified" if rec["identified"] else "prior-selected")
        assert r[5] == ("on" if rec["enabled"] else "off")
        assert r[6] == rec["note"]


def test_summary_numbers_and_plain_words(page):
    text = text_of(page)
    assert "0.812" in text and "0.931" in text
    assert "The length coefficient is prior-selected: these comparisons cannot tell it from quality" in text
    assert "The position coefficient is identified by the data" in text
    assert "2 separate groups" in text
    assert "Judge <i>x</i> saw few battles & should be read with care." in text
    # counts and dead letters by reason, the hostile reason escaped
    rows = {r[0]: r[1] for r in table_rows(page, "reasons")}
    assert rows == {"bad_winner": "30", "missing:judge": "15", "<script>reason</script>": "5"}
    assert "1,000" in text and "950" in text
    assert "Every row read is either counted or a dead letter" in text
    # per-judge position split and flip rate
    order = {r[0]: r for r in table_rows(page, "order")}
    assert order[JUDGES[1]][1:] == ["400", "12.5%", "0.500", "0.300", "0.200", "0.610 ± 0.014"]
    assert order[JUDGES[2]][1:] == ["250", "6.2%", "120.000", "100.000", "30.000", "—"]


def test_audit_fragment_is_embedded_sanitised(page):
    assert "Order audit" in page and "<b>12%</b>" in page
    assert "alert(3)" not in page


def test_conservation_mismatch_is_called_out():
    lb, bias, summary = make_inputs()
    summary["counts"] = {"read": 1000, "counted": 900, "rejected": {"bad_winner": 50}}
    text = text_of(render_report(lb, bias, summary))
    assert "50 rows are unaccounted for" in text


@pytest.mark.parametrize(
    "args",
    [
        (pl.DataFrame(), pl.DataFrame(), {}),
        (None, None, None),
        (pl.DataFrame({"model": ["only"]}), pl.DataFrame({"judge": ["j"]}), {"diagnostics": "garbage"}),
        (
            pl.DataFrame({"model": ["a", "b"], "rating_corrected": [float("nan"), None],
                          "rank_corrected": [None, 1], "ci_low_corrected": [math.inf, 990.0]}),
            pl.DataFrame({"judge": ["*"], "effect": ["position"], "estimate": [None]}),
            {"counts": 5, "warnings": None, "judges": 3, "kendall_tau": None,
             "diagnostics": {"order": [{"judge": "x", "split": "bad"}, 7], "identifiability": [1, {"covariate": "len"}],
                             "connectivity": {"components": "nope"}}},
        ),
    ],
)
def test_empty_or_missing_parts_render(args):
    page = render_report(*args)
    check(page)
    for svg in SVG_RE.findall(page):
        ET.fromstring(svg)
    assert "<script" not in page.lower()
    assert page.startswith("<!DOCTYPE html>")


def test_empty_inputs_say_so():
    text = text_of(render_report(pl.DataFrame(), pl.DataFrame(), {}))
    assert "No models in this snapshot." in text
    assert "No bias coefficients in this snapshot." in text


def test_large_leaderboard_plots_top_and_movers_lists_all():
    n = 300
    lb, bias, summary = make_inputs(n, names=[f"m{i}" for i in range(n)])
    # one far mover outside the top: naive rank 290 → corrected 200 (swap two naive ranks)
    ranks = lb["rank_naive"].to_list()
    j = ranks.index(290)
    ranks[199], ranks[j] = 290, ranks[199]
    lb = lb.with_columns(pl.Series("rank_naive", ranks))
    page = render_report(lb, bias, summary)
    check(page)
    assert len(table_rows(page, "leaderboard")) == n
    forest = ET.fromstring(SVG_RE.findall(page)[0])
    labels = ["".join(t.itertext()) for t in forest.iter("text") if t.get("text-anchor") == "end"]
    # the top N, then the only four models outside it whose rank changed (fewer than MOVERS)
    movers = {f"m{i}" for i in (199, j, n - 2, n - 1)}
    assert len(labels) == TOP_N + len(movers)
    assert {lab.split(". ", 1)[1] for lab in labels[TOP_N:]} == movers
    assert f"Showing {TOP_N + len(movers)} of {n} models" in text_of(page)

    # many movers outside the top: only the MOVERS largest changes are plotted
    reversed_tail = list(range(1, TOP_N + 1)) + list(range(n, TOP_N, -1))
    page = render_report(lb.with_columns(pl.Series("rank_naive", reversed_tail)), bias, summary)
    forest = ET.fromstring(SVG_RE.findall(page)[0])
    labels = ["".join(t.itertext()) for t in forest.iter("text") if t.get("text-anchor") == "end"]
    assert len(labels) == TOP_N + MOVERS
    moves = {f"m{i}": abs(reversed_tail[i] - (i + 1)) for i in range(TOP_N, n)}
    plotted = [moves[lab.split(". ", 1)[1]] for lab in labels[TOP_N:]]
    assert min(plotted) >= sorted(moves.values(), reverse=True)[MOVERS - 1]


def test_position_section_only_with_order_data():
    lb, bias, summary = make_inputs()
    del summary["diagnostics"]["order"]
    page = render_report(lb, bias, summary)
    assert 'id="position"' not in page
    assert 'href="#position"' not in page


# --------------------------------------------------------------------------- the fragment sanitiser


def test_sanitize_fragment_removes_active_and_remote_content():
    frag = (
        "<div class=x onclick='steal()'><p>kept & shown</p><script>evil()</script>"
        "<img src='https://x.example/a.png'><a href='https://x.example/'>link</a><a href='#local'>in</a>"
        "<style>.a{background:url(https://x.example/b.png)}</style><span style='color:red'>red</span>"
        "<iframe src='//x.example'></iframe><svg viewBox='0 0 1 1'><circle r='1'/></svg><table><tr><td>open"
    )
    out = sanitize_fragment(frag)
    check(out)
    low = out.lower()
    for bad in ("<script", "evil()", "onclick", "<img", "https://", "url(", "<iframe", "//x.example"):
        assert bad not in low
    assert "kept &amp; shown" in out and 'href="#local"' in out and 'style="color:red"' in out
    assert "<circle" in out and out.endswith("</td></tr></table></div>")


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


def test_slope_and_split_builders_escape_and_parse():
    svg = slope_chart(["<a>", "b&c"], [1, 2], [2, 1], title="s")
    texts = "".join(ET.fromstring(svg).itertext())
    assert "#1 <a>" in texts and "#2 <a>" in texts and "#1 b&c" in texts
    svg = split_bars(["<j>"], [Part("A", "#111", [3]), Part("B", "#222", [1])], title="p", annotations=["f<1>"])
    root = ET.fromstring(svg)
    widths = [float(r.get("width")) for r in root.iter("rect") if r.get("fill") in ("#111", "#222")
              and float(r.get("width")) > 11]
    assert widths[0] == pytest.approx(3 * widths[1], rel=1e-2)
    assert "f<1>" in "".join(root.itertext())
    assert esc('"') == "&quot;" and esc("'") == "&#x27;"


def test_reads_the_audit_judges_records_and_counts_totals():
    lb, bias, summary = make_inputs()
    summary["diagnostics"] = {
        "judges": [
            {"judge": "j<1>", "slot_first_share": 0.6, "slot_second_share": 0.3, "slot_tie_share": 0.1,
             "order_flip_rate": None, "order_pairs": 0},
            {"judge": "j2", "slot_first_share": 0.45, "slot_second_share": 0.45, "slot_tie_share": 0.1,
             "order_flip_rate": 0.2, "order_pairs": 50},
        ],
        "identifiability": {"length": {"profile_range_nats": 2.5}},
    }
    summary["counts"] = {"read": 10, "counted": 7, "rejected_total": 3, "self_battles": 2}
    page = render_report(lb, bias, summary)
    check(page)
    order = {r[0]: r for r in table_rows(page, "order")}
    assert order["j<1>"][1:6] == ["0", "—", "0.600", "0.300", "0.100"]
    assert order["j2"][1:6] == ["50", "20.0%", "0.450", "0.450", "0.100"]
    text = text_of(page)
    assert "not seen in both orders" in text
    assert "The length coefficient has a profile-likelihood range of 2.5 nats." in text
    assert "Every row read is either counted or a dead letter" in text
    assert "Other diagnostics" not in text  # the judges records were used, not dumped


def test_bias_table_shows_bootstrap_ci_when_present():
    lb, bias, summary = make_inputs()
    bias = bias.with_columns(
        (pl.col("ci_low") - 0.5).alias("boot_ci_low"), (pl.col("ci_high") + 0.5).alias("boot_ci_high")
    )
    rows = table_rows(render_report(lb, bias, summary), "bias")
    rec = bias.to_dicts()[0]
    row = next(r for r in rows if r[0] == "all judges (global)" and r[1] == rec["effect"])
    assert row[4] == f"[{rec['boot_ci_low']:.3f}, {rec['boot_ci_high']:.3f}]"
