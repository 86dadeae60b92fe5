"""Rows dated outside their ``day=`` folder: counted under the folder's day, and said in the summary.

The definition (:mod:`biasboard.schemas.folder_day`) is checked on batches of every timestamp type; the
pipeline test writes real Parquet day folders (one holding a misfiled file, one holding a local-time day's
rows that cross into the next UTC morning) and runs the real backfill and refresh on the local runner.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from biasboard.pipelines.backfill import backfill_summary, run_backfill
from biasboard.pipelines.refresh import refresh
from biasboard.schemas.folder_day import OffDay, dated_outside, day_window
from biasboard.transforms import publish

UTC = dt.timezone.utc
DAY = "2024-03-02"
#: Instants around DAY's window [2024-03-01 10:00, 2024-03-03 12:00) UTC, and whether each is outside it.
EDGES = [
    (dt.datetime(2024, 3, 1, 9, 59, 59, tzinfo=UTC), True),  # before the day begins anywhere (UTC+14)
    (dt.datetime(2024, 3, 1, 10, tzinfo=UTC), False),  # DAY 00:00 at UTC+14:00
    (dt.datetime(2024, 3, 2, 12, tzinfo=UTC), False),
    (dt.datetime(2024, 3, 3, 11, 59, 59, tzinfo=UTC), False),  # DAY 23:59:59 at UTC−12:00
    (dt.datetime(2024, 3, 3, 12, tzinfo=UTC), True),  # after the day ends everywhere
    (dt.datetime(2024, 3, 6, 1, tzinfo=UTC), True),
]


def _edges() -> pl.DataFrame:
    return pl.DataFrame({"ts": [t for t, _ in EDGES]}, schema={"ts": pl.Datetime("us", "UTC")})


def test_the_day_reaches_from_utc_plus_14_to_utc_minus_12() -> None:
    assert day_window(DAY) == (dt.datetime(2024, 3, 1, 10, tzinfo=UTC), dt.datetime(2024, 3, 3, 12, tzinfo=UTC))
    expected = OffDay(sum(outside for _, outside in EDGES), "2024-03-01", "2024-03-06")
    frame = _edges()
    as_epoch = frame.select(pl.col("ts").dt.epoch("s").cast(pl.Float64))
    as_naive = frame.select(pl.col("ts").dt.replace_time_zone(None))
    as_zoned = frame.select(pl.col("ts").dt.convert_time_zone("America/Los_Angeles"))
    as_text = frame.select(pl.col("ts").dt.strftime("%Y-%m-%dT%H:%M:%SZ"))
    for batch in (frame, as_epoch, as_naive, as_zoned, as_text):
        assert dated_outside(batch, DAY) == expected, batch.schema
    in_day = np.array([not outside for _, outside in EDGES])
    assert dated_outside(frame, DAY, in_day) == OffDay()  # only the rows ``kept`` picks (the counted ones)
    assert dated_outside(frame.filter(pl.Series(in_day)), DAY) == OffDay()  # a batch on the day: nothing outside


def test_text_is_on_its_written_date_and_a_date_is_a_day() -> None:
    text = [
        "2024-03-02T23:00:00-05:00",  # 04:00 UTC on the 3rd: written on the day
        "2024-03-02T01:00:00+20:00",  # no real zone, but written on the day
        " 2024-03-02",  # the validator strips it
        "2024-03-01T23:00:00-05:00",  # 04:00 UTC on the 2nd
        "2024-03-03T11:00:00Z",  # within the tolerance
        "2024-03-03T13:00:00Z",  # outside
        "2024-03-05",  # a date, not an instant: another day
    ]
    assert dated_outside(pl.DataFrame({"ts": text}), DAY) == OffDay(2, "2024-03-03", "2024-03-05")
    dates = pl.DataFrame({"ts": [dt.date(2024, 3, 2), dt.date(2024, 3, 3)]})
    assert dated_outside(dates, DAY) == OffDay(1, "2024-03-03", "2024-03-03")  # midnight UTC of the 3rd, yet a day


def test_off_day_counts_add_over_batches_and_days() -> None:
    total = OffDay(2, "2024-03-05", "2024-03-05") + OffDay() + OffDay(3, "2024-02-27", "2024-03-01")
    assert total == OffDay(5, "2024-02-27", "2024-03-05")
    assert total.dates() == "2024-02-27 … 2024-03-05"
    assert OffDay.from_dict(total.to_dict()) == total
    assert OffDay().to_dict() == {}  # a manifest without rows outside its day is unchanged


def _battles(prefix: str, times: list[dt.datetime], winner: list[str] | None = None) -> pl.DataFrame:
    n = len(times)
    return pl.DataFrame(
        {
            "battle_id": [f"{prefix}{i}" for i in range(n)],
            "ts": times,
            "judge": ["judge-1"] * n,
            "model_a": ["abc"[i % 3] for i in range(n)],
            "model_b": ["bca"[i % 3] for i in range(n)],
            "winner": winner or [("model_a", "model_b", "tie")[i % 3] for i in range(n)],
            "len_a": [100 + i % 7 for i in range(n)],
            "len_b": [120] * n,
        },
        schema_overrides={"ts": pl.Datetime("us", "UTC")},
    )


def _write(root: Path, day: str, name: str, frame: pl.DataFrame) -> None:
    folder = root / "battles" / f"day={day}"
    folder.mkdir(parents=True, exist_ok=True)
    frame.write_parquet(folder / name)


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    """day=2024-03-02: 120 battles of the day, 3 with a bad winner, and a misfiled file of 50 battles of the 5th
    and 6th; day=2024-03-03: a US-Pacific day's 144 battles, 08:00 UTC on the 3rd to 07:50 UTC on the 4th."""
    root = tmp_path / "logs"
    hour = dt.timedelta(hours=1)
    start = dt.datetime(2024, 3, 2, tzinfo=UTC)
    good = _battles("a", [start + i * hour / 5 for i in range(120)])
    good = good.with_columns(pl.when(pl.int_range(pl.len()) < 3).then(pl.lit("A")).otherwise("winner").alias("winner"))
    _write(root, DAY, "part-0.parquet", good)
    _write(
        root, DAY, "part-1.parquet", _battles("b", [dt.datetime(2024, 3, 5 + i % 2, 9, tzinfo=UTC) for i in range(50)])
    )
    pacific = dt.datetime(2024, 3, 3, 8, tzinfo=UTC)
    _write(root, "2024-03-03", "part-0.parquet", _battles("c", [pacific + i * hour / 6 for i in range(144)]))
    return root


