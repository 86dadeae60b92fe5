"""Benchmark: a scheduled refresh costs what the new day costs, not what the history costs.

A leaderboard operator refreshes once a day: yesterday's battles arrive as one more ``day=`` folder and
``biasboard refresh`` aggregates it, merges it into the stored cells, re-audits only what changed, refits and
publishes.  This bench measures, each step in a fresh process (its own peak RSS), with the refresh's own
flags at their defaults:

  full       a first refresh over H days of history (fresh state);
  +1 day     one more day arrives, refresh again;
  nothing    refresh again with nothing new (LATEST is kept);

then the history grows to 2H days (one catch-up refresh, not timed) and one more day arrives:

  +1 day @2H  the same daily refresh over twice the history.

Printed side by side in one run: wall time and peak RSS of each step, the ratio (+1 day)/(full) — target
≤ 0.5 — and (+1 day @2H)/(+1 day @H) for time and RSS — flat in history means ≈ 1 (the fit still sees
every cell, but cells are bounded by judges × pairs × bins, not by battles) — and the audit's stages
(``audit_days``: auditing the new days; ``audit_sum``: summing the stored days' partials and writing the
files), the latter at H and 2H.  ``BIASBOARD_STREAM_CELLS`` / ``BIASBOARD_BUCKET_ROWS`` in the environment
reach every step (small values put a small history on the streamed fit and the bucketed merges).

    python bench/incremental.py                 # H = 30 days of 200k battles (6M), then 60 days
    python bench/incremental.py --smoke         # H = 4 days of 20k battles, seconds
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

BUCKET_ROWS_ENV = "BIASBOARD_BUCKET_ROWS"  # (transforms.state's; read here without importing the package)


def child_refresh(data: str, state: str, out: str) -> dict:
    """One ``biasboard refresh`` of ``data``'s battles, as the CLI runs it; wall time, stages, peak RSS."""
    from biasboard.pipelines.refresh import RefreshOptions, refresh

    start = time.perf_counter()
    outcome = refresh(str(Path(data) / "day=*" / "*.parquet"), state, out, [], RefreshOptions())
    seconds = time.perf_counter() - start
    stages: dict[str, float] = {}  # a reused LATEST ran no stage: its manifest's times are an older run's
    if outcome.published is not None and not outcome.published.reused:
        manifest = json.loads((Path(outcome.published.path) / "manifest.json").read_text())
        stages = manifest.get("timings_s", {})
    return {
        "seconds": seconds,
        "stages": stages,
        "aggregated_days": len(outcome.aggregated_days),
        "reused_latest": outcome.published is not None and outcome.published.reused,
        "peak_rss_mb": peak_rss_mb(),
    }


def generate(
    folder: Path, days: int, rows_per_day: int, seed: int, judges: int = 8, both_orders: bool = False
) -> list[Path]:
    """``days`` day folders of simulated battles (40 models, ``judges`` judges, 0.5% bad rows), oldest first;
    ``both_orders``: each sampled battle judged in both orders (the audit's order pairs, one row per judge and
    model pair judged so, then grow with the judges: what its sum by judge bucket is for)."""
    from biasboard.simulate import SimulationConfig, write_simulation

    config = SimulationConfig(
        battles=days * rows_per_day,
        days=days,
        models=40,
        judges=judges,
        both_orders=both_orders,
        bad_rows=0.005,
        seed=seed,
    )
    write_simulation(config, folder, overwrite=True)
    return sorted((folder / "battles").glob("day=*"))


