"""Which correction moved each model: the corrected ratings' response to removing one correction at a time.

The corrected board differs from the naive one because the model takes each judge's position, length,
affinity (and style, and for grades severity) effects out of the verdicts.  For each correction e the
published fit applies, Δθ_e is how the corrected ratings would change were that correction removed, every
other parameter held at the MAP:

* removing e means every judge's estimate of e set to 0 (its global coefficient and per-judge deviations) —
  or, on a board with a reference (:mod:`biasboard.ranking.reference`), every judge's *excess* over the
  reference set to 0 (the per-judge deviations of a tied effect: the judges then do what the reference does,
  and the reference's own effect, part of its rating φ, is kept);
* Δθ_e is θ re-minimised with e removed and every other parameter held at the MAP, by :data:`CHORD_STEPS` chord
  steps from the MAP: each Δ = −H_θθ⁻¹ [g_θ(e removed, θ so far) − g_θ(MAP)], with g_θ the gradient of the
  negative log-posterior in θ (one pass over the cells a step, θ's gradient only:
  :meth:`~biasboard.ranking.solver.Objective.theta_pass`) and H_θθ the θ block of the MAP's Hessian, the θ prior
  included (the fit's identifiability constraint; every comparison component is centred on its own
  afterwards, as the published ratings are).  The exact answer is :func:`exact_theta_response` (two steps are
  within 0.1–1.1% of it on the tests' boards, one step was 5.8–10.5%); a refit with e fixed at 0 lets the other
  judge effects move too (:func:`refit_without`); docs/design-notes.md gives the measured gaps.  When the first
  chord step does not decrease the objective as the MAP's quadratic model predicts (a correction so large the
  verdicts saturate without it), θ is re-minimised exactly instead (:func:`_chord_step_trusted`).

On a board with grades the prompts' difficulty δ_p is a correction too (the naive board pools the prompts): removed,
every δ_p is set to 0, and its exact answer is Newton on θ alone with δ held at 0.

Both solvers give the same Δθ: the gradient is the objective's own (dense or judge-blocked, in memory or
streamed) and H_θθ is the M × M block both keep (the dense Hessian's θ rows, the arrowhead's globals), so memory
is O(J + M²) — never a per-judge dense matrix.  Effects the published fit does not apply (switched off by the
gate or the configuration, tied to the reference, no data) get no Δθ and are named with the reason.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl
from biasboard.ranking.arrowhead import ArrowHessian
from biasboard.ranking.config import ModelConfig
from biasboard.ranking.model import SEV, block_name
from biasboard.ranking.problem import DISABLED_NOTE, ORDINAL_ONLY_NOTE, Problem
from biasboard.ranking.rank_stats import ranks_within
from biasboard.ranking.result import ELO_PER_LOGIT, FitResult
from biasboard.ranking.solver import Evaluation, Objective, Solution, minimize
from biasboard.ranking.uncertainty import centre_within

#: Why a correction has no attribution (``left_out`` of :func:`attribute_moves`).
NOT_APPLIED = "not applied on the published board (switched off by the gate or the configuration)"
TIED_NOT_APPLIED = "no judge's excess over the reference is corrected (the gate tied every judge to the reference)"
NO_DATA = "no judge has data for this effect"


#: The prompts' difficulty δ_p of a fit with grades: a correction of the corrected board (the naive one pools the
#: prompts), held in the diagonal vector rather than a judge block.
DIFFICULTY = "difficulty"
#: ``t`` of :func:`exact_theta_response` for the prompts' difficulty (no judge block has this index).
DIFFICULTY_BLOCK = -1


def _has_difficulty(problem: Problem) -> bool:
    """Whether the fit corrects for the prompts' difficulty (grades with prompts)."""
    return problem.data.scores is not None and bool(problem.layout.n_tau) and problem.layout.n_prompts > 0


def attributable_blocks(problem: Problem) -> list[int]:
    """The effect blocks a correction can be attributed to: the global effects (position, length, affinity, style)
    and severity when the fit has grades."""
    lay = problem.layout
    blocks = list(lay.global_effects)
    if problem.data.scores is not None and lay.n_tau:
        blocks.append(SEV)
    return blocks


