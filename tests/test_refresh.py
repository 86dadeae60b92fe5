"""``biasboard refresh`` on local folders: contents, idempotence, incremental days, changed days.

Small simulated logs, the real FnApiRunner, real Parquet; every number checked
against what the simulator says it wrote (truth.json counts).
"""

from __future__ import annotations

import dataclasses
import html
import json
import logging
import os
import re
import shutil
from pathlib import Path

import polars as pl
import pytest
from biasboard.pipelines import cli
from biasboard.pipelines import refresh as refresh_module
from biasboard.pipelines.refresh import RefreshOptions, refresh
from biasboard.schemas.errors import InputError
from biasboard.schemas.summary import Summary, zero_reference_effect
from biasboard.simulate import SimulationConfig, write_simulation
from biasboard.transforms import day_warnings, publish
from biasboard.transforms.cells import IngestCounts

from tests.conftest import next_second

# The published leaderboard columns (docs/running.md), spelled out on purpose (not imported from ranking.leaderboard):
# the test pins the published contract, so a change in the code cannot change the expectation with it.
LEADERBOARD_COLUMNS = [
    "model",
    "n_battles",
    "rank_naive",
    "rating_naive",
    "ci_low_naive",
    "ci_high_naive",
    "rank_corrected",
    "rating_corrected",
    "ci_low_corrected",
    "ci_high_corrected",
    "rank_change",
    "p_top_k",
]
SIM = SimulationConfig(battles=3000, models=6, judges=3, days=3, bad_rows=0.02, both_orders=True, seed=11)
NO_AUDIT = RefreshOptions(audit=False)


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> Path:
    return write_simulation(SIM, tmp_path_factory.mktemp("sim"))


def _glob(root: Path) -> str:
    return str(root / "battles" / "day=*" / "*.parquet")


def _snapshot(out: Path) -> Path:
    return Path(publish.resolve_snapshot(str(out)))


def _numbers(snapshot: Path) -> tuple[bytes, bytes, dict]:
    summary = json.loads((snapshot / "summary.json").read_text())
    return (snapshot / "leaderboard.parquet").read_bytes(), (snapshot / "bias.parquet").read_bytes(), summary


def test_refresh_publishes_every_part_of_a_snapshot(sim, tmp_path):
    truth = json.loads((sim / "truth.json").read_text())["counts"]
    outcome = refresh(_glob(sim), str(tmp_path / "state"), str(tmp_path / "out"), ["--runner=FnApiRunner"])
    snap = _snapshot(tmp_path / "out")
    assert snap.name == outcome.published.snapshot_id
    names = {p.name for p in snap.iterdir()}
    assert {*publish.SNAPSHOT_FILES, "manifest.json"} <= names
    assert {"audit.json", "audit_section.html", "audit_judges.parquet"} <= names  # the audit rides along

    board = pl.read_parquet(snap / "leaderboard.parquet")
    assert board.columns[: len(LEADERBOARD_COLUMNS)] == LEADERBOARD_COLUMNS
    assert board.height == SIM.models
    assert pl.read_csv(snap / "leaderboard.csv")["model"].to_list() == board["model"].to_list()
    assert [r["model"] for r in json.loads((snap / "leaderboard.json").read_text())] == board["model"].to_list()
    assert set(pl.read_parquet(snap / "bias.parquet")["effect"]) >= {"position", "length", "affinity"}

    summary = json.loads((snap / "summary.json").read_text())
    counts = summary["counts"]
    assert counts["read"] == truth["rows"] and counts["counted"] == truth["valid"]
    assert counts["rejected_total"] == truth["bad_total"] == sum(counts["rejected"].values())
    assert -1.0 <= summary["kendall_tau"] <= 1.0 and -1.0 <= summary["spearman"] <= 1.0
    assert len(summary["judges"]) == SIM.judges
    assert summary["diagnostics"]["identifiability"]["length"]["profile_range_nats"] > 0
    assert summary["diagnostics"]["order"], "both orders were simulated: the audit's per-judge order stats are in"
    assert isinstance(summary["warnings"], list)
    # the published document reads back as the typed contract the job produced, field for field
    assert Summary.from_json(summary).to_json() == summary == json.loads(json.dumps(outcome.summary.to_json()))
    consistent = summary["diagnostics"]["order_models"]
    assert {m["model"] for m in consistent} == set(board["model"])
    assert all(0.0 <= m["consistent_win_rate"] <= 1.0 and m["consistent_win_rate_se"] > 0 for m in consistent)

    manifest = json.loads((snap / "manifest.json").read_text())
    run_counters = manifest["metrics"]["this_run"]  # Beam counters of the aggregation
    assert run_counters["battles_read"] == truth["rows"] and run_counters["battles_counted"] == truth["valid"]
    by_reason = {k.split(":", 1)[1]: v for k, v in run_counters.items() if k.startswith("battles_rejected:")}
    assert by_reason == counts["rejected"]
    assert manifest["aggregated_days"] == sorted(manifest["inputs"]["days"]) and len(manifest["aggregated_days"]) == 3
    assert set(manifest["timings_s"]) >= {"read", "pipeline", "fit", "report"}  # fit, report: measured on the worker
    assert manifest["versions"]["apache-beam"] and manifest["options"]["beam"]["runner"] == "FnApiRunner"
    html = (snap / "report.html").read_text()
    assert "<html" in html and "http://" not in html.replace("http://www.w3.org", "")


def test_refresh_twice_changes_nothing_and_counts_nothing_twice(sim, tmp_path):
    state, out = str(tmp_path / "state"), str(tmp_path / "out")
    first = refresh(_glob(sim), state, out, [], NO_AUDIT)
    numbers = _numbers(_snapshot(tmp_path / "out"))
    second = refresh(_glob(sim), state, out, [], NO_AUDIT)
    assert second.aggregated_days == [] and len(first.aggregated_days) == SIM.days
    assert second.published.snapshot_id != first.published.snapshot_id or second.published.reused
    assert _numbers(_snapshot(tmp_path / "out")) == numbers  # byte-identical tables, identical summary
    if not second.published.reused:  # same content in the same second reuses the first snapshot
        assert json.loads((Path(second.published.path) / "manifest.json").read_text())["metrics"]["this_run"] == {}


def test_new_and_changed_days_replace_their_partitions(sim, tmp_path):
    """A new day adds its rows once; a rewritten day replaces its rows, never adds them again."""
    logs = tmp_path / "logs"
    shutil.copytree(sim / "battles", logs / "battles", ignore=shutil.ignore_patterns("day=2024-01-03"))
    state, out = str(tmp_path / "state"), str(tmp_path / "out")
    first = refresh(_glob(logs), state, out, [], NO_AUDIT)
    assert first.aggregated_days == ["2024-01-01", "2024-01-02"]
    two_days = first.summary.counts.read

    shutil.copytree(sim / "battles" / "day=2024-01-03", logs / "battles" / "day=2024-01-03")
    second = refresh(_glob(logs), state, out, [], NO_AUDIT)
    assert second.aggregated_days == ["2024-01-03"]
    truth = json.loads((sim / "truth.json").read_text())["counts"]
    assert second.summary.counts.read == truth["rows"] > two_days

    # rewrite day 2 with only its first 100 rows: the day is re-aggregated and its old rows are gone
    day2 = logs / "battles" / "day=2024-01-02" / "part-00000.parquet"
    full = pl.read_parquet(day2)
    full.head(100).write_parquet(day2)
    os.utime(day2, (1, 1))  # a different mtime even on a coarse clock; size changed anyway
    third = refresh(_glob(logs), state, out, [], NO_AUDIT)
    assert third.aggregated_days == ["2024-01-02"]
    assert third.summary.counts.read == truth["rows"] - full.height + 100


