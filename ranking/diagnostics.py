"""Diagnostics of a fit, each a plain JSON-serialisable dict with warnings in plain words.

- Connectivity: models in different components of the comparison graph are named, never silently
  ranked against each other.
- Identifiability (Xu et al. 2026): the profile likelihood of each global covariate effect — its coefficient
  fixed at ĉ − Δ, ĉ, ĉ + Δ (Δ = 2 prior SDs), everything else re-optimised (θ without its prior, the
  per-judge deviations without theirs but summing to zero, so ĉ is the judges' common level) — and its
  range in nats.  A per-model-constant covariate is
  collinear with θ, so the range is 0: the value is prior-selected.
- corr(θ̂, mean log length per model), against Xu et al.'s crossing point: correction removes real
  quality in proportion to how much quality and the covariate co-vary; the benefit fell with the
  correlation and changed sign between 0.22 and 0.60 (0.45 in its synthetic sweep).  When the length
  term is clipped (``ModelConfig.length_clip``) the per-model profile is the one the correction acts
  on — each model's mean clipped log length ratio against its opponents — so a model with degenerate
  lengths counts as far as the clip lets it, not by its raw log length.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from biasboard.ranking.arrowhead import ArrowFactor, ArrowHessian
from biasboard.ranking.config import ModelConfig
from biasboard.ranking.data import Dataset
from biasboard.ranking.graph import component_names, model_components
from biasboard.ranking.model import AFF, LEN, POS
from biasboard.ranking.problem import Problem, prior_sd_of_effect
from biasboard.ranking.rank_stats import kendall_tau_b, spearman
from biasboard.ranking.solver import (
    Evaluation,
    NewtonFactor,
    Objective,
    Solution,
    _grad_norm,
    minimize,
    newton_factor,
)

#: Xu et al. (2026): correction's benefit reverses somewhere in this range of corr(θ, covariate).
CROSSING_LOW: float = 0.22
CROSSING_HIGH: float = 0.60
CROSSING_TYPICAL: float = 0.45
FLAT_NATS: float = 0.01
PROFILED = {"position": POS, "length": LEN, "affinity": AFF}


def connectivity_report(data: Dataset) -> dict:
    component = model_components(data)
    n_comp = int(component.max()) + 1 if component.size else 0
    report: dict = {"n_components": n_comp, "warnings": []}
    if n_comp > 1:
        names = component_names(component, data.models)
        report["components"] = names
        smaller = "; ".join(", ".join(group) for group in names[1:])
        link = "battle" if not data.ordinal_only else "same-judge same-prompt grade"
        report["warnings"].append(
            f"the comparison graph has {n_comp} disconnected components: no {link} chain links [{smaller}] to "
            f"the main group of {len(names[0])} models; their ratings are not comparable across components: "
            "each component is centred on its own, and ranks, CIs and top-k are computed within it (leaderboard "
            "column 'component')"
        )
    return report


def mean_log_length(data: Dataset) -> np.ndarray:
    """Mean log length of each model's responses (NaN where unknown)."""
    pairs, m = data.pairs, len(data.models)
    total = np.bincount(pairs.a, weights=pairs.sum_loglen_a, minlength=m) + np.bincount(
        pairs.b, weights=pairs.sum_loglen_b, minlength=m
    )
    count = np.bincount(pairs.a, weights=pairs.n_len, minlength=m) + np.bincount(
        pairs.b, weights=pairs.n_len, minlength=m
    )
    return np.divide(total, count, out=np.full(m, np.nan), where=count > 0)


def mean_length_covariate(data: Dataset) -> np.ndarray:
    """Each model's mean length covariate against its opponents (+x shown first, −x second; NaN where unknown).

    Uses the data's covariate as stored — clipped when the data come from a clipped problem — and skips
    self-battles (they say nothing about a model's length relative to others).
    """
    pairs, m = data.pairs, len(data.models)
    other = pairs.a != pairs.b
    wx = (pairs.n_len * pairs.x)[other]
    a, b, w = pairs.a[other], pairs.b[other], pairs.n_len[other]
    total = np.bincount(a, weights=wx, minlength=m) - np.bincount(b, weights=wx, minlength=m)
    count = np.bincount(a, weights=w, minlength=m) + np.bincount(b, weights=w, minlength=m)
    return np.divide(total, count, out=np.full(m, np.nan), where=count > 0)


