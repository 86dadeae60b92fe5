"""The bootstrap replicate engine: lean gradient == the model's, parallel == sequential bit for bit,
fast replicates == full refits, exact Poisson draws, and the fallbacks."""

from __future__ import annotations

import numpy as np
import pytest
from biasboard.ranking import ModelConfig, build_dataset, solver
from biasboard.ranking import bootstrap as boot
from biasboard.ranking.fit import bootstrap_replicates, solve_bias_aware
from biasboard.ranking.model import Shard
from biasboard.ranking.problem import bias_aware_problem, naive_problem
from biasboard.ranking.solver import Objective, minimize
from scipy import stats

from tests.test_ranking_api import _league
from tests.test_ranking_model import _cells, _random_problem, _score_cells

TOL, MAX_ITER = 1e-8, 200


@pytest.mark.parametrize("naive", [False, True])
def test_pair_gradient_equals_the_model(naive):
    """At a random point and at a stored point, for redrawn counts (position unknown in 30% of cells, a
    switched-off length effect, a pair weight and a length scale ≠ 1)."""
    full, rng = _random_problem(naive, seed=1)
    pairs = full.shards[0].pairs
    redrawn = boot.CountRedraw(pairs).draw(rng)
    objective = Objective(full.spec, [Shard(redrawn)], full.prior)
    kernel = boot.PairGradient(pairs, full.spec)
    sorted_counts = boot.CountRedraw(pairs, kernel.order)
    # The same replicate in both layouts: the sorted draw is the cells' draw, permuted.
    for got, want in zip(
        sorted_counts.arrays(np.random.default_rng(4)),
        boot.CountRedraw(pairs).arrays(np.random.default_rng(4)),
        strict=True,
    ):
        assert np.array_equal(got, want[kernel.order])
    counts = boot.Counts.of(redrawn.win_a[kernel.order], redrawn.win_b[kernel.order], redrawn.tie[kernel.order], naive)
    for _ in range(3):
        core = 0.3 * rng.standard_normal(full.spec.layout.n_core)
        eff = objective.effective(core)
        want = objective.data_partials(core, np.zeros(full.spec.layout.n_prompts), hessian=False).g
        scale = np.abs(want).max()
        assert np.max(np.abs(kernel.gradient(eff, counts) - want)) < 1e-12 * scale
        assert np.max(np.abs(kernel.at_point(kernel.point(eff), counts) - want)) < 1e-12 * scale


def _dense():
    config = ModelConfig(profile=False)
    problem = bias_aware_problem(build_dataset(_league(np.random.default_rng(5), judges=("j1", "j2", "j3"))), config)
    return problem, solve_bias_aware(problem, config)


def _blocked():
    config = ModelConfig(profile=False, judge_solver="blocked")
    problem = bias_aware_problem(build_dataset(_cells(np.random.default_rng(3), models=7, judges=6, cells=400)), config)
    return problem, solve_bias_aware(problem, config)


def _scores():
    rng = np.random.default_rng(3)
    config = ModelConfig(profile=False)
    problem = bias_aware_problem(build_dataset(_cells(rng), _score_cells(rng)), config)
    return problem, solve_bias_aware(problem, config)


def _naive():
    problem = naive_problem(build_dataset(_league(np.random.default_rng(6))), None)
    return problem, minimize(problem.objective(), *problem.zeros(), tol=TOL, max_iter=MAX_ITER)


PROBLEMS = {"dense": _dense, "blocked": _blocked, "scores": _scores, "naive": _naive}


