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

Days grow with N (``--rows-per-day``, default 500k): history grows by days,
and a day is the unit of work, so memory is bounded by the largest day.

    python bench/ingest.py                  # 20M and 40M, clean and 1% bad rows (generates ~1.5 GB per data set)
    python bench/ingest.py --bad-rows 0.001 --no-double   # N only
    python bench/ingest.py --smoke          # 200k and 400k, seconds
    python bench/ingest.py --no-double --direct_num_workers=1   # Beam one day at a time
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from benchlib import child_command, peak_rss_mb, run_child


def cpu_seconds() -> float:
    """CPU time of this process and its finished children (Beam's worker processes), user + system."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


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


def generate(folder: Path, battles: int, rows_per_day: int, bad_rows: float, seed: int) -> None:
    from biasboard.simulate import SimulationConfig, write_simulation

    days = max(1, round(battles / rows_per_day))
    config = SimulationConfig(battles=battles, days=days, models=40, judges=8, bad_rows=bad_rows, seed=seed)
    write_simulation(config, folder, overwrite=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--battles", type=int, default=20_000_000, help="N (the run also does 2N)")
    parser.add_argument("--smoke", action="store_true", help="tiny run (N = 200k) to check the bench works")
    parser.add_argument("--rows-per-day", type=int, default=500_000)
    parser.add_argument(
        "--bad-rows", type=float, default=0.01, help="bad rows per valid row in the dirty run (0: clean run only)"
    )
    parser.add_argument("--no-double", action="store_true", help="run N only (skip 2N)")
    parser.add_argument("--work", help="folder for generated data (default: a temp folder, removed after)")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args, beam_args = parser.parse_known_args(argv)

    if args.child:
        kind, *rest = args.child
        info = child_beam(rest[0], rest[1], beam_args) if kind == "beam" else child_polars(rest[0])
        info["peak_rss_mb"] = peak_rss_mb()
        print(json.dumps(info))
        return 0

    n = 200_000 if args.smoke else args.battles
    rows_per_day = min(args.rows_per_day, 50_000) if args.smoke else args.rows_per_day
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    fractions = [0.0] if args.bad_rows == 0 else [0.0, args.bad_rows]
    rows = []
    load_start = os.getloadavg()[0]
    try:
        for size in (n,) if args.no_double else (n, 2 * n):
            for bad in fractions:
                data = work / f"n{size}-bad{bad}"
                generate(data, size, rows_per_day, bad, seed=size)
                disk = sum(p.stat().st_size for p in (data / "battles").rglob("*.parquet")) / 2**20
                state = work / f"state{size}"
                shutil.rmtree(state, ignore_errors=True)
                polars_info = run_child(child_command(__file__, "--child", "polars", str(data)))
                beam_info = run_child(child_command(__file__, "--child", "beam", str(data), str(state), *beam_args))
                assert beam_info["read"] == polars_info["read"], (beam_info, polars_info)
                rows.append((size, bad, disk, beam_info, polars_info))
                shutil.rmtree(state, ignore_errors=True)
                shutil.rmtree(data, ignore_errors=True)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    print_table(rows, rows_per_day, load_start)
    return 0


def _workers(info: dict) -> str:
    threads = info["threads"]
    return f"{threads}{'p' if info.get('processes') else ''}" if threads else "-"


def print_table(rows: list[tuple], rows_per_day: int, load_start: float) -> None:
    """One table: clean and dirty runs at each N side by side; rows/s counts every row read, bad ones too.

    ``workers``: Beam's worker threads, ``p`` when forked processes did their days' work (``-``: Beam's own
    setting, e.g. from ``--direct_*`` flags).  ``cpu s``: CPU
    seconds of each side (its workers included), which a loaded machine inflates less than wall time; the
    target is on wall time (``a/b``).
    """
    print(
        f"ingest benchmark ({os.cpu_count()} cores, 1-min load average {load_start:.2f} at the start, "
        f"{os.getloadavg()[0]:.2f} at the end), days of {rows_per_day:,} valid rows"
    )
    header = (
        f"{'battles':>11} {'bad':>6} {'rows':>11} {'days':>5} {'MB':>6} | {'workers':>7} {'beam s':>7} {'cpu s':>6} "
        f"{'rows/s':>11} {'RSS MB':>7} | {'polars s':>8} {'cpu s':>6} {'rows/s':>11} {'RSS MB':>7} | "
        f"{'a/b':>5} {'cpu a/b':>7}"
    )
    print(header)
    print("-" * len(header))
    ratios = {}
    for size, bad, disk, beam_info, polars_info in rows:
        b, p = beam_info["seconds"], polars_info["seconds"]
        ratios[size, bad] = b / p
        print(
            f"{size:>11,} {bad:>6.2%} {beam_info['read']:>11,} {beam_info['days']:>5} {disk:>6.0f} | "
            f"{_workers(beam_info):>7} {b:>7.2f} {beam_info['cpu']:>6.1f} {beam_info['read'] / b:>11,.0f} "
            f"{beam_info['peak_rss_mb']:>7.0f} | {p:>8.2f} {polars_info['cpu']:>6.1f} "
            f"{polars_info['read'] / p:>11,.0f} {polars_info['peak_rss_mb']:>7.0f} | {b / p:>5.2f} "
            f"{beam_info['cpu'] / polars_info['cpu']:>7.2f}"
        )
    for size in sorted({r[0] for r in rows}):
        dirty = [bad for s, bad in ratios if s == size and bad > 0]
        for bad in dirty:
            print(f"N={size:,}: a/b with {bad:.2%} bad rows / a/b clean = {ratios[size, bad] / ratios[size, 0.0]:.2f}")
    for bad in sorted({r[1] for r in rows}):
        rss = [r[3]["peak_rss_mb"] for r in rows if r[1] == bad]
        if len(rss) == 2:
            print(f"beam peak RSS at 2N / at N (bad rows {bad:.2%}): {rss[1] / rss[0]:.2f}")


if __name__ == "__main__":
    sys.exit(main())
