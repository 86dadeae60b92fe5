"""Which judge solver ``judge_solver='auto'`` should pick: the dense and the judge-blocked fit side by side as the
judges grow, on real crowd votes and on 1M simulated battles.

- **LLMFAO's crowd per worker** (the vendored ``tests/data/llmfao/crowd-comparisons.csv``, imported with
  ``--voters``): the J most active of its 124 workers as judges;
- **1M simulated battles** (``bench/fit.py --voters``' simulation: 6 LLM judges and 2 human pools) with each
  pool's voters merged into G groups (cells add up), so J = 6 + 2G (skipped by ``--smoke``).

Each fit's CPU time is the best of ``--repeat`` in-process runs, dense and blocked alternating, in one child
process with BLAS pinned to one thread, with the profile likelihoods of ``--diagnostics`` (default ``off``);
``max |Δ rating|`` says both reach the same MAP.  ``auto`` is blocked from
:data:`biasboard.ranking.config.BLOCKED_MIN_JUDGES` judges on, by diagnostics mode (pair cells only).

Usage::

    .venv/bin/python bench/judge_solver.py                      # both parts (~1 minute on 2 cores)
    .venv/bin/python bench/judge_solver.py --diagnostics full   # with refresh's default profiles (~5 minutes)
    .venv/bin/python bench/judge_solver.py --smoke              # the LLMFAO part only, one run each (seconds)
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from benchlib import run_child

HERE = Path(__file__).resolve().parent
CROWD = HERE.parent / "tests" / "data" / "llmfao" / "crowd-comparisons.csv"
WORKERS = (4, 8, 16, 32, 64, 124)
GROUPS = (1, 5, 9, 13, 29, 64)


def _compare(cells, repeat: int, diagnostics: str) -> dict:
    """Dense vs blocked on one set of cells: best CPU seconds, iterations, max |Δ rating|."""
    import numpy as np
    from biasboard.ranking import ModelConfig, build_dataset, fit_bias_aware

    data = build_dataset(cells)
    best = {"dense": np.inf, "blocked": np.inf}
    fits = {}
    for _ in range(repeat):
        for solver in best:
            c0 = time.process_time()
            config = ModelConfig(diagnostics=diagnostics, judge_solver=solver)
            fits[solver] = fit_bias_aware(data, config=config)
            best[solver] = min(best[solver], time.process_time() - c0)
    return {
        "judges": len(data.judges),
        "cells": len(data.pairs.n),
        "dense_s": best["dense"],
        "blocked_s": best["blocked"],
        "iterations": [fits["dense"].iterations, fits["blocked"].iterations],
        "max_diff": float(np.max(np.abs(fits["dense"].rating - fits["blocked"].rating))),
    }


def crowd_rows(repeat: int, diagnostics: str) -> list[dict]:
    """The LLMFAO crowd with its J most active workers as judges, for each J in :data:`WORKERS`."""
    import polars as pl
    from biasboard.importers.common import ImportOptions
    from biasboard.importers.registry import import_path
    from biasboard.schemas.families import FamilyMap
    from biasboard.transforms.cells import partial_cells

    votes = pl.from_arrow(import_path("llmfao", CROWD, ImportOptions(voters=True)).rows)
    by_activity = votes["judge"].value_counts(sort=True)["judge"].to_list()
    rows = []
    for j in WORKERS:
        kept = votes.filter(pl.col("judge").is_in(by_activity[:j]))
        cells = partial_cells(kept.to_arrow(), FamilyMap.with_user_rules()).cells
        rows.append({"data": f"LLMFAO crowd, {kept.height:,} votes", **_compare(cells, repeat, diagnostics)})
    return rows


def simulated_rows(repeat: int, diagnostics: str) -> list[dict]:
    """1M simulated battles, each human pool's voters merged into G groups, for each G in :data:`GROUPS`."""
    import polars as pl
    from fit import simulate_voters

    args = argparse.Namespace(battles=1_000_000, models=100, judges=8, days=4, seed=0, voters=25_000)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        simulate_voters(args, Path(tmp))
        cells = pl.read_parquet(Path(tmp) / "cells_voters.parquet")
    voter = cells["judge"].str.extract(r"^(human-pool-\d+)/v(\d+)$", 1)
    number = cells["judge"].str.extract(r"/v(\d+)$", 1).cast(pl.Int64)
    for g in GROUPS:
        grouped = pl.when(voter.is_null()).then(cells["judge"]).otherwise(voter + "/" + (number % g).cast(pl.String))
        grouped_cells = cells.with_columns(judge=grouped).to_arrow()
        rows.append({"data": "1M simulated battles", **_compare(grouped_cells, repeat, diagnostics)})
    return rows


def child(smoke: bool, repeat: int, diagnostics: str) -> list[dict]:
    sys.path.insert(0, str(HERE))
    return crowd_rows(repeat, diagnostics) + ([] if smoke else simulated_rows(repeat, diagnostics))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="the LLMFAO part only, one run of each fit")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each fit; the fastest counts (default 3)")
    parser.add_argument(
        "--diagnostics",
        choices=("off", "fast", "full"),
        default="off",
        help="profile likelihoods of every fit (default off; refresh's default is full)",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    repeat = 1 if args.smoke else args.repeat
    if args.child:
        print(json.dumps(child(args.smoke, repeat, args.diagnostics)))
        return 0
    from biasboard.ranking.config import BLOCKED_MIN_JUDGES

    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--repeat", str(repeat)]
    rows = run_child([*cmd, "--diagnostics", args.diagnostics, *(["--smoke"] if args.smoke else [])])
    blocked_from = BLOCKED_MIN_JUDGES[args.diagnostics]
    print(
        f"bias-aware fit with diagnostics {args.diagnostics}, CPU s (best of {repeat}); "
        f"auto = blocked from {blocked_from} judges on"
    )
    print(
        f"{'data':32} {'judges':>6} {'cells':>9} {'dense':>7} {'blocked':>7} {'dense/blocked':>13} {'auto':>7}  "
        f"{'iterations':>10} {'max |Δ rating|':>14}"
    )
    for r in rows:
        auto = "blocked" if r["judges"] >= blocked_from else "dense"
        iterations = "/".join(str(i) for i in r["iterations"])
        print(
            f"{r['data']:32} {r['judges']:6d} {r['cells']:9,d} {r['dense_s']:7.3f} {r['blocked_s']:7.3f} "
            f"{r['dense_s'] / r['blocked_s']:12.2f}x {auto:>7}  {iterations:>10} {r['max_diff']:14.1e}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