def test_refresh_cli_prints_the_summarys_warnings(sim, tmp_path, capsys):
    """A board published with a warning (here a top-k as large as the board) says so on the console, each warning
    of summary.json on a line of its own, not only in the report's Warnings box: a scheduled refresh's log is often
    all anyone reads."""
    argv = ["refresh", "--input", _glob(sim), "--state", str(tmp_path / "s"), "--out", str(tmp_path / "o")]
    assert cli.main([*argv, "--no-audit", "--k", "500"]) == 0
    out = capsys.readouterr().out
    warnings = json.loads((_snapshot(tmp_path / "o") / "summary.json").read_text())["warnings"]
    assert warnings and any("500" in w for w in warnings), warnings
    printed = [line.removeprefix("warning: ") for line in out.splitlines() if line.startswith("warning: ")]
    assert printed == warnings, out


def test_refresh_with_a_reference_judge_shows_each_judges_agreement_with_it(sim, tmp_path, capsys):
    """``--reference JUDGE``: how well each other judge (and each board) predicts the reference judge's verdicts,
    with its own effects and with the reference's — in summary.json, the report and on the console, as for anchors
    (it was made for anchors only: with a named judge the table was empty)."""
    judges = sorted(j["judge"] for j in json.loads((sim / "truth.json").read_text())["judges"])
    argv = ["refresh", "--input", _glob(sim), "--state", str(tmp_path / "s"), "--out", str(tmp_path / "o")]
    assert cli.main([*argv, "--no-audit", "--reference", judges[0]]) == 0
    out = capsys.readouterr().out
    snapshot = _snapshot(tmp_path / "o")
    reference = Summary.from_json(json.loads((snapshot / "summary.json").read_text())).reference
    rows = {row["judge"]: row for row in reference.agreement}
    assert set(rows) == {*judges[1:], "naive board", "published board"}, rows
    for judge in judges[1:]:
        assert all(0.0 <= rows[judge][f"accuracy_{k}"] <= 1.0 for k in ("uncorrected", "corrected")), rows[judge]
    page = html.unescape((snapshot / "report.html").read_text(encoding="utf-8"))
    assert "<h3>Agreement with the reference judges</h3>" in page
    assert "predicting the reference judges' verdicts: the published board: accuracy" in page
    head = out.index("Agreement with the reference judges")
    printed = out[head:].splitlines()
    row = next(line for line in printed if line.split()[:1] == [judges[1]])
    first = rows[judges[1]]
    accuracy = [f"{first['accuracy_uncorrected']:.1%}", "->", f"{first['accuracy_corrected']:.1%}"]
    loss = [f"{first['log_loss_uncorrected']:.3f}", "->", f"{first['log_loss_corrected']:.3f}"]
    assert row.split()[1:] == accuracy + loss, row
    assert any(line.split()[:2] == ["published", "board"] for line in printed), out


def test_refresh_cli_prints_the_snapshot_and_fails_in_one_line(sim, tmp_path, capsys):
    argv = ["refresh", "--input", _glob(sim), "--state", str(tmp_path / "s"), "--out", str(tmp_path / "o")]
    assert cli.main([*argv, "--no-audit"]) == 0
    out = capsys.readouterr().out
    assert "published" in out and "report:" in out
    assert re.search(r"^Kendall tau naive vs corrected: -?\d\.\d{3}$", out, re.M), out  # τ to 3 digits
    board = pl.read_parquet(_snapshot(tmp_path / "o") / "leaderboard.parquet")
    rows = [line.split() for line in out.splitlines() if re.match(r"\s+\d+\s", line)]
    assert len(rows) == board.height  # both boards, side by side: #, naive model, rating, #, corrected model, ...
    assert [r[4] for r in rows] == board.sort("rank_corrected")["model"].to_list()
    assert [r[1] for r in rows] == board.sort("rank_naive")["model"].to_list()
    bad = ["refresh", "--input", str(tmp_path / "nothing" / "*.parquet"), "--state", "s", "--out", "o"]
    assert cli.main(bad) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("biasboard refresh: error:") and "no input files" in err and "\n" not in err


def test_untrusted_names_survive_verbatim_in_tables_and_escaped_in_the_report(sim, tmp_path):
    nasty = {
        "gpt-sim-00": '<script>alert("x")</script>',
        "claude-sim-01": 'Tom & Jerry\'s "best"',
        "gemini-sim-02": "模型-甲 <b>",
    }
    for src in sorted((sim / "battles").glob("day=*/*.parquet")):
        dst = tmp_path / "logs" / src.relative_to(sim)
        dst.parent.mkdir(parents=True, exist_ok=True)
        frame = (
            pl.read_parquet(src)
            .with_columns(pl.col(c).replace(nasty) for c in ("model_a", "model_b"))
            .with_columns(pl.col("judge").replace({"gpt-sim-judge-1": "judge <i>&amp;</i>"}))
        )
        frame.write_parquet(dst)
    outcome = refresh(_glob(tmp_path / "logs"), str(tmp_path / "state"), str(tmp_path / "out"), [], NO_AUDIT)
    snap = Path(outcome.published.path)
    models = set(pl.read_parquet(snap / "leaderboard.parquet")["model"])
    assert set(nasty.values()) <= models
    assert set(nasty.values()) <= {row["model"] for row in json.loads((snap / "leaderboard.json").read_text())}
    html = (snap / "report.html").read_text()
    assert "<script>" not in html and "<b>" not in html and "<i>&amp;</i>" not in html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html and "模型-甲" in html


def test_demo_prints_both_leaderboards_tau_and_the_report(tmp_path, capsys):
    argv = ["demo", "--workdir", str(tmp_path), "--battles", "3000", "--models", "6", "--judges", "2", "--days", "2"]
    assert cli.main([*argv, "--top", "5"]) == 0
    out = capsys.readouterr().out
    assert "naive (plain Bradley-Terry)" in out and "corrected for judge biases" in out
    assert "Kendall tau, naive vs corrected:" in out and "Kendall tau vs the true quality:" in out
    report = Path(next(line.split(None, 1)[1] for line in out.splitlines() if line.startswith("report:")))
    assert report.is_file() and report.stat().st_size > 1000
    table = [line for line in out.splitlines() if line[:3].strip().isdigit()]
    assert len(table) == 5
    # A second, smaller demo in the same workdir is that demo alone: the first one's second day, no longer
    # simulated, was kept in the state, with its two extra models on the board and in the tau against the truth.
    smaller = ["demo", "--workdir", str(tmp_path), "--battles", "2000", "--models", "4", "--judges", "2", "--days", "1"]
    assert cli.main(smaller) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line[:3].strip().isdigit()]
    assert len(rows) == 4


def _write_anchors(sim: Path, folder: Path, pairs: int = 15, prompt_ids: bool = True) -> str:
    """Trusted verdicts in both orders on ``pairs`` model pairs: the truly better model always wins."""
    import itertools

    import pyarrow as pa
    import pyarrow.parquet as pq

    models = json.loads((sim / "truth.json").read_text())["models"]
    theta = {m["model"]: m["theta"] for m in models}
    chosen = list(itertools.combinations(sorted(theta), 2))[:pairs]
    rows = [(a, b) for a, b in chosen] + [(b, a) for a, b in chosen]
    day = folder / "day=2024-01-01"
    day.mkdir(parents=True)
    table = pa.table(
        {
            "battle_id": [f"anchor-{i}" for i in range(len(rows))],
            "ts": ["2024-01-01T00:00:00Z"] * len(rows),
            "judge": ["trusted-humans"] * len(rows),
            "model_a": [a for a, _ in rows],
            "model_b": [b for _, b in rows],
            "winner": ["model_a" if theta[a] > theta[b] else "model_b" for a, b in rows],
            **({"prompt_id": [f"anchor-prompt-{min(a, b)}-{max(a, b)}" for a, b in rows]} if prompt_ids else {}),
        }
    )
    pq.write_table(table, day / "anchors.parquet")
    return str(folder / "day=*" / "*.parquet")