def test_rows_dated_on_another_day_are_counted_and_named(logs: Path, tmp_path: Path) -> None:
    state, out, glob = tmp_path / "state", tmp_path / "out", str(logs / "battles")
    result = run_backfill(glob, str(state), ["--runner=FnApiRunner"])
    assert (result.counts.read, result.counts.counted, result.counts.rejected) == (314, 311, {"bad_winner": 3})
    assert result.counts.off_day == OffDay(50, "2024-03-05", "2024-03-06")  # counted, not rejected
    printed = backfill_summary(result)
    assert "counted but dated outside their day folder: 50" in printed
    assert "warning: day=2024-03-02: 50 of the 167 rows it counted are dated outside the day" in printed

    outcome = refresh(glob, str(state), str(out), ["--runner=FnApiRunner"])
    summary = outcome.summary
    assert summary is not None and summary.counts.conserved
    assert (summary.counts.read, summary.counts.counted, summary.counts.off_day) == (314, 311, 50)
    said = [w for w in summary.warnings if "dated outside" in w]
    assert said == [
        "day=2024-03-02: 50 of the 167 rows it counted are dated outside the day (2024-03-05 … 2024-03-06, UTC); "
        "they stay counted under 2024-03-02, the day their folder names: is a file in the wrong day= folder?"
    ]  # and none for 2024-03-03, whose rows are on their day in US Pacific time
    snapshot = Path(publish.resolve_snapshot(str(out)))
    assert json.loads((snapshot / "audit.json").read_text())["counts"]["off_day"] == 50

    # a refresh that aggregates only a new day still names the stored day (the warning reads every day's manifest)
    _write(logs, "2024-03-04", "part-0.parquet", _battles("d", [dt.datetime(2024, 3, 4, 12, tzinfo=UTC)] * 30))
    again = refresh(glob, str(state), str(out), ["--runner=FnApiRunner"])
    assert again.aggregated_days == ["2024-03-04"]
    assert again.summary is not None and again.summary.counts.conserved
    assert again.summary.counts.off_day == 50
    assert [w for w in again.summary.warnings if "dated outside" in w] == said
