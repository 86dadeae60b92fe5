"""The backfill job end to end on the real FnApiRunner, over real Parquet files.

Covers: every rejection reason dead-lettered and counted, the conservation
identity per day and per run, duplicates across the files of a day, undated
files, self-battles, scores, family-map override, day ranges, idempotent
re-aggregation (a day is replaced, never added to), and the up-front errors.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from biasboard.pipelines import cli
from biasboard.pipelines.backfill import run_backfill
from biasboard.schemas.deadletter import MAX_RESPONSE_LENGTH
from biasboard.schemas.errors import InputError
from biasboard.schemas.families import FamilyMap
from biasboard.schemas.rules import BATTLE_REASONS
from biasboard.transforms.cells import merge_cells, partial_cells
from biasboard.transforms.read import day_of_path, list_input_days
from biasboard.transforms.state import (
    list_state_days,
    load_cells,
    load_dead_letters,
    load_score_cells,
    read_day_manifest,
)
from biasboard.transforms.validate import SeenIds

UTC = dt.timezone.utc
D1, D2 = "2024-05-01", "2024-05-02"


def ts(day: str, hour: int = 12) -> dt.datetime:
    return dt.datetime.fromisoformat(day).replace(hour=hour, tzinfo=UTC)


def battle(bid, day=D1, judge="gpt-4", a="claude-2", b="llama-2-70b", winner="model_a", la=100, lb=50, t=None):
    return {
        "battle_id": bid,
        "ts": t if t is not None else ts(day).isoformat(),
        "judge": judge,
        "model_a": a,
        "model_b": b,
        "winner": winner,
        "len_a": la,
        "len_b": lb,
    }


def write(path: Path, rows: list[dict], **extra_columns) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table(
        {
            "battle_id": pa.array([r["battle_id"] for r in rows], pa.string()),
            "ts": pa.array([r["ts"] for r in rows], pa.string()),
            "judge": pa.array([r["judge"] for r in rows], pa.string()),
            "model_a": pa.array([r["model_a"] for r in rows], pa.string()),
            "model_b": pa.array([r["model_b"] for r in rows], pa.string()),
            "winner": pa.array([r["winner"] for r in rows], pa.string()),
            "len_a": pa.array([r["len_a"] for r in rows], pa.float64()),
            "len_b": pa.array([r["len_b"] for r in rows], pa.float64()),
            **extra_columns,
        }
    )
    pq.write_table(table, path, row_group_size=4)  # several row groups: batches inside a file
    return path


def day1_rows() -> list[dict]:
    """Valid rows, self-battles, and one row for every rejection reason."""
    return [
        battle("v1"),
        battle("v2", winner="tie"),
        battle("v3", a="gpt-4", b="gpt-4", winner="tie (bothbad)"),  # self-battle: valid
        battle("v4", winner=" Model_B ", la=None),
        battle(None),  # missing:battle_id
        battle("e2", t=""),  # missing:ts
        battle("e3", judge="  "),  # missing:judge
        battle("e4", a=None),  # missing:model_a
        battle("e5", b=""),  # missing:model_b
        battle("e6", winner=None),  # missing:winner
        battle("e7", t="not a time"),  # bad_timestamp
        battle("e8", winner="both"),  # bad_winner
        battle("e9", la=float("nan")),  # bad_length
        battle("e10", lb=-4),  # negative_length
        battle("e11", la=MAX_RESPONSE_LENGTH * 10),  # absurd_length
        battle("v1", winner="model_b"),  # duplicate_battle_id
        battle("e12"),  # bad_style_count (see DAY1_HEADERS)
    ]


#: Day 1's header_count_a column: unknown (null) everywhere but the last row, which is negative.
DAY1_HEADERS = pa.array([None] * 16 + [-1], pa.int64())


@pytest.fixture()
def logs(tmp_path: Path) -> Path:
    root = tmp_path / "logs"
    write(
        root / f"day={D1}" / "part-0.parquet", day1_rows(), extra=pa.array(list(range(17))), header_count_a=DAY1_HEADERS
    )
    # day 2 in two files; "w1" repeats in the second file (a duplicate across files of the day)
    write(root / f"day={D2}" / "part-0.parquet", [battle(f"w{i}", D2, a="gpt-4o") for i in range(6)])
    write(root / f"day={D2}" / "part-1.parquet", [battle("w1", D2), battle("w9", D2, judge="human")])
    # an undated file: rows go to the day of their ts; the bad-ts row goes to its earliest day (D1)
    write(root / "extra" / "undated.parquet", [battle("u1", D1), battle("u2", D2), battle("u3", t="??")])
    return root


def test_backfill_dead_letters_every_reason_and_conserves(logs: Path, tmp_path: Path):
    state = str(tmp_path / "state")
    result = run_backfill(str(logs), state)
    assert result.days == [D1, D2] == list_state_days(state)

    counts = result.counts
    assert counts.read == 17 + 8 + 3
    assert counts.conserved and counts.read == counts.counted + counts.rejected_total
    assert set(counts.rejected) == set(BATTLE_REASONS)  # every kind of bad row is present and named
    assert counts.rejected["duplicate_battle_id"] == 2 and counts.rejected["bad_timestamp"] == 2
    assert counts.rejected_total == len(BATTLE_REASONS) + 2
    assert counts.self_battles == 1

    # per day: the manifest states the identity and names the inputs with their fingerprints
    m1 = read_day_manifest(state, D1)
    assert (
        m1["counts"]["read"] == 17 + 2
        and m1["counts"]["read"] == m1["counts"]["counted"] + m1["counts"]["rejected_total"]
    )
    assert {Path(i["path"]).name for i in m1["inputs"]} == {"part-0.parquet", "undated.parquet"}
    assert all(i["size"] > 0 for i in m1["inputs"])
    assert read_day_manifest(state, D2)["counts"] == {
        "read": 9,
        "counted": 8,
        "rejected": {"duplicate_battle_id": 1},
        "rejected_total": 1,
        "self_battles": 0,
    }

    # Beam counters agree with the manifests
    assert result.metrics["battles_read"] == counts.read
    assert result.metrics["battles_counted"] == counts.counted
    assert result.metrics["battles_rejected:missing:ts"] == 1

    # dead letters: one row per rejection, with the reason, the file and the row in it
    dead = load_dead_letters(state)
    assert dead.num_rows == counts.rejected_total
    dl = pl.from_arrow(dead)
    assert dict(dl.group_by("reason").len().iter_rows()) == counts.rejected
    dup = dl.filter(pl.col("reason") == "duplicate_battle_id").sort("source_file")
    assert dup.get_column("source_row").to_list() == [15, 0]  # row 15 of day 1, row 0 of day 2's second file
    undated_bad = dl.filter(pl.col("source_file").str.ends_with("undated.parquet"))
    assert undated_bad.get_column("source_row").to_list() == [2] and undated_bad.get_column("ts").to_list() == ["??"]

    # the stored cells are exactly what the pure per-batch function gives on the same rows
    cells = load_cells(state)
    assert sum(cells.column("n").to_pylist()) == counts.counted
    fmap = FamilyMap.with_user_rules()
    seen1, seen2 = SeenIds(), SeenIds()
    direct = merge_cells(
        [
            partial_cells(pq.read_table(logs / f"day={D1}" / "part-0.parquet"), fmap, seen1).cells,
            partial_cells(pq.read_table(logs / "extra" / "undated.parquet").slice(0, 1), fmap, seen1).cells,
            partial_cells(pq.read_table(logs / f"day={D2}" / "part-0.parquet"), fmap, seen2).cells,
            partial_cells(pq.read_table(logs / f"day={D2}" / "part-1.parquet"), fmap, seen2).cells,
            partial_cells(pq.read_table(logs / "extra" / "undated.parquet").slice(1, 1), fmap, seen2).cells,
        ]
    )
    assert_same_cells(cells, direct)
    self_cell = [c for c in cells.to_pylist() if c["model_a"] == c["model_b"]]
    assert len(self_cell) == 1 and self_cell[0]["tie_bothbad"] == 1 and self_cell[0]["family_a"] == "openai"


def assert_same_cells(left: pa.Table, right: pa.Table) -> None:
    """Same keys and counts; float sums equal up to summation order."""
    a, b = pl.from_arrow(left), pl.from_arrow(right)
    floats = ["sum_x", "sum_x2", "sum_loglen_a", "sum_loglen_b"]
    assert a.drop(floats).equals(b.drop(floats))
    for column in floats:
        assert (a.get_column(column) - b.get_column(column)).abs().max() < 1e-9


def test_rerun_replaces_a_day_and_never_adds(logs: Path, tmp_path: Path):
    state = str(tmp_path / "state")
    first = run_backfill(str(logs), state, days=[D2])
    cells_before = load_cells(state)
    files = sorted(Path(state).rglob("*.parquet"))
    again = run_backfill(str(logs), state, days=[D2])
    assert load_cells(state).equals(cells_before)  # same input: same cells, nothing double-counted
    assert again.counts == first.counts
    assert sorted(Path(state).rglob("*.parquet")) == files  # no temp or extra files left behind
    assert not list(Path(state).rglob(".tmp-*"))
    # a killed write's temporary file (its random name no later write looks for) goes with the day's next write
    leftover = Path(state) / "cells" / f"day={D2}" / ".tmp-0123abcd-pair_cells.parquet"
    leftover.write_bytes(b"half a file")
    run_backfill(str(logs), state, days=[D2])
    assert not leftover.exists()

    # the day's input changes (one file dropped): re-aggregating replaces the partition
    (logs / f"day={D2}" / "part-1.parquet").unlink()
    changed = run_backfill(str(logs), state, days=[D2])
    assert changed.counts.read == 6 + 1
    assert sum(load_cells(state).column("n").to_pylist()) == changed.counts.counted == 7
    assert read_day_manifest(state, D1) is None  # other days untouched (never written here)


def test_scores_and_family_map_and_range_through_the_cli(logs: Path, tmp_path: Path, capsys):
    scores = tmp_path / "scores" / f"day={D1}" / "part-0.parquet"
    scores.parent.mkdir(parents=True)
    pq.write_table(
        pa.table(
            {
                "score_id": ["s1", "s2", "s2", "s3"],
                "ts": pa.array([ts(D1)] * 4, pa.timestamp("us", tz="UTC")),
                "judge": ["gpt-4"] * 4,
                "model": ["claude-2", "claude-2", "claude-2", "gpt-4o"],
                "prompt_id": ["p1", "p1", "p1", "p2"],
                "score": [7, 7, 3, 11_000],
            }
        ),
        scores,
    )
    fmap = tmp_path / "families.json"
    fmap.write_text(json.dumps({"rules": [{"prefix": "claude", "family": "acme"}]}))
    state = tmp_path / "state"
    code = cli.main(
        [
            "backfill",
            "--input",
            str(logs),
            "--state",
            str(state),
            "--from",
            D1,
            "--to",
            D1,
            "--scores",
            str(tmp_path / "scores"),
            "--family-map",
            str(fmap),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert list_state_days(str(state)) == [D1]  # --to excluded day 2
    assert "battles: read 19 = counted 5 + rejected 14 [ok]" in out
    assert "scores: read 4 = counted 2 + rejected 2 [ok]" in out
    # a notable share rejected is said in one line per kind of row, with where its dead letters are; the battle
    # rows' all come from the one day that lost most of its rows, whose own line says it (not twice)
    warned = [line for line in out.splitlines() if "were rejected" in line]
    assert warned == [
        "warning: 2 of the 4 score rows read (50.0%, warned at 5% or more) were rejected (bad_score 1, "
        f"duplicate_score_id 1): the dead letters, each row with its reason, are in {state}/deadletters/"
        "day=*/score_dead_letters.parquet",
    ], out
    battle_lines = [
        line for line in out.splitlines() if "rows it read" in line or (" rows read (" in line and "score" not in line)
    ]
    assert len(battle_lines) == 1 and battle_lines[0].startswith(
        f"warning: day {D1} rejected 14 of the 19 rows it read ("
    ), out
    assert "gpt-4" in out and "openai" in out  # the per-judge summary
    cells = load_cells(str(state))
    assert set(cells.column("family_a").to_pylist()) >= {"acme"}  # user rule beat the default (anthropic)
    score_cells = load_score_cells(str(state)).to_pylist()
    assert [(c["model"], c["family"], c["score"], c["n"]) for c in score_cells] == [("claude-2", "acme", 7, 2)]


def test_a_bad_batch_size_is_refused_in_one_line_naming_the_flag(logs: Path, tmp_path: Path, capsys):
    """``--batch-rows 0`` failed while reading, as ``cannot read as Parquet: range() arg 3 must not be zero``."""
    assert cli.main(["backfill", "--input", str(logs), "--state", str(tmp_path / "state"), "--batch-rows", "0"]) == 2
    assert capsys.readouterr().err == "biasboard backfill: error: --batch-rows must be at least 1, got 0\n"
    assert not (tmp_path / "state").exists()


def test_day_of_path():
    assert day_of_path("gs://b/logs/day=2024-05-01/part-0.parquet") == "2024-05-01"
    assert day_of_path("/x/dt=2024-05-01/y/part.parquet") == "2024-05-01"
    assert day_of_path("/x/date=2024-05-01/part.parquet") == "2024-05-01"
    assert day_of_path("/x/battles-2024-05-03.parquet") == "2024-05-03"
    assert day_of_path("/2024-05-09/battles.parquet") is None  # only hive segments or the file name
    with pytest.raises(InputError, match="2024-02-31"):
        day_of_path("/x/day=2024-02-31/p.parquet")


def test_up_front_errors_name_the_file_and_column(tmp_path: Path, capsys):
    good = [battle("v1")]
    missing = write(tmp_path / "a" / f"day={D1}" / "p.parquet", good)
    pq.write_table(pq.read_table(missing).drop_columns(["winner"]), missing)
    with pytest.raises(InputError, match=r"p\.parquet: required column 'winner' is missing"):
        list_input_days(str(tmp_path / "a"))

    garbage = tmp_path / "c" / f"day={D1}" / "junk.parquet"
    garbage.parent.mkdir(parents=True)
    garbage.write_bytes(b"this is not parquet at all")
    with pytest.raises(InputError, match=r"junk\.parquet: the file is text, not Parquet"):
        list_input_days(str(tmp_path / "c"))

    with pytest.raises(InputError, match="no input files match"):
        list_input_days(str(tmp_path / "nowhere" / "*.parquet"))

    # through the CLI: exit code 2 and one line naming the file, no traceback
    code = cli.main(["backfill", "--input", str(tmp_path / "a"), "--state", str(tmp_path / "s")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "required column 'winner'" in err and "Traceback" not in err
    assert not (tmp_path / "s").exists()  # nothing written before the checks passed


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b'[\n  {"model_a": "x", "model_b": "y", "winner": "model_a"}\n]', "the file is JSON, not Parquet: "),
        (b'{"generator_1": "x"}\n', "the file is JSON, not Parquet: "),
        (b"\x1f\x8b\x08\x00" + bytes(20), "the file is gzip, not Parquet: "),
        (b"id,model_x,model_y,winner\n1,a,b,left\n", "the file is text, not Parquet: "),
    ],
)
def test_another_tools_file_given_as_input_is_told_to_import_it_first(tmp_path: Path, capsys, content, says):
    """A new user's first try: ``--input clean_battle.json`` (FastChat's JSON, AlpacaEval's JSON lines, LLMFAO's CSV).
    The error was pyarrow's "Parquet magic bytes not found in footer. Either the file is corrupted or this is not a
    parquet file"; it now says what the file looks like and that ``biasboard import`` converts it, in one line."""
    path = tmp_path / "clean_battle.json"
    path.write_bytes(content)
    code = cli.main(["backfill", "--input", str(path), "--state", str(tmp_path / "s")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert f"{path}: {says}battle and score logs are read as Parquet; convert another tool's file first with " in err
    assert "`biasboard import --format F --in PATH --out DIR`" in err


@pytest.mark.parametrize(
    ("content", "says", "advice"),
    [
        (b"ARROW1\x00\x00\xff\xff" + bytes(20), "the file is Arrow IPC (Feather), not Parquet: ", "write_table"),
        (b"x\x00\x91\xfe\x02binary" + bytes(20), "the file is not Parquet: ", "biasboard import"),
    ],
)
def test_a_binary_file_is_not_called_text(tmp_path: Path, capsys, content, says, advice):
    """Only the first byte was looked at: a binary file starting with an ASCII byte (an Arrow/Feather file's
    ``ARROW1``) was "text, not Parquet", to be converted by ``biasboard import``, which reads no Arrow file."""
    path = tmp_path / "logs" / f"day={D1}" / "part-0.parquet"
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    assert cli.main(["backfill", "--input", str(tmp_path / "logs"), "--state", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{path}: {says}battle and score logs are read as Parquet; " in err
    assert "text" not in err and advice in err


def test_an_empty_or_broken_parquet_file_is_told_apart_from_another_format(tmp_path: Path):
    """A 0-byte file is said to be empty (not told to be imported); a file that starts as Parquet but is broken keeps
    pyarrow's own reason."""
    empty = tmp_path / "e" / f"day={D1}" / "part-0.parquet"
    empty.parent.mkdir(parents=True)
    empty.write_bytes(b"")
    with pytest.raises(InputError, match=r"part-0\.parquet: the file is empty \(0 bytes\), not Parquet"):
        list_input_days(str(tmp_path / "e"))
    broken = tmp_path / "b" / f"day={D1}" / "part-0.parquet"
    broken.parent.mkdir(parents=True)
    broken.write_bytes(b"PAR1" + bytes(40))
    with pytest.raises(InputError, match=r"part-0\.parquet: cannot read as Parquet: "):
        list_input_days(str(tmp_path / "b"))


def _tasks(days: int, size: int) -> list[dict]:
    return [{"day": f"2024-05-0{d + 1}", "files": [{"size": size}], "score_files": None} for d in range(days)]


def test_a_big_local_ingest_runs_its_days_in_worker_threads(monkeypatch: pytest.MonkeyPatch):
    from apache_beam.options.pipeline_options import DirectOptions
    from biasboard.pipelines.options import beam_options
    from biasboard.transforms.ingest import PARALLEL_INPUT_BYTES, use_worker_threads

    monkeypatch.setattr("os.cpu_count", lambda: 2)
    big = _tasks(2, PARALLEL_INPUT_BYTES // 2)
    options = beam_options([])
    assert use_worker_threads(options, big)
    direct = options.view_as(DirectOptions)
    assert (direct.direct_running_mode, direct.direct_num_workers) == ("multi_threading", 2)
    # small input, one day, one core, another runner, or the user's own choice: left as it is
    assert not use_worker_threads(beam_options([]), _tasks(2, PARALLEL_INPUT_BYTES // 4))
    assert not use_worker_threads(beam_options([]), _tasks(1, 2 * PARALLEL_INPUT_BYTES))
    assert not use_worker_threads(beam_options(["--runner=DataflowRunner"]), big)
    monkeypatch.setattr("os.cpu_count", lambda: 1)
    assert not use_worker_threads(beam_options([]), big)


def test_the_users_own_worker_flags_win(monkeypatch: pytest.MonkeyPatch, logs: Path, tmp_path: Path):
    import biasboard.transforms.ingest as ingest

    asked = []
    monkeypatch.setattr(ingest, "use_worker_threads", lambda options, tasks: asked.append(len(tasks)) or False)
    run_backfill(str(logs), str(tmp_path / "a"), ["--runner=FnApiRunner"])
    assert asked  # no worker flags given: the ingest decides
    asked.clear()
    for flags in (["--direct_num_workers=1"], ["--direct_running_mode", "in_memory"]):
        run_backfill(str(logs), str(tmp_path / "b"), ["--runner=FnApiRunner", *flags])
    assert not asked


_FORKED_RUN = """
import json, os, sys
os.cpu_count = lambda: 2
import biasboard.transforms.ingest as ingest
from biasboard.pipelines.backfill import run_backfill
ingest.PARALLEL_INPUT_BYTES = 0
result = run_backfill(sys.argv[1], sys.argv[2], [])
print(json.dumps({"processes": result.worker_processes, "threads": result.worker_threads,
                  "metrics": result.metrics, "read": result.counts.read}))
"""


def test_a_big_local_ingest_does_its_days_in_forked_processes(tmp_path: Path):
    """Forked day workers (a fresh process, whose polars has not started its threads) write what one thread writes.

    The run's Beam counters come from the DoFn, fed by the workers: they equal the committed manifests' counts.
    """
    import subprocess
    import sys

    from biasboard.simulate import SimulationConfig, write_simulation
    from biasboard.transforms.day_workers import fork_safe

    write_simulation(SimulationConfig(battles=6_000, days=3, models=6, judges=3, bad_rows=0.05, seed=3), tmp_path / "d")
    logs = str(tmp_path / "d" / "battles")
    done = subprocess.run(
        [sys.executable, "-c", _FORKED_RUN, logs, str(tmp_path / "forked")], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    forked = json.loads(done.stdout.strip().splitlines()[-1])
    assert (forked["processes"], forked["threads"]) == (2, 2)
    one = run_backfill(logs, str(tmp_path / "one"), ["--direct_num_workers=1"])
    assert one.worker_processes == 0 and forked["read"] == one.counts.read == 6_000 + 300
    expected = {"battles_read": one.counts.read, "battles_counted": one.counts.counted, "self_battles": 0}
    expected |= {f"battles_rejected:{reason}": n for reason, n in one.counts.rejected.items()}
    assert {k: v for k, v in forked["metrics"].items() if v or k in expected} == expected
    for day in one.days:
        assert read_day_manifest(str(tmp_path / "forked"), day)["counts"] == one.manifests[day]["counts"]
    assert load_cells(str(tmp_path / "forked")).equals(load_cells(str(tmp_path / "one")))
    dead = [load_dead_letters(str(tmp_path / s)) for s in ("forked", "one")]
    assert dead[0] is not None and dead[0].num_rows == 300 and dead[0].equals(dead[1])
    # here polars has started its threads (this test read cells with it): forking now could deadlock a worker
    assert not fork_safe()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_day_workers_keep_freed_memory_for_the_next_day():
    """A day worker asks glibc to keep freed blocks (each ``mallopt`` accepted); in its own process, as a worker."""
    import subprocess

    code = "from biasboard.ranking.allocator import keep_freed_memory; print(keep_freed_memory())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and done.stdout.split() == ["True"], done.stderr[-2000:]
