"""Entry points: the naive leaderboard and the bias-aware one, fit on cells.

``fit_naive`` is plain Bradley–Terry with ties as half wins (Evalica's and the arena notebooks'
convention: a tie adds ½ to each side's wins), maximum likelihood, ratings normalised to mean 0 on the
logit scale.  ``fit_bias_aware`` is the bias-aware model of :mod:`biasboard.ranking.model`, MAP under
the Gaussian priors of :class:`~biasboard.ranking.config.Priors`.  Both fit on cells split into
``shards`` parts whose partial sums add; the answer does not depend on ``shards``.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np
import polars as pl
from biasboard.ranking.arrowhead import ArrowFactor, BlockCovariance
from biasboard.ranking.attribution import attribute_moves
from biasboard.ranking.bias_table import bias_table
from biasboard.ranking.bootstrap import Engine, Redraws, default_workers
from biasboard.ranking.bootstrap import run as run_replicates
from biasboard.ranking.composite import godambe_covariance, is_composite
from biasboard.ranking.config import ModelConfig, NaiveConfig
from biasboard.ranking.data import CellsInput, Dataset, PairArrays, build_dataset
from biasboard.ranking.diagnostics import (
    compare_rankings,
    connectivity_report,
    covariate_report,
    profile_ranges,
)
from biasboard.ranking.graph import comparison_components, mle_exists, model_components, one_sided_models
from biasboard.ranking.model import DISC, LEN, STYLE_BLOCKS, fixed_scale_judges
from biasboard.ranking.pages import base_pages
from biasboard.ranking.problem import (
    NO_LENGTHS_NOTE,
    Problem,
    bias_aware_problem,
    naive_ordinal_problem,
    naive_problem,
)
from biasboard.ranking.reference_rating import discrimination_row, reference_replicates
from biasboard.ranking.result import Z95, FitResult, SolverState, empty_bias_table
from biasboard.ranking.solver import (
    NewtonFactor,
    Solution,
    covariance_block,
    laplace_covariance,
    minimize,
    newton_factor,
    refit_nearby,
)
from biasboard.ranking.uncertainty import (
    centre_within,
    centring_matrix,
    percentile_interval,
    top_k_probabilities,
)
from biasboard.schemas.names import spelling_twins
from biasboard.schemas.summary import NAIVE_LAPLACE, NAIVE_SANDWICH, ORDINAL_ONLY
from biasboard.schemas.wording import first_few


def _dataset(
    cells: CellsInput | Dataset, score_cells: CellsInput | None = None, judge_pool: str | None = None
) -> Dataset:
    return cells if isinstance(cells, Dataset) else build_dataset(cells, score_cells, judge_pool=judge_pool)


def n_battles(data: Dataset) -> np.ndarray:
    """Battles per model against a different model (self-battles inform judge effects, not θ); on an
    ordinal-only data set, the grades per model (what its rating rests on)."""
    if data.ordinal_only and data.scores is not None:
        grades = data.scores.counts.sum(axis=1)
        return np.bincount(data.scores.m, weights=grades, minlength=len(data.models))
    pairs = data.pairs
    n = np.where(pairs.a != pairs.b, pairs.n, 0.0)  # zero weights, not a copy of the kept cells' models
    m = len(data.models)
    return np.bincount(pairs.a, weights=n, minlength=m) + np.bincount(pairs.b, weights=n, minlength=m)


def _theta_posterior(
    problem: Problem, solution: Solution, cov_core: np.ndarray | BlockCovariance, component: np.ndarray
):
    """Ratings and their covariance, each comparison component centred on its own (sum to zero within it)."""
    lay = problem.layout
    theta = solution.core[lay.theta]
    proj = centring_matrix(component, lay.n_models)
    cov = proj @ covariance_block(cov_core, lay.theta) @ proj.T
    cov = 0.5 * (cov + cov.T)
    rating = centre_within(theta, component)
    se = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    return rating, cov, se


def theta_cholesky(problem: Problem, cov_core: np.ndarray | BlockCovariance) -> np.ndarray:
    """Lower Cholesky factor of θ's (uncentred, positive definite) posterior covariance block."""
    block = covariance_block(cov_core, problem.layout.theta)
    jitter = 1e-12 * max(float(np.mean(np.diag(block))), 1e-300)
    return np.linalg.cholesky(block + jitter * np.eye(block.shape[0]))


def centred_draws(
    rating: np.ndarray, chol: np.ndarray, n: int, rng: np.random.Generator, component: np.ndarray | None = None
) -> np.ndarray:
    """Draws of centred θ: uncentred N(0, Σ) draws, each centred (within components) — exactly
    N(θ̂, PΣPᵀ) — at Cholesky cost."""
    z = rng.standard_normal((n, rating.size)) @ chol.T
    return rating + centre_within(z, component)


class BootstrapDraws(NamedTuple):
    """A bootstrap's replicates, in replicate order."""

    theta: np.ndarray  # centred ratings (replicates × models)
    cores: np.ndarray  # raw core parameters (replicates × core), for the bias table and the reference's φ
    unconverged: int  # replicates whose refit ran out of iterations short of the fit's tolerance (kept: see below)


