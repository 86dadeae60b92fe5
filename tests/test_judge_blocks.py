"""The judge-blocked (Schur-complement) Newton solver against the dense one, on small cases.

Both solve the same MAP problem; the blocked path eliminates each judge's K × K block (the six effects, nine
with style counts) and keeps the
centring of log a_j and a profile's sum-to-zero gauge as rank-one (Woodbury) terms.  They must agree to
1e-8 on the estimates, the Laplace covariance the leaderboard and the bias table publish, the profile
likelihoods and the bootstrap replicates.
"""

from __future__ import annotations

import dataclasses
import tracemalloc
from collections.abc import Callable

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from biasboard.ranking import ModelConfig, arrowhead
from biasboard.ranking.arrowhead import BlockCovariance, glob_index
from biasboard.ranking.bias_table import bias_table
from biasboard.ranking.composite import godambe_covariance
from biasboard.ranking.data import build_dataset
from biasboard.ranking.fit import fit_bias_aware, solve_bias_aware
from biasboard.ranking.model import LEN, SEV
from biasboard.ranking.problem import Problem, bias_aware_problem
from biasboard.ranking.solver import laplace_covariance, minimize, newton_factor
from biasboard.schemas.cells import STYLE_SQUARES, STYLE_SUMS

from tests.test_ranking_model import _cells, _score_cells

TOL = 1e-8


def _styled(table: pa.Table, rng: np.random.Generator, share: float = 0.8) -> pa.Table:
    """Pair cells with style counts on a ``share`` of them (the rest: no style information)."""
    n = table.column("n").to_numpy()
    has = rng.random(table.num_rows) < share
    n_style = np.where(has, n, 0)
    d = rng.uniform(-1, 1, (table.num_rows, 3)) * has[:, None]
    cols = {"n_style": n_style.astype(np.int64), "style_bin": np.where(has, 1, -1).astype(np.int16)}
    for k, (total, square) in enumerate(zip(STYLE_SUMS, STYLE_SQUARES, strict=True)):
        cols[total] = d[:, k] * n_style
        cols[square] = (d[:, k] ** 2 + 0.01) * n_style
    for name, values in cols.items():
        table = table.set_column(table.schema.get_field_index(name), name, pa.array(values))
    return table


def _data(seed: int, style: bool, **kwargs):
    rng = np.random.default_rng(seed)
    cells = _cells(rng, **kwargs)
    return build_dataset(_styled(cells, rng) if style else cells)


def _both(data, **kwargs):
    out = {}
    for solver in ("dense", "blocked"):
        config = ModelConfig(judge_solver=solver, **kwargs)
        problem = bias_aware_problem(data, config)
        assert problem.spec.judge_blocks == (solver == "blocked")
        solution = solve_bias_aware(problem, config)
        assert solution.converged
        out[solver] = (problem, solution, laplace_covariance(solution))
    return out["dense"], out["blocked"]


@pytest.mark.parametrize("seed,judges,style", [(1, 12, False), (2, 5, False), (1, 12, True), (7, 5, True)])
def test_blocked_newton_equals_the_dense_solve(seed, judges, style):
    data = _data(seed, style, models=8, judges=judges, cells=500)
    (pd, sd, cd), (_, sb, cb) = _both(data)
    assert isinstance(cb, BlockCovariance) and isinstance(cd, np.ndarray)
    lay = pd.layout
    assert lay.n_style == (3 if style else 0) and lay.n_blocks == (9 if style else 6)
    assert np.max(np.abs(sd.core - sb.core)) < TOL
    gi = glob_index(lay)
    assert np.max(np.abs(cd[np.ix_(gi, gi)] - cb.glob)) < TOL
    _assert_judge_variances(pd, cd, cb)


