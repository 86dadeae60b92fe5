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

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from biasboard.ranking import forked
from biasboard.ranking.arrowhead import ArrowFactor, ArrowHessian
from biasboard.ranking.config import ModelConfig
from biasboard.ranking.data import Dataset, PairArrays
from biasboard.ranking.graph import component_names, model_components, unranked_components
from biasboard.ranking.model import AFF, LEN, POS
from biasboard.ranking.problem import Problem, prior_sd_of_effect
from biasboard.ranking.rank_stats import kendall_tau_b, spearman
from biasboard.ranking.solver import (
    Evaluation,
    NewtonFactor,
    Objective,
    Prior,
    Solution,
    _grad_norm,
    minimize,
    newton_factor,
)
from biasboard.schemas.wording import first_few
from scipy.sparse import csgraph

#: Xu et al. (2026): correction's benefit reverses somewhere in this range of corr(θ, covariate).
CROSSING_LOW: float = 0.22
CROSSING_HIGH: float = 0.60
CROSSING_TYPICAL: float = 0.45
FLAT_NATS: float = 0.01
#: What a ``fast`` profile is, in its ``method`` and at the end of its note (the bias table's, the summary's and the
#: report's): its range is the quadratic model's, not a solved profile's.
FAST_METHOD: str = "fast: quadratic (Wald) approximation from the centre's factorisation"
PROFILED = {"position": POS, "length": LEN, "affinity": AFF}


#: Models named in a warning at most (the rest are counted).
MAX_NAMED: int = 20
#: A model with at least this share of its length-known battles beyond the length clip has a length correction set
#: by the clip, not by its verdicts (:func:`clip_bound_models`).
CLIP_BOUND_SHARE: float = 0.9


def connectivity_report(data: Dataset, grades: bool = True) -> dict:
    """The comparison graph's components, with a warning when it is split, and the models no comparison links to
    any other (``unranked``: left off the leaderboard, :func:`~biasboard.ranking.leaderboard.side_by_side`).

    ``grades=False``: the naive pair board's graph, of battles alone; a model with grades but no battle is then not
    rated by it, and named as such (the corrected board rates it from its grades), not as left off."""
    component = model_components(data, grades)
    n_comp = int(component.max()) + 1 if component.size else 0
    report: dict = {"n_components": n_comp, "warnings": []}
    link = "battle" if not data.ordinal_only else "same-judge same-prompt grade"
    if n_comp and n_comp == component.size:  # every model alone: nothing links any two (one model, self-battles)
        report["warnings"].append(
            f"no {link} compares two different models, so the {n_comp} model(s) on the board cannot be ranked: "
            "each is listed at its component's centre (rating 0 on the logit scale), with no meaning as a rank"
        )
        return report
    if n_comp <= 1:
        return report
    names = component_names(component, data.models)
    report["components"] = names
    alone = set(unranked_components(component))
    unranked = [group[0] for c, group in enumerate(names) if c in alone]
    split = [group for c, group in enumerate(names[1:], start=1) if c not in alone]
    if split:
        smaller = "; ".join(", ".join(group) for group in split)
        report["warnings"].append(
            f"the comparison graph has {len(split) + 1} disconnected components: no {link} chain links [{smaller}] "
            f"to the main group of {len(names[0])} models; their ratings are not comparable across components: "
            "each component is centred on its own, and ranks, CIs and top-k are computed within it (leaderboard "
            "column 'component')"
        )
    graded = set()
    if not grades and data.scores is not None and not data.ordinal_only:
        graded = {data.models[int(i)] for i in np.unique(data.scores.m)}
    rated_elsewhere = [name for name in unranked if name in graded]
    unranked = [name for name in unranked if name not in graded]
    if rated_elsewhere:
        report["warnings"].append(
            f"{len(rated_elsewhere)} model(s) have grades but no battle against another model, so this board of "
            "battles does not rate them (the corrected board rates them from their grades, unless ω = 1 leaves the "
            "grades out): " + first_few(rated_elsewhere, MAX_NAMED)
        )
    if unranked:
        report["unranked"] = unranked
        for what, left_off in _unranked_reasons(data, unranked, link):
            report["warnings"].append(
                f"{len(left_off)} model(s) {what}, so they cannot be ranked and are left off the leaderboard: "
                f"{first_few(left_off, MAX_NAMED)}"
            )
    return report


