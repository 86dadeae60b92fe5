"""Style features (issue 12.4): header/list/bold counts → cells → per-judge style effects → the style-kept board.

The importer is checked on a small file in FastChat's ``clean_battle`` format written here (ids, counts and
verdicts only, no text); the fit on simulated data with known style effects.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from biasboard.importers.common import read_all
from biasboard.importers.registry import import_path
from biasboard.importers.style_counts import style_counts
from biasboard.pipelines.refresh import RefreshOptions, refresh
from biasboard.ranking import ModelConfig, build_dataset, fit_bias_aware
from biasboard.ranking.config import STYLE_EFFECTS
from biasboard.ranking.rank_stats import kendall_tau_b
from biasboard.schemas.battle import STYLE_COUNT_COLUMNS
from biasboard.schemas.cells import STYLE_SQUARES, STYLE_SUMS
from biasboard.schemas.families import FamilyMap
from biasboard.schemas.rules import REASON_BAD_LENGTH, REASON_BAD_STYLE_COUNT
from biasboard.schemas.summary import Summary
from biasboard.simulate import SimulationConfig, write_simulation
from biasboard.simulate.simulator import Parameters, draw_parameters, simulate_days
from biasboard.transforms.cells import merge_cells, partial_cells
from biasboard.transforms.validate import validate_battles


def _meta(tokens: int, headers: list[int], ordered: int, unordered: int, bold: tuple[int, int], side: str) -> dict:
    return {
        f"sum_assistant_{side}_tokens": tokens,
        f"header_count_{side}": {f"h{i + 1}": n for i, n in enumerate(headers)},
        f"list_count_{side}": {"ordered": ordered, "unordered": unordered},
        f"bold_count_{side}": {"**": bold[0], "__": bold[1]},
    }


def test_fastchat_conv_metadata_gives_the_style_counts(tmp_path):
    """Sub-counts are summed as FastChat's clean_battle writes them; a row without metadata has no style."""
    meta = {
        **_meta(120, [1, 2, 0, 0, 0, 0], 3, 4, (5, 1), "a"),
        **_meta(340, [0, 0, 0, 0, 0, 1], 0, 0, (0, 0), "b"),
        "sum_user_tokens": 9,
    }
    rows = [
        {"question_id": "q1", "model_a": "a", "model_b": "b", "winner": "model_b", "judge": "u1", "tstamp": 1.72e9,
         "conv_metadata": meta},
        {"question_id": "q2", "model_a": "b", "model_b": "a", "winner": "tie", "judge": "u2", "tstamp": 1.72e9 + 5},
        {"question_id": "q3", "model_a": "b", "model_b": "a", "winner": "model_a", "judge": "u2", "tstamp": 1.72e9 + 9,
         "conv_metadata": {**meta, "bold_count_b": {"**": -2, "__": 0}}},
    ]  # fmt: skip
    path = tmp_path / "clean_battle.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    result = import_path("fastchat", path)
    out = pl.from_arrow(result.rows)
    assert out["battle_id"].to_list() == ["q1", "q2"]
    assert out.select("header_count_a", "header_count_b", "list_count_a", "list_count_b").rows() == [
        (3, 1, 7, 0),
        (None, None, None, None),
    ]
    assert out["bold_count_a"].to_list() == [6, None] and out["bold_count_b"].to_list() == [0, None]
    assert out["len_a"].to_list() == [120, None]
    assert result.dead_by_reason() == {REASON_BAD_STYLE_COUNT: 1}
    assert validate_battles(result.rows).rejected == {}


def test_a_log_with_some_of_the_style_counts_says_none_is_used(tmp_path):
    """Header counts without list and bold counts give no battle style information (the ingest needs all six): the
    import said nothing, and the board came out with no style correction and no word of why."""
    meta = {"header_count_a": {"h1": 1, "h2": 0}, "header_count_b": {"h1": 0, "h2": 2}}
    rows = [
        {"question_id": "q1", "model_a": "a", "model_b": "b", "winner": "model_b", "judge": "u1", "tstamp": 1.72e9,
         "conv_metadata": meta},
    ]  # fmt: skip
    path = tmp_path / "clean_battle.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    result = import_path("fastchat", path)
    (note,) = [n for n in result.notes if n.startswith("style counts:")]
    assert "header_count_a, header_count_b but not list_count_a" in note and "no battle has style" in note, note
    full = {**_meta(120, [1, 2, 0, 0, 0, 0], 3, 4, (5, 1), "a"), **_meta(340, [0, 0, 0, 0, 0, 1], 0, 0, (0, 0), "b")}
    path.write_text(json.dumps({**rows[0], "conv_metadata": full}) + "\n")
    assert not [n for n in import_path("fastchat", path).notes if n.startswith("style counts:")]