def _corr(x: np.ndarray, y: np.ndarray) -> float:
    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() < 3 or np.ptp(x[ok]) == 0 or np.ptp(y[ok]) == 0:
        return float("nan")
    return float(np.corrcoef(x[ok], y[ok])[0, 1])


def covariate_report(
    data: Dataset, rating: np.ndarray, naive_rating: np.ndarray | None, length_clip: float | None = None
) -> dict:
    """corr(θ̂, per-model length profile) for the corrected (and naive) ratings, with the crossing warning.

    The profile is the mean log length per model when the length term is unbounded (``length_clip``
    None), and the mean clipped log length ratio (:func:`mean_length_covariate`, ``data`` already
    clipped) when it is bounded; ``corr_theta_log_length_*`` always give the raw mean log length's.
    """
    raw = mean_log_length(data)
    length = raw if length_clip is None else mean_length_covariate(data)
    corrected = _corr(rating, length)
    report: dict = {
        "corr_theta_length_corrected": corrected,
        "corr_theta_length_naive": None if naive_rating is None else _corr(naive_rating, length),
        "length_profile": "mean log length"
        if length_clip is None
        else f"mean log length ratio clipped at ±{length_clip:g}",
        "corr_theta_log_length_corrected": _corr(rating, raw),
        "corr_theta_log_length_naive": None if naive_rating is None else _corr(naive_rating, raw),
        "crossing_point_range": [CROSSING_LOW, CROSSING_HIGH],
        "warnings": [],
    }
    if np.isfinite(corrected) and abs(corrected) >= CROSSING_LOW:
        strength = "beyond the typical" if abs(corrected) >= CROSSING_TYPICAL else "inside the"
        report["warnings"].append(
            f"corrected ratings correlate with mean response length (r = {corrected:.2f}), {strength} range "
            f"{CROSSING_LOW}-{CROSSING_HIGH} where Xu et al. 2026 found length correction starts to hurt: if longer "
            "answers are genuinely better here, the correction removes real quality (check with trusted anchors)"
        )
    return report


def compare_rankings(naive, corrected_rating: np.ndarray, corrected_models: tuple[str, ...] | None = None) -> dict:
    """Kendall τ-b and Spearman ρ between the naive and the corrected ratings (aligned by model name)."""
    models = naive.models if corrected_models is None else corrected_models
    index = {m: i for i, m in enumerate(naive.models)}
    common = [i for i, m in enumerate(models) if m in index]
    x = np.array([naive.rating[index[models[i]]] for i in common])
    y = np.asarray(corrected_rating)[common]
    return {"kendall_tau": kendall_tau_b(x, y), "spearman": spearman(x, y), "n_models": len(common)}


