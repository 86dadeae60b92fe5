"""Benchmark: what the audit's clusters closed over the history cost, day by day and at the sum.

The audit keeps each day's partials (``STATE/audit_days/day=D/``) and sums the stored days; since its
clustered SEs may close a (judge, prompt) cluster over the whole history (:mod:`biasboard.audit.measures`,
``HISTORY_CLOSURE_MAX_KEYS``), each day also keeps its clusters' sums keyed by (judge, prompt), and the sum
re-keys them across days when the history holds few distinct keys.  This bench measures, in one process per
step (its own peak RSS), on ``--days`` days of ``--rows-per-day`` battles:

  days       auditing each day and storing its partials (as ``AuditDayFn``): seconds and stored KB per day;
  full       summing the stored days and writing the audit (``write_stored_sum``; the summed-days cache kept);
  +1 day     one more day, summed onto the cache (what a daily refresh runs).

Two kinds of history (``--prompts``):

  0 (default)   arena-like: every battle its own prompt (the keys are many and never recur);
  N             a fixed prompt set of N prompts judged every day (the keys are few and recur every day).

    python bench/audit_history.py                          # 10 days of 200k battles, unique prompts
    python bench/audit_history.py --prompts 500            # the same on a fixed set of 500 prompts
    python bench/audit_history.py --smoke                  # 3 days of 20k battles, seconds
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl
from benchlib import child_command, peak_rss_mb, run_child

MODELS = 40
FAMILIES = ("openai", "anthropic", "google", "meta")


def generate(folder: Path, days: int, rows: int, prompts: int, judges: int, seed: int) -> list[Path]:
    """``days`` day folders of battles: ``judges`` judges, 40 models of 4 families, one shown order drawn at random,
    lengths and verdicts at random; ``prompts`` 0: a prompt per battle, else drawn from a fixed set of that many."""
    rng = np.random.default_rng(seed)
    out = []
    for d in range(days):
        a, b = rng.integers(0, MODELS, rows), rng.integers(0, MODELS - 1, rows)
        b = np.where(b >= a, b + 1, b)
        prompt = np.arange(rows) if prompts == 0 else rng.integers(0, prompts, rows)
        day = f"2024-01-{d + 1:02d}"
        prefix = f"d{d}-p" if prompts == 0 else "p"
        frame = pl.DataFrame(
            {
                "i": np.arange(rows),
                "j": rng.integers(0, judges, rows),
                "p": prompt,
                "a": a,
                "b": b,
                "winner": np.array(["model_a", "model_b", "tie", "tie (bothbad)"])[
                    rng.choice(4, rows, p=[0.45, 0.4, 0.1, 0.05])
                ],
                "len_a": rng.integers(50, 2000, rows),
                "len_b": rng.integers(50, 2000, rows),
                "family_a": np.array(FAMILIES)[a % 4],
                "family_b": np.array(FAMILIES)[b % 4],
            }
        ).select(
            pl.format("d{}-{}", pl.lit(d), "i").alias("battle_id"),
            pl.lit(f"{day}T12:00:00Z").alias("ts"),
            pl.format("j{}", "j").alias("judge"),
            pl.format(prefix + "{}", "p").alias("prompt_id"),
            pl.format("m{}", "a").alias("model_a"),
            pl.format("m{}", "b").alias("model_b"),
            "winner",
            "len_a",
            "len_b",
            "family_a",
            "family_b",
            pl.col("j").mod(4).replace_strict(dict(enumerate(FAMILIES)), return_dtype=pl.String).alias("judge_family"),
        )
        path = folder / f"day={day}"
        path.mkdir(parents=True)
        frame.write_parquet(path / "part-0.parquet")
        out.append(path)
    return out


def child(step: str, data: str, state: str, out: str) -> dict:
    """One measured step in this process: ``days`` audits and stores every day not stored yet; ``sum:N`` sums the
    first N stored days (the summed-days cache read and written, as the refresh does)."""
    from biasboard.transforms import audit as taudit
    from biasboard.transforms import read

    days = read.list_input_days(str(Path(data) / "day=*" / "*.parquet"))
    families = read.load_family_map(None)
    start = time.perf_counter()
    result: dict = {}
    if step == "days":  # one at a time beside the days stored before it, as daily refreshes store them
        history = getattr(taudit, "stored_history_sketch", None)  # (absent before the history closure)
        per_day, sizes, stored = [], [], []
        for day, files in sorted(days.items()):
            started = time.perf_counter()
            extra = {"history": history(state, stored)} if history is not None else {}
            list(taudit.AuditDayFn(state, families, None, **extra).process((day, files, "k")))
            stored.append(day)
            per_day.append(time.perf_counter() - started)
            folder = Path(taudit.day_partials_dir(state, day))
            sizes.append({f.stem: f.stat().st_size for f in folder.glob("*.parquet")})
        result = {"per_day_s": per_day, "sizes": sizes}
    else:
        n = int(step.split(":")[1])
        names = sorted(days)[:n]
        taudit.write_stored_sum(names, state, out, {day: "k" for day in names})
        clusters = json.loads((Path(out) / taudit.AUDIT_JSON).read_text())["clusters"]
        result = {"clusters": clusters}
    return {**result, "seconds": time.perf_counter() - start, "peak_rss_mb": peak_rss_mb()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--days", type=int, default=10)
    parser.add_argument("--rows-per-day", type=int, default=200_000)
    parser.add_argument("--prompts", type=int, default=0, help="0: a prompt per battle; N: a fixed set of N prompts")
    parser.add_argument("--judges", type=int, default=8)
    parser.add_argument("--smoke", action="store_true", help="3 days of 20k battles")
    parser.add_argument("--child", nargs=4, metavar=("STEP", "DATA", "STATE", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(*args.child)))
        return 0
    days, rows = (3, 20_000) if args.smoke else (args.days, args.rows_per_day)
    work = Path(tempfile.mkdtemp(prefix="bench-audit-history-"))
    try:
        generate(work / "data", days, rows, args.prompts, args.judges, seed=1)
        data, state, out = str(work / "data"), str(work / "state"), str(work / "out")

        def step(name: str) -> dict:
            return run_child(child_command(__file__, "--child", name, data, state, out))

        stored = step("days")
        full = step(f"sum:{days - 1}")
        plus = step(f"sum:{days}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    kind = "a prompt per battle" if args.prompts == 0 else f"a fixed set of {args.prompts:,} prompts"
    per_day = stored["per_day_s"]
    kb = [sum(s.values()) / 1024 for s in stored["sizes"]]
    closed = [sum(v for k, v in s.items() if k.startswith("closed")) / 1024 for s in stored["sizes"]]
    print(f"\naudit over {days} days of {rows:,} battles, {args.judges} judges, {kind}")
    print(f"  a day audited and stored: {np.median(per_day):.2f} s (median), {np.median(kb):,.0f} KB stored "
          f"(of which the keyed cluster sums {np.median(closed):,.0f} KB)")  # fmt: skip
    print("  per day: " + ", ".join(f"{t:.2f} s {k:,.0f} KB" for t, k in zip(per_day, kb, strict=True)))
    for name, res in ((f"full sum of {days - 1} days", full), ("+1 day onto the cache", plus)):
        c = res["clusters"]
        print(f"  {name}: {res['seconds']:.2f} s, peak {res['peak_rss_mb']:,.0f} MB; closed over "
              f"{c.get('closed_over', 'day')}, {c['distinct_keys']:,} distinct keys of {c['day_keys']:,}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