def test_fastchat_sub_counts_written_as_text_are_read_as_numbers(tmp_path):
    """A log whose sub-counts are text (``"h1": "2"``) had them summed as text: "1", "2", "0", ... made a header count
    of 120,000 for an answer with three headers.  They are read as numbers, and one that is not a number
    dead-letters its row as a bad style count (as a plain text count that is not a number does)."""
    meta = {
        **_meta(120, [1, 2, 0, 0, 0, 0], 3, 4, (5, 1), "a"),
        **_meta(340, [0, 0, 0, 0, 0, 1], 0, 0, (0, 0), "b"),
    }
    as_text = {**meta, "header_count_a": {k: str(v) for k, v in meta["header_count_a"].items()}}
    rows = [
        {"question_id": "q1", "model_a": "a", "model_b": "b", "winner": "model_b", "judge": "u1", "tstamp": 1.72e9,
         "conv_metadata": as_text},
        {"question_id": "q2", "model_a": "b", "model_b": "a", "winner": "model_a", "judge": "u2", "tstamp": 1.72e9 + 9,
         "conv_metadata": {**as_text, "header_count_a": {**as_text["header_count_a"], "h2": "two"}}},
    ]  # fmt: skip
    path = tmp_path / "clean_battle.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    result = import_path("fastchat", path)
    out = pl.from_arrow(result.rows)
    assert out["battle_id"].to_list() == ["q1"]
    assert out.select("header_count_a", "header_count_b").rows() == [(3, 1)]
    assert result.dead_by_reason() == {REASON_BAD_STYLE_COUNT: 1}


def _battles(metas: list[dict]) -> list[dict]:
    """FastChat clean_battle rows around the given ``conv_metadata`` (``None``: the row has none)."""
    return [
        {"question_id": f"q{i}", "model_a": "a", "model_b": "b", "winner": "model_a", "judge": "u",
         "tstamp": 1.72e9 + i, **({} if meta is None else {"conv_metadata": meta})}
        for i, meta in enumerate(metas)
    ]  # fmt: skip


