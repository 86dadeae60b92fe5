"""The CLI's own contract: misspelt flags are refused in one line, Beam's flags pass through."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from biasboard.pipelines import cli
from biasboard.pipelines.audit import AuditOptions
from biasboard.pipelines.backfill import BackfillOptions
from biasboard.pipelines.demo import DemoOptions
from biasboard.pipelines.options import options_from, unknown_options
from biasboard.pipelines.plan import PlanOptions
from biasboard.pipelines.refresh import RefreshOptions


def test_beam_flags_pass_and_unknown_flags_are_named():
    beam = ["--runner", "DataflowRunner", "--project", "p", "--region=europe-west1", "--setup_file", "./setup.py"]
    assert unknown_options(beam) == []
    assert unknown_options([*beam, "--famly-map", "x.json", "--bogus=1"]) == ["--famly-map", "--bogus=1"]


def test_a_misspelt_flag_fails_before_the_job_runs(tmp_path, capsys):
    argv = ["export", "--out", str(tmp_path / "no"), "--to", str(tmp_path / "x"), "--format", "csv", "--snapshto", "a"]
    code = cli.main(argv)
    assert code == 2
    err = capsys.readouterr().err
    assert "unrecognised option(s) --snapshto" in err
    assert "Traceback" not in err


def test_words_left_over_are_refused_not_ignored(tmp_path, capsys):
    """An unquoted glob is expanded by the shell: ``--input`` took the first file and the rest were ignored without a
    word (with ``--drop-missing-days`` the refresh dropped every other stored day).  Words that are no flag's value
    are refused in one line; a Beam flag's value (``--runner X``, ``--experiments a``) is not a stray word."""
    from biasboard.pipelines.options import stray_arguments

    beam = ["--runner", "DataflowRunner", "--experiments", "a", "--region=eu", "--save_main_session"]
    assert stray_arguments(beam) == []
    assert stray_arguments(["--save_main_session", "x", "--region=eu", "y"]) == ["x", "y"]
    typed = ["--direct_num_workers", "2", "--max_num_workers", "20", "--parallelism", "16", "--disk_size_gb", "50"]
    assert stray_arguments(typed) == []  # a typed Beam flag's value, as docs/running.md spells --max_num_workers 20
    assert stray_arguments(["--save_main_session", "True"]) == ["True"]
    days = [tmp_path / f"day=2024-01-0{d}" / "part.parquet" for d in (1, 2, 3)]
    argv = ["refresh", "--input", *map(str, days), "--state", str(tmp_path / "s"), "--out", str(tmp_path / "o")]
    assert cli.main([*argv, "--drop-missing-days"]) == 2
    err = capsys.readouterr().err
    assert f"unexpected argument(s) {days[1]}, {days[2]}" in err and "quote it" in err and "Traceback" not in err
    assert not (tmp_path / "s").exists()
    export = ["export", "--out", str(tmp_path / "o"), "--to", str(tmp_path / "x"), "--format", "csv"]
    assert cli.main([*export, "not-an-option"]) == 2
    assert "unexpected argument(s) not-an-option" in capsys.readouterr().err


