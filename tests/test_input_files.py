"""Input files as real writers leave them: empty part files, nested day folders, empty paths and folders.

Each case runs the real backfill (FnApiRunner) or the CLI, and checks the
conservation identity ``read = counted + rejected`` wherever rows are read.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from biasboard.pipelines import cli
from biasboard.pipelines.backfill import run_backfill
from biasboard.schemas.errors import InputError
from biasboard.transforms import storage
from biasboard.transforms.read import day_of_path, list_input_days, match_files
from biasboard.transforms.state import read_day_manifest

D1, D2 = "2024-05-01", "2024-05-02"


def battles(n: int, day: str = D1, prefix: str = "b") -> pa.Table:
    t0 = dt.datetime.fromisoformat(day).replace(hour=12, tzinfo=dt.timezone.utc)
    return pa.table(
        {
            "battle_id": [f"{prefix}{i}" for i in range(n)],
            "ts": pa.array([t0] * n, pa.timestamp("us", tz="UTC")),
            "judge": ["gpt-4"] * n,
            "model_a": ["m1", "m2"] * (n // 2) + ["m1"] * (n % 2),
            "model_b": ["m2", "m3"] * (n // 2) + ["m3"] * (n % 2),
            "winner": ["model_a"] * n,
        }
    )


def write(path: Path, table: pa.Table) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path


def test_empty_part_files_are_skipped_and_counted(tmp_path: Path):
    logs = tmp_path / "logs"
    write(logs / f"day={D1}" / "part-00000.parquet", battles(5))
    write(logs / f"day={D1}" / "part-00001.parquet", battles(0))  # Spark's empty part, same schema
    write(logs / f"day={D1}" / "part-00002.parquet", pa.table({"x": pa.array([], pa.int64())}))  # no columns at all
    write(logs / f"day={D2}" / "part-00000.parquet", battles(0))  # a day with only an empty part
    write(logs / "undated-empty.parquet", battles(0))  # no day anywhere, no rows: nothing to file
    result = run_backfill(str(logs), str(tmp_path / "state"))
    assert result.counts.read == 5 == result.counts.counted + result.counts.rejected_total
    assert result.counts.empty_files == 3
    assert read_day_manifest(str(tmp_path / "state"), D1)["counts"]["empty_files"] == 2
    day2 = read_day_manifest(str(tmp_path / "state"), D2)["counts"]
    assert day2["read"] == 0 and day2["empty_files"] == 1
    assert len(read_day_manifest(str(tmp_path / "state"), D1)["inputs"]) == 3  # fingerprinted like any file


def test_an_input_of_only_undated_empty_files_says_they_are_empty_not_out_of_a_range(tmp_path: Path, capsys):
    """Every matched file empty and undated (nothing to file a day under) was refused as "no input files in the
    day range … to …", naming a range no flag gave; with --from/--to the range is still what is said."""
    write(tmp_path / "logs" / "a.parquet", battles(0))
    write(tmp_path / "logs" / "b.parquet", pa.table({"x": pa.array([], pa.int64())}))
    base = ["backfill", "--input", str(tmp_path / "logs"), "--state", str(tmp_path / "state")]
    assert cli.main(base) == 2
    err = capsys.readouterr().err.strip()
    assert "every file matched holds no rows" in err and "day range" not in err and "\n" not in err
    assert cli.main([*base, "--from", D1, "--to", D2]) == 2
    assert f"no input files in the day range {D1} to {D2}" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["winner", "extra"])
def test_a_file_with_two_columns_of_one_name_is_refused_up_front_naming_them(tmp_path: Path, capsys, name):
    """pyarrow writes two columns of one name; the reader refused the file only mid-ingest (after the day was
    under way), and a repeated 'winner' was said to "not exist in schema"."""
    table = battles(3) if name == "winner" else battles(3).append_column(name, pa.array([1, 2, 3]))
    write(tmp_path / "logs" / f"day={D1}" / "p.parquet", table.append_column(name, table[name]))
    assert cli.main(["backfill", "--input", str(tmp_path / "logs"), "--state", str(tmp_path / "state")]) == 2
    err = capsys.readouterr().err.strip()
    assert f"column(s) {name} appear more than once" in err and "\n" not in err
    assert not (tmp_path / "state").exists()  # refused before anything was written