def correction_entries(problem: Problem, t: int) -> np.ndarray:
    """The raw core indices whose values are correction ``t`` on this board (setting them to 0 removes it).

    Without a reference for the effect: its global coefficient (when the effect has one and some judge has it on)
    and every enabled judge's deviation.  With one (``Spec.tied``): only the judges' own deviations, which are
    their excess over the reference (a tied judge has none); the global coefficient is the reference's effect.
    """
    lay, spec = problem.layout, problem.spec
    tied = spec.tied is not None and t < len(spec.tied) and bool(spec.tied[t].any())
    judges = np.flatnonzero(spec.deviation_mask(t) > 0 if t in lay.global_effects else spec.masks[t] > 0)
    entries = lay.block(t).start + judges
    if t in lay.global_effects and not tied and (spec.masks[t] > 0).any():
        entries = np.concatenate([[lay.glob(t)], entries])
    return entries.astype(np.int64)


def _left_out_reason(problem: Problem, t: int) -> str:
    """Why correction ``t`` has no entry on this board."""
    spec = problem.spec
    if spec.tied is not None and t < len(spec.tied) and spec.tied[t].any():
        return TIED_NOT_APPLIED
    if problem.data.ordinal_only:
        return ORDINAL_ONLY_NOTE
    return NOT_APPLIED if problem.notes.noted(t, DISABLED_NOTE).any() else NO_DATA


def theta_hessian(evaluation: Evaluation, n_models: int) -> np.ndarray:
    """H_θθ of an evaluation with its Hessian (the prior's precision included): the dense Hessian's θ block, or
    the judge-blocked one's (θ leads its globals)."""
    H = evaluation.H
    block = H.H[:n_models, :n_models] if isinstance(H, ArrowHessian) else H[:n_models, :n_models]
    return 0.5 * (block + block.T)


def attribute_moves(problem: Problem, solution: Solution, shards: int = 1) -> dict[str, Any]:
    """Per correction the published fit applies, Δθ (M,) at the MAP with that correction removed (chord steps
    on θ, the rest held; see the module docstring); and the corrections left out, with why.

    Returns ``{"effects": {name: Δθ}, "left_out": {name: reason}}`` in plain values (a list of M floats per Δθ: the
    fit's diagnostics are JSON); Δθ is uncentred (the caller centres it within the comparison components, as it
    does the ratings)."""
    lay = problem.layout
    m = lay.n_models
    core, diag = solution.core, solution.diag
    effects: dict[str, list[float]] = {}
    left_out: dict[str, str] = {}
    todo: list[tuple[str, np.ndarray | None]] = []  # None: the prompts' difficulty (in the diagonal vector)
    for t in attributable_blocks(problem):
        entries = correction_entries(problem, t)
        name = block_name(t)
        if entries.size == 0:
            left_out[name] = _left_out_reason(problem, t)
        elif not np.any(core[entries]):
            effects[name] = [0.0] * m  # applied, and estimated at exactly 0: removing it moves nothing
        else:
            todo.append((name, entries))
    if _has_difficulty(problem):
        if np.any(diag):
            todo.append((DIFFICULTY, None))
        else:
            effects[DIFFICULTY] = [0.0] * m
    if not todo:
        return {"effects": effects, "left_out": left_out}
    ev = solution.evaluation
    objective = problem.objective(shards)
    if not (isinstance(ev.H, ArrowHessian) or ev.H.size):
        ev = objective.evaluate(core, diag)
    factor = np.linalg.cholesky(theta_hessian(ev, m))
    g_map = ev.g[lay.theta] if ev.g.size else objective.evaluate(core, diag, hessian=False).g[lay.theta]
    for name, at_entries in todo:
        removed = core.copy()
        removed_diag = diag
        if at_entries is None:  # prompt difficulty: every δ_p set to 0
            removed_diag = np.zeros_like(diag)
        else:
            removed[at_entries] = 0.0
        delta = np.zeros(m)
        trusted = True
        f_before, predicted = 0.0, 0.0
        # θ moves, the rest is held at the MAP with the correction removed: a θ-only pass each step.
        at_theta = objective.theta_pass(removed, removed_diag)
        theta = removed[lay.theta].copy()
        for step_no in range(CHORD_STEPS):
            f, g_theta = at_theta(theta)
            if step_no == 1:
                trusted = _chord_step_trusted(f_before - f, predicted)
                if not trusted:
                    break
            g = g_theta - g_map
            step = -_cho_solve(factor, g)
            f_before, predicted = f, -0.5 * float(g @ step)
            delta += step
            theta += step
        if not trusted:
            t = (
                DIFFICULTY_BLOCK
                if at_entries is None
                else next(t for t in attributable_blocks(problem) if block_name(t) == name)
            )
            delta = exact_theta_response(problem, solution, t, shards)
        effects[name] = delta.tolist()
    return {"effects": effects, "left_out": left_out}


