"""The Poisson-bootstrap replicate engine: every replicate a real refit, at a fraction of a fit's cost.

A replicate redraws every count of every cell as Poisson(count) and refits the model.  Why it can be
cheap: a replicate's optimum lies within a few standard errors of the MAP, where the MAP's Hessian is
a good model of the replicate's, so each replicate

- starts at the MAP, where the per-cell probabilities are the same for every replicate (only the counts
  differ, and the gradient is linear in the counts), so its first gradient costs no exp or log;
- takes chord-Newton steps with the MAP's factorised Hessian (one factorisation for all replicates):
  each step costs one gradient evaluation and a triangular solve, and shrinks the gradient ~30-fold
  at arena scale (the Hessians of nearby points differ by a few per cent);
- stops when the relative gradient is below the fit's tolerance (the same test as the fit, checked on
  an evaluated gradient), then takes the step that gradient gives (the polishing step of the fit's
  Newton, here without a further evaluation: every earlier step was checked to contract);
- hands over to the fit's damped Newton from where it got when a step does not halve the gradient (which,
  converged on a Newton step, polishes with that step's factorisation: ``polish_unevaluated``).

On pair cells (no ordinal scores) the gradient is evaluated by :class:`PairGradient`, a lean
gradient-only form of the pair likelihood of :mod:`biasboard.ranking.model` (no objective value, one
exp per cell, cache-sized slices); the engine checks it against the model's gradient once before use
and falls back to the model's own evaluation if they differ.  Otherwise the model's objective is used: with
ordinal scores, and for a streamed data set (:mod:`biasboard.ranking.stream`), whose replicate reads the shards
with their counts redrawn as each is read (:class:`ShardRedraw`), so no replicate of the history is held.

Replicates run in parallel processes (fork: the problem, the factorisation and the MAP's per-cell
probabilities are shared copy-on-write).  Replicate r draws its counts from a generator seeded by
(seed, r) alone and the results are put back in replicate order, so the answer does not depend on the
number of processes — bit for bit.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
from biasboard.ranking import forked
from biasboard.ranking.allocator import keep_freed_memory
from biasboard.ranking.arrowhead import ArrowFactor
from biasboard.ranking.data import PairArrays, ScoreArrays
from biasboard.ranking.model import AFF, DISC, LEN, POS, TIE, Spec
from biasboard.ranking.problem import Problem
from biasboard.ranking.solver import (
    NewtonFactor,
    Objective,
    Solution,
    clip_judge_steps,
    judge_entries,
    minimize,
    newton_factor,
)
from biasboard.ranking.uncertainty import poisson_scores

_LOG = logging.getLogger(__name__)

#: Cells per slice of a gradient evaluation: the per-cell temporaries (~20 arrays) stay in the CPU cache.
SLICE_CELLS: int = 1 << 14
#: A chord step is kept only while it shrinks the gradient at least this much (else: damped Newton).
CHORD_RATE: float = 0.5
#: Below this many cell-replicates (cells × replicates) the replicates run in this process.
PARALLEL_MIN_WORK: int = 5_000_000
#: The largest move of a judge's own parameter per Newton step of the fallback (``judge_step`` of
#: :func:`~biasboard.ranking.solver.minimize`): a replicate that redraws a few-battle voter's counts can move its tie
#: propensity by several log-odds, where the plain Newton step overshoots by tens.
JUDGE_STEP: float = 1.0
#: Spawn key of the bootstrap's random streams (kept apart from the posterior draws' ``default_rng(seed)``).
STREAM: int = 0xB007


def replicate_rng(seed: int, r: int) -> np.random.Generator:
    """Replicate r's generator: a function of (seed, r) only, whichever process draws it."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(STREAM, r)))


def default_workers(replicates: int, cells: int) -> int:
    """Processes for the replicates: ``BIASBOARD_BOOTSTRAP_WORKERS`` if set, else one per available CPU
    for a problem big enough to repay a fork (the result is the same either way)."""
    return forked.default_workers("BIASBOARD_BOOTSTRAP_WORKERS", replicates, replicates * cells, PARALLEL_MIN_WORK)