def test_a_folder_a_refresh_owns_is_refused_to_every_other_job(tmp_path, capsys):
    """``export --to site/snapshots/<id>`` was accepted (and a second export there in another format removed the
    snapshot's own tables), ``audit --out state/audit`` replaced the audit the next refresh reused, and ``refresh``
    with ``--state`` and ``--out`` swapped published the state's cells and dead letters.  Each is refused in one
    line; a plan written among the site's plans, and an export beside the site, are not."""
    from biasboard.simulate import SimulationConfig, write_simulation

    logs = write_simulation(SimulationConfig(battles=1500, models=4, judges=2, days=1, seed=2), tmp_path / "logs")
    state, site = str(tmp_path / "state"), str(tmp_path / "site")
    base = ["--input", str(logs / "battles")]
    assert cli.main(["refresh", *base, "--no-audit", "--state", state, "--out", site]) == 0
    snapshot = str(Path(site) / "snapshots" / (Path(site) / "LATEST").read_text().strip())
    capsys.readouterr()
    refused = {
        "export --to a snapshot": ["export", "--out", site, "--format", "csv", "--to", snapshot],
        "export --to the site": ["export", "--out", site, "--format", "csv", "--to", site],
        "audit --out the state's audit": ["audit", *base, "--out", str(Path(state) / "audit")],
        "refresh, folders swapped": ["refresh", *base, "--state", site, "--out", state],
        "plan --to a snapshot": ["plan", "--out", site, "--budget", "4", "--to", snapshot],
    }
    for what, argv in refused.items():
        assert cli.main(argv) == 2, what
        err = capsys.readouterr().err.strip()
        assert "give --" in err and "a folder of its own" in err and "\n" not in err, (what, err)
        assert ("published site" in err) or ("refresh state" in err), err
    files = json.loads((Path(snapshot) / "manifest.json").read_text())["files"]
    assert sorted(os.listdir(snapshot)) == sorted([*files, "manifest.json"])  # the snapshot as published
    assert cli.main(["plan", "--out", site, "--budget", "4", "--to", str(Path(site) / "plans" / "mine")]) == 0
    (tmp_path / "a-file").write_text("")
    assert cli.main(["plan", "--out", site, "--budget", "4", "--to", str(tmp_path / "a-file")]) == 2
    assert "exists and is a file, not a folder" in capsys.readouterr().err  # (it was "[Errno 17] File exists")
    assert cli.main(["export", "--out", site, "--format", "csv", "--to", str(tmp_path / "dash")]) == 0