def test_a_writers_hidden_files_and_folders_are_not_read(tmp_path: Path):
    """Spark leaves ``_temporary/`` attempt copies, ``.spark-staging`` folders and ``.part-….crc`` checksums beside
    its parts, and an upload in progress is a hidden ``.part``: ``--input logs`` read the copies as battles (every
    row a duplicate id: half the day "rejected") and stopped on a checksum as "text, not Parquet".  A glob of files
    skips them too; a name the glob spells itself (``_backfill/*``) is read."""
    logs = tmp_path / "logs"
    write(logs / f"day={D1}" / "part-00000.parquet", battles(4))
    write(logs / "_temporary" / "0" / "attempt_1" / f"day={D1}" / "part-00000.parquet", battles(4))
    write(logs / ".spark-staging-1" / f"day={D1}" / "part-00000.parquet", battles(4))
    (logs / f"day={D1}" / ".part-00000.parquet.crc").write_bytes(b"crc\x00\x01")
    (logs / f"day={D1}" / ".part-00001.parquet").write_bytes(b"PAR1 still uploading")
    (logs / f"day={D1}" / "_metadata").write_bytes(b"not a battle file")
    for given in (str(logs), str(logs / "day=*" / "*"), str(logs / "**")):
        days = list_input_days(given)
        assert [f.path.rsplit("/", 1)[-1] for f in days[D1]] == ["part-00000.parquet"], given
    result = run_backfill(str(logs), str(tmp_path / "state"))
    assert result.counts.read == 4 == result.counts.counted and result.counts.rejected_total == 0
    write(logs / "_backfill" / f"day={D2}" / "part-00000.parquet", battles(2, D2, "c"))
    assert sorted(list_input_days(str(logs / "_backfill" / "*" / "*.parquet"))) == [D2]


def test_nested_day_folders_file_rows_under_the_innermost_day(tmp_path: Path):
    assert day_of_path(f"/logs/day={D1}/day={D2}/part.parquet") == D2
    assert day_of_path(f"/logs/day={D1}/x/dt={D2}/part.parquet") == D2
    assert day_of_path(f"/logs/day={D1}/part.parquet") == D1
    logs = tmp_path / "logs"
    write(logs / f"day={D1}" / f"day={D2}" / "p.parquet", battles(4, D2))
    write(logs / f"day={D1}" / "p.parquet", battles(3, D1, "c"))
    days = list_input_days(str(logs))
    assert sorted(days) == [D1, D2] and [Path(f.path).parent.name for f in days[D2]] == [f"day={D2}"]
    result = run_backfill(str(logs), str(tmp_path / "state"))
    assert result.manifests[D2]["counts"]["read"] == 4 and result.manifests[D1]["counts"]["read"] == 3
    assert result.counts.conserved


def test_an_undated_file_with_ts_and_its_alias_is_filed_by_the_ts_the_rows_are_read_with(tmp_path: Path):
    """A file holding both ``ts`` and FastChat's ``tstamp`` (another day): the reader keeps ``ts`` and leaves the
    alias alone, so the day the file is filed under comes from ``ts`` too, whatever the columns' order."""
    table = battles(4, D1)
    other_day = dt.datetime.fromisoformat(D2).replace(hour=12, tzinfo=dt.timezone.utc).timestamp()
    table = pa.table({"tstamp": pa.array([other_day] * 4), **{name: table[name] for name in table.column_names}})
    write(tmp_path / "logs" / "undated.parquet", table)
    assert sorted(list_input_days(str(tmp_path / "logs"))) == [D1]
    result = run_backfill(str(tmp_path / "logs"), str(tmp_path / "state"))
    assert sorted(result.manifests) == [D1] and result.manifests[D1]["counts"]["counted"] == 4
    assert result.counts.conserved


def test_an_input_whose_every_match_is_hidden_says_so_and_how_to_read_it(tmp_path: Path, capsys):
    """``data/*/battles.parquet`` over a user's ``data/_2024/`` read it before hidden files were skipped; since, it
    said "no input files match" (a folder: "holds no .parquet files") under a log naming the file it matched.  The
    refusal names the hidden files and the way to read them, and that way reads them."""
    data = tmp_path / "data"
    write(data / "_2024" / "battles.parquet", battles(3))
    for given in (str(data / "*" / "battles.parquet"), str(data)):
        with pytest.raises(InputError, match=r"matches only hidden files .*_2024/battles\.parquet.*spell the '_'"):
            match_files(given)
        code = cli.main(["backfill", "--input", given, "--state", str(tmp_path / "s")])
        err = capsys.readouterr().err
        assert code == 2 and "matches only hidden files" in err and "no input files match" not in err
    assert sorted(list_input_days(str(data / "_*" / "battles.parquet"))) == [D1]


