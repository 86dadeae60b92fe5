"""Snapshots with many judges (arena voters): the report shows the busiest judges, the files keep them all.

Why: with every voter its own judge a snapshot holds tens of thousands of judges; a row per judge in every
report table, or every (judge, model pair) row copied into audit.json, made the files grow with the voters
(bench/scale.py).  These checks pin what is cut (the page and audit.json's copy) and what is not (Parquet).
"""

from __future__ import annotations

import io
import json
import math
import re
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
from biasboard.audit import audit
from biasboard.pipelines.refresh import RefreshOptions, refresh
from biasboard.report.audit import render_audit_section
from biasboard.report.judges import MAX_JUDGES_SHOWN, shown_judges
from biasboard.schemas import summary as S
from biasboard.schemas.summary import GLOBAL_JUDGE
from biasboard.simulate import SimulationConfig, simulate_days, write_simulation
from biasboard.transforms.audit import AUDIT_JSON, JSON_TABLES, audit_files, table_file
from biasboard.transforms.snapshot import JUDGES_FILE

JUDGES = MAX_JUDGES_SHOWN + 25


def _battles() -> pa.Table:
    config = SimulationConfig(battles=6_000, models=6, judges=JUDGES, days=1, both_orders=True, prompts=20, seed=3)
    return pa.concat_tables(b for _, b, _ in simulate_days(config))


def test_shown_judges_are_the_busiest_with_names_breaking_ties() -> None:
    battles = {"a": 5, "b": 9, "c": 5, "d": 1}
    assert shown_judges(battles, limit=2) == {"b", "a"}
    assert shown_judges(battles, limit=4) == set(battles)


def test_audit_section_and_json_stay_bounded_and_parquet_keeps_every_judge() -> None:
    result = audit(_battles())
    assert result.judges.height == JUDGES
    files = audit_files(result)

    html = files["audit_section.html"].decode()
    first_table = html.split("</table>")[0]
    rows = re.findall(r"<tr><td>(.*?)</td>", first_table)
    busiest = result.judges.sort(["slot_n", "judge"], descending=[True, False]).head(MAX_JUDGES_SHOWN)
    assert sorted(r for r in rows) == sorted(busiest["judge"].to_list())
    assert f"Showing the {MAX_JUDGES_SHOWN:,} judges with the most battles of {JUDGES:,}" in html

    document = json.loads(files[AUDIT_JSON])
    assert set(document["tables"]) == set(JSON_TABLES)
    assert len(document["tables"]["judges"]) == JUDGES
    # the shown judges' rows taken from the result's frames (only they made Python rows) as from audit.json's
    assert render_audit_section(document) == html
    assert document["files"]["order_pairs"] == table_file("order_pairs")
    pairs = pl.read_parquet(io.BytesIO(files[table_file("order_pairs")]))
    assert pairs.height == result.order_pairs.height > 0
    assert pairs["judge"].n_unique() == JUDGES