def _write(tmp_path: Path, rows: list[dict], layout: str, name: str) -> Path:
    path = tmp_path / (f"{name}.json" if layout == "array" else f"{name}.jsonl")
    path.write_text(json.dumps(rows) if layout == "array" else "\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def _uniform_metas(n: int) -> list[dict]:
    return [
        {**_meta(100 + i, [i % 3, 1, 0, 0, 0, 0], i, 2, (i, 1), "a"),
         **_meta(200 + i, [0, i % 2, 0, 0, 0, 0], 1, i % 4, (2, 0), "b")}
        for i in range(n)
    ]  # fmt: skip


STYLE_AND_LENGTHS = ["battle_id", "len_a", "len_b", *STYLE_COUNT_COLUMNS]


@pytest.mark.parametrize("layout", ["array", "lines"])
def test_fastchat_counts_written_as_objects_numbers_and_text_in_one_log_are_all_read(tmp_path, layout):
    """A log that writes a count as an object of sub-counts on some battles, a number on others and text on others
    gives every battle the counts the same log written uniformly gives.  Before, the reader typed the field by its
    objects and made the numbers null (those battles imported without style, nothing naming why), or by its text,
    rendering each object as ``"{0,1,...}"``, which dead-lettered its battle as a bad style count (6 of these 8)."""
    uniform = _uniform_metas(8)
    mixed = json.loads(json.dumps(uniform))
    for i, meta in enumerate(mixed):
        if i % 3 == 1:  # plain numbers: the sum of the sub-counts
            for name in ("header_count_a", "list_count_b", "bold_count_a"):
                meta[name] = sum(meta[name].values())
        elif i % 3 == 2:  # numbers as text, and a token count as text
            for name in ("header_count_b", "bold_count_b"):
                meta[name] = str(sum(meta[name].values()))
            meta["sum_assistant_a_tokens"] = str(meta["sum_assistant_a_tokens"])
        elif i == 3:  # a sub-count as text beside numbers
            meta["list_count_a"]["ordered"] = str(meta["list_count_a"]["ordered"])
    want = import_path("fastchat", _write(tmp_path, _battles(uniform), layout, "uniform"))
    got = import_path("fastchat", _write(tmp_path, _battles(mixed), layout, "mixed"))
    assert got.dead_by_reason() == {} and got.notes == want.notes
    expected = pl.from_arrow(want.rows).select(STYLE_AND_LENGTHS)
    assert expected.null_count().sum_horizontal().item() == 0
    assert pl.from_arrow(got.rows).select(STYLE_AND_LENGTHS).equals(expected)


def test_one_odd_count_among_objects_decodes_the_objects_once_not_per_sub_count(tmp_path):
    """One count written as a number among 2,000 written as objects: the field is text on every row, and the mapping
    read each object's sub-counts through an expression that decoded every row's text again for each sub-count and
    each use of it (one odd value among 200k nested records: 5.4 s of a 12.5 s import, against 3.5 s for the
    uniform log, profiled).  The objects are decoded once; the mapping reads the decoded column."""
    metas = _uniform_metas(2_000)
    metas[1_000]["header_count_a"] = sum(metas[1_000]["header_count_a"].values())
    path = _write(tmp_path, _battles(metas), "array", "clean_battle")
    raw = read_all([path], scalar=())
    assert raw.schema["conv_metadata"].to_schema()["header_count_a"] == pl.String  # the odd value made the field text
    counts = style_counts(raw, [])
    assert [e.meta.output_name() for e in counts] == list(STYLE_COUNT_COLUMNS)
    assert not [str(e) for e in counts if "json_decode" in str(e)]
    want = pl.from_arrow(import_path("fastchat", _write(tmp_path, _battles(_uniform_metas(2_000)), "array", "u")).rows)
    assert raw.select(counts).equals(want.select(STYLE_COUNT_COLUMNS))


@pytest.mark.parametrize("layout", ["array", "lines"])
def test_a_count_no_representation_reads_leaves_its_battle_without_style_and_says_why(tmp_path, layout):
    """A list where a count belongs, or an object whose sub-count is an object, is no count: that battle is imported
    without style (counted as missing by the style coverage, not rejected) and a note names the field and the
    cause.  Before, one list made the reader keep the whole ``conv_metadata`` as text, so every battle lost its
    counts and its token lengths, with no word; an object sub-count made the others' sub-counts null (wrong sums)."""
    metas = _uniform_metas(4)
    metas[1]["header_count_a"] = [1, 2]
    metas[2]["header_count_a"]["h2"] = {"x": 1}
    result = import_path("fastchat", _write(tmp_path, _battles(metas), layout, "clean_battle"))
    out = pl.from_arrow(result.rows)
    assert out["header_count_a"].to_list() == [1, None, None, 1]
    assert out["len_a"].to_list() == [100, 101, 102, 103] and out["bold_count_b"].null_count() == 0
    (note,) = [n for n in result.notes if n.startswith("conv_metadata.header_count_a:")]
    assert "2 row(s) hold a list, or an object that is not one of counts" in note and "no style information" in note
    assert result.dead_by_reason() == {}


@pytest.mark.parametrize("layout", ["array", "lines"])
def test_a_log_whose_conv_metadata_is_text_on_some_rows_keeps_the_other_rows_counts(tmp_path, layout):
    """``conv_metadata`` text on one battle (``"n/a"``) made the reader keep the field as text on every row: no
    battle had style counts or token lengths, and nothing said so.  Each row's object is read from its JSON."""
    metas: list = _uniform_metas(4)
    metas[2] = "n/a"
    uniform = import_path("fastchat", _write(tmp_path, _battles(_uniform_metas(4)), layout, "uniform"))
    result = import_path("fastchat", _write(tmp_path, _battles(metas), layout, "clean_battle"))
    got, want = (pl.from_arrow(r.rows).select(STYLE_AND_LENGTHS) for r in (result, uniform))
    assert got.filter(pl.col("battle_id") != "q2").equals(want.filter(pl.col("battle_id") != "q2"))
    assert got.filter(pl.col("battle_id") == "q2").null_count().sum_horizontal().item() == len(STYLE_AND_LENGTHS) - 1
    assert "conv_metadata: 1 row(s) hold something else than an object" in " ".join(result.notes)


@pytest.mark.parametrize("layout", ["array", "lines"])
@pytest.mark.parametrize("varying", [False, True], ids=["alone", "beside-a-count-written-as-a-number"])
def test_a_token_count_true_among_float_counts_is_no_length_whatever_the_other_rows(tmp_path, layout, varying):
    """``sum_assistant_a_tokens: true`` among float token counts (a pandas round trip writes counts as floats) was
    imported as a length of 1 token when nothing else in the log varied (pyarrow reads ``true`` among floats as
    1.0), and dead-lettered as a bad length when another count did: the battle's fate hung on other rows."""
    metas = _uniform_metas(4)
    for meta in metas:
        meta["sum_assistant_a_tokens"] = float(meta["sum_assistant_a_tokens"])
    metas[1]["sum_assistant_a_tokens"] = True
    if varying:
        metas[3]["list_count_b"] = 2  # a plain number where the others write an object of sub-counts
    result = import_path("fastchat", _write(tmp_path, _battles(metas), layout, "clean_battle"))
    assert result.dead_by_reason() == {REASON_BAD_LENGTH: 1}
    out = pl.from_arrow(result.rows)
    assert out["battle_id"].to_list() == ["q0", "q2", "q3"] and out["len_a"].to_list() == [100, 102, 103]


def test_bad_style_counts_are_dead_lettered_and_null_is_unknown():
    rows = pl.DataFrame(
        {
            "battle_id": ["1", "2", "3", "4", "5"],
            "ts": ["2024-01-01"] * 5,
            "judge": ["j"] * 5,
            "model_a": ["a"] * 5,
            "model_b": ["b"] * 5,
            "winner": ["model_a"] * 5,
            "header_count_a": ["2", "x", "1.5", None, "-1"],
            "header_count_b": ["0", "0", "0", "0", "0"],
        }
    )
    checked = validate_battles(rows)
    assert checked.rejected == {REASON_BAD_STYLE_COUNT: 3}
    assert checked.valid["_header_count_a"].to_list() == [2.0, None]
    assert np.all(checked.valid["_list_count_a"].is_null().to_numpy())


# --------------------------------------------------------------------------- the fit


def _simulated(config: SimulationConfig) -> tuple[pa.Table, Parameters]:
    params = draw_parameters(config)
    family_map = FamilyMap.with_user_rules()
    cells = merge_cells([partial_cells(b, family_map).cells for _, b, _ in simulate_days(config, params)])
    return cells, params


def _tau(fit, params: Parameters) -> float:
    truth = dict(zip(params.model_names.tolist(), params.theta, strict=True))
    return kendall_tau_b(np.array([truth[m] for m in fit.models]), fit.rating)


#: Judges rewarding headers, lists and bold, with the models' formatting anti-correlated with quality.
STYLED = SimulationConfig(
    battles=24_000, models=10, judges=3, days=1, style=True, corr_style=-0.7, style_effects=(0.6, 0.4, 0.3), seed=3
)


@pytest.fixture(scope="module")
def styled() -> tuple[pa.Table, Parameters]:
    return _simulated(STYLED)


def test_fit_recovers_the_style_effects_and_removing_style_improves_the_board(styled):
    cells, params = styled
    data = build_dataset(cells)
    fit = fit_bias_aware(data)
    kept = fit_bias_aware(data, config=ModelConfig(style=False))
    names = params.judge_names.tolist()
    errors, covered = [], 0
    for j, judge in enumerate(names):
        for k, feature in enumerate(STYLE_EFFECTS):
            effect = getattr(fit.judges[judge], feature)
            lo, hi = effect.conf_int(0.05)
            errors.append(effect.estimate - params.style_effect[j, k])
            covered += lo <= params.style_effect[j, k] <= hi
    assert np.max(np.abs(errors)) < 0.2, errors
    assert covered >= 6, covered  # of 9 95% intervals (P(< 6) ≈ 6e-4 if calibrated; measured 94% over 54)
    glob = fit.judges["*"]
    assert [getattr(glob, f).estimate for f in STYLE_EFFECTS] == pytest.approx(STYLED.style_effects, abs=0.25)
    assert kept.judges["*"].header is None  # the style-kept model has no style effects
    tau_removed, tau_kept = _tau(fit, params), _tau(kept, params)
    assert tau_removed > tau_kept + 0.05, (tau_removed, tau_kept)  # 6 seeds: 0.978 vs 0.800 on average


def test_without_style_the_model_has_no_style_parameters_and_the_same_numbers(styled):
    """Style cells fitted with style=False match the same cells with the style columns dropped (summed over
    the style bins): no style parameter is left.  Close, not equal to the bit: the style bins split cells,
    which moves each cell's mean length covariate (the length term uses cell means).  Data without style
    counts have one style bin, so their cells — and the published numbers — are unchanged to the bit
    (the golden snapshot pins that)."""
    cells, _ = styled
    off = fit_bias_aware(build_dataset(cells), config=ModelConfig(style=False, profile=False))
    stripped = merge_cells([cells.drop(["style_bin", "n_style", *STYLE_SUMS, *STYLE_SQUARES])])
    plain_data = build_dataset(stripped)
    assert not plain_data.pairs.has_style and plain_data.pairs.style is None
    plain = fit_bias_aware(plain_data, config=ModelConfig(profile=False))
    np.testing.assert_allclose(off.rating, plain.rating, atol=5e-3)
    assert off.bias["effect"].to_list() == plain.bias["effect"].to_list()
    assert not set(STYLE_EFFECTS) & set(plain.bias["effect"].to_list())
    # Switching a style effect off is a no-op without style counts, and fixes it at zero with them.
    quiet = ModelConfig(profile=False, disabled=frozenset({("*", "bold")}))
    np.testing.assert_array_equal(fit_bias_aware(plain_data, config=quiet).rating, plain.rating)
    no_bold = fit_bias_aware(build_dataset(cells), config=quiet)
    assert no_bold.judges["*"].bold is not None and not no_bold.judges["*"].bold.enabled
    assert no_bold.judges["*"].bold.estimate == 0.0 and no_bold.judges["*"].header.enabled


# --------------------------------------------------------------------------- end to end


def _refresh_simulated(
    tmp_path: Path, config: SimulationConfig, k: int = 3, reference: str | None = None, bootstrap: int = 0
) -> Path:
    """Simulate ``config`` into ``tmp_path`` and refresh it (no audit); the published snapshot's folder."""
    logs = write_simulation(config, tmp_path / "logs")
    outcome = refresh(
        str(logs / "battles" / "day=*" / "*.parquet"),
        str(tmp_path / "state"),
        str(tmp_path / "out"),
        [],
        RefreshOptions(k=k, audit=False, reference=reference, bootstrap=bootstrap),
    )
    assert outcome.published is not None
    return Path(outcome.published.path)


def test_refresh_publishes_the_style_effects_and_the_style_kept_board(tmp_path):
    """Through ``refresh``: style effects in bias.*, summary.style with the kept board, the report's view."""
    config = SimulationConfig(
        battles=12_000, models=8, judges=2, days=2, style=True, corr_style=-0.7, style_effects=(0.6, 0.4, 0.3), seed=5
    )
    snapshot = _refresh_simulated(tmp_path, config)
    bias = pl.read_parquet(snapshot / "bias.parquet")
    style_rows = bias.filter(pl.col("effect").is_in(list(STYLE_EFFECTS)))
    assert style_rows.height == 3 * (config.judges + 1) and style_rows["enabled"].all()
    summary = Summary.from_json(json.loads((snapshot / "summary.json").read_text()))
    style = summary.style
    assert style is not None and style.battles == summary.counts.counted
    assert [e.feature for e in style.effects] == list(STYLE_EFFECTS)
    assert all(e.ci_low < e.estimate < e.ci_high for e in style.effects)
    per_judge = style_rows.filter(pl.col("judge") != "*")
    assert (per_judge["estimate"] > 0).all(), per_judge  # every judge rewards every style feature
    assert (per_judge.filter(pl.col("effect") == "header")["ci_low"] > 0).all(), per_judge  # the strongest: clearly
    leaderboard = pl.read_parquet(snapshot / "leaderboard.parquet")
    assert sorted(r.model for r in style.kept) == sorted(leaderboard["model"].to_list())
    published = dict(zip(leaderboard["model"], leaderboard["rank_corrected"], strict=True))
    assert all(r.rank_corrected == published[r.model] for r in style.kept)
    params = draw_parameters(config)
    truth = dict(zip(params.model_names.tolist(), params.theta, strict=True))
    kept = {r.model: r.rating for r in style.kept}
    models = leaderboard["model"].to_list()
    tau_removed = kendall_tau_b(np.array([truth[m] for m in models]), leaderboard["rating_corrected"].to_numpy())
    tau_kept = kendall_tau_b(np.array([truth[m] for m in models]), np.array([kept[m] for m in models]))
    assert tau_removed > tau_kept, (tau_removed, tau_kept)
    assert style.kendall_tau is not None and style.kendall_tau < 1.0  # removing style moved the order
    html = (snapshot / "report.html").read_text()
    assert '<section id="style">' in html and "Style removed and kept" in html
    # The kept ratings read on the boards' Elo-like scale (they were logits, 3.179 beside the board's 1517.2).
    top = min(style.kept, key=lambda r: r.rank)
    assert f'<td class="l">{top.model}</td><td>{1000 + 400 / math.log(10) * top.rating:.1f}</td>' in html


def test_refresh_without_style_columns_has_no_style_view(tmp_path):
    snapshot = _refresh_simulated(tmp_path, SimulationConfig(battles=3_000, models=5, judges=2, days=1, seed=1), k=2)
    assert json.loads((snapshot / "summary.json").read_text())["style"] is None
    assert not set(STYLE_EFFECTS) & set(pl.read_parquet(snapshot / "bias.parquet")["effect"].to_list())
    assert '<section id="style">' not in (snapshot / "report.html").read_text()


def test_refresh_with_style_through_the_judge_blocked_solver(tmp_path, monkeypatch):
    """Style counts with the judge-blocked solver (what arena logs with voter-judges take from 16-96 judges on):
    the threshold lowered so two judges take it, refresh publishes the style rows and the style-kept board."""
    from biasboard.ranking import arrowhead
    from biasboard.ranking import config as ranking_config

    for mode in ranking_config.BLOCKED_MIN_JUDGES:
        monkeypatch.setitem(ranking_config.BLOCKED_MIN_JUDGES, mode, 1)
    factorised = []
    covariance = arrowhead.ArrowFactor.covariance
    monkeypatch.setattr(arrowhead.ArrowFactor, "covariance", lambda self: factorised.append(self) or covariance(self))
    config = SimulationConfig(
        battles=4_000, models=6, judges=2, days=1, style=True, corr_style=-0.7, style_effects=(0.6, 0.4, 0.3), seed=8
    )
    snapshot = _refresh_simulated(tmp_path, config)
    assert any(f.lay.n_style == 3 for f in factorised), "the style fit did not take the judge-blocked solver"
    bias = pl.read_parquet(snapshot / "bias.parquet")
    style_rows = bias.filter(pl.col("effect").is_in(list(STYLE_EFFECTS)))
    assert style_rows.height == 3 * (config.judges + 1) and style_rows["enabled"].all()
    assert np.isfinite(style_rows["ci_low"].to_numpy()).all() and (style_rows["ci_low"] < style_rows["ci_high"]).all()
    summary = Summary.from_json(json.loads((snapshot / "summary.json").read_text()))
    assert summary.style is not None and len(summary.style.kept) == config.models


def test_refresh_measures_style_against_a_human_pool_reference(tmp_path):
    """``--reference human-pool-1`` with style counts: the pool's own style effects in the summary and the
    report, each LLM judge's style given as its excess over the pool, gated like position and length; with
    ``--bootstrap`` the board's intervals are the replicates' of the pool's rating (which keeps its style)."""
    config = SimulationConfig(
        battles=12_000, models=8, judges=3, human_judges=1, days=1, style=True, style_effects=(0.6, 0.4, 0.3), seed=6
    )
    snapshot = _refresh_simulated(tmp_path, config, reference="human-pool-1", bootstrap=4)
    summary = Summary.from_json(json.loads((snapshot / "summary.json").read_text()))
    assert summary.uncertainty == "bootstrap"
    reference = summary.reference
    assert reference is not None and reference.judges == ["human-pool-1"]
    assert set(STYLE_EFFECTS) <= set(reference.own_effects)
    header = reference.own_effects["header"]
    assert header["ci_low"] > 0 and header.get("applied") is None  # the pool's preference, kept in the rating
    assert "style" in reference.corrected_rating
    gated = {row["effect"] for row in summary.diagnostics.gate.decisions}
    assert set(STYLE_EFFECTS) <= gated
    bias = pl.read_parquet(snapshot / "bias.parquet")
    llm_header = bias.filter((pl.col("effect") == "header") & pl.col("judge").str.contains("sim-judge"))
    assert llm_header.height == 2 and llm_header["note"].str.contains("reference").all(), llm_header
    html = (snapshot / "report.html").read_text()
    assert re.search(r"Its own effects:[^<]*header", html), "the report lists the pool's own style effects"
    assert "style <b>measured against the reference</b>" in html and "preference for header" in html
    # the global header row is the pool's own effect (kept), not the judges' population mean, and the line says whose
    assert re.search(r"header -?[\d.]+ \[[^]]*\] \(the reference&#x27;s own\)", html), "the report says whose"
    star = bias.filter((pl.col("judge") == "*") & (pl.col("effect") == "header"))
    assert star["note"].item().startswith("the reference's own effect"), star["note"].item()


def test_style_study_reference_smoke():
    """``bench/style_study.py --reference --smoke --bootstrap 5`` runs end to end and prints both scenarios with
    the coverage of φ's intervals."""
    script = Path(__file__).resolve().parents[1] / "bench" / "style_study.py"
    command = [sys.executable, str(script), "--reference", "--smoke", "--bootstrap", "5"]
    out = subprocess.run(command, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "shared" in out.stdout and "judges only" in out.stdout and "φ cov B" in out.stdout, out.stdout


def test_a_board_whose_battles_carry_style_counts_only_in_part_says_so():
    """A battle without style counts enters the fit with no style difference, so its formatting advantage stays in
    the ratings: with half the battles' counts missing (header counts rising with quality), 65% of the style effect
    was left in the "style removed" board, which said nothing.  It now counts them in a warning; a board whose
    battles all carry counts does not."""
    from biasboard.schemas.battle import STYLE_COUNT_COLUMNS

    config = SimulationConfig(battles=4000, models=6, judges=2, days=1, style=True, corr_style=0.9, seed=2)
    params = draw_parameters(config)
    batches = [b for _, b, _ in simulate_days(config, params)]
    drop = pa.array(np.arange(sum(b.num_rows for b in batches)) % 2 == 0)
    whole = pa.concat_tables(batches)
    half = whole
    for column in STYLE_COUNT_COLUMNS:
        i = half.schema.get_field_index(column)
        nulls = pa.nulls(half.num_rows, half.schema.field(column).type)
        half = half.set_column(i, half.schema.field(column), pc.if_else(drop, nulls, half.column(column)))
    family_map = FamilyMap.with_user_rules()
    warned = {}
    for name, table in (("whole", whole), ("half", half)):
        fit = fit_bias_aware(build_dataset(partial_cells(table, family_map).cells), config=ModelConfig(profile=False))
        warned[name] = [w for w in fit.diagnostics["warnings"] if w.startswith("style:")]
    assert warned["whole"] == []
    (said,) = warned["half"]
    assert "battles (50%) carry the header, list and bold counts" in said and "stays in the ratings" in said


def test_a_style_feature_without_variation_is_prior_selected_and_no_profile_note_stays_off_style_rows():
    """A style feature constant over the battles (no answer ever bold) is told nothing by the data: its global row was
    the prior's (0 ± 0.98), enabled, with no note — read as a measured "no preference".  It is prior-selected, with
    the note saying so.  And the note of a fit without profiles (``--diagnostics off``) is for the profiled effects:
    the style rows, never profiled, carried it on every fit."""
    from biasboard.ranking.bias_table import NO_PROFILE_NOTE, PRIOR_SELECTED

    from tests.test_judge_blocks import _cells, _styled

    rng = np.random.default_rng(3)
    cells = _styled(_cells(rng, models=7, judges=6, cells=400), rng)
    for name in (STYLE_SUMS[2], STYLE_SQUARES[2]):  # bold: no difference in any battle
        cells = cells.set_column(cells.schema.get_field_index(name), name, pa.array(np.zeros(cells.num_rows)))
    for diagnostics in ("full", "off"):
        fit = fit_bias_aware(build_dataset(cells), config=ModelConfig(diagnostics=diagnostics))
        rows = {r["effect"]: r for r in fit.bias.filter(pl.col("judge") == "*").to_dicts()}
        assert rows["bold"]["enabled"] and not rows["bold"]["identified"] and rows["bold"]["note"] == PRIOR_SELECTED
        assert rows["header"]["identified"] and rows["header"]["note"] == ""
        assert (rows["position"]["note"] == NO_PROFILE_NOTE) == (diagnostics == "off")