class SmallPoisson:
    """Exact Poisson draws for many means that are small whole numbers (cell counts), by inverse CDF.

    Why: ``Generator.poisson`` costs ~35 ns per draw (an exp per draw); here a draw is one uniform and a
    table look-up.  The table maps each of ``BINS`` equal bins of [0, 1) to k when the whole bin lies in
    one CDF interval of Poisson(m); the few uniforms in a bin that straddles a CDF point are resolved by
    comparing with the CDF itself.  So k = min{k : u < F_m(k)} exactly, as inverse-CDF sampling defines it.
    Means that are not whole numbers up to ``LARGEST`` go to ``Generator.poisson``.
    """

    LARGEST = 16
    BINS = 1 << 13

    def __init__(self, means: np.ndarray):
        whole = (means == np.round(means)) & (means >= 0) & (means <= self.LARGEST)
        self.small, self.large = np.flatnonzero(whole), np.flatnonzero(~whole)
        self.m = means[self.small].astype(np.intp)
        self.large_means = means[self.large]
        self.size = means.size
        self.cdf, self.table = _poisson_tables(self.LARGEST, self.BINS)
        self.row = self.m * self.BINS

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        out = np.empty(self.size)
        u = rng.random(self.small.size)
        k = self.table[self.row + (u * self.BINS).astype(np.intp)]
        straddle = np.flatnonzero(k < 0)  # ~0.2% of draws
        k[straddle] = np.sum(self.cdf[self.m[straddle]] <= u[straddle, None], axis=1)
        out[self.small] = k
        out[self.large] = rng.poisson(self.large_means)
        return out


