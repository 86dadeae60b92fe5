"""Hostile and careless input (issue 13): refused before work in one line, or counted; never stale, never a crash.

Each test is one case a careless or hostile user tried; the fuzz suite
(``test_fuzz.py``) covers the space of malformed files, these cover the options,
folders and maps around them.  Everything runs the real CLI entry function
in-process, the real FnApiRunner and real Parquet.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import apache_beam as beam
import polars as pl
import pytest
from biasboard.pipelines import cli
from biasboard.schemas.errors import InputError, recover_user_error
from biasboard.simulate import SimulationConfig, write_simulation
from biasboard.transforms import publish
from biasboard.transforms.runner import run_to_completion

SIM = SimulationConfig(battles=2400, models=5, judges=3, days=2, seed=5)


@pytest.fixture(scope="module")
def logs_without_families(tmp_path_factory) -> Path:
    """Simulated logs with the family columns dropped, so the family map decides every family."""
    root = write_simulation(SIM, tmp_path_factory.mktemp("sim"))
    for path in sorted((root / "battles").glob("day=*/*.parquet")):
        pl.read_parquet(path).drop("family_a", "family_b", "judge_family").write_parquet(path)
    return root


def _glob(root: Path) -> str:
    return str(root / "battles" / "day=*" / "*.parquet")


def _refresh(root: Path, state: Path, out: Path, *extra: str) -> int:
    argv = ["refresh", "--input", _glob(root), "--state", str(state), "--out", str(out), "--no-audit", *extra]
    return cli.main(argv)


def _tables(out: Path) -> tuple[bytes, bytes]:
    snapshot = Path(publish.resolve_snapshot(str(out)))
    return (snapshot / "leaderboard.parquet").read_bytes(), (snapshot / "bias.parquet").read_bytes()


def test_a_changed_family_map_changes_the_snapshot_and_matches_a_fresh_state(logs_without_families, tmp_path):
    """Families are stored in the cells, so the map's digest is part of each day's fingerprint."""
    state, out = tmp_path / "state", tmp_path / "out"
    # every model in the judges' family: each judge now sees "its own" model in every battle
    family_map = tmp_path / "families.json"
    family_map.write_text(json.dumps({"rules": [{"regex": "sim", "family": "one-house"}]}))
    assert _refresh(logs_without_families, state, out) == 0
    without = _tables(out)
    assert _refresh(logs_without_families, state, out, "--family-map", str(family_map)) == 0
    with_map = _tables(out)
    assert with_map != without  # the map was applied, not ignored for days already aggregated
    manifest = publish.read_snapshot_manifest(publish.resolve_snapshot(str(out)))
    assert manifest["aggregated_days"] == ["2024-01-01", "2024-01-02"]
    assert manifest["inputs"]["family_map"]["path"] == str(family_map)

    fresh_out = tmp_path / "fresh-out"
    assert _refresh(logs_without_families, tmp_path / "fresh-state", fresh_out, "--family-map", str(family_map)) == 0
    assert _tables(fresh_out) == with_map  # incremental == from scratch with the same flags

    assert _refresh(logs_without_families, state, out) == 0  # dropping the map again restores the first numbers
    assert _tables(out) == without


def test_a_missing_or_invalid_family_map_is_refused_even_when_nothing_is_new(logs_without_families, tmp_path, capsys):
    state, out = tmp_path / "state", tmp_path / "out"
    assert _refresh(logs_without_families, state, out) == 0
    latest = (out / "LATEST").read_text()
    capsys.readouterr()
    assert _refresh(logs_without_families, state, out, "--family-map", str(tmp_path / "nope.json")) == 2
    err = capsys.readouterr().err
    assert "cannot read the family map" in err and len(err.strip().splitlines()) == 1
    bad = tmp_path / "bad.json"
    bad.write_text('{"rules": [{"regex": "(", "family": "x"}]}')
    assert _refresh(logs_without_families, state, out, "--family-map", str(bad)) == 2
    err = capsys.readouterr().err
    assert "bad regex" in err and len(err.strip().splitlines()) == 1
    assert (out / "LATEST").read_text() == latest


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--bootstrap", "-1", "--bootstrap must be from 0 to 10000, got -1"),
        ("--seed", "-1", "--seed must be at least 0, got -1"),
        ("--plan-budget", "-1", "--plan-budget must be at least 0, got -1"),
        ("--plan-budget", "1000000000", "--plan-budget 1000000000: at most"),
        ("--k", "0", "--k must be at least 1, got 0"),
        # the flag, what it accepts, in one line: not the model's field (length_clip), nor argparse's usage block
        ("--length-clip", "5", "--length-clip must be one of 0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75, 2, 2.25, 2.5 or "),
        ("--length-clip", "abc", "--length-clip must be one of 0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75, 2, 2.25, 2.5 or "),
        ("--gate-level", "2", "--gate-level must be a number in (0, 1), got 2"),
        ("--gate-level", "nan", "--gate-level must be a number in (0, 1), got nan"),
        ("--k", "1.5", "--k must be a whole number, at least 1, got '1.5'"),
        ("--bootstrap", "many", "--bootstrap must be a whole number, from 0 to 10000, got 'many'"),
        ("--slice-min-battles", "0", "--slice-min-battles must be at least 1, got 0"),
        ("--fit-min-ram", "abc", "--fit-min-ram must be an amount of memory with its unit (e.g. 4GB, 512MiB), got"),
    ],
)
def test_numbers_out_of_range_are_refused_before_anything_is_published(tmp_path, capsys, flag, value, message):
    logs = tmp_path / "logs"  # no input at all: the option check must come first
    assert _refresh(logs, tmp_path / "state", tmp_path / "out", flag, value) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out" / "LATEST").exists() and not (tmp_path / "state" / "cells").exists()


def test_a_read_only_out_is_refused_before_the_aggregation(logs_without_families, tmp_path, capsys):
    # /proc exists and no one, not even root, may create a file in it: a read-only folder the tests can rely on
    assert _refresh(logs_without_families, tmp_path / "state", Path("/proc")) == 2
    err = capsys.readouterr().err
    assert "--out /proc: cannot write there" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "state" / "cells").exists()  # nothing was aggregated


@pytest.mark.parametrize(
    "argv",
    [
        ["simulate", "--battles", "100", "--out", "/proc/biasboard-sim"],
        ["demo", "--workdir", "/proc/biasboard-demo"],
        ["import", "--format", "fastchat", "--in", "/dev/null", "--out", "/proc/biasboard-import"],
        ["audit", "--input", "x/*.parquet", "--out", "/proc/biasboard-audit"],
    ],
    ids=["simulate", "demo", "import", "audit"],
)
def test_every_job_refuses_an_unwritable_folder_in_one_line(argv, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "cannot write /proc/biasboard-" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_folder_flag_given_a_file_says_so(tmp_path, capsys):
    """``export --to FILE``: it printed the raw "[Errno 17] File exists"; a day given to a flag named "the path"."""
    (tmp_path / "afile").write_text("")
    assert (
        cli.main(["export", "--out", str(tmp_path / "site"), "--to", str(tmp_path / "afile"), "--format", "csv"]) == 2
    )
    err = capsys.readouterr().err
    assert f"--to {tmp_path / 'afile'}: exists and is a file, not a folder" in err
    assert len(err.strip().splitlines()) == 1
    assert cli.main(["backfill", "--input", "x/*.parquet", "--state", str(tmp_path / "s"), "--from", "2024-13-01"]) == 2
    assert "--from: the date '2024-13-01' given is not a calendar day" in capsys.readouterr().err


def test_a_runner_beam_does_not_know_is_refused_in_one_line_before_any_work(tmp_path, capsys):
    """``--runner NoSuchRunner`` failed inside ``Pipeline()`` in a Beam traceback."""
    argv = ["backfill", "--input", str(tmp_path / "x.parquet"), "--state", str(tmp_path / "s"), "--runner", "Nope"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "--runner Nope: Unexpected pipeline runner: Nope. Valid values are " in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "s").exists()


@pytest.mark.parametrize("day", ["9999-12-31", "0001-01-01", "1980-06-01"])
def test_a_day_no_battle_can_be_dated_on_is_refused_in_one_line_by_path_and_by_option(day, tmp_path, capsys):
    """A ``day=`` folder at the calendar's ends failed inside the ingest (OverflowError from the day's window, in
    a Beam traceback); one outside 1990-2099 held rows that were all off their day; ``import --date 1980-01-01``
    dead-lettered every undated row as bad_timestamp without naming the option.  A range's bound may be any day."""
    folder = tmp_path / "logs" / f"day={day}"
    folder.mkdir(parents=True)
    pl.DataFrame({"battle_id": ["b"], "ts": ["2024-01-01"], "judge": ["j"], "model_a": ["a"], "model_b": ["b"],
                  "winner": ["model_a"]}).write_parquet(folder / "p.parquet")  # fmt: skip
    why = "is outside the days a battle can be dated on (1990-01-01 to 2099-12-31)"
    for job in (["backfill", "--state", str(tmp_path / "s")], ["audit", "--out", str(tmp_path / "a")]):
        assert cli.main([job[0], "--input", str(tmp_path / "logs"), *job[1:]]) == 2
        err = capsys.readouterr().err
        assert f"the date '{day}' in the path {why}" in err and len(err.strip().splitlines()) == 1
    source = tmp_path / "battles.json"
    source.write_text(json.dumps([{"model_a": "a", "model_b": "b", "winner": "model_a", "judge": "u"}]))
    with pytest.raises(SystemExit):
        cli.main(["import", "--format", "fastchat", "--in", str(source), "--out", str(tmp_path / "i"), "--date", day])
    assert f"argument --date: '{day}' {why}" in capsys.readouterr().err
    assert cli.main(["backfill", "--input", str(tmp_path / "none"), "--state", str(tmp_path / "s"), "--from", day]) == 2
    assert "--from" not in capsys.readouterr().err  # refused for the empty input, not for the bound


