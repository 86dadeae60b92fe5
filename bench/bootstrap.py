"""Benchmark of the Poisson bootstrap (issue 11.5): the previous sequential engine vs the fast one, in one run.

The same simulated cells as ``bench/fit.py`` (default 1M battles, 100 models, 8 judges → ~530k cells,
through the real ingest function), one bias-aware MAP fit, then the same B replicates (replicate r's
counts drawn from (seed, r), so every path refits the same redrawn data) by

- **old**: the model's own objective per replicate, chord Newton from the MAP with a checked polishing
  step (``refit_nearby``), one replicate after the other — the engine before this benchmark;
- **new, 1 process** and **new, N processes**: :mod:`biasboard.ranking.bootstrap` — a shared first
  gradient at the MAP, chord steps with the MAP's factorisation on a lean gradient, forked workers;
- **cold**: a few replicates solved from a cold start exactly as the fit is (the reference that both
  converge to).

Printed: wall and CPU time (this process and its workers), and how far the new replicates and the
published 95% percentile CIs of θ are from the old ones (max |Δ| over models; both are refits to the
fit's tolerance, so this is the convergence error, not Monte-Carlo noise), plus the chord steps per
replicate and how many replicates needed the damped-Newton fallback.

With ``--voters N`` the cells are ``bench/fit.py --voters N``'s instead (the two human pools split into N voters
each, every voter its own judge: the judge-blocked solver), and the same replicates are refit by the engine as it
is — each judge's own step clipped to ±``bootstrap.JUDGE_STEP`` in the chord and the damped-Newton fallback — and
with the clipping off, and with the fallback's polishing step always evaluated (a Hessian pass and a
factorisation, as before; the engine takes it unevaluated when the fallback converged on a Newton step), in one
process each: wall time, factorisations, fallbacks, and how far they land from cold-start refits; then the engine
again in two processes (:mod:`biasboard.ranking.forked`; the children's factorisations are not counted here),
whose replicates must equal the one-process run's bit for bit.  ``--schemes R`` then refits the first R replicates by
step rules that refresh or eliminate the judges' blocks (:func:`schemes_study`): passes and factorisations each
needs, against the engine's.

Usage::

    .venv/bin/python bench/bootstrap.py            # ~530k cells, 100 replicates (a few minutes)
    .venv/bin/python bench/bootstrap.py --smoke    # 50k battles, 10 replicates (seconds)
    .venv/bin/python bench/bootstrap.py --voters 25000 --replicates 10   # voter-judges: the step clipping
    .venv/bin/python bench/bootstrap.py --voters 25000 --replicates 10 --schemes 3   # and other step rules
    .venv/bin/python bench/bootstrap.py --streamed   # and the engine on the cells streamed from disk
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np
from benchlib import CHILD_ENV
from fit import HERE, add_problem_arguments, simulate


def cpu_seconds() -> float:
    """User + system CPU of this process and of its reaped children (the forked workers)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def timed(fn):
    wall, cpu = time.perf_counter(), cpu_seconds()
    out = fn()
    return out, time.perf_counter() - wall, cpu_seconds() - cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_problem_arguments(parser)
    parser.add_argument("--replicates", type=int, default=100)
    parser.add_argument("--workers", type=int, default=0, help="processes of the new engine (0: one per CPU)")
    parser.add_argument("--cold", type=int, default=3, help="replicates also solved from a cold start")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=HERE / "out" / "bootstrap")
    parser.add_argument("--smoke", action="store_true", help="50k battles, 20 models, 4 judges, 10 replicates")
    parser.add_argument("--voters", type=int, default=0, help="split each human pool into N voter-judges")
    parser.add_argument(
        "--schemes",
        type=int,
        default=0,
        metavar="R",
        help="with --voters: also refit the first R replicates by step rules that refresh or eliminate the judges' "
        "blocks (Newton every step; each judge's block solved by its own Newton with the globals held, then a "
        "chord or a Newton step): passes and factorisations to the fit's tolerance",
    )
    parser.add_argument(
        "--streamed",
        action="store_true",
        help="also the same replicates' engine on the cells streamed from disk (as a refresh above 1M stored "
        "battles runs it): time against the in-memory engine, interval widths",
    )
    args = parser.parse_args(argv)
    if args.schemes and not args.voters:
        parser.error("--schemes compares step rules for voter-judges: give --voters N too")
    if args.smoke:
        args.battles, args.models, args.judges, args.days, args.replicates, args.cold = 50_000, 20, 4, 2, 10, 2
        args.voters = min(args.voters, 500)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.voters:
        return voters_study(args)

    from biasboard.ranking import ModelConfig, build_dataset
    from biasboard.ranking.bootstrap import Engine
    from biasboard.ranking.data import read_cells
    from biasboard.ranking.fit import bootstrap_replicates, solve_bias_aware
    from biasboard.ranking.problem import bias_aware_problem
    from biasboard.ranking.uncertainty import percentile_interval

    workers = args.workers or len(os.sched_getaffinity(0))
    n_cells, _, _ = simulate(args, args.out, arena=False)
    config = ModelConfig(profile=False, seed=args.seed)
    problem = bias_aware_problem(build_dataset(read_cells(args.out / "cells.parquet")), config)
    solution, fit_wall, fit_cpu = timed(lambda: solve_bias_aware(problem, config))
    blas, load = os.environ.get("OPENBLAS_NUM_THREADS"), os.getloadavg()[0]
    print(f"BLAS threads: {blas}; CPUs: {os.cpu_count()}; load average {load:.1f} (other work on the machine)")
    print(
        f"{args.battles:,} battles, {args.models} models, {args.judges} judges -> {n_cells:,} cells; "
        f"MAP fit {fit_wall:.2f} s wall, {fit_cpu:.2f} s CPU ({solution.iterations} Newton iterations)"
    )

    b, tol, max_iter, seed = args.replicates, config.tol, config.max_iter, config.seed

    def replicates(mode: str, n: int = 1):
        return lambda: bootstrap_replicates(problem, solution, b, 1, seed, tol, max_iter, mode=mode, workers=n)

    rows, runs = {}, {}
    old_label = "old: model objective, sequential"
    (old_theta, old_core, _), *rows[old_label] = timed(replicates("refit"))
    for n in sorted({1, workers}):
        runs[n], *rows[f"new: lean chord engine, {n} process{'es' if n > 1 else ''}"] = timed(replicates("fast", n))
    new_theta, new_core, _ = runs[workers]
    same = all(np.array_equal(new_core, other[1]) and np.array_equal(new_theta, other[0]) for other in runs.values())

    old_wall, old_cpu = rows[old_label]
    # Speed-ups, old / this: the header said "wall vs old", which this project's other benches use for this / other
    # (fit.py's "vs arena BT" 0.26x is a quarter of arena-rank's time), so a 1.7x faster engine read as 1.7x slower.
    print(f"\n{b} replicates{'':40} {'wall s':>8} {'CPU s':>8} {'old/this wall':>13} {'old/this CPU':>12}")
    for label, (wall, cpu) in rows.items():
        print(f"{label:52} {wall:8.2f} {cpu:8.2f} {old_wall / wall:12.1f}x {old_cpu / cpu:11.1f}x")
    print("  old/this: the old engine's time over this row's (above 1: this row is faster)")
    print("  target (issue 11.5): 100 replicates <= 10 s wall at ~530k cells")

    lo_old, hi_old = percentile_interval(old_theta)
    lo_new, hi_new = percentile_interval(new_theta)
    print("\nagreement (the same replicates, both refit to the fit's tolerance, 1e-8 relative gradient):")
    print(f"  max |Δ| raw parameters, new vs old:     {np.max(np.abs(new_core - old_core)):.2e}")
    print(
        f"  max |Δ| 95% CI bounds of θ, new vs old: lower {np.max(np.abs(lo_new - lo_old)):.2e}, "
        f"upper {np.max(np.abs(hi_new - hi_old)):.2e} (median CI width {np.median(hi_old - lo_old):.3f})"
    )
    print(f"  new engine: 1 process == {workers} processes, bit for bit: {same}")
    engine = Engine(problem, solution, 1, tol, max_iter, seed)
    sample = [engine.replicate(r) for r in range(min(b, 10))]
    assert np.array_equal(np.array([rep.core for rep in sample]), new_core[: len(sample)])
    steps = np.array([rep.steps for rep in sample])
    print(
        f"  new engine, replicates 0-{len(sample) - 1}: chord steps {steps.min()}-{steps.max()} "
        f"(mean {steps.mean():.1f}), damped-Newton fallbacks {sum(rep.newton for rep in sample)}, "
        f"lean gradient used: {engine.kernel is not None}"
    )
    if args.streamed:
        streamed_study(
            args,
            config,
            rows[f"new: lean chord engine, {workers} process{'es' if workers > 1 else ''}"],
            new_theta,
            workers,
        )
    if args.cold:
        (_, cold_core, _), wall, _ = timed(
            lambda: bootstrap_replicates(problem, solution, args.cold, 1, seed, tol, max_iter, mode="cold")
        )
        print(
            f"  cold-start refits of replicates 0-{args.cold - 1} ({wall / args.cold:.1f} s each): "
            f"max |Δ| raw parameters vs new {np.max(np.abs(new_core[: args.cold] - cold_core)):.2e}, "
            f"vs old {np.max(np.abs(old_core[: args.cold] - cold_core)):.2e}"
        )
    return 0