def _assert_judge_variances(dense: Problem, cd: np.ndarray, cb: BlockCovariance) -> None:
    """Every judge's total effect (global + deviation; log a_j centred): its variance from the blocks equals the
    dense covariance's."""
    lay = dense.layout
    E = dense.spec.effective_map().toarray()
    for t in range(lay.n_blocks):
        rows = E[lay.eff_block(t)]
        dense_var = np.einsum("ri,ij,rj->r", rows, cd, rows)
        blocked_var = cb.judge_var[:, t].copy()
        if t in lay.global_effects:  # global c sits at m + c among the globals, not at block t's place
            c = lay.global_effects.index(t)
            blocked_var += cb.glob[lay.n_models + c, lay.n_models + c] + 2 * cb.judge_glob[:, t, c]
        assert np.max(np.abs(dense_var - blocked_var * dense.spec.masks[t])) < TOL, t


@pytest.mark.parametrize("cells", [1, 10**9])
def test_batched_schur_blocks_equal_the_dense_solve(monkeypatch, cells):
    """The Schur complement's per-judge blocks are made batched over judges meeting equally many models, at
    most ``BATCH_CELLS`` block entries at a time: one judge per batch, then every judge of a size in one
    batch, both equal the dense solve."""
    monkeypatch.setattr(arrowhead, "BATCH_CELLS", cells)
    data = build_dataset(_cells(np.random.default_rng(9), models=10, judges=30, cells=300))
    (pd, sd, cd), (_, sb, cb) = _both(data)
    gi = glob_index(pd.layout)
    assert np.max(np.abs(sd.core - sb.core)) < TOL
    assert np.max(np.abs(cd[np.ix_(gi, gi)] - cb.glob)) < TOL


def _same_tables(data, profile_tol: Callable[[float], float], **config):
    """Fit ``data`` with both solvers (3 bootstrap replicates; ``config``: more settings): the boards, their bootstrap
    CIs, the bias tables and the profile ranges (within ``profile_tol(range)``) agree; returns the blocked fit."""
    fits = {
        s: fit_bias_aware(data, config=ModelConfig(judge_solver=s, bootstrap=3, posterior_draws=500, **config))
        for s in ("dense", "blocked")
    }
    d, b = fits["dense"], fits["blocked"]
    for name in ("rating", "ci_low", "ci_high", "boot_ci_low", "boot_ci_high", "p_top_k"):
        assert np.max(np.abs(getattr(d, name) - getattr(b, name))) < TOL, name
    for name, info in d.diagnostics["profile_likelihood"].items():
        tol = profile_tol(info["range_nats"])
        assert abs(info["range_nats"] - b.diagnostics["profile_likelihood"][name]["range_nats"]) < tol, name
    assert d.bias.columns == b.bias.columns and d.bias.height == b.bias.height
    assert d.bias.select("judge", "effect", "identified", "enabled", "note").equals(
        b.bias.select("judge", "effect", "identified", "enabled", "note")
    )
    for col in ("estimate", "ci_low", "ci_high", "boot_ci_low", "boot_ci_high"):
        x, y = d.bias[col].to_numpy(), b.bias[col].to_numpy()
        assert np.array_equal(np.isnan(x), np.isnan(y))
        ok = ~np.isnan(x)
        assert np.max(np.abs(x[ok] - y[ok])) < 1e-7, col
    return b


@pytest.mark.parametrize("style", [False, True])
def test_blocked_fit_publishes_the_dense_tables(style):
    """Leaderboard CIs, bias table (with profile likelihoods: the gauge path) and bootstrap agree."""
    data = _data(3, style, models=7, judges=6, cells=400)
    # The blocked profile solves stop at |g| ~ 5e-6 under the stiff sum-to-zero gauge (60-70 chord steps, with or
    # without style; the dense ones reach 1e-10), which moves a 170-nat range by ~4e-6 with style.
    b = _same_tables(data, (lambda r: 1e-7 * r) if style else (lambda r: 1e-6))
    assert b.bias.filter(pl.col("effect") == "discrimination")["enabled"].all()
    style_rows = b.bias.filter(pl.col("effect").is_in(["header", "list", "bold"])).height
    assert style_rows == (3 * (len(data.judges) + 1) if style else 0)