@pytest.mark.parametrize(
    ("winner", "ts", "rows", "says"),
    [
        (pl.lit(1), None, 40, "all 40 rows read were rejected (bad_winner 40); each day's dead letters are under "),
        (pl.lit("model_a"), None, 0, "their input files hold no battle row (1 empty file(s) skipped)"),
        # epoch milliseconds (their seconds fall past 2100): the line says what they look like
        (
            pl.lit("model_a"),
            1704078000000,
            40,
            "all 40 rows read were rejected (bad_timestamp 40) (the rejected ts are numbers near 1.7e+12: epoch "
            "milliseconds? numbers are read as epoch seconds); each day's dead letters are under ",
        ),
    ],
)
def test_a_refresh_with_no_valid_battle_says_what_it_read_and_why_it_rejected_it(
    tmp_path, capsys, winner, ts, rows, says
):
    """A day whose every row is rejected (an integer ``winner``), or whose file holds no row, leaves nothing to fit.
    The refresh said "every row was rejected" in both cases and nothing of why; it now says how many rows it read
    and the reasons, or that the files hold no row, in one line."""
    day = tmp_path / "logs" / "day=2024-01-01"
    day.mkdir(parents=True)
    stamps = ["2024-01-01T03:00:00Z"] * rows if ts is None else [ts] * rows
    frame = pl.DataFrame({"battle_id": [f"b{i}" for i in range(rows)], "ts": stamps})
    frame = frame.with_columns(judge=pl.lit("j"), model_a=pl.lit("a"), model_b=pl.lit("b"), winner=winner)
    frame.write_parquet(day / "part-0.parquet")
    state = tmp_path / "s"
    argv = ["refresh", "--input", str(tmp_path / "logs"), "--state", str(state), "--out", str(tmp_path / "o")]
    assert cli.main([*argv, "--no-audit"]) == 2
    err = capsys.readouterr().err
    assert f"{state}: no valid battle to fit in the 1 stored day(s): {says}" in err
    assert len(err.strip().splitlines()) == 1