def bootstrap_replicates(
    problem: Problem,
    solution: Solution,
    replicates: int,
    shards: int,
    seed: int,
    tol: float,
    max_iter: int,
    *,
    mode: str = "fast",
    workers: int | None = None,
) -> BootstrapDraws:
    """Poisson bootstrap: refit on redrawn cell counts; returns the centred θ draws, the raw core draws and how
    many replicates stopped short of the tolerance (:class:`BootstrapDraws`).

    Replicate r's counts come from :func:`~biasboard.ranking.bootstrap.replicate_rng` (seed, r) in every
    mode, so the modes refit the same replicates:

    - ``"fast"`` (the default): :mod:`biasboard.ranking.bootstrap` — from the MAP by chord Newton with the
      MAP's factorised Hessian, a lean gradient, in ``workers`` processes (default
      :func:`~biasboard.ranking.bootstrap.default_workers`), to the fit's relative-gradient tolerance;
    - ``"refit"``: the model's own objective per replicate with :func:`~biasboard.ranking.solver.refit_nearby`
      (the same warm chord start, a checked polishing step), sequentially — the previous engine;
    - ``"cold"``: every replicate solved from a cold start, exactly as the fit itself is solved.
    """
    lay = problem.layout
    component = model_components(problem.data, grades=not problem.naive)
    stream = problem.data.stream
    if stream is not None and problem.naive:
        # The naive likelihood sees only the per-pair totals, and a total's Poisson redraw is the sum of its cells'
        # in distribution: the totals (in memory) are redrawn.
        totals = pair_totals(problem.data.pairs, len(problem.data.models))
        problem = replace(problem, data=replace(problem.data, pairs=totals, stream=None))
        stream = None
    if mode == "fast":
        engine = Engine(problem, solution, shards, tol, max_iter, seed)
        cells = len(problem.data.pairs) if stream is None else stream.n_cells
        n_workers = default_workers(replicates, cells) if workers is None else workers
        reps = run_replicates(engine, replicates, n_workers)
        cores, converged = np.array([rep.core for rep in reps]), [rep.converged for rep in reps]
    elif mode in ("refit", "cold"):
        redraws = Redraws(problem, seed)
        newton = None if mode == "cold" else newton_factor(solution.evaluation, solution.free)
        solved = [
            _slow_replicate(redraws.problem_of(r), solution, shards, newton, tol, max_iter) for r in range(replicates)
        ]
        cores, converged = np.array([sol.core for sol in solved]), [sol.converged for sol in solved]
    else:
        raise ValueError(f"bootstrap mode must be fast, refit or cold, got {mode!r}")
    cores = cores.reshape(replicates, lay.n_core)
    return BootstrapDraws(centre_within(cores[:, lay.theta], component), cores, converged.count(False))


def _slow_replicate(
    replicate: Problem,
    solution: Solution,
    shards: int,
    newton: NewtonFactor | ArrowFactor | None,
    tol: float,
    max_iter: int,
) -> Solution:
    """One replicate (its problem: the redrawn counts) refit by the model's objective: warm chord with
    ``newton``, or from a cold start (``newton`` None)."""
    if newton is None:
        if replicate.naive:
            return minimize(replicate.objective(shards), *replicate.zeros(), tol=tol, max_iter=max_iter)
        return solve_bias_aware(replicate, ModelConfig(tol=tol, max_iter=max_iter), shards)
    return refit_nearby(replicate.objective(shards), solution, newton, tol=tol, max_iter=max_iter)


#: Fewer bootstrap replicates than this get a warning: their 2.5% and 97.5% points are interpolated between the
#: few most extreme replicates (below 40 between the two most extreme), so an interval can even miss its own rating.
FEW_REPLICATES: int = 100


#: The boards' names in warnings, by ``FitResult.method``.
_BOARD = {"naive": "naive", "bias_aware": "corrected"}
#: A bootstrap interval this many times wider than the Laplace one is named (:func:`_wide_bootstrap_warnings`).
WIDE_BOOTSTRAP: float = 3.0


def _wide_bootstrap_warnings(method: str, models: Sequence[str], boot_width: np.ndarray, se: np.ndarray) -> list[str]:
    """A warning naming the models whose bootstrap interval is :data:`WIDE_BOOTSTRAP` times their Laplace one or more.

    Why: a model with few wins (or few losses) has none in some replicates, and there its rating has no maximum and
    runs off; its percentile interval then spans thousands of points ([−1931, 803] against a Laplace [318, 794] for
    llama-13b, 2 wins in 60 battles of MT-Bench PBA's stem slice) and widens the models' it is centred with."""
    laplace = 2.0 * Z95 * np.asarray(se)
    ratio = np.divide(boot_width, laplace, out=np.zeros_like(laplace), where=laplace > 0)
    wide = np.flatnonzero(ratio >= WIDE_BOOTSTRAP)
    if not wide.size:
        return []
    order = wide[np.argsort(-ratio[wide], kind="stable")]
    named = first_few([f"{models[i]} ({ratio[i]:.1f}x)" for i in order], 5)
    return [
        f"{_BOARD.get(method, method)} board: the bootstrap intervals of {named} are {WIDE_BOOTSTRAP:g} or more "
        "times their Laplace widths: a model with few wins or few losses has none in some replicates, where its "
        "rating runs off, so its interval (and the ranks near it) is wider than its battles support; the Laplace "
        "intervals (without --bootstrap) are the steadier reading for it"
    ]


def _unconverged_bootstrap_warning(method: str, unconverged: int, replicates: int) -> str:
    """A warning counting the replicates whose refit stopped at the iteration limit short of the tolerance.

    They are kept where they stopped: a replicate fails to converge where its redraw leaves a rating with little
    to pin it (a model or judge with no wins or no losses in it), so dropping them would keep only the tamer
    redraws and narrow the intervals; kept, the intervals are if anything wide on that side."""
    return (
        f"{_BOARD.get(method, method)} board: {unconverged} of {replicates} bootstrap replicate(s) did not converge "
        "within the iteration limit and are used where their refit stopped (dropping them would keep only the tamer "
        "redraws); their ratings are the least settled, so the bootstrap intervals may be wide"
    )


