"""Snapshot publishing and ``biasboard export`` on local folders (the bucket path is in test_gcs.py)."""

from __future__ import annotations

import datetime as dt
import io
import json
import os
from pathlib import Path

import polars as pl
import pytest
from biasboard.pipelines import cli
from biasboard.pipelines.export import export_snapshot
from biasboard.schemas.errors import StateError
from biasboard.transforms import publish, storage

NASTY = ['<script>alert("x")</script>', "Tom & Jerry's", "模型-甲", "plain"]


def _tables(shift: float = 0.0) -> tuple[pl.DataFrame, pl.DataFrame]:
    leaderboard = pl.DataFrame(
        {
            "model": NASTY,
            "n_battles": [10, 20, 30, 40],
            "rank_naive": [1, 2, 3, 4],
            "rating_naive": [1.5 + shift, 0.5, -0.5, float("nan")],
            "rank_corrected": [2, 1, 3, 4],
            "rating_corrected": [0.4, 1.1, -0.2, -1.3],
        }
    )
    bias = pl.DataFrame({"judge": ["j&1", "j<2>"], "effect": ["position", "length"], "estimate": [0.3, None]})
    return leaderboard, bias


def _publish(out: str, shift: float = 0.0, now: dt.datetime | None = None) -> publish.Published:
    leaderboard, bias = _tables(shift)
    files = publish.snapshot_files(leaderboard, bias, {"kendall_tau": 0.5 + shift}, "<html></html>")
    return publish.publish_snapshot(out, files, {"inputs": []}, now=now)


def test_publish_makes_a_complete_snapshot_and_moves_latest(tmp_path):
    out = str(tmp_path / "out")
    first = _publish(out, now=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc))
    assert publish.latest_snapshot_id(out) == first.snapshot_id
    assert first.snapshot_id.startswith("20240101T000000Z-")
    names = set(os.listdir(first.path))
    assert names == {*publish.SNAPSHOT_FILES, "manifest.json"}
    manifest = publish.read_snapshot_manifest(first.path)
    for name in publish.SNAPSHOT_FILES:  # the manifest vouches for every byte
        data = (tmp_path / "out" / "snapshots" / first.snapshot_id / name).read_bytes()
        assert manifest["files"][name]["bytes"] == len(data)
    second = _publish(out, shift=1.0, now=dt.datetime(2024, 1, 2, tzinfo=dt.timezone.utc))
    assert second.snapshot_id != first.snapshot_id
    assert publish.latest_snapshot_id(out) == second.snapshot_id
    assert publish.list_snapshots(out) == [first.snapshot_id, second.snapshot_id]
    assert not storage.list_children(storage.join(out, "staging"))


def test_identical_content_in_the_same_second_reuses_the_snapshot(tmp_path):
    out = str(tmp_path / "out")
    now = dt.datetime(2024, 3, 1, 12, tzinfo=dt.timezone.utc)
    first = _publish(out, now=now)
    again = _publish(out, now=now)
    assert again.reused and again.snapshot_id == first.snapshot_id
    assert publish.list_snapshots(out) == [first.snapshot_id]


def test_unfinished_snapshots_are_never_visible_and_get_cleaned(tmp_path):
    out = tmp_path / "out"
    good = _publish(str(out))
    # What a run killed mid-publish leaves: a staging folder, and (on a bucket) a copy without its manifest.
    (out / "staging" / "20990101T000000Z-abc.1234").mkdir(parents=True)
    (out / "staging" / "20990101T000000Z-abc.1234" / "leaderboard.csv").write_text("half")
    (out / "snapshots" / "20990101T000000Z-deadbeef0000").mkdir()
    assert publish.list_snapshots(str(out)) == [good.snapshot_id]
    assert publish.resolve_snapshot(str(out)).endswith(good.snapshot_id)
    with pytest.raises(StateError, match="incomplete"):
        publish.resolve_snapshot(str(out), "20990101T000000Z-deadbeef0000")
    _publish(str(out), shift=2.0)
    assert not list((out / "staging").iterdir())