def test_blocked_solver_with_fixed_effects_and_disabled_effects():
    """Fixed parameters (the oracle's) and switched-off effects are identity rows in the blocks."""
    data = build_dataset(_cells(np.random.default_rng(4), models=6, judges=4, cells=300))
    disabled = frozenset({("*", "affinity"), (data.judges[0], "length")})
    (pd, sd, _), (pb, sb, _) = _both(data, disabled=disabled)
    assert np.max(np.abs(sd.core - sb.core)) < TOL
    lay = pd.layout
    fixed = {lay.block(0).start + j: 0.1 * j for j in range(lay.n_judges)}
    fixed.update({lay.block(3).start + j: 0.0 for j in range(lay.n_judges)})
    cores = [solve_bias_aware(p, ModelConfig(), fixed=fixed).core for p in (pd, pb)]
    assert np.max(np.abs(cores[0] - cores[1])) < TOL


@pytest.mark.parametrize("scattered", [False, True])
def test_block_inverses_split_off_uncoupled_effects(scattered):
    """Effects marked ``alone`` for runs of judges are inverted as 1 × 1 blocks where they are uncoupled — the
    inverses equal numpy's, and bit for bit the whole blocks' (zeros aside) — and as part of the block where
    a mark is wrong (a coupled entry) or the marks are scattered over more runs than are used."""
    rng = np.random.default_rng(3)
    k, n = 5, 400
    B = rng.standard_normal((n, k, k))
    B = B @ B.transpose(0, 2, 1) + k * np.eye(k)
    off = np.zeros((n, k), bool)
    off[50:300, 2] = True  # effect 2 switched off for a run of judges (the voters' affinity)
    off[100:120, 4] = True
    if scattered:
        off[::3, 1] = True
    B *= ~off[:, :, None] & ~off[:, None, :] | np.eye(k, dtype=bool)
    alone = off.copy()
    alone[0:10, 3] = True  # a wrong mark: effect 3 is coupled there
    A = np.ascontiguousarray(B.transpose(1, 2, 0))
    split = arrowhead._block_inverses(A, alone.T)
    whole = arrowhead._block_inverses(A)
    np.testing.assert_allclose(split.transpose(2, 0, 1), np.linalg.inv(B), rtol=1e-10, atol=1e-12)
    assert np.array_equal(split, whole)
    assert np.all(split[2, [0, 1, 3, 4]][:, 50:300] == 0)
    B[7, 1, 1] = -1.0  # not positive definite: refused whichever way it is split
    with pytest.raises(np.linalg.LinAlgError):
        arrowhead._block_inverses(np.ascontiguousarray(B.transpose(1, 2, 0)), alone.T)


def test_blocked_fit_with_a_reference_judge():
    """Deviations tied to the reference (``Spec.tied``) act through the global coefficient only."""
    data = build_dataset(_cells(np.random.default_rng(6), models=7, judges=5, cells=400))
    fits = {
        s: fit_bias_aware(
            data,
            config=ModelConfig(
                judge_solver=s,
                reference=frozenset({data.judges[1]}),
                disabled=frozenset({(data.judges[2], "position")}),
                posterior_draws=200,
            ),
        )
        for s in ("dense", "blocked")
    }
    d, b = fits["dense"], fits["blocked"]
    assert np.max(np.abs(d.rating - b.rating)) < TOL and np.max(np.abs(d.ci_low - b.ci_low)) < TOL
    for col in ("estimate", "ci_low", "ci_high"):
        x, y = d.bias[col].to_numpy(), b.bias[col].to_numpy()
        ok = ~np.isnan(x)
        assert np.max(np.abs(x[ok] - y[ok])) < 1e-7, col