def _off_centre_bootstrap_warnings(
    method: str, models: Sequence[str], rating: np.ndarray, low: np.ndarray, high: np.ndarray, replicates: int
) -> list[str]:
    """A warning naming the models whose published rating lies outside their own bootstrap interval, and why.

    Why: on a board of many few-battle voter-judges the replicates' ratings spread away from the fit's (the judges'
    shrinkage changes with each redraw; fresh fits on Poisson-resampled battles too: slope 1.07–1.10 against the
    MAP at 5,000 voters), and 7 of 30 intervals missed their own ratings with no word.  Under :data:`FEW_REPLICATES`
    replicates the cause is their number (``--bootstrap 1``: every interval is one point), and blaming voter-judges
    sent the user looking for a cause the board does not have."""
    outside = np.flatnonzero((rating < low) | (rating > high))
    if not outside.size:
        return []
    named = first_few([models[int(i)] for i in outside], 5)
    return [
        f"{_BOARD.get(method, method)} board: {outside.size} of {len(models)} published ratings lie outside their "
        f"own bootstrap intervals ({named}): {_off_centre_cause(replicates)}"
    ]


def _off_centre_cause(replicates: int) -> str:
    """Why ratings lie outside their bootstrap intervals: too few replicates to place the ends, or spread replicates."""
    if replicates < FEW_REPLICATES:
        return (
            f"{replicates} replicate(s) are too few to place a 95% interval's ends (see the warning on too few "
            "replicates), so this says nothing of the fit"
        )
    return (
        "the replicates' ratings are spread away from the fit's (as on boards of many few-battle voter-judges, whose "
        "shrinkage changes with each redraw), so the bootstrap intervals, P(top-k) and rank intervals are off-centre; "
        "the Laplace intervals (without --bootstrap) are centred on the ratings"
    )


def bootstrap_interval_warnings(
    method: str,
    models: Sequence[str],
    rating: np.ndarray,
    se: np.ndarray,
    low: np.ndarray,
    high: np.ndarray,
    replicates: int,
) -> list[str]:
    """The warnings about a board's bootstrap intervals that depend on the rating they are published for: the
    intervals far wider than the Laplace ones (:func:`_wide_bootstrap_warnings`) and the ratings outside their own
    intervals (:func:`_off_centre_bootstrap_warnings`), of ``replicates`` replicates.  One function for θ's board and
    for the reference rating's (:func:`~biasboard.ranking.reference.with_rating`), which replaces θ's intervals by φ's
    and so these warnings."""
    return _wide_bootstrap_warnings(method, models, high - low, se) + _off_centre_bootstrap_warnings(
        method, models, rating, low, high, replicates
    )


def _assemble(
    problem: Problem,
    solution: Solution,
    cov_core: np.ndarray | BlockCovariance,
    *,
    method: str,
    k: int,
    draws: int,
    seed: int,
    boot_theta: np.ndarray | None,
    boot_unconverged: int = 0,
    bias,
    diagnostics: dict,
    boot_reference: np.ndarray | None = None,
) -> FitResult:
    """The published result.  With bootstrap replicates the CIs (percentile), P(top-k) and the rank
    intervals come from the replicates (``uncertainty="bootstrap"``); otherwise from the Laplace posterior, or its
    Godambe sandwich where battles and grades are weighed unequally (``"godambe"``,
    :mod:`~biasboard.ranking.composite`)."""
    component = model_components(problem.data, grades=not problem.naive)
    rating, cov, se = _theta_posterior(problem, solution, cov_core, component)
    rng = np.random.default_rng(seed)
    chol = theta_cholesky(problem, cov_core)
    groups = component if component.max() > 0 else None
    samples = centred_draws(rating, chol, draws, rng, groups)
    ci_low, ci_high = rating - Z95 * se, rating + Z95 * se
    boot_lo = boot_hi = None
    uncertainty = "godambe" if is_composite(problem.spec) else "laplace"
    if boot_theta is not None and len(boot_theta):
        boot_lo, boot_hi = percentile_interval(boot_theta)
        ci_low, ci_high, samples, uncertainty = boot_lo, boot_hi, boot_theta, "bootstrap"
        models = problem.data.models
        diagnostics["warnings"].extend(
            bootstrap_interval_warnings(method, models, rating, se, boot_lo, boot_hi, len(boot_theta))
        )
        if boot_unconverged:
            diagnostics["warnings"].append(_unconverged_bootstrap_warning(method, boot_unconverged, len(boot_theta)))
        if len(boot_theta) < FEW_REPLICATES:
            diagnostics["warnings"].append(
                f"the 95% intervals, P(top-k) and rank intervals are percentiles of only {len(boot_theta)} bootstrap "
                "replicate(s), too few to place a 95% interval's ends (an interval can miss its own rating): use "
                f"--bootstrap {FEW_REPLICATES} or more, or leave it off for the Laplace intervals"
            )
    p_top = top_k_probabilities(samples, k, groups)
    return FitResult(
        models=problem.data.models,
        rating=rating,
        se=se,
        ci_low=ci_low,
        ci_high=ci_high,
        cov=cov,
        n_battles=n_battles(problem.data),
        bias=bias,
        p_top_k=p_top,
        k=k,
        diagnostics=diagnostics,
        converged=solution.converged,
        grad_norm=solution.grad_norm,
        iterations=solution.iterations,
        method=method,
        rel_grad=solution.rel_grad,
        loglik=solution.evaluation.loglik,
        component=component,
        boot_ci_low=boot_lo,
        boot_ci_high=boot_hi,
        solver=SolverState(solution.core, solution.diag, cov_core, chol),
        boot_theta=boot_theta if uncertainty == "bootstrap" else None,
        uncertainty=uncertainty,
        boot_reference=boot_reference,
    )