#: The first chord step's actual decrease of the objective over the quadratic model's prediction must lie in this
#: range for the chord steps to be kept (else θ is re-minimised exactly, :func:`exact_theta_response`).
TRUST_RATIO = (0.5, 2.0)


def _chord_step_trusted(actual: float, predicted: float) -> bool:
    """Whether the first chord step behaved as the MAP's quadratic model says (its trust-region ratio in
    :data:`TRUST_RATIO`; a step predicted to change nothing is trusted).

    Why: the chord steps use the MAP's θθ Hessian, the curvature of the verdicts as the fit explains them.  When the
    removed correction is large enough that, without it, the verdicts are near certain (AlpacaEval's gamed entry:
    68-character answers, a length correction of ~10 logits), that curvature is far too high: the first step
    overshoots into the flat tails — the objective rose there (-210 nats against 4,432 predicted) — and the next
    steps crawl back ~1% each, so two steps published 1,873 points where θ re-minimised gives 290.  The ratio costs
    no pass: the objective's value comes with the gradient the second step computes anyway.  Measured on the
    tests' boards where two steps are within 0.1-1.1% of the exact answer, the ratio was 0.91-1.02 (the gamed
    entry's -0.04).
    """
    if predicted <= 1e-12:
        return True
    ratio = actual / predicted
    return TRUST_RATIO[0] <= ratio <= TRUST_RATIO[1]


#: Newton steps on θ per correction, each with the MAP's θθ factorisation (chord steps: one gradient pass each).
#: One step was 5.8% (length, seed 3) and 10.5% (severity on grades, seed 1) from θ re-minimised with the rest
#: held; two are 0.1% and 1.1% (tests/test_attribution.py), for one more pass over the cells per correction.
CHORD_STEPS = 2


