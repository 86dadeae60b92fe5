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

import numpy as np
from biasboard.ranking.arrowhead import ArrowHessian
from biasboard.ranking.config import ModelConfig
from biasboard.ranking.data import Dataset
from biasboard.ranking.graph import component_names, model_components
from biasboard.ranking.model import AFF, LEN, POS
from biasboard.ranking.problem import Problem, prior_sd_of_effect
from biasboard.ranking.rank_stats import kendall_tau_b, spearman
from biasboard.ranking.solver import Objective, Solution, minimize, newton_factor

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


def profile_ranges(problem: Problem, solution: Solution, config: ModelConfig, shards: int = 1) -> dict:
    """Profile log-likelihood range (nats) of each enabled global covariate effect over ĉ ± 2 prior SDs."""
    lay, spec = problem.layout, problem.spec
    out: dict = {}
    for name, t in PROFILED.items():
        if not spec.masks[t].any():
            continue
        objective = problem.objective(shards, prior=problem.profile_prior(t))
        sd_glob, _ = prior_sd_of_effect(problem, t)
        delta = 2.0 * sd_glob
        centre = float(solution.core[lay.glob(t)])
        free = np.ones(lay.n_core, bool)
        free[lay.glob(t)] = False
        values = (centre - delta, centre, centre + delta)
        logliks = (
            _profile_fast(
                objective, _profile_start(problem, solution, t, centre), solution.diag, free, lay.glob(t), values
            )
            if config.diagnostics == "fast"
            else None
        )
        if logliks is None:
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


def _profile_fast(
    objective: Objective, core0: np.ndarray, diag0: np.ndarray, free: np.ndarray, index: int, values: tuple[float, ...]
) -> list[float] | None:
    """The quadratic (Wald) approximation of the profile log-likelihood at ``values`` of core[index], from
    ONE factorisation at the centre (None when it is not positive definite there).

    One Newton step from the centre start gives the centre's optimum and its log-likelihood; the profile's
    curvature in c is the Schur complement k = H_cc − H_cf H_ff⁻¹ H_fc (the same factorisation), so
    loglik(c) ≈ loglik(ĉ) − ½ k (c − ĉ)².  Cheap and exact for a Gaussian posterior; a flat (prior-selected)
    effect has k ≈ 0 either way, which is the verdict the diagnostics exist for.  ``full`` solves each point.
    """
    ev = objective.evaluate(core0, diag0)
    newton = newton_factor(ev, free)
    if newton is None:
        return None
    s, t = newton.solve(ev.g[free], ev.g_diag)
    core = core0.copy()
    core[free] += s
    centre = objective.evaluate(core, diag0 + t, derivatives=False).loglik
    unit = np.zeros(core0.size)
    unit[index] = 1.0
    if isinstance(ev.H, ArrowHessian):
        column, column_diag = ev.H.matvec(unit), np.zeros(0)
    else:
        column, column_diag = ev.H[:, index], ev.B[index]
    d_core, d_diag = newton.solve(column[free], column_diag)  # = −H_ff⁻¹ H_f,c
    curvature = float(column[index] + column[free] @ d_core + column_diag @ d_diag)
    prior_curvature = float(objective.prior.precision[index])  # the profile is of the likelihood alone
    k = max(curvature - prior_curvature, 0.0)
    return [centre - 0.5 * k * (value - core0[index]) ** 2 for value in values]