def arrive(days: list[Path], live: Path) -> None:
    """Days arrive: their folders move into the folder the refresh reads."""
    for day in days:
        day.rename(live / day.name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--days", type=int, default=30, help="H: days of history before the first +1 refresh")
    parser.add_argument("--rows-per-day", type=int, default=200_000)
    parser.add_argument("--smoke", action="store_true", help="H = 4 days of 20k battles")
    parser.add_argument("--judges", type=int, default=8, help="simulated judges (default 8)")
    parser.add_argument("--both-orders", action="store_true", help="every battle judged in both orders")
    parser.add_argument("--work", help="folder for generated data (default: a temp folder, removed after)")
    parser.add_argument("--child", nargs=3, metavar=("DATA", "STATE", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child_refresh(*args.child)))
        return 0

    history, per_day = (4, 20_000) if args.smoke else (args.days, args.rows_per_day)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="bench-incremental-"))
    try:
        t0 = time.perf_counter()
        pending = generate(work / "sim", 2 * history + 1, per_day, history, args.judges, args.both_orders)
        print(f"generated {len(pending)} days of {per_day:,} battles in {time.perf_counter() - t0:.0f} s", flush=True)
        live, state, out = work / "live", work / "state", work / "out"
        live.mkdir()

        def step(name: str) -> dict:
            result = run_child(child_command(__file__, "--child", str(live), str(state), str(out)))
            reused = " (LATEST reused)" if result["reused_latest"] else ""
            print(
                f"  {name}: {result['seconds']:.1f} s, {result['aggregated_days']} day(s) aggregated{reused}",
                flush=True,
            )
            return result

        arrive(pending[:history], live)
        steps = {"full": step("full")}
        arrive(pending[history : history + 1], live)
        steps["+1 day"] = step("+1 day")
        steps["nothing new"] = step("nothing new")
        arrive(pending[history + 1 : 2 * history], live)
        step("catch-up to 2H (not compared)")
        arrive(pending[2 * history :], live)
        steps["+1 day @2H"] = step("+1 day @2H")
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    print_table(steps, history, per_day)
    print(f"judges {args.judges}, both orders {args.both_orders}, {BUCKET_ROWS_ENV}={os.environ.get(BUCKET_ROWS_ENV)}")
    return 0


def print_table(steps: dict[str, dict], history: int, per_day: int) -> None:
    print(f"\nincremental refresh ({os.cpu_count()} cores): H = {history} days of {per_day:,} battles")
    names = sorted({stage for s in steps.values() for stage in s["stages"]})
    header = f"{'step':<12} {'days in':>7} {'wall s':>7} {'RSS MB':>7} | " + " ".join(f"{n:>9}" for n in names)
    print(header)
    print("-" * len(header))
    for name, s in steps.items():
        # a stage the step did not run is "-" (the "nothing new" step runs none: it printed nan in every column)
        stage_cols = " ".join(f"{s['stages'][n]:>9.2f}" if n in s["stages"] else f"{'-':>9}" for n in names)
        print(f"{name:<12} {s['aggregated_days']:>7} {s['seconds']:>7.1f} {s['peak_rss_mb']:>7.0f} | {stage_cols}")
    full, inc, inc2 = steps["full"], steps["+1 day"], steps["+1 day @2H"]
    print(f"(+1 day) / (full) wall: {inc['seconds'] / full['seconds']:.2f}   (target ≤ 0.5)")
    print(f"(nothing new) / (full) wall: {steps['nothing new']['seconds'] / full['seconds']:.2f}")
    print(
        f"(+1 day @2H) / (+1 day @H): wall {inc2['seconds'] / inc['seconds']:.2f}, "
        f"peak RSS {inc2['peak_rss_mb'] / inc['peak_rss_mb']:.2f}   (flat in history: ≈ 1)"
    )
    if "audit_sum" in inc["stages"] and "audit_sum" in inc2["stages"]:  # summing the stored days' audit partials
        print(
            f"audit_sum s: full {full['stages'].get('audit_sum', float('nan')):.2f}, +1 day @H "
            f"{inc['stages']['audit_sum']:.2f}, @2H {inc2['stages']['audit_sum']:.2f}: "
            f"@2H / @H {inc2['stages']['audit_sum'] / max(inc['stages']['audit_sum'], 1e-3):.2f}   (flat: ≈ 1)"
        )


if __name__ == "__main__":
    sys.exit(main())