def profile_ranges(
    problem: Problem, solution: Solution, config: ModelConfig, shards: int = 1, *, cold: bool = False
) -> dict:
    """Profile log-likelihood range (nats) of each enabled global covariate effect over ĉ ± 2 prior SDs.

    ``full`` follows each profile along its path from the centre (:func:`_profile_path`: chord steps on one
    factorisation, warm starts extrapolated from the centre's tangent); ``cold=True`` solves every point
    by its own damped Newton fit from the MAP (the former method, kept to check the path against).
    """
    lay, spec = problem.layout, problem.spec
    out: dict = {}
    for name, t in PROFILED.items():
        if not spec.masks[t].any():
            continue
        objective = problem.objective(shards, prior=problem.profile_prior(t))
        sd_glob, _ = prior_sd_of_effect(problem, t)
        delta = 2.0 * sd_glob
        centre = float(solution.core[lay.glob(t)])
        values = (centre - delta, centre, centre + delta)
        logliks: list[float] | None = None
        if config.diagnostics == "fast":
            logliks = _profile_fast(objective, problem, solution, t, values)
        elif not cold:
            logliks = _profile_path(objective, problem, solution, t, delta, config)
        if logliks is None:
            logliks = _profile_cold(objective, problem, solution, t, values, config)
        span = float(max(logliks) - min(logliks))
        unit = 1.0 / spec.x_scale if t == LEN else 1.0
        info = {
            "range_nats": span,
            "grid": [(centre - delta) * unit, centre * unit, (centre + delta) * unit],
            "loglik": [float(v) for v in logliks],
        }
        if span < FLAT_NATS:
            info["note"] = (
                f"prior-selected: the profile likelihood is flat ({span:.4f} nats over ±2 prior SD); the comparisons "
                f"cannot split quality from {name} (the covariate does not vary within models, Xu et al. 2026), so the "
                "value shown is chosen by the prior"
            )
            info["warning"] = f"{name} effect is not identified by the comparisons: its value is prior-selected"
        elif span < 2.0:
            info["note"] = (
                f"weakly identified: the profile likelihood changes by {span:.2f} nats over ±2 prior SD; the prior "
                "still shapes the value"
            )
        else:
            info["note"] = f"identified by the comparisons: profile likelihood range {span:.1f} nats over ±2 prior SD"
        if config.diagnostics == "fast":
            info["method"] = "fast: quadratic (Wald) approximation from the centre's factorisation"
        out[name] = info
    return out


def _free_of(problem: Problem, t: int) -> np.ndarray:
    """Every core parameter but effect t's common level (the profiled one)."""
    free = np.ones(problem.layout.n_core, bool)
    free[problem.layout.glob(t)] = False
    return free


def _profile_cold(
    objective: Objective, problem: Problem, solution: Solution, t: int, values: tuple[float, ...], config: ModelConfig
) -> list[float]:
    """Each profile point by its own damped Newton fit from the MAP (its level set, deviations re-centred)."""
    free = _free_of(problem, t)
    logliks = []
    for value in values:
        sol = minimize(
            objective,
            _profile_start(problem, solution, t, value),
            solution.diag,
            free=free,
            tol=config.tol,
            max_iter=config.max_iter,
            g0_norm=solution.scale,
        )
        logliks.append(sol.evaluation.loglik)
    return logliks


def _profile_path(
    objective: Objective, problem: Problem, solution: Solution, t: int, delta: float, config: ModelConfig
) -> list[float]:
    """The exact profile at ĉ − Δ, ĉ, ĉ + Δ, each point solved to the fit's tolerance, for a fraction of the
    cold solves' passes over the cells.

    The centre is solved by chord (simplified Newton) steps on the factorisation at its start — one
    gradient-only pass over the cells per step.  The path's tangent there is the implicit-function
    derivative dφ/dc = −H_φφ⁻¹ H_φc (the same factorisation), so ĉ ± Δ start at φ̂ ± Δ·dφ/dc and are solved
    by Newton with lazy factorisation (:func:`_solve_point`), after the point half-way where the path bends
    (:func:`_profile_side`).  The objective is not convex in everything (the discriminations), so a point
    plain Newton does not reach by descent is solved cold instead, as before — the same start and the same
    damped Newton, so the same optimum.
    """
    lay = problem.layout
    index = lay.glob(t)
    free = _free_of(problem, t)
    centre = float(solution.core[index])
    core0 = _profile_start(problem, solution, t, centre)
    ev0 = objective.evaluate(core0, solution.diag)
    newton = newton_factor(ev0, free)
    target = config.tol * solution.scale
    mid = None
    if newton is not None:
        mid = _solve_point(objective, core0, solution.diag, free, target, config, ev0, newton, rate=0.0)
    if newton is None or mid is None:
        return _profile_cold(objective, problem, solution, t, (centre - delta, centre, centre + delta), config)
    d_core, d_diag, _ = _tangent(ev0, newton, free, index)
    logliks = []
    for step in (-delta, 0.0, delta):
        point = _profile_side(objective, mid, (d_core, d_diag), index, step, target, config) if step else mid
        if point is None:
            logliks += _profile_cold(objective, problem, solution, t, (centre + step,), config)
        else:
            logliks.append(point.evaluation.loglik)
    return logliks