def test_refresh_with_anchors_gates_corrections_and_plans_the_next_battles(sim, tmp_path):
    # Anchors without prompt_id work with the audit on (they cannot be matched to battles for gold labels,
    # but they are the reference all the same).
    anchors = _write_anchors(sim, tmp_path / "anchors", prompt_ids=False)
    options = RefreshOptions(anchors=anchors, plan_budget=6)
    outcome = refresh(_glob(sim), str(tmp_path / "state"), str(tmp_path / "out"), [], options)
    snapshot = _snapshot(tmp_path / "out")
    reference = outcome.summary.reference
    assert reference is not None and reference.gate is not None
    gate = reference.gate
    judges = json.loads((sim / "truth.json").read_text())["judges"]
    assert reference.kind == "anchors" and reference.verdicts == gate.k == 30
    assert outcome.summary.diagnostics.gate == gate
    assert reference.own_effects["position"]["ci_low"] is not None
    page = (snapshot / "report.html").read_text(encoding="utf-8")
    assert "Reference: anchors" in page
    # An own effect the ratings take as zero says so beside its estimate (it read as the β_r applied, while 0 was)
    zeroed = [(n, e) for n, e in reference.own_effects.items() if zero_reference_effect(e)]
    assert zeroed, reference.own_effects  # 30 anchors without lengths: length has no data of the reference
    for name, effect in zeroed:
        assert re.search(rf"{name} [^;<]*\({re.escape(effect['source'])}\)", html.unescape(page)), name
    # The page says what its numbers are: the corrected rating under this reference, judges' rows as excesses over
    # it, the gate in words (it showed gain_nats, group_p_holm, True/False and p = 0.000)
    assert f"Corrected: {reference.corrected_rating.rstrip('.')}" in html.unescape(page)
    assert "position: excess over the reference, per judge" in page and "judges as the reference does" in page
    assert "Holm p" in page and "group_p_holm" not in page and ">True<" not in page and ">False<" not in page
    assert "<h3>Agreement with the anchors</h3>" in page and len(reference.agreement) == len(judges) + 2
    assert "predicting the anchors' verdicts: the published board: accuracy" in html.unescape(page)  # then the naive
    assert len(gate.decisions) == len(judges) * 3  # position, length, affinity per judge
    assert any("the gate corrected" in w for w in outcome.summary.warnings)
    # what the gate left off is what the published bias table says is off
    bias = pl.read_parquet(snapshot / "bias.parquet")
    for judge, effect in gate.disabled:
        rows = bias.filter((pl.col("judge") == judge) & (pl.col("effect") == effect))
        assert rows.height and not rows["enabled"].any(), (judge, effect)
    # the anchors are the reference, not battles of the leaderboard
    board = pl.read_parquet(snapshot / "leaderboard.parquet")
    counts = outcome.summary.counts
    assert board["n_battles"].sum() == 2 * (counts.counted - counts.self_battles)
    assert (snapshot / "posterior.npz").exists()
    plan = pl.read_parquet(Path(outcome.plan_path).with_suffix(".parquet"))
    assert plan.height == 6


def test_anchors_changed_in_place_redo_the_stored_audit(sim, tmp_path):
    """The audit's gold labels come from the anchors: an anchors file edited in place (same glob) refit the board but
    reused the stored audit, so the snapshot's gold accuracies were the old anchors'.  The audit's stamp holds the
    anchor files' fingerprints, as the fit's inputs do: the audit is redone and equals a fresh state's."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    # Trusted verdicts on some of the battles' own prompts (gold labels need the prompts matched).
    (day,) = list(sorted((sim / "battles").glob("day=*")))[:1]
    table = pq.read_table(next(day.glob("*.parquet"))).slice(0, 300)
    table = table.set_column(0, "battle_id", pa.array([f"anchor-{i}" for i in range(table.num_rows)]))
    table = table.set_column(table.schema.get_field_index("judge"), "judge", pa.array(["gold"] * table.num_rows))
    path = tmp_path / "anchors.parquet"
    pq.write_table(table, path)
    options = RefreshOptions(anchors=str(path))
    state, out = str(tmp_path / "state"), str(tmp_path / "out")
    refresh(_glob(sim), state, out, [], options)
    flipped = ["model_b" if w == "model_a" else "model_a" for w in table["winner"].to_pylist()]
    pq.write_table(table.set_column(table.schema.get_field_index("winner"), "winner", pa.array(flipped)), path)
    again = refresh(_glob(sim), state, out, [], options)
    fresh = refresh(_glob(sim), str(tmp_path / "fresh"), str(tmp_path / "fresh_out"), [], options)

    def gold(outcome) -> list:
        judges = json.loads((Path(outcome.published.path) / "audit.json").read_text())["tables"]["judges"]
        return [(j["judge"], j["gold_accuracy"]) for j in judges]

    assert any(accuracy is not None for _, accuracy in gold(fresh))
    assert gold(again) == gold(fresh)


def test_anchors_with_rejected_rows_refit_to_the_same_snapshot(sim, tmp_path):
    """The anchors' note lists their rejected rows by reason in polars' group order, which changes from run to run:
    every refit of an unchanged board published a new snapshot (a re-uploaded day on a bucket, every night)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (day,) = list(sorted((sim / "battles").glob("day=*")))[:1]
    table = pq.read_table(next(day.glob("*.parquet"))).slice(0, 300)
    n = table.num_rows
    winners = ["nobody" if i % 7 == 0 else w for i, w in enumerate(table["winner"].to_pylist())]
    stamps = ["never" if i % 7 == 1 else str(t) for i, t in enumerate(table["ts"].to_pylist())]
    lengths = [-5 if i % 7 == 2 else v for i, v in enumerate(table["len_a"].to_pylist())]
    judges = ["" if i % 7 == 3 else "gold" for i in range(n)]
    for name, values in (("winner", winners), ("ts", stamps), ("len_a", lengths), ("judge", judges)):
        table = table.set_column(table.schema.get_field_index(name), name, pa.array(values))
    table = table.set_column(0, "battle_id", pa.array([f"anchor-{i}" for i in range(n)]))
    path = tmp_path / "anchors.parquet"
    pq.write_table(table, path)
    state, out = str(tmp_path / "state"), str(tmp_path / "out")
    first = refresh(_glob(sim), state, out, [], RefreshOptions(anchors=str(path)))
    for _ in range(3):
        again = refresh(_glob(sim), state, out, [], RefreshOptions(anchors=str(path), refit=True))
        assert again.published.snapshot_id == first.published.snapshot_id


def test_bad_length_clip_fails_before_any_work(sim, tmp_path, capsys):
    argv = ["refresh", "--input", _glob(sim), "--state", str(tmp_path / "state"), "--out", str(tmp_path / "out")]
    assert cli.main([*argv, "--length-clip", "1.3"]) == 2
    assert "--length-clip must be one of 0.25, 0.5, 0.75, 1, 1.25, 1.5, " in capsys.readouterr().err
    assert not (tmp_path / "state").exists()  # nothing was aggregated


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"length_clip": 5.0}, "--length-clip must be one of 0.25, "),
        ({"gate_level": 1.0}, "--gate-level must be a number in (0, 1), got 1"),
        ({"k": 0}, "--k must be at least 1, got 0"),
        ({"bootstrap": 10**9}, "--bootstrap must be from 0 to 10000, got 1000000000"),  # was killed for its memory
        ({"fit_min_ram": "lots"}, "--fit-min-ram must be an amount of memory with its unit"),
    ],
)
def test_bad_numbers_a_caller_passes_are_refused_naming_the_flag(sim, tmp_path, options, message):
    """The same rule as the command line's checks the options a caller of refresh() passes (no argparse there)."""
    with pytest.raises(InputError, match=re.escape(message)):
        refresh(_glob(sim), str(tmp_path / "state"), str(tmp_path / "out"), [], RefreshOptions(**options))
    assert not (tmp_path / "state").exists()  # nothing was aggregated


