"""A battle_id counted on two days is found, counted and said (it was counted twice without a word).

Real Parquet day folders, the real backfill and refresh on the local runner: the counts are checked exactly,
incrementally (a new day read against the stored days' hashes), and against an older state whose days keep no
ids or keep them hashed otherwise (not checked, and a warning names them with the backfill that mends it).
"""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
from biasboard.pipelines import cli
from biasboard.pipelines.backfill import backfill_summary, run_backfill
from biasboard.pipelines.refresh import refresh
from biasboard.schemas import summary as S
from biasboard.schemas.string_hash import string_hash
from biasboard.transforms import state
from biasboard.transforms.repeated_ids import CACHE_FILE, IDS_FILE, repeated_ids
from biasboard.transforms.validate import ID_HASH_SCHEME

RUNNER = ["--runner=FnApiRunner"]


def _battles(ids: list[str], day: str) -> pl.DataFrame:
    n = len(ids)
    ts = dt.datetime.fromisoformat(day).replace(hour=12, tzinfo=dt.timezone.utc)
    return pl.DataFrame(
        {
            "battle_id": ids,
            "ts": [ts] * n,
            "judge": ["judge-1"] * n,
            "model_a": ["abc"[i % 3] for i in range(n)],
            "model_b": ["bca"[i % 3] for i in range(n)],
            "winner": [("model_a", "model_b", "tie")[i % 3] for i in range(n)],
            "len_a": [100 + i % 7 for i in range(n)],
            "len_b": [120] * n,
        },
        schema_overrides={"ts": pl.Datetime("us", "UTC")},
    )


def _write(root: Path, day: str, ids: list[str]) -> None:
    folder = root / "battles" / f"day={day}"
    folder.mkdir(parents=True, exist_ok=True)
    _battles(ids, day).write_parquet(folder / "part-0.parquet")


