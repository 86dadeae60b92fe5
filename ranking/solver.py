"""MAP by damped Newton (Levenberg–Marquardt trust region) on sums of shard partials.

The Hessian has three parts: a dense "core" block (θ, the global and per-judge bias coefficients,
the ordinal thresholds — at most a few thousand), a *diagonal* block for the prompt difficulties δ_p
(a prompt only ever meets itself), and the dense core × prompt cross block.  A Newton step eliminates δ
by the Schur complement S = A − B D⁻¹ Bᵀ and factorises S once (Cholesky); the same S, inverted at the
optimum, is the Laplace covariance of the core parameters.  Damping μ is raised when S + μI is not
positive definite or a step fails to decrease the objective, lowered when the quadratic model predicts
the decrease well, so the fit starts cold (all zeros) and still converges quadratically at the end.

Convergence: relative gradient norm ‖g‖₂ / max(‖g₀‖₂, 1) below ``tol`` (g₀ the gradient at the start);
after that one undamped polishing step is taken, which makes the answer independent of the shard
count to ~1e-12 rather than ~tol.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla
from biasboard.ranking.model import Partials, Shard, Spec, partials

#: A shard is evaluated in slices of at most this many cells (views, no copy): the partials add, so this
#: only bounds the per-cell temporaries (a few dozen arrays of this length) — peak memory, not the answer.
CHUNK_CELLS: int = 1 << 17


@dataclass(frozen=True)
class Prior:
    """Independent Gaussian priors on the raw core and the diagonal (prompt) parameters.

    ``gauges`` are (indices, κ) pairs, each adding κ/2 (Σ_{i ∈ indices} p_i)²: a location fix for a set of
    parameters the likelihood sees only through differences (θ without a prior, per-judge deviations in a
    likelihood profile), with no effect on those differences.
    """

    mean: np.ndarray
    precision: np.ndarray
    mean_diag: np.ndarray
    precision_diag: np.ndarray
    gauges: tuple[tuple[np.ndarray, float], ...] = ()


@dataclass
class Evaluation:
    f: float
    loglik: float  # weighted log-likelihood only (no prior): −Σ partial f
    g: np.ndarray
    H: np.ndarray
    g_diag: np.ndarray
    H_diag: np.ndarray
    B: np.ndarray


class Objective:
    """Negative log-posterior over shards: Σ_shards partials(...) mapped to raw coordinates, plus the prior."""

    def __init__(self, spec: Spec, shards: Sequence[Shard], prior: Prior):
        self.spec = spec
        self.shards = list(shards)
        self.prior = prior
        self.E = spec.effective_map()
        self.ET = self.E.T.tocsr()

    def data_partials(self, core: np.ndarray, diag: np.ndarray, hessian: bool = True) -> Partials:
        eff = self.E @ core
        total = Partials.zeros(self.spec.layout)
        for shard in self.shards:
            for chunk in shard.chunks(CHUNK_CELLS):
                total += partials(eff, diag, chunk, self.spec, hessian)
        return total

    def evaluate(self, core: np.ndarray, diag: np.ndarray, *, derivatives: bool = True,
                 hessian: bool = True) -> Evaluation:
        """f, and unless ``derivatives=False`` the gradient, and unless ``hessian=False`` the Hessian blocks
        (left empty otherwise: a gradient-only evaluation costs about half a full one)."""
        part = self.data_partials(core, diag, hessian=derivatives and hessian)
        pr = self.prior
        dc = core - pr.mean
        dd = diag - pr.mean_diag
        f = part.f + 0.5 * float(dc @ (pr.precision * dc) + dd @ (pr.precision_diag * dd))
        sums = [float(core[idx].sum()) for idx, _ in pr.gauges]
        f += sum(0.5 * kappa * total**2 for (_, kappa), total in zip(pr.gauges, sums, strict=True))
        if not derivatives:
            return Evaluation(f, -part.f, np.empty(0), np.empty((0, 0)), np.empty(0), np.empty(0), np.empty((0, 0)))
        g = self.ET @ part.g + pr.precision * dc
        for (idx, kappa), total in zip(pr.gauges, sums, strict=True):
            g[idx] += kappa * total
        g_diag = part.g_diag + pr.precision_diag * dd
        if not hessian:
            return Evaluation(f, -part.f, g, np.empty((0, 0)), g_diag, np.empty(0), np.empty((0, 0)))
        left = self.ET @ part.H  # (n_core, n_eff)
        H = np.asarray(self.ET @ left.T)
        H = 0.5 * (H + H.T)
        H[np.diag_indices_from(H)] += pr.precision
        for idx, kappa in pr.gauges:
            H[np.ix_(idx, idx)] += kappa
        B = np.asarray(self.ET @ part.H_cross)
        return Evaluation(f, -part.f, g, H, g_diag, part.H_diag + pr.precision_diag, B)


@dataclass
class Solution:
    core: np.ndarray
    diag: np.ndarray
    evaluation: Evaluation
    free: np.ndarray  # bool mask over core
    iterations: int
    converged: bool
    grad_norm: float
    rel_grad: float
    scale: float  # the gradient norm convergence is relative to (at the cold start)


def _schur_factor(H: np.ndarray, B: np.ndarray, D: np.ndarray, mu: float):
    """Cholesky factor of S = H + μI − B (D + μ)⁻¹ Bᵀ, or None when not positive definite."""
    d = D + mu
    if np.any(d <= 0):
        return None, d
    S = H - (B / d) @ B.T if B.size else H.copy()
    S[np.diag_indices_from(S)] += mu
    try:
        return sla.cho_factor(S, lower=True, check_finite=False), d
    except (sla.LinAlgError, ValueError):
        return None, d


@dataclass(frozen=True)
class NewtonFactor:
    """A factorised Newton system at one point: the Schur complement's Cholesky factor with its blocks.

    ``solve`` gives the step (core, diag) for any gradient — for the point's own gradient a Newton step,
    for a nearby objective's gradient a chord (simplified Newton) step that reuses the factorisation.
    """

    factor: tuple
    B: np.ndarray  # cross block, free rows only
    d: np.ndarray  # diagonal block + μ

    def solve(self, g: np.ndarray, g_diag: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        B, d = self.B, self.d
        rhs = -g + (B @ (g_diag / d) if B.size else 0.0)
        s = sla.cho_solve(self.factor, rhs, check_finite=False)
        t = -(g_diag + (B.T @ s if B.size else 0.0)) / d
        return s, t


def newton_factor(ev: Evaluation, free: np.ndarray, mu: float = 0.0) -> NewtonFactor | None:
    """The factorised (damped) Newton system of ``ev`` over ``free``, or None when not positive definite."""
    B = ev.B[free]
    factor, d = _schur_factor(ev.H[np.ix_(free, free)], B, ev.H_diag, mu)
    return None if factor is None else NewtonFactor(factor, B, d)


def _newton_step(ev: Evaluation, free: np.ndarray, mu: float):
    newton = newton_factor(ev, free, mu)
    return None if newton is None else newton.solve(ev.g[free], ev.g_diag)


def _grad_norm(ev: Evaluation, free: np.ndarray) -> float:
    return float(np.sqrt(np.sum(ev.g[free] ** 2) + np.sum(ev.g_diag**2)))


def minimize(
    objective: Objective,
    core0: np.ndarray,
    diag0: np.ndarray,
    *,
    free: np.ndarray | None = None,
    tol: float = 1e-8,
    max_iter: int = 200,
    g0_norm: float | None = None,
) -> Solution:
    """Damped Newton from (core0, diag0) with the parameters outside ``free`` held fixed."""
    core, diag = core0.astype(float).copy(), diag0.astype(float).copy()
    free = np.ones(core.shape[0], bool) if free is None else free
    ev = objective.evaluate(core, diag)
    scale = max(_grad_norm(ev, free) if g0_norm is None else g0_norm, 1.0)
    mu = 0.0
    diag_scale = float(np.mean(np.abs(np.diag(ev.H)))) if ev.H.size else 1.0
    it = 0
    converged = False
    polished = False
    while it < max_iter:
        gn = _grad_norm(ev, free)
        if gn <= tol * scale:
            converged = True
            if polished:
                break
        step = _newton_step(ev, free, 0.0 if converged else mu)
        if step is None:  # S + μI not positive definite (the a_j terms make f non-convex far from the MAP)
            if converged or mu > 1e12 * diag_scale:
                break
            mu = max(10.0 * mu, 1e-4 * diag_scale)
            continue
        s, t = step
        new_core = core.copy()
        new_core[free] += s
        new_diag = diag + t
        new_ev = objective.evaluate(new_core, new_diag)
        it += 1
        g_f = ev.g[free]
        predicted = -(g_f @ s + ev.g_diag @ t) - 0.5 * (
            s @ (ev.H[np.ix_(free, free)] @ s) + 2 * t @ (ev.B[free].T @ s) + t @ (ev.H_diag * t)
        )
        actual = ev.f - new_ev.f
        if converged:
            polished = True
            if np.isfinite(new_ev.f) and _grad_norm(new_ev, free) < gn:
                core, diag, ev = new_core, new_diag, new_ev
            break
        # Near the optimum both decreases fall below f's rounding (f ~ 1e6 carries ~1e-10 of noise): judge
        # the step by the gradient then, or a converging Newton step is rejected forever and μ grows.
        noise = 1e-14 * max(abs(ev.f), 1.0)
        at_rounding = abs(actual) <= noise and predicted <= noise and _grad_norm(new_ev, free) < gn
        if np.isfinite(new_ev.f) and (at_rounding or (actual >= 0 and (actual > 1e-4 * predicted or predicted <= 0))):
            core, diag, ev = new_core, new_diag, new_ev
            if predicted <= 1e-15 * max(abs(ev.f), 1.0) and mu == 0.0:
                # The quadratic model predicts no further gain at machine precision: a stationary point.
                converged = _grad_norm(ev, free) <= tol * scale
                break
            ratio = actual / predicted if predicted > 0 else 1.0
            if ratio > 0.75:
                mu = mu / 4.0 if mu > 1e-10 * diag_scale else 0.0
            elif ratio < 0.25:
                mu = max(4.0 * mu, 1e-6 * diag_scale)
        else:
            mu = max(4.0 * mu, 1e-4 * diag_scale)
    gn = _grad_norm(ev, free)
    return Solution(core, diag, ev, free, it, bool(gn <= tol * scale), gn, gn / scale, scale)


def refit_nearby(
    objective: Objective,
    start: Solution,
    newton: NewtonFactor,
    *,
    tol: float = 1e-8,
    max_iter: int = 200,
    rate: float = 0.5,
) -> Solution:
    """Minimise an objective close to the one ``start`` solves (a bootstrap replicate), from ``start``.

    Chord Newton: every step solves with ``newton`` — the factorised Hessian at ``start`` — so a step
    costs one gradient-only evaluation and no factorisation; it converges linearly at the rate the
    Hessians differ by (a few per cent for a Poisson redraw of many cells).  Convergence is the same test
    as :func:`minimize`'s: relative gradient (to ``start.scale``) below ``tol``, and, as there, one more
    step is taken past it.  A step that raises f beyond rounding, or shrinks the gradient by less than
    ``rate``, hands over to :func:`minimize` (full damped Newton) from where it got, so the answer is
    never worse than a warm-started Newton fit.
    """
    free, scale = start.free, start.scale
    core, diag = start.core.copy(), start.diag.copy()
    ev = objective.evaluate(core, diag, hessian=False)
    it = 0
    converged = False
    while it < max_iter:
        gn = _grad_norm(ev, free)
        if gn <= tol * scale:
            converged = True  # like minimize: one polishing step past the tolerance (1-2 digits here)
        s, t = newton.solve(ev.g[free], ev.g_diag)
        new_core = core.copy()
        new_core[free] += s
        new_diag = diag + t
        new_ev = objective.evaluate(new_core, new_diag, hessian=False)
        it += 1
        noise = 1e-14 * max(abs(ev.f), 1.0)
        new_gn = _grad_norm(new_ev, free)
        if converged:
            if np.isfinite(new_ev.f) and new_gn < gn:
                core, diag, ev, gn = new_core, new_diag, new_ev, new_gn
            return Solution(core, diag, ev, free, it, True, gn, gn / scale, scale)
        if not np.isfinite(new_ev.f) or new_ev.f > ev.f + noise or new_gn > rate * gn:
            break
        core, diag, ev = new_core, new_diag, new_ev
    solution = minimize(objective, core, diag, free=free, tol=tol, max_iter=max(max_iter - it, 1), g0_norm=scale)
    solution.iterations += it
    return solution


def laplace_covariance(solution: Solution) -> np.ndarray:
    """Posterior covariance of the core parameters (δ marginalised), zero rows for fixed parameters."""
    ev, free = solution.evaluation, solution.free
    factor, _ = _schur_factor(ev.H[np.ix_(free, free)], ev.B[free], ev.H_diag, 0.0)
    n = ev.H.shape[0]
    cov = np.zeros((n, n))
    if factor is None:
        # Not positive definite at the optimum (should not happen with proper priors): use a pseudo-inverse.
        d = ev.H_diag
        S = ev.H[np.ix_(free, free)] - ((ev.B[free] / d) @ ev.B[free].T if ev.B.size else 0.0)
        inv = np.linalg.pinv(S)
    else:
        inv = sla.cho_solve(factor, np.eye(int(free.sum())), check_finite=False)
    cov[np.ix_(free, free)] = 0.5 * (inv + inv.T)
    return cov