def test_json_tables_have_no_nan_and_keep_untrusted_names_verbatim(tmp_path):
    leaderboard, _ = _tables()
    rows = json.loads(publish.table_bytes(leaderboard, "json"))
    assert [row["model"] for row in rows] == NASTY
    assert rows[0]["rating_naive"] == 1.5 and rows[3]["rating_naive"] is None
    with pytest.raises(ValueError, match="unknown table format"):
        publish.table_bytes(leaderboard, "xlsx")


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_export_latest_round_trips_every_format(tmp_path, fmt):
    out = str(tmp_path / "out")
    _publish(out, now=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc))
    latest = _publish(out, shift=1.0, now=dt.datetime(2024, 1, 2, tzinfo=dt.timezone.utc))
    dest = tmp_path / "dash"
    written = export_snapshot(out, str(dest), fmt)
    assert [os.path.basename(p) for p in written] == [f"leaderboard.{fmt}", f"bias.{fmt}", "snapshot.json"]
    stamp = json.loads((dest / "snapshot.json").read_text())
    assert stamp["snapshot_id"] == latest.snapshot_id
    data = (dest / f"leaderboard.{fmt}").read_bytes()
    expected, _ = _tables(1.0)
    if fmt == "parquet":
        back = pl.read_parquet(io.BytesIO(data))
        # A number that is not there is null in every format (NaN in Parquet and "NaN" in CSV beside JSON's null).
        assert back.equals(expected.with_columns(pl.col("rating_naive").fill_nan(None)))
        assert back["rating_naive"].null_count() == 1 and not back["rating_naive"].is_nan().any()
        assert data == (tmp_path / "out" / "snapshots" / latest.snapshot_id / "leaderboard.parquet").read_bytes()
    elif fmt == "csv":
        back = pl.read_csv(io.BytesIO(data))
        assert back["model"].to_list() == NASTY
        assert back["rating_naive"][0] == pytest.approx(2.5) and back["rating_naive"][3] is None
        assert b"NaN" not in data
    else:
        assert data == (tmp_path / "out" / "snapshots" / latest.snapshot_id / "leaderboard.json").read_bytes()