def _replicates_of(
    config: NaiveConfig | ModelConfig, problem: Problem, solution: Solution, shards: int
) -> BootstrapDraws | None:
    """The Poisson-bootstrap replicates a config asks for (streams of its seed), or None for none."""
    if not config.bootstrap:
        return None
    return bootstrap_replicates(problem, solution, config.bootstrap, shards, config.seed, config.tol, config.max_iter)


def fit_naive(cells: CellsInput | Dataset, *, config: NaiveConfig | None = None, shards: int = 1) -> FitResult:
    """Bradley–Terry with ties as half wins, maximum likelihood on pair cells (what arenas publish)."""
    config = config or NaiveConfig()
    data = _dataset(cells)
    if data.ordinal_only:
        return _fit_naive_ordinal(data, config, shards)
    warnings: list[str] = []
    theta_sd = config.theta_sd
    component = comparison_components(data.pairs, len(data.models))
    # A split graph alone does not need a prior: each component gets its own gauge (its MLE exists when
    # every component is strongly connected), so no rating is pulled by a prior across components.
    if theta_sd is None and not mle_exists(data.pairs, len(data.models), within_components=True):
        theta_sd = config.fallback_theta_sd
        warnings.append(
            "naive Bradley-Terry: the maximum-likelihood ratings do not exist (some model never wins or never "
            f"loses against the rest of its component); fitted with a N(0, {theta_sd:g}^2) prior on ratings "
            "instead"
        )
    problem = naive_problem(data, theta_sd, component)
    totals = pair_totals(data.pairs, len(data.models))
    objective = problem.objective(shards, pairs=totals)
    solution = minimize(objective, *problem.zeros(), tol=config.tol, max_iter=config.max_iter)
    notes = _NaiveNotes(warnings, "a tie counts as half a win for each side (Evalica/arena convention)", theta_sd)
    cov = laplace_covariance(solution)
    if theta_sd is None:  # maximum likelihood: the half-win score's own variance (a prior's posterior stays Laplace)
        sandwich = half_win_sandwich(totals, solution.core[problem.layout.theta], cov, component)
        if sandwich is not None:
            cov, notes = sandwich, replace(notes, covariance=NAIVE_SANDWICH)
    return _naive_result(config, problem, solution, shards, data, notes, cov)


def half_win_sandwich(
    totals: PairArrays, theta: np.ndarray, bread: np.ndarray | BlockCovariance, component: np.ndarray
) -> np.ndarray | None:
    """The naive ratings' sandwich covariance H⁻¹ J H⁻¹, J the battles' summed score outer products (a tie scores
    ½ − p): what arena-rank's ``BradleyTerry`` publishes for the same fit (``ci_method="sandwich"``).

    Why: "a tie is half a win" is not a likelihood of the three outcomes, so its Hessian is not the ratings'
    information.  The Laplace covariance H⁻¹ takes every tie for a coin flip (score variance p(1 − p) ≈ ¼)
    whose score is ½ − p ≈ 0: with 41% ties (Davidson, 6 models, 1,500 battles, 150 runs) the Laplace SEs were
    1.38× the ratings' spread and 95% intervals covered 99.8%; on MTEB-Arena's retrieval battles (47% ties) the
    naive 95% intervals were 1.57× arena-rank's.  ``bread`` is the Laplace covariance (its gauge direction is
    added back, centred away later, so that θ's block stays positive definite for the posterior draws).  None where
    there is no sandwich to publish: when the scores leave a model's rating with no variance (every battle of it a tie
    at p = ½, e.g. two models whose every battle is a tie) or the bread is block-factored; the caller then keeps the
    Laplace covariance and says so (``diagnostics["covariance"]``), so the report does not call it the sandwich.
    """
    if isinstance(bread, BlockCovariance):  # (a naive fit is dense: θ alone)
        return None
    p = 1.0 / (1.0 + np.exp(theta[totals.b] - theta[totals.a]))
    v = totals.win_a * (1.0 - p) ** 2 + totals.win_b * p**2 + totals.tie * (0.5 - p) ** 2
    m = theta.size
    meat = np.zeros((m, m))
    np.add.at(meat, (totals.a, totals.a), v)
    np.add.at(meat, (totals.b, totals.b), v)
    np.add.at(meat, (totals.a, totals.b), -v)
    np.add.at(meat, (totals.b, totals.a), -v)
    block = bread[:m, :m]
    sandwich = block @ meat @ block
    proj = centring_matrix(component, m)
    laplace_var = np.diag(proj @ block @ proj.T)
    if np.any(np.diag(proj @ sandwich @ proj.T) <= 1e-9 * laplace_var):
        return None
    gauge = block - proj @ block @ proj.T  # the Laplace's variance along each component's common shift
    out = bread.copy()
    out[:m, :m] = 0.5 * (sandwich + sandwich.T) + gauge
    return out