def test_parallel_replicates_equal_sequential_bit_for_bit():
    """Replicate r depends on (seed, r) only: two processes, one process, and a shorter run agree exactly."""
    problem, solution = _dense()
    run = {w: bootstrap_replicates(problem, solution, 6, 1, 7, TOL, MAX_ITER, workers=w) for w in (1, 2)}
    assert np.array_equal(run[1][0], run[2][0]) and np.array_equal(run[1][1], run[2][1])
    fewer = bootstrap_replicates(problem, solution, 4, 1, 7, TOL, MAX_ITER, workers=2)
    assert np.array_equal(fewer[1], run[1][1][:4])
    other_seed = bootstrap_replicates(problem, solution, 6, 1, 8, TOL, MAX_ITER, workers=1)
    assert np.min(np.abs(other_seed[1] - run[1][1]).max(axis=1)) > 1e-4  # the seed matters


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_fast_replicates_are_full_refits(name):
    """The fast engine lands where the model's own warm refits do (checked polishing step) — on pair
    cells through the lean gradient, with ordinal scores through the model's objective — and, for the
    dense problem, where cold-started fits do (measured: ~1e-14 and ~5e-9)."""
    problem, solution = PROBLEMS[name]()
    engine = boot.Engine(problem, solution, 1, TOL, MAX_ITER, 3)
    assert (engine.kernel is None) == (name == "scores")
    fast = [engine.replicate(r) for r in range(5)]
    # Small problems contract slower than arena-scale ones (6-13 chord steps here, 4-5 at 530k cells).
    assert all(1 <= rep.steps <= 20 for rep in fast)
    assert name == "scores" or not any(rep.newton for rep in fast)
    cores = np.array([rep.core for rep in fast])
    refit = bootstrap_replicates(problem, solution, 5, 1, 3, TOL, MAX_ITER, mode="refit").cores
    assert np.ptp(cores[:, problem.layout.theta], axis=0).min() > 1e-3  # the replicates differ
    assert np.max(np.abs(cores - refit)) < 1e-9
    if name == "dense":
        cold = bootstrap_replicates(problem, solution, 5, 1, 3, TOL, MAX_ITER, mode="cold").cores
        assert np.max(np.abs(cores - cold)) < 1e-7


def test_a_stalled_chord_hands_over_from_its_last_step_when_that_lowered_the_gradient(monkeypatch):
    """A chord step that shrinks the gradient, but less than ``CHORD_RATE``-fold, ends the chord steps; the damped
    Newton that takes over starts from that step's point (its gradient evaluated, and lower), not one step back
    (which, after the first step, is the MAP itself)."""
    problem, solution = _dense()
    monkeypatch.setattr(boot, "CHORD_RATE", 1e-12)  # the first chord step never contracts enough
    starts = []

    def spy(objective, core, diag, **kwargs):
        starts.append((objective, core.copy(), diag.copy()))
        return minimize(objective, core, diag, **kwargs)

    monkeypatch.setattr(boot, "minimize", spy)
    engine = boot.Engine(problem, solution, 1, TOL, MAX_ITER, 2)
    rep = engine.replicate(0)
    assert rep.newton and len(starts) == 1
    objective, core, diag = starts[0]
    assert not np.array_equal(core, solution.core)
    at_start = objective.evaluate(core, diag, hessian=False)
    at_map = objective.evaluate(solution.core, solution.diag, hessian=False)
    assert np.linalg.norm(at_start.g) < 0.5 * np.linalg.norm(at_map.g)


def test_fallbacks_give_the_same_replicates(monkeypatch):
    """A chord step that does not contract hands over to damped Newton; a lean gradient that disagrees
    with the model is not used.  Either way the replicates are the same refits."""
    problem, solution = _dense()
    want = bootstrap_replicates(problem, solution, 4, 1, 2, TOL, MAX_ITER)[1]
    monkeypatch.setattr(boot, "CHORD_RATE", 1e-12)
    engine = boot.Engine(problem, solution, 1, TOL, MAX_ITER, 2)
    reps = [engine.replicate(r) for r in range(4)]
    assert all(rep.newton for rep in reps)
    assert np.max(np.abs(np.array([rep.core for rep in reps]) - want)) < 1e-8
    monkeypatch.undo()
    monkeypatch.setattr(boot.PairGradient, "at_point", lambda self, pt, counts: np.zeros(self.lay.n_eff))
    monkeypatch.setattr(boot.PairGradient, "gradient", lambda self, eff, counts: np.zeros(self.lay.n_eff))
    engine = boot.Engine(problem, solution, 1, TOL, MAX_ITER, 2)
    assert engine.kernel is None
    assert np.max(np.abs(np.array([engine.replicate(r).core for r in range(4)]) - want)) < 1e-9