def test_a_glob_of_files_says_which_folders_beside_them_it_does_not_read(tmp_path: Path, caplog):
    """``day=*/*`` reads the files it matches only (a writer's ``_temporary/`` stays out); a day whose file sat in
    ``day=D/sub/`` was left out without a word.  Said once a run, naming the folder; a writer's ``_…`` folder not."""
    logs = tmp_path / "logs"
    write(logs / f"day={D1}" / "sub" / "p.parquet", battles(4, D1))
    write(logs / f"day={D2}" / "p.parquet", battles(3, D2, "c"))
    write(logs / f"day={D2}" / "_temporary" / "p.parquet", battles(2, D2, "t"))
    glob = str(logs / "day=*" / "*")
    with caplog.at_level("WARNING", logger="biasboard.transforms.read"):
        assert sorted(list_input_days(glob)) == [D2]
        list_input_days(glob)
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        f"{glob}: matches files, so it reads those files only; 1 folder(s) it also matches hold Parquet files that "
        f"are not read: {logs / f'day={D1}' / 'sub'} (give a glob that reaches into them, or the folder itself)"
    ]


def test_a_recursive_glob_reads_below_every_folder_and_says_nothing(tmp_path: Path, caplog):
    """``'logs/**'`` reads the Parquet files at every depth (Beam's ``**``), yet a folder it matched was named as "not
    read": the warning listed folders one level down, whether or not the glob had read their files."""
    logs = tmp_path / "logs"
    write(logs / f"day={D1}" / "sub" / "p.parquet", battles(4, D1))
    write(logs / f"day={D2}" / "p.parquet", battles(3, D2, "c"))
    with caplog.at_level("WARNING", logger="biasboard.transforms.read"):
        assert sorted(list_input_days(str(logs / "**"))) == [D1, D2]
    assert caplog.records == []


def test_folders_with_glob_characters_are_refused_in_one_line(tmp_path: Path, capsys):
    """Beam lists and deletes by pattern: ``--state 'st[1]'`` wrote its state, then found no day in it; ``--out
    'site[1]'`` failed deleting its own staging in a traceback; ``--input 'in[v2]'`` said only "no input files"."""
    logs = tmp_path / "in[v2]"
    write(logs / f"day={D1}" / "p.parquet", battles(4))
    argv = ["backfill", "--input", str(tmp_path / "in?v2?"), "--state", str(tmp_path / "st[1]")]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert f"--state {tmp_path / 'st[1]'}: a folder written to may not hold the glob characters" in err
    assert not (tmp_path / "st[1]").exists()
    assert cli.main(["backfill", "--input", str(logs), "--state", str(tmp_path / "st")]) == 2
    assert "'[' starts a character class in a glob" in capsys.readouterr().err
    # matched through a pattern, its files are still read as patterns (polars found none, deep in the ingest)
    assert cli.main(["backfill", "--input", str(tmp_path / "in?v2?"), "--state", str(tmp_path / "st")]) == 2
    err = capsys.readouterr().err
    assert "the path holds a glob character (* ? [ ]), and the readers take paths as patterns" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("glob", ["", "   "])