def test_blocked_step_curvature_and_kept_terms():
    """The solver takes sᵀHs = −gᵀs − μ‖s‖² from the blocked solve of (H + μI)s = −g (the centring of log a_j a
    constraint, uᵀs = 0) instead of a product with H — for every damping, each factorisation reusing the cached
    sparse layout of the first; and the Hessian added later at a point evaluated without it (the kept Davidson
    terms) equals a fresh evaluation's, value for value."""
    data = _data(6, False, models=7, judges=9, cells=400)
    config = ModelConfig(judge_solver="blocked")
    problem = bias_aware_problem(data, config)
    objective = problem.objective()
    # Near the MAP (where the Hessian is positive definite), not at it (g ≠ 0).
    core = solve_bias_aware(problem, config).core + np.random.default_rng(0).normal(0.0, 0.05, problem.layout.n_core)
    diag = np.zeros(0)
    fresh = objective.evaluate(core, diag)
    objective.evaluate(core, diag, hessian=False)
    kept = objective.evaluate(core, diag)
    assert kept.f == fresh.f and np.array_equal(kept.g, fresh.g)
    for name in ("H", "A", "Xc", "Xg"):
        assert np.array_equal(getattr(kept.H, name), getattr(fresh.H, name)), name
    free = np.ones(core.size, bool)
    for mu in (0.0, 0.3, 30.0):
        factor = newton_factor(fresh, free, mu)
        assert factor is not None
        s, _ = factor.solve(fresh.g, np.zeros(0))
        curvature = float(s @ fresh.H.matvec(s))
        assert abs(curvature - (-float(fresh.g @ s) - mu * float(s @ s))) < 1e-9 * abs(curvature), mu


def test_a_gradient_pass_writes_its_terms_into_the_last_passes_arrays():
    """Each gradient-only pass keeps its Davidson terms for a Hessian at the same point; the next pass at another
    point writes its terms into those arrays rather than fresh ones (fresh memory each pass was handed back to the
    kernel between passes and faulted in again: about half of a gradient pass at 50k voter-judges), and what it
    computes is what a fresh objective computes there, bit for bit (the Hessian from its kept terms too)."""
    data = _data(7, True, models=8, judges=12, cells=600)
    config = ModelConfig(judge_solver="blocked")
    problem = bias_aware_problem(data, config)
    objective = problem.objective()
    rng = np.random.default_rng(1)
    core0, diag = solve_bias_aware(problem, config).core, np.zeros(0)
    first, second = (core0 + rng.normal(0.0, 0.05, core0.size) for _ in range(2))
    objective.evaluate(first, diag, hessian=False)
    assert objective._last is not None
    buffers = {a.__array_interface__["data"][0] for tm in objective._last[2] for a in tm.arrays()}
    assert len(buffers) == 6 * len(objective._last[2])  # a for_hessian term's six arrays of its cells
    recycled = objective.evaluate(second, diag, hessian=False)
    reused = {a.__array_interface__["data"][0] for tm in objective._last[2] for a in tm.arrays()}
    assert reused == buffers
    fresh = problem.objective()
    expected = fresh.evaluate(second, diag, hessian=False)
    assert recycled.f == expected.f and np.array_equal(recycled.g, expected.g)
    kept, made = objective.evaluate(second, diag), fresh.evaluate(second, diag)
    for name in ("H", "A", "Xc", "Xg"):
        assert np.array_equal(getattr(kept.H, name), getattr(made.H, name)), name