def _unranked_reasons(data: Dataset, unranked: list[str], link: str) -> list[tuple[str, list[str]]]:
    """The models left off the leaderboard, grouped by why (what is said of them, their names).

    Why more than one reason: "only self-battles" was said of every such model, also of one in no battle at all — a
    model only graded, on a board fitted at ω = 1 (which leaves the grades out), or whose grades link it to no other
    model."""
    if data.ordinal_only:
        return [(f"share no {link} with another model", unranked)]
    pairs = data.pairs
    index = {name: i for i, name in enumerate(data.models)}
    battled = np.zeros(len(data.models), bool)
    battled[pairs.a[pairs.n > 0]] = battled[pairs.b[pairs.n > 0]] = True
    selfish = [name for name in unranked if battled[index[name]]]
    none = [name for name in unranked if not battled[index[name]]]
    unlinked = (
        "are in no battle, and their grades link them to no other model"
        if data.scores is not None
        else "are in no battle (a model graded only is not rated by a fit at ω = 1, which leaves the grades out)"
    )
    reasons = [("have only self-battles (no battle against another model)", selfish), (unlinked, none)]
    return [(what, names) for what, names in reasons if names]


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

    Uses the data's covariate as stored — clipped when the data come from a clipped problem.
    """
    pairs = data.pairs
    return signed_model_means(pairs, pairs.x, pairs.n_len, len(data.models))


def signed_model_means(pairs: PairArrays, value: np.ndarray, weight: np.ndarray, n_models: int) -> np.ndarray:
    """Each model's mean of a pair covariate against its opponents: a cell's mean ``value`` (oriented first
    model minus second) counts +value for its first model and −value for its second, weighted by ``weight``
    (the cell's battles with the covariate known); NaN where a model has none.  Self-battles are skipped (they
    say nothing about a model relative to others)."""
    a, b = pairs.a, pairs.b
    w = np.where(a != b, weight, 0.0)  # zero weights, not copies of the other cells' models
    wx = w * value
    total = np.bincount(a, weights=wx, minlength=n_models) - np.bincount(b, weights=wx, minlength=n_models)
    count = np.bincount(a, weights=w, minlength=n_models) + np.bincount(b, weights=w, minlength=n_models)
    return np.divide(total, count, out=np.full(n_models, np.nan), where=count > 0)


def clip_bound_models(data: Dataset, length_clip: float) -> dict[str, float]:
    """The models with :data:`CLIP_BOUND_SHARE` or more of their length-known battles beyond the length clip, with that
    share, largest first.

    Why: beyond the clip every battle's covariate is ±c, so such a model's correction is c·β with β measured on
    the other battles, inside the clip: it rests on the ``--length-clip`` setting, not on how length moved its own
    verdicts (on AlpacaEval 2, ``gpt4_gamed`` has 4.5% of its battles inside ±1.5).  ``data`` is a clipped problem's
    (its beyond cells at exactly ±c); read cell by cell (a streamed set's totals mix a pair's cells); self-battles
    are skipped."""
    n_models = len(data.models)
    count, at_clip = np.zeros(n_models), np.zeros(n_models)
    for pairs in data.cell_parts(("a", "b", "x", "n_len")):
        weight = np.where(pairs.a != pairs.b, pairs.n_len, 0.0)
        beyond = np.where(np.abs(pairs.x) >= length_clip, weight, 0.0)
        for side in (pairs.a, pairs.b):
            count += np.bincount(side, weights=weight, minlength=n_models)
            at_clip += np.bincount(side, weights=beyond, minlength=n_models)
    share = np.divide(at_clip, count, out=np.zeros(n_models), where=count > 0)
    bound = np.flatnonzero(share >= CLIP_BOUND_SHARE)
    return {data.models[i]: round(float(share[i]), 4) for i in bound[np.argsort(-share[bound], kind="stable")]}


def _corr(x: np.ndarray, y: np.ndarray) -> float:
    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() < 3 or np.ptp(x[ok]) == 0 or np.ptp(y[ok]) == 0:
        return float("nan")
    return float(np.corrcoef(x[ok], y[ok])[0, 1])


def crossing_place(corr: float) -> str:
    """Where |corr| lies against Xu et al.'s crossing range, in the warning's words.

    Why three places: past the typical crossing point the warning said "beyond the typical range 0.22-0.6", which
    read as outside the range for an r inside it (AlpacaEval 2: r = 0.50, "beyond the typical range 0.22-0.6")."""
    size = abs(corr)
    span = f"the range {CROSSING_LOW}-{CROSSING_HIGH}"
    if size >= CROSSING_HIGH:
        return f"beyond {span}"
    if size >= CROSSING_TYPICAL:
        return f"past the typical crossing point {CROSSING_TYPICAL} of {span}"
    return f"inside {span}"


def covariate_report(
    data: Dataset,
    rating: np.ndarray,
    naive_rating: np.ndarray | None,
    length_clip: float | None = None,
    reference: bool = False,
    length_effect: bool = True,
) -> dict:
    """corr(θ̂, per-model length profile) for the corrected (and naive) ratings, with the crossing warning; with a
    length effect under a clip, the models whose correction the clip sets (:func:`clip_bound_models`).

    With a ``reference`` the warning's advice is what the reference already does: the published ratings keep its
    own length preference (the warning said "check with trusted anchors" to a run that had them).

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
        better = "longer" if corrected > 0 else "shorter"  # the direction the ratings still lean
        report["warnings"].append(
            f"corrected ratings correlate with mean response length (r = {corrected:.2f}), "
            f"{'' if corrected > 0 else '|r| '}{crossing_place(corrected)} "
            f"where Xu et al. 2026 found length correction starts to hurt: if {better} "
            "answers are genuinely better here, the correction removes real quality "
            + (
                "(the published ratings keep the reference's own length preference, where its verdicts show one)"
                if reference
                else "(check with trusted anchors)"
            )
        )
    if length_effect and length_clip is not None and (bound := clip_bound_models(data, length_clip)):
        report["clip_bound_models"] = bound
        named = first_few([f"{model} ({share:.0%})" for model, share in bound.items()], MAX_NAMED)
        report["warnings"].append(
            f"{len(bound)} model(s) have {CLIP_BOUND_SHARE:.0%} or more of their battles beyond the length clip "
            f"(|log length ratio| >= {length_clip:g}): {named}; their length correction is the clip's cap "
            f"({length_clip:g} x the length effect, measured on other battles), so their corrected ratings rest on "
            "--length-clip more than on their own verdicts"
        )
    return report