def streamed_study(args, config, in_memory: tuple[float, float], theta: np.ndarray, workers: int) -> None:
    """The same cells streamed from disk (shards of 2¹⁸ cells, as the refresh's streamed fit codes them): the
    MAP, then the engine's replicates, each shard's counts redrawn as it is read (other draws than in memory:
    equal in distribution), in ``workers`` processes; wall and CPU time against the in-memory engine's, and
    the median width of the θ intervals against theirs."""
    import pyarrow.parquet as pq
    from biasboard.ranking.fit import bootstrap_replicates, solve_bias_aware
    from biasboard.ranking.problem import bias_aware_problem
    from biasboard.ranking.stream import TableBuckets, stream_dataset
    from biasboard.ranking.uncertainty import percentile_interval

    table = pq.read_table(args.out / "cells.parquet")
    table = table.sort_by([("judge", "ascending")])
    data = stream_dataset(TableBuckets(table, 1 << 18))
    del table
    assert data.stream is not None
    try:
        problem = bias_aware_problem(data, config)
        solution = solve_bias_aware(problem, config)
        b = args.replicates
        (theta_s, _, _), wall, cpu = timed(
            lambda: bootstrap_replicates(
                problem, solution, b, 1, config.seed, config.tol, config.max_iter, workers=workers
            )
        )
        shards = len(data.stream.files.shards)
    finally:
        data.stream.close()
    lo, hi = percentile_interval(theta)
    lo_s, hi_s = percentile_interval(theta_s)
    print(
        f"\nstreamed ({shards} shards on disk, {workers} process{'es' if workers > 1 else ''}): {b} replicates "
        f"{wall:.2f} s wall, {cpu:.2f} s CPU — {wall / in_memory[0]:.2f}x the in-memory engine's wall, "
        f"{cpu / in_memory[1]:.2f}x its CPU; median θ interval width {np.median(hi_s - lo_s):.3f} against "
        f"{np.median(hi - lo):.3f} in memory (ratio {np.median((hi_s - lo_s) / (hi - lo)):.2f}: other draws)"
    )