def _polished(objective: Objective, point: Solution, newton: NewtonFactor | ArrowFactor | None) -> Solution:
    """``point`` after one more (chord) step, kept when it lowers the gradient: as :func:`minimize` ends a fit,
    so a profile value carries the fit's accuracy (~1e-12 relative), not just its stopping tolerance."""
    ev, free = point.evaluation, point.free
    newton = newton_factor(ev, free) if newton is None else newton
    if newton is None:
        return point
    s, t = newton.solve(ev.g[free], ev.g_diag)
    core = point.core.copy()
    core[free] += s
    trial = objective.evaluate(core, point.diag + t, hessian=False)
    gn = _grad_norm(trial, free)
    if not np.isfinite(trial.f) or gn >= point.grad_norm:
        return point
    return replace(point, core=core, diag=point.diag + t, evaluation=trial, grad_norm=gn, rel_grad=gn / point.scale)


#: Halvings of the step along the profile path before a point is left to the cold solve.
MAX_HALVINGS: int = 2


def _profile_side(
    objective: Objective,
    mid: Solution,
    tangent: tuple[np.ndarray, np.ndarray],
    index: int,
    step: float,
    target: float,
    config: ModelConfig,
    depth: int = 0,
) -> Solution | None:
    """The profile point ``step`` away from the solved centre ``mid``, from the tangent's prediction (None: the
    caller solves it cold).

    Where plain Newton from there does not descend (the path bends too much over ``step``), the point
    half-way is solved first and the start taken on the parabola through the centre (with its tangent) and
    that point: φ(step) ≈ 4·φ(step/2) − 3·φ̂ − step·dφ/dc.
    """
    d_core, d_diag = tangent
    free = mid.free
    core, diag = mid.core.copy(), mid.diag + step * d_diag
    core[free] += step * d_core
    core[index] = mid.core[index] + step
    point = _solve_point(objective, core, diag, free, target, config)
    if point is not None or depth >= MAX_HALVINGS:
        return point
    half = _profile_side(objective, mid, tangent, index, 0.5 * step, target, config, depth + 1)
    if half is None:
        return None
    core, diag = 4.0 * half.core - 3.0 * mid.core, 4.0 * half.diag - 3.0 * mid.diag - step * d_diag
    core[free] -= step * d_core
    core[index] = mid.core[index] + step
    return _solve_point(objective, core, diag, free, target, config)


#: A step that shrinks the gradient less than this factor re-factorises at its point (a chord step costs a
#: gradient pass; a new factorisation a Hessian pass, about two, but restores quadratic convergence).
CHORD_RATE: float = 0.1
#: Passes over the cells :func:`_solve_point` spends on a point before it gives it up to the cold solve.
MAX_PASSES: int = 12


def _solve_point(
    objective: Objective,
    core: np.ndarray,
    diag: np.ndarray,
    free: np.ndarray,
    target: float,
    config: ModelConfig,
    ev: Evaluation | None = None,
    newton: NewtonFactor | ArrowFactor | None = None,
    rate: float = 1.0,
) -> Solution | None:
    """Minimise over ``free`` from a warm start until the free gradient norm is at most ``target``; None when
    plain Newton does not get there by descent (a step raises the objective, a Hessian is not positive
    definite, or ``MAX_PASSES`` passes are spent): the caller then solves the point cold.

    Lazy factorisation: a factorisation serves chord steps (gradient-only passes) while each shrinks the
    gradient at least ``CHORD_RATE``-fold; when one does not, the next point is evaluated with its Hessian
    and factorised.  ``rate`` is the last shrink factor, by which the first step is judged (below
    ``CHORD_RATE``: ``newton`` is trusted for chord steps).
    """
    scale = target / config.tol
    ev = objective.evaluate(core, diag) if ev is None else ev
    passes = 0
    while passes < MAX_PASSES:
        gn = _grad_norm(ev, free)
        if gn <= target:
            return _polished(objective, Solution(core, diag, ev, free, passes, True, gn, gn / scale, scale), newton)
        if newton is None:
            if not (isinstance(ev.H, ArrowHessian) or ev.H.size):
                ev = objective.evaluate(core, diag)
                passes += 1
            newton = newton_factor(ev, free)
            if newton is None:
                return None
        s, t = newton.solve(ev.g[free], ev.g_diag)
        with_hessian = rate > CHORD_RATE
        trial_core = core.copy()
        trial_core[free] += s
        trial = objective.evaluate(trial_core, diag + t, hessian=with_hessian)
        passes += 1
        if not np.isfinite(trial.f) or trial.f > ev.f + 1e-14 * max(abs(ev.f), 1.0):
            return None
        rate = _grad_norm(trial, free) / gn
        core, diag, ev = trial_core, diag + t, trial
        if with_hessian or rate > CHORD_RATE:
            newton = None
    return None