def test_unwritable_or_shared_folders_fail_in_one_line_before_any_work(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    logs = tmp_path / "logs" / "day=2024-01-01"
    logs.mkdir(parents=True)
    glob = str(tmp_path / "logs" / "day=*" / "*.parquet")
    assert cli.main(["refresh", "--input", glob, "--state", str(blocker / "state"), "--out", str(tmp_path / "o")]) == 2
    assert f"cannot write {blocker / 'state'}" in capsys.readouterr().err
    same = str(tmp_path / "site")
    assert cli.main(["refresh", "--input", glob, "--state", same, "--out", same + "/"]) == 2
    assert "--state and --out are the same folder" in capsys.readouterr().err
    assert not (tmp_path / "o").exists() and not (tmp_path / "site").exists()


def test_a_state_or_out_folder_inside_the_input_is_refused_in_one_line(tmp_path, capsys):
    """``--input logs --state logs/state``: the first refresh worked, the next read the state's own cells as battle
    files ("9 input file(s) over 3 day(s): 3 changed", then "pair_cells.parquet: required column 'battle_id' is
    missing"); the same with ``--state`` the import folder itself.  Refused before anything is written."""
    from biasboard.simulate import SimulationConfig, write_simulation

    write_simulation(SimulationConfig(battles=300, models=4, judges=2, days=2, seed=3), tmp_path / "logs")
    logs = tmp_path / "logs"
    for flag, argv in [
        ("--state", ["--state", str(logs / "state"), "--out", str(tmp_path / "o")]),
        ("--state", ["--state", str(logs) + "/", "--out", str(tmp_path / "o")]),
        ("--out", ["--state", str(tmp_path / "s"), "--out", str(logs / "battles" / "site")]),
    ]:
        assert cli.main(["refresh", "--input", str(logs), *argv]) == 2
        err = capsys.readouterr().err
        assert f"{flag} " in err and f"is inside --input {logs}" in err and "Traceback" not in err
    # a glob that reaches below the state's folder (``**`` from above it, or naming a parent): refused at once, as
    # the state is empty on the first run and read back on the next
    for glob in (str(logs / "**" / "*.parquet"), str(logs / "*")):
        assert cli.main(["backfill", "--input", glob, "--state", str(logs / "state")]) == 2
        assert f"--state {logs / 'state'} lies where --input {glob} reads" in capsys.readouterr().err
    # a glob that will match the state's files once they exist, without reaching its folder by name: refused before
    # the first run too (it worked once, then every later run failed; the QA pass), as is one that matches them now
    shutil.copytree(logs / "battles", logs / "src" / "cells")
    glob = str(logs / "*" / "cells" / "day=*" / "*.parquet")
    assert cli.main(["backfill", "--input", glob, "--state", str(logs / "state")]) == 2
    assert f"--state {logs / 'state'} lies where --input {glob} reads" in capsys.readouterr().err
    other = str(tmp_path / "elsewhere" / "state")
    assert cli.main(["backfill", "--input", glob, "--state", other]) == 0
    assert cli.main(["refresh", "--input", str(tmp_path / "*" / "*" / "cells" / "day=*" / "*.parquet"),
                     "--state", other, "--out", str(tmp_path / "o")]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert f"--state {other} lies where --input" in err, err
    assert cli.main(["backfill", "--input", str(logs), "--state", str(logs / "state2")]) == 2
    assert cli.main(["audit", "--input", str(logs), "--out", str(logs / "audit")]) == 2
    assert not (tmp_path / "o").exists() and not (logs / "state2").exists() and not (logs / "audit").exists()


def test_plan_refuses_a_budget_it_could_not_plan_in_reasonable_time(tmp_path, capsys):
    assert cli.main(["plan", "--out", str(tmp_path), "--budget", "1000000000"]) == 2
    assert "at most 100000 comparisons per plan" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("command", "required", "options"),
    [
        ("refresh", ["--input", "i", "--state", "s", "--out", "o"], RefreshOptions),
        ("backfill", ["--input", "i", "--state", "s"], BackfillOptions),
        ("audit", ["--input", "i", "--out", "o"], AuditOptions),
        ("plan", ["--out", "o", "--budget", "10"], PlanOptions),
        ("demo", [], DemoOptions),
    ],
)
def test_every_job_takes_its_flag_defaults_from_its_options_dataclass(command, required, options):
    args, rest = cli.build_parser(command).parse_known_args([command, *required])
    assert rest == [] and options_from(options, args) == options()


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["demo", "--battles", "abc"], "--battles must be a whole number, at least 1, got 'abc'"),
        (["demo", "--k", "0"], "--k must be at least 1, got 0"),  # was refused only after simulating the battles
        (["demo", "--seed", "1.5"], "--seed must be a whole number, at least 0, got '1.5'"),
        (["demo", "--top", "0"], "--top must be at least 1, got 0"),
        (["plan", "--out", "OUT", "--budget", "abc"], "--budget must be a whole number, at least 2, got 'abc'"),
        (["plan", "--out", "OUT", "--budget", "10", "--k", "0"], "--k must be at least 1, got 0"),
        (["plan", "--out", "OUT", "--budget", "10", "--max-pair-share", "x"], "--max-pair-share must be above 0"),
        # '' is the planner's stand-in for "no judge": given, it was planned for as a judge of its own
        (["plan", "--out", "OUT", "--budget", "10", "--judge", ""], "--judge '': a judge name is empty"),
        # Path('') is the current folder: whatever lay there was imported
        (["import", "--format", "fastchat", "--in", "", "--out", "OUT"], "the input path is empty"),
        # a judge name the ingest rejects on every row it is written into
        (["import", "--format", "fastchat", "--in", "x", "--out", "OUT", "--judge", "a\x01b"], "--judge 'a\\x01b'"),
    ],
)
def test_demo_and_plan_numbers_are_refused_in_one_line_naming_the_flag(argv, said, tmp_path, capsys):
    """(And two empty values.)  argparse said ``argument --battles: invalid int value: 'abc'`` under its usage block;
    now as refresh does."""
    argv = [str(tmp_path / a) if a == "OUT" else a for a in argv]
    assert cli.main([*argv, "--workdir", str(tmp_path / "w")] if argv[0] == "demo" else argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"biasboard {argv[0]}: error: {said}") and err.count("\n") == 1
    assert not (tmp_path / "w").exists() and not (tmp_path / "OUT").exists()


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["simulate", "--battles", "abc"], "--battles must be a whole number, at least 1, got 'abc'"),
        (["simulate", "--seed", "-1"], "--seed must be at least 0, got -1"),  # was numpy's traceback
        (["simulate", "--sd-u", "-1"], "--sd-u must be a number in [0, 20], got -1"),  # was numpy's traceback
        (["simulate", "--gamma0", "inf"], "--gamma0 must be a number in [-20, 20], got inf"),  # was NaN verdicts
        (["simulate", "--grades", "1000"], "--grades must be from 2 to 100, got 1000"),  # the ingest rejected them all
        (["simulate", "--start-date", "2099-12-30", "--days", "5"], "--start-date 2099-12-30 with --days 5: the days"),
        # past 9999-12-31: OverflowError's traceback before the range check could refuse it
        (["simulate", "--start-date", "9999-12-31", "--days", "3"], "--start-date 9999-12-31 with --days 3: the days"),
        (["simulate", "--days", "999999999"], "--start-date 2024-01-01 with --days 999999999: the days"),
        (["simulate", "--theta-sd", "nan"], "--theta-sd must be a number in [0, 20], got nan"),
        (["simulate", "--sd-u", "inf"], "--sd-u must be a number in [0, 20], got inf"),  # was "at least 0"
        (["simulate", "--hubs", "1.5"], "--hubs must be a whole number, at least 0, got '1.5'"),
        (["simulate", "--self-identical", "2"], "--self-identical must be a number in [0, 1], got 2"),
        (["simulate", "--categories", "9"], "--categories must be from 0 to 6, got 9"),
        (["simulate", "--bad-rows", "1"], "--bad-rows must be a number in [0, 1), got 1"),
        (
            ["import", "--format", "alpacaeval", "--in", "IN", "--tie-band", "x"],
            "--tie-band must be a number in [0, 0.5)",
        ),
        (
            ["import", "--format", "alpacaeval", "--in", "IN", "--tie-band", "0.5"],
            "--tie-band must be a number in [0, 0.5), got 0.5",
        ),
    ],
)
def test_simulate_and_import_numbers_are_refused_in_one_line_naming_the_flag(argv, said, tmp_path, capsys):
    """As refresh's, demo's and plan's: argparse's usage block, numpy's tracebacks or nothing at all before."""
    argv = [str(tmp_path / a) if a == "IN" else a for a in argv]
    assert cli.main([*argv, "--out", str(tmp_path / "OUT")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"biasboard {argv[0]}: error: {said}") and err.count("\n") == 1
    assert not (tmp_path / "OUT").exists()


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--grades", "5"], "--grades 5 is given without --scores: no score is drawn"),
        (["--hubs", "3"], "--hubs 3 is given without --design multihub"),
        (["--design", "hubspoke", "--hubs", "3"], "--hubs 3 is given without --design multihub"),
        (["--strata", "3"], "--strata 3 is given without --design stratified"),
        (["--corr-style", "0.5"], "--corr-style 0.5 is given without --style"),
        (["--category-sd", "1.0"], "--category-sd 1.0 is given without --categories"),
        (["--self-identical", "0.9"], "--self-identical 0.9 is given without --self-battles"),
        (["--both-orders", "--position-skew", "1"], "--position-skew 1.0 is given with --both-orders"),
        (["--theta-sd", "0", "--corr-length", "0.5"], "--corr-length 0.5 is given with --theta-sd 0"),
    ],
)
def test_simulate_refuses_a_flag_that_changes_nothing(argv, said, tmp_path, capsys):
    """Each was recorded in truth.json's settings and drew nothing (no grade, hub, stratum, style count, category
    or self-battle; no order left to skew), exit 0: a run the user believed had them had not."""
    assert cli.main(["simulate", *argv, "--out", str(tmp_path / "OUT")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"biasboard simulate: error: {said}") and err.count("\n") == 1
    assert not (tmp_path / "OUT").exists()


def test_argparse_errors_are_one_line_too(capsys):
    """A missing required flag or a value not among the choices printed argparse's usage block above the message
    (3 to 17 lines, the QA pass), where every other refusal is one line: now one line, pointing at --help."""
    for argv, said in (
        (["refresh", "--input", "x"], "the following arguments are required: --state, --out"),
        (["refresh", "--input", "x", "--state", "s", "--out", "o", "--diagnostics", "xyz"], "invalid choice: 'xyz'"),
        ([], "the following arguments are required: COMMAND"),
    ):
        with pytest.raises(SystemExit) as exited:
            cli.main(argv)
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and said in err and "--help)" in err, err


def test_a_beam_option_beam_refuses_is_one_line(tmp_path, capsys):
    """A Beam option with a value Beam's parser refuses printed Beam's whole usage (137 lines, ``cli.py: error``), and
    a runner without the options it requires (``--runner DataflowRunner`` alone) ended in a traceback from
    ``Pipeline()``: each is refused in one line, before any work."""
    export = ["export", "--out", str(tmp_path / "o"), "--to", str(tmp_path / "x"), "--format", "csv"]
    backfill = ["backfill", "--input", str(tmp_path / "in"), "--state", str(tmp_path / "s")]
    for job, bad, said in [
        (export, "--direct_running_mode=multiprocessing", "invalid choice: 'multiprocessing'"),
        (export, "--direct_num_workers=two", "invalid int value: 'two'"),
        (backfill, "--runner=DataflowRunner", "Missing required option: project"),
    ]:
        assert cli.main([*job, bad]) == 2
        err = capsys.readouterr().err
        assert said in err and "usage:" not in err and "Traceback" not in err
        assert len(err.strip().splitlines()) == 1


def test_a_one_dash_word_after_the_command_is_refused_and_v_is_verbose_there_too(tmp_path, capsys):
    """``biasboard refresh … -x`` (or ``-q``) was dropped without a word, and ``-v`` after the command too (no debug
    line), while ``--verbose`` there was refused: Beam has no one-dash options, so one is refused by name, and
    ``-v``/``--verbose`` mean the same after the command as before it."""
    assert unknown_options(["-x"]) == ["-x"]
    assert unknown_options(["--region", "-1"]) == []  # a negative number is a value, not a flag
    export = ["export", "--out", str(tmp_path / "o"), "--to", str(tmp_path / "x"), "--format", "csv"]
    assert cli.main([*export, "-q"]) == 2
    assert "unrecognised option(s) -q" in capsys.readouterr().err
    assert cli.build_parser("export").parse_known_args([*export, "-v"])[0].verbose is True
    assert cli.build_parser("export").parse_known_args(["-v", *export])[0].verbose is True
    assert cli.build_parser("export").parse_known_args(export)[0].verbose is False


def test_audit_out_inside_what_its_input_glob_reads_is_refused(tmp_path, capsys):
    """``audit --input 'logs/day=*/*.parquet' --out logs/day=2024-01-01`` was accepted, and the next audit read its
    own audit_*.parquet as battles (required column 'battle_id' is missing): refused in one line, as refresh does."""
    assert cli.main(["simulate", "--out", str(tmp_path / "logs"), "--battles", "200", "--days", "1"]) == 0
    (day,) = (tmp_path / "logs" / "battles").glob("day=*")
    capsys.readouterr()
    code = cli.main(["audit", "--input", str(day.parent / "day=*" / "*.parquet"), "--out", str(day)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "matches files inside --out" in err, err


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["simulate", "--out", "gs://some-bucket/logs", "--battles", "300", "--days", "2"], "--out"),
        (["demo", "--workdir", "gs://some-bucket/demo", "--battles", "300", "--days", "2"], "--workdir"),
    ],
)
def test_simulate_and_demo_refuse_a_bucket_path_in_one_line_and_write_nothing_locally(
    argv, flag, tmp_path, monkeypatch, capsys
):
    """``simulate`` and ``demo`` write local files only.  Before, ``--out gs://b/logs`` (bucket reachable: measured
    against the GCS emulator) probed the bucket for 25 s, then wrote a stray ``./gs:/b/logs/battles/`` folder and
    died in a pyarrow traceback ("Missing bucket name in GCS URI"); ``demo --workdir gs://b/demo`` did the same
    without the probe.  Now both say so in one line, before any request, as ``import`` does."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://nonexistent.invalid:9")  # no bucket probe can answer
    code = cli.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert f"{flag} gs://some-bucket/" in err[0] and "local" in err[0], err
    assert not (tmp_path / "gs:").exists()