def test_a_worker_error_is_one_line_without_the_runner_traceback(tmp_path):
    """A file whose footer is fine but whose data pages are corrupt fails inside the Beam worker."""
    day = tmp_path / "logs" / "day=2024-01-01"
    day.mkdir(parents=True)
    n = 2000
    frame = pl.DataFrame(
        {
            "battle_id": [f"b{i}" for i in range(n)],
            "ts": ["2024-01-01T00:00:00Z"] * n,
            "judge": ["j"] * n,
            "model_a": ["a"] * n,
            "model_b": ["b"] * n,
            "winner": ["model_a"] * n,
        }
    )
    path = day / "part-0.parquet"
    frame.write_parquet(path, compression="zstd", statistics=False)
    data = bytearray(path.read_bytes())
    data[8:400] = b"\xab" * 392  # the first column chunk's pages, well before the footer
    path.write_bytes(bytes(data))
    # a real process: the runner's log handlers are the ones a user's terminal shows
    argv = ["refresh", "--input", str(tmp_path / "logs"), "--state", str(tmp_path / "s"), "--out", str(tmp_path / "o")]
    proc = subprocess.run([sys.executable, "-m", "biasboard.pipelines.cli", *argv], capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"{path}: cannot read as Parquet" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "[while running" not in proc.stderr, proc.stderr[-3000:]  # Beam's step names are not the user's business


def test_a_user_error_raised_in_a_beam_step_keeps_its_own_message():
    """Beam re-raises a step's error as a new one ending in `` [while running 'Step']``: the user sees the message."""

    def refuse(_: int) -> int:
        raise InputError("--reference: no judge matches nobody*")

    pipeline = beam.Pipeline()
    _ = pipeline | beam.Create([1]) | "Fit/Stage" >> beam.Map(refuse)
    with pytest.raises(InputError) as raised:
        run_to_completion(pipeline)
    assert str(raised.value) == "--reference: no judge matches nobody*"
    worker_text = "Traceback ...\nInputError: --reference: no judge matches nobody* [while running 'Fit/Stage']"
    relayed = RuntimeError(worker_text)
    assert str(recover_user_error(relayed)) == "--reference: no judge matches nobody*"


def test_the_audit_is_bit_reproducible_whatever_the_order_days_are_summed_in(tmp_path):
    """Repeated judging gives fractional pair shares; their sums must not depend on the combine order.

    A rerun after a crash groups days and bundles differently, and the snapshot
    id hashes the audit's files, so an order-dependent float sum changed the id.
    """
    from biasboard.audit import finish_audit, merge_partials
    from biasboard.pipelines.options import beam_options
    from biasboard.transforms import read
    from biasboard.transforms.audit import audit_day, audit_files, run_audit
    from biasboard.transforms.cells import IngestCounts

    config = SimulationConfig(battles=8000, models=6, judges=3, days=3, both_orders=True, prompts=40, seed=3)
    logs = write_simulation(config, tmp_path / "sim")
    run_audit(_glob(logs), str(tmp_path / "audit"), beam_options([]))
    written = {p.name: p.read_bytes() for p in sorted((tmp_path / "audit").iterdir())}
    pairs = pl.read_parquet(tmp_path / "audit" / "audit_order_pairs.parquet")
    shares = pairs.select(pl.col("^c_.*$")).to_numpy()
    assert (shares % 1 != 0).any()  # the case that matters: fractional shares were summed

    families = read.load_family_map(None)  # what run_audit uses without --family-map
    days = [audit_day(task, families) for task in sorted(read.list_input_days(_glob(logs)).items())]
    counts = sum((c for _, c in days), IngestCounts())
    for order in ([0, 1, 2], [2, 0, 1], [1, 2, 0]):
        parts = [days[i][0] for i in order]
        summed = merge_partials([merge_partials(parts[:2]), parts[2]])  # a different combine tree as well
        assert audit_files(finish_audit(summed), counts) == written, order


# --------------------------------------------------------------------------- export, buckets, CSV and HTML


def _published_with_names(out: Path, names: list[str]) -> None:
    n = len(names)
    leaderboard = pl.DataFrame({"model": names, "rating_corrected": [float(-i) for i in range(n)]})
    bias = pl.DataFrame({"judge": names[:1], "effect": ["position"], "estimate": [-0.2]})
    files = publish.snapshot_files(leaderboard, bias, {"kendall_tau": 1.0}, "<html></html>")
    publish.publish_snapshot(str(out), files, {"inputs": []})


def test_csv_export_neutralises_spreadsheet_formulas(tmp_path):
    hostile = ['=HYPERLINK("http://x")', "+1", "-cmd|' /C calc'!A0", "@SUM(A1)", "\tx", "\rx", "plain", "a=b"]
    _published_with_names(tmp_path / "out", hostile)
    assert cli.main(["export", "--out", str(tmp_path / "out"), "--to", str(tmp_path / "dash"), "--format", "csv"]) == 0
    text = (tmp_path / "dash" / "leaderboard.csv").read_text()
    cells = pl.read_csv(tmp_path / "dash" / "leaderboard.csv")["model"].to_list()
    assert cells == ["'" + name for name in hostile[:6]] + ["plain", "a=b"]
    assert ",-1.0" in text  # numbers stay numbers, negative ones included
    # the typed forms keep the names exactly as given
    parquet = tmp_path / "dash-parquet"
    assert cli.main(["export", "--out", str(tmp_path / "out"), "--to", str(parquet), "--format", "parquet"]) == 0
    assert pl.read_parquet(parquet / "leaderboard.parquet")["model"].to_list() == hostile


def test_the_report_never_shows_raw_control_bytes():
    from biasboard.report.svg import esc

    shown = esc("gpt\x07-4\x1b[31m\x00\x7f\x9b<b>\n")
    assert shown == "gpt\u2407-4\u241b[31m\u2400\u2421\ufffd&lt;b&gt;\n"
    assert not any((ord(ch) < 0x20 and ch not in "\t\n") or 0x7F <= ord(ch) < 0xA0 for ch in shown)


def test_export_to_an_unreachable_bucket_fails_fast_in_one_line(tmp_path):
    from gcs_emulator import emulator_env, free_port

    _published_with_names(tmp_path / "out", ["a", "b"])
    env = emulator_env(f"http://127.0.0.1:{free_port()}")  # a loopback port with nothing listening
    argv = ["export", "--out", str(tmp_path / "out"), "--to", "gs://dash/bb", "--format", "csv"]
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "biasboard.pipelines.cli", *argv], capture_output=True, text=True, env=env, timeout=120
    )
    elapsed = time.monotonic() - started
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    refused = r"cannot reach bucket dash \(Connection refused; no answer for (\d+) s\)"  # not Google's 2 min, nor 30 s
    said = re.fullmatch(f"biasboard export: error: --to gs://dash/bb: {refused}", lines[-1])
    assert said and int(said.group(1)) >= 12, lines  # the time it waited, measured: the probe's 12 s at least
    assert "Traceback" not in proc.stderr
    assert elapsed < 60, f"{elapsed:.0f} s: the bounded probe gives up after about 12 s (plus start-up)"