def test_assemble_masks_only_the_blocks_the_cells_added_to():
    """block_partials marks the (block, judge) pairs its slices added to (``acted``); elsewhere A's rows and
    columns and C's columns are exactly 0, and assemble, which masks only the marked ones, makes the Hessian that
    masking every judge makes (a judge's length switched off: its cells add to the block, so it is masked)."""
    data = build_dataset(_cells(np.random.default_rng(4), models=6, judges=4, cells=300))
    config = ModelConfig(judge_solver="blocked", disabled=frozenset({(data.judges[0], "length")}))
    problem = bias_aware_problem(data, config)
    objective = problem.objective()
    eff = objective._effective(solve_bias_aware(problem, config).core)
    hessians = []
    for everywhere in (False, True):
        part, _, _ = objective._blocked_partials(eff, True)
        assert not part.acted[SEV].any() and part.acted[LEN].all()
        for t in range(problem.layout.n_blocks):
            quiet = ~part.acted[t]
            assert not part.A[quiet, t, :].any() and not part.A[quiet, :, t].any(), t
            assert not part.C[quiet[objective.cross.judge], t].any(), t
        if everywhere:
            part.acted[...] = True
        hessians.append(objective._assemble(part))
    assert not hessians[0].A[0, LEN, LEN + 1 :].any()  # judge 0's length row masked (but for its prior)
    for name in ("H", "A", "Xc", "Xg"):
        assert np.array_equal(getattr(hessians[0], name), getattr(hessians[1], name)), name


def _graded_tables(seed: int, style: bool = False) -> tuple[pa.Table, pa.Table]:
    """Pair cells of 12 judges, and single grades from four of them and from a judge with grades alone."""
    rng = np.random.default_rng(seed)
    cells = _cells(rng, models=8, judges=12, cells=500)
    grades = _score_cells(rng, models=8, judges=4, prompts=6, rows=200)
    only = _score_cells(rng, models=8, judges=1, prompts=6, rows=60)
    only = only.set_column(0, grades.schema.field("judge"), pa.array(["grader"] * only.num_rows))
    return _styled(cells, rng) if style else cells, pa.concat_tables([grades, only])


def _graded(seed: int, style: bool = False):
    """:func:`_graded_tables` as a data set."""
    return build_dataset(*_graded_tables(seed, style))


@pytest.mark.parametrize("style", [False, True])
def test_blocked_newton_with_grades_equals_the_dense_solve(style):
    """With grades the graders' severities are globals and the prompts are eliminated into the globals' Schur
    complement: a Newton step away from the optimum, the MAP, its Laplace covariance and every judge's variance
    (a switched-off severity included) equal the dense path's."""
    data = _graded(5, style)
    disabled = frozenset({("judge-1", "severity")})
    (pd, sd, cd), (pb, sb, cb) = _both(data, disabled=disabled)
    lay = pb.layout
    assert lay.n_prompts == 6 and len(lay.graders) == 4 and pd.layout.graders == ()
    assert data.judges.index("judge-1") not in lay.graders and data.judges.index("grader") in lay.graders
    # A damped step from a point off the optimum, both with the prompts' part: the same (s, t).
    core, diag = sd.core + 0.05 * np.cos(np.arange(lay.n_core)), sd.diag + 0.05 * np.sin(np.arange(lay.n_prompts))
    steps = []
    for problem in (pd, pb):
        ev = problem.objective().evaluate(core, diag)
        steps.append(newton_factor(ev, np.ones(lay.n_core, bool), mu=0.1).solve(ev.g, ev.g_diag))
    assert np.max(np.abs(steps[0][0] - steps[1][0])) < TOL and np.max(np.abs(steps[0][1] - steps[1][1])) < TOL
    assert np.max(np.abs(sd.core - sb.core)) < TOL and np.max(np.abs(sd.diag - sb.diag)) < TOL
    gi = glob_index(lay)
    assert np.max(np.abs(cd[np.ix_(gi, gi)] - cb.glob)) < TOL
    _assert_judge_variances(pd, cd, cb)