def test_snapshot_json_keeps_the_busiest_judges_and_parquet_keeps_every_judge(tmp_path, monkeypatch) -> None:
    """Past SUMMARY_JUDGES_MAX judges, summary.json and bias.json keep the busiest; the Parquet files all of them."""
    monkeypatch.setattr(S, "SUMMARY_JUDGES_MAX", 4)
    config = SimulationConfig(battles=4_000, models=5, judges=7, days=1, both_orders=True, prompts=20, seed=4)
    logs = write_simulation(config, tmp_path / "logs")
    outcome = refresh(
        str(logs / "battles" / "day=*" / "*.parquet"), str(tmp_path / "state"), str(tmp_path / "out"), [],
        RefreshOptions(k=2),
    )  # fmt: skip
    assert outcome.published is not None
    snapshot = Path(outcome.published.path)
    summary = S.Summary.from_json(json.loads((snapshot / "summary.json").read_text()))
    every = pl.read_parquet(snapshot / JUDGES_FILE)
    assert every.height == config.judges and summary.n_judges == config.judges
    busiest = every.sort(["n", "judge"], descending=[True, False]).head(4)["judge"].to_list()
    assert {j.judge for j in summary.judges} == set(busiest)
    assert summary.judge_tables is not None and summary.judge_tables.kept == 4
    assert set(summary.judge_tables.files) == {"judges", "bias", "audit_judges", "audit_family"}
    assert all((snapshot / name).exists() for name in summary.judge_tables.files.values())
    assert {a.judge for a in summary.diagnostics.order} == set(busiest)
    bias_all = pl.read_parquet(snapshot / "bias.parquet")
    bias_json = pl.DataFrame(json.loads((snapshot / "bias.json").read_text()))
    assert set(bias_all["judge"]) == {*every["judge"], GLOBAL_JUDGE}
    assert set(bias_json["judge"]) == {*busiest, GLOBAL_JUDGE}
    assert bias_json.height == bias_all.filter(pl.col("judge").is_in([*busiest, GLOBAL_JUDGE])).height
    html = (snapshot / "report.html").read_text()
    assert f"judges with the most battles of {config.judges:,}; every judge is in {JUDGES_FILE}" in html
    audit_json = json.loads((snapshot / AUDIT_JSON).read_text())
    audit_judges = pl.read_parquet(snapshot / table_file("judges"))
    assert audit_judges.height == config.judges
    busiest_audited = audit_judges.sort(["slot_n", "judge"], descending=[True, False]).head(4)["judge"]
    assert sorted(r["judge"] for r in audit_json["tables"]["judges"]) == sorted(busiest_audited)
    assert {r["judge"] for r in audit_json["tables"]["family"]} <= set(busiest_audited)
    assert audit_json["judge_tables"] == {
        "total": config.judges, "kept": 4, "files": {name: table_file(name) for name in JSON_TABLES}
    }  # fmt: skip


def test_busiest_judges_are_decided_from_the_cell_totals_by_the_summarys_rule(monkeypatch) -> None:
    """The judges summary.json lists are chosen before its records are made (only theirs are: a record a row of
    the audit's judges table is ~5 KB, 50,000 of them held +241 MB): the rule is the one the cut applied to the
    records, most battles first, names breaking ties, a judge under two families kept or dropped whole."""
    from biasboard.transforms.snapshot import busiest_judges, judges_rows

    monkeypatch.setattr(S, "SUMMARY_JUDGES_MAX", 3)
    judges = pa.table({
        "judge": ["e", "b", "a", "c", "d", "c"],
        "judge_family": ["x", "x", "x", "x", "x", "y"],
        "n": [2, 9, 5, 5, 5, 1],
    })  # fmt: skip
    rows = judges.to_pylist()
    by_rule = {r["judge"] for r in sorted(rows, key=lambda r: (-r["n"], r["judge"]))[:3]}
    assert busiest_judges(judges) == by_rule == {"b", "a", "c"}
    frame = pl.from_arrow(judges)
    assert isinstance(frame, pl.DataFrame)
    assert judges_rows(frame, busiest_judges(judges))["judge"].to_list() == ["b", "a", "c", "c"]
    assert busiest_judges(judges.slice(0, 3)) is None  # every judge fits: nothing cut
    assert judges_rows(frame, None).equals(frame)


def test_manifest_model_options_stay_bounded_in_the_judges(monkeypatch) -> None:
    """The manifest lists at most SUMMARY_JUDGES_MAX reference judges and gate decisions, with their counts."""
    from biasboard.ranking.config import ModelConfig
    from biasboard.transforms.snapshot import _config_dict

    monkeypatch.setattr(S, "SUMMARY_JUDGES_MAX", 3)
    voters = [f"pool/v{i:02d}" for i in range(10)]
    config = ModelConfig(reference=frozenset(voters), disabled=frozenset((v, "position") for v in voters[:5]))
    options = _config_dict(config)
    assert options["reference"] == voters[:3] and options["reference_count"] == 10
    assert options["disabled"] == [[v, "position"] for v in voters[:3]] and options["disabled_count"] == 5
    small = _config_dict(ModelConfig(reference=frozenset(voters[:2])))
    assert small["reference"] == voters[:2] and small["reference_count"] == 2 and small["disabled_count"] == 0


