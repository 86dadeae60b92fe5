"""Benchmark: the check for battle ids counted on two days (:mod:`biasboard.transforms.repeated_ids`) as history grows.

What it runs: a state holding only what the check reads — each day's manifest and its sorted id hashes, written
by the state's own writer — for H and 2H days of ``--per-day`` battles, then in one run, for both histories:

* **full**: every day counted (a backfill, or the first refresh after an upgrade);
* **+1 day**: one new day counted against every stored day (a daily refresh);
* **nothing new**: the kept counts reused (a refresh with nothing new, or only later days);

time (fastest of ``--repeat``) and the ratios 2H / H, and the bytes of hashes stored at H (the files as written).
Then what the ingest pays to hash a day's ids with the stored hash
(:func:`~biasboard.schemas.string_hash.string_hash`, stable across library versions) against polars' own hash (stable
within a polars version only), side by side on the same ids.  The new day repeats ``--repeat-share`` of an earlier
day's ids so the count is checked too.  Defaults: 60 days of 333,334 battles (bench/scale.py's N: 20M battles);
``--smoke`` is 6 days of 20,000.

    .venv/bin/python bench/repeated_ids.py
    .venv/bin/python bench/repeated_ids.py --smoke
"""

from __future__ import annotations

import argparse
import datetime as dt
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
from biasboard.transforms import state
from biasboard.transforms.repeated_ids import CACHE_FILE, IDS_FILE, ids_table, repeated_ids
from biasboard.transforms.validate import _HASH_SEEDS, first_hash


def day_name(i: int) -> str:
    return (dt.date(2024, 1, 1) + dt.timedelta(days=i)).isoformat()


def day_hashes(i: int, per_day: int) -> np.ndarray:
    """Day i's battle ids hashed as the ingest hashes them (distinct ids: ``d{i}-{k}``)."""
    return first_hash(pl.Series([f"d{i}-{k}" for k in range(per_day)]))


def hash_cost(per_day: int, repeat: int) -> list[tuple[str, float, float]]:
    """ms per million ids of the stored hash and of polars' hash, fastest of ``repeat`` interleaved runs each, on
    uuid-style ids (one length: the strided path) and on the bench's ``d{i}-{k}`` ids (lengths vary)."""
    rng = np.random.default_rng(0)
    kinds = {
        "uuid-style (36 chars)": pl.Series(
            [f"{x:032x}"[:8] + f"-{x:032x}"[8:35] for x in rng.integers(0, 2**62, per_day)]
        ),
        "d{i}-{k} (5-10 chars)": pl.Series([f"d{per_day % 97}-{k}" for k in range(per_day)]),
    }
    rows = []
    for name, ids in kinds.items():
        ours, theirs = [], []
        for _ in range(repeat):
            started = time.perf_counter()
            first_hash(ids)
            ours.append(time.perf_counter() - started)
            started = time.perf_counter()
            ids.hash(_HASH_SEEDS[0]).to_numpy()
            theirs.append(time.perf_counter() - started)
        rows.append((name, 1e9 * min(ours) / len(ids), 1e9 * min(theirs) / len(ids)))
    return rows


def write_day(state_dir: str, i: int, ids: pa.Table) -> None:
    """Day i's ids file and a manifest that counts them, as the ingest writes it (the check sizes its work by it)."""
    state.write_day(state_dir, day_name(i), {"counts": {"counted": ids.num_rows}}, {IDS_FILE: ids})


def write_days(state_dir: str, first: int, last: int, per_day: int) -> None:
    for i in range(first, last):
        write_day(state_dir, i, ids_table(day_hashes(i, per_day)))


def check(state_dir: str) -> tuple[float, int]:
    days = state.list_state_days(state_dir)
    manifests = [state.read_day_manifest(state_dir, d) or {} for d in days]
    started = time.perf_counter()
    found = repeated_ids(state_dir, days, manifests)
    return time.perf_counter() - started, found.total


def measure(state_dir: str, history: int, per_day: int, share: float, repeat: int) -> dict[str, tuple[float, int]]:
    """The three checks on a state of ``history`` days (already written) plus one new day repeating ids."""
    cache = Path(state_dir) / CACHE_FILE
    out: dict[str, tuple[float, int]] = {}
    runs = []
    for _ in range(repeat):
        cache.unlink(missing_ok=True)
        runs.append(check(state_dir))
    out["full"] = min(runs)
    new = day_hashes(history, per_day)
    new[: int(share * per_day)] = day_hashes(0, per_day)[: int(share * per_day)]  # the first day's ids again
    kept = cache.read_text()  # the history's counts, put back before each +1 day run
    runs = []
    write_day(state_dir, history, ids_table(np.unique(new)))
    for _ in range(repeat):
        cache.write_text(kept)
        runs.append(check(state_dir))  # recounts the new day only (the kept counts cover the rest)
    state.delete_day(state_dir, day_name(history))
    out["+1 day"] = min(runs)
    out["nothing new"] = min(check(state_dir) for _ in range(repeat))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, default=60, help="H (the run also does 2H)")
    parser.add_argument("--per-day", type=int, default=333_334)
    parser.add_argument("--repeat-share", type=float, default=0.01)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="6 days of 20,000 battles")
    args = parser.parse_args(argv)
    if args.smoke:
        args.days, args.per_day, args.repeat = 6, 20_000, 1
    with tempfile.TemporaryDirectory() as work:
        state_dir = str(Path(work) / "state")
        results = {}
        write_days(state_dir, 0, args.days, args.per_day)
        results["H"] = measure(state_dir, args.days, args.per_day, args.repeat_share, args.repeat)
        # The H days' hash files as stored (the +1 day is gone again): measured, not the 8 bytes of a hash assumed.
        stored = sum(path.stat().st_size for path in Path(state_dir).rglob(IDS_FILE))
        write_days(state_dir, args.days, 2 * args.days, args.per_day)
        results["2H"] = measure(state_dir, 2 * args.days, args.per_day, args.repeat_share, args.repeat)
    expected = int(args.repeat_share * args.per_day)
    battles = args.days * args.per_day
    print(f"history H = {args.days} days of {args.per_day:,} battles ({battles:,}), 2H = twice the days")
    print(f"{'check':14} {'H s':>8} {'2H s':>8} {'2H / H':>7}  repeats found (expected: +1 day {expected:,})")
    for name in ("full", "+1 day", "nothing new"):
        (t1, n1), (t2, n2) = results["H"][name], results["2H"][name]
        # under a millisecond both ("nothing new" reads nothing) the ratio is of timer noise: not printed
        ratio = f"{t2 / t1:6.2f}x" if min(t1, t2) >= 1e-3 else f"{'-':>7}"
        print(f"{name:14} {t1:8.3f} {t2:8.3f} {ratio}  {n1:,} / {n2:,}")
    print(f"hashes stored: {stored / battles:.2f} bytes a battle ({stored / 2**20:,.1f} MB at H, as written)")
    print(f"\nhashing a day's ids ({args.per_day:,}; fastest of {max(args.repeat, 3)}), ms per million ids:")
    print(f"{'ids':24} {'stored hash':>12} {'polars hash':>12} {'ratio':>7}")
    for name, ours, theirs in hash_cost(args.per_day, max(args.repeat, 3)):
        print(f"{name:24} {ours:12.1f} {theirs:12.1f} {ours / theirs:6.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