def test_a_handed_over_replicate_polishes_without_a_hessian_after_a_newton_step(monkeypatch):
    """The damped Newton a replicate hands over to, converged on an undamped Newton step, takes its polishing step
    with that step's factorisation, unevaluated (a replicate needs its point, not its Hessian): one Hessian pass
    fewer, the same replicates as the model's warm refits.  Converged on chord steps, whose
    factorisation is older, it evaluates the polish as before: the same replicates bit for bit."""
    problem, solution = _blocked()
    want = bootstrap_replicates(problem, solution, 4, 1, 2, TOL, MAX_ITER, mode="refit")[1]
    monkeypatch.setattr(boot, "CHORD_RATE", 1e-12)  # every replicate hands over
    evaluate, hessians = Objective.evaluate, []

    def counting(self, core, diag, **kwargs):
        hessians.append(kwargs.get("hessian", True))
        return evaluate(self, core, diag, **kwargs)

    def replicates(unevaluated: bool) -> tuple[np.ndarray, int]:
        def handed_over(objective, core, diag, **kwargs):
            return minimize(objective, core, diag, **{**kwargs, "polish_unevaluated": unevaluated})

        monkeypatch.setattr(boot, "minimize", handed_over)
        engine = boot.Engine(problem, solution, 1, TOL, MAX_ITER, 2)
        hessians.clear()
        reps = [engine.replicate(r) for r in range(4)]
        assert all(rep.newton for rep in reps)
        return np.array([rep.core for rep in reps]), sum(hessians)

    monkeypatch.setattr(Objective, "evaluate", counting)
    after_chords = {unevaluated: replicates(unevaluated) for unevaluated in (True, False)}
    assert after_chords[True][1] == after_chords[False][1]
    assert np.array_equal(after_chords[True][0], after_chords[False][0])
    # Newton steps only (no chord steps after one): the fallback converges on a Newton step.
    monkeypatch.setattr(solver, "_chord_steps", lambda objective, newton, core, diag, ev, *rest: (core, diag, ev, 0))
    unevaluated, cheap = replicates(True)
    evaluated, full = replicates(False)
    assert cheap < full  # 12 against 14 (two of the four converge on a step that foresees no gain: no polish)
    assert np.ptp(want[:, problem.layout.theta], axis=0).min() > 1e-3  # the replicates differ
    # As close to the warm refits as test_fallbacks_give_the_same_replicates asks (measured: 8e-9, both ways).
    assert np.max(np.abs(evaluated - want)) < 1e-8
    assert np.max(np.abs(unevaluated - want)) < 1e-8


def test_small_poisson_is_the_inverse_cdf_of_poisson():
    """The table look-up gives k = min{k : u < F_m(k)} for every uniform (straddling bins included), the
    CDFs are scipy's, and a draw's frequencies pass a χ² test; other means go to Generator.poisson."""
    means = np.array([0, 1, 2, 3, 5, 8, 16, 0.5, 17, 40], float)
    sampler = boot.SmallPoisson(np.repeat(means, 1))
    ks = np.arange(sampler.cdf.shape[1] - 1)
    for m in range(sampler.LARGEST + 1):
        assert np.max(np.abs(sampler.cdf[m, :-1] - stats.poisson.cdf(ks, m))) < 1e-13
    assert np.array_equal(sampler.large, [7, 8, 9])
    u = np.random.default_rng(0).random(200_000)
    u[:4096] = (np.arange(4096) + 0.5) / 4096  # every bin visited
    m = np.arange(u.size) % (sampler.LARGEST + 1)
    grid = boot.SmallPoisson(m.astype(float))
    table = grid.table[grid.row + (u * grid.BINS).astype(np.intp)]
    exact = np.sum(grid.cdf[m] <= u[:, None], axis=1)  # searchsorted(F_m, u, side="right"), row by row
    assert (table < 0).any() and np.array_equal(table[table >= 0], exact[table >= 0])
    draws = boot.SmallPoisson(np.full(100_000, 3.0)).draw(np.random.default_rng(1))
    values, counts = np.unique(draws, return_counts=True)
    expected = stats.poisson.pmf(values, 3.0) * draws.size
    keep = expected > 5
    expected = expected[keep] * counts[keep].sum() / expected[keep].sum()
    assert stats.chisquare(counts[keep], expected).pvalue > 1e-3


