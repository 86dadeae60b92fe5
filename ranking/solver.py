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

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from functools import cached_property, reduce
from typing import TYPE_CHECKING

import numpy as np
import scipy.linalg as sla
from biasboard.ranking.arrowhead import (
    ArrowFactor,
    ArrowHessian,
    AssembleMasks,
    BlockCovariance,
    Couplings,
    CrossIndex,
    assemble,
    assemble_masks,
)
from biasboard.ranking.model import (
    PAIR_SLICE_CELLS,
    SEV,
    BlockPartials,
    BlockSlice,
    DavidsonTerms,
    Partials,
    ScorePartials,
    Shard,
    Spec,
    block_partials,
    block_theta_partials,
    partials,
    score_partials,
)
from biasboard.ranking.pages import base_pages

if TYPE_CHECKING:
    from biasboard.ranking.stream import PairStore

#: A shard is evaluated in slices of at most this many cells (views, no copy): the partials add, so this
#: only bounds the per-cell temporaries (a few dozen arrays of this length) — peak memory, not the answer.
CHUNK_CELLS: int = 1 << 17


def _bounds(core: np.ndarray, part: slice | None) -> tuple[int, int]:
    """(start, stop) of ``part`` of the core (the whole core for None): a slice with both given, as θ's is."""
    return (0, core.size) if part is None else (part.start, part.stop)


def _within(idx: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """The mask of the gauge's indices ``idx`` that lie in [lo, hi)."""
    return (idx >= lo) & (idx < hi)


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

    def core_gradient(self, core: np.ndarray, part: slice | None = None) -> np.ndarray:
        """The prior's part of the objective's gradient over the core (gauges included) at ``core``; with ``part``
        (a slice of the core with a start and stop: θ) only its entries, the same values (one computation for both:
        the θ-only pass's gradient must be the full pass's bit for bit, :meth:`Objective.theta_pass`)."""
        lo, hi = _bounds(core, part)
        g = self.precision[lo:hi] * (core[lo:hi] - self.mean[lo:hi])
        for idx, kappa in self.gauges:
            inside = idx[_within(idx, lo, hi)]
            if inside.size:
                g[inside - lo] += kappa * float(core[idx].sum())
        return g

    def part_value(self, core: np.ndarray, part: slice) -> float:
        """The prior's terms that involve the core's entries ``part`` (their Gaussian terms and every gauge that
        reaches them) at ``core``: what changes of the objective's prior when only those entries move."""
        lo, hi = _bounds(core, part)
        d = core[lo:hi] - self.mean[lo:hi]
        f = 0.5 * float(d @ (self.precision[lo:hi] * d))
        reach = [(idx, kappa) for idx, kappa in self.gauges if np.any(_within(idx, lo, hi))]
        return f + sum(0.5 * kappa * float(core[idx].sum()) ** 2 for idx, kappa in reach)

    def curvature(self, s: np.ndarray, t: np.ndarray) -> float:
        """sᵀ P s + tᵀ P_δ t: the prior's (constant) second derivative along the step (s over the core, t over
        the diagonal parameters), gauges included."""
        q = float(s @ (self.precision * s) + t @ (self.precision_diag * t))
        return q + sum(kappa * float(s[idx].sum()) ** 2 for idx, kappa in self.gauges)

    def add_hessian(self, H: np.ndarray, H_diag: np.ndarray, sign: float = 1.0) -> None:
        """Add (``sign`` = −1: remove) the prior's Hessian to a dense core block ``H`` and diagonal ``H_diag``."""
        H[np.diag_indices_from(H)] += sign * self.precision
        for idx, kappa in self.gauges:
            H[np.ix_(idx, idx)] += sign * kappa
        H_diag += sign * self.precision_diag


@dataclass
class Evaluation:
    f: float
    loglik: float  # weighted log-likelihood only (no prior): −Σ partial f
    g: np.ndarray
    H: np.ndarray | ArrowHessian  # block-arrowhead for a judge-blocked objective
    g_diag: np.ndarray
    H_diag: np.ndarray
    B: np.ndarray


class Objective:
    """Negative log-posterior over shards: Σ_shards partials(...) mapped to raw coordinates, plus the prior.

    With ``spec.judge_blocks`` the Hessian is kept block-arrowhead (:mod:`biasboard.ranking.arrowhead`):
    ``cross`` indexes the cells' (judge, model) pairs, built here unless a caller that refits the same
    cells many times (the bootstrap) passes it in.
    """

    def __init__(
        self,
        spec: Spec,
        shards: Sequence[Shard],
        prior: Prior,
        cross: CrossIndex | None = None,
        source: PairStore | None = None,
    ):
        self.spec = spec
        self.shards = list(shards)
        self.prior = prior
        #: Pair cells read from disk a shard at a time on every evaluation (a streamed fit), besides ``shards``.
        self.source = source
        self.blocked = spec.judge_blocks
        self.E = spec.effective_map(centred=not self.blocked)
        self.ET = self.E.T.tocsr()
        self._grades: GradeIndex | None = None
        if self.blocked:
            lay = spec.layout
            self._grades = GradeIndex.of(self.shards, spec)
            if source is not None:
                if any(sh.pairs is not None for sh in self.shards):
                    raise ValueError("a streamed objective reads its pair cells from its source only")
                self.cross = cross or source.cross_index()
            else:
                parts = [sh.pairs for sh in self.shards if sh.pairs is not None]
                self.cross = cross or CrossIndex.of(parts, lay.n_models, lay.n_judges)
        self._slices: list[BlockSlice] | None = None  # the judge-blocked path's slices of the cells
        self._last: tuple[np.ndarray, Evaluation, list[DavidsonTerms]] | None = None
        #: A θ-only pass's terms (:meth:`theta_pass`): arrays the next pass writes into, no point's Hessian terms.
        self._spare: list[DavidsonTerms] | None = None

    def prior_value(self, core: np.ndarray, diag: np.ndarray) -> float:
        """The prior's part of the objective (−log prior, gauges included) at (core, diag)."""
        pr = self.prior
        dc, dd = core - pr.mean, diag - pr.mean_diag
        f = 0.5 * float(dc @ (pr.precision * dc) + dd @ (pr.precision_diag * dd))
        return f + sum(0.5 * kappa * float(core[idx].sum()) ** 2 for idx, kappa in pr.gauges)

    def _effective(self, core: np.ndarray) -> np.ndarray:
        eff = self.E @ core  # the blocked path's E leaves out the centring of log a_j: applied in O(J)
        return self.spec.centred_disc(eff, core) if self.blocked else eff

    def _effective_grad(self, g_eff: np.ndarray) -> np.ndarray:
        g = self.ET @ g_eff
        return self.spec.centred_disc(g, g_eff, transpose=True) if self.blocked else g

    def effective(self, core: np.ndarray) -> np.ndarray:
        """The effective coordinates (what the partials take) of the raw ``core``."""
        return self._effective(core) if self.blocked else self.E @ core

    def raw_gradient(
        self, core: np.ndarray, diag: np.ndarray, g_eff: np.ndarray, g_diag: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The objective's gradient (core, diag) at (core, diag) from the data's gradient in effective
        coordinates ``g_eff`` and over the prompts ``g_diag``: mapped to raw coordinates, prior and gauges
        added (the prompts' part empty where there are no grades)."""
        pr = self.prior
        g = self._effective_grad(g_eff) + pr.core_gradient(core)
        return g, g_diag + pr.precision_diag * (diag - pr.mean_diag)

    @cached_property
    def _theta_is_own_effective(self) -> bool:
        """Whether θ's effective values are its raw ones and no other effective value reads them (E's and Eᵀ's θ
        rows the identity): then a θ-only pass sets θ in the effective values directly and θ's raw gradient is
        its effective one plus the prior's."""
        m = self.spec.layout.n_models
        ident = np.arange(m + 1)
        return all(
            np.array_equal(X.indptr[: m + 1], ident)
            and np.array_equal(X.indices[:m], ident[:m])
            and bool(np.all(X.data[:m] == 1.0))
            for X in (self.E, self.ET)
        )

    def theta_pass(self, core: np.ndarray, diag: np.ndarray) -> Callable[[np.ndarray], tuple[float, np.ndarray]]:
        """θ ↦ (f, ∂f/∂θ) at (``core`` with θ set to that value, ``diag``), every other parameter held.

        Why: a caller that moves θ alone (the attribution's chord steps, :mod:`~biasboard.ranking.attribution`) reads
        θ's gradient only.  A judge-blocked objective in memory then skips what a full gradient pass adds for the
        other parameters — the judges' sums, ∂f/∂ψ, the map of the gradient to raw coordinates and the prior over
        the whole core — and makes the effective values once (the held parameters' do not change); θ's gradient is
        the same bits as :meth:`evaluate`'s.  ``f`` is the data's value plus the prior's terms that involve θ: it
        differs from :meth:`evaluate`'s by the held parameters' prior, a constant, so only differences of it
        between two θ of one pass mean anything (equal to the objective's to rounding).  Other objectives (dense,
        streamed) evaluate their full gradient."""
        theta = self.spec.layout.theta
        point = core.copy()
        if not (self.blocked and self.source is None and self._theta_is_own_effective):

            def full(values: np.ndarray) -> tuple[float, np.ndarray]:
                point[theta] = values
                ev = self.evaluate(point, diag, hessian=False)
                return ev.f, ev.g[theta]

            return full
        eff = self._effective(point)

        def blocked(values: np.ndarray) -> tuple[float, np.ndarray]:
            point[theta] = values
            eff[theta] = values
            f, g = self._theta_partials(eff, diag)
            return f + self.prior.part_value(point, theta), g + self.prior.core_gradient(point, theta)

        return blocked

    def _theta_partials(self, eff: np.ndarray, diag: np.ndarray) -> tuple[float, np.ndarray]:
        """The data's value and θ's data gradient at ``eff`` (judge-blocked, in memory): the slices' sums, then the
        grades', added as :meth:`_evaluate_blocked` adds them (the same bits)."""
        last, self._last = self._last, None
        spare = self._spare if last is None else last[2]
        self._spare = None
        del last
        f, g = 0.0, np.zeros(self.spec.layout.n_models)
        kept: list[DavidsonTerms] = []
        for sl in self._block_slices():
            old = spare.pop(0).arrays() if spare else None
            terms, g_slice = block_theta_partials(eff, sl, self.spec, old)
            del old
            f += terms.f
            g += g_slice
            kept.append(terms)
        self._spare = kept
        if self._grades is not None:  # its θ entries lead its compact index (GradeIndex.effective)
            graded = self._grades.sums(eff, diag, self.shards, self.spec, False)
            f += graded.f
            g += graded.g[: g.size]
        return f, g

    def _block_slices(self) -> Iterable[BlockSlice]:
        """The cells in slices of at most :data:`~biasboard.ranking.model.PAIR_SLICE_CELLS` (what a slice's sums
        pass over stays in a core's cache, as for the dense partials), each with its sparse sums (made on first use
        and kept; a streamed objective's partials are :meth:`~biasboard.ranking.stream.PairStore.block_partials`)."""
        if self._slices is None:
            self._slices = []
            parts = [sh.pairs for sh in self.shards if sh.pairs is not None]
            for pairs, at_a, at_b in zip(parts, self.cross.at_a, self.cross.at_b, strict=True):
                for start in range(0, len(pairs), PAIR_SLICE_CELLS):
                    sl = slice(start, start + PAIR_SLICE_CELLS)
                    self._slices.append(BlockSlice.of(pairs.take(sl), at_a[sl], at_b[sl], self.spec))
        return self._slices

    def _pair_shards(self) -> Iterator[Shard]:
        """The shards in memory, then (a streamed objective) those of the source, read one at a time."""
        yield from self.shards
        if self.source is not None:
            for shard in self.source.shards():
                yield Shard(shard.pairs)

    def _blocked_partials(
        self,
        eff: np.ndarray,
        hessian: bool,
        terms: list[DavidsonTerms] | None = None,
        keep: bool = False,
        spare: list[DavidsonTerms] | None = None,
    ) -> tuple[BlockPartials, list[DavidsonTerms], Couplings | None]:
        """The partials of every slice, and with ``keep`` each slice's Davidson terms (else none: a slice's
        are freed as soon as its sums are added); given the ``terms`` of an evaluation at the same point
        (consumed, a slice's at a time), only the Hessian (``eff`` unused, the partials' f and g left 0).
        ``spare``: an earlier evaluation's kept terms, one per slice, done with: each slice's new terms are written
        into the old ones' arrays (consumed, a slice's at a time).
        A streamed objective's θ × judge rows are spilled to disk by judge piece (the third value)."""
        if self.source is not None:
            assert terms is None and not keep, "a streamed objective keeps no Davidson terms"
            total, spilled = self.source.block_partials(eff, self.spec, hessian, CHUNK_CELLS)
            return total, [], spilled
        total = BlockPartials.zeros(self.spec.layout, self.cross.size, hessian)
        out: list[DavidsonTerms] = []
        for sl in self._block_slices():
            known = None if terms is None else terms.pop(0)
            old = spare.pop(0).arrays() if spare else None
            made = block_partials(eff, sl, self.spec, total, hessian, known, old)
            del old
            if keep:
                out.append(made.for_hessian())
        return total, out, None

    def data_partials(self, core: np.ndarray, diag: np.ndarray, hessian: bool = True) -> Partials:
        eff = self.E @ core
        total = Partials.zeros(self.spec.layout)
        for shard in self._pair_shards():
            for chunk in shard.chunks(CHUNK_CELLS):
                total += partials(eff, diag, chunk, self.spec, hessian)
        return total

    def evaluate(
        self, core: np.ndarray, diag: np.ndarray, *, derivatives: bool = True, hessian: bool = True
    ) -> Evaluation:
        """f, and unless ``derivatives=False`` the gradient, and unless ``hessian=False`` the Hessian blocks
        (left empty otherwise: a gradient-only evaluation costs about half a full one)."""
        if self.blocked:
            return self._evaluate_blocked(core, diag, derivatives=derivatives, hessian=hessian)
        part = self.data_partials(core, diag, hessian=derivatives and hessian)
        pr = self.prior
        dc = core - pr.mean
        dd = diag - pr.mean_diag
        f = part.f + 0.5 * float(dc @ (pr.precision * dc) + dd @ (pr.precision_diag * dd))
        sums = [float(core[idx].sum()) for idx, _ in pr.gauges]
        f += sum(0.5 * kappa * total**2 for (_, kappa), total in zip(pr.gauges, sums, strict=True))
        if not derivatives:
            return Evaluation(f, -part.f, np.empty(0), np.empty((0, 0)), np.empty(0), np.empty(0), np.empty((0, 0)))
        g, g_diag = self.raw_gradient(core, diag, part.g, part.g_diag)
        if not hessian:
            return Evaluation(f, -part.f, g, np.empty((0, 0)), g_diag, np.empty(0), np.empty((0, 0)))
        left = self.ET @ part.H  # (n_core, n_eff)
        H = np.asarray(self.ET @ left.T)
        H = 0.5 * (H + H.T)
        H_diag = part.H_diag.copy()
        pr.add_hessian(H, H_diag)
        B = np.asarray(self.ET @ part.H_cross)
        return Evaluation(f, -part.f, g, H, g_diag, H_diag, B)

    @cached_property
    def _masks(self) -> AssembleMasks:
        """What every Hessian of this objective is masked by (:func:`~biasboard.ranking.arrowhead.assemble`)."""
        return assemble_masks(self.spec)

    def _assemble(self, part: BlockPartials, spilled: Couplings | None = None) -> ArrowHessian:
        """The judge-blocked Hessian from its partials (consumed), the prior and the spec's masks."""
        pr = self.prior
        return assemble(part, self.spec, pr.precision, pr.gauges, self.cross, spilled, self._masks)

    def _evaluate_blocked(self, core: np.ndarray, diag: np.ndarray, *, derivatives: bool, hessian: bool) -> Evaluation:
        """:meth:`evaluate` with the judge-blocked partials; ``H`` is an :class:`ArrowHessian`.

        The solver asks for the Hessian where it factorises, which is mostly a point it has just evaluated
        without it (a trial point it accepted): the cells' Davidson terms of the last gradient-only
        evaluation are kept (``_last``, 48 bytes a cell: six arrays of the cells, :meth:`DavidsonTerms.for_hessian`),
        so the Hessian there costs only its own sums.  Grades (few cells beside the battles) are summed afresh."""
        last, self._last = self._last, None
        grades = self._grades
        if derivatives and hessian and last is not None and np.array_equal(last[0], np.concatenate([core, diag])):
            part, _, _ = self._blocked_partials(np.empty(0), True, last[2])
            hess = self._assemble(part)
            if grades is not None:
                at_point = grades.sums(self._effective(core), diag, self.shards, self.spec, True)
                grades.add_hessian(hess, at_point, self.prior)
            return replace(last[1], H=hess)
        # The last terms are not held beside the new ones: the new are written into their arrays, a slice at a
        # time (fresh arrays each pass were handed back to the kernel between passes and faulted in again: 9,300
        # page faults and about half of a 44 ms gradient pass over 647k voter cells).
        spare = self._spare if last is None else last[2]
        self._spare = None
        del last
        # A gradient-only evaluation keeps its terms (see above), but for a streamed objective: 48 bytes a cell.
        keep = derivatives and not hessian and self.source is None
        eff = self._effective(core)
        part, terms, spilled = self._blocked_partials(eff, derivatives and hessian, keep=keep, spare=spare)
        del spare
        graded: ScorePartials | None = None
        g_diag = np.zeros(diag.size)
        if grades is not None:
            graded = grades.sums(eff, diag, self.shards, self.spec, derivatives and hessian)
            part.f += graded.f
            part.g[grades.effective] += graded.g
            g_diag = graded.g_diag
        f = part.f + self.prior_value(core, diag)
        empty, no_cross = np.empty(0), np.zeros((core.size, 0))
        if not derivatives:
            return Evaluation(f, -part.f, empty, np.empty((0, 0)), empty, empty, no_cross)
        g, g_diag = self.raw_gradient(core, diag, part.g, g_diag)
        if not hessian:
            ev = Evaluation(f, -part.f, g, np.empty((0, 0)), g_diag, empty, no_cross)
            if keep:
                self._last = (np.concatenate([core, diag]), ev, terms)
            return ev
        H = self._assemble(part, spilled)
        if grades is not None and graded is not None:
            grades.add_hessian(H, graded, self.prior)
        return Evaluation(f, -part.f, g, H, g_diag, empty, no_cross)


@dataclass(frozen=True)
class GradeIndex:
    """Where a judge-blocked objective's grades go: their :class:`~biasboard.ranking.model.ScorePartials`' compact
    index (θ, the judges who graded, τ) in the effective coordinates (``effective``) and among the arrowhead's
    globals (``glob``, with ``kept`` the compact entries there: a grader whose severity is switched off has none)."""

    graders: np.ndarray  # every judge with grades, increasing
    effective: np.ndarray
    kept: np.ndarray
    glob: np.ndarray

    @staticmethod
    def of(shards: Sequence[Shard], spec: Spec) -> GradeIndex | None:
        """The index of the grades in ``shards``, or None without grades."""
        parts = [sh.scores.j for sh in shards if sh.scores is not None and len(sh.scores)]
        if not parts:
            return None
        lay = spec.layout
        graders = np.unique(np.concatenate(parts))
        m, n_e, tau = lay.n_models, lay.n_glob, np.arange(lay.n_tau)
        effective = np.concatenate([np.arange(m), lay.eff_block(SEV).start + graders, lay.eff_tau.start + tau])
        rank = np.full(lay.n_judges, -1)
        rank[list(lay.graders)] = np.arange(len(lay.graders))
        at = np.where(rank[graders] >= 0, m + n_e + rank[graders], -1)
        glob = np.concatenate([np.arange(m), at, m + n_e + len(lay.graders) + tau])
        kept = np.flatnonzero(glob >= 0)
        return GradeIndex(graders, effective, kept, glob[kept])

    def sums(
        self, eff: np.ndarray, diag: np.ndarray, shards: Sequence[Shard], spec: Spec, hessian: bool
    ) -> ScorePartials:
        """The grades' partials over every shard's score cells, a chunk of :data:`CHUNK_CELLS` at a time (as the
        dense partials take them: the same sums)."""
        parts = [
            score_partials(eff, diag, chunk.scores, spec, self.graders, hessian)
            for shard in shards
            for chunk in shard.chunks(CHUNK_CELLS)
            if chunk.scores is not None and len(chunk.scores)
        ]
        return reduce(ScorePartials.__iadd__, parts[1:], parts[0])

    def add_hessian(self, hess: ArrowHessian, part: ScorePartials, prior: Prior) -> None:
        """Add the grades' Hessian to the globals' block and their prompts' block to ``hess`` (in raw coordinates:
        θ, a severity and τ are their own effective values)."""
        kept, at = self.kept, self.glob
        hess.H[np.ix_(at, at)] += part.H[np.ix_(kept, kept)]
        hess.B = np.zeros((hess.H.shape[0], part.H_diag.size))
        hess.B[at] = part.B[kept]
        hess.D = part.H_diag + prior.precision_diag


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
    #: The factorised Hessian of ``evaluation`` when the solver kept it (judge-blocked fits), for the covariance.
    factor: ArrowFactor | None = None


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


def newton_factor(
    ev: Evaluation, free: np.ndarray, mu: float = 0.0, hold: bool = False
) -> NewtonFactor | ArrowFactor | None:
    """The factorised (damped) Newton system of ``ev`` over ``free``, or None when not positive definite;
    ``hold``: a judge-blocked one keeps what its covariance reads (:attr:`ArrowFactor.Ainv`)."""
    if isinstance(ev.H, ArrowHessian):
        return ArrowFactor.build(ev.H, free, mu, hold)
    B = ev.B[free]
    factor, d = _schur_factor(ev.H[np.ix_(free, free)], B, ev.H_diag, mu)
    return None if factor is None else NewtonFactor(factor, B, d)


def _has_hessian(ev: Evaluation) -> bool:
    return isinstance(ev.H, ArrowHessian) or ev.H.size > 0


def _diag_scale(ev: Evaluation) -> float:
    if isinstance(ev.H, ArrowHessian):
        return ev.H.diag_mean()
    return float(np.mean(np.abs(np.diag(ev.H)))) if ev.H.size else 1.0


def _quad(ev: Evaluation, free: np.ndarray, s: np.ndarray) -> float:
    """sᵀ H s over the free parameters (a dense Hessian; the judge-blocked path gets it from its solve)."""
    assert isinstance(ev.H, np.ndarray)
    return s @ (ev.H[np.ix_(free, free)] @ s)


def _grad_norm(ev: Evaluation, free: np.ndarray | slice) -> float:
    return float(np.sqrt(np.sum(ev.g[free] ** 2) + np.sum(ev.g_diag**2)))


def _selector(free: np.ndarray) -> np.ndarray | slice:
    """``free`` as an index: the whole vector (a view, no gather) when every parameter is free."""
    return slice(None) if free.all() else free


def _trial(objective: Objective, core: np.ndarray, diag: np.ndarray, *, hessian: bool) -> Evaluation:
    """The objective at a trial point, floating-point overflow silenced: a step that overshoots (a discrimination
    of exp(800), a profile likelihood's far end on a slice of a few hundred verdicts) makes f non-finite, and the
    callers reject such a step by ``np.isfinite(f)`` and shorten it.  numpy's RuntimeWarnings about it reached the
    refresh's console as raw ``overflow encountered in exp`` lines for a fit that converged."""
    with np.errstate(over="ignore", invalid="ignore"):
        return objective.evaluate(core, diag, hessian=hessian)


def minimize(
    objective: Objective,
    core0: np.ndarray,
    diag0: np.ndarray,
    *,
    free: np.ndarray | None = None,
    tol: float = 1e-8,
    max_iter: int = 200,
    g0_norm: float | None = None,
    start: Evaluation | None = None,
    polish: bool = True,
    judge_step: float | None = None,
    polish_unevaluated: bool = False,
) -> Solution:
    """Damped Newton from (core0, diag0) with the parameters outside ``free`` held fixed.

    ``start`` is the objective's evaluation (with its Hessian) at (core0, diag0) when the caller has it.

    On a judge-blocked objective, where factorising costs several gradient evaluations, trial points are
    evaluated without the Hessian, and after a step the quadratic model predicted well the same
    factorisation is reused for chord steps while each shrinks the gradient at least ``CHORD_RATE``-fold
    (:func:`_chord_steps`); the Hessian is evaluated only where a new factorisation is needed.  There the
    solution keeps the Hessian and the factorisation of the polishing step's start — a point within the
    tolerance of the returned one, so the Laplace covariance from it differs by O(tol) — instead of paying
    one more evaluation and factorisation at the polished point; ``polish=False`` skips the polishing step
    (a loose first phase, whose answer is only a start).  The dense path, whose factorisation is cheap,
    always polishes and evaluates its Hessian at the returned point.

    ``judge_step`` (judge-blocked only): each judge's own entries of a Newton step are clipped to ±judge_step, and
    the quadratic model's prediction for the clipped step is made with a product by H (:func:`clip_judge_steps`).
    Far from quadratic per judge — a bootstrap replicate that redrew a few-battle voter's counts — the plain step
    overshoots and μ would be raised a factorisation at a time.

    ``polish_unevaluated``: converged on an undamped, unclipped Newton step (no chord step after it), the polishing
    step is taken with that step's factorisation and not evaluated, and the solution carries the last gradient-only
    evaluation (no Hessian): for a bootstrap replicate, which needs only its point
    (:mod:`biasboard.ranking.bootstrap`).  The evaluated polish costs a Hessian pass, a factorisation and a gradient
    pass, a fifth of a replicate that handed over on 5,020 voter-judges, streamed.  Why only then: that
    factorisation is one Newton step old, so the polish is as good as a fresh one; after chord steps it is older,
    and polishing with it left voter-judges' weakest parameters 2e-7 (real crowd votes) to 5e-5 (50k simulated
    voters) from the evaluated polish's point — so there the polish is evaluated as before.
    """
    # ``start`` is moved into the iterations, not kept by this frame: a judge-blocked Hessian (~50 MB at 50k
    # voter-judges, with its factorisation's share) is then freed as soon as the step from it is taken.
    moved = [] if start is None else [start]
    del start
    with base_pages() if objective.blocked else nullcontext():
        return _minimize(
            objective, core0, diag0, free, tol, max_iter, g0_norm, moved, polish, judge_step, polish_unevaluated
        )


def _minimize(
    objective: Objective,
    core0: np.ndarray,
    diag0: np.ndarray,
    free: np.ndarray | None,
    tol: float,
    max_iter: int,
    g0_norm: float | None,
    moved: list[Evaluation],
    polish: bool,
    judge_step: float | None = None,
    polish_unevaluated: bool = False,
) -> Solution:
    """:func:`minimize`'s iterations; ``moved`` holds the start's evaluation, if given (taken out of it)."""
    core, diag = core0.astype(float).copy(), diag0.astype(float).copy()
    lazy = objective.blocked
    free = np.ones(core.shape[0], bool) if free is None else free
    sel = _selector(free)
    judges = judge_entries(objective, sel) if lazy and judge_step is not None else None
    ev = moved.pop() if moved else objective.evaluate(core, diag)
    scale = max(_grad_norm(ev, sel) if g0_norm is None else g0_norm, 1.0)
    mu = 0.0
    diag_scale = _diag_scale(ev)
    it = 0
    converged = False
    polished = False
    kept: ArrowFactor | None = None
    newton: NewtonFactor | ArrowFactor | None = None
    fresh = False  # the current point is an undamped, unclipped Newton step from ``newton``'s point, no chord after it
    while it < max_iter:
        gn = _grad_norm(ev, sel)
        if gn <= tol * scale:
            converged = True
            if polished or (lazy and not polish):
                break
            if polish_unevaluated and fresh and newton is not None:
                s, t = newton.solve(ev.g[sel], ev.g_diag)
                if judges is not None and judge_step is not None:
                    clip_judge_steps(s, judges, judge_step)
                core[sel] += s  # this frame's own array (a copy of core0, or a step's new core)
                return Solution(core, diag + t, ev, free, it, True, gn, gn / scale, scale)
        # The previous factorisation (and the per-entry rows it shares with its Hessian) freed before the next is
        # made: the blocked ones are ~55 MB at 50k voter-judges, and two alive at once set the fit's peak memory.
        newton = None
        if lazy and not _has_hessian(ev):
            ev = objective.evaluate(core, diag)  # the Hessian where the next factorisation happens
        mu_step = 0.0 if converged else mu
        # Converged: the polishing step's factorisation, which the solution keeps for its covariance.
        newton = newton_factor(ev, free, mu_step, hold=converged)
        if newton is None:  # S + μI not positive definite (the a_j terms make f non-convex far from the MAP)
            if converged or mu > 1e12 * diag_scale:
                break
            mu = max(10.0 * mu, 1e-4 * diag_scale)
            continue
        s, t = newton.solve(ev.g[sel], ev.g_diag)
        clipped = judges is not None and judge_step is not None and clip_judge_steps(s, judges, judge_step)
        new_core = core.copy()
        new_core[sel] += s
        new_diag = diag + t
        new_ev = _trial(objective, new_core, new_diag, hessian=not lazy)
        it += 1
        g_f = ev.g[sel]
        if clipped and isinstance(ev.H, ArrowHessian):  # not the solve's step: the model's sᵀHs from a product by H
            full = np.zeros(core.size)
            full[sel] = s
            linear = float(g_f @ s + ev.g_diag @ t)
            predicted = -linear - 0.5 * (float(s @ ev.H.matvec(full)[sel]) + ev.H.prompt_quadratic(full, t))
        elif isinstance(newton, ArrowFactor):
            # The factorisation solved (H + μI)(s, t) = −(g, g_δ) at this point, so (s, t)ᵀH(s, t) = −gᵀs − g_δᵀt
            # − μ‖(s, t)‖²: no product with the judge-blocked H (~a gradient evaluation's cost) for the predicted
            # decrease.
            linear = float(g_f @ s + ev.g_diag @ t)
            predicted = -linear - 0.5 * (-linear - mu_step * float(s @ s + t @ t))
        else:
            predicted = -(g_f @ s + ev.g_diag @ t) - 0.5 * (
                _quad(ev, free, s) + 2 * t @ (ev.B[free].T @ s) + t @ (ev.H_diag * t)
            )
        actual = ev.f - new_ev.f
        if converged:
            polished = True
            if np.isfinite(new_ev.f) and _grad_norm(new_ev, sel) < gn:
                if lazy:  # the polished point keeps the Hessian this step was factorised at (see above)
                    new_ev = replace(new_ev, H=ev.H)
                core, diag, ev = new_core, new_diag, new_ev
            if lazy:
                kept = newton if isinstance(newton, ArrowFactor) else None
            break
        # Near the optimum both decreases fall below f's rounding (f ~ 1e6 carries ~1e-10 of noise): judge
        # the step by the gradient then, or a converging Newton step is rejected forever and μ grows.
        noise = 1e-14 * max(abs(ev.f), 1.0)
        at_rounding = abs(actual) <= noise and predicted <= noise and _grad_norm(new_ev, sel) < gn
        if np.isfinite(new_ev.f) and (at_rounding or (actual >= 0 and (actual > 1e-4 * predicted or predicted <= 0))):
            core, diag, ev = new_core, new_diag, new_ev
            fresh = mu_step == 0.0 and not clipped
            if predicted <= 1e-15 * max(abs(ev.f), 1.0) and mu == 0.0:
                # The quadratic model predicts no further gain at machine precision: a stationary point.
                converged = _grad_norm(ev, sel) <= tol * scale
                break
            ratio = actual / predicted if predicted > 0 else 1.0
            if lazy and mu == 0.0 and ratio > 0.75:
                core, diag, ev, chords = _chord_steps(objective, newton, core, diag, ev, sel, tol * scale)
                it += chords
                fresh = fresh and chords == 0
            if ratio > 0.75:
                mu = mu / 4.0 if mu > 1e-10 * diag_scale else 0.0
            elif ratio < 0.25:
                mu = max(4.0 * mu, 1e-6 * diag_scale)
        else:
            fresh = False
            mu = max(4.0 * mu, 1e-4 * diag_scale)
    newton = None  # (a converged first phase breaks with its last factorisation alive: freed before the Hessian)
    if lazy and not _has_hessian(ev):
        ev = objective.evaluate(core, diag)  # the solution carries its Hessian (Laplace covariance, bootstrap)
    gn = _grad_norm(ev, sel)
    return Solution(core, diag, ev, free, it, bool(gn <= tol * scale), gn, gn / scale, scale, kept)


#: A chord step (the previous factorisation reused) is kept only while it shrinks the gradient this much.
CHORD_RATE: float = 0.5


def judge_entries(objective: Objective, free: np.ndarray | slice) -> np.ndarray:
    """Which free core entries are a judge's own parameters (the per-judge blocks, between the globals and τ; a
    grader's severity is one of the globals)."""
    lay = objective.spec.layout
    judge = np.zeros(lay.n_core, bool)
    judge[lay.n_models + lay.n_glob : lay.tau.start] = True
    judge[lay.block(SEV).start + np.array(lay.graders, dtype=np.int64)] = False
    return judge[free]


def clip_judge_steps(step: np.ndarray, judges: np.ndarray, limit: float) -> bool:
    """Clip the judges' own entries of ``step`` to ±``limit`` in place; whether any was clipped."""
    over = judges & (np.abs(step) > limit)
    if not over.any():
        return False
    step[over] = np.clip(step[over], -limit, limit)
    return True


def _chord_steps(
    objective: Objective,
    newton: NewtonFactor | ArrowFactor,
    core: np.ndarray,
    diag: np.ndarray,
    ev: Evaluation,
    free: np.ndarray | slice,
    target: float,
) -> tuple[np.ndarray, np.ndarray, Evaluation, int]:
    """Chord (simplified Newton) steps with ``newton`` from an accepted point, gradient-only evaluations,
    while f does not rise beyond rounding and the gradient shrinks ``CHORD_RATE``-fold; stops at ``target``.

    A step that lowers f and the gradient, but by less than that rate, is still kept (the next Newton
    step starts from it: a better point, evaluated anyway) and ends the chord steps."""
    steps = 0
    gn = _grad_norm(ev, free)
    last: tuple[np.ndarray, np.ndarray] | None = None  # (x, s) of the previous chord step
    while gn > target and steps < 20:
        s, t = newton.solve(ev.g[free], ev.g_diag)
        step = s
        x = core[free]  # never written: each step makes a new core (a view of it is kept, not copied)
        if last is not None and not t.size:
            # Anderson (depth 1) on the fixed-point map x -> x + s(x): chord steps converge linearly, at the
            # rate of the slowest mode of I - H0^-1 H; extrapolating along the last two steps removes it.
            dx, ds = x - last[0], s - last[1]
            denom = float(ds @ ds)
            if denom > 0:
                gamma = float(ds @ s) / denom
                dx += ds  # s − γ(dx + ds), in dx's memory (a core-sized array each: ~0.2 ms at 50k judges)
                dx *= gamma
                step = np.subtract(s, dx, out=dx)
            del dx, ds  # not held through the trial's evaluation (core-sized: 2.3 MB each at 50k judges)
        last = (x, s)
        trial_core = core.copy()
        trial_core[free] += step
        trial = _trial(objective, trial_core, diag + t, hessian=False)
        trial_gn = _grad_norm(trial, free)
        noise = 1e-14 * max(abs(ev.f), 1.0)
        if not np.isfinite(trial.f) or trial.f > ev.f + noise or trial_gn >= gn:
            break
        core, diag, ev, steps = trial_core, diag + t, trial, steps + 1
        if trial_gn > CHORD_RATE * gn:
            break
        gn = trial_gn
    return core, diag, ev, steps


def refit_nearby(
    objective: Objective,
    start: Solution,
    newton: NewtonFactor | ArrowFactor,
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
        new_ev = _trial(objective, new_core, new_diag, hessian=False)
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


def covariance_block(cov: np.ndarray | BlockCovariance, index: slice | int):
    """``cov[index, index]`` of a dense or a judge-blocked covariance (globals only for the latter)."""
    if isinstance(cov, BlockCovariance):
        return cov.block(index)
    return cov[index, index]


def laplace_covariance(solution: Solution) -> np.ndarray | BlockCovariance:
    """Posterior covariance of the core parameters (δ marginalised), zero rows for fixed parameters.

    A judge-blocked fit gets a :class:`~biasboard.ranking.arrowhead.BlockCovariance` (globals' block and
    per-judge variances) instead of the (6J)² matrix.
    """
    ev, free = solution.evaluation, solution.free
    if isinstance(ev.H, ArrowHessian):
        with base_pages():  # (its per-judge blocks: fresh arrays of tens of MB at 50k voter-judges)
            factor = solution.factor if solution.factor is not None else ArrowFactor.build(ev.H, free, hold=True)
            if factor is None:
                raise np.linalg.LinAlgError("the Hessian at the optimum is not positive definite")
            return replace(factor.covariance(), factor=factor)  # the factor: joint covariances on demand
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