def voters_study(args) -> int:
    """Voter-judges' replicates with each judge's step clipped (the engine) and not, side by side."""
    from biasboard.ranking import ModelConfig, bootstrap, build_dataset, solver
    from biasboard.ranking.data import read_cells
    from biasboard.ranking.fit import bootstrap_replicates, solve_bias_aware
    from biasboard.ranking.problem import bias_aware_problem
    from fit import simulate_voters

    _, n_cells = simulate_voters(args, args.out)
    config = ModelConfig(profile=False, seed=args.seed)
    problem = bias_aware_problem(build_dataset(read_cells(args.out / "cells_voters.parquet")), config)
    solution, fit_wall, _ = timed(lambda: solve_bias_aware(problem, config))
    print(
        f"{args.battles:,} battles, {args.models} models, {len(problem.data.judges):,} judges (2 human pools split "
        f"into {args.voters:,} voters each) -> {n_cells:,} cells; MAP fit {fit_wall:.2f} s; load average "
        f"{os.getloadavg()[0]:.1f}"
    )
    counts = {"factorisations": 0, "fallbacks": 0}
    factor, fallback = solver.newton_factor, bootstrap.minimize
    polish = {"unevaluated": True}

    def counted_factor(*a, **k):
        counts["factorisations"] += 1
        return factor(*a, **k)

    def counted_fallback(*a, **k):
        counts["fallbacks"] += 1
        return fallback(*a, **{**k, "polish_unevaluated": polish["unevaluated"]})

    solver.newton_factor = bootstrap.newton_factor = counted_factor
    bootstrap.minimize = counted_fallback
    b, tol, max_iter, seed = args.replicates, config.tol, config.max_iter, config.seed
    clip, theta = bootstrap.JUDGE_STEP, problem.layout.theta
    rows = {}
    # Warm-up, untimed: the first timed row was 10-15% slower than the second in two runs where both did the same
    # work (21 factorisations each, no polish after a Newton step): the order, not the rule.
    bootstrap_replicates(problem, solution, min(b, 2), 1, seed, tol, max_iter, workers=1)
    engine = f"clipped to ±{clip:g} (the engine)"
    evaluated = "fallback's polish always evaluated"
    for label, limit, unevaluated in (
        (engine, clip, True),
        (evaluated, clip, False),
        ("not clipped", float("inf"), True),
    ):
        bootstrap.JUDGE_STEP, polish["unevaluated"] = limit, unevaluated
        counts.update(factorisations=0, fallbacks=0)
        (_, cores, _), wall, cpu = timed(
            lambda: bootstrap_replicates(problem, solution, b, 1, seed, tol, max_iter, workers=1)
        )
        rows[label] = (cores, wall, cpu, dict(counts))
    bootstrap.JUDGE_STEP, polish["unevaluated"] = clip, True
    (_, forked_cores, _), forked_wall, forked_cpu = timed(
        lambda: bootstrap_replicates(problem, solution, b, 1, seed, tol, max_iter, workers=2)
    )
    same = np.array_equal(forked_cores, rows[engine][0])
    cold = None
    if args.cold:
        cold = bootstrap_replicates(problem, solution, args.cold, 1, seed, tol, max_iter, mode="cold").cores
    base = rows["not clipped"][1]
    print(
        f"\n{b} replicates, 1 process{'':22} {'wall s':>7} {'CPU s':>7} {'not/this':>8} {'factor.':>8} {'fallbacks':>9}"
        f" {'max |Δ| vs cold':>15} {'of θ':>8}"
    )
    for label, (cores, wall, cpu, c) in rows.items():
        off = "" if cold is None else f"{np.max(np.abs(cores[: args.cold] - cold)):15.1e}"
        off += "" if cold is None else f" {np.max(np.abs(cores[: args.cold, theta] - cold[:, theta])):8.1e}"
        print(
            f"{label:40} {wall:7.2f} {cpu:7.2f} {base / wall:7.2f}x {c['factorisations']:8d} {c['fallbacks']:9d} {off}"
        )
    print(
        f"{'the engine, 2 processes':40} {forked_wall:7.2f} {forked_cpu:7.2f} {base / forked_wall:7.2f}x "
        f"{'—':>8} {'—':>9}   same replicates as 1 process: {same}"
    )
    print(
        "(not/this: the not-clipped row's wall time over this row's, above 1 faster; factorisations include the "
        "engine's one at the MAP; fallbacks: replicates handed to damped Newton, whose polishing step the engine "
        f"takes unevaluated after a Newton step; {evaluated} / the engine, wall: "
        f"{rows[evaluated][1] / rows[engine][1]:.2f}x)"
    )
    if args.schemes:
        schemes_study(problem, solution, config, args.schemes)
    return 0 if same else 1