def test_export_cli_picks_an_older_snapshot_and_reports_errors_in_one_line(tmp_path, capsys):
    out = str(tmp_path / "out")
    old = _publish(out, now=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc))
    _publish(out, shift=1.0, now=dt.datetime(2024, 1, 2, tzinfo=dt.timezone.utc))
    dest = tmp_path / "dash"
    argv = ["export", "--out", out, "--snapshot", old.snapshot_id, "--to", str(dest), "--format", "csv"]
    assert cli.main(argv) == 0
    assert json.loads((dest / "snapshot.json").read_text())["snapshot_id"] == old.snapshot_id
    assert pl.read_csv(dest / "leaderboard.csv")["rating_naive"][0] == pytest.approx(1.5)

    assert cli.main(["export", "--out", out, "--snapshot", "nope", "--to", str(dest), "--format", "csv"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("biasboard export: error: snapshot 'nope' not found") and "\n" not in err
    assert cli.main(["export", "--out", str(tmp_path / "empty"), "--to", str(dest), "--format", "json"]) == 2
    assert "no snapshot published" in capsys.readouterr().err


def test_export_in_another_format_removes_the_earlier_formats_files_and_nothing_else(tmp_path, caplog):
    """CSV then Parquet into one folder left the CSV files beside the Parquet ones: a dashboard reading the folder
    could read the older rankings.  Now the files an earlier export wrote go (checked against the SHA-256 its
    snapshot.json recorded); a file export did not write, or one changed since, is left alone."""
    out, dest, stamp = str(tmp_path / "out"), tmp_path / "dash", "snapshot.json"
    first = _publish(out, now=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc))
    dest.mkdir()
    (dest / "notes.txt").write_text("the team's own file\n")
    (dest / "bias.json").write_text("[]\n")  # someone else's file under a name export uses
    export_snapshot(out, str(dest), "csv")
    second = _publish(out, shift=1.0, now=dt.datetime(2024, 1, 2, tzinfo=dt.timezone.utc))
    export_snapshot(out, str(dest), "parquet")
    assert sorted(os.listdir(dest)) == ["bias.json", "bias.parquet", "leaderboard.parquet", "notes.txt", stamp]
    assert json.loads((dest / stamp).read_text())["snapshot_id"] == second.snapshot_id

    export_snapshot(out, str(dest), "csv", snapshot_id=first.snapshot_id)  # and back, the CSV hand-edited after
    (dest / "leaderboard.csv").write_text("model\nedited by hand\n")
    with caplog.at_level("WARNING", logger="biasboard.pipelines.export"):
        export_snapshot(out, str(dest), "json", tables=["leaderboard"])
    assert sorted(os.listdir(dest)) == ["bias.json", "leaderboard.csv", "leaderboard.json", "notes.txt", stamp]
    assert "leaderboard.csv changed since an earlier export wrote it; left alone" in caplog.text
    assert (dest / "notes.txt").read_text() == "the team's own file\n" and (dest / "bias.json").read_text() == "[]\n"


@pytest.mark.parametrize(
    ("name", "damage", "said"),
    [
        ("manifest.json", b'{\n  "files": {\n    "lea', "not JSON"),  # cut short (an interrupted copy)
        ("manifest.json", b"", "not JSON"),  # emptied (a disk filled)
        ("summary.json", b"[1]", "a JSON list, not an object"),  # read for --tables moves
    ],
)
def test_a_damaged_snapshot_file_is_a_one_line_refusal_naming_it(tmp_path, capsys, name, damage, said):
    """A snapshot whose manifest.json or summary.json is no longer a JSON object raised json's traceback."""
    out = str(tmp_path / "out")
    snapshot = _publish(out)
    (Path(snapshot.path) / name).write_bytes(damage)
    argv = ["export", "--out", out, "--to", str(tmp_path / "dash"), "--format", "csv", "--tables", "moves"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("biasboard export: error: ") and "\n" not in err
    assert name in err and said in err and "--snapshot" in err


def test_an_empty_latest_is_said_to_be_empty_not_missing(tmp_path, capsys):
    """An emptied LATEST was reported as "(no LATEST)" beside the file the user could see."""
    out = tmp_path / "out"
    _publish(str(out))
    (out / "LATEST").write_text("")
    assert cli.main(["export", "--out", str(out), "--to", str(tmp_path / "dash"), "--format", "csv"]) == 2
    assert "(its LATEST is empty)" in capsys.readouterr().err


def test_export_moves_is_the_published_attribution_as_rows(tmp_path, capsys):
    """``--tables ...,moves``: one row per model and correction, what a dashboard joins to the leaderboard to say
    why a model moved; a snapshot without an attribution is refused in one line, not exported as an empty table."""
    from biasboard.simulate import SimulationConfig, write_simulation

    sim = write_simulation(SimulationConfig(battles=3000, models=6, judges=2, days=1, seed=4), tmp_path / "sim")
    out, dest = str(tmp_path / "site"), tmp_path / "dash"
    refresh = ["refresh", "--no-audit", "--input", str(sim / "battles"), "--state", str(tmp_path / "state")]
    assert cli.main([*refresh, "--out", out]) == 0
    argv = ["export", "--out", out, "--to", str(dest), "--format", "parquet", "--tables", "leaderboard,moves"]
    assert cli.main(argv) == 0
    moves = pl.read_parquet(dest / "moves.parquet")
    summary = json.loads((Path(publish.resolve_snapshot(out)) / "summary.json").read_text())
    effects = summary["attribution"]["effects"]
    assert effects and moves.height == 6 * len(effects) and set(moves["effect"]) == set(effects)
    board = pl.read_parquet(dest / "leaderboard.parquet").select("model", "rank_corrected", "rank_change")
    joined = moves.join(board, on="model", suffix="_board")
    assert joined.height == moves.height
    assert (joined["rank_corrected"] == joined["rank_corrected_board"]).all()
    assert (joined["places"] == joined["rank_without"] - joined["rank_corrected"]).all()
    assert json.loads((dest / "snapshot.json").read_text())["files"] == ["leaderboard.parquet", "moves.parquet"]

    older = _publish(str(tmp_path / "older"))  # a snapshot whose summary has no attribution
    argv = ["export", "--out", str(tmp_path / "older"), "--to", str(tmp_path / "d2"), "--format", "csv"]
    assert cli.main([*argv, "--tables", "moves"]) == 2
    err = capsys.readouterr().err.strip()
    assert "has no attribution" in err and older.snapshot_id in err and "\n" not in err


def test_moves_of_a_board_that_applies_no_correction_are_a_row_per_model():
    """Every judge tied to the reference: no correction applies, yet models move (the reference's own rating, ties);
    the moves table was a header alone, and dashboards lost the rank changes summary.json has.  Each model is now
    one row with an empty effect; a model with corrections keeps one row per correction."""
    from biasboard.pipelines.export import moves_table

    still = {"model": "a", "component": 0, "rank_naive": 2, "rank_corrected": 1, "rank_change": 1}
    moved = {**still, "model": "b", "rank_naive": 1, "rank_corrected": 2, "rank_change": -1}
    none = {"attribution": {"models": [{**still, "corrections": [], "rank_without_all": 1, "unexplained": 1}]}}
    table = moves_table(none, "summary.json")
    assert table.height == 1 and table["effect"][0] is None and table["unexplained"][0] == 1
    two = {"effect": "position", "delta_rating": 3.0, "rank_without": 1, "places": -1}
    some = {"attribution": {"models": [{**moved, "corrections": [two, {**two, "effect": "length"}]}]}}
    assert moves_table(some, "summary.json")["effect"].to_list() == ["position", "length"]


def test_export_slices_writes_the_per_slice_boards_and_refuses_a_snapshot_without_them(tmp_path, capsys):
    """``--tables slices``: a ``refresh --slices`` snapshot's per-slice boards (slices.parquet) where dashboards read;
    a snapshot published without slices is refused in one line, not exported as an empty table (export had no
    slices table: found by a QA pass)."""
    from biasboard.simulate import SimulationConfig, write_simulation

    config = SimulationConfig(battles=3000, models=6, judges=2, days=1, categories=2, seed=4)
    sim = write_simulation(config, tmp_path / "sim")
    out, dest = str(tmp_path / "site"), tmp_path / "dash"
    refresh = ["refresh", "--no-audit", "--input", str(sim / "battles"), "--state", str(tmp_path / "state")]
    assert cli.main([*refresh, "--out", out, "--slices", "category"]) == 0
    argv = ["export", "--out", out, "--to", str(dest), "--format", "csv", "--tables", "leaderboard,slices"]
    assert cli.main(argv) == 0
    exported = pl.read_csv(dest / "slices.csv")
    published = pl.read_parquet(Path(publish.resolve_snapshot(out)) / "slices.parquet")
    assert exported.height == published.height > 0 and exported.columns == published.columns
    assert exported["slice"].n_unique() == 2

    older = _publish(str(tmp_path / "older"))
    argv = ["export", "--out", str(tmp_path / "older"), "--to", str(tmp_path / "d2"), "--format", "csv"]
    assert cli.main([*argv, "--tables", "slices"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no slices.parquet" in err and older.snapshot_id in err and "\n" not in err


def test_an_export_refused_for_a_missing_table_writes_nothing(tmp_path, capsys):
    """``--tables leaderboard,slices`` of a snapshot without slices wrote leaderboard.csv, then failed: a folder a
    scheduled export fills was left half new, half stale (QA finding).  Every table is read before any is written."""
    _publish(str(tmp_path / "site"))
    dest = tmp_path / "dash"
    argv = ["export", "--out", str(tmp_path / "site"), "--to", str(dest), "--format", "csv"]
    assert cli.main([*argv, "--tables", "leaderboard,bias,slices"]) == 2
    assert "no slices.parquet" in capsys.readouterr().err
    assert not dest.exists() or not any(dest.iterdir()), sorted(p.name for p in dest.iterdir())


def test_an_export_killed_among_its_tables_has_its_files_removed_by_the_next(tmp_path, monkeypatch):
    """An export killed after its first table and before its stamp left that table beside the earlier export's files,
    named by no stamp: the next export (back in the earlier format) kept it for ever, an older board than the one
    announced.  The killed run's pending list names it, so the next export removes it, and leaves no list behind."""
    out, dest = str(tmp_path / "out"), tmp_path / "dash"
    _publish(out)
    export_snapshot(out, str(dest), "json")
    real_write = storage.atomic_write_bytes

    def killed_after_the_first_table(path: str, data: bytes) -> None:
        real_write(path, data)
        if path.endswith("leaderboard.csv"):
            raise KeyboardInterrupt("killed")

    monkeypatch.setattr(storage, "atomic_write_bytes", killed_after_the_first_table)
    with pytest.raises(KeyboardInterrupt):
        export_snapshot(out, str(dest), "csv")
    monkeypatch.setattr(storage, "atomic_write_bytes", real_write)
    assert "leaderboard.csv" in os.listdir(dest)
    assert json.loads((dest / "snapshot.json").read_text())["format"] == "json"

    export_snapshot(out, str(dest), "json")
    assert sorted(os.listdir(dest)) == ["bias.json", "leaderboard.json", "snapshot.json"]
