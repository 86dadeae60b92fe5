"""Cost of ``--reference`` on voter-judges (issue 11): the refresh's fit with and without a human pool as reference.

The cells are ``bench/fit.py --voters N``'s: simulated battles (default 1M, 100 models, 8 judges of which 2
human pools), each human pool split into N voters, every voter its own judge (the judge-blocked solver).
Two fits of the same cells, each in a fresh process, run as ``refresh`` runs them
(:func:`~biasboard.ranking.reference.fit_with_reference`, profiles off):

- ``none``: no reference (style control): the naive board and the bias-aware one;
- ``pool``: ``--reference 'human-pool-1/*'``: the first pool's voters are the reference, the gate decides over
  the other pool's voters and the LLM judges (a fit with every correction on, then the published one; the
  gate, the relative bias table and the reference rating from the blocked factorisation);
- ``pool_streamed``: the same on the cells coded onto disk and read a shard at a time by every evaluation, as
  ``refresh`` fits a history above ``BIASBOARD_STREAM_CELLS`` (:mod:`biasboard.ranking.stream`; the cells read
  as one table first, then coded bucket by bucket): its ratings must equal the in-memory ones.

Printed side by side: wall and CPU time, peak RSS, the gate's groups and the size of the summary's reference
section, and the time the agreement with the reference's verdicts takes inside the fit.  Usage::

    .venv/bin/python bench/reference_voters.py --voters 25000     # issue 11's size (a few minutes)
    .venv/bin/python bench/reference_voters.py --smoke            # 50k battles, 500 voters per pool
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
from benchlib import CHILD_ENV, child_command, peak_rss_mb, run_child

HERE = Path(__file__).resolve().parent
REFERENCE = "human-pool-1/*"


def worker(kind: str, cells_path: Path) -> dict:
    """One reference fit in this (fresh) process."""
    from biasboard.ranking import ModelConfig
    from biasboard.ranking.data import read_cells
    from biasboard.ranking.reference import Reference, fit_with_reference
    from biasboard.ranking.stream import TableBuckets, stream_dataset

    agreement_s = _timed_agreement()
    t0, c0 = time.perf_counter(), time.process_time()
    reference = Reference.parse("none" if kind == "none" else REFERENCE, False)
    cells = list(read_cells(cells_path))
    data = None
    if kind == "pool_streamed":
        buckets = TableBuckets(pa.Table.from_batches(cells))
        del cells
        data = stream_dataset(buckets)
        del buckets
    try:
        fit = fit_with_reference(
            cells if data is None else data, reference=reference, config=ModelConfig(profile=False)
        )
    finally:
        if data is not None and data.stream is not None:
            data.stream.close()
    out = {
        "wall_s": time.perf_counter() - t0,
        "cpu_s": time.process_time() - c0,
        "peak_rss_mb": peak_rss_mb(),
        "judges": int(fit.corrected.bias.filter(fit.corrected.bias["effect"] == "position").height - 1),
        "summary_bytes": len(json.dumps(fit.summary(), default=str)),
        "unidentified": sum(e.get("n_judges", 1) for e in fit.unidentified),
        "models": list(fit.corrected.models),
        "rating": fit.corrected.rating.tolist(),
        "agreement_s": sum(agreement_s),
        "agreement_rows": len(fit.agreement),
    }
    if fit.gate is not None:
        out["raters"] = fit.n_raters
        out["gate"] = gate_groups(fit.gate.decisions)
    return out


def gate_groups(decisions: pl.DataFrame) -> list[dict]:
    """The gate's test groups, one row each: an effect is tested in a group per voter pool and one for the other
    judges (:func:`~biasboard.ranking.gate.judge_pools`, as ``run_gate`` splits them), each with its own χ² and
    Holm p — one row per effect showed only its first group (the pool's) and left the LLM judges' decision out."""
    from biasboard.ranking.gate import judge_pools

    rows = []
    for (effect,), part in decisions.group_by("effect", maintain_order=True):
        for pool, members in judge_pools(np.asarray(part["judge"].to_list(), dtype=object)):
            first = part.row(int(members[0]), named=True)
            rows.append(
                {
                    "group": effect if pool is None else f"{effect} ({pool}/*)",
                    "judges": int(members.size),
                    **{k: first[k] for k in ("enabled", "group_chi2", "group_df", "group_p_holm")},
                }
            )
    return rows


def _timed_agreement() -> list[float]:
    """The wall seconds of each ``reference_agreement`` of the fit (the agreement with the reference's verdicts,
    scored over all its voters' cells), appended to the list returned."""
    from biasboard.ranking import reference as ref_module

    seconds: list[float] = []
    real = ref_module.reference_agreement

    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            seconds.append(time.perf_counter() - t0)

    ref_module.reference_agreement = timed
    return seconds


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(HERE))
    import fit as fit_bench  # the voter cells of bench/fit.py --voters

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    fit_bench.add_problem_arguments(parser)
    parser.add_argument("--voters", type=int, default=25_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=HERE / "out" / "reference_voters")
    parser.add_argument("--smoke", action="store_true", help="50k battles, 20 models, 4 judges, 500 voters per pool")
    parser.add_argument("--worker", choices=["none", "pool", "pool_streamed"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    cells = args.out / "cells_voters.parquet"
    if args.worker:
        print(json.dumps(worker(args.worker, cells)))
        return 0
    if args.smoke:
        args.battles, args.models, args.judges, args.days, args.voters = 50_000, 20, 4, 2, 500
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    _, n_cells = fit_bench.simulate_voters(args, args.out)
    print(
        f"simulated {args.battles:,} battles, {args.models} models, {args.judges} judges (2 human pools, each split "
        f"into {args.voters:,} voters): {n_cells:,} voter cells ({time.perf_counter() - t0:.1f} s); "
        f"BLAS threads per fit process: {CHILD_ENV['OPENBLAS_NUM_THREADS']}"
    )
    me = [str(Path(__file__).resolve()), "--out", str(args.out)]
    rows = {kind: run_child(child_command(*me, "--worker", kind)) for kind in ("none", "pool", "pool_streamed")}
    base = rows["none"]
    print(
        f"\n{'fit_with_reference (profiles off)':36} {'wall s':>8} {'ratio':>6} {'CPU s':>7} {'ratio':>6} {'RSS MB':>7}"
    )
    labels = {"none": "--reference none", "pool": f"--reference '{REFERENCE}'", "pool_streamed": "the same, streamed"}
    for kind, label in labels.items():
        r = rows[kind]
        print(
            f"{label:36} {r['wall_s']:8.2f} {r['wall_s'] / base['wall_s']:5.2f}x {r['cpu_s']:7.2f} "
            f"{r['cpu_s'] / base['cpu_s']:5.2f}x {r['peak_rss_mb']:7.0f}"
        )
    pool, streamed = rows["pool"], rows["pool_streamed"]
    assert streamed["models"] == pool["models"]
    gap = max(abs(a - b) for a, b in zip(pool["rating"], streamed["rating"], strict=True))
    print(f"streamed vs in memory: max |Δ published rating| {gap:.1e}")
    print(f"\njudges {pool['judges']:,}, of which reference voters {pool['raters']:,}")
    for group in pool["gate"]:
        print(
            f"  gate {group['group']:26} {group['judges']:7,} judges  enabled={group['enabled']!s:5} "
            f"chi2 {group['group_chi2']:10.1f} on {group['group_df']:6} df, Holm p {group['group_p_holm']:.3g}"
        )
    print(f"prior-selected (judge, effect) corrections: {pool['unidentified']:,}")
    for kind in ("pool", "pool_streamed"):
        r = rows[kind]
        print(
            f"agreement with the reference ({kind}): {r['agreement_s']:.2f} s of the fit's {r['wall_s']:.2f} s, "
            f"{r['agreement_rows']} rows"
        )
    print(
        f"summary's reference section: {pool['summary_bytes'] / 1e6:.2f} MB "
        f"(none: {base['summary_bytes'] / 1e6:.2f} MB)"
    )
    return 0 if gap < 1e-8 else 1


if __name__ == "__main__":
    raise SystemExit(main())