def _ids(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def _repeats(state_dir: Path, scheme: str = ID_HASH_SCHEME):
    days = state.list_state_days(str(state_dir))
    manifests = [state.read_day_manifest(str(state_dir), d) or {} for d in days]
    return repeated_ids(str(state_dir), days, manifests, scheme)


def test_ids_counted_on_an_earlier_day_are_counted_and_named(tmp_path: Path) -> None:
    logs, state_dir, out = tmp_path / "logs", tmp_path / "state", tmp_path / "out"
    _write(logs, "2024-05-01", _ids("a", 90))
    _write(logs, "2024-05-02", _ids("b", 60) + _ids("a", 7))  # 7 of day 1's battles again
    _write(logs, "2024-05-03", _ids("c", 60))
    glob = str(logs / "battles")
    first = refresh(glob, str(state_dir), str(out), RUNNER)
    summary = first.summary
    assert summary is not None and summary.counts.conserved
    assert (summary.counts.read, summary.counts.counted, summary.counts.repeated_ids) == (217, 217, 7)
    said = [w for w in summary.warnings if "battle_id an earlier day counted" in w]
    assert said == [
        "7 counted rows repeat a battle_id an earlier day counted, so those battles are counted twice: "
        "day=2024-05-02: 7 (first counted on 2024-05-01; battle_id a3, a4, a5, …). Remove the repeated rows from "
        "the later day's input (same battle_id on two days) and refresh"
    ]
    # The same in summary.json's own field, for a reader that does not parse warnings.
    assert summary.repeated_ids == S.RepeatedIdsInfo(
        [S.RepeatedDay("2024-05-02", 7, ["2024-05-01"], ["a3", "a4", "a5"])]
    )
    document = json.loads((Path(first.published.path) / "summary.json").read_text())
    assert document["repeated_ids"] == {
        "days": [{"day": "2024-05-02", "rows": 7, "first_counted_on": ["2024-05-01"], "examples": ["a3", "a4", "a5"]}],
        "unchecked_days": [],
    }
    assert S.Summary.from_json(document).repeated_ids == summary.repeated_ids

    # A new day repeating ids of two stored days (one of them a repeat already) and of itself is not: read against
    # the stored days' hashes; the stored days' counts come from the kept counts, not recounted.
    kept = json.loads((state_dir / CACHE_FILE).read_text())
    assert [e["day"] for e in kept["days"]] == ["2024-05-01", "2024-05-02", "2024-05-03"]
    _write(logs, "2024-05-04", _ids("d", 30) + _ids("a", 3) + _ids("c", 5))
    again = refresh(glob, str(state_dir), str(out), RUNNER)
    assert again.aggregated_days == ["2024-05-04"]
    assert again.summary is not None and again.summary.counts.repeated_ids == 7 + 8
    found = _repeats(state_dir)
    assert list(found.days) == ["2024-05-01", "2024-05-02", "2024-05-03", "2024-05-04"]
    assert [r.rows for r in found.days.values()] == [0, 7, 0, 8]
    assert found.days["2024-05-04"].earlier == ("2024-05-01", "2024-05-03")

    # An earlier day changed: the days after it are recounted (day 2's repeats of day 1 are gone).
    _write(logs, "2024-05-01", _ids("z", 90))
    third = refresh(glob, str(state_dir), str(out), RUNNER)
    assert third.aggregated_days == ["2024-05-01"]
    assert third.summary is not None and third.summary.counts.repeated_ids == 8
    found = _repeats(state_dir)
    assert [r.rows for r in found.days.values()] == [0, 0, 0, 8]
    assert found.days["2024-05-04"].earlier == ("2024-05-02", "2024-05-03")  # a0-a2 are day 2's now
    examples = found.days["2024-05-04"].examples  # three of the 8, read back from day 4's file
    assert len(examples) == 3 and set(examples) <= {"a0", "a1", "a2", "c0", "c1", "c2", "c3", "c4"}


def test_the_warning_quotes_ids_from_the_input_when_it_can(tmp_path: Path) -> None:
    """The ids are read back from the later day's file, under FastChat's column name too; a file gone since (its
    counts kept in the state) leaves the warning without them, not without the warning."""
    logs, state_dir = tmp_path / "logs", tmp_path / "state"
    _write(logs, "2024-05-01", _ids("a", 40))
    folder = logs / "battles" / "day=2024-05-02"
    folder.mkdir(parents=True)
    _battles([*_ids("b", 10), "a7", "a8"], "2024-05-02").rename({"battle_id": "question_id"}).write_parquet(
        folder / "part-0.parquet"
    )
    run_backfill(str(logs / "battles"), str(state_dir), RUNNER)
    (said,) = _repeats(state_dir).warnings()
    assert "day=2024-05-02: 2 (first counted on 2024-05-01; battle_id a7, a8). Remove" in said
    (folder / "part-0.parquet").unlink()
    (said,) = _repeats(state_dir).warnings()
    assert "day=2024-05-02: 2 (first counted on 2024-05-01). Remove" in said


def test_backfill_says_it_and_a_clean_history_says_nothing(tmp_path: Path) -> None:
    logs, state_dir = tmp_path / "logs", tmp_path / "state"
    _write(logs, "2024-05-01", _ids("a", 40))
    _write(logs, "2024-05-02", _ids("b", 40))
    result = run_backfill(str(logs / "battles"), str(state_dir), RUNNER)
    assert "battle_id an earlier day counted" not in backfill_summary(result)
    assert _repeats(state_dir).total == 0

    _write(logs, "2024-05-03", _ids("b", 40)[:11] + _ids("c", 20))
    result = run_backfill(str(logs / "battles"), str(state_dir), [*RUNNER])
    printed = backfill_summary(result)
    assert (
        "warning: 11 counted rows repeat a battle_id an earlier day counted, so those battles are counted twice: "
        "day=2024-05-03: 11 (first counted on 2024-05-02; battle_id " in printed
    )


def test_days_stored_without_ids_are_not_checked(tmp_path: Path) -> None:
    logs, state_dir = tmp_path / "logs", tmp_path / "state"
    _write(logs, "2024-05-01", _ids("a", 40))
    _write(logs, "2024-05-02", _ids("a", 40))
    run_backfill(str(logs / "battles"), str(state_dir), RUNNER)
    assert {d: r.rows for d, r in _repeats(state_dir).days.items()} == {"2024-05-01": 0, "2024-05-02": 40}
    # As a state written before ids were kept: day 1's manifest names no ids file.
    manifest_path = Path(state.manifest_path(str(state_dir), "2024-05-01"))
    manifest = json.loads(manifest_path.read_text())
    manifest["files"] = [f for f in manifest["files"] if not f.endswith(IDS_FILE)]
    manifest["sha256"] = {k: v for k, v in manifest["sha256"].items() if not k.endswith(IDS_FILE)}
    manifest_path.write_text(json.dumps(manifest))
    found = _repeats(state_dir)
    assert found.unchecked == ("2024-05-01",)
    assert found.total == 0  # day 2 has no earlier day it can be compared with
    assert found.info() == S.RepeatedIdsInfo([], ["2024-05-01"])
    assert found.warnings() == [
        "battle ids not checked for repeats across days on 1 stored day(s) (day=2024-05-01): they were aggregated "
        "before this version of biasboard kept their ids' hashes (or with the former, polars-version-bound hash). "
        "`biasboard backfill --from 2024-05-01 --to 2024-05-01` over the same input and state re-aggregates them "
        "(their cells come out the same) and the next refresh checks them"
    ]
    # The backfill it names mends it: day 1 keeps its ids again, and its 40 battles are found on day 2.
    args = ["--input", str(logs / "battles"), "--state", str(state_dir), "--from", "2024-05-01", "--to", "2024-05-01"]
    assert cli.main(["backfill", *args, *RUNNER]) == 0
    found = _repeats(state_dir)
    assert (found.unchecked, found.total) == ((), 40)


def test_the_refresh_after_the_mending_backfill_checks_the_days(tmp_path: Path) -> None:
    """The unchecked-days warning says the backfill it names re-aggregates the days "and the next refresh checks
    them".  It did not: the backfill leaves the input's fingerprints as they were, so the next refresh found "nothing
    new since snapshot …", kept LATEST and printed its warning again, the 40 repeats still unreported."""
    logs, state_dir, out = tmp_path / "logs", tmp_path / "state", tmp_path / "out"
    _write(logs, "2024-05-01", _ids("a", 40))
    _write(logs, "2024-05-02", _ids("a", 40))
    run_backfill(str(logs / "battles"), str(state_dir), RUNNER)
    manifest_path = Path(state.manifest_path(str(state_dir), "2024-05-01"))  # stored before ids were kept
    manifest = json.loads(manifest_path.read_text())
    manifest["files"] = [f for f in manifest["files"] if not f.endswith(IDS_FILE)]
    manifest["sha256"] = {k: v for k, v in manifest["sha256"].items() if not k.endswith(IDS_FILE)}
    manifest_path.write_text(json.dumps(manifest))
    glob = str(logs / "battles")
    first = refresh(glob, str(state_dir), str(out), RUNNER)
    assert first.summary is not None and first.summary.repeated_ids == S.RepeatedIdsInfo([], ["2024-05-01"])
    assert refresh(glob, str(state_dir), str(out), RUNNER).reason.startswith("nothing new")  # still nothing new

    args = ["--input", glob, "--state", str(state_dir), "--from", "2024-05-01", "--to", "2024-05-01"]
    assert cli.main(["backfill", *args, *RUNNER]) == 0
    mended = refresh(glob, str(state_dir), str(out), RUNNER)
    assert not mended.reason, mended.reason
    assert mended.summary is not None and mended.summary.counts.repeated_ids == 40
    assert mended.summary.repeated_ids is not None and mended.summary.repeated_ids.unchecked_days == []
    assert refresh(glob, str(state_dir), str(out), RUNNER).reason.startswith("nothing new")  # and stays so


def test_days_hashed_otherwise_are_not_checked(tmp_path: Path) -> None:
    """A state whose ids were hashed by another scheme (polars' hash, before :func:`string_hash`) is not compared
    with this one's hashes: not a false repeat, not a silent pass either."""
    logs, state_dir = tmp_path / "logs", tmp_path / "state"
    _write(logs, "2024-05-01", _ids("a", 40))
    _write(logs, "2024-05-02", _ids("a", 40))
    run_backfill(str(logs / "battles"), str(state_dir), RUNNER)
    found = _repeats(state_dir, scheme="polars 1.0.0 hash seed 0x9e3779b97f4a7c15")
    assert (found.unchecked, found.total) == (("2024-05-01", "2024-05-02"), 0)
    (said,) = found.warnings()
    assert said.startswith("battle ids not checked for repeats across days on 2 stored day(s) (days 2024-05-01 …")


def test_the_stored_hashes_are_the_counted_ids(tmp_path: Path) -> None:
    logs, state_dir = tmp_path / "logs", tmp_path / "state"
    ids = _ids("a", 50)
    frame = pl.concat([_battles(ids, "2024-05-01"), _battles(ids[:4], "2024-05-01")])  # 4 repeats within the day
    frame = frame.with_columns(
        pl.when(pl.int_range(pl.len()) == 9).then(pl.lit("X")).otherwise("winner").alias("winner")
    )
    folder = logs / "battles" / "day=2024-05-01"
    folder.mkdir(parents=True)
    frame.write_parquet(folder / "part-0.parquet")
    run_backfill(str(logs / "battles"), str(state_dir), RUNNER)
    manifest = state.read_day_manifest(str(state_dir), "2024-05-01") or {}
    stored = state.read_day_table(str(state_dir), "2024-05-01", manifest, IDS_FILE)
    assert stored is not None
    hashes = stored.column("h1").to_numpy()
    counted = string_hash(pl.Series([i for k, i in enumerate(ids) if k != 9]), 0x9E3779B97F4A7C15)
    assert np.array_equal(hashes, np.sort(counted))  # sorted, one per counted id: no duplicate, no rejected row
    # Written without a dictionary (hashes are distinct: trying one cost 31 of 33 ms a day); the dead letters' text
    # columns keep theirs.
    files = {p.name: pq.ParquetFile(p).metadata.row_group(0) for p in state_dir.rglob("*.parquet")}
    assert not files[IDS_FILE].column(0).has_dictionary_page
    dead = files[state.DEAD_LETTERS_FILE]
    columns = {dead.column(i).path_in_schema: dead.column(i) for i in range(dead.num_columns)}
    assert columns["reason"].has_dictionary_page and not columns["source_row"].has_dictionary_page


def test_the_benchmark_smoke_run_finds_the_planted_repeats():
    """bench/repeated_ids.py --smoke: the +1 day repeats 1% of the first day's 20,000 ids, at H and 2H."""
    bench = Path(__file__).resolve().parents[1] / "bench" / "repeated_ids.py"
    done = subprocess.run([sys.executable, str(bench), "--smoke"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (line,) = [row for row in done.stdout.splitlines() if row.startswith("+1 day")]
    assert line.endswith("200 / 200"), done.stdout
    # The stored hashes' size is measured from the files written, Parquet's overhead included (it printed the 8 bytes
    # of a hash as if measured: 9.9 bytes a battle at 20,000 a day).
    stored = re.search(r"^hashes stored: ([\d.]+) bytes a battle \(([\d.]+) MB at H, as written\)$", done.stdout, re.M)
    assert stored, done.stdout
    assert 8.0 < float(stored.group(1)) < 16.0
    assert float(stored.group(2)) == pytest.approx(float(stored.group(1)) * 120_000 / 2**20, abs=0.06)


def _brute_force(days: dict[str, np.ndarray], foreign: set[str]) -> dict[str, tuple]:
    """Each day's (repeated rows, the first days that counted them, smallest repeated hashes), one id at a time."""
    first_day: dict[int, str] = {}
    out = {}
    for day, hashes in days.items():
        if day in foreign:
            out[day] = (None, (), ())
            continue
        repeats = sorted(int(h) for h in hashes if int(h) in first_day)
        earlier = sorted({first_day[h] for h in repeats})
        out[day] = (len(repeats), tuple(earlier[:3]), tuple(repeats[:3]))
        for h in hashes.tolist():
            first_day.setdefault(h, day)
    return out


@pytest.mark.parametrize("long_recount", [False, True], ids=["held-days", "hash-ranges"])
def test_both_ways_of_counting_agree_with_counting_one_id_at_a_time(tmp_path, monkeypatch, long_recount):
    """The recount of a few days (held against the days before them) and of a long history (by hash range, in
    scratch files) count the same repeats, earlier days and example hashes as a per-id count, from an empty cache
    and from one kept for the first days; a day hashed otherwise is not compared either way."""
    from biasboard.transforms import repeated_ids as rid
    from biasboard.transforms.repeated_ids import ids_table

    rng = np.random.default_rng(7)
    names = [f"2024-06-{d:02d}" for d in range(1, 11)]
    days = {day: rng.integers(0, 2**64, 300, dtype=np.uint64) for day in names}
    days[names[3]][:40] = days[names[0]][:40]  # repeats of one earlier day
    for k in range(4):  # repeats of four earlier days (three are named), one of them itself a repeat
        days[names[5]][10 * k : 10 * k + 10] = days[names[k + 1]][:10]
    days[names[6]][:5] = days[names[5]][:5]
    days[names[8]][:300] = days[names[2]][:300]  # a whole day again
    foreign = {names[4]}
    days[names[4]][:20] = days[names[0]][50:70]  # not compared: hashed otherwise
    days[names[7]][:20] = days[names[4]][:20]  # its first counted day is day 0 (day 4 is not compared)
    days = {day: np.unique(h) for day, h in days.items()}
    state_dir = str(tmp_path / "state")
    for day in names:
        table = ids_table(days[day], "another hash" if day in foreign else ID_HASH_SCHEME)
        state.write_day(state_dir, day, {"counts": {"counted": table.num_rows}}, {IDS_FILE: table})
    ranges = []
    if long_recount:
        monkeypatch.setattr(rid, "BLOCK_IDS", 100)
        monkeypatch.setattr(rid, "RANGE_IDS", 256)  # 3,000 ids: 12 ranges
        by_range = rid._count_by_hash_range
        monkeypatch.setattr(rid, "_count_by_hash_range", lambda *args: ranges.append(args[2]) or by_range(*args))
    expected = _brute_force(days, foreign)
    for stored in (names[:4], names):  # from an empty cache, then the last days against a kept count of the first
        manifests = [state.read_day_manifest(state_dir, d) or {} for d in stored]
        found = repeated_ids(state_dir, stored, manifests)
        got = {day: (r.rows, r.earlier, r.example_hashes) for day, r in found.days.items()}
        got.update({day: (None, (), ()) for day in found.unchecked})
        assert got == {day: expected[day] for day in stored}
    assert ranges == ([0, 4] if long_recount else [])  # counted by hash range from none kept, then from 4 days kept
    # what the planted days make of it: names[5] repeats ids first counted on names[0] (through names[3]), names[1]
    # and names[2], not those of names[4] (hashed otherwise); names[7] repeats 20 ids that reached names[4] from
    # names[0], which counted them first
    assert expected[names[5]][:2] == (30, tuple(names[:3])) and expected[names[7]][:2] == (20, (names[0],))
    assert expected[names[8]][0] == 300 and expected[names[4]][0] is None