def compare_rankings(
    naive,
    corrected_rating: np.ndarray,
    corrected_models: tuple[str, ...] | None = None,
    corrected_component: np.ndarray | None = None,
) -> dict:
    """Kendall τ-b and Spearman ρ between the naive and the corrected ratings (aligned by model name), over the
    models both boards rank.

    On a split comparison graph both are taken within components (pairs within one; ranks within one), ``naive``'s
    and ``corrected_component`` together: each component is centred on its own, so across them the ratings are not
    comparable, and a pooled τ moved with the arbitrary offset between the centres (measured: 0.939 pooled against
    0.871 within, on two groups of 5 and 7 models; +100 Elo on one group gave 0.909 pooled).  A model either board
    leaves off (alone in its component while others are ranked: its rating is that centre by definition) is not
    compared.  Why the corrected components too: on a board of grades the naive board pools every grade into one
    component while the corrected one can be split, and a model graded only by a judge grading nothing else (left
    off the corrected board) was compared at its centre: τ 0.333 over 7 models where the 6 published read 0.067; and
    a model graded, never in a battle, was a perfect agreement of its own in ρ (0.857 -> 0.887 on a board of 8)."""
    models = naive.models if corrected_models is None else corrected_models
    index = {m: i for i, m in enumerate(naive.models)}
    component = np.asarray(getattr(naive, "component", np.zeros(0)), dtype=np.int64)
    theirs = np.zeros(len(models), np.int64) if corrected_component is None else np.asarray(corrected_component)
    left_off = {naive.models[i] for i in np.flatnonzero(np.isin(component, unranked_components(component)))}
    left_off |= {models[i] for i in np.flatnonzero(np.isin(theirs, unranked_components(theirs)))}
    common = [i for i, m in enumerate(models) if m in index and m not in left_off]
    x = np.array([naive.rating[index[models[i]]] for i in common])
    y = np.asarray(corrected_rating)[common]
    ours = component[[index[models[i]] for i in common]] if component.size else np.zeros(len(common), np.int64)
    groups = None
    if common:
        joint = np.unique(np.stack([ours, theirs[common]], axis=1), axis=0, return_inverse=True)[1].reshape(-1)
        groups = joint if joint.max() > 0 else None
    return {"kendall_tau": kendall_tau_b(x, y, groups), "spearman": spearman(x, y, groups), "n_models": len(common)}


#: Below this many cell-effects (cells × profiled effects) the profiles run in this process: a fork and its
#: first touches cost about what 0.1 s of profiling does.
PROFILE_PARALLEL_MIN_WORK: int = 300_000


def profile_ranges(
    problem: Problem,
    solution: Solution,
    config: ModelConfig,
    shards: int = 1,
    *,
    cold: bool = False,
    workers: int | None = None,
) -> dict:
    """Profile log-likelihood range (nats) of each enabled global covariate effect over ĉ ± 2 prior SDs.

    ``full`` solves each profile point from the centre along the profile path (:func:`_path_point`: the MAP's
    Hessian with the profile's prior swapped in, second-order warm starts, each value to
    :func:`_profile_tolerance`); ``cold=True`` solves every point by its own damped Newton fit from the MAP to
    the fit's tolerance (the former method, kept to check the path against).  The points (effect × ĉ − Δ, ĉ,
    ĉ + Δ) are independent pieces, so ``full`` and ``cold`` run them in ``workers`` forked processes (default:
    one per CPU for a problem that repays a fork, ``BIASBOARD_PROFILE_WORKERS`` to choose); a piece is a
    function of its point alone, so the values do not depend on the number of processes.  Points, not effects:
    three effects' profiles on two CPUs leave one idle a third of the time; nine points balance.
    """
    effects = [(name, t) for name, t in PROFILED.items() if problem.spec.masks[t].any()]
    if config.diagnostics == "fast":
        fast = [_profile_fast_effect(problem, solution, config, shards, t) for _, t in effects]
        return {
            name: _profile_info(problem, solution, config, name, t, logliks, unconverged)
            for (name, t), (logliks, unconverged) in zip(effects, fast, strict=True)
        }
    pieces = [(t, side) for _, t in effects for side in SIDES]
    if workers is None:
        work = len(problem.data.pairs) * len(effects)
        workers = forked.default_workers("BIASBOARD_PROFILE_WORKERS", len(pieces), work, PROFILE_PARALLEL_MIN_WORK)
    points = forked.fork_map(
        lambda piece: _profile_point(problem, solution, config, shards, piece[0], piece[1], cold),
        _costliest_first(pieces),
        workers,
    )
    solved = dict(zip(_costliest_first(pieces), points, strict=True))
    out = {}
    for name, t in effects:
        logliks = [solved[t, side][0] for side in SIDES]
        unconverged = [point for side in SIDES for point in solved[t, side][1]]
        out[name] = _profile_info(problem, solution, config, name, t, logliks, unconverged)
    return out