def test_a_missing_bucket_is_named_in_one_line(tmp_path, capsys):
    from gcs_emulator import emulated_gcs

    _published_with_names(tmp_path / "out", ["a", "b"])
    with emulated_gcs("present", tmp_path / "emulator.log"):
        argv = ["export", "--out", str(tmp_path / "out"), "--to", "gs://absent/bb", "--format", "csv"]
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert "--to gs://absent/bb: bucket absent does not exist" in err and len(err.strip().splitlines()) == 1
        argv = ["refresh", "--input", str(tmp_path / "x"), "--state", "gs://absent/state", "--out", "gs://present/o"]
        assert cli.main(argv) == 2
        assert "--state gs://absent/state: bucket absent does not exist" in capsys.readouterr().err


def test_worker_tracebacks_of_user_errors_are_filtered_also_when_relayed_as_text():
    """Worker processes relay a traceback as a log message (no exc_info); a bug's traceback stays."""
    import logging

    from biasboard.pipelines.cli import _hide_user_error_tracebacks

    def record(name: str, message: str) -> logging.LogRecord:
        return logging.LogRecord(name, logging.ERROR, __file__, 1, message, None, None)

    relayed = "Original traceback is\nTraceback ...\nbiasboard.schemas.errors.InputError: x: bad"
    assert not _hide_user_error_tracebacks(record("apache_beam.runners.portability.local_job_service", relayed))
    bug = "Original traceback is\nTraceback ...\nKeyError: 'x'"
    assert _hide_user_error_tracebacks(record("apache_beam.runners.portability.local_job_service", bug))
    assert _hide_user_error_tracebacks(record("biasboard.pipelines.refresh", relayed))  # only the runner's own logs