def pair_totals(pairs: PairArrays, m: int) -> PairArrays:
    """The cells summed per ordered model pair (every judge, length and order together): all the naive
    likelihood sees — its η is θ_a − θ_b in every cell — so the same objective over at most M² cells
    instead of every (judge, pair, length bin, …) cell (530k → 9.9k on 1M simulated battles: the naive fit's
    passes over the cells 0.19 → 0.01 s).  The covariates are left 0 (the naive model has none)."""
    key = pairs.a * m + pairs.b
    n = np.bincount(key, weights=pairs.n, minlength=m * m)
    kept = np.flatnonzero(n)

    def total(w: np.ndarray) -> np.ndarray:
        return np.bincount(key, weights=w, minlength=m * m)[kept]

    zero = np.zeros(kept.size)
    return PairArrays(
        a=kept // m,
        b=kept % m,
        j=np.zeros(kept.size, np.int64),
        win_a=total(pairs.win_a),
        win_b=total(pairs.win_b),
        tie=total(pairs.tie),
        bothbad=total(pairs.bothbad),
        n=n[kept],
        x=zero,
        ds=zero,
        n_len=zero,
        sum_x2=zero,
        sum_loglen_a=zero,
        sum_loglen_b=zero,
        pos=np.ones(kept.size),
    )


def _fit_naive_ordinal(data: Dataset, config: NaiveConfig, shards: int) -> FitResult:
    """The naive board of an ordinal-only data set: the grades pooled over judges and prompts
    (:func:`~biasboard.ranking.problem.naive_ordinal_problem`), maximum likelihood when it exists."""
    warnings: list[str] = []
    theta_sd = config.theta_sd
    assert data.scores is not None
    counts = np.zeros((len(data.models), data.n_categories))
    np.add.at(counts, data.scores.m, data.scores.counts)
    total = counts.sum(axis=1)
    extreme = (counts[:, 0] == total) | (counts[:, -1] == total)
    if theta_sd is None and extreme.any():
        theta_sd = config.fallback_theta_sd
        names = ", ".join(data.models[i] for i in np.flatnonzero(extreme)[:5])
        warnings.append(
            f"naive ordinal board: the maximum-likelihood ratings do not exist (every grade of {names} is the "
            f"lowest or the highest used); fitted with a N(0, {theta_sd:g}^2) prior on ratings instead"
        )
    problem = naive_ordinal_problem(data, theta_sd)
    solution = solve_bias_aware(problem, ModelConfig(tol=config.tol, max_iter=config.max_iter), shards)
    notes = _NaiveNotes(warnings, "single grades: no ties", theta_sd)
    return _naive_result(config, problem, solution, shards, problem.data, notes)


@dataclass(frozen=True)
class _NaiveNotes:
    """What a naive board's diagnostics say beyond the connectivity report."""

    warnings: list[str]
    tie_convention: str
    theta_sd: float | None
    #: Which covariance the intervals come from (``NAIVE_SANDWICH`` or ``NAIVE_LAPLACE``): the Laplace one unless the
    #: maximum-likelihood board of battles has its sandwich (:func:`half_win_sandwich`).
    covariance: str = NAIVE_LAPLACE


def _naive_result(
    config: NaiveConfig,
    problem: Problem,
    solution: Solution,
    shards: int,
    data: Dataset,
    notes: _NaiveNotes,
    cov: np.ndarray | BlockCovariance | None = None,
) -> FitResult:
    """A solved naive problem → its published result (pairwise and ordinal naive boards alike); ``cov``: the
    parameters' covariance (the Laplace one when None)."""
    boot = _replicates_of(config, problem, solution, shards)
    diagnostics = connectivity_report(data, grades=not problem.naive)
    diagnostics["warnings"] = notes.warnings + diagnostics.pop("warnings")
    diagnostics["tie_convention"] = notes.tie_convention
    diagnostics["prior_theta_sd"] = notes.theta_sd
    diagnostics["covariance"] = notes.covariance
    if not solution.converged:
        diagnostics["warnings"].append(f"naive fit did not converge (relative gradient {solution.rel_grad:.2e})")
    return _assemble(
        problem,
        solution,
        laplace_covariance(solution) if cov is None else cov,
        method="naive",
        k=config.k,
        draws=config.posterior_draws,
        seed=config.seed,
        boot_theta=None if boot is None else boot.theta,
        boot_unconverged=0 if boot is None else boot.unconverged,
        bias=empty_bias_table(),
        diagnostics=diagnostics,
    )


#: Relative gradient at which the first phase (a_j held fixed) of :func:`solve_bias_aware` hands over, by
#: solver (dense, judge-blocked).  The first phase only finds a start for the second.  On the judge-blocked
#: path a Hessian and its factorisation cost ~8 gradient evaluations, and one Newton step of the first phase
#: is start enough: measured on 2 × 25k voter-judges (bench/fit.py --voters, seeds 0 and 1), going on to
#: 1e-4 cost one more factorisation and 5 chord steps, to 1e-3 the chord steps alone (4-5), and the second
#: phase then needed the same three factorisations — it starts from a point where a_j moves anyway.
FIRST_PHASE_TOL: dict[bool, float] = {False: 1e-4, True: 1e-1}


def solve_bias_aware(
    problem: Problem, config: ModelConfig, shards: int = 1, fixed: dict[int, float] | None = None
) -> Solution:
    """MAP of a bias-aware problem from a cold start, with ``fixed`` raw parameters held at given values.

    Two phases: the discriminations a_j make the objective non-convex (η is bilinear in a_j and θ), so
    Newton first runs with a_j held at their start (the rest is convex: Davidson is log-concave in η, ψ and
    η is then linear), to a loose tolerance (:data:`FIRST_PHASE_TOL`); then with everything free from there,
    where the Hessian is positive definite.  Convergence is relative to the full gradient at the cold start.

    A judge-blocked solve runs on base pages throughout (:func:`~biasboard.ranking.pages.base_pages`), its
    start evaluation included: the first pass allocates the largest fresh arrays of the fit.
    """
    with base_pages() if problem.spec.judge_blocks else nullcontext():
        return _solve_bias_aware(problem, config, shards, fixed)