def _profile_start(problem: Problem, solution: Solution, t: int, value: float) -> np.ndarray:
    """The MAP with effect t's common level set to ``value`` (its own deviations re-centred)."""
    lay, spec = problem.layout, problem.spec
    core = solution.core.copy()
    core[lay.glob(t)] = value
    devs = core[lay.block(t)]
    own = spec.deviation_mask(t) > 0
    if spec.tied is None or not spec.tied[t].any():  # deviations sum to zero (no reference level)
        core[lay.block(t)] = np.where(own, devs - devs[own].mean(), devs)
    return core


def _tangent(
    ev: Evaluation, newton: NewtonFactor | ArrowFactor, free: np.ndarray, index: int
) -> tuple[np.ndarray, np.ndarray, float]:
    """The profile path's tangent at ``ev``'s point, (dφ/dc over the free core, over the diagonal block),
    = −H_φφ⁻¹ H_φc from ``newton`` (``ev``'s factorisation), and the profile's curvature in c there, the
    Schur complement H_cc − H_cφ H_φφ⁻¹ H_φc."""
    unit = np.zeros(free.size)
    unit[index] = 1.0
    if isinstance(ev.H, ArrowHessian):
        column, column_diag = ev.H.matvec(unit), np.zeros(0)
    else:
        column, column_diag = ev.H[:, index], ev.B[index]
    d_core, d_diag = newton.solve(column[free], column_diag)  # = −H_ff⁻¹ H_f,c
    curvature = float(column[index] + column[free] @ d_core + column_diag @ d_diag)
    return d_core, d_diag, curvature


def _profile_fast(
    objective: Objective, problem: Problem, solution: Solution, t: int, values: tuple[float, ...]
) -> list[float] | None:
    """The quadratic (Wald) approximation of the profile log-likelihood at ``values`` of effect t's level,
    from ONE factorisation at the centre (None when it is not positive definite there).

    One Newton step from the centre start gives the centre's optimum and its log-likelihood; the profile's
    curvature in c is the Schur complement k = H_cc − H_cf H_ff⁻¹ H_fc (the same factorisation), so
    loglik(c) ≈ loglik(ĉ) − ½ k (c − ĉ)².  Cheap and exact for a Gaussian posterior; a flat (prior-selected)
    effect has k ≈ 0 either way, which is the verdict the diagnostics exist for.  ``full`` solves each point.
    """
    index = problem.layout.glob(t)
    free = _free_of(problem, t)
    centre_value = float(solution.core[index])
    core0 = _profile_start(problem, solution, t, centre_value)
    ev = objective.evaluate(core0, solution.diag)
    newton = newton_factor(ev, free)
    if newton is None:
        return None
    s, step_diag = newton.solve(ev.g[free], ev.g_diag)
    core = core0.copy()
    core[free] += s
    centre = objective.evaluate(core, solution.diag + step_diag, derivatives=False).loglik
    _, _, curvature = _tangent(ev, newton, free, index)
    prior_curvature = float(objective.prior.precision[index])  # the profile is of the likelihood alone
    k = max(curvature - prior_curvature, 0.0)
    return [centre - 0.5 * k * (value - centre_value) ** 2 for value in values]