def test_blocked_godambe_covariance_of_a_weighted_fit_equals_the_dense_one():
    """At ω ≠ 0.5 the covariance is the sandwich H_w⁻¹ J H_w⁻¹ on both paths, not the Laplace H_w⁻¹: the globals'
    block (θ, global effects, graders' severities, τ; the blocked one a global at a time, the prompts marginalised)
    and every judge's variance and covariance with the global effects (the blocked one batched over judges)."""
    data = _graded(5)
    (pd, sd, cd), (pb, sb, _) = _both(data, omega=0.8)
    gd, gb = godambe_covariance(pd, sd), godambe_covariance(pb, sb)
    assert isinstance(gb, BlockCovariance) and isinstance(gd, np.ndarray)
    gi = glob_index(pb.layout)  # (the graders' severities among the blocked path's globals)
    assert np.max(np.abs(gd[np.ix_(gi, gi)] - gb.glob)) < TOL
    _assert_judge_variances(pd, gd, gb)  # every judge's effect too: the bias table's rows
    theta, m = pd.layout.theta, pd.layout.n_models
    centred = np.eye(m) - 1.0 / m  # (θ's location is the prior's alone: compared on the centred ratings)
    ratio = np.diag(centred @ gd[theta, theta] @ centred) / np.diag(centred @ cd[theta, theta] @ centred)
    assert np.max(np.abs(ratio - 1.0)) > 0.05  # a real change, not a no-op


def test_blocked_godambe_covariance_with_low_rank_terms_equals_the_dense_one():
    """The blocked sandwich's low-rank terms (Woodbury's Z M⁻¹ in H_w⁻¹'s judge columns, the penalty in J's judge
    blocks), exercised by a profile's stiff sum-to-zero gauge on the length deviations at ω = 0.8: every judge's
    variance equals the dense path's (left out, they are off by ~30)."""
    data = _graded(5)
    (pd, sd, _), (pb, sb, _) = _both(data, omega=0.8)
    out = []
    for problem, solution in ((pd, sd), (pb, sb)):
        profiled = dataclasses.replace(problem, prior=problem.profile_prior(LEN))
        at = minimize(profiled.objective(), solution.core, solution.diag, tol=1e-11)
        assert at.converged
        out.append((profiled, godambe_covariance(profiled, at)))
    (qd, gd), (qb, gb) = out
    assert isinstance(gb, BlockCovariance) and gb.factor is not None and len(gb.factor.U) == 1
    gi = glob_index(qb.layout)
    assert np.max(np.abs(gd[np.ix_(gi, gi)] - gb.glob)) < TOL
    _assert_judge_variances(qd, gd, gb)


def test_blocked_weighted_fit_publishes_the_dense_tables():
    """At ω = 0.8 both solvers publish the same Godambe board and bias table (the judges' rows included)."""
    _same_tables(_graded(6), lambda r: 1e-7 * max(r, 1.0), omega=0.8)


def test_omega_one_is_the_board_of_the_battles_alone_on_both_solvers():
    """ω = 1 weighs the grades 0: both solvers fit the battles' board (the blocked one crashed on the grades'
    prompt block, which no grade filled).  (Grades of the judges of the battles only: a judge with grades alone would
    still count in the mean of log a_j that fixes θ's scale.)"""
    pairs, grades = _graded_tables(5)
    grades = grades.filter(pc.not_equal(grades["judge"], "grader"))
    config = ModelConfig(omega=1.0, profile=False, posterior_draws=200)
    alone = fit_bias_aware(build_dataset(pairs), config=dataclasses.replace(config, judge_solver="dense"))
    for solver in ("dense", "blocked"):
        fit = fit_bias_aware(build_dataset(pairs, grades), config=dataclasses.replace(config, judge_solver=solver))
        for name in ("rating", "ci_low", "ci_high"):
            assert np.max(np.abs(getattr(fit, name) - getattr(alone, name))) < TOL, (solver, name)


def test_blocked_fit_with_grades_publishes_the_dense_tables():
    """Leaderboard CIs, bootstrap, the bias table (the severities centred over the graders) and the profiles."""
    b = _same_tables(_graded(6), lambda r: 1e-7 * max(r, 1.0))  # (the blocked profiles stop at |g| ~ 5e-6)
    severity = b.bias.filter((pl.col("effect") == "severity") & pl.col("enabled"))
    assert severity.height == 5 and abs(severity["estimate"].sum()) < 1e-9  # centred over the graders