#: A profile's points: ĉ − Δ, ĉ, ĉ + Δ (in units of Δ).
SIDES: tuple[int, ...] = (-1, 0, 1)


def _costliest_first(pieces: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The profile points in the order the forked workers take them: the far points (several Hessian passes
    each) before the centres (one gradient pass each), so the cheap pieces fill the workers' last gaps."""
    return sorted(pieces, key=lambda piece: piece[1] == 0)


def _profile_grid(problem: Problem, solution: Solution, t: int) -> tuple[float, float]:
    """The centre ĉ of effect t's profile and its step Δ (2 prior SDs of the effect's common level): the
    profile is taken at ĉ − Δ, ĉ, ĉ + Δ."""
    sd_glob, _ = prior_sd_of_effect(problem, t)
    return float(solution.core[problem.layout.glob(t)]), 2.0 * sd_glob


def _profile_point(
    problem: Problem, solution: Solution, config: ModelConfig, shards: int, t: int, side: int, cold: bool
) -> tuple[float, list[tuple[float, float]]]:
    """Effect t's profile log-likelihood at ĉ + side·Δ (:func:`_profile_grid`), and the point as (value,
    relative gradient) when its fit did not converge."""
    objective = problem.objective(shards, prior=problem.profile_prior(t, _informed(problem, solution, t)))
    centre, delta = _profile_grid(problem, solution, t)
    unconverged: list[tuple[float, float]] = []
    value = None if cold else _path_point(objective, problem, solution, t, side * delta)
    if value is None:
        value = _profile_cold(objective, problem, solution, t, (centre + side * delta,), config, unconverged)[0]
    return float(value), unconverged


def _profile_fast_effect(
    problem: Problem, solution: Solution, config: ModelConfig, shards: int, t: int
) -> tuple[list[float], list[tuple[float, float]]]:
    """``fast``: effect t's Wald profile at ĉ − Δ, ĉ, ĉ + Δ (:func:`_profile_fast`); solved cold where its
    centre's Hessian is not positive definite (with the points that did not converge)."""
    objective = problem.objective(shards, prior=problem.profile_prior(t, _informed(problem, solution, t)))
    centre, delta = _profile_grid(problem, solution, t)
    values = tuple(centre + side * delta for side in SIDES)
    unconverged: list[tuple[float, float]] = []
    logliks = _profile_fast(objective, problem, solution, t, values)
    if logliks is None:
        logliks = _profile_cold(objective, problem, solution, t, values, config, unconverged)
    return [float(v) for v in logliks], unconverged


def is_model_difference(data: Dataset, judges: np.ndarray) -> bool:
    """Whether the same-family affinity covariate s_a − s_b of the cells of ``judges`` (bool over the judges) cannot
    be told from the models' quality: it is f_a − f_b for one per-model f over every judge's cells (collinear with θ),
    or no judge that weighs it sees two different pairs of models (its own discrimination a_j, which scales θ's
    differences on its cells, then absorbs it).

    Every judge's cells count, since θ is shared by all of them: a judge that does not weigh the effect (not in
    ``judges``: no model of its family, or the effect off for it) contributes its pairs with the value 0.  Why:
    with only the weighing judges' cells read, an LLM judge's affinity beside a crowd judging the same pairs
    (LLMFAO: crowd, GPT-4, GPT-3.5) was called a model's own property and left off, though the crowd pins θ and
    the judge's excess on its own family's models is measured (simulated: true +1.0, estimate +1.09, 150 nats;
    its family's models then rated 0.53 logits too high).  But a judge that weighs it on one pair of models only
    (a slice of two models) has one η there, a_j (θ_a − θ_b) + c: other judges pinning θ_a − θ_b leave a_j and c
    one number.

    Why not the profile alone: the judges' discriminations multiply θ's differences but not the covariate, so with
    many judges — voter-judges of one family — the profile of a same-family affinity that is a model's own
    property rose by 6.8 nats at 100 judges and 63.5 at 1,000 (the coefficient fit their discriminations' noise:
    +6.0 against a true 0.41), where at 1–10 judges it was flat.  Exact: the distinct (pair, value)s of the cells,
    read cell by cell (self-battles and empty cells aside), must give each model pair one value, and the values
    walked along a spanning forest of the model graph (one step per model) must hold on every pair."""
    n = len(data.models)
    seen = np.zeros(0, np.int64)
    weighed = np.zeros(0, np.int64)  # (judge, pair) keys of the weighing judges' cells, odd where the covariate acts
    for pairs in data.cell_parts(("a", "b", "j", "ds", "n")):
        use = (pairs.a != pairs.b) & (pairs.n > 0)
        weighs = judges[pairs.j][use]
        ds = np.where(weighs, pairs.ds[use], 0.0)  # a judge that does not weigh it: the covariate is 0 for it
        lo, hi = np.minimum(pairs.a[use], pairs.b[use]), np.maximum(pairs.a[use], pairs.b[use])
        d = np.rint(np.where(pairs.a[use] < pairs.b[use], ds, -ds)).astype(np.int64)  # f_lo − f_hi
        seen = np.union1d(seen, (lo * n + hi) * 3 + d + 1)
        key = (pairs.j[use].astype(np.int64) * n * n + lo * n + hi) * 2 + (d != 0)
        weighed = np.union1d(weighed, key[weighs])
    return _collinear_with_theta(seen, n) or not _seen_apart(weighed, n)


def _seen_apart(weighed: np.ndarray, n: int) -> bool:
    """Whether some weighing judge's cells hold two different model pairs, the covariate acting on one of them."""
    judge_pair, acts = np.divmod(weighed, 2)
    judge = judge_pair // (n * n)
    pairs_of = np.bincount(np.unique(judge_pair) // (n * n)) if judge_pair.size else np.zeros(0, np.int64)
    return bool(np.any(pairs_of[judge[acts == 1]] >= 2))


def _collinear_with_theta(seen: np.ndarray, n: int) -> bool:
    """Whether the distinct (pair, value + 1) codes ``seen`` (pair × 3 + value + 1, the value f_lo − f_hi) are
    f_lo − f_hi for one per-model f."""
    pair, d = np.divmod(seen, 3)
    if pair.size == 0:
        return True
    if np.unique(pair).size < pair.size:  # a pair the judges see with two values
        return False
    lo, hi = np.divmod(pair, n)
    step = (d - 1 + 3).astype(float)  # f_lo − f_hi, + 3 so that a difference of 0 stays a stored entry
    steps = (
        sp.csr_matrix((step, (lo, hi)), shape=(n, n)) + sp.csr_matrix((6.0 - step, (hi, lo)), shape=(n, n))
    ).tocsr()
    f = np.zeros(n)
    _, component = csgraph.connected_components(steps, directed=False)
    for root in np.unique(component, return_index=True)[1]:
        order, parent = csgraph.breadth_first_order(steps, root, directed=False)
        for node in order[1:]:
            f[node] = f[parent[node]] - (steps[parent[node], node] - 3.0)  # f_node = f_parent − (f_parent − f_node)
    return bool(np.array_equal(f[lo] - f[hi], d - 1.0))


def _profile_info(
    problem: Problem,
    solution: Solution,
    config: ModelConfig,
    name: str,
    t: int,
    logliks: list[float],
    unconverged: list[tuple[float, float]],
) -> dict:
    """Effect ``name``'s published profile: its range, grid, values and verdict in plain words."""
    span = float(max(logliks) - min(logliks))
    unit = 1.0 / problem.spec.x_scale if t == LEN else 1.0
    centre, delta = _profile_grid(problem, solution, t)
    info: dict = {
        "range_nats": span,
        "grid": [(centre - delta) * unit, centre * unit, (centre + delta) * unit],
        "loglik": logliks,
    }
    if t == AFF and span >= FLAT_NATS and is_model_difference(problem.data, problem.spec.masks[AFF] > 0):
        info["note"] = (
            f"prior-selected: {name} is a property of each model alone here (every judge that weighs it sees the same "
            f"models as its own family, or sees one pair of models), so the comparisons cannot split quality from "
            f"{name}; the profile's "
            f"{span:.1f} nats come from the judges' discriminations, not from the covariate, and the value shown is "
            "chosen by the prior"
        )
        info["warning"] = f"{name} effect is not identified by the comparisons: its value is prior-selected"
    elif span < FLAT_NATS:
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
    # The verdict, apart from the warning: a profile point that did not converge adds a warning too (its value is a
    # lower bound), which made an effect identified by thousands of nats "prior-selected" in the summary and the bias
    # table and left its correction off the board.
    info["prior_selected"] = "warning" in info
    if config.diagnostics == "fast":
        info["method"] = FAST_METHOD
        info["note"] += f" ({FAST_METHOD})"
    if unconverged:
        info["warning"] = _unconverged_warning(name, unconverged, unit, config.max_iter, info.get("warning"))
    return info


def _unconverged_warning(
    name: str, points: list[tuple[float, float]], unit: float, max_iter: int, before: str | None
) -> str:
    """Why a profile's published values are not the profile where its fits did not converge."""
    where = ", ".join(f"{value * unit:.3g} (relative gradient {rel:.1e})" for value, rel in points)
    text = (
        f"{name} profile: the fit at {where} did not converge in {max_iter} iterations, so the log-likelihood "
        "there is only a lower bound of the profile and the range may be overstated (with many sparse judges: a "
        f"judge's own {name} deviation, free in the profile, that its battles do not pin runs away)"
    )
    return text if before is None else f"{before}; {text}"


def _free_of(problem: Problem, t: int) -> np.ndarray:
    """Every core parameter but effect t's common level (the profiled one)."""
    free = np.ones(problem.layout.n_core, bool)
    free[problem.layout.glob(t)] = False
    return free


def _profile_cold(
    objective: Objective,
    problem: Problem,
    solution: Solution,
    t: int,
    values: tuple[float, ...],
    config: ModelConfig,
    unconverged: list[tuple[float, float]],
) -> list[float]:
    """Each profile point by its own damped Newton fit from the MAP (its level set, deviations re-centred); a point
    the fit does not converge at is added to ``unconverged`` as (value, relative gradient)."""
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
        if not sol.converged:
            unconverged.append((value, sol.rel_grad))
    return logliks


#: A profile value is solved to this relative accuracy of the log-likelihood (the estimated error of the
#: value, not a gradient norm), and never beyond :data:`PROFILE_ABS_NATS`.  1e-10 · |log L| is 1e-4 nats
#: at a million battles and 5e-7 nats on a 5,000-nat demo: far below the 0.01 / 2 nats of the verdicts,
#: and below the 1e-8 relative that the published snapshot pins.
PROFILE_REL_TOL: float = 1e-10
PROFILE_ABS_NATS: float = 1e-4


def _profile_tolerance(loglik: float) -> float:
    return min(PROFILE_REL_TOL * max(abs(loglik), 1.0), PROFILE_ABS_NATS)


def _path_point(objective: Objective, problem: Problem, solution: Solution, t: int, step: float) -> float | None:
    """The profile at ĉ + ``step`` (ĉ or ĉ ± Δ) to :func:`_profile_tolerance`, in a few passes over the cells;
    None where plain Newton does not reach it by descent (the caller solves it cold).

    - The centre: the MAP's own evaluation with the prior swapped for the profile's (:func:`_reprior`: the
      likelihood's gradient and Hessian are the same, so no pass over the cells) gives the first Newton step;
      chord steps on that factorisation finish it (one gradient pass each, usually one).
    - A far point starts from the centre's first Newton step φ₁ (no pass) along the path's tangent, the
      implicit-function derivative dφ/dc = −H_φφ⁻¹ H_φc (same factorisation), corrected by one chord step there
      (one gradient pass: the path's second-order term ½Δ²·d²φ/dc² and the odd ones of its own side), and is
      solved by Newton with lazy factorisation (:func:`_solve_point`), after the point half-way where the path
      bends (:func:`_profile_side`).  It needs neither the centre's value nor the other side's: each point is
      a piece of its own (:func:`profile_ranges` runs them in parallel).
    - Each value is the log-likelihood at the last point plus the change its quadratic model predicts for the
      next Newton step: that leaves an error of third order in the step, so the last pass can stop early.

    The objective is not convex in everything (the discriminations), so a point plain Newton does not reach by
    descent is solved cold instead, as before — the same start and the same damped Newton, so the same optimum.
    """
    index = problem.layout.glob(t)
    free = _free_of(problem, t)
    ev0 = _reprior(solution.evaluation, problem.prior, objective.prior, solution.core, solution.diag)
    if ev0 is None:  # a judge-blocked Hessian: evaluate the profile's own at the MAP (one pass)
        ev0 = objective.evaluate(solution.core, solution.diag)
    tol = _profile_tolerance(ev0.loglik)
    newton = newton_factor(ev0, free)
    if newton is None:
        return None
    if not step:
        mid = _solve_point(objective, solution.core, solution.diag, free, tol, ev0, newton, rate=0.0)
        return None if mid is None else mid.loglik
    s, s_diag = newton.solve(ev0.g[free], ev0.g_diag)
    base = _Point(solution.core.copy(), solution.diag + s_diag, ev0.loglik)
    base.core[free] += s
    tangent = _tangent(ev0, newton, free, index)[:2]
    ahead_core, ahead_diag = _along(base, free, index, tangent, step)
    ahead = objective.evaluate(ahead_core, ahead_diag, hessian=False)
    bend = newton.solve(ahead.g[free], ahead.g_diag)  # ½Δ²·d²φ/dc² (+ this side's odd terms)
    point = _profile_side(objective, base, free, tangent, bend, step, tol)
    return None if point is None else point.loglik


def _reprior(ev: Evaluation, old: Prior, new: Prior, core: np.ndarray, diag: np.ndarray) -> Evaluation | None:
    """``ev`` (the objective with prior ``old`` at (core, diag)) with the prior ``new`` instead: the same
    likelihood, so no pass over the cells.  None for a judge-blocked Hessian (its prior is folded into blocks)."""
    if isinstance(ev.H, ArrowHessian) or not ev.H.size:
        return None
    H, H_diag = ev.H.copy(), ev.H_diag.copy()
    old.add_hessian(H, H_diag, -1.0)
    new.add_hessian(H, H_diag)
    g = ev.g - old.core_gradient(core) + new.core_gradient(core)
    g_diag = ev.g_diag - old.precision_diag * (diag - old.mean_diag) + new.precision_diag * (diag - new.mean_diag)
    f = ev.f + _prior_value(new, core, diag) - _prior_value(old, core, diag)
    return Evaluation(f, ev.loglik, g, H, g_diag, H_diag, ev.B)


def _prior_value(prior: Prior, core: np.ndarray, diag: np.ndarray) -> float:
    dc, dd = core - prior.mean, diag - prior.mean_diag
    value = 0.5 * float(dc @ (prior.precision * dc) + dd @ (prior.precision_diag * dd))
    return value + sum(0.5 * kappa * float(core[idx].sum()) ** 2 for idx, kappa in prior.gauges)


@dataclass(frozen=True)
class _Point:
    """A solved profile point: where the last pass was, and the profile log-likelihood there (extrapolated)."""

    core: np.ndarray
    diag: np.ndarray
    loglik: float


def _along(
    mid: _Point, free: np.ndarray, index: int, direction: tuple[np.ndarray, np.ndarray], step: float
) -> tuple[np.ndarray, np.ndarray]:
    """``mid`` moved by ``step`` along ``direction`` (over the free core and the diagonal), the level by ``step``."""
    core, diag = mid.core.copy(), mid.diag + step * direction[1]
    core[free] += step * direction[0]
    core[index] = mid.core[index] + step
    return core, diag


#: Halvings of the step along the profile path before a point is left to the cold solve.
MAX_HALVINGS: int = 2


def _profile_side(
    objective: Objective,
    mid: _Point,
    free: np.ndarray,
    tangent: tuple[np.ndarray, np.ndarray],
    bend: tuple[np.ndarray, np.ndarray],
    step: float,
    tol: float,
    depth: int = 0,
) -> _Point | None:
    """The profile point ``step`` away from the centre ``mid`` (its first Newton step), from the path's
    second-order prediction (None: the caller solves it cold).  ``bend`` is the chord step at the tangent's
    prediction for the full step Δ, ½Δ²·d²φ/dc² + odd terms (a quarter for Δ/2).

    Where Newton from there does not descend (the path bends too much over ``step``), the point half-way is
    solved roughly first and the start taken on the parabola through the centre (with its tangent) and that
    point: φ(step) ≈ 4·φ(step/2) − 3·φ̂ − step·dφ/dc.
    """
    index = int(np.flatnonzero(~free)[0])  # the profiled level
    share = 0.25**depth
    core, diag = _along(mid, free, index, tangent, step)
    core[free] += share * bend[0]
    point = _solve_point(objective, core, diag + share * bend[1], free, tol)
    if point is not None or depth >= MAX_HALVINGS:
        return point
    half = _profile_side(objective, mid, free, tangent, bend, 0.5 * step, 1e3 * tol, depth + 1)
    if half is None:
        return None
    core, diag = 4.0 * half.core - 3.0 * mid.core, 4.0 * half.diag - 3.0 * mid.diag - step * tangent[1]
    core[free] -= step * tangent[0]
    core[index] = mid.core[index] + step
    return _solve_point(objective, core, diag, free, tol)


#: A step that shrinks the gradient less than this factor has the next point evaluated with its Hessian and
#: factorised (a chord step costs a gradient pass; a new factorisation a Hessian pass, about two, but restores
#: quadratic convergence).
CHORD_RATE: float = 0.1
#: Passes over the cells :func:`_solve_point` spends on a point before it gives it up to the cold solve.
MAX_PASSES: int = 12
#: The extrapolated value's error is taken as (shrink factor of the last step) × (the next step's first-order
#: change) plus this share of the Newton decrement (the third-order term: measured ≤ 0.005 · decrement on 1M
#: battles).
THIRD_ORDER_SHARE: float = 0.01


def _solve_point(
    objective: Objective,
    core: np.ndarray,
    diag: np.ndarray,
    free: np.ndarray,
    tol: float,
    ev: Evaluation | None = None,
    newton: NewtonFactor | ArrowFactor | None = None,
    rate: float = 1.0,
) -> _Point | None:
    """Minimise over ``free`` from a warm start until the profile log-likelihood is known to ``tol`` nats; None
    when plain Newton does not get there by descent (a step raises the objective, a Hessian is not positive
    definite, or ``MAX_PASSES`` passes are spent): the caller then solves the point cold.

    The value is log L at the last point plus the change the quadratic model predicts for the next (Newton or
    chord) step s: ∇log L·s + ½ sᵀ∇²log L s = (∇π − g)·s − ½ (−g·s) + ½ sᵀPs (π the prior, P its constant
    Hessian, g the objective's gradient).  What it gets wrong: the step's own error (a chord step's: how much the
    last chord step on the same factorisation shrank the gradient, :data:`CHORD_RATE` before one is seen) times
    its first-order change, plus a third-order term (:data:`THIRD_ORDER_SHARE` of the decrement −g·s); the point
    is done when that is at most ``tol``.

    Lazy factorisation: a factorisation serves chord steps (gradient-only passes) while each shrinks the
    gradient at least ``CHORD_RATE``-fold; after one that does not, the next point is evaluated with its
    Hessian and factorised.  ``rate`` is the last shrink factor (below ``CHORD_RATE``: ``newton`` is trusted).
    """
    prior = objective.prior
    ev = objective.evaluate(core, diag) if ev is None else ev
    passes, shrink = 0, 1.0
    own, chorded = True, False  # the factorisation is this point's own; the last step was a chord step
    while True:
        if newton is None:
            newton = newton_factor(ev, free)
            if newton is None:
                return None
            own, chorded = True, False
        s, t = newton.solve(ev.g[free], ev.g_diag)
        step = np.zeros(core.size)
        step[free] = s
        decrement = -float(ev.g[free] @ s + ev.g_diag @ t)
        first = float((prior.core_gradient(core) - ev.g) @ step)
        if t.size:
            first += float((prior.precision_diag * (diag - prior.mean_diag) - ev.g_diag) @ t)
        value = ev.loglik + first - 0.5 * decrement + 0.5 * prior.curvature(step, t)
        # A chord step's relative error is what a chord step on this factorisation shrank the gradient by; until
        # one has been seen (the last step was the factorisation's own Newton step, whose shrink says how far
        # that step went, not how much the Hessian changed over it), up to CHORD_RATE is taken.
        error = shrink if own or chorded else max(shrink, CHORD_RATE)
        if error * abs(first) + THIRD_ORDER_SHARE * abs(decrement) <= tol:
            return _Point(core, diag, value)
        if passes >= MAX_PASSES:
            return None
        with_hessian = rate > CHORD_RATE
        trial_core = core + step
        trial = objective.evaluate(trial_core, diag + t, hessian=with_hessian)
        passes += 1
        if not np.isfinite(trial.f) or trial.f > ev.f + 1e-14 * max(abs(ev.f), 1.0):
            return None
        gn = _grad_norm(ev, free)
        rate = _grad_norm(trial, free) / gn if gn > 0 else 0.0
        shrink = min(rate, 1.0)
        core, diag, ev = trial_core, diag + t, trial
        chorded, own = not own, False
        if with_hessian:
            newton = None


def _informed(problem: Problem, solution: Solution, t: int) -> np.ndarray:
    """Per judge: its own battles pin its deviation of effect t more than its prior does — the likelihood's
    curvature in the deviation at the MAP is at least the prior's precision — so a profile frees it.

    Read off the MAP's Hessian, whose entry is the likelihood's curvature (Σ h·z² over the judge's battles)
    plus the prior precision.  A deviation its battles do not pin keeps its prior in the profile (see
    :meth:`~biasboard.ranking.problem.Problem.profile_prior`): freed, one the likelihood does not see at all
    (every z = 0) made the Hessian singular and voided the deviations' gauge, and thousands of sparse
    voters' freed deviations (Neyman–Scott) absorbed the common level — position and length read as
    prior-selected at 50k voter-judges, where the pooled fit of the same battles profiles them at 10⁴–10⁵
    nats — or ran away at ĉ ± Δ.  LLM judges (10³–10⁴ times their prior's precision there) are freed as
    before; voters' battles give 0–0.5 times it.

    With a reference the yardstick is still the deviation prior of the model without one
    (:attr:`~biasboard.ranking.problem.Problem.untied_precision`), not the excess prior that replaces it: that
    one is wide on purpose (``excess_sd`` = 2, a sixteenth of position's precision), and against it a voter
    with a dozen battles counted as pinned — freed, thousands of such voters moved to their own maximum
    likelihood at every profile point (without bound where a voter's few verdicts are separable), the path
    solves gave up and the points were fitted cold."""
    lay = problem.layout
    H = solution.evaluation.H
    if not isinstance(H, ArrowHessian) and not H.size:  # no Hessian kept: every deviation profiled, as before
        return np.ones(lay.n_judges, bool)
    curvature = H.A[:, t, t] if isinstance(H, ArrowHessian) else np.diag(H)[lay.block(t)]
    precision = problem.prior.precision[lay.block(t)]
    return curvature - precision >= np.maximum(precision, problem.untied_precision.get(t, 0.0))


def _profile_start(problem: Problem, solution: Solution, t: int, value: float) -> np.ndarray:
    """The MAP with effect t's common level set to ``value`` (the deviations it profiles re-centred)."""
    lay, spec = problem.layout, problem.spec
    core = solution.core.copy()
    core[lay.glob(t)] = value
    devs = core[lay.block(t)]
    own = (spec.deviation_mask(t) > 0) & _informed(problem, solution, t)
    if own.any() and (spec.tied is None or not spec.tied[t].any()):  # deviations sum to zero (no reference level)
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
        column, column_diag = ev.H.matvec(unit), ev.H.prompt_row(index)
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