def test_worker_count(monkeypatch):
    """Small problems stay in this process; the environment can set the count; a bad value is a clear error."""
    from biasboard.schemas.errors import InputError

    monkeypatch.delenv("BIASBOARD_BOOTSTRAP_WORKERS", raising=False)
    assert boot.default_workers(100, 1_000) == 1
    assert boot.default_workers(100, 530_000) >= 1
    monkeypatch.setenv("BIASBOARD_BOOTSTRAP_WORKERS", "3")
    assert boot.default_workers(100, 1_000) == 3
    monkeypatch.setenv("BIASBOARD_BOOTSTRAP_WORKERS", "two")
    with pytest.raises(InputError, match="BIASBOARD_BOOTSTRAP_WORKERS must be a whole number"):
        boot.default_workers(100, 1_000)


@pytest.mark.parametrize("solver", ["dense", "blocked"])
def test_replicates_added_after_publishing_equal_a_fit_made_with_them(solver):
    """A reference fit publishes a board without replicates, then (when the gate keeps it) adds them from the
    kept solution, reusing its covariance and profiles: the result is the fit made with them from the start."""
    from dataclasses import replace

    from biasboard.ranking.fit import fit_bias_aware, publish_bias_aware

    data = build_dataset(_cells(np.random.default_rng(3), models=7, judges=6, cells=400))
    config = ModelConfig(bootstrap=5, judge_solver=solver)
    problem = bias_aware_problem(data, config)
    solution = solve_bias_aware(problem, config)
    first = publish_bias_aware(problem, solution, replace(config, bootstrap=0))
    assert first.uncertainty == "laplace" and first.diagnostics["profile_likelihood"]
    later = publish_bias_aware(
        problem, solution, config, cov_core=first.state.cov_core, profiles=first.diagnostics["profile_likelihood"]
    )
    direct = fit_bias_aware(data, config=config)
    assert later.uncertainty == direct.uncertainty == "bootstrap"
    for name in ("rating", "se", "ci_low", "ci_high", "p_top_k", "boot_theta"):
        np.testing.assert_array_equal(getattr(later, name), getattr(direct, name), err_msg=name)
    assert later.bias.equals(direct.bias) and later.diagnostics == direct.diagnostics