def test_blocked_fit_with_a_grader_linked_to_no_other_publishes_the_dense_tables():
    """A grader that alone grades a model in no battle is a severity group of its own (its severity 0 by definition,
    the others centred among themselves) on both paths alike."""
    rng = np.random.default_rng(7)
    solo = _score_cells(rng, models=1, judges=1, prompts=6, rows=40)
    solo = solo.set_column(0, solo.schema.field("judge"), pa.array(["solo"] * solo.num_rows))
    solo = solo.set_column(2, solo.schema.field("model"), pa.array(["m-solo"] * solo.num_rows))
    rows = _graded_tables(7)
    data = build_dataset(rows[0], pa.concat_tables([rows[1], solo]))
    b = _same_tables(data, lambda r: 1e-7 * max(r, 1.0))
    severity = b.bias.filter((pl.col("effect") == "severity") & pl.col("enabled"))
    others = severity.filter(pl.col("judge") != "solo")
    assert others.height == 5 and abs(others["estimate"].sum()) < 1e-9
    assert severity.filter(pl.col("judge") == "solo").select("estimate", "identified").rows() == [(0.0, False)]


def test_blocked_solver_refuses_grades_alone():
    """Grades alone have no judge blocks (only severities act): ``auto`` keeps the dense solver for many graders."""
    data = build_dataset(None, _score_cells(np.random.default_rng(5), judges=40, rows=400))
    with pytest.raises(ValueError, match="grades alone"):
        bias_aware_problem(data, ModelConfig(judge_solver="blocked"))
    config = ModelConfig(profile=False)
    assert len(data.judges) >= config.blocked_from and not bias_aware_problem(data, config).spec.judge_blocks


def _peak_bytes(judges: int) -> int:
    """Peak traced allocation of a judge-blocked style fit (solve, Laplace covariance, bias table)."""
    data = _data(11, True, models=10, judges=judges, cells=4 * judges)
    config = ModelConfig(judge_solver="blocked")
    tracemalloc.start()
    try:
        problem = bias_aware_problem(data, config)
        solution = solve_bias_aware(problem, config)
        table = bias_table(problem, solution, laplace_covariance(solution), {})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert problem.layout.n_style == 3 and problem.spec.judge_blocks and solution.converged
    assert table.filter(pl.col("effect") == "bold").height == len(data.judges) + 1
    return peak


def test_blocked_style_fit_memory_is_linear_in_the_judges():
    """4x the judges (1,000 → 4,000, with style cells): the peak grows ~4x (measured 3.9x; a J² object would
    give 16x, and at 4,000 judges one J × J float matrix alone is 128 MB against ~60 MB measured in all)."""
    small, large = _peak_bytes(1_000), _peak_bytes(4_000)
    assert large < 6 * small, (small, large)
    assert large < 4_000**2 * 8, large


def test_base_pages_restores_numpy_huge_page_setting():
    """The blocked solve turns numpy's huge-page advice off only while it runs (see ranking.pages)."""
    multiarray = pytest.importorskip("numpy._core.multiarray")
    if not hasattr(multiarray, "_get_madvise_hugepage"):
        pytest.skip("numpy without the huge-page switch")
    from biasboard.ranking.pages import base_pages

    before = multiarray._get_madvise_hugepage()
    try:
        for setting in (True, False):
            multiarray._set_madvise_hugepage(setting)
            with base_pages():
                assert multiarray._get_madvise_hugepage() is False
            assert multiarray._get_madvise_hugepage() is setting
    finally:
        multiarray._set_madvise_hugepage(before)