def test_an_empty_input_is_refused_not_read_as_the_root(glob: str, tmp_path: Path, capsys):
    with pytest.raises(InputError, match="input path is empty"):
        match_files(glob)
    code = cli.main(["backfill", "--input", glob, "--state", str(tmp_path / "s")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "empty" in err and "Traceback" not in err


def test_an_empty_folder_says_so(tmp_path: Path, capsys):
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match=r"holds no \.parquet files"):
        match_files(str(tmp_path / "empty"))
    code = cli.main(["backfill", "--input", str(tmp_path / "empty"), "--state", str(tmp_path / "s")])
    err = capsys.readouterr().err
    assert code == 2 and "holds no .parquet files" in err and "Is a directory" not in err


def test_the_same_file_under_two_days_is_refused_naming_both(tmp_path: Path, capsys):
    logs = tmp_path / "logs"
    original = write(logs / f"day={D1}" / "part-0.parquet", battles(6))
    copy = logs / f"day={D2}" / "part-0.parquet"
    copy.parent.mkdir(parents=True)
    copy.write_bytes(original.read_bytes())
    code = cli.main(["backfill", "--input", str(logs), "--state", str(tmp_path / "state")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert str(original) in err and str(copy) in err and "same content" in err
    assert not (tmp_path / "state" / "manifests").exists()  # refused before any work


def test_a_copy_of_a_stored_day_is_refused_and_copies_within_a_day_are_duplicates(tmp_path: Path, capsys):
    logs, state = tmp_path / "logs", tmp_path / "state"
    original = write(logs / f"day={D1}" / "part-0.parquet", battles(6))
    write(logs / f"day={D1}" / "part-1.parquet", pq.read_table(original))
    result = run_backfill(str(logs), str(state))  # two copies in one day: the second copy's rows are duplicates
    assert result.counts.read == 12 and result.counts.rejected == {"duplicate_battle_id": 6}
    assert result.counts.conserved
    moved = logs / f"day={D2}" / "part-0.parquet"  # now the file is also filed under a new day
    moved.parent.mkdir(parents=True)
    moved.write_bytes(original.read_bytes())
    code = cli.main(["backfill", "--input", str(logs), "--state", str(state), "--from", D2])
    err = capsys.readouterr().err
    assert code == 2 and f"(day {D1})" in err and f"(day {D2})" in err and "Traceback" not in err


def test_refresh_refuses_a_stored_day_copied_to_a_new_day(tmp_path: Path, capsys):
    from biasboard.simulate import SimulationConfig, write_simulation

    sim = write_simulation(SimulationConfig(battles=2000, models=4, judges=2, days=1, seed=2), tmp_path / "sim")
    argv = [
        "refresh",
        "--input",
        str(sim / "battles"),
        "--state",
        str(tmp_path / "state"),
        "--out",
        str(tmp_path / "out"),
        "--no-audit",
    ]
    assert cli.main(argv) == 0
    (original,) = sorted((sim / "battles").rglob("*.parquet"))
    copy = sim / "battles" / f"day={D2}" / "part-00000.parquet"
    copy.parent.mkdir(parents=True)
    copy.write_bytes(original.read_bytes())
    capsys.readouterr()
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(copy) in err and str(original) in err and "Traceback" not in err


def test_the_dictionary_read_gives_the_plain_values(tmp_path: Path):
    """``iter_batches(dictionary=True)``: the cells' text keys and the winner come as Categorical codes, value for
    value what the plain read gives, across row groups and batches that do not line up."""
    import polars as pl
    from biasboard.transforms.read import iter_batches

    n = 53
    names = ["gpt-4", "claude", None, "", " llama "]
    table = pa.table({
        "battle_id": [f"b{i}" for i in range(n)], "ts": ["2024-05-01T00:00:00Z"] * n,
        "judge": [names[i % 5] for i in range(n)], "model_a": [names[(i * 3) % 5] for i in range(n)],
        "model_b": [f"m{i % 7}" for i in range(n)], "winner": [["model_a", "tie", None][i % 3] for i in range(n)],
        "family_a": pa.array([None] * n, pa.string()), "len_a": list(range(n)),
    })  # fmt: skip
    path = tmp_path / "day=2024-05-01" / "part.parquet"
    path.parent.mkdir()
    pq.write_table(table, path, row_group_size=7)
    plain = list(iter_batches(str(path), batch_rows=10))
    coded = list(iter_batches(str(path), batch_rows=10, dictionary=True))
    assert [offset for offset, _ in coded] == [offset for offset, _ in plain] == list(range(0, n, 10))
    for (_, a), (_, b) in zip(plain, coded, strict=True):
        assert b.columns == a.columns
        assert {c for c, t in b.schema.items() if t == pl.Categorical} == {"judge", "model_a", "model_b", "winner",
                                                                          "family_a"}  # fmt: skip
        assert b.with_columns(pl.col(pl.Categorical).cast(pl.String)).equals(a)


def test_an_import_folder_as_input_reads_its_battles_not_its_dead_letters(tmp_path: Path):
    """``biasboard import --out g`` then ``--input g``: the folder also holds the rows the import rejected (another
    schema); reading them as battles failed with "required column 'ts' is missing" whenever the import rejected
    anything.  A folder that is not an import's keeps every Parquet file, whatever its name."""
    from biasboard.importers.output import DEAD_LETTERS

    judged = {
        "benchmark": "MTBench", "question_id": 81, "category": "writing", "turn": 1, "judge": "gemini-pro",
        "model_a": "m1", "model_b": "m2", "position_a": "first", "verdict": "A", "winner": "model_a",
        "len_chars_a": 40, "len_chars_b": 34,
    }  # fmt: skip
    unjudged = {**judged, "question_id": 82, "verdict": None, "winner": None}  # → dead letter no_verdict
    source = tmp_path / "judgments.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in (judged, unjudged)))
    assert cli.main(["import", "--format", "pba", "--in", str(source), "--out", str(tmp_path / "g")]) == 0
    assert pq.read_table(tmp_path / "g" / DEAD_LETTERS).num_rows == 1
    files = [Path(f.path).name for f in match_files(str(tmp_path / "g"))]
    assert files == ["part-00000.parquet"]
    other = tmp_path / "other"
    write(other / f"day={D1}" / "part-00000.parquet", battles(4))
    write(other / "import_dead_letters.parquet", battles(2, prefix="x"))  # no import manifest: an ordinary file
    assert len(match_files(str(other))) == 2


def test_a_simulation_folder_as_input_leaves_its_grades_to_scores(tmp_path: Path, capsys):
    """``simulate --scores --out SIM`` then ``refresh --input SIM --scores SIM/scores``: --input's recursion read the
    grades as battles and failed saying grades are read with --scores, which was given.  The files another flag
    names are that flag's: the refresh counts what ``--input SIM/battles`` does.  The same folder given to both
    flags is still refused (no file is left to either)."""
    from biasboard.simulate import SimulationConfig, write_simulation

    sim = write_simulation(
        SimulationConfig(battles=1500, models=4, judges=2, days=2, scores=0.2, seed=3), tmp_path / "s"
    )
    argv = ["refresh", "--scores", str(sim / "scores"), "--state", str(tmp_path / "st"), "--out", str(tmp_path / "o")]
    assert cli.main([*argv, "--input", str(sim), "--no-audit"]) == 0
    summary = json.loads(
        (tmp_path / "o" / "snapshots" / (tmp_path / "o" / "LATEST").read_text().strip() / "summary.json").read_text()
    )
    assert summary["counts"]["read"] == 1500 and summary["score_counts"]["read"] == 300
    assert [Path(f.path).parent.parent.name for f in match_files(str(sim), str(sim / "scores"))] == ["battles"] * 2
    assert len(match_files(str(sim), str(sim))) == 4  # the same files to both flags: nothing to tell apart
    capsys.readouterr()
    again = [
        "refresh",
        "--input",
        str(sim),
        "--scores",
        str(sim),
        "--state",
        str(tmp_path / "st2"),
        "--out",
        str(tmp_path / "o2"),
    ]
    assert cli.main(again) == 2 and "it is a score file" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--input", "--scores", "--anchors"])
def test_a_glob_that_matches_nothing_names_its_flag(tmp_path: Path, capsys, flag: str):
    """ "no input files match" named the path alone: with --input, --scores and --anchors on one line, the user had
    to tell which flag it was (``--scores`` was listed beside ``--input`` first, so it did not even come second)."""
    write(tmp_path / "logs" / f"day={D1}" / "part-00000.parquet", battles(4))
    given = {"--input": str(tmp_path / "logs"), flag: str(tmp_path / "nowhere" / "*.parquet")}
    argv = ["refresh", "--state", str(tmp_path / "st"), "--out", str(tmp_path / "out"), "--bootstrap", "0"]
    assert cli.main([*argv, *(part for pair in given.items() for part in pair)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"{flag} {tmp_path / 'nowhere' / '*.parquet'}: no input files match") and "\n" not in err


@pytest.mark.parametrize("flag", ["--input", "--scores", "--state"])
def test_a_bucket_url_with_one_slash_is_refused_with_the_url_meant(tmp_path: Path, capsys, monkeypatch, flag: str):
    """``gs:/bucket/x`` was read as a local folder "gs:" (an input: "no input files match"; --state or --out: written
    on this machine); it is refused as the flag is read, saying ``gs://`` is probably meant."""
    monkeypatch.chdir(tmp_path)  # where a local folder "gs:" would be made
    given = {"--input": str(tmp_path), "--state": str(tmp_path / "st"), flag: "gs:/bucket/x"}
    argv = ["refresh", "--out", str(tmp_path / "out"), *(part for pair in given.items() for part in pair)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(
        f"{flag} gs:/bucket/x: one slash after 'gs:' is read as a local path; gs://bucket/x is probably meant"
    )
    assert not (tmp_path / "gs:").exists()
    with pytest.raises(InputError, match=r"^s3:/b: one slash after 's3:' .* s3://b is probably meant$"):
        storage.launcher_path("s3:/b")  # a caller of the job's function, without a flag
    assert storage.launcher_path("gs://bucket/x") == "gs://bucket/x"


def test_listing_and_checking_input_files_leaves_no_file_handle_to_the_collector(tmp_path: Path):
    """pyarrow closes only a source it opened itself: a reader on Beam's handle left the handle open until it
    was collected, a ResourceWarning for every input file listed with the up-front check or dated by its rows."""
    import gc
    import warnings

    write(tmp_path / "logs" / f"day={D1}" / "part-0.parquet", battles(4))
    write(tmp_path / "undated" / "part-0.parquet", battles(4, D2))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        assert list(list_input_days(str(tmp_path / "logs" / "day=*" / "*.parquet"))) == [D1]
        assert list(list_input_days(str(tmp_path / "undated" / "*.parquet"))) == [D2]
        gc.collect()
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []
