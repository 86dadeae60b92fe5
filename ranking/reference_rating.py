"""The reference rating φ: what a reference rater r concludes on each model's typical answers.

    φ_m = θ_m + (β_r / a_r) · x̄_m + Σ_k (δ_rk / a_r) · s̄_mk

(the terms are defined in :mod:`biasboard.ranking.reference`).  φ is a function of the raw core alone, so it is
evaluated at the MAP with its linear map (:func:`reference_map`: the delta-method covariance) and at each
Poisson-bootstrap replicate's core (:func:`reference_replicates`: the published intervals with ``--bootstrap``),
from the same terms (:func:`rated_terms`).  Kept apart from the reference fit so that the fit itself can
evaluate φ on its replicates (whose raw cores it does not keep: ~280 MB for 100 replicates at 50k voters).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from biasboard.ranking.arrowhead import BlockCovariance
from biasboard.ranking.data import Dataset
from biasboard.ranking.diagnostics import mean_log_length
from biasboard.ranking.gate import gated_effects, reference_mask, row_covariance
from biasboard.ranking.model import DISC, LEN, STYLE_BLOCKS, Layout
from biasboard.ranking.problem import Problem
from scipy.sparse.csgraph import connected_components
from scipy.sparse.linalg import spsolve


def typical_length(data: Dataset, clip: float | None) -> np.ndarray:
    """x̄_m: each model's mean log length minus the pool's mean, clipped at ±clip (0 where unknown)."""
    mu = mean_log_length(data)
    known = np.isfinite(mu)
    if not known.any():
        return np.zeros(len(data.models))
    x = np.where(known, mu - mu[known].mean(), 0.0)
    return x if clip is None else np.clip(x, -clip, clip)


def typical_style(data: Dataset) -> np.ndarray:
    """s̄ (M × 3): each model's typical normalised style difference (header, list, bold), on the scale of a pair's:
    the per-model values whose differences s̄_m − s̄_n best match the mean difference d = (c_a − c_b)/(c_a + c_b)
    of the battles between m and n (least squares over the battles with style counts, self-battles skipped; 0
    where a model has none, and without style counts).

    The cells keep each battle's d, not the counts, so a model's typical style is read from the pairs it met
    (where length's is its mean log length against the pool's, :func:`typical_length`).  Why not each model's
    mean d against its opponents: that mean leaves the model itself out of the pool it is measured against, so
    two models' means differ by M/(M − 1) times their mean d (8 simulated models, header: slope 1.131, M/(M − 1)
    = 1.143): φ carried the reference's style preference M/(M − 1) times over (14% at 8 models), where
    length's typical value, against the pool's mean with the model in it, has no such factor.  d is bounded by
    construction: no clip."""
    pairs, m = data.pairs, len(data.models)
    out = np.zeros((m, len(STYLE_BLOCKS)))
    if pairs.style is None or pairs.n_style is None:
        return out
    w = np.where(pairs.a != pairs.b, pairs.n_style, 0.0)
    used = w > 0
    if not used.any():
        return out
    a, b, w = pairs.a[used], pairs.b[used], w[used]
    # The weighted least squares min Σ w (s_a − s_b − d̄)²: the graph Laplacian's system L s = Σ ± w d̄, solved in
    # each comparison component with one model grounded, then centred there (a model without style battles: 0).
    rows, cols = np.concatenate([a, b, a, b]), np.concatenate([a, b, b, a])
    lap = sp.coo_matrix((np.concatenate([w, w, -w, -w]), (rows, cols)), shape=(m, m)).tocsr()
    rhs = np.zeros((m, len(STYLE_BLOCKS)))
    for k in range(len(STYLE_BLOCKS)):
        wd = w * pairs.style[used, k]
        rhs[:, k] = np.bincount(a, weights=wd, minlength=m) - np.bincount(b, weights=wd, minlength=m)
    n_comp, component = connected_components(lap, directed=False)
    for c in range(n_comp):
        members = np.flatnonzero(component == c)
        if members.size < 2:
            continue
        rest = members[1:]
        solved = spsolve(lap[rest][:, rest].tocsc(), rhs[rest])
        out[rest] = np.asarray(solved).reshape(rest.size, -1)
        out[members] -= out[members].mean(axis=0)
    return out


def rated_effects(layout: Layout) -> dict[str, int]:
    """The reference's own effects that enter its rating φ, with their blocks: length, and the style effects when
    the model has them (position is averaged out, affinity reported only)."""
    return {effect: t for effect, t in gated_effects(layout).items() if t == LEN or t in STYLE_BLOCKS}


def reference_shares(problem: Problem, reference: frozenset[str]) -> np.ndarray:
    """Each judge's share of the reference raters' pair verdicts between two different models (0 outside the
    reference; sums to 1 over it; a self-battle says nothing of a_r).

    Why by verdicts: the board's scale is the verdict-weighted mean of log a_j (``Spec.disc_weights``), and a rater
    of a pooled reference with a handful of verdicts, its log a_r mostly its prior, set as much of an unweighted
    mean as the rater of thousands — one rater of 10 verdicts beside one of ~2,400 moved a_r by up to 28% and φ by
    up to 0.07 logits (docs/design-notes.md, "The reference and the gate").  Equal shares if no rater has a verdict."""
    ref = reference_mask(problem, reference)
    verdicts = np.where(ref, problem.data.judge_sums("n_versus"), 0.0)
    total = verdicts.sum()
    return verdicts / total if total > 0 else ref / max(int(ref.sum()), 1)


def discrimination_row(problem: Problem, reference: frozenset[str]) -> np.ndarray:
    """v with v · raw core = the reference raters' mean log a_r, each weighted by its share of their verdicts
    (:func:`reference_shares`), centred as the fit centres it: L_j = ρ_j − Σ_k w_k ρ_k,
    :meth:`~biasboard.ranking.model.Spec.disc_centring`, or L_j = ρ_j where grades or a judge whose a_j is fixed
    at 1 set θ's scale (a rater whose discrimination is off has L_r = 0).

    The row of the effective map E averaged over the reference, built without E: with the centring of
    log a_j E holds a J² block (every enabled judge's mean), which a 10⁴–10⁶ voter-judge fit cannot form.
    """
    lay, spec = problem.layout, problem.spec
    v = np.zeros(lay.n_core)
    if not reference_mask(problem, reference).any():
        return v
    raw = lay.block(DISC).start + np.arange(lay.n_judges)
    share = reference_shares(problem, reference) * (spec.masks[DISC] > 0)  # a_j = 1 (one judge alone: all): L_j = 0
    v[raw] = share
    centred = spec.disc_centring()
    if centred is not None:  # else L_j = ρ_j: grades, or a judge whose a_j is fixed at 1, set θ's scale
        on, w = centred
        v[raw[on]] -= w * share.sum()
    return v


@dataclass(frozen=True)
class RatedTerms:
    """What φ adds to θ, per rated effect k (length, then style): ``rows[k] @ core`` is the reference's coefficient
    per raw covariate unit, ``typical[k]`` each model's typical covariate; ``v_disc @ core`` is mean log a_r."""

    rows: np.ndarray  # (k, n_core)
    typical: list[np.ndarray]  # k × (M,)
    v_disc: np.ndarray  # (n_core,)
    blocks: tuple[int, ...] = ()  # the rated effects' blocks, in the order of ``rows``


def rated_terms(problem: Problem, reference: frozenset[str], clip: float | None) -> RatedTerms | None:
    """The terms of φ, or None when the reference has none of the rated effects of its own (no reference, or no
    lengths and no style counts in its verdicts, or each taken as zero): then φ = θ."""
    lay, spec = problem.layout, problem.spec
    if spec.tied is None or not reference_mask(problem, reference).any():
        return None
    blocks = [t for t in rated_effects(lay).values() if spec.tied[t].any()]
    if not blocks:
        return None
    style = typical_style(problem.data)
    typical = [typical_length(problem.data, clip) if t == LEN else style[:, STYLE_BLOCKS.index(t)] for t in blocks]
    rows = np.zeros((len(blocks), lay.n_core))  # each coefficient per raw covariate unit
    for i, t in enumerate(blocks):
        rows[i, lay.glob(t)] = spec.unit(t)
    return RatedTerms(rows, typical, discrimination_row(problem, reference), tuple(blocks))


#: The models a warning names before "N more".
NAMED_MODELS = 5


def lengthless_warnings(problem: Problem, reference: frozenset[str], clip: float | None) -> list[str]:
    """A warning naming the models whose φ takes the reference's length preference at the pool's mean length
    (x̄_m = 0, :func:`typical_length`) because no battle of theirs has a length: a model graded but never in a
    battle (its grades' lengths are not stored in the score cells), or one whose battles carry no lengths.  Its
    neighbours' φ take their own lengths, so beside a reference with a length preference the comparison is not
    like for like; said rather than published silently.  Empty when φ has no length term or every model has one."""
    terms = rated_terms(problem, reference, clip)
    if terms is None or LEN not in terms.blocks:
        return []
    unknown = ~np.isfinite(mean_log_length(problem.data))
    if not unknown.any() or unknown.all():
        return []
    names = [problem.data.models[i] for i in np.flatnonzero(unknown)]
    listed = ", ".join(names[:NAMED_MODELS]) + (
        f" ({len(names) - NAMED_MODELS} more)" if len(names) > NAMED_MODELS else ""
    )
    verb = "has" if len(names) == 1 else "have"
    whose = "its" if len(names) == 1 else "their"
    return [
        f"reference rating: {listed} {verb} no answer length in any battle (graded only, or lengths missing), so "
        f"{whose} rating takes the reference's length preference at the pool's mean length, not at {whose} own (a "
        "grade's length is not stored)"
    ]


@dataclass(frozen=True)
class RatingMap:
    """A rating linearised in the raw core: ``jacobian = coef @ basis`` (M × n_core), kept factored.

    ``basis`` holds few sparse rows (θ, the reference's rated coefficients, its mean log a_r) so the rating's
    covariance is coef · Cov(basis) · coefᵀ, one small row covariance whether the fit is dense or judge-blocked.
    """

    coef: np.ndarray  # (M, b)
    basis: sp.csr_matrix  # (b, n_core)

    def covariance(self, cov_core: np.ndarray | BlockCovariance) -> np.ndarray:
        out = self.coef @ row_covariance(cov_core, self.basis).dense() @ self.coef.T
        return 0.5 * (out + out.T)


def reference_map(
    problem: Problem, core: np.ndarray, reference: frozenset[str], clip: float | None
) -> tuple[np.ndarray, RatingMap | None]:
    """(φ, its linear map): the reference rating of every model and its Jacobian with respect to the raw core.

    Linear in θ and in the reference's length (and style) coefficients, divided by a_r = exp(mean L_r) (the
    reference's discrimination).  The map is None when φ = θ (:func:`rated_terms`).
    """
    lay = problem.layout
    m = lay.n_models
    theta = core[lay.theta]
    terms = rated_terms(problem, reference, clip)
    if terms is None:
        return theta.copy(), None
    coefs, a = terms.rows @ core, float(np.exp(terms.v_disc @ core))
    phi, weighted = theta.copy(), np.zeros(m)
    for z, c in zip(terms.typical, coefs.tolist(), strict=True):
        phi += c / a * z
        weighted += z * c
    basis = sp.vstack(
        [sp.eye(m, lay.n_core, format="csr"), sp.csr_matrix(terms.rows), sp.csr_matrix(terms.v_disc)]
    ).tocsr()
    coef = np.column_stack([np.eye(m), *(z / a for z in terms.typical), -(weighted / a)])
    return phi, RatingMap(coef, basis)


def reference_replicates(
    problem: Problem, cores: np.ndarray, reference: frozenset[str], clip: float | None
) -> np.ndarray | None:
    """φ at each bootstrap replicate's raw core (replicates × n_core → replicates × M, uncentred), exactly (φ is
    not linear in a_r), or None when φ = θ (the replicates of θ are then the rating's own)."""
    terms = rated_terms(problem, reference, clip)
    if terms is None:
        return None
    coefs = cores @ terms.rows.T  # (replicates, k)
    a = np.exp(cores @ terms.v_disc)
    phi = cores[:, problem.layout.theta].copy()
    for z, c in zip(terms.typical, coefs.T, strict=True):
        phi += (c / a)[:, None] * z
    return phi