@pytest.mark.parametrize("solver", ["dense", "blocked"])
def test_identified_measures_each_row_against_its_own_prior(solver):
    """A judge's "identified" compares its posterior variance with the prior variance of the quantity the row reports.

    A reference judge's length is the global coefficient alone (its prior SD 0.5, not the excess's SD 2 added): on
    two cells it read "identified" beside the global row, the same estimate and interval, saying not identified.
    With two judges log a_j = (ρ_1 − ρ_2)/2 has prior variance σ²/2, so against σ² any data made both a_j
    "identified": 35 battles of one judge shrank it by a quarter."""
    rng = np.random.default_rng(1)
    cells = _cells(rng, models=8, judges=3, cells=900)
    judge = cells.column("judge").to_numpy(zero_copy_only=False)
    few = (judge != "judge-0") | (np.cumsum(judge == "judge-0") <= 2)
    config = ModelConfig(judge_solver=solver, diagnostics="off", reference=frozenset({"judge-0"}))
    fit = fit_bias_aware(build_dataset(cells.filter(pa.array(few))), config=config)
    length = fit.bias.filter(pl.col("effect") == "length").select("judge", "estimate", "identified")
    (glob,), (ref,) = (length.filter(pl.col("judge") == name).rows() for name in ("*", "judge-0"))
    assert glob[1] == pytest.approx(ref[1]) and glob[2] is False and ref[2] is False

    rng = np.random.default_rng(1)
    cells = _cells(rng, models=8, judges=2, cells=600)
    judge = cells.column("judge").to_numpy(zero_copy_only=False)
    few = (judge == "judge-0") | (np.cumsum(judge == "judge-1") <= 2)
    fit = fit_bias_aware(build_dataset(cells.filter(pa.array(few))), config=ModelConfig(judge_solver=solver))
    disc = fit.bias.filter(pl.col("effect") == "discrimination")
    assert disc["identified"].to_list() == [False, False]
    assert disc["note"].str.starts_with("prior-selected").all()


def _buffers(terms) -> set[int]:
    """The addresses of the per-cell arrays of ``terms`` (DavidsonTerms)."""
    return {a.__array_interface__["data"][0] for tm in terms for a in tm.arrays()}


@pytest.mark.parametrize("solver", ["blocked", "dense"])
@pytest.mark.parametrize("graded", [False, True])
def test_a_theta_only_pass_gives_the_full_passes_theta_gradient_bit_for_bit(solver, graded):
    """Objective.theta_pass (the attribution's chord steps: θ moves, the rest held) gives θ's gradient of a full
    gradient pass bit for bit, and its value's differences between two θ are the objective's; judge-blocked it skips
    the judges' sums and writes into the last pass's arrays, and a full pass after it is a fresh objective's."""
    data = _graded(5) if graded else _data(7, True, models=8, judges=12, cells=600)
    config = ModelConfig(judge_solver=solver)
    problem = bias_aware_problem(data, config)
    lay, theta = problem.layout, problem.layout.theta
    solution = solve_bias_aware(problem, config)
    core = solution.core.copy()
    core[lay.block(LEN)] = 0.0  # a correction removed, as the attribution's passes have it
    diag = solution.diag + 0.05 * np.sin(np.arange(lay.n_prompts))
    objective = problem.objective()
    objective.evaluate(solution.core, solution.diag, hessian=False)  # a pass whose arrays the θ-only pass reuses
    held = None if objective._last is None else _buffers(objective._last[2])
    at_theta = objective.theta_pass(core, diag)
    steps = [core[theta] + 0.1 * np.cos(np.arange(lay.n_models) + k) for k in range(2)]
    values = []
    for k, values_k in enumerate(steps):
        f, g = at_theta(values_k.copy())
        point = core.copy()
        point[theta] = values_k
        full = problem.objective().evaluate(point, diag, hessian=False)
        assert np.array_equal(g, full.g[theta]), k
        values.append((f, full.f))
        if solver == "blocked":
            assert objective._spare is not None and objective._last is None
            if k == 0 and held is not None:
                assert held <= _buffers(objective._spare)  # every array of the last pass written into
    (f0, full0), (f1, full1) = values
    assert abs((f0 - f1) - (full0 - full1)) <= 1e-9 * max(1.0, abs(full0))
    after, fresh = objective.evaluate(core, diag), problem.objective().evaluate(core, diag)
    assert after.f == fresh.f and np.array_equal(after.g, fresh.g)