def test_bad_reference_options_fail_before_any_work(sim, tmp_path, capsys):
    argv = ["refresh", "--input", _glob(sim), "--state", str(tmp_path / "state"), "--out", str(tmp_path / "out")]
    assert cli.main([*argv, "--gate-level", "1.5"]) == 2
    assert "--gate-level must be a number in (0, 1), got 1.5" in capsys.readouterr().err
    assert cli.main([*argv, "--reference", "anchors"]) == 2
    assert "no --anchors given" in capsys.readouterr().err
    assert not (tmp_path / "state").exists()  # nothing was aggregated


def test_nothing_new_keeps_the_latest_snapshot_without_refitting(sim, tmp_path, monkeypatch, caplog):
    state, out = str(tmp_path / "state"), str(tmp_path / "out")
    first = refresh(_glob(sim), state, out, [], NO_AUDIT)
    again = refresh(_glob(sim), state, out, [], NO_AUDIT)
    assert again.published.reused and again.published.snapshot_id == first.published.snapshot_id
    assert again.aggregated_days == [] and not list((tmp_path / "out" / "staging").glob("*"))  # nothing staged
    assert again.summary == first.summary and again.leaderboard.equals(first.leaderboard)
    assert publish.list_snapshots(out) == [first.published.snapshot_id]
    # biasboard's code changed without a version bump (another fingerprint of its sources): a refit
    monkeypatch.setattr(refresh_module, "code_fingerprint", lambda: "other code")
    with caplog.at_level("INFO", logger="biasboard.pipelines.refresh"):
        refresh(_glob(sim), state, out, [], NO_AUDIT)
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("fit: 6 models") for m in messages), messages
    assert not any("(same inputs, options and versions)" in m for m in messages)
    # ... which made the same board: it is not published again (another code, the same files and options)
    assert publish.list_snapshots(out) == [first.published.snapshot_id]
    monkeypatch.undo()
    other_k = refresh(_glob(sim), state, out, [], RefreshOptions(audit=False, k=2))  # an option the fit reads
    assert not other_k.published.reused and other_k.published.snapshot_id != first.published.snapshot_id
    forced = refresh(_glob(sim), state, out, [], RefreshOptions(audit=False, k=2, refit=True))
    assert not forced.published.reused or forced.published.snapshot_id == other_k.published.snapshot_id
    assert _numbers(Path(forced.published.path)) == _numbers(Path(other_k.published.path))


def test_a_day_uploaded_again_with_the_same_bytes_publishes_nothing(sim, tmp_path, capsys):
    """A day file written again with the same rows (a new modification time; on GCS a new generation) is a changed
    day: it is aggregated again and the board refitted, and that refit published a second snapshot of LATEST's
    content.  Now LATEST stays, the CLI says why in one line (exit 0), and the next refresh does not refit."""
    logs = tmp_path / "logs"
    shutil.copytree(sim / "battles", logs / "battles")
    state, out = str(tmp_path / "state"), str(tmp_path / "out")
    first = refresh(_glob(logs), state, out, [], NO_AUDIT)
    day_file = next((logs / "battles" / "day=2024-01-02").glob("*.parquet"))
    day_file.write_bytes(day_file.read_bytes())
    os.utime(day_file, (day_file.stat().st_atime, day_file.stat().st_mtime + 60))  # surely another mtime
    next_second()  # a second snapshot of the same content would get an id of its own
    argv = ["refresh", "--no-audit", "--input", _glob(logs), "--state", state, "--out", out]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == (
        f"nothing new since snapshot {first.published.snapshot_id} (refitted: the same board, identical content and "
        "options); it stays LATEST"
    )
    assert publish.list_snapshots(out) == [first.published.snapshot_id] == [publish.latest_snapshot_id(out)]
    assert not list((tmp_path / "out" / "staging").glob("*"))

    again = refresh(_glob(logs), state, out, [], NO_AUDIT)  # the state's bookkeeping is up to date: no refit
    assert again.aggregated_days == [] and again.published.snapshot_id == first.published.snapshot_id
    assert again.reason.endswith("(same inputs, options and versions); it stays LATEST")
    next_second()  # the same files made with another option (unused without a reference): published, so that
    option = refresh(_glob(logs), state, out, [], RefreshOptions(audit=False, gate_level=0.1))  # a manifest says it
    assert not option.published.reused and option.published.snapshot_id[-12:] == first.published.snapshot_id[-12:]

    pl.read_parquet(day_file).head(500).write_parquet(day_file)  # a real change still publishes
    changed = refresh(_glob(logs), state, out, [], NO_AUDIT)
    assert not changed.published.reused
    published = {first.published.snapshot_id, option.published.snapshot_id, changed.published.snapshot_id}
    assert len(published) == 3 and set(publish.list_snapshots(out)) == published
    assert publish.latest_snapshot_id(out) == changed.published.snapshot_id


def test_a_latest_snapshot_that_was_deleted_is_refit_and_published_again(sim, tmp_path, caplog):
    """LATEST naming a snapshot folder someone deleted: nothing is new, yet there is nothing to reuse; the refresh
    publishes a new snapshot (it used to fail on every run with "cannot read …/manifest.json")."""
    state, out = str(tmp_path / "state"), str(tmp_path / "out")
    first = refresh(_glob(sim), state, out, [], NO_AUDIT)
    shutil.rmtree(first.published.path)
    with caplog.at_level("WARNING", logger="biasboard.pipelines.refresh"):
        again = refresh(_glob(sim), state, out, [], NO_AUDIT)
    assert "LATEST cannot be reused" in caplog.text
    assert not again.published.reused  # (the same id when within the same second: time stamp + content hash)
    assert publish.list_snapshots(out) == [again.published.snapshot_id] == [publish.latest_snapshot_id(out)]
    assert again.leaderboard.equals(first.leaderboard)


def test_the_same_files_given_as_a_folder_or_a_glob_change_nothing(sim, tmp_path, caplog):
    """``--input logs/battles`` after ``--input 'logs/battles/day=*/*.parquet'``: the same files, so the same audit
    and nothing new (the audit's stamp held the glob as spelled: it re-ran and the same board was published again);
    likewise options given empty (``--slices ''``), which change nothing in the board."""
    state, out = str(tmp_path / "state"), str(tmp_path / "out")
    first = refresh(_glob(sim), state, out, [])
    with caplog.at_level("INFO", logger="biasboard.pipelines.refresh"):
        again = refresh(str(sim / "battles"), state, out, [])
    assert "audit: input unchanged" in caplog.text
    assert again.published.reused and again.published.snapshot_id == first.published.snapshot_id
    empty = RefreshOptions(slices="", reference="", anchors="")  # given empty: as if not given
    assert refresh(_glob(sim), state, out, [], empty).published.snapshot_id == first.published.snapshot_id


def test_the_same_files_spelled_relative_or_absolute_are_not_read_again(sim, tmp_path, monkeypatch, caplog):
    """``--input logs``, ``./logs`` and the absolute path name the same files: every day was re-aggregated (and
    re-audited) when the spelling changed, the board the same."""
    monkeypatch.chdir(sim.parent)
    state, out = str(tmp_path / "state"), str(tmp_path / "out")
    first = refresh(f"{sim.name}/battles", state, out, [])
    for spelled in (f"./{sim.name}/battles", str(sim / "battles")):
        caplog.clear()
        with caplog.at_level("INFO", logger="biasboard.pipelines.refresh"):
            again = refresh(spelled, state, out, [])
        assert again.aggregated_days == [] and "audit: input unchanged" in caplog.text, spelled
        assert again.published.snapshot_id == first.published.snapshot_id