def _solve_bias_aware(problem: Problem, config: ModelConfig, shards: int, fixed: dict[int, float] | None) -> Solution:
    """:func:`solve_bias_aware`'s two phases."""
    core, diag = problem.zeros()
    free = np.ones(core.size, bool)
    for index, value in (fixed or {}).items():
        core[index] = value
        free[index] = False
    objective = problem.objective(shards)
    # Each phase's start evaluation is moved into minimize (``held.pop()``), not kept by this frame: a
    # judge-blocked Hessian (~50 MB at 50k voter-judges) is then freed once the step from it is taken.
    held = [objective.evaluate(core, diag)]
    scale = float(np.sqrt(np.sum(held[0].g[free] ** 2) + np.sum(held[0].g_diag ** 2)))
    disc = problem.layout.block(DISC)
    if problem.spec.masks[DISC].any() and free[disc].any():
        convex = free.copy()
        convex[disc] = False
        first = minimize(
            objective,
            core,
            diag,
            free=convex,
            tol=FIRST_PHASE_TOL[objective.blocked],
            max_iter=config.max_iter,
            g0_norm=scale,
            start=held.pop(),
            polish=False,
        )
        core, diag = first.core, first.diag
        held.append(first.evaluation)
        iterations = first.iterations
        del first
    else:
        iterations = 0
    solution = minimize(
        objective, core, diag, free=free, tol=config.tol, max_iter=config.max_iter, g0_norm=scale, start=held.pop()
    )
    solution.iterations += iterations
    return solution


def fit_bias_aware(
    cells: CellsInput | Dataset,
    score_cells: CellsInput | None = None,
    *,
    config: ModelConfig | None = None,
    shards: int = 1,
    naive: FitResult | None = None,
) -> FitResult:
    """The bias-aware model (:mod:`biasboard.ranking.model`) on pair cells (and, optionally, ordinal score cells).

    Pass the ``naive`` fit of the same cells to get Kendall τ / Spearman naive vs corrected and the
    covariate correlation of both in the diagnostics.
    """
    config = config or ModelConfig()
    problem = bias_aware_problem(_dataset(cells, score_cells, config.judge_pool), config)
    solution = solve_bias_aware(problem, config, shards)
    return publish_bias_aware(problem, solution, config, shards=shards, naive=naive)


def _prior_bound_warning(data: Dataset, theta_sd: float | None) -> list[str]:
    """A warning when the verdicts alone put no bound on some rating (complete separation: a model that never wins
    or never loses against the rest of its component), so the corrected board's rating and interval for it are the
    prior's.  Why: the naive board said so and fell back to a prior, while the corrected board, whose prior makes its
    ratings finite anyway, published 1195 [883, 1507] for a model that won its two battles, with no word."""
    if data.ordinal_only or theta_sd is None or mle_exists(data.pairs, len(data.models), within_components=True):
        return []
    named = [data.models[int(i)] for i in one_sided_models(data.pairs, len(data.models))]
    if len(named) == 1:
        which = f"{named[0]} never wins or never loses"
    else:
        which = f"{first_few(named, 5)} each never win or never lose" if named else "a group of models never loses"
    return [
        f"corrected board: {which} against the rest of the comparison component, so the verdicts put no bound on "
        f"some ratings: those ratings and their intervals come from the N(0, {theta_sd:g}^2) prior on ratings, not "
        "from the data (battles that such a model loses, or wins, bound it)"
    ]


def _spelling_twins_warning(data: Dataset) -> list[str]:
    """A warning naming models or judges whose names differ only as the name rules now read them (trimmed, NFC):
    days stored before the rules did so keep the old spelling (:func:`~biasboard.schemas.names.spelling_twins`),
    and their battles sit in a second row until those days are aggregated again."""
    found = [
        (kind, group)
        for kind, names in (("models", data.models), ("judges", data.judges))
        for group in spelling_twins(names)
    ]
    return [
        f"{kind} {' and '.join(map(repr, group))} are one name once trimmed and put in Unicode NFC (their days were "
        "stored before names were): backfill the days that hold the old spelling to merge them"
        for kind, group in found
    ]


#: Why the summary's Kendall τ and Spearman ρ are null on a board of two or more models.
TAU_UNDEFINED_WARNING = (
    "Kendall tau and Spearman rho naive vs corrected are undefined: a board rates every model the same (every "
    "battle a tie, say), so it has no order to compare"
)
#: Said when no battle carries both answers' lengths: the length correction is then off for every judge, which the
#: bias table's notes said row by row and nothing said aloud (a file without ``len_a``/``len_b`` looks like any other).
NO_LENGTHS_WARNING = (
    "no battle carries both answers' lengths (len_a, len_b): the corrected board is not corrected for verbosity "
    "(length preference), only for the other judge biases"
)


#: Below this share of battles with style counts, a board with style removed says how much it removed it from.
STYLE_COVERAGE_WARNED: float = 0.95
#: How that warning begins (a slice's note picks it out of its fit's warnings).
STYLE_COVERAGE_PREFIX = "style: "


