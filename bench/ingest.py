"""Benchmark: the Beam ingest → cells pipeline against the machine's physical limit.

For N and 2N battles (default N = 20M) it generates day-partitioned battle logs
with the project's simulator, then times, side by side in one run:

  (a) ``run_backfill`` — the real Beam pipeline (FnApiRunner): read Parquet as
      Arrow batches, validate every rule, dedupe ids across each day, attach
      families and the length covariate, aggregate per-day cells, write cells,
      dead letters and manifests.  As a user's backfill does, a big input runs
      its days in one worker thread per core, each handing its day to a worker
      process forked from this one (``transforms/day_workers.py``); extra
      arguments go to Beam (``--direct_num_workers=1`` runs the days one at a
      time in this process, ``--direct_num_workers=2
      --direct_running_mode=multi_threading`` in two threads of it,
      ``--direct_running_mode=multi_processing`` in Beam's worker processes);
  (b) pure polars ``scan_parquet`` + ``group_by`` of the same keys (day, judge,
      model_a, model_b, length bin) with the same sums on the same files — no
      validation, no dedupe, no families: the practical limit on this machine.

Each side runs in its own subprocess (``benchlib``), so its peak RSS is its
own.  Printed: rows/s, the ratio a/b and peak RSS at N and 2N,
for clean logs and for logs carrying ``--bad-rows F`` bad rows per valid row
(every kind of defect, ``ts`` as ISO text as the simulator writes dirty files),
side by side in one table.  Targets: a/b ≤ 2 at 20M, clean and with 1% bad
rows; RSS < 1 GB and flat as N doubles.

``--dirty-names F`` (default 0: the table as before) runs each data set again with names the ingest must clean:
every name gets an accented suffix (``-é``) and a share F of the rows has one name written with a trailing space
or decomposed (NFD), bad rows included, so the dead letters' copy of the names as written
(``__as_written:<col>``, :func:`biasboard.schemas.names.as_written`) is exercised; printed: a/b with those names
over a/b without.

Days grow with N (``--rows-per-day``, default 500k): history grows by days,
and a day is the unit of work, so memory is bounded by the largest day.

    python bench/ingest.py                  # 20M and 40M, clean and 1% bad rows (generates ~1.5 GB per data set)
    python bench/ingest.py --bad-rows 0.001 --no-double   # N only
    python bench/ingest.py --smoke          # 200k and 400k, seconds
    python bench/ingest.py --battles 200000 --no-double --dirty-names 0.05   # names to clean in 5% of rows
    python bench/ingest.py --no-double --direct_num_workers=1   # Beam one day at a time
    python bench/ingest.py --no-double --repeat 5 --day-check-cost   # the folder-day check's cost at 20M

``--repeat R`` runs every side R times, interleaved (polars, Beam, Beam, polars, ...), and keeps the fastest
wall time and the least CPU time of each: on a shared machine the fastest run is the one least disturbed.
``--day-check-cost`` adds a third side, the Beam ingest with the folder-day check
(:mod:`biasboard.schemas.folder_day`) answering "nothing outside" without looking — the ingest as it was
before the check — and prints the with/without ratios beside the a/b ratios.  The check is switched off by
replacing it in the child process before the pipeline starts, which the forked day workers inherit (Beam's
``multi_processing`` workers would not, so that mode is refused).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from benchlib import child_command, peak_rss_mb, run_child


def cpu_seconds() -> float:
    """CPU time of this process and its finished children (Beam's worker processes), user + system."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def without_day_check() -> None:
    """Switch the folder-day check off in this process (and the day workers forked from it): the "before" side."""
    from biasboard.schemas.folder_day import OffDay
    from biasboard.transforms import validate

    validate.dated_outside = lambda *args, **kwargs: OffDay()


def child_one_day(data: str, rounds: int) -> dict:
    """One day of ``data`` aggregated in this process, with the folder-day check and without it, ``rounds`` times
    each, interleaved (the order alternating): the least wall and CPU time of each side, and the least time spent
    inside the check itself in a run with it.  Without Beam, workers or other days around it, the day's own
    work is all that is timed; the time inside the check is measured directly, not as a difference of two runs
    that vary by several percent from run to run on this machine."""
    from biasboard.schemas.families import FamilyMap
    from biasboard.transforms import validate
    from biasboard.transforms.ingest import AggregateDayFn
    from biasboard.transforms.read import list_input_days

    day, files = next(iter(list_input_days(str(Path(data) / "battles")).items()))
    aggregate = AggregateDayFn(str(Path(data) / "unused-state"), FamilyMap.with_user_rules())._aggregate
    check, inside = validate.dated_outside, [0.0]

    def timed_check(*args, **kwargs):
        start = time.perf_counter()
        try:
            return check(*args, **kwargs)
        finally:
            inside[0] += time.perf_counter() - start

    aggregate(day, [f.to_dict() for f in files], "battle")  # untimed: the first run pays for warming caches up
    best = {
        "with_s": math.inf,
        "with_cpu": math.inf,
        "without_s": math.inf,
        "without_cpu": math.inf,
        "check_s": math.inf,
    }
    for round_ in range(rounds):
        for side in ("with", "without") if round_ % 2 == 0 else ("without", "with"):
            validate.dated_outside, inside[0] = timed_check, 0.0
            if side == "without":
                without_day_check()
            start, cpu = time.perf_counter(), time.process_time()
            aggregate(day, [f.to_dict() for f in files], "battle")
            measured = {"s": time.perf_counter() - start, "cpu": time.process_time() - cpu}
            best.update({f"{side}_{k}": min(best[f"{side}_{k}"], v) for k, v in measured.items()})
            if side == "with":
                best["check_s"] = min(best["check_s"], inside[0])
    return {"rounds": rounds, **best}


def child_beam(data: str, state: str, beam_args: list[str]) -> dict:
    from biasboard.pipelines.backfill import run_backfill

    start, cpu = time.perf_counter(), cpu_seconds()
    result = run_backfill(str(Path(data) / "battles"), state, beam_args)
    elapsed = time.perf_counter() - start
    assert result.counts.conserved
    return {
        "seconds": elapsed,
        "cpu": cpu_seconds() - cpu,
        "read": result.counts.read,
        "counted": result.counts.counted,
        "days": len(result.days),
        "threads": result.worker_threads,
        "processes": result.worker_processes,
    }


def child_polars(data: str) -> dict:
    import polars as pl
    from biasboard.schemas.cells import LEN_BIN_EDGES, LEN_BIN_WIDTH

    start, cpu = time.perf_counter(), cpu_seconds()
    x = (
        pl.col("len_a").cast(pl.Float64).clip(lower_bound=1).log()
        - pl.col("len_b").cast(pl.Float64).clip(lower_bound=1).log()
    )
    lo = float(LEN_BIN_EDGES[0])
    nbins = len(LEN_BIN_EDGES)
    len_bin = (((x - lo) / LEN_BIN_WIDTH).floor() + 1).clip(0, nbins).fill_null(-1).cast(pl.Int16)
    cells = (
        pl.scan_parquet(str(Path(data) / "battles" / "**" / "*.parquet"), hive_partitioning=True)
        .with_columns(x.alias("x"), len_bin.alias("len_bin"))
        .group_by("day", "judge", "model_a", "model_b", "len_bin")
        .agg(
            pl.len().alias("n"),
            (pl.col("winner") == "model_a").sum().alias("win_a"),
            (pl.col("winner") == "model_b").sum().alias("win_b"),
            (pl.col("winner") == "tie").sum().alias("tie"),
            pl.col("x").sum().alias("sum_x"),
            (pl.col("x") ** 2).sum().alias("sum_x2"),
        )
        .collect()
    )
    elapsed = time.perf_counter() - start
    return {
        "seconds": elapsed,
        "cpu": cpu_seconds() - cpu,
        "read": int(cells.get_column("n").sum()),
        "cells": cells.height,
    }


def generate(folder: Path, battles: int, rows_per_day: int, bad_rows: float, seed: int, dirty: float = 0.0) -> None:
    from biasboard.simulate import SimulationConfig, write_simulation

    days = max(1, round(battles / rows_per_day))
    config = SimulationConfig(battles=battles, days=days, models=40, judges=8, bad_rows=bad_rows, seed=seed)
    write_simulation(config, folder, overwrite=True)
    if dirty:
        for path in sorted((folder / "battles").rglob("*.parquet")):
            dirty_names(path, dirty, seed)


#: The name columns :func:`dirty_names` writes, and the suffix it gives every name: composed (NFC), decomposed.
NAME_COLUMNS = ("judge", "model_a", "model_b")
ACCENT_NFC, ACCENT_NFD = "-\u00e9", "-e\u0301"


def dirty_names(path: Path, fraction: float, seed: int) -> None:
    """Rewrite the Parquet file ``path`` with names the ingest must clean, in place.

    Why: the simulator writes clean ASCII names, so its bad rows never carried a name as written that differs from
    the cleaned one, and the dead letters' copy of it (``__as_written:<col>``) was never timed.  Every name gets
    the suffix :data:`ACCENT_NFC`, so a decomposed spelling (:data:`ACCENT_NFD`) is the same name once in NFC; in a
    share ``fraction`` of the rows, picked at random, one name column is written with a trailing space or
    decomposed (half each); an empty name (a bad row's ``missing:<col>``) stays empty.  Columnar throughout: one
    mask per column and spelling, no loop over rows."""
    import numpy as np
    import polars as pl
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    rng = np.random.default_rng([seed, table.num_rows])
    picked = rng.random(table.num_rows) < fraction
    column = rng.integers(0, len(NAME_COLUMNS), table.num_rows)
    spaced = rng.random(table.num_rows) < 0.5
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    written = []
    for i, name in enumerate(NAME_COLUMNS):
        mine = picked & (column == i)
        base = pl.col(name).cast(pl.String)
        written.append(
            pl.when(base == "")
            .then(base)  # a bad row's missing name stays missing
            .when(pl.lit(mine & spaced))
            .then(base + ACCENT_NFC + " ")
            .when(pl.lit(mine & ~spaced))
            .then(base + ACCENT_NFD)
            .otherwise(base + ACCENT_NFC)
            .alias(name)
        )
    out = frame.with_columns(written).to_arrow()
    pq.write_table(out.cast(table.schema), path, row_group_size=1 << 20)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--battles", type=int, default=20_000_000, help="N (the run also does 2N)")
    parser.add_argument("--smoke", action="store_true", help="tiny run (N = 200k) to check the bench works")
    parser.add_argument("--rows-per-day", type=int, default=500_000)
    parser.add_argument(
        "--bad-rows", type=float, default=0.01, help="bad rows per valid row in the dirty run (0: clean run only)"
    )
    parser.add_argument(
        "--dirty-names",
        type=float,
        default=0.0,
        help="also run each data set with accented names, this share of rows with one spelt untrimmed or in NFD",
    )
    parser.add_argument("--no-double", action="store_true", help="run N only (skip 2N)")
    parser.add_argument("--work", help="folder for generated data (default: a temp folder, removed after)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each side, interleaved; the fastest is kept")
    parser.add_argument(
        "--day-check-cost", action="store_true", help="also run Beam without the folder-day check; print the ratio"
    )
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args, beam_args = parser.parse_known_args(argv)

    if args.child:
        kind, *rest = args.child
        if kind == NO_DAY_CHECK:
            without_day_check()
        if kind == ONE_DAY:
            info = child_one_day(rest[0], int(rest[1]))
        else:
            info = child_polars(rest[0]) if kind == "polars" else child_beam(rest[0], rest[1], beam_args)
        info["peak_rss_mb"] = peak_rss_mb()
        print(json.dumps(info))
        return 0

    n = 200_000 if args.smoke else args.battles
    rows_per_day = min(args.rows_per_day, 50_000) if args.smoke else args.rows_per_day
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    fractions = [0.0] if args.bad_rows == 0 else [0.0, args.bad_rows]
    dirties = [0.0] if args.dirty_names == 0 else [0.0, args.dirty_names]
    sides = ["polars", "beam", *([NO_DAY_CHECK] if args.day_check_cost else [])]
    if args.day_check_cost and any("multi_processing" in a for a in beam_args):
        parser.error("--day-check-cost switches the check off in forked workers only, not multi_processing ones")
    rows = []
    load_start = os.getloadavg()[0]
    try:
        for size in (n,) if args.no_double else (n, 2 * n):
            for bad in fractions:
                for dirty in dirties:
                    data = work / f"n{size}-bad{bad}-dirty{dirty}"
                    generate(data, size, rows_per_day, bad, seed=size, dirty=dirty)
                    disk = sum(p.stat().st_size for p in (data / "battles").rglob("*.parquet")) / 2**20
                    fastest = run_sides(sides, data, work / f"state{size}", beam_args, args.repeat)
                    assert fastest["beam"]["read"] == fastest["polars"]["read"], fastest
                    one_day = None
                    if args.day_check_cost:
                        one_day = run_child(
                            child_command(__file__, "--child", ONE_DAY, str(data), str(4 * args.repeat))
                        )
                    found = (fastest["beam"], fastest["polars"], fastest.get(NO_DAY_CHECK), one_day)
                    rows.append(Row(size, bad, dirty, disk, *found))
                    shutil.rmtree(data, ignore_errors=True)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    print_table(rows, rows_per_day, load_start)
    if args.day_check_cost:
        print_day_check(rows, args.repeat)
    return 0


class Row(NamedTuple):
    """One data set's measurements: its size, bad-row and dirty-name shares, MB on disk, and each side's fastest run
    (``unchecked``: Beam without the folder-day check, ``one_day``: the in-process day; None when not run)."""

    size: int
    bad: float
    dirty: float
    disk: float
    beam: dict
    polars: dict
    unchecked: dict | None
    one_day: dict | None


#: The side that runs the Beam ingest with the folder-day check switched off (:func:`without_day_check`).
NO_DAY_CHECK = "beam-no-day-check"
#: The child that times one day's aggregation in-process with and without the check (:func:`child_one_day`).
ONE_DAY = "one-day-day-check"


def run_sides(sides: list[str], data: Path, state: Path, beam_args: list[str], repeat: int) -> dict[str, dict]:
    """Each side ``repeat`` times, interleaved (the order reversed every other round, so no side always runs
    after the same one), each run in a fresh process (Beam's on a fresh state).  Per side: its fastest run by
    wall time, with ``cpu`` the least CPU time of its runs (each minimum is the least disturbed measurement)."""
    runs: dict[str, list[dict]] = {side: [] for side in sides}
    for round_ in range(repeat):
        for side in sides if round_ % 2 == 0 else sides[::-1]:
            shutil.rmtree(state, ignore_errors=True)
            args = [str(data)] if side == "polars" else [str(data), str(state), *beam_args]
            runs[side].append(run_child(child_command(__file__, "--child", side, *args)))
    shutil.rmtree(state, ignore_errors=True)
    return {
        side: {**min(found, key=lambda info: info["seconds"]), "cpu": min(info["cpu"] for info in found)}
        for side, found in runs.items()
    }


def print_day_check(rows: list[Row], repeat: int) -> None:
    """What the folder-day check costs: the Beam ingest with it against without it, and each against polars."""
    print(f"\nfolder-day check (fastest of {repeat} interleaved run(s) of each side)")
    header = (
        f"{'battles':>11} {'bad':>6} {'names':>6} | {'with s':>7} {'without s':>9} {'with/without':>12} "
        f"{'cpu with/without':>16} | {'a/b with':>8} {'a/b without':>11}"
    )
    print(header)
    print("-" * len(header))
    for size, bad, dirty, _, beam_info, polars_info, unchecked, _ in rows:
        assert unchecked is not None
        b, u, p = beam_info["seconds"], unchecked["seconds"], polars_info["seconds"]
        print(
            f"{size:>11,} {bad:>6.2%} {_names(dirty):>6} | {b:>7.2f} {u:>9.2f} {b / u:>12.3f} "
            f"{beam_info['cpu'] / unchecked['cpu']:>16.3f} | {b / p:>8.2f} {u / p:>11.2f}"
        )
    for size, bad, dirty, *_, day in rows:
        assert day is not None
        print(
            f"one day of the {size:,} battles, {bad:.2%} bad rows, names to clean {_names(dirty)}, in one process "
            f"(least of {day['rounds']} "
            f"interleaved runs each): with/without {day['with_s'] / day['without_s']:.3f} wall "
            f"({day['with_s'] * 1e3:.0f} / {day['without_s'] * 1e3:.0f} ms), "
            f"{day['with_cpu'] / day['without_cpu']:.3f} CPU "
            f"({day['with_cpu'] * 1e3:.0f} / {day['without_cpu'] * 1e3:.0f} ms); inside the check "
            f"{day['check_s'] * 1e3:.2f} ms = {day['check_s'] / day['with_s']:.2%} of the day"
        )


def _names(dirty: float) -> str:
    """The share of rows with a name to clean, as the tables show it (``-``: none, the simulator's names)."""
    return f"{dirty:.2%}" if dirty else "-"


def _workers(info: dict) -> str:
    threads = info["threads"]
    return f"{threads}{'p' if info.get('processes') else ''}" if threads else "-"


def print_table(rows: list[Row], rows_per_day: int, load_start: float) -> None:
    """One table: clean and dirty runs at each N side by side; rows/s counts every row read, bad ones too.

    ``workers``: Beam's worker threads, ``p`` when forked processes did their days' work (``-``: Beam's own
    setting, e.g. from ``--direct_*`` flags).  ``cpu s``: CPU
    seconds of each side (its workers included), which a loaded machine inflates less than wall time; the
    target is on wall time (``a/b``).  ``names``: the share of rows with a name to clean (``--dirty-names``).
    """
    print(
        f"ingest benchmark ({os.cpu_count()} cores, 1-min load average {load_start:.2f} at the start, "
        f"{os.getloadavg()[0]:.2f} at the end), days of {rows_per_day:,} valid rows"
    )
    header = (
        f"{'battles':>11} {'bad':>6} {'names':>6} {'rows':>11} {'days':>5} {'MB':>6} | "
        f"{'workers':>7} {'beam s':>7} {'cpu s':>6} "
        f"{'rows/s':>11} {'RSS MB':>7} | {'polars s':>8} {'cpu s':>6} {'rows/s':>11} {'RSS MB':>7} | "
        f"{'a/b':>5} {'cpu a/b':>7}"
    )
    print(header)
    print("-" * len(header))
    ratios = {}
    for size, bad, dirty, disk, beam_info, polars_info, *_ in rows:
        b, p = beam_info["seconds"], polars_info["seconds"]
        ratios[size, bad, dirty] = b / p
        print(
            f"{size:>11,} {bad:>6.2%} {_names(dirty):>6} {beam_info['read']:>11,} {beam_info['days']:>5} "
            f"{disk:>6.0f} | "
            f"{_workers(beam_info):>7} {b:>7.2f} {beam_info['cpu']:>6.1f} {beam_info['read'] / b:>11,.0f} "
            f"{beam_info['peak_rss_mb']:>7.0f} | {p:>8.2f} {polars_info['cpu']:>6.1f} "
            f"{polars_info['read'] / p:>11,.0f} {polars_info['peak_rss_mb']:>7.0f} | {b / p:>5.2f} "
            f"{beam_info['cpu'] / polars_info['cpu']:>7.2f}"
        )
    for size, bad, dirty in ratios:
        if bad and not dirty:
            worse = ratios[size, bad, 0.0] / ratios[size, 0.0, 0.0]
            print(f"N={size:,}: a/b with {bad:.2%} bad rows / a/b clean = {worse:.2f}")
        if dirty:
            print(
                f"N={size:,}, {bad:.2%} bad rows: a/b with {dirty:.2%} names to clean / a/b without = "
                f"{ratios[size, bad, dirty] / ratios[size, bad, 0.0]:.2f}"
            )
    for bad, dirty in sorted({(r.bad, r.dirty) for r in rows}):
        rss = [r.beam["peak_rss_mb"] for r in rows if (r.bad, r.dirty) == (bad, dirty)]
        if len(rss) == 2:
            names = f", names to clean {dirty:.2%}" if dirty else ""
            print(f"beam peak RSS at 2N / at N (bad rows {bad:.2%}{names}): {rss[1] / rss[0]:.2f}")


if __name__ == "__main__":
    sys.exit(main())
