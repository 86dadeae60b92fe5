"""Newton systems with every judge's block eliminated by a Schur complement (a block-arrowhead Hessian).

Arena logs name each voter as a judge (10⁴–10⁶ judges).  In raw coordinates the bias-aware
objective's Hessian is block-arrowhead: the globals G = (θ, γ₀, β₀, λ₀, τ) and one block per judge,
r_j = (u_j, b_j, l_j, ρ_j, ψ_j, α_j); a cell of judge j touches r_j, its two models' θ and the global
effects, never another judge.  So the Newton system ::

    [ A   X ] [s_J]   [−g_J]      A = diag(A_1 … A_J), 6 × 6 each;  X_j = judge j's coupling to G
    [ Xᵀ  H ] [s_G] = [−g_G]

is solved through the Schur complement S = H − Σ_j X_jᵀ A_j⁻¹ X_j (n_G × n_G):
s_G = S⁻¹(−g_G + Σ_j X_jᵀ A_j⁻¹ g_j) and s_j = −A_j⁻¹(g_j + X_j s_G), batched over judges in numpy.
Memory is O(J·36 + entries + n_G²) — X_j is stored only at the (model, judge) pairs the cells hold —
never the (6J)² matrix of the dense path (:mod:`biasboard.ranking.solver`).

Two couplings reach every judge at once and are kept out of the blocks as rank-one terms, solved by
Woodbury with two extra block solves: the centring of log a_j (mean over enabled judges fixed at 0, a
linear constraint — Woodbury with κ = ∞ — exactly what the dense path's centred parametrisation does at
every point with Σρ_j = 0, which its iterates keep) and, in a likelihood profile, the stiff
sum-to-zero gauge of the profiled effect's deviations.

The Laplace covariance follows from the same blocks: Σ_GG = S⁻¹ (the θ/global covariance the
leaderboard needs), and per judge the diagonal of (H⁻¹)_jj = A_j⁻¹ + A_j⁻¹X_j S⁻¹ X_jᵀA_j⁻¹ and the
covariance of r_j with the three global effects (what a judge's total effect γ₀ + u_j needs).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla
from biasboard.ranking.data import PairArrays
from biasboard.ranking.model import DISC, JUDGE_BLOCKS, BlockPartials, Layout, Spec

K = len(JUDGE_BLOCKS)
#: The global effects γ₀, β₀, λ₀ are blocks 0, 1, 2 (position, length, affinity).
N_EFFECTS = 3
#: Judges per slice of the Schur loops: bounds the dense (6·slice × (M + 3)) temporaries (~25 MB at M = 100).
JUDGE_SLICE = 4096


@dataclass(frozen=True)
class CrossIndex:
    """The distinct (judge, model) pairs of the cells — sorted by judge — and each cell's two entries.

    ``at_a[s][c]`` / ``at_b[s][c]`` are the entries of (judge, model a) and (judge, model b) of cell c of
    shard s.  ``starts[j]:starts[j + 1]`` are judge j's entries.
    """

    model: np.ndarray
    judge: np.ndarray
    starts: np.ndarray
    at_a: tuple[np.ndarray, ...]
    at_b: tuple[np.ndarray, ...]

    @staticmethod
    def of(parts: Sequence[PairArrays], n_models: int, n_judges: int) -> CrossIndex:
        keys_a = [p.j.astype(np.int64) * n_models + p.a for p in parts]
        keys_b = [p.j.astype(np.int64) * n_models + p.b for p in parts]
        uniq = np.unique(np.concatenate([*keys_a, *keys_b])) if parts else np.zeros(0, np.int64)
        judge = uniq // n_models
        starts = np.searchsorted(judge, np.arange(n_judges + 1))
        return CrossIndex(
            uniq % n_models,
            judge,
            starts,
            tuple(np.searchsorted(uniq, k) for k in keys_a),
            tuple(np.searchsorted(uniq, k) for k in keys_b),
        )

    @property
    def size(self) -> int:
        return int(self.model.size)


def glob_index(lay: Layout) -> np.ndarray:
    """Core indices of the globals, in the order of the G block: θ, γ₀, β₀, λ₀, τ."""
    return np.concatenate([np.arange(lay.n_models + lay.n_glob), np.arange(lay.tau.start, lay.tau.stop)])


def judge_index(lay: Layout) -> np.ndarray:
    """Core index of judge j's raw block entry t, shape (J, 6)."""
    return lay.block(0).start + np.arange(K)[None, :] * lay.n_judges + np.arange(lay.n_judges)[:, None]