def test_incremental_audit_equals_a_full_audit(sim, tmp_path, caplog):
    """Days 1-2 refreshed, then day 3 arrives: only day 3 is audited, and the audit equals a fresh one of all days.

    Each day is audited with its both orders paired within it (the stored per-day partials are then additive),
    by the same function in the incremental and the full audit, so the two are byte-identical; the sum of the
    stored days starts from their cached sum (``audit_cache``) unless a day it sums changed or went.
    """
    logs = tmp_path / "logs"
    shutil.copytree(sim / "battles", logs / "battles", ignore=shutil.ignore_patterns("day=2024-01-03"))
    state, out = str(tmp_path / "state"), str(tmp_path / "out")
    refresh(_glob(logs), state, out, [])
    shutil.copytree(sim / "battles" / "day=2024-01-03", logs / "battles" / "day=2024-01-03")
    with caplog.at_level("INFO"):
        incremental = refresh(_glob(logs), state, out, [])
    assert "audit: 1 of 3 day(s) to audit" in caplog.text
    full = refresh(_glob(sim), str(tmp_path / "state2"), str(tmp_path / "out2"), [])
    names = sorted(p.name for p in Path(full.published.path).iterdir() if p.name.startswith("audit"))
    assert "audit.json" in names and "audit_order_pairs.parquet" in names
    for name in names:
        inc = (Path(incremental.published.path) / name).read_bytes()
        assert inc == (Path(full.published.path) / name).read_bytes(), name
    assert _numbers(Path(incremental.published.path)) == _numbers(Path(full.published.path))
    assert "audit: 1 stored day(s) read onto the cached sum of 2 day(s)" in caplog.text  # not the history

    # A changed day (its file rewritten with fewer battles), then a removed one dropped from the state: the cached
    # sum names both, so each is a miss and every day is summed again: the same audit files as a fresh refresh of
    # the same input.  (A removed day kept in the fit stays in the audit:
    # test_the_audit_of_a_kept_day_without_input_covers_the_days_the_board_does.)
    day_file = next((logs / "battles" / "day=2024-01-02").glob("*.parquet"))
    pl.read_parquet(day_file).head(500).write_parquet(day_file)
    for step in ("changed", "removed"):
        if step == "removed":
            shutil.rmtree(logs / "battles" / "day=2024-01-01")
        caplog.clear()
        with caplog.at_level("INFO", logger="biasboard.transforms.audit"):
            again = refresh(_glob(logs), state, out, [], RefreshOptions(drop_missing_days=step == "removed"))
        assert f"audit: {3 if step == 'changed' else 2} stored day(s) read\n" in caplog.text + "\n"  # no cache
        fresh = refresh(_glob(logs), str(tmp_path / f"state-{step}"), str(tmp_path / f"out-{step}"), [])
        for name in names:
            inc = (Path(again.published.path) / name).read_bytes()
            assert inc == (Path(fresh.published.path) / name).read_bytes(), (step, name)


def test_a_stored_audit_of_an_older_version_is_redone_on_an_unchanged_input(sim, tmp_path):
    """Upgrading biasboard over an unchanged input: the stored audit's files were written by the older audit (here:
    without the order pairs' ``consistent_sq``, as before the flip rate had an SE, and a stamp without the audit's
    version).  A refit read them as they were and failed inside the fit (``unable to find column
    "consistent_sq"``); the audit's version is part of its stamp, so the audit is done again."""
    state, out = tmp_path / "state", str(tmp_path / "out")
    refresh(_glob(sim), str(state), out, [])
    stamp_path = state / "audit" / "inputs.json"
    stamp = json.loads(stamp_path.read_text())
    assert stamp.pop("audit_version") == refresh_module.AUDIT_DAYS_VERSION
    stamp_path.write_text(json.dumps(stamp))
    pairs = state / "audit" / "audit_order_pairs.parquet"
    pl.read_parquet(pairs).drop("consistent_sq").write_parquet(pairs)
    again = refresh(_glob(sim), str(state), out, [], RefreshOptions(refit=True))
    assert "consistent_sq" in pl.read_parquet(pairs).columns
    assert "consistent_sq" in pl.read_parquet(Path(again.published.path) / "audit_order_pairs.parquet").columns


def test_a_stored_audit_stamp_without_its_audit_is_redone(sim, tmp_path):
    """Two overlapping runs left ``state/audit`` holding only its stamp: the audit counted as unchanged and every
    later snapshot came out without one, without a word."""
    state, out = tmp_path / "state", str(tmp_path / "out")
    refresh(_glob(sim), str(state), out, [])
    for path in (state / "audit").iterdir():
        if path.name != "inputs.json":
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    again = refresh(_glob(sim), str(state), out, [], RefreshOptions(refit=True))
    assert (Path(again.published.path) / "audit.json").exists() and (state / "audit" / "audit.json").exists()


def test_an_input_refused_inside_the_run_leaves_the_stored_audit_as_it_was(sim, tmp_path):
    """A file that is not Parquet is refused inside the pipeline, after the audit was due to re-run: the stored audit
    stays (it was deleted before the pipeline ran), so once the file is gone nothing is new and LATEST is reused."""
    logs = tmp_path / "logs"
    shutil.copytree(sim / "battles", logs / "battles")
    state, out = tmp_path / "state", str(tmp_path / "out")
    first = refresh(_glob(logs), str(state), out, [])
    stored = {p.name: p.read_bytes() for p in (state / "audit").iterdir()}
    assert "audit.json" in stored and "inputs.json" in stored
    junk = logs / "battles" / "day=2024-01-04" / "part-00000.parquet"
    junk.parent.mkdir()
    junk.write_bytes(b"junk\n")
    with pytest.raises(InputError, match="the file is text, not Parquet"):
        refresh(_glob(logs), str(state), out, [])
    assert {p.name: p.read_bytes() for p in (state / "audit").iterdir()} == stored
    shutil.rmtree(junk.parent)
    again = refresh(_glob(logs), str(state), out, [])
    assert again.published.reused and again.published.snapshot_id == first.published.snapshot_id
    assert not (state / "audit.next").exists()


def test_a_day_that_rejects_most_of_its_rows_is_named_in_the_warnings(sim, tmp_path):
    """Every row accounted for, but a day whose file came broken (an integer winner column: every row bad_winner)
    published with exit 0 and no word of it."""
    logs = tmp_path / "logs"
    shutil.copytree(sim / "battles", logs / "battles")
    day = logs / "battles" / "day=2024-01-04"
    day.mkdir()
    rows = pl.read_parquet(next((sim / "battles" / "day=2024-01-01").glob("*.parquet"))).head(300)
    broken = rows.with_columns(pl.lit("the first one").alias("winner"), pl.col("battle_id") + "-x")
    broken.write_parquet(day / "a.parquet")
    outcome = refresh(_glob(logs), str(tmp_path / "state"), str(tmp_path / "out"), [], NO_AUDIT)
    warned = [w for w in outcome.summary.warnings if w.startswith("day ")]
    assert len(warned) == 1, warned  # (the simulated days' 2% of bad rows are no news)
    assert warned[0].startswith("day 2024-01-04 rejected 300 of the 300 rows it read (bad_winner 297, ")