def _partial_style_warning(problem: Problem) -> list[str]:
    """A warning when style is removed and only some battles carry the style counts.

    Why: a battle without counts enters the fit with no style difference, so its formatting advantage stays in the
    ratings; simulated (header counts rising with quality, half the battles' counts removed), 65% of the style
    effect was left in the "style removed" board, which said only how many battles carried counts."""
    data = problem.data
    if data.ordinal_only or not any(problem.spec.masks[t].any() for t in STYLE_BLOCKS[: problem.layout.n_style]):
        return []
    with_counts, battles = float(data.judge_sums("n_style").sum()), float(data.judge_sums("n").sum())
    if battles <= 0 or with_counts <= 0 or with_counts >= STYLE_COVERAGE_WARNED * battles:
        return []
    return [
        f"{STYLE_COVERAGE_PREFIX}{with_counts:,.0f} of {battles:,.0f} battles ({with_counts / battles:.0%}) carry "
        "the header, list and bold counts; style is removed from those alone, and the others' formatting advantage "
        "stays in the ratings (log the counts for every battle, or read the style-kept board beside this one)"
    ]


def _one_grade_warning(data: Dataset) -> list[str]:
    """A warning naming the graders that gave every answer the same grade.

    Why: such a grader's grades say nothing about the models, yet every grader shares one set of thresholds, which it
    pulls toward its one grade.  Simulated (3,000 grades of 8 models; a grader added that gave 7 to each of them):
    the board's slope on the truth fell from 1.11 to 0.77 and its error rose from 13.7 to 24.4 points while its
    intervals narrowed, and that grader's severity (−1.30) read as identified, with no word."""
    scores = data.scores
    if scores is None or not len(scores):
        return []
    n_judges, n_grades = len(data.judges), scores.counts.shape[1]
    per_judge = np.stack(
        [np.bincount(scores.j, weights=scores.counts[:, k], minlength=n_judges) for k in range(n_grades)], axis=1
    )
    one = np.flatnonzero(((per_judge > 0).sum(axis=1) == 1) & (per_judge.sum(axis=1) >= 2))
    if not one.size:
        return []
    named = first_few([f"{data.judges[int(j)]} ({per_judge[j].sum():,.0f} grades)" for j in one], 5)
    return [
        f"grades: {named} gave every answer the same grade, which says nothing about the models; the graders share "
        "one set of grade thresholds, which such a grader pulls toward its grade (the board is compressed and its "
        "intervals too narrow): leave its grades out of --scores"
    ]


#: Grades a prompt (the median over prompts) below which bootstrap intervals of a board with grades are warned about.
FEW_GRADES_A_PROMPT: int = 30


def _few_grades_bootstrap_warning(data: Dataset, replicates: int, godambe: bool = False) -> list[str]:
    """A warning when bootstrap intervals are published on a board whose prompts carry few grades each.

    Why: every replicate re-estimates each prompt's difficulty from its few redrawn grades, which spreads the
    replicates outward: on ``simulate --scores 1`` boards (3,000 grades over 500 prompts, ~6 a prompt) the
    bootstrap intervals covered the true ratings 0.65 (grades alone) and 0.67 (with battles), the Laplace ones
    0.90 and 0.925; with ~100 grades a prompt the bootstrap covered 0.96 (``bench/grades_study.py``: 0.907 at 7.5
    a prompt).  An ω-weighted fit (``godambe``) publishes the Godambe intervals without --bootstrap, not Laplace
    ones: at ω = 0.9 on 40 boards of ~3.5 grades a prompt the bootstrap covered 0.881, the Godambe 0.953."""
    scores = data.scores
    if not replicates or scores is None or not len(scores):
        return []
    per_prompt = np.bincount(scores.p, weights=scores.counts.sum(axis=1))
    median = float(np.median(per_prompt[per_prompt > 0])) if np.any(per_prompt > 0) else 0.0
    if median >= FEW_GRADES_A_PROMPT:
        return []
    return [
        f"grades: a prompt carries {median:g} grades (the median): each bootstrap replicate re-estimates every "
        "prompt's difficulty from that few, which pushes the replicates outward, so the bootstrap intervals, P(top-k) "
        "and rank intervals under-cover (simulated at ~6 grades a prompt: 0.65 of 95% intervals held the truth); "
        + (
            "the Godambe (sandwich) intervals (without --bootstrap) covered 0.95 at ~3.5 a prompt with ω = 0.9"
            if godambe
            else "the Laplace intervals (without --bootstrap) covered 0.90 there"
        )
    ]


def judges_discrimination(problem: Problem, core: np.ndarray) -> float:
    """The judges' average discrimination: exp(Σ_j w_j log a_j) over every judge, w_j its share of the pair
    verdicts (a judge whose a_j is fixed at 1 counts with log a_j = 0).  1 by construction on a board of battles
    alone unless a fixed judge sets the scale; free with grades, where the report's discrimination panel shows it.

    Why recorded by the fit: the summary lists only the busiest judges of a voter board (``SUMMARY_JUDGES_MAX``),
    and the panel's mean of the listed ones is not the mean over all of them."""
    return float(np.exp(discrimination_row(problem, frozenset(problem.data.judges)) @ core))


def scale_judges(problem: Problem) -> list[str]:
    """The judges whose a_j, fixed at 1, sets θ's scale, by name
    (:attr:`~biasboard.ranking.model.Spec.scale_set_by_fixed_judge`); empty when the judges' verdict-weighted average
    (or the grades) sets it.

    Why recorded: the report and the warnings read a discrimination of 1 as "the judges' average", which on such a
    board it is not: 1 is the fixed judge's own discrimination, and the other judges' are measured against it."""
    spec = problem.spec
    if not spec.scale_set_by_fixed_judge:
        return []
    return [problem.data.judges[j] for j in np.flatnonzero(fixed_scale_judges(spec.masks[DISC], spec.disc_weights))]