def test_a_judge_named_like_the_global_effects_is_refused_in_one_line(tmp_path, capsys):
    """``*`` names the global effects (the bias table's row, a switched-off pair, ``--reference``, ``plan
    --judge``): an input judge of that name was fitted as a judge and its rows read as all judges' (the QA pass
    found it).  The refresh refuses it in one line naming the way out."""
    root = tmp_path / "logs"
    write_simulation(SIM, root)
    for path in sorted((root / "battles").glob("day=*/*.parquet")):
        frame = pl.read_parquet(path)
        first = frame["judge"].min()
        frame.with_columns(pl.col("judge").replace({first: "*"})).write_parquet(path)
    assert _refresh(root, tmp_path / "s", tmp_path / "o") == 2
    err = capsys.readouterr().err
    assert "a judge is named '*', the name of the global effects" in err and "--aliases" in err, err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("value", ["127.0.0.1:9", "localhost:9"])
def test_an_emulator_host_without_its_scheme_is_named_with_the_fix(tmp_path, capsys, monkeypatch, value):
    """``STORAGE_EMULATOR_HOST=127.0.0.1:9`` (no ``http://``) ended the job in requests' "No connection adapters were
    found for '127.0.0.1:9/storage/v1/b/dash...'" (the storage QA pass); the line now names the variable and the fix."""
    _published_with_names(tmp_path / "out", ["a", "b"])
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", value)
    argv = ["export", "--out", str(tmp_path / "out"), "--to", "gs://dash/bb", "--format", "csv"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"STORAGE_EMULATOR_HOST={value}: not a URL; name the scheme, e.g. http://{value}"), err
    assert len(err.splitlines()) == 1