def test_a_run_that_rejects_a_notable_share_of_its_rows_prints_one_warning(sim, tmp_path, capsys):
    """30% of every day's rows broken (no day near the half that names a day) published with exit 0 and not a word
    on the terminal; now one line says how many, the share, the commonest reasons and where the dead letters are."""
    logs = tmp_path / "logs"
    for source in sorted((sim / "battles").glob("day=*/*.parquet")):
        rows = pl.read_parquet(source).with_row_index("i")
        broken = rows.with_columns(
            winner=pl.when(pl.col("i") % 10 < 2).then(pl.lit("the first one")).otherwise(pl.col("winner")),
            judge=pl.when(pl.col("i") % 10 == 2).then(None).otherwise(pl.col("judge")),
        ).drop("i")
        target = logs / "battles" / source.parent.name / source.name
        target.parent.mkdir(parents=True)
        broken.write_parquet(target)
    state = tmp_path / "state"
    argv = ["refresh", "--input", _glob(logs), "--state", str(state), "--out", str(tmp_path / "o"), "--no-audit"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    counts = Summary.from_json(json.loads((_snapshot(tmp_path / "o") / "summary.json").read_text())).counts
    share = counts.rejected_total / counts.read
    assert 0.3 <= share < 0.5, counts  # the simulation's own 2% of bad rows come on top
    warned = [line for line in out.splitlines() if "were rejected" in line]
    assert len(warned) == 1, out
    assert warned[0].startswith(
        f"warning: {counts.rejected_total:,} of the {counts.read:,} rows read ({share:.1%}, warned at 5% or more) "
        f"were rejected (bad_winner {counts.rejected['bad_winner']:,}, "
        f"missing:judge {counts.rejected['missing:judge']:,}"
    ), warned
    assert warned[0].endswith(
        f": the dead letters, each row with its reason, are in {state}/deadletters/day=*/dead_letters.parquet"
    )
    assert not [line for line in out.splitlines() if line.startswith("warning: day ")]  # no day lost half


@pytest.mark.parametrize(
    ("rejected", "warned"),
    [({}, False), ({"bad_winner": 49}, False), ({"bad_winner": 50}, True), ({"bad_winner": 300}, True)],
)
def test_the_rejected_share_warning_starts_at_five_percent(rejected, warned):
    """At 5% of the rows read or more, not below (the simulator's 2% of bad rows is a healthy log's background)."""
    counts = IngestCounts(1000, 1000 - sum(rejected.values()), rejected)
    assert bool(day_warnings.rejected_share_warnings(counts, "gs://b/state")) is warned


def test_the_rejected_share_warning_names_the_three_commonest_reasons_and_counts_the_rest():
    reasons = {"bad_winner": 40, "missing:judge": 30, "bad_timestamp": 20, "missing:ts": 5, "absurd_length": 5}
    (line,) = day_warnings.rejected_share_warnings(IngestCounts(1000, 900, reasons), "gs://b/state/", "score rows")
    assert line == (
        "100 of the 1,000 score rows read (10.0%, warned at 5% or more) were rejected (bad_winner 40, "
        "missing:judge 30, bad_timestamp 20 and 2 more reasons): the dead letters, each row with its reason, are in "
        "gs://b/state/deadletters/day=*/score_dead_letters.parquet"
    )


def test_a_stored_day_whose_input_has_gone_is_kept_and_reported(sim, tmp_path, caplog):
    """Input deleted between two refreshes: the day's cells stay in the fit, the log and summary name it."""
    logs = tmp_path / "logs"
    shutil.copytree(sim / "battles", logs / "battles")
    state, out = str(tmp_path / "state"), str(tmp_path / "out")
    first = refresh(_glob(logs), state, out, [], NO_AUDIT)
    assert first.summary.days.without_input == [] and first.summary.days.dropped == []

    shutil.rmtree(logs / "battles" / "day=2024-01-02")
    with caplog.at_level("WARNING", logger="biasboard.pipelines.refresh"):
        second = refresh(_glob(logs), state, out, [], NO_AUDIT)
    assert [r.getMessage() for r in caplog.records if "2024-01-02" in r.getMessage()] == [
        "read: 1 stored day(s) have no input file any more: 2024-01-02; kept in the fit (--drop-missing-days "
        "removes them)"
    ]
    assert not second.published.reused and second.aggregated_days == []
    assert second.summary.days.without_input == ["2024-01-02"] and second.summary.days.dropped == []
    assert second.summary.days.count == SIM.days and second.summary.counts == first.summary.counts
    assert second.leaderboard.equals(first.leaderboard)  # the board is unchanged: the day's cells are still in
    manifest = json.loads((Path(second.published.path) / "manifest.json").read_text())
    assert manifest["days_without_input"] == {"kept": ["2024-01-02"], "dropped": []}
    assert (tmp_path / "state" / "manifests" / "day=2024-01-02.json").exists()


def test_a_kept_day_changed_in_the_state_is_refitted_not_reused(sim, tmp_path):
    """A day kept without input is the state's alone to change: re-aggregated by ``backfill`` from an archive, or
    dropped by a refresh into another out folder.  Both changed the board under the same ``--input``, and the next
    refresh said "nothing new" and kept a LATEST counting the old day.  Its stored files are now part of what the
    fit (and the audit) depend on."""
    import pyarrow.parquet as pq

    live, archive = tmp_path / "live", tmp_path / "archive"
    shutil.copytree(sim / "battles", live / "battles")
    state, out, other = str(tmp_path / "state"), str(tmp_path / "out"), str(tmp_path / "other")
    first = refresh(_glob(live), state, out, [], NO_AUDIT)
    (archive / "battles").mkdir(parents=True)
    shutil.move(live / "battles" / "day=2024-01-02", archive / "battles" / "day=2024-01-02")
    kept = refresh(_glob(live), state, out, [], NO_AUDIT)
    assert kept.summary.days.without_input == ["2024-01-02"] and kept.summary.counts == first.summary.counts

    part = next((archive / "battles" / "day=2024-01-02").glob("*.parquet"))
    table = pq.read_table(part)
    pq.write_table(table.slice(100), part)  # the archived day corrected: 100 rows fewer
    backfill = ["backfill", "--input", _glob(archive), "--state", state, "--from", "2024-01-02", "--to", "2024-01-02"]
    assert cli.main(backfill) == 0
    corrected = refresh(_glob(live), state, out, [], NO_AUDIT)
    assert not corrected.published.reused
    assert corrected.summary.counts.read == first.summary.counts.read - 100

    refresh(_glob(live), state, other, [], RefreshOptions(audit=False, drop_missing_days=True))  # another board
    after_drop = refresh(_glob(live), state, out, [], NO_AUDIT)
    assert not after_drop.published.reused and after_drop.summary.days.count == SIM.days - 1
    assert refresh(_glob(live), state, out, [], NO_AUDIT).published.reused  # and then nothing new, as before


def test_a_kept_day_aggregated_under_other_aliases_is_named_in_a_warning(sim, tmp_path):
    """Aliases given after a day's input has gone: every other day is aggregated again under them, the kept day
    cannot be, so one judge was fit as two (its old name on that day's cells) without a word.  The summary names
    the day and the setting it was aggregated under, and the warning says how to make the board whole."""
    logs = tmp_path / "logs"
    shutil.copytree(sim / "battles", logs / "battles")
    state, out = str(tmp_path / "state"), str(tmp_path / "out")
    refresh(_glob(logs), state, out, [], NO_AUDIT)
    shutil.rmtree(logs / "battles" / "day=2024-01-02")
    kept = refresh(_glob(logs), state, out, [], NO_AUDIT)
    assert kept.summary.days.other_settings == []  # the same settings: nothing said
    assert not [w for w in kept.summary.warnings if "other ingest settings" in w]
    judge = json.loads((sim / "truth.json").read_text())["judges"][0]["judge"]
    aliases = tmp_path / "aliases.json"
    aliases.write_text(json.dumps({judge: "renamed-judge"}))
    options = RefreshOptions(audit=False, aliases=str(aliases))
    renamed = refresh(_glob(logs), state, out, [], options)
    assert {judge, "renamed-judge"} <= {j.judge for j in renamed.summary.judges}  # the board mixes both names
    assert renamed.summary.days.other_settings == ["2024-01-02"]
    assert [w for w in renamed.summary.warnings if "other ingest settings" in w] == [
        "1 day(s) kept in the fit without input were aggregated under other ingest settings (aliases) than this "
        "run's: 2024-01-02; their cells keep the names and families of those settings, so the board mixes the two. "
        "Restore their input files to aggregate them again, or drop them (refresh --drop-missing-days)"
    ]
    dropped = refresh(
        _glob(logs), state, out, [], RefreshOptions(audit=False, aliases=str(aliases), drop_missing_days=True)
    )
    assert judge not in {j.judge for j in dropped.summary.judges} and dropped.summary.days.other_settings == []


def test_a_kept_day_of_grades_a_refresh_without_scores_does_not_read_is_named_in_a_warning(tmp_path):
    """``--scores`` left out after a refresh that had it: the days with battle files are aggregated again without
    their grades, a day that had only grades is kept (no input file of this run matches it), so the board fit the
    grades of that one day beside every day's battles, and the summary said nothing.  It names the day now."""
    logs = write_simulation(dataclasses.replace(SIM, scores=0.3), tmp_path / "logs")
    shutil.rmtree(logs / "battles" / "day=2024-01-03")  # that day has grades only
    scores = str(logs / "scores" / "day=*" / "*.parquet")
    state, out = str(tmp_path / "state"), str(tmp_path / "out")
    refresh(_glob(logs), state, out, [], RefreshOptions(audit=False, scores_glob=scores))
    battles_only = refresh(_glob(logs), state, out, [], NO_AUDIT)
    days = battles_only.summary.days
    assert days.without_input == ["2024-01-03"] and days.other_settings == ["2024-01-03"]
    assert [w for w in battles_only.summary.warnings if "other ingest settings" in w] == [
        "1 day(s) kept in the fit without input were aggregated under other ingest settings (--scores) than this "
        "run's: 2024-01-03; their cells keep the grades of --scores, which this run does not read, so the board "
        "mixes the two. Restore their input files to aggregate them again, or drop them (refresh --drop-missing-days)"
    ]
    dropped = refresh(_glob(logs), state, out, [], RefreshOptions(audit=False, drop_missing_days=True))
    assert dropped.summary.score_counts is None and dropped.summary.days.other_settings == []


def test_the_audit_of_a_kept_day_without_input_covers_the_days_the_board_does(sim, tmp_path):
    """A day kept in the fit after its input went (the default) stays in the snapshot's audit too.

    Before, the board kept the day while the audit, re-run because its input changed, summed only the days
    still matched: in one snapshot, summary.json counted every day and audit.json one day fewer (real
    GenAI-Arena split by day: 2,032 against 1,944 counted), each judge's audit tables short of the day's verdicts.
    """
    logs = tmp_path / "logs"
    shutil.copytree(sim / "battles", logs / "battles")
    state, out = str(tmp_path / "state"), str(tmp_path / "out")
    refresh(_glob(logs), state, out, [])
    before = json.loads((_snapshot(tmp_path / "out") / "audit.json").read_text())
    judges_before = pl.read_parquet(_snapshot(tmp_path / "out") / "audit_judges.parquet")

    shutil.rmtree(logs / "battles" / "day=2024-01-02")
    kept = refresh(_glob(logs), state, out, [])
    assert kept.summary.days.without_input == ["2024-01-02"]
    after = json.loads((Path(kept.published.path) / "audit.json").read_text())
    assert after["counts"] == before["counts"]
    assert after["counts"]["counted"] == kept.summary.counts.counted
    assert pl.read_parquet(Path(kept.published.path) / "audit_judges.parquet").equals(judges_before)

    # then dropped, with the same input: the audit is re-run without the day, as the board is fit without it
    dropped = refresh(_glob(logs), state, out, [], RefreshOptions(drop_missing_days=True))
    audited = json.loads((Path(dropped.published.path) / "audit.json").read_text())["counts"]
    assert audited["counted"] == dropped.summary.counts.counted < kept.summary.counts.counted


def test_a_kept_day_never_audited_is_left_out_of_the_audit_in_a_logged_line(sim, tmp_path, caplog):
    """Aggregated with --no-audit, then its input gone: nothing to audit it from, and the log says so."""
    logs = tmp_path / "logs"
    shutil.copytree(sim / "battles", logs / "battles")
    state, out = str(tmp_path / "state"), str(tmp_path / "out")
    first = refresh(_glob(logs), state, out, [], NO_AUDIT)
    gone = json.loads((tmp_path / "state" / "manifests" / "day=2024-01-02.json").read_text())["counts"]
    shutil.rmtree(logs / "battles" / "day=2024-01-02")
    with caplog.at_level("WARNING", logger="biasboard.pipelines.refresh"):
        kept = refresh(_glob(logs), state, out, [])
    assert any("so the audit leaves them out: 2024-01-02" in r.getMessage() for r in caplog.records)
    audited = json.loads((Path(kept.published.path) / "audit.json").read_text())
    assert audited["counts"]["counted"] == first.summary.counts.counted - gone["counted"]
    # and the snapshot says so, not only the run's log: the audit's notes name the day it left out
    assert [n for n in audited["notes"] if "the board keeps" in n] == [
        "1 day(s) the board keeps without input have no audit partials stored under these settings (aggregated "
        "with --no-audit): not audited, so this audit counts fewer battles than the board (2024-01-02)"
    ]


def test_drop_missing_days_removes_the_day_from_the_state_and_the_board(sim, tmp_path):
    logs = tmp_path / "logs"
    shutil.copytree(sim / "battles", logs / "battles")
    state, out = str(tmp_path / "state"), str(tmp_path / "out")
    first = refresh(_glob(logs), state, out, [])  # with the audit: its per-day partials are dropped too
    assert (tmp_path / "state" / "audit_days" / "day=2024-01-02").exists()
    gone = pl.read_parquet(logs / "battles" / "day=2024-01-02" / "*.parquet")
    day_counts = json.loads((tmp_path / "state" / "manifests" / "day=2024-01-02.json").read_text())["counts"]

    shutil.rmtree(logs / "battles" / "day=2024-01-02")
    dropped = refresh(_glob(logs), state, out, [], RefreshOptions(audit=False, drop_missing_days=True))
    assert dropped.summary.days.dropped == ["2024-01-02"] and dropped.summary.days.without_input == []
    assert dropped.summary.days.count == SIM.days - 1
    assert (
        dropped.summary.counts.read
        == first.summary.counts.read - gone.height
        == (first.summary.counts.read - day_counts["read"])
    )
    # each counted battle adds one to n_battles of both its models: the board loses exactly the day's counted rows
    lost = first.leaderboard["n_battles"].sum() - dropped.leaderboard["n_battles"].sum()
    assert lost == 2 * day_counts["counted"] > 0
    for folder in ("cells", "deadletters", "audit_days"):
        assert not (tmp_path / "state" / folder / "day=2024-01-02").exists()
    assert not (tmp_path / "state" / "manifests" / "day=2024-01-02.json").exists()
    manifest = json.loads((Path(dropped.published.path) / "manifest.json").read_text())
    assert manifest["days_without_input"] == {"kept": [], "dropped": ["2024-01-02"]}

    again = refresh(_glob(logs), state, out, [], RefreshOptions(audit=False, drop_missing_days=True))
    assert again.published.reused and again.summary == dropped.summary  # nothing more to drop: nothing refitted


def test_drop_missing_days_with_an_input_that_matches_nothing_drops_nothing(sim, tmp_path, capsys):
    """A mistyped glob would make every stored day 'without input': it is refused before anything is dropped."""
    state, out = tmp_path / "state", tmp_path / "out"
    refresh(_glob(sim), str(state), str(out), [], NO_AUDIT)
    empty = tmp_path / "empty"
    empty.mkdir()
    argv = ["refresh", "--input", str(empty / "*.parquet"), "--state", str(state), "--out", str(out), "--no-audit"]
    assert cli.main([*argv, "--drop-missing-days"]) == 2
    assert len(list((state / "manifests").glob("day=*.json"))) == SIM.days  # nothing dropped
    assert capsys.readouterr().err.strip().endswith("empty/*.parquet: no input files match")


def test_a_day_that_holds_every_rejection_is_said_once():
    """One day's broken file was said twice: 'day … rejected 1,800 of the 1,800 rows it read' and '1,800 of the 6,000
    rows read (30.0%) were rejected'; the share line stays when other days rejected rows too (it adds them)."""
    broken, clean, some = IngestCounts(1800, 0, {"bad_winner": 1800}), IngestCounts(4200, 4200, {}), None
    days = ["2024-05-01", "2024-05-02"]
    lines = day_warnings.rejection_warnings(
        broken + clean, days, [{"counts": broken.to_dict()}, {"counts": clean.to_dict()}], "st"
    )
    assert lines == [
        "day 2024-05-01 rejected 1,800 of the 1,800 rows it read (bad_winner 1,800), every row the run rejected: "
        "30.0% of the 6,000 rows read (warned at 5% or more): the dead letters, each row with its reason, are in "
        "st/deadletters/day=2024-05-01/dead_letters.parquet"
    ]
    some = IngestCounts(4200, 4000, {"missing:judge": 200})
    lines = day_warnings.rejection_warnings(
        broken + some, days, [{"counts": broken.to_dict()}, {"counts": some.to_dict()}], "st"
    )
    assert len(lines) == 2 and lines[1].startswith("2,000 of the 6,000 rows read (33.3%")


@pytest.mark.parametrize(
    ("days", "broken", "said"),
    [
        # One day holds every rejection: its line and the run's share line said the same count with the same reasons.
        (
            1,
            (0,),
            ["day 2024-01-01 rejected 1,200 of the 2,000 rows it read (60.0%, warned at 5% or more; "
             "bad_winner 1,200): the dead letters, each row with its reason, are in "
             "STATE/deadletters/day=2024-01-01/dead_letters.parquet"],
        ),
        (
            2,
            (1,),
            ["day 2024-01-02 rejected 600 of the 1,000 rows it read (bad_winner 600), every row the run rejected: "
             "30.0% of the 2,000 rows read (warned at 5% or more): the dead letters, each row with its reason, are in "
             "STATE/deadletters/day=2024-01-02/dead_letters.parquet"],
        ),
        # Two days: each day line says its day, the share line the run's total; all three stay.
        (
            3,
            (0, 2),
            ["day 2024-01-01 rejected 401 of the 667 rows it read (bad_winner 401): see its dead letters",
             "day 2024-01-03 rejected 400 of the 666 rows it read (bad_winner 400): see its dead letters",
             "801 of the 2,000 rows read (40.1%, warned at 5% or more) were rejected (bad_winner 801): the dead "
             "letters, each row with its reason, are in STATE/deadletters/day=*/dead_letters.parquet"],
        ),
    ],
)  # fmt: skip
def test_a_day_holding_every_rejection_is_warned_of_once(days, broken, said, tmp_path, capsys):
    """Measured before, one day of two with 60% bad winners: '600 of the 2,000 rows read (30.0%, ...) were rejected
    (bad_winner 600): ...' and 'day 2024-01-02 rejected 600 of the 1,000 rows it read (bad_winner 600)': one fact
    twice.  Now one line naming the day, the run's share and that day's dead letters."""
    sim = write_simulation(SimulationConfig(battles=2000, models=5, judges=3, days=days, seed=4), tmp_path / "sim")
    for i, source in enumerate(sorted((sim / "battles").glob("day=*/*.parquet"))):
        if i in broken:
            rows = pl.read_parquet(source).with_row_index("i")
            bad = pl.col("i") % 5 < 3  # 60% of the day's rows
            rows.with_columns(winner=pl.when(bad).then(pl.lit("xyz")).otherwise("winner")).drop("i").write_parquet(
                source
            )
    state = tmp_path / "state"
    argv = ["refresh", "--input", _glob(sim), "--state", str(state), "--out", str(tmp_path / "o"), "--no-audit"]
    assert cli.main([*argv, "--k", "2"]) == 0
    out = capsys.readouterr().out
    warned = [line for line in out.splitlines() if "rejected" in line and line.startswith("warning: ")]
    assert warned == [f"warning: {line.replace('STATE', str(state))}" for line in said], out


def test_aliases_rename_the_anchors_as_they_rename_the_battles(sim, tmp_path):
    """``--aliases`` renamed the battles' models and not the anchors': every anchor verdict on a renamed model was a
    verdict on a model the board does not have, left out of the reference (30 anchors read 20 with one of the
    six models renamed), and the audit's gold lookup, matched by model name, lost those battles' labels."""
    anchors = _write_anchors(sim, tmp_path / "anchors")
    renamed = sorted(m["model"] for m in json.loads((sim / "truth.json").read_text())["models"])[0]
    aliases = tmp_path / "aliases.json"
    aliases.write_text(json.dumps({renamed: "renamed-model"}))
    options = RefreshOptions(anchors=anchors, aliases=str(aliases))
    outcome = refresh(_glob(sim), str(tmp_path / "state"), str(tmp_path / "out"), [], options)
    assert outcome.summary.reference is not None and outcome.summary.reference.verdicts == 30
    assert "renamed-model" in set(pl.read_parquet(_snapshot(tmp_path / "out") / "leaderboard.parquet")["model"])
    judges = pl.read_parquet(_snapshot(tmp_path / "out") / "audit_judges.parquet")
    plain = refresh(_glob(sim), str(tmp_path / "state0"), str(tmp_path / "out0"), [], RefreshOptions(anchors=anchors))
    assert plain.summary.reference is not None
    before = pl.read_parquet(_snapshot(tmp_path / "out0") / "audit_judges.parquet")
    assert judges["gold_n_labeled"].to_list() == before["gold_n_labeled"].to_list()


def test_the_alias_entries_that_matched_nothing_are_named(sim, tmp_path, caplog):
    """An ``--aliases`` map none of whose entries matched a name was silent (only ``renamed: 0`` in summary.json); a
    note then said so, but a map any of whose entries renamed rows said nothing, so a typo in one entry of many went
    unseen.  The note names the entries that renamed no counted row of any stored day (a refit that reads no day
    again matches them from the days' manifests) nor name an anchor rater or model; a map whose every entry matched
    says nothing."""
    judge = json.loads((sim / "truth.json").read_text())["judges"][0]["judge"]
    anchors = _write_anchors(sim, tmp_path / "anchors")
    maps = {
        "none": ({"GPT4-judge": "gpt-4"}, None),
        "some": ({judge: "renamed-judge", "GPT4-judge": "x"}, None),
        "anchors": ({judge: "renamed-judge", "trusted-humans": "humans", "GPT4-judge": "x"}, anchors),
        "all": ({judge: "renamed-judge"}, None),
    }

    def said(name: str, refit: bool = False) -> list[str]:
        mapping, anchor_glob = maps[name]
        aliases = tmp_path / f"{name}.json"
        aliases.write_text(json.dumps(mapping))
        options = RefreshOptions(audit=False, bootstrap=0, aliases=str(aliases), anchors=anchor_glob, refit=refit)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="biasboard.pipelines.refresh"):
            refresh(_glob(sim), str(tmp_path / name), str(tmp_path / f"out-{name}"), [], options)
        return [r.getMessage() for r in caplog.records if r.getMessage().startswith("aliases:")]

    tail = "; the names they map from are not in the input as written there"
    assert said("none") == [
        f"aliases: none of the 1 entries of {tmp_path / 'none.json'} renamed a counted row (renamed: 0 in "
        f"summary.json): 'GPT4-judge'{tail}"
    ]
    some = [f"aliases: 1 of the 2 entries of {tmp_path / 'some.json'} renamed no counted row: 'GPT4-judge'{tail}"]
    assert said("some") == some
    assert said("some", refit=True) == some  # every day kept: matched from the manifests
    assert said("anchors") == [
        f"aliases: 1 of the 3 entries of {tmp_path / 'anchors.json'} renamed no counted row: 'GPT4-judge'{tail}"
    ]
    assert said("all") == []