def publish_bias_aware(
    problem: Problem,
    solution: Solution,
    config: ModelConfig,
    *,
    shards: int = 1,
    naive: FitResult | None = None,
    cov_core: np.ndarray | BlockCovariance | None = None,
    profiles: dict | None = None,
) -> FitResult:
    """The published result of a solved bias-aware problem: covariance, ``config``'s bootstrap replicates and
    profiles, bias table, diagnostics (with what each correction moved: :mod:`~biasboard.ranking.attribution`, when
    ``config`` computes diagnostics).

    ``cov_core`` and ``profiles``, when given, are this solution's own (a publication of it without replicates,
    made first: a reference fit adds the replicates only to the board it publishes, once the gate has chosen it).
    With a reference that has a rated effect of its own, φ is evaluated at each replicate too
    (``FitResult.boot_reference``).
    """
    data = problem.data
    cov_core = godambe_covariance(problem, solution, shards) if cov_core is None else cov_core
    boot = _replicates_of(config, problem, solution, shards)
    boot_theta, boot_core = (None, None) if boot is None else (boot.theta, boot.cores)
    unconverged = 0 if boot is None else boot.unconverged
    del boot  # (the cores are freed below, once the bias table has read them)
    boot_reference = None
    if boot_core is not None and config.reference:
        boot_reference = reference_replicates(problem, boot_core, config.reference, config.length_clip)
    if profiles is None:
        profiles = profile_ranges(problem, solution, config, shards) if config.profiles != "off" else {}
    bias = bias_table(problem, solution, cov_core, profiles, boot_core)
    del boot_core
    if data.ordinal_only:  # the pair effects are off by construction: the table lists what the board estimates
        bias = bias.filter(pl.col("effect") == "severity")
    diagnostics = connectivity_report(data)
    warnings: list[str] = diagnostics.pop("warnings")
    diagnostics["profile_likelihood"] = profiles
    diagnostics["profiles"] = config.profiles  # off: no profile is the check not run, not an effect without one
    for info in profiles.values():
        if info.get("warning"):
            warnings.append(info["warning"])
    rating = solution.core[problem.layout.theta]
    if not data.ordinal_only:  # the length covariate lives on battles
        naive_rating = None if naive is None else naive.rating
        cov_rep = covariate_report(
            problem.data,
            rating,
            naive_rating,
            config.length_clip,
            bool(config.reference),
            length_effect=bool(problem.spec.masks[LEN].any()),
        )
        warnings.extend(cov_rep.pop("warnings"))
        diagnostics["covariates"] = cov_rep
    if naive is not None:
        diagnostics["naive_vs_corrected"] = compare_rankings(naive, rating, data.models, model_components(data))
        if not np.isfinite(diagnostics["naive_vs_corrected"]["kendall_tau"]) and len(data.models) >= 2:
            warnings.append(TAU_UNDEFINED_WARNING)
    # (A ratings-only board, compared by its points, and a slice's do without: nothing publishes theirs.)
    if config.diagnostics != "off" and config.attribution:
        diagnostics["attribution"] = attribute_moves(problem, solution, shards)
    diagnostics["omega"] = config.omega
    if data.ordinal_only:
        diagnostics["board"] = ORDINAL_ONLY
    else:
        diagnostics["judges_discrimination"] = judges_discrimination(problem, solution.core)
        if fixed := scale_judges(problem):
            diagnostics["scale_judges"] = fixed
    diagnostics["length_scale"] = problem.spec.x_scale
    diagnostics["length_clip"] = config.length_clip
    warnings.extend(_prior_bound_warning(data, config.priors.theta_sd))
    warnings.extend(_spelling_twins_warning(data))
    if not solution.converged:
        warnings.append(f"bias-aware fit did not converge (relative gradient {solution.rel_grad:.2e})")
    if not data.ordinal_only and problem.notes.noted(LEN, NO_LENGTHS_NOTE).all():
        warnings.append(NO_LENGTHS_WARNING)
    warnings.extend(_partial_style_warning(problem))
    warnings.extend(_one_grade_warning(data))
    replicates = 0 if boot_theta is None else len(boot_theta)
    warnings.extend(_few_grades_bootstrap_warning(data, replicates, is_composite(problem.spec)))
    diagnostics["warnings"] = warnings
    return _assemble(
        problem,
        solution,
        cov_core,
        method="bias_aware",
        k=config.k,
        draws=config.posterior_draws,
        seed=config.seed,
        boot_theta=boot_theta,
        boot_unconverged=unconverged,
        bias=bias,
        diagnostics=diagnostics,
        boot_reference=boot_reference,
    )


def fit_leaderboards(
    cells: CellsInput | Dataset,
    score_cells: CellsInput | None = None,
    *,
    config: ModelConfig | None = None,
    naive_config: NaiveConfig | None = None,
    shards: int = 1,
) -> tuple[FitResult, FitResult]:
    """Both leaderboards of the same cells: (naive, corrected), the corrected one comparing itself to naive."""
    config = config or ModelConfig()
    data = _dataset(cells, score_cells, config.judge_pool)
    naive_config = naive_config or NaiveConfig(k=config.k, seed=config.seed, bootstrap=config.bootstrap)
    naive = fit_naive(data, config=naive_config, shards=shards)
    corrected = fit_bias_aware(data, config=config, shards=shards, naive=naive)
    return naive, corrected