def test_bench_voters_smoke():
    """``bench/bootstrap.py --smoke --voters 500 --schemes 1`` runs end to end: the replicates of voter-judges with each
    judge's step clipped and not, side by side, both landing on cold-start refits, the engine's in two processes
    equal to its one-process run, and the other step rules each reaching the fit's tolerance near Newton's point."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "bench" / "bootstrap.py"
    args = [sys.executable, str(script), "--smoke", "--voters", "500", "--schemes", "1"]
    out = subprocess.run(args, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "clipped to ±1 (the engine)" in out.stdout and "not clipped" in out.stdout, out.stdout
    assert "same replicates as 1 process: True" in out.stdout, out.stdout
    rules = re.findall(
        r"^(Newton|eliminated \+ MAP chord|eliminated \+ Newton) +0 .* ([\d.e+-]+) (True|False)$", out.stdout, re.M
    )
    assert [rule for rule, _, _ in rules] == ["Newton", "eliminated + MAP chord", "eliminated + Newton"], out.stdout
    assert all(reached == "True" and float(off) < 1e-3 for _, off, reached in rules), out.stdout


def test_bench_smoke_says_which_way_its_ratios_go():
    """``bench/bootstrap.py --smoke`` prints the old engine's time over each row's (a speed-up) under a header that says
    so: it read "wall vs old", which the other benches use for this / other (``bench/fit.py``'s "vs arena BT"), so the
    new engine 1.7× faster read as 1.7× slower."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "bench" / "bootstrap.py"
    out = subprocess.run([sys.executable, str(script), "--smoke"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    assert re.search(r"^10 replicates +wall s +CPU s +old/this wall +old/this CPU$", out.stdout, re.M), out.stdout
    rows = re.findall(r"^(old|new): .*? ([\d.]+) +([\d.]+) +([\d.]+)x +([\d.]+)x$", out.stdout, re.M)
    assert [kind for kind, *_ in rows] == ["old", "new", "new"], out.stdout
    assert rows[0][3] == rows[0][4] == "1.0", out.stdout  # the old engine over itself
    assert "old/this: the old engine's time over this row's (above 1: this row is faster)" in out.stdout


def test_bench_streamed_smoke():
    """``bench/bootstrap.py --smoke --streamed`` runs end to end: the engine on the same cells streamed from disk,
    its θ intervals as wide as the in-memory replicates' (other draws: 0.5–2× at 10 replicates)."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "bench" / "bootstrap.py"
    out = subprocess.run([sys.executable, str(script), "--smoke", "--streamed"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    found = re.search(r"streamed \(\d+ shards on disk.*\(ratio ([\d.]+): other draws\)", out.stdout)
    assert found, out.stdout
    assert 0.5 < float(found.group(1)) < 2.0


def test_the_log_says_what_the_replicates_cost(monkeypatch, caplog):
    """``run`` logs a line per bootstrap: how many replicates, in how many processes, how many handed over to damped
    Newton and how long those took — the one place a slow ``refresh --bootstrap`` says where its time went."""
    problem, solution = _dense()
    engine = boot.Engine(problem, solution, 1, TOL, MAX_ITER, 2)
    with caplog.at_level("INFO", logger=boot.__name__):
        reps = boot.run(engine, 3, workers=1)
    assert "bootstrap: 3 replicates in 1 process(es)" in caplog.text and "0 handed to damped Newton" in caplog.text
    assert all(rep.seconds > 0 for rep in reps)
    monkeypatch.setattr(boot, "CHORD_RATE", 1e-12)
    caplog.clear()
    with caplog.at_level("INFO", logger=boot.__name__):
        reps = boot.run(engine, 3, workers=2)
    steps = sum(rep.steps for rep in reps)
    assert f"3 handed to damped Newton ({steps} steps, " in caplog.text


def test_a_bootstrap_interval_far_wider_than_the_laplace_one_is_named() -> None:
    """A model with 2 wins in 60 battles has none in some replicates, where its naive rating has no maximum and runs
    off: on MT-Bench PBA's stem slice llama-13b's bootstrap interval was [-1931, 803] against a Laplace [318, 794],
    with no word.  Models whose bootstrap interval is 3 or more times their Laplace one are now named."""
    from biasboard.ranking.config import NaiveConfig
    from biasboard.ranking.fit import fit_naive

    from tests.test_ranking_api import _cells as cells_of_rows

    def battles(a: str, b: str, wins: int, losses: int) -> tuple:
        return ("j1", "google", a, b, "meta", "meta", wins, losses, 0, 0, 0.0)

    # a balanced round robin of m0-m3, and m4, which won 2 of its 60 battles against m0
    rows = [battles(f"m{a}", f"m{b}", 12, 8) for a in range(4) for b in range(4) if a != b]
    rows += [battles("m4", "m0", 1, 29), battles("m0", "m4", 29, 1)]
    cells = cells_of_rows(rows)
    plain = fit_naive(cells, config=NaiveConfig(k=2))
    boot = fit_naive(cells, config=NaiveConfig(k=2, bootstrap=200))
    assert not any("bootstrap intervals of" in w for w in plain.diagnostics["warnings"])
    (said,) = [w for w in boot.diagnostics["warnings"] if "bootstrap intervals of" in w]
    assert said.startswith("naive board: the bootstrap intervals of m4 (")
    assert (boot.ci_high - boot.ci_low)[4] >= 3 * (plain.ci_high - plain.ci_low)[4]


def test_a_95_percent_percentile_interval_of_100_replicates_holds_95_percent() -> None:
    """numpy's default percentile put the ends at order statistics 3.475 and 97.525 of 100, which hold 0.931 of the
    mass on average: the published "95%" bootstrap intervals covered 0.937 ± 0.010 in simulation where the Laplace
    ones covered 0.953.  At p·(B + 1) the mass is 0.95 whatever the distribution; checked here on 20,000 intervals
    of 100 normal replicates each, against a fresh draw (SE 0.0015)."""
    from biasboard.ranking.uncertainty import percentile_interval

    rng = np.random.default_rng(0)
    low, high = percentile_interval(rng.standard_normal((100, 20_000)))
    fresh = rng.standard_normal(20_000)
    assert abs(np.mean((low < fresh) & (fresh < high)) - 0.95) < 0.005


def test_ratings_outside_their_own_bootstrap_intervals_are_named() -> None:
    """On 4,995 voter-judges 7 of 30 published ratings lay outside their own 95% bootstrap intervals (the replicates
    spread away from the MAP, slope 1.07), with no word; such ratings are named now, and none is when all lie in."""
    from biasboard.ranking.fit import FEW_REPLICATES, _off_centre_bootstrap_warnings

    models = ("a", "b", "c")
    rating = np.array([1.0, 0.0, -1.0])
    inside = _off_centre_bootstrap_warnings("bias_aware", models, rating, rating - 0.2, rating + 0.2, FEW_REPLICATES)
    low = rating + np.array([0.1, -0.2, 0.05])  # a and c above their intervals' lower ends
    (said,) = _off_centre_bootstrap_warnings("bias_aware", models, rating, low, rating + 0.3, FEW_REPLICATES)
    assert inside == [] and said.startswith(
        "corrected board: 2 of 3 published ratings lie outside their own bootstrap intervals (a, c)"
    )
    assert "few-battle voter-judges" in said


def test_ratings_outside_intervals_of_too_few_replicates_are_not_blamed_on_voters() -> None:
    """``refresh --bootstrap 1``: every interval is one replicate's point, so ratings lay outside them, and the warning
    blamed "few-battle voter-judges" on a board with none.  Below the too-few-replicates warning's threshold the cause
    it names is the replicates' number; the board still names the ratings outside."""
    from biasboard.ranking.fit import FEW_REPLICATES, fit_leaderboards

    problem, _ = _dense()
    for board in fit_leaderboards(problem.data, config=ModelConfig(profile=False, bootstrap=1)):
        warnings = board.diagnostics["warnings"]
        (outside,) = [w for w in warnings if "outside their own bootstrap intervals" in w]
        assert "voter" not in outside and "1 replicate(s) are too few to place a 95% interval's ends" in outside
        assert any(f"use --bootstrap {FEW_REPLICATES} or more" in w for w in warnings)


def test_replicates_that_stop_short_of_the_tolerance_are_counted_and_warned_about(monkeypatch):
    """A replicate whose refit runs out of iterations was used silently, where it stopped.  It is still used (dropping
    the least settled redraws would narrow the intervals), but counted, by every engine, and the board says so."""
    from biasboard.ranking import fit as fit_module

    problem, solution = _dense()
    assert bootstrap_replicates(problem, solution, 4, 1, 2, TOL, MAX_ITER).unconverged == 0
    monkeypatch.setattr(boot, "CHORD_RATE", 1e-12)  # every replicate hands over to the damped Newton ...
    short = bootstrap_replicates(problem, solution, 4, 1, 2, TOL, 2)  # ... with a budget of one step
    assert short.unconverged == 4 and short.cores.shape[0] == 4
    assert bootstrap_replicates(problem, solution, 4, 1, 2, TOL, 2, mode="cold").unconverged == 4
    assert bootstrap_replicates(problem, solution, 4, 1, 2, TOL, MAX_ITER).unconverged == 0

    real = fit_module.bootstrap_replicates
    monkeypatch.setattr(fit_module, "bootstrap_replicates", lambda *a, **kw: real(*a[:-1], 2, **kw))
    naive, corrected = fit_module.fit_leaderboards(
        problem.data, config=ModelConfig(profile=False, bootstrap=4, judge_solver="dense")
    )
    for board, result in (("naive", naive), ("corrected", corrected)):
        warned = [w for w in result.diagnostics["warnings"] if "did not converge within" in w]
        assert warned and warned[0].startswith(f"{board} board: 4 of 4 bootstrap replicate(s)"), warned