@functools.cache
def _poisson_tables(largest: int, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """:class:`SmallPoisson`'s CDFs of Poisson(0 … ``largest``) and its bin table, made once per process (a
    streamed replicate draws every shard's counts anew on each pass)."""
    kmax = 64
    ks = np.arange(kmax)
    log_pmf = ks[None, :] * np.log(np.maximum(np.arange(largest + 1), 1e-300))[:, None]
    log_pmf -= np.arange(largest + 1)[:, None] + np.cumsum(np.log(np.maximum(ks, 1)))[None, :]
    cdf = np.cumsum(np.exp(log_pmf), axis=1)
    cdf[0] = 1.0  # Poisson(0) is 0
    cdf[:, -1] = 1.0  # P(k ≥ 64) < 1e-20 for these means
    edges = np.arange(bins + 1) / bins
    lo = np.array([np.searchsorted(c, edges[:-1], side="right") for c in cdf])
    hi = np.array([np.searchsorted(c, np.nextafter(edges[1:], 0.0), side="right") for c in cdf])
    table = np.where(lo == hi, lo, -1).astype(np.int8).ravel()
    cdf.flags.writeable = table.flags.writeable = False  # shared by every sampler
    return cdf, table


class CountRedraw:
    """Poisson redraws of a set of pair cells' counts; a zero count stays zero, so only nonzero ones are drawn.

    ``order`` lays the drawn counts out in another cell order (``counts[i]`` is cell ``order[i]``) with the
    same draw for each cell: the same replicate in the gradient's sorted layout, at no extra cost.
    """

    def __init__(self, pairs: PairArrays, order: np.ndarray | None = None):
        self.pairs = pairs
        means = (pairs.win_a, pairs.win_b, pairs.bothbad, pairs.tie - pairs.bothbad)
        nonzero = [np.flatnonzero(m != 0) for m in means]  # (on a float array, flatnonzero is ~10× slower)
        self.samplers = [SmallPoisson(m[nz]) for m, nz in zip(means, nonzero, strict=True)]
        if order is None:
            self.targets = nonzero
        else:
            where = np.empty(order.size, np.intp)
            where[order] = np.arange(order.size)
            self.targets = [where[nz] for nz in nonzero]

    def arrays(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(win_a, win_b, tie, bothbad), each count redrawn as Poisson(count); bothbad redrawn with the ties."""
        out = []
        for sampler, at in zip(self.samplers, self.targets, strict=True):
            x = np.zeros(self.pairs.n.size)
            x[at] = sampler.draw(rng)
            out.append(x)
        win_a, win_b, bothbad, plain = out
        return win_a, win_b, plain + bothbad, bothbad

    def draw(self, rng: np.random.Generator) -> PairArrays:
        """The pair cells with redrawn counts (in the cells' own order)."""
        return self.pairs.with_counts(*self.arrays(rng))


class ShardRedraw:
    """Replicate r's counts of a streamed data set's cells, shard by shard as they are read
    (:meth:`~biasboard.ranking.stream.PairStore.redrawn`): shard s's counts from a generator of (seed, r, s) alone,
    so every pass of the replicate's refit reads the same counts, in whichever process.  Replicate r is then the
    same Poisson bootstrap as in memory (every count redrawn as Poisson(count)), drawn from other streams."""

    def __init__(self, seed: int, r: int):
        self.seed, self.r = seed, r

    def __call__(self, pairs: PairArrays, number: int) -> PairArrays:
        rng = np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=(STREAM, self.r, number)))
        return CountRedraw(pairs).draw(rng)


class Redraws:
    """Replicate r's problem: the same cells and grades with every count redrawn as Poisson(count), from streams
    of (seed, r) alone.  In memory the cells' counts are drawn in one go (:class:`CountRedraw`), then the grades'
    from the same generator; a streamed data set's cells are redrawn shard by shard as each is read
    (:class:`ShardRedraw`: no replicate of the history is held), its grades (in memory) from replicate r's
    generator."""

    def __init__(self, problem: Problem, seed: int):
        self.problem, self.seed = problem, seed
        self.stream = problem.data.stream
        self.pairs = CountRedraw(problem.data.pairs) if self.stream is None else None
        self.scores = None if problem.naive else problem.data.scores

    def problem_of(self, r: int) -> Problem:
        rng = replicate_rng(self.seed, r)
        data = self.problem.data
        if self.stream is not None:
            data = replace(data, stream=self.stream.redrawn(ShardRedraw(self.seed, r)))
        else:
            assert self.pairs is not None
            data = replace(data, pairs=self.pairs.draw(rng))
        return replace(self.problem, data=replace(data, scores=poisson_scores(self.scores, rng)))

    def objective(self, r: int, shards: int) -> Objective:
        """The model's objective on replicate r's counts."""
        return self.problem_of(r).objective(shards)


@dataclass
class Counts:
    """One replicate's counts as the pair gradient uses them (fixed during the replicate's refit)."""

    n: np.ndarray
    excess: np.ndarray  # Davidson: win_a − win_b; naive: win_a + tie/2
    tie: np.ndarray

    @staticmethod
    def of(win_a: np.ndarray, win_b: np.ndarray, tie: np.ndarray, naive: bool) -> Counts:
        excess = win_a + 0.5 * tie if naive else win_a - win_b
        return Counts(win_a + win_b + tie, excess, tie)


@dataclass
class Point:
    """The cells' Davidson probabilities at one parameter vector (the MAP's: shared by every replicate),
    with the rating and discrimination tables they came from."""

    diff: np.ndarray  # Davidson: P(a wins) − P(b wins); naive: P(a wins)
    p_tie: np.ndarray  # Davidson: P(tie); naive: unused
    theta: np.ndarray  # θ
    disc: np.ndarray  # a_j per judge (naive: none)


class PairGradient:
    """Gradient of the pair part of the objective, in effective coordinates, for any counts of fixed cells.

    The same sums as :func:`biasboard.ranking.model.partials` with ``hessian=False`` (no objective
    value), arranged for speed.  The cells are kept sorted by (judge, covariate code, model a), where the
    covariate code numbers the (position known, same-family) combinations: within a run of equal keys
    the judge's a_j, the model a's θ and the position and affinity terms of η are constant, so every sum
    over cells is a segment sum (``reduceat``) of ∂f/∂η, (∂f/∂η)·x or ∂f/∂ψ followed by small bincounts
    over the runs — only the second-shown model's side needs a bincount over cells, by (judge, model b).
    The probabilities take one exp per cell (of −|η|/2) and each slice's temporaries fit the cache.
    :class:`Engine` checks it against the model before trusting it.
    """

    def __init__(self, pairs: PairArrays, spec: Spec):
        lay = spec.layout
        self.lay, self.naive, self.w = lay, lay.naive, spec.w_pair
        self.size = len(pairs)
        jn = max(lay.n_judges, 1)
        j = np.zeros(self.size, np.intp) if self.naive else pairs.j.astype(np.intp)
        if self.naive:
            self.pos_vals = self.ds_vals = np.zeros(1)
            code = np.zeros(self.size, np.intp)
        else:
            combos, code = np.unique(np.stack([pairs.pos, pairs.ds], axis=1), axis=0, return_inverse=True)
            self.pos_vals, self.ds_vals = combos[:, 0], combos[:, 1]
        self.codes = len(self.pos_vals)
        k = j * self.codes + code.reshape(-1)
        self.order = np.lexsort((pairs.a, k))
        self.a, self.b = pairs.a[self.order].astype(np.intp), pairs.b[self.order].astype(np.intp)
        self.j, self.k = j[self.order], k[self.order]
        self.xs = pairs.x[self.order] / spec.x_scale
        change = np.ones(self.size, bool)
        change[1:] = (self.k[1:] != self.k[:-1]) | (self.a[1:] != self.a[:-1])
        self.starts = np.flatnonzero(change)  # runs of equal (judge, code, a)
        self.run_a, self.run_k, self.run_j = self.a[self.starts], self.k[self.starts], self.j[self.starts]
        jb, self.jb = np.unique(self.j * lay.n_models + self.b, return_inverse=True)  # the (judge, b) that occur
        self.jb = self.jb.reshape(-1)
        self.jb_j, self.jb_b = jb // lay.n_models, jb % lay.n_models
        self.n_judges = jn
        self.slices = [slice(s, s + SLICE_CELLS) for s in range(0, self.size, SLICE_CELLS)]
        self._buf = np.empty((3, self.size))

    def _tables(self, eff: np.ndarray):
        lay = self.lay
        theta = eff[lay.theta]
        if self.naive:
            return theta, np.ones(1), np.zeros(1), np.zeros(1), np.zeros(1)
        disc = np.exp(eff[lay.eff_block(DISC)])
        shift = eff[lay.eff_block(POS)][:, None] * self.pos_vals + eff[lay.eff_block(AFF)][:, None] * self.ds_vals
        return theta, disc, shift.reshape(-1), eff[lay.eff_block(LEN)], np.exp(eff[lay.eff_block(TIE)])

    def _probabilities(self, tables, sl: slice) -> tuple[np.ndarray, np.ndarray]:
        """(diff, p_tie) of cells ``sl`` at the parameters ``tables`` came from."""
        theta, disc_j, shift, beta, nu = tables
        q = theta[self.a[sl]]
        q -= theta[self.b[sl]]
        if self.naive:  # P(a wins) = σ(θ_a − θ_b), ties as half wins
            p = np.exp(-np.logaddexp(0.0, -q))
            return p, p
        j = self.j[sl]
        q *= disc_j[j]
        eta = beta[j] * self.xs[sl]
        eta += shift[self.k[sl]]
        eta += q
        # P(a) ∝ e^{η/2}, P(b) ∝ e^{−η/2}, P(tie) ∝ ν: divide by e^{|η|/2}, so e = e^{−|η|/2} ≤ 1 never overflows.
        e = np.abs(eta)
        e *= -0.5
        np.exp(e, out=e)
        s = e * e
        tie_w = nu[j]
        tie_w *= e
        total = s + tie_w
        total += 1.0
        diff = np.subtract(1.0, s, out=s)
        np.copysign(diff, eta, out=diff)
        diff /= total
        tie_w /= total
        return diff, tie_w

    def point(self, eff: np.ndarray) -> Point:
        """Every cell's probabilities at ``eff`` (kept for many gradients at the same point)."""
        tables = self._tables(eff)
        parts = [self._probabilities(tables, sl) for sl in self.slices]
        diff, p_tie = (np.concatenate([p[i] for p in parts]) for i in (0, 1))
        return Point(diff, p_tie, tables[0], tables[1])

    def _weights(self, diff: np.ndarray, p_tie: np.ndarray, counts: Counts, sl: slice) -> None:
        """The cells' ∂f/∂η, (∂f/∂η)·x and ∂f/∂ψ into the buffer, without the pair weight's factor."""
        buf = self._buf
        g_eta = np.multiply(counts.n[sl], diff, out=buf[0, sl])
        g_eta -= counts.excess[sl]
        if self.naive:
            return
        np.multiply(g_eta, self.xs[sl], out=buf[1, sl])
        g_psi = np.multiply(counts.n[sl], p_tie, out=buf[2, sl])
        g_psi -= counts.tie[sl]

    def _sums(self, theta: np.ndarray, disc: np.ndarray) -> np.ndarray:
        """The gradient from the buffer: segment sums over runs, then bincounts over runs and (judge, b)."""
        lay, buf = self.lay, self._buf
        m, jn = lay.n_models, self.n_judges
        g = np.zeros(lay.n_eff)
        rows = 1 if self.naive else 3
        run = np.add.reduceat(buf[:rows], self.starts, axis=1)
        by_jb = np.bincount(self.jb, buf[0], self.jb_j.size)  # Σ ∂f/∂η per (judge, b)
        on_a = run[0] * disc[self.run_j]
        on_b = by_jb * disc[self.jb_j]
        scale = self.w if self.naive else 0.5 * self.w  # Davidson: ∂f/∂η = w (n (P(a) − P(b)) − (a − b wins)) / 2
        g[lay.theta] = scale * (np.bincount(self.run_a, on_a, m) - np.bincount(self.jb_b, on_b, m))
        if self.naive:
            return g
        by_code = np.bincount(self.run_k, run[0], jn * self.codes).reshape(jn, self.codes)
        g[lay.eff_block(POS)] = scale * (by_code @ self.pos_vals)
        g[lay.eff_block(AFF)] = scale * (by_code @ self.ds_vals)
        # ∂η/∂L_j = a_j (θ_a − θ_b): the a side per run, the b side per (judge, b).
        q_a = np.bincount(self.run_j, on_a * theta[self.run_a], jn)
        g[lay.eff_block(DISC)] = scale * (q_a - np.bincount(self.jb_j, on_b * theta[self.jb_b], jn))
        g[lay.eff_block(LEN)] = scale * np.bincount(self.run_j, run[1], jn)
        g[lay.eff_block(TIE)] = self.w * np.bincount(self.run_j, run[2], jn)
        return g

    def at_point(self, pt: Point, counts: Counts) -> np.ndarray:
        """The gradient at a stored point for these counts: no exp, no log."""
        for sl in self.slices:
            self._weights(pt.diff[sl], pt.p_tie[sl], counts, sl)
        return self._sums(pt.theta, pt.disc)

    def gradient(self, eff: np.ndarray, counts: Counts) -> np.ndarray:
        """The gradient at ``eff`` for these counts."""
        tables = self._tables(eff)
        for sl in self.slices:
            self._weights(*self._probabilities(tables, sl), counts, sl)
        return self._sums(tables[0], tables[1])


#: A gradient function: (core, diag) → (gradient over core, gradient over the prompts).
Gradient = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


@dataclass
class Replicate:
    """One replicate's refit: its raw core parameters and how it got there."""

    core: np.ndarray
    steps: int  # chord steps (each one gradient evaluation), plus the damped Newton's iterations after a hand-over
    newton: bool  # handed over to damped Newton (a step did not contract, or no factorisation)
    converged: bool = True  # False: the damped Newton it handed over to ran out of iterations short of the tolerance
    seconds: float = 0.0  # wall time of the refit (redraw included), for the log line of :func:`run`


def _norm(g: np.ndarray, g_diag: np.ndarray, free: np.ndarray) -> float:
    return float(np.sqrt(np.sum(g[free] ** 2) + np.sum(g_diag**2)))


class Engine:
    """Everything the replicates share: the problem, the MAP, its factorised Hessian, the MAP's per-cell
    probabilities.  Built once in the parent; forked workers read it copy-on-write."""

    def __init__(self, problem: Problem, solution: Solution, shards: int, tol: float, max_iter: int, seed: int):
        self.problem, self.solution = problem, solution
        self.shards, self.tol, self.max_iter, self.seed = shards, tol, max_iter, seed
        self.objective: Objective = problem.objective(shards)
        self.redraws = Redraws(problem, seed)
        scores: ScoreArrays | None = None if problem.naive else problem.data.scores
        self.newton: NewtonFactor | ArrowFactor | None = newton_factor(solution.evaluation, solution.free)
        #: The free entries that are a judge's own (judge-blocked problems: voter-judges), whose steps are clipped.
        self.judges = judge_entries(self.objective, solution.free) if self.objective.blocked else None
        self.kernel: PairGradient | None = None
        self.map_point: Point | None = None
        # The lean gradient holds the cells sorted its way: in memory only (a streamed replicate's refit reads its
        # redrawn shards through the model's objective).
        if (scores is None or not len(scores)) and problem.data.stream is None:
            kernel = PairGradient(problem.data.pairs, problem.spec)
            self.sorted_redraw = CountRedraw(problem.data.pairs, kernel.order)
            if self._agrees(kernel):
                self.kernel = kernel
                self.map_point = kernel.point(self.objective.effective(solution.core))

    def _counts(self, rng: np.random.Generator, naive: bool) -> Counts:
        return Counts.of(*self.sorted_redraw.arrays(rng)[:3], naive)

    def _agrees(self, kernel: PairGradient) -> bool:
        """The lean gradient equals the model's, for the first replicate's counts, a step away from the MAP."""
        counts = self._counts(replicate_rng(self.seed, 0), kernel.naive)
        objective = self.redraws.objective(0, self.shards)
        sol = self.solution
        core = sol.core + 1e-2 * np.sin(np.arange(sol.core.size))
        ev = objective.evaluate(core, sol.diag, hessian=False)
        g_eff = kernel.gradient(self.objective.effective(core), counts)
        g, _ = self.objective.raw_gradient(core, sol.diag, g_eff, np.zeros(sol.diag.size))
        return bool(np.allclose(g, ev.g, rtol=1e-9, atol=1e-9 * max(1.0, float(np.abs(ev.g).max()))))

    def replicate(self, r: int) -> Replicate:
        """Replicate r: its counts from :func:`replicate_rng` (seed, r), refit from the MAP."""
        start = time.perf_counter()
        rep = self._refit(r)
        rep.seconds = time.perf_counter() - start
        return rep

    def _refit(self, r: int) -> Replicate:
        sol, free = self.solution, self.solution.free
        grad: Gradient
        if self.kernel is not None and self.map_point is not None:
            kernel, obj = self.kernel, self.objective
            counts = self._counts(replicate_rng(self.seed, r), kernel.naive)
            zero = np.zeros(sol.diag.size)

            def grad(core: np.ndarray, diag: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
                return obj.raw_gradient(core, diag, kernel.gradient(obj.effective(core), counts), zero)

            g, g_diag = obj.raw_gradient(sol.core, sol.diag, kernel.at_point(self.map_point, counts), zero)
        else:
            model = self.redraws.objective(r, self.shards)

            def grad(core: np.ndarray, diag: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
                ev = model.evaluate(core, diag, hessian=False)
                return ev.g, ev.g_diag

            g, g_diag = grad(sol.core, sol.diag)
        core, diag, steps, done = sol.core.copy(), sol.diag.copy(), 0, False
        if self.newton is not None:
            core, diag, steps, done = chord(
                grad, core, diag, g, g_diag, self.newton, free, self.tol * sol.scale, judges=self.judges
            )
        if done:
            return Replicate(core, steps, False)
        # A step that did not contract (or no positive-definite Hessian at the MAP): the fit's damped Newton.
        model = self.redraws.objective(r, self.shards)
        budget = max(self.max_iter - steps, 1)
        step = None if self.judges is None else JUDGE_STEP
        full = minimize(
            model,
            core,
            diag,
            free=free,
            tol=self.tol,
            max_iter=budget,
            g0_norm=sol.scale,
            judge_step=step,
            polish_unevaluated=True,
        )
        return Replicate(full.core, steps + full.iterations, True, full.converged)


def chord(
    grad: Gradient,
    core: np.ndarray,
    diag: np.ndarray,
    g: np.ndarray,
    g_diag: np.ndarray,
    newton: NewtonFactor | ArrowFactor,
    free: np.ndarray,
    target: float,
    max_steps: int = 50,
    judges: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, int, bool]:
    """Chord-Newton steps with one factorisation from (core, diag) whose gradient is (g, g_diag).

    Returns (core, diag, steps, converged).  Converged: an evaluated gradient norm ≤ ``target``; the step
    that gradient gives is then taken too (unevaluated: a polishing step).  Not converged: where the chord stopped,
    after a step that did not shrink the gradient ``CHORD_RATE``-fold — that step's point if it lowered the gradient
    at all (the fallback's damped Newton then starts there: on 50k voter-judges, where the MAP's chord stalls at
    ~0.55 a step, the fallback took 9 instead of 11 gradient evaluations), else the point before it.

    ``judges`` (the free entries that are a judge's own, on a judge-blocked problem): each step's entries there are
    clipped to ±:data:`JUDGE_STEP`.  A few-battle voter whose redrawn counts moved its optimum far (a tie propensity
    of ~6 at the MAP, no tie in the replicate) has nearly no curvature at the MAP: its chord step is tens of
    log-odds, and the gradient it leaves stops the contraction of every other parameter's.
    """
    gn = _norm(g, g_diag, free)
    for steps in range(max_steps + 1):
        s, t = newton.solve(g[free], g_diag)
        if judges is not None:
            clip_judge_steps(s, judges, JUDGE_STEP)
        if gn <= target:
            core[free] += s
            return core, diag + t, steps, True
        if steps == max_steps:
            break
        trial = core.copy()
        trial[free] += s
        trial_diag = diag + t
        g_new, g_diag_new = grad(trial, trial_diag)
        gn_new = _norm(g_new, g_diag_new, free)
        if not np.isfinite(gn_new) or gn_new > CHORD_RATE * gn:
            lower = bool(np.isfinite(gn_new) and gn_new < gn)  # no f here: the fallback evaluates it where it starts
            return (trial, trial_diag, steps + 1, False) if lower else (core, diag, steps + 1, False)
        core, diag, g, g_diag, gn = trial, trial_diag, g_new, g_diag_new, gn_new
    return core, diag, max_steps, False


def run(engine: Engine, replicates: int, workers: int = 1) -> list[Replicate]:
    """Replicates 0 … ``replicates``−1, in ``workers`` forked processes, in replicate order.

    A streamed data set's replicates run in forked children that keep the memory they free
    (:func:`~biasboard.ranking.allocator.keep_freed_memory`), this process only gathering (the ``child_setup`` of
    :func:`~biasboard.ranking.forked.fork_map`: this process's allocator is the rest of the refresh's, which
    hands freed memory back).  Why: every pass reads and redraws every shard into arrays of the same sizes, which
    glibc otherwise hands back to the kernel and faults in again for the next shard.  Measured, 2 workers, 530k
    cells in 4 shards, 30 replicates: 8.4–9.5 s with this process as one of the workers, 4.0–4.2 s in two children
    keeping freed memory.  In memory it made no difference beyond the noise (100 replicates of the same cells
    3.25–3.75 s against 3.45–4.14 s; 10 of 647k voter cells 6.95–8.56 s against 6.39–8.26 s), and this process,
    whose heap is warm, stays one of the workers there."""
    ids = np.arange(replicates)
    chunks = [c.tolist() for c in np.array_split(ids, min(replicates, 4 * workers)) if len(c)]
    setup = keep_freed_memory if engine.problem.data.stream is not None else None
    start = time.perf_counter()
    parts = forked.fork_map(lambda chunk: [engine.replicate(r) for r in chunk], chunks, workers, child_setup=setup)
    reps = [rep for part in parts for rep in part]
    _LOG.info("%s", summary_line(reps, workers, time.perf_counter() - start))
    return reps


def summary_line(reps: list[Replicate], workers: int, seconds: float) -> str:
    """What the replicates cost, for the refresh's log: where a slow bootstrap's time went (chord steps, or the
    damped Newton a replicate handed over to, whose Newton steps each cost a Hessian pass and a factorisation).
    A handed-over replicate's steps count both: its chord steps and the damped Newton's iterations."""
    if not reps:
        return "bootstrap: no replicates"
    times = np.array([rep.seconds for rep in reps])
    fallbacks = [rep for rep in reps if rep.newton]
    steps, seconds_handed = sum(r.steps for r in fallbacks), sum(r.seconds for r in fallbacks)
    handed = f" ({steps} steps, {seconds_handed:.1f} s)" if fallbacks else ""
    return (
        f"bootstrap: {len(reps)} replicates in {workers} process(es), {seconds:.1f} s wall; a replicate "
        f"{np.median(times):.2f} s median, {times.max():.2f} s slowest; steps {min(r.steps for r in reps)}-"
        f"{max(r.steps for r in reps)}; {len(fallbacks)} handed to damped Newton{handed}"
    )