def split(lay: Layout, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A core vector as (globals (n_G,), judge blocks (J, 6))."""
    return v[glob_index(lay)], v[lay.block(0).start : lay.tau.start].reshape(K, lay.n_judges).T


def join(lay: Layout, v_g: np.ndarray, v_j: np.ndarray) -> np.ndarray:
    out = np.empty(lay.n_core)
    out[glob_index(lay)] = v_g
    out[lay.block(0).start : lay.tau.start] = v_j.T.ravel()
    return out


def deviation_masks(spec: Spec) -> np.ndarray:
    """(J, 6): 1 where judge j's own raw entry t enters η (a deviation tied to the reference does not)."""
    return np.stack([spec.deviation_mask(t) if t < N_EFFECTS else spec.masks[t] for t in range(K)], axis=1)


def centring(spec: Spec) -> np.ndarray | None:
    """Judges whose log a_j are centred (the dense path's L_j = ρ_j − mean ρ), or None."""
    if not spec.centre_discrimination:
        return None
    on = np.flatnonzero(spec.masks[DISC] > 0)
    return on if on.size >= 2 else None


@dataclass
class ArrowHessian:
    """Raw-coordinate Hessian of the objective, block-arrowhead (see the module docstring).

    ``low_rank`` holds (u, 1/κ): the full Hessian is this one plus κ·u uᵀ, and 1/κ = 0 marks the linear
    constraint uᵀs = 0 (the centring of log a_j) rather than a penalty.
    """

    lay: Layout
    H: np.ndarray  # (n_G, n_G)
    A: np.ndarray  # (J, 6, 6)
    Xc: np.ndarray  # (entries, 6): judge rows × θ of the entry's model
    Xg: np.ndarray  # (J, 6, 3): judge rows × γ₀, β₀, λ₀
    cross: CrossIndex
    low_rank: tuple[tuple[np.ndarray, float], ...]
    on: np.ndarray  # (J, 6) bool: the judge's entry is switched on (else it has no coupling at all)

    def x_glob(self, v_g: np.ndarray, Xc: np.ndarray | None = None, Xg: np.ndarray | None = None) -> np.ndarray:
        """X v for a globals vector: (J, 6)."""
        Xc = self.Xc if Xc is None else Xc
        Xg = self.Xg if Xg is None else Xg
        lay, cr = self.lay, self.cross
        w = Xc * v_g[cr.model][:, None]
        out = np.stack([np.bincount(cr.judge, weights=w[:, t], minlength=lay.n_judges) for t in range(K)], axis=1)
        m = lay.n_models
        return out + Xg @ v_g[m : m + N_EFFECTS]

    def xt_judge(self, v_j: np.ndarray, Xc: np.ndarray | None = None, Xg: np.ndarray | None = None) -> np.ndarray:
        """Xᵀ v for a judge-block vector (J, 6): (n_G,)."""
        Xc = self.Xc if Xc is None else Xc
        Xg = self.Xg if Xg is None else Xg
        lay, cr = self.lay, self.cross
        out = np.zeros(self.H.shape[0])
        m = lay.n_models
        out[:m] = np.bincount(cr.model, weights=np.einsum("et,et->e", Xc, v_j[cr.judge]), minlength=m)
        out[m : m + N_EFFECTS] = np.einsum("jtc,jt->c", Xg, v_j)
        return out

    def matvec(self, v: np.ndarray) -> np.ndarray:
        """H v for a core vector (penalty terms included, constraints not)."""
        v_g, v_j = split(self.lay, v)
        out = join(self.lay, self.H @ v_g + self.xt_judge(v_j), np.einsum("jtu,ju->jt", self.A, v_j) + self.x_glob(v_g))
        for u, kinv in self.low_rank:
            if kinv > 0:
                out += u * (u @ v) / kinv
        return out

    def quad(self, s: np.ndarray) -> float:
        """sᵀ H s for a core vector (penalty terms included, constraints not)."""
        s_g, s_j = split(self.lay, s)
        val = float(s_g @ self.H @ s_g) + float(np.einsum("jt,jtu,ju->", s_j, self.A, s_j))
        val += 2.0 * float(s_g @ self.xt_judge(s_j))
        for u, kinv in self.low_rank:
            if kinv > 0:
                val += float(u @ s) ** 2 / kinv
        return val

    def diag_mean(self) -> float:
        d = np.concatenate([np.diag(self.H), np.einsum("jtt->jt", self.A).ravel()])
        return float(np.mean(np.abs(d)))


def assemble(part: BlockPartials, spec: Spec, precision: np.ndarray, gauges, cross: CrossIndex) -> ArrowHessian:
    """The raw Hessian from judge-blocked partials (effective coordinates), the prior and its gauges."""
    lay = spec.layout
    m = lay.n_models
    mask = spec.masks.T  # (J, 6): where effect t acts (through the global coefficient too)
    dev = deviation_masks(spec)  # (J, 6): where the judge's own raw entry acts
    A = part.A * dev[:, :, None] * dev[:, None, :]
    prec_g, prec_j = split(lay, precision)
    A[:, np.arange(K), np.arange(K)] += prec_j
    Xc = part.C * dev[cross.judge]
    Xg = part.A[:, :, :N_EFFECTS] * dev[:, :, None] * mask[:, None, :N_EFFECTS]
    n_g = prec_g.size
    H = np.zeros((n_g, n_g))
    H[:m, :m] = part.H_theta
    eff_c = part.C[:, :N_EFFECTS] * mask[cross.judge, :N_EFFECTS]
    for c in range(N_EFFECTS):
        col = np.bincount(cross.model, weights=eff_c[:, c], minlength=m)
        H[:m, m + c] = col
        H[m + c, :m] = col
    H[m : m + N_EFFECTS, m : m + N_EFFECTS] = np.einsum(
        "jc,jcd,jd->cd", mask[:, :N_EFFECTS], part.A[:, :N_EFFECTS, :N_EFFECTS], mask[:, :N_EFFECTS]
    )
    H[np.diag_indices(n_g)] += prec_g
    position = np.full(lay.n_core, -1)
    position[glob_index(lay)] = np.arange(n_g)
    low_rank = []
    for idx, kappa in gauges:
        pos = position[idx]
        if np.all(pos >= 0):
            H[np.ix_(pos, pos)] += kappa
        else:
            u = np.zeros(lay.n_core)
            u[idx] = 1.0
            low_rank.append((u, 1.0 / kappa))
    on = centring(spec)
    if on is not None:
        u = np.zeros(lay.n_core)
        u[lay.block(DISC).start + on] = 1.0
        low_rank.append((u, 0.0))
    return ArrowHessian(lay, H, A, Xc, Xg, cross, tuple(low_rank), dev > 0)


class ArrowFactor:
    """The factorised (damped) Newton system of an :class:`ArrowHessian` over the ``free`` parameters.

    Fixed parameters get identity rows and no coupling, so their step is 0.  ``solve`` has the
    interface of :class:`~biasboard.ranking.solver.NewtonFactor` (no prompt block here).
    """

    def __init__(self, hess: ArrowHessian, free: np.ndarray, mu: float):
        lay = self.lay = hess.lay
        self.hess, self.free = hess, free
        f_g, f_j = split(lay, free.astype(float))
        cr = hess.cross
        A = hess.A * f_j[:, :, None] * f_j[:, None, :]
        A[:, np.arange(K), np.arange(K)] += np.where(f_j > 0, mu, 1.0)
        self.Linv = np.linalg.inv(np.linalg.cholesky(A))  # raises LinAlgError when a block is not PD
        m = lay.n_models
        if np.all(f_j == f_j[:1]):  # the same entries free for every judge (the usual case): a column mask
            self.Xc = hess.Xc * f_j[:1]
        else:
            self.Xc = hess.Xc * f_j[cr.judge]
        if not f_g[:m].all():
            self.Xc = self.Xc * f_g[cr.model][:, None]
        self.Xg = hess.Xg * f_j[:, :, None] * f_g[None, None, m : m + N_EFFECTS]
        S = hess.H * f_g[:, None] * f_g[None, :]
        S[np.diag_indices_from(S)] += np.where(f_g > 0, mu, 1.0)
        # A switched-off or fixed entry has no coupling, in A_j (so in L_j⁻¹) nor in X_j: its rows of
        # L_j⁻¹X_j are zero and are left out of the product (a third of the rows for voter-judges).
        active = hess.on & (f_j > 0)
        for j0, j1, D3 in self._slices():
            D = D3.reshape(-1, D3.shape[2])[active[j0:j1].ravel()]
            S[: m + N_EFFECTS, : m + N_EFFECTS] -= D.T @ D
        self.S = S
        self.factor = sla.cho_factor(S, lower=True, check_finite=False)
        if not np.all(np.isfinite(self.factor[0])):
            raise np.linalg.LinAlgError("Schur complement is not finite")
        us = [(u * free, kinv) for u, kinv in hess.low_rank if np.any(u * free)]
        self.U = np.array([u for u, _ in us]).reshape(len(us), lay.n_core)
        self.Z = np.array([self._base_solve(u) for u, _ in us]).reshape(len(us), lay.n_core)
        self.M = np.diag([kinv for _, kinv in us]) + self.U @ self.Z.T
        if us:
            self.Minv = np.linalg.inv(self.M)

    @staticmethod
    def build(hess: ArrowHessian, free: np.ndarray, mu: float = 0.0) -> ArrowFactor | None:
        try:
            return ArrowFactor(hess, free, mu)
        except (np.linalg.LinAlgError, sla.LinAlgError, ValueError):
            return None

    def _slices(self) -> Iterator[tuple[int, int, np.ndarray]]:
        """(j0, j1, D) with D[j] = L_j⁻¹ X_j for judges j0..j1, shape (j1 − j0, 6, M + 3), dense.

        L_j⁻¹ is applied at the stored entries (one gather of a column of L⁻¹ per nonzero (r, k), never
        an (entries × 6 × 6) array), then scattered into the dense slice.
        """
        lay, cr = self.lay, self.hess.cross
        m = lay.n_models
        if not hasattr(self, "_V"):
            V = np.zeros_like(self.Xc)
            linv = np.ascontiguousarray(self.Linv.transpose(1, 2, 0))  # (6, 6, J): contiguous gathers
            xc = np.ascontiguousarray(self.Xc.T)
            on = np.asarray(self.hess.on.any(axis=0))
            for r in np.flatnonzero(on).tolist():
                for k in np.flatnonzero(on[: r + 1]).tolist():
                    V[:, r] += linv[r, k][cr.judge] * xc[k]
            self._V = V
            self._W = np.einsum("jik,jkc->jic", self.Linv, self.Xg)
        width = m + N_EFFECTS
        buffer = np.zeros(min(JUDGE_SLICE, lay.n_judges) * K * width)
        for j0 in range(0, lay.n_judges, JUDGE_SLICE):
            j1 = min(j0 + JUDGE_SLICE, lay.n_judges)
            e0, e1 = cr.starts[j0], cr.starts[j1]
            D = buffer[: (j1 - j0) * K * width].reshape(j1 - j0, K, width)
            flat = (cr.judge[e0:e1] - j0) * (K * width) + cr.model[e0:e1]
            for t in range(K):  # flat scatters: much faster than D[judge, :, model] = V
                buffer[flat + t * width] = self._V[e0:e1, t]
            D[:, :, m:] = self._W[j0:j1]
            yield j0, j1, D
            for t in range(K):
                buffer[flat + t * width] = 0.0

    def _ainv(self, v_j: np.ndarray) -> np.ndarray:
        return np.einsum("jki,jk->ji", self.Linv, np.einsum("jik,jk->ji", self.Linv, v_j))

    def _base_solve(self, rhs: np.ndarray) -> np.ndarray:
        """x with (H_free + μ) x = rhs, low-rank terms left out."""
        lay, hess = self.lay, self.hess
        r_g, r_j = split(lay, rhs * self.free)
        t = self._ainv(r_j)
        x_g = sla.cho_solve(self.factor, r_g - hess.xt_judge(t, self.Xc, self.Xg), check_finite=False)
        x_j = self._ainv(r_j - hess.x_glob(x_g, self.Xc, self.Xg))
        return join(lay, x_g, x_j) * self.free

    def full_solve(self, rhs: np.ndarray) -> np.ndarray:
        """x with (H_free + μ + Σκuuᵀ) x = rhs (and uᵀx = 0 for each constraint), by Woodbury."""
        x = self._base_solve(rhs)
        if len(self.U):
            x = x - self.Z.T @ (self.Minv @ (self.U @ x))
        return x

    def solve(self, g: np.ndarray, g_diag: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        full = np.zeros(self.lay.n_core)
        full[self.free] = g
        return self.full_solve(-full)[self.free], np.zeros(0)

    def covariance(self) -> BlockCovariance:
        """The Laplace covariance blocks at this factorisation (μ = 0): see the module docstring."""
        lay = self.lay
        m = lay.n_models
        n_g = self.S.shape[0]
        sinv = sla.cho_solve(self.factor, np.eye(n_g), check_finite=False)
        f_g, f_j = split(lay, self.free.astype(float))
        var_j = np.einsum("jki,jki->ji", self.Linv, self.Linv)
        cov_jg = np.zeros((lay.n_judges, K, N_EFFECTS))
        top = sinv[: m + N_EFFECTS, : m + N_EFFECTS]
        for j0, j1, D in self._slices():
            P = np.matmul(self.Linv[j0:j1].transpose(0, 2, 1), D).reshape(-1, D.shape[2])
            R = P @ top
            var_j[j0:j1] += np.einsum("rm,rm->r", R, P).reshape(-1, K)
            cov_jg[j0:j1] = -R[:, m:].reshape(-1, K, N_EFFECTS)
        if len(self.U):
            z_g = self.Z[:, glob_index(lay)]
            z_j = self.Z[:, lay.block(0).start : lay.tau.start].reshape(len(self.U), K, lay.n_judges)
            sinv = sinv - z_g.T @ self.Minv @ z_g
            var_j = var_j - np.einsum("ptj,pq,qtj->jt", z_j, self.Minv, z_j)
            cov_jg = cov_jg - np.einsum("ptj,pq,qc->jtc", z_j, self.Minv, z_g[:, m : m + N_EFFECTS])
        sinv = sinv * f_g[:, None] * f_g[None, :]
        var_j = var_j * f_j
        cov_jg = cov_jg * f_j[:, :, None] * f_g[None, None, m : m + N_EFFECTS]
        return BlockCovariance(glob_index(lay), 0.5 * (sinv + sinv.T), var_j, cov_jg)


@dataclass(frozen=True)
class BlockCovariance:
    """Laplace covariance of a judge-blocked fit: what is published, without the (6J)² matrix.

    ``glob`` is the dense covariance of the globals (core indices ``glob_index``: θ, γ₀, β₀, λ₀, τ);
    ``judge_var[j, t]`` the variance of judge j's raw entry t (log a_j: of ρ_j − mean ρ, the centred
    value); ``judge_glob[j, t, c]`` its covariance with global effect c.
    """

    glob_index: np.ndarray
    glob: np.ndarray
    judge_var: np.ndarray
    judge_glob: np.ndarray

    def block(self, index: slice | int) -> np.ndarray:
        """The covariance of core parameters ``index`` (a slice or one index, among the globals)."""
        pos = np.full(int(self.glob_index.max()) + 1, -1)
        pos[self.glob_index] = np.arange(self.glob_index.size)
        sel = np.atleast_1d(pos[index])
        if np.any(sel < 0):
            raise IndexError("a judge-blocked covariance holds only the globals' block and per-judge variances")
        out = self.glob[np.ix_(sel, sel)]
        return out if isinstance(index, slice) else out[0, 0]