def test_the_reports_left_out_notes_name_the_files_that_hold_every_judge() -> None:
    """Past SUMMARY_JUDGES_MAX judges the report said "every judge is in bias.parquet and bias.json" and "in
    summary.json (diagnostics)", which held 201 and 200 of 4,999; it now names the Parquet files and says the JSON
    files keep the busiest.  Under the cut it names the files as before."""
    from types import SimpleNamespace

    from biasboard.report.html import _judges_where

    cut = SimpleNamespace(judge_tables=S.JudgeTables(4999, 200, {"judges": JUDGES_FILE, "bias": "bias.parquet"}))
    total, shown, where = _judges_where(cut, 200, 40, "summary.json (diagnostics) and the audit files")  # type: ignore[arg-type]
    assert (total, shown) == (4999, 40)
    assert where == f"bias.parquet, {JUDGES_FILE} (the JSON files keep the 200 with the most battles)"
    whole = SimpleNamespace(judge_tables=None)
    assert _judges_where(whole, 60, 40, "bias.parquet and bias.json") == (60, 40, "bias.parquet and bias.json")  # type: ignore[arg-type]


def test_the_discrimination_panel_shows_the_judges_average_over_every_judge(tmp_path, monkeypatch) -> None:
    """On a board of battles and grades the discrimination panel shows the judges' average discrimination (their
    verdict-weighted geometric mean; the grades set the scale, so it is free).  It was computed from the judges
    summary.json lists, the busiest only on a voter board: 0.82 here against 0.88 over every judge.  Now the fit
    records it (``diagnostics.judges_discrimination``) and the panel shows that."""
    from tests.test_judge_pool import _split  # each human-pool battle cast by one of 8 voters

    monkeypatch.setattr(S, "SUMMARY_JUDGES_MAX", 4)
    config = SimulationConfig(
        battles=4_000, models=5, judges=3, human_judges=1, days=1, prompts=20, scores=0.3, grades=5, seed=1,
        disc_sd=0.4,
    )  # fmt: skip
    logs = write_simulation(config, tmp_path / "logs", relabel=_split)
    outcome = refresh(
        str(logs / "battles" / "day=*" / "*.parquet"), str(tmp_path / "state"), str(tmp_path / "out"), [],
        RefreshOptions(k=2, diagnostics="off", scores_glob=str(logs / "scores" / "day=*" / "*.parquet")),
    )  # fmt: skip
    snapshot = Path(outcome.published.path)
    summary = S.Summary.from_json(json.loads((snapshot / "summary.json").read_text()))
    bias = pl.read_parquet(snapshot / "bias.parquet").filter(pl.col("effect") == "discrimination")
    bias = bias.filter(pl.col("judge") != GLOBAL_JUDGE)
    verdicts = dict(pl.read_parquet(snapshot / JUDGES_FILE).select("judge", "n").iter_rows())
    log_a = np.log(bias["estimate"].to_numpy())
    listed = {j.judge for j in summary.judges}
    weights = np.array([verdicts.get(j, 0) for j in bias["judge"]], float)  # a grader of no battle weighs 0
    every = math.exp(float(np.average(log_a, weights=weights)))
    busiest = math.exp(float(np.average(log_a, weights=weights * bias["judge"].is_in(list(listed)).to_numpy())))
    assert bias.height > len(listed) and f"{every:.2f}" != f"{busiest:.2f}"
    html = (snapshot / "report.html").read_text()
    assert f"(here {every:.2f}: their geometric mean, each weighted by its verdicts)" in html
    assert summary.diagnostics.judges_discrimination == pytest.approx(every, rel=1e-9)