def _cho_solve(lower: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """x with L Lᵀ x = rhs (two triangular solves)."""
    from scipy.linalg import solve_triangular

    return solve_triangular(lower.T, solve_triangular(lower, rhs, lower=True), lower=False)


def exact_theta_response(
    problem: Problem, solution: Solution, t: int, shards: int = 1, tol: float = 1e-10
) -> np.ndarray:
    """The exact counterpart of :func:`attribute_moves`' Δθ for block ``t``: θ re-minimised (Newton to ``tol``) with
    correction ``t`` removed and every other parameter held at the MAP (uncentred)."""
    removed = solution.core.copy()
    objective_: Objective = problem.objective(shards)
    if t == DIFFICULTY_BLOCK:  # δ lives in the diagonal vector, which minimize() always frees: Newton on θ here
        theta = problem.layout.theta
        diag = np.zeros_like(solution.diag)
        for _ in range(100):
            ev = objective_.evaluate(removed, diag)
            g = ev.g[theta]
            if np.abs(g).max(initial=0.0) < tol:
                break
            removed[theta] -= np.linalg.solve(theta_hessian(ev, problem.layout.n_models), g)
        return removed[theta] - solution.core[theta]
    removed[correction_entries(problem, t)] = 0.0
    free = np.zeros(removed.size, bool)
    free[problem.layout.theta] = True
    out = minimize(objective_, removed, solution.diag, free=free, tol=tol)
    return out.core[problem.layout.theta] - solution.core[problem.layout.theta]


def refit_without(problem: Problem, solution: Solution, t: int, config: ModelConfig, shards: int = 1) -> np.ndarray:
    """θ's change when the model is refit from a cold start with correction ``t`` fixed at 0 (every other parameter
    free): the check that holding the rest at the MAP is a fair question (uncentred)."""
    from biasboard.ranking.fit import solve_bias_aware  # (fit imports this module)

    fixed = {int(i): 0.0 for i in correction_entries(problem, t)}
    refit = solve_bias_aware(problem, config, shards, fixed)
    return refit.core[problem.layout.theta] - solution.core[problem.layout.theta]


#: How the published attribution is made, in words (summary.json's ``attribution.method``).
METHOD = (
    "per correction the published board applies: the corrected ratings with that correction removed (every "
    "judge's estimate set to 0 — with a reference, every judge's excess over it), the other parameters held at "
    "the MAP, the ratings re-solved by two chord steps (the MAP's theta-theta Hessian, prior included), checked "
    "against exact solves and refits in tests/test_attribution.py. places = rank without the correction - "
    "corrected rank (> 0: the correction moved the model up); unexplained = rank_change - sum of places (ties, "
    "judge scale, the corrections' interplay)"
)


def _ranks_among(rating: np.ndarray, component: np.ndarray, among: np.ndarray) -> list[int | None]:
    """Ranks within each component counted among the models ``among`` only (None for the others)."""
    out: list[int | None] = [None] * rating.size
    for i, rank in zip(np.flatnonzero(among), ranks_within(rating[among], component[among]), strict=True):
        out[int(i)] = int(rank)
    return out


def move_table(corrected: FitResult, leaderboard: pl.DataFrame) -> dict[str, Any] | None:
    """Per model of ``leaderboard`` (the published side-by-side board), what each correction of ``corrected``'s
    fit accounts for: its Δrating (Elo-like points), the rank it would have without that correction alone and the
    places that makes, the rank without all of them, and the rank change left unexplained.

    The Δθ are added to the published rating (θ, or a reference's φ = θ + the reference's own terms, which are
    held): ranks within each comparison component, as the leaderboard's.  A correction's places are counted among
    the models both boards rank, as the leaderboard's ``rank_change`` is (a graded-only model, which the naive board
    does not rate, is passed in neither), so the two add up to what is left unexplained; ``rank_without`` is the
    model's rank on the published board.  None when the fit has no attribution (a ratings-only board).  Vectorised
    over models; a loop over the (at most seven) corrections."""
    info = corrected.diagnostics.get("attribution")
    if info is None:
        return None
    component = corrected.component if corrected.component.size else np.zeros(corrected.n_models, np.int64)
    groups = component if component.max(initial=0) > 0 else None
    rating = corrected.rating
    ranked_naive = set(leaderboard.filter(pl.col("rank_naive").is_not_null()).get_column("model").to_list())
    both = np.array([name in ranked_naive for name in corrected.models], bool)
    corrected_rank = ranks_within(rating, component)
    deltas = {name: centre_within(np.asarray(d, float), groups) for name, d in info["effects"].items()}
    columns: dict[str, Any] = {"model": list(corrected.models), "_rank": corrected_rank}
    columns["_common"] = _ranks_among(rating, component, both)
    total = np.zeros(rating.size)
    for name, d in deltas.items():
        columns[f"d:{name}"] = ELO_PER_LOGIT * d
        columns[f"r:{name}"] = ranks_within(rating + d, component)
        columns[f"c:{name}"] = _ranks_among(rating + d, component, both)
        total += d
    columns["rank_without_all"] = ranks_within(rating + total, component)
    frame = pl.DataFrame(columns).join(
        leaderboard.select("model", "component", "rank_naive", "rank_corrected", "rank_change"), on="model"
    )
    frame = frame.sort(["component", "rank_corrected", "model"])
    rows = []
    for r in frame.iter_rows(named=True):  # one dict per model for the summary (M rows, not battles)
        moves = [
            {
                "effect": name,
                "delta_rating": r[f"d:{name}"],
                "rank_without": r[f"r:{name}"],
                "places": r[f"r:{name}"] - r["rank_corrected"]
                if r["_common"] is None
                else r[f"c:{name}"] - r["_common"],
            }
            for name in deltas
        ]
        change = r["rank_change"]
        explained = sum(move["places"] for move in moves)
        rows.append(
            {
                "model": r["model"],
                "component": r["component"],
                "rank_naive": r["rank_naive"],
                "rank_corrected": r["rank_corrected"],
                "rank_change": change,
                "corrections": moves,
                "rank_without_all": r["rank_without_all"],
                "unexplained": None if change is None else change - explained,
            }
        )
    return {"method": METHOD, "effects": list(deltas), "left_out": dict(info["left_out"]), "models": rows}