def schemes_study(problem, solution, config, replicates: int) -> None:
    """Step rules for a voter-judge replicate's refit from the MAP, each to the fit's tolerance, on the model's
    objective in memory (passes counted, not timed: every pass here is a full evaluation).

    The engine's chord with the MAP's factorisation stalls on few-battle voters whose redrawn counts move them far,
    and hands over to damped Newton.  The question this answers: would taking each judge to its conditional optimum
    (its own K × K Newton solve, the globals held — what a pass could do shard by shard while a judge bucket is in
    memory) let the MAP's factorisation serve the globals, with no factorisation per replicate?  Rules:

    - *Newton*: a Hessian pass and a factorisation every step (each judge's step clipped to ±JUDGE_STEP);
    - *eliminated + MAP chord*: per-judge Newton steps (the Hessian's judge blocks, globals held) until the judges'
      gradient is below a tenth of the globals', then one chord step with the MAP's factorisation;
    - *eliminated + Newton*: the same, then one Newton step with a fresh factorisation.
    """
    from biasboard.ranking import bootstrap, solver
    from biasboard.ranking.arrowhead import ArrowFactor, glob_index, judge_index

    lay, free = problem.layout, solution.free
    target = config.tol * solution.scale
    judge_at, glob_at = judge_index(lay), glob_index(lay)
    clip = bootstrap.JUDGE_STEP
    map_factor = solver.newton_factor(solution.evaluation, free)
    objective = problem.objective(1)
    judges = solver.judge_entries(objective, free)
    redraws = bootstrap.Redraws(problem, config.seed)

    def judge_newton(ev) -> np.ndarray:
        """Each judge's own Newton step (globals held, the centring left to the outer step), clipped."""
        on = ev.H.on
        blocks = ev.H.A * (on[:, :, None] & on[:, None, :])
        blocks[~on] += np.eye(lay.n_blocks)[np.nonzero(~on)[1]]
        step = np.zeros(lay.n_core)
        newton = -np.linalg.solve(blocks, np.where(on, ev.g[judge_at], 0.0)[..., None])[..., 0]
        step[judge_at] = np.clip(newton, -clip, clip)
        return step

    def size(ev, at=free) -> float:
        """The gradient's norm over the entries ``at`` (the free core: no prompts on the voters' cells)."""
        return float(np.linalg.norm(ev.g[at]))

    def refit(model, rule: str) -> tuple[np.ndarray, dict[str, int], bool]:
        """The replicate refit by ``rule``: its core, the counts, whether it reached the tolerance."""
        core, diag = solution.core.copy(), solution.diag.copy()
        n = {"outer": 0, "hessian": 1, "factor": 0}
        ev = model.evaluate(core, diag)
        while size(ev) > target and n["outer"] < 60:
            if rule != "Newton":
                for _ in range(20):
                    if size(ev, judge_at) <= 0.1 * max(size(ev, glob_at), target):
                        break
                    core = core + judge_newton(ev)
                    ev, n["hessian"] = model.evaluate(core, diag), n["hessian"] + 1
                if size(ev) <= target:
                    break
            factor = map_factor if rule.endswith("chord") else ArrowFactor.build(ev.H, free)
            if factor is None:  # not positive definite here: the rule stops (printed as not reached)
                break
            n["factor"] += factor is not map_factor
            s, _ = factor.solve(ev.g[free], ev.g_diag)
            solver.clip_judge_steps(s, judges, clip)
            core = core.copy()
            core[free] += s
            ev, n["outer"], n["hessian"] = model.evaluate(core, diag), n["outer"] + 1, n["hessian"] + 1
        return core, n, size(ev) <= target

    print(f"\nstep rules, {replicates} replicate(s) refit from the MAP to the fit's tolerance (passes: Hessian passes)")
    print(f"{'rule':32} {'replicate':>9} {'outer':>6} {'passes':>7} {'factor.':>8} {'max |Δ| vs Newton':>18} reached")
    for r in range(replicates):
        model = redraws.objective(r, 1)
        reference = None
        for rule in ("Newton", "eliminated + MAP chord", "eliminated + Newton"):
            core, n, reached = refit(model, rule)
            reference = core if reference is None else reference
            off = np.max(np.abs(core - reference))
            print(f"{rule:32} {r:9d} {n['outer']:6d} {n['hessian']:7d} {n['factor']:8d} {off:18.1e} {reached}")


if __name__ == "__main__":
    if any(os.environ.get(key) != value for key, value in CHILD_ENV.items()):
        # BLAS pinned to one thread before numpy loads, as for every fit process of bench/fit.py.
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **CHILD_ENV})
    sys.exit(main())
