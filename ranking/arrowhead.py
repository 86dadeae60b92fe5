"""Newton systems with every judge's block eliminated by a Schur complement (a block-arrowhead Hessian).

Arena logs name each voter as a judge (10⁴–10⁶ judges).  In raw coordinates the bias-aware
objective's Hessian is block-arrowhead: the globals G = (θ, the global effect coefficients, the graders'
severities, τ) and one block per judge, r_j = (one raw entry per effect block of the layout: the six of
:data:`~biasboard.ranking.model.JUDGE_BLOCKS`, then the style blocks when there are style data); a
cell of judge j touches r_j, its two models' θ and the global effects, never another judge.  So the
Newton system ::

    [ A   X ] [s_J]   [−g_J]      A = diag(A_1 … A_J), K × K each;  X_j = judge j's coupling to G
    [ Xᵀ  H ] [s_G] = [−g_G]

is solved through the Schur complement S = H − Σ_j X_jᵀ A_j⁻¹ X_j (n_G × n_G):
s_G = S⁻¹(−g_G + Σ_j X_jᵀ A_j⁻¹ g_j) and s_j = −A_j⁻¹(g_j + X_j s_G), batched over judges in numpy.
Memory is O(J·K² + entries + n_G²) — X_j is stored only at the (model, judge) pairs the cells hold —
never the (KJ)² matrix of the dense path (:mod:`biasboard.ranking.solver`).  The per-entry rows X come as
:class:`Couplings`, pieces over disjoint judge ranges: every use of them (X v, Xᵀv, Σ_j X_jᵀA_j⁻¹X_j, the
covariance's per-judge terms) is a sum over the pieces, so a streamed fit keeps them on disk and holds one
piece at a time (O(J·K² + n_G²), :class:`~biasboard.ranking.stream.SpilledCouplings`); held in memory they
are one piece, and the arithmetic is the same as without pieces.

Generic in K = ``layout.n_blocks``; the global effects are ``layout.global_effects`` (blocks, in the order
of the global coefficients — not the first blocks: the style blocks come after discrimination, tie and
severity).  An effect switched off (or held fixed) for a judge has no coupling at all, so its entry
is a 1 × 1 diagonal block.  The factorisation works on the R effects that are switched on for *some*
judge (A_j restricted to R, R × R: five of six with LLM judges beside arena voters, who have no severity;
a held entry is an identity row in it), and in the Schur product only on the (judge, effect) rows that
are coupled for *that* judge; an effect switched off everywhere costs a division.

Grades (single scores, the many-facet part) touch θ, their grader's severity α_j, τ and their prompt's
difficulty δ_p — never a judge's pairwise effects.  So a judge-blocked fit with grades keeps the graders'
severities among the globals (``Layout.graders``; few: the LLM judges that grade) and no severity in any judge
block, and δ, whose Hessian block is diagonal and couples to the globals only (B, n_G × P), is eliminated into
the globals' Schur complement as the dense path eliminates it: S = H − Σ_j X_jᵀA_j⁻¹X_j − B D⁻¹Bᵀ.

Three couplings reach every judge at once and are kept out of the blocks as rank-one terms, solved by
Woodbury with extra block solves: the centring of log a_j, the free log a_j's common mean beside a judge whose
a_j is fixed (a prior gauge of negative κ: :func:`~biasboard.ranking.problem.free_discrimination_mean`) and, in a
likelihood profile, the stiff sum-to-zero gauge of the profiled effect's deviations.
The centring (:class:`ScaleGauge`): the dense path
has L_j = ρ_j − Σ_k w_k ρ_k (w: each judge's share of the pair verdicts between two different models) with
the raw ρ's prior p|ρ|²/2, so its iterates keep Σρ_j = 0 and its raw Hessian is Eᵀ(H − P)E + P.  The blocked
factorisation solves for the effective step t = E s instead, where the blocks are the partials' own: on
Σs = 0, s = F t (F subtracts the mean over the centred judges), so t solves (H − (p/n)11ᵀ) t = F r with
wᵀt = 0 — a linear constraint (Woodbury with κ = ∞) and a rank-one term of negative κ — and
s = F t + (mean r / p) 1, the dense step exactly.  With equal weights wᵀt = 0 is 1ᵀt = 0 and t = s.  The
covariance the factorisation gives is then that of the effective L_j, what the bias table publishes.

The Laplace covariance follows from the same blocks: Σ_GG = S⁻¹ (the θ/global covariance the
leaderboard needs), and per judge the diagonal of (H⁻¹)_jj = A_j⁻¹ + A_j⁻¹X_j S⁻¹ X_jᵀA_j⁻¹ and the
covariance of r_j with the global effects (what a judge's total effect γ₀ + u_j needs).
"""

from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
from biasboard.ranking.data import PairArrays
from biasboard.ranking.model import DISC, SEV, BlockPartials, Layout, Spec

#: Per-judge n_j × n_j blocks (the Schur product's X_jᵀA_j⁻¹X_j, the covariance's S⁻¹ over the models judge j
#: met) are made for judges meeting the same number of models at once, at most this many block entries at
#: a time (bounds their temporaries: ~8 MB each).
BATCH_CELLS = 1 << 20
#: Rows per dense slice of :meth:`RowCovariance.diagonal`: bounds its (rows × n_G) temporaries (~13 MB at
#: M = 100).
DENSE_ROWS = 16384


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
    #: Keep the per-judge batches' keys (:func:`_judge_batches`) for the next factorisation; False (a streamed
    #: fit, :mod:`biasboard.ranking.stream`) makes them a batch at a time, each time: Σ_j n_j² integers
    #: outgrow the cells as voter-judges meet more models.
    cache_batches: bool = True
    _layouts: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray, np.ndarray]] = field(
        default_factory=dict, repr=False, compare=False
    )
    _batches: dict[tuple[int, int], list[JudgeBatch]] = field(default_factory=dict, repr=False, compare=False)

    @staticmethod
    def of(parts: Sequence[PairArrays], n_models: int, n_judges: int) -> CrossIndex:
        sides = [(p.j, side) for p in parts for side in (p.a, p.b)]
        keys = [j.astype(np.int64, copy=False) * n_models + side for j, side in sides]
        if not keys:
            empty = np.zeros(0, np.int64)
            return CrossIndex(empty, empty, np.zeros(n_judges + 1, np.int64), (), ())
        n_keys = n_judges * n_models
        if n_keys > 4 * sum(k.size for k in keys):
            uniq, inverse = _unique_inverse(np.concatenate(keys), n_keys)
            bounds = np.cumsum([0, *(k.size for k in keys)])
            at = [inverse[lo:hi] for lo, hi in itertools.pairwise(bounds.tolist())]
            judge = uniq // n_models
            starts = np.searchsorted(judge, np.arange(n_judges + 1))
        else:
            # A table over every (judge, model) key holding the key's rank among its judge's models — a small
            # integer (< M), so 1 byte a key for up to 256 models: a quarter of the pages an entry-number
            # table touches (5M keys at 50k voter-judges); an entry is its judge's first entry + its rank.
            rank = np.zeros(n_keys, np.uint8 if n_models <= 256 else np.uint16 if n_models <= 65536 else np.int64)
            for key in keys:
                rank[key] = 1
            # The marks seen as bools where they are bytes: numpy's nonzero of a bool array is ~4x faster.
            uniq = np.flatnonzero(rank.view(bool) if rank.itemsize == 1 else rank)
            judge, model = np.divmod(uniq, n_models)
            starts = np.searchsorted(judge, np.arange(n_judges + 1))
            index = _index_dtype(uniq.size + 1)
            rank[uniq] = np.arange(uniq.size) - starts[judge]
            first = starts.astype(index)
            at = [first[j] + rank[key] for (j, _), key in zip(sides, keys, strict=True)]
            return CrossIndex(model, judge, starts, tuple(at[0::2]), tuple(at[1::2]))
        return CrossIndex(uniq % n_models, judge, starts, tuple(at[0::2]), tuple(at[1::2]))

    @property
    def size(self) -> int:
        return int(self.model.size)

    @property
    def n_judges(self) -> int:
        return int(self.starts.size - 1)

    @cached_property
    def by_judge(self) -> sp.csr_matrix:
        """(J × entries) 0/1: ``by_judge @ w`` sums per-entry rows ``w`` per judge (empty judges get 0)."""
        n = self.size
        return sp.csr_matrix((np.ones(n), np.arange(n), self.starts), shape=(self.starts.size - 1, n))

    def coupling(
        self, x: np.ndarray, n_models: int, cols: np.ndarray | None = None, rows: np.ndarray | None = None
    ) -> sp.csr_matrix:
        """Per-entry judge rows ``x[:, cols]`` (entries × k; all columns by default) as the sparse (J·k × M)
        matrix with row j·k + r holding judge j's row r over the models (the entries sorted by judge, so a
        permutation of x's items, gathered straight from a C-ordered ``x``: no copy of its columns).

        ``rows`` (J × k bool) leaves the rows where it is False empty: x is 0 there by construction (an
        effect switched off for the judge), and the matrix then holds no explicit zeros to carry or prune.
        The matrix shares its index arrays with the cached layout: it is read, never pruned in place."""
        x = np.ascontiguousarray(x)
        cols = np.arange(x.shape[1]) if cols is None else np.asarray(cols, np.int64)
        key = (x.shape[1], *cols.tolist(), None if rows is None else np.asarray(rows, bool).tobytes())
        if key not in self._layouts:
            k = cols.size
            # Row j·k + r holds judge j's entries starts[j] … starts[j + 1] − 1, each at column cols[r] of x.
            # In int32 when the sizes allow (scipy's own index type: no check and copy per construction).
            index = _index_dtype(x.size, self.size * k + 1, n_models)
            length = np.repeat(np.diff(self.starts), k).astype(index)
            if rows is not None:
                length *= np.asarray(rows, bool).ravel()
            indptr = np.concatenate([[0], np.cumsum(length, dtype=index)]).astype(index)
            # Each item's entry runs up by 1 along a row from the row's judge's first entry: made as steps (1, or
            # the jump at a row's first item) summed in place — one fresh intp array, where an arange plus a
            # repeat of row offsets and their int32 → intp copies made five (their fresh pages cost a host
            # fault each on a VM: 105 MB at 50k voter-judges, now 31).
            full = np.flatnonzero(length)  # the rows holding items
            first = np.repeat(self.starts[:-1], k)[full]  # each such row's first entry
            src_e = np.ones(int(indptr[-1]), np.intp)
            jump = first.copy()
            jump[1:] -= first[:-1] + length[full[:-1]] - 1
            src_e[indptr[full]] = jump
            np.cumsum(src_e, out=src_e)
            indices = np.take(self.model.astype(index), src_e)
            # Now each item's position in x.ravel(): its entry's row, at its row's column.
            src_e *= x.shape[1]
            src_e += np.repeat(np.tile(cols.astype(np.min_scalar_type(x.shape[1])), self.starts.size - 1), length)
            # Kept as intp: numpy converts any other index type on every gather (2.4M items, 3x slower in int32).
            self._layouts[key] = (src_e, indices, indptr)
        perm, indices, indptr = self._layouts[key]
        return sp.csr_matrix((x.ravel()[perm], indices, indptr), shape=(indptr.size - 1, n_models))


def _index_dtype(*sizes) -> np.dtype:
    """int32 for sparse-matrix indices up to these sizes (what scipy would convert int64 ones to, scanning and
    copying them on every construction), else int64."""
    return np.dtype(np.int32 if max(int(v) for v in sizes) < np.iinfo(np.int32).max else np.int64)


@dataclass(frozen=True)
class Piece:
    """Judges ``j0`` … ``j0 + cross.n_judges − 1`` with their entries: ``cross`` indexes them locally (judge
    codes from 0, entries from 0) and ``X`` holds the entries' rows (entries × K)."""

    j0: int
    cross: CrossIndex
    X: np.ndarray

    @property
    def j1(self) -> int:
        return self.j0 + self.cross.n_judges


class Couplings:
    """The θ × judge couplings (one row per (judge, model) entry) of an :class:`ArrowHessian`, as pieces over
    disjoint judge ranges in judge order.  Held in memory (:class:`HeldCouplings`, one piece) or spilled to
    disk (:class:`~biasboard.ranking.stream.SpilledCouplings`, read back a piece at a time by each pass), so
    every product with X, the Schur complement's Σ_j X_jᵀA_j⁻¹X_j and the covariance's per-judge terms are
    sums over pieces: memory one piece's entries, not every judge's."""

    #: The pieces stay in memory (a factorisation may keep what it derives from them).
    held: bool = False

    def pieces(self) -> Iterator[Piece]:
        raise NotImplementedError

    def map(self, fn: Callable[[Piece], np.ndarray]) -> Couplings:
        """New couplings with each piece's rows ``fn(piece)`` (which may consume ``piece.X``)."""
        raise NotImplementedError

    def sparse_store(self) -> SparseStore | None:
        """Where a factorisation of these couplings keeps the sparse matrices it makes of them for its later
        passes: None for held couplings (the factorisation holds the matrices themselves)."""
        return None


class SparseStore:
    """A factorisation's sparse coupling matrices, one per piece, kept out of memory for its later passes
    (:class:`~biasboard.ranking.stream.SpilledSparse`).

    Why: a solve reads the couplings twice (Xᵀ then X), a factorisation serves several solves, and each read of
    a spilled piece made its matrix again from its rows (the sparse layout, then the gather into it): 1.9 of 7.4 s
    of a streamed fit at 50k voter-judges.  Read back, a matrix costs ~12 bytes per coupled (judge, effect, model)
    item, and what it costs to make is paid once per factorisation."""

    def put(self, j0: int, j1: int, matrix: sp.csr_matrix) -> None:
        """Keep the matrix of judges j0 … j1 − 1 (the pieces come in judge order)."""
        raise NotImplementedError

    def items(self) -> Iterator[tuple[int, int, sp.csr_matrix]]:
        """Each piece's judge range and matrix, read back in the order they were put."""
        raise NotImplementedError


class HeldCouplings(Couplings):
    """Couplings in memory: one piece over every judge (the in-memory fit)."""

    held = True

    def __init__(self, cross: CrossIndex, X: np.ndarray):
        self.piece = Piece(0, cross, X)

    def pieces(self) -> Iterator[Piece]:
        yield self.piece

    def map(self, fn: Callable[[Piece], np.ndarray]) -> HeldCouplings:
        return HeldCouplings(self.piece.cross, fn(self.piece))


def _summed(values: Iterable[np.ndarray]) -> np.ndarray:
    """The sum of the arrays, the first one as it is (one piece: the same bits as no sum)."""
    return functools.reduce(np.add, values)


def block_diagonal(blocks: np.ndarray) -> sp.csr_matrix:
    """diag(B_1 … B_J) as a sparse (J·k × J·k) matrix from a stack of k × k blocks (J, k, k)."""
    j_count, k = blocks.shape[0], blocks.shape[1]
    index = _index_dtype(j_count * k * k + 1)
    indptr = np.arange(0, j_count * k * k + 1, k, dtype=index)
    indices = np.repeat(np.arange(j_count * k, dtype=index).reshape(j_count, 1, k), k, axis=1).ravel()
    return sp.csr_matrix((blocks.ravel(), indices, indptr), shape=(j_count * k, j_count * k))


def _unique_inverse(keys: np.ndarray, n_keys: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, return_inverse=True)`` for integer keys in [0, n_keys): by marking a table of all
    keys when it is not much bigger than ``keys`` (no sort: ~5x faster at 50k voter-judges), else by sorting."""
    if n_keys > 4 * keys.size:
        # return_inverse sorts once; a plain np.unique then two searchsorted is ~8x slower here.
        return np.unique(keys, return_inverse=True)
    seen = np.zeros(n_keys, bool)
    seen[keys] = True
    uniq = np.flatnonzero(seen)
    position = np.empty(n_keys, _index_dtype(uniq.size))
    position[uniq] = np.arange(uniq.size)
    return uniq, position[keys]


def glob_index(lay: Layout) -> np.ndarray:
    """Core indices of the globals, in the order of the G block: θ, the global effects, the graders' severities
    (``layout.graders``), τ."""
    graders = lay.block(SEV).start + np.array(lay.graders, dtype=np.int64)
    return np.concatenate([np.arange(lay.n_models + lay.n_glob), graders, np.arange(lay.tau.start, lay.tau.stop)])


def glob_blocks(lay: Layout) -> np.ndarray:
    """The block of each global effect coefficient, in the order of the globals (``layout.global_effects``)."""
    return np.array(lay.global_effects[: lay.n_glob], dtype=np.int64)


def judge_index(lay: Layout) -> np.ndarray:
    """Core index of judge j's raw block entry t, shape (J, K)."""
    return lay.block(0).start + np.arange(lay.n_blocks)[None, :] * lay.n_judges + np.arange(lay.n_judges)[:, None]


def split(lay: Layout, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A core vector as (globals (n_G,), judge blocks (J, K))."""
    return v[glob_index(lay)], v[lay.block(0).start : lay.tau.start].reshape(lay.n_blocks, lay.n_judges).T


def join(lay: Layout, v_g: np.ndarray, v_j: np.ndarray) -> np.ndarray:
    """The core vector of (globals, judge blocks); a grader's severity is the globals' (its judge entry unused)."""
    out = np.empty(lay.n_core)
    out[lay.block(0).start : lay.tau.start] = v_j.T.ravel()
    out[glob_index(lay)] = v_g
    return out


def deviation_masks(spec: Spec) -> np.ndarray:
    """(J, K): 1 where judge j's own raw entry t enters η (a deviation tied to the reference does not)."""
    return np.stack([spec.deviation_mask(t) for t in range(spec.layout.n_blocks)], axis=1)


@dataclass(frozen=True)
class ScaleGauge:
    """The centring of log a_j as the blocked path holds it (see the module docstring): the core indices ``at`` of
    the centred judges' ρ_j, their weights ``w`` (summing to 1) and the ρ_j's prior precision (one for all)."""

    at: np.ndarray
    w: np.ndarray
    precision: float

    @staticmethod
    def of(spec: Spec, precision: np.ndarray) -> ScaleGauge | None:
        centred = spec.disc_centring()
        if centred is None:
            return None
        on, w = centred
        at = spec.layout.block(DISC).start + on
        p = precision[at]
        if not np.all(p == p[0]):
            raise ValueError("the centred log a_j need one prior precision (the blocked step's rank-one term)")
        return ScaleGauge(at, w, float(p[0]))

    def matvec(self, v: np.ndarray, effective_matvec: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """The raw Hessian Eᵀ(H − P)E v + P v from ``effective_matvec`` (H v, H the partials' own plus the prior)."""
        at, w, p = self.at, self.w, self.precision
        u = v.copy()
        u[at] -= w @ v[at]
        y = effective_matvec(u)
        y[at] -= p * u[at]
        y[at] -= w * y[at].sum()
        y[at] += p * v[at]
        return y


def _per_judge(cross: CrossIndex, w: np.ndarray) -> np.ndarray:
    """Σ over each judge's entries of the rows of ``w`` (entries × k): (J, k)."""
    return np.asarray(cross.by_judge @ w)


def _block_inverses(A: np.ndarray, alone: np.ndarray | None = None) -> np.ndarray:
    """A_j⁻¹ = L_j⁻ᵀL_j⁻¹ (L_j the Cholesky factor) for a stack of small SPD blocks given judges-fastest, A
    (k, k, J), returned the same way; LinAlgError when a block is not positive definite.

    Entry by entry, each step one vectorised operation over the J judges on contiguous rows of J (LAPACK
    per 4 × 4 block costs ~1 µs of call overhead each: 10⁵ judges, 0.1 s; batched einsum/matmul steps over
    (J, k, k) stacks measured 2x slower at 50k judges).

    ``alone`` (k, J) bool marks the effects expected to have no coupling for the judge (switched off or
    held fixed: arena voters have no affinity).  Over each run of judges sharing that pattern (at most
    :data:`MASK_RUNS` of them, else it is not used) such an effect whose entries below the diagonal are
    indeed all 0 there is a 1 × 1 block of its own and the others are inverted without it: its zero terms
    are left out, not added — the same values (0.0 ± sign aside), 4 effects instead of 5 for the voters."""
    k, n_j = A.shape[0], A.shape[2]
    out = np.empty_like(A, order="C")
    runs = None
    if alone is not None:
        bits = np.zeros(n_j, np.int64)
        for t in range(k):
            bits |= alone[t].astype(np.int64) << t
        runs = _mask_runs(bits)
    for value, lo, hi in runs or [(0.0, 0, n_j)]:
        judges = slice(lo, hi)
        single = [t for t in range(k) if int(value) >> t & 1 and not _coupled(A, t, judges)]
        whole = [t for t in range(k) if t not in single]
        for t in single:  # zeros beside the 1 × 1 block
            out[t, :, judges] = 0.0
            out[:, t, judges] = 0.0
        for block in [whole] * bool(whole) + [[t] for t in single]:
            _spd_inverses_into(A, out, block, judges)
    return out


def _coupled(A: np.ndarray, t: int, judges: slice) -> bool:
    """Whether effect t has a nonzero entry below the diagonal of A (k, k, J) (row t left of it, column t
    under it: what the Cholesky steps read) for some of these judges."""
    below = [A[t, c, judges] for c in range(t)] + [A[r, t, judges] for r in range(t + 1, A.shape[0])]
    return any(np.any(entries) for entries in below)


def _spd_inverses_into(A: np.ndarray, out: np.ndarray, idx: list[int], judges: slice) -> None:
    """out[idx, idx, judges] = the inverses of the blocks A[idx, idx, judges] (see :func:`_block_inverses`)."""
    k = len(idx)
    L: list[list[np.ndarray]] = [[] for _ in range(k)]  # L[r][c], c ≤ r: entry (r, c) of every L_j
    for c in range(k):
        pivot = A[idx[c], idx[c], judges].copy()
        for t in range(c):
            pivot -= L[c][t] * L[c][t]
        if not np.all(pivot > 0):  # also catches NaN
            raise np.linalg.LinAlgError("a judge block is not positive definite")
        diag = np.sqrt(pivot)
        inv_diag = 1.0 / diag
        for r in range(c + 1, k):
            below = A[idx[r], idx[c], judges].copy()
            for t in range(c):
                below -= L[r][t] * L[c][t]
            below *= inv_diag
            L[r].append(below)
        L[c].append(diag)
    N: list[list[np.ndarray]] = [[] for _ in range(k)]  # N = L⁻¹ (lower), by forward substitution
    for r in range(k):
        inv_diag = 1.0 / L[r][r]
        for c in range(r):
            acc = L[r][c] * N[c][c]
            for t in range(c + 1, r):
                acc += L[r][t] * N[t][c]
            acc *= -inv_diag
            N[r].append(acc)
        N[r].append(inv_diag)
    for r in range(k):  # (NᵀN)[r, c] = Σ_{t ≥ r} N[t][r] N[t][c] for c ≤ r, mirrored
        for c in range(r + 1):
            acc = out[idx[r], idx[c], judges]
            np.multiply(N[r][r], N[r][c], out=acc)
            for t in range(r + 1, k):
                acc += N[t][r] * N[t][c]
            out[idx[c], idx[r], judges] = acc


@dataclass
class ArrowHessian:
    """Raw-coordinate Hessian of the objective, block-arrowhead (see the module docstring).

    ``low_rank`` holds (u, 1/κ): the full Hessian is this one plus κ·u uᵀ, and 1/κ = 0 marks the linear
    constraint uᵀs = 0 (the centring of log a_j) rather than a penalty.  ``Xg``'s column c is the global
    coefficient of block ``layout.global_effects[c]``.
    """

    lay: Layout
    H: np.ndarray  # (n_G, n_G)
    A: np.ndarray  # (J, K, K)
    Xg: np.ndarray  # (J, K, n_glob): judge rows × the global effects
    couplings: Couplings  # per entry (entries × K): judge rows × θ of the entry's model
    low_rank: tuple[tuple[np.ndarray, float], ...]
    on: np.ndarray  # (J, K) bool: the judge's entry is switched on (else it has no coupling at all)
    #: The prompts' difficulties δ of a fit with grades: their coupling to the globals B (n_G × P) and their
    #: diagonal D (P,), the prior's included.  A grade touches θ, its grader's severity (a global) and τ, so δ
    #: couples to the globals only and is eliminated into their Schur complement, as the dense path does.
    B: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    D: np.ndarray = field(default_factory=lambda: np.zeros(0))
    #: The centring of log a_j (its constraint is among ``low_rank``), or None.
    scale: ScaleGauge | None = None

    def prompt_row(self, index: int) -> np.ndarray:
        """The prompts' Hessian entries with core parameter ``index`` (P,): zero but for a global's."""
        at = np.flatnonzero(glob_index(self.lay) == index)
        return self.B[at[0]].copy() if at.size and self.D.size else np.zeros(self.D.size)

    def prompt_quadratic(self, s: np.ndarray, t: np.ndarray) -> float:
        """The prompts' part of the quadratic form of the step (s over the core, t over the prompts): 2tᵀBᵀs + tᵀDt."""
        if not self.D.size:
            return 0.0
        return float(2.0 * t @ (self.B.T @ s[glob_index(self.lay)]) + t @ (self.D * t))

    @property
    def Xc(self) -> np.ndarray:
        """The per-entry rows (entries × K) of couplings held in memory (a streamed fit's are on disk)."""
        if not isinstance(self.couplings, HeldCouplings):
            raise ValueError("the couplings of a streamed fit are on disk: read them with couplings.pieces()")
        return self.couplings.piece.X

    def x_glob(self, v_g: np.ndarray) -> np.ndarray:
        """X v for a globals vector: (J, K)."""
        m, n_e = self.lay.n_models, self.lay.n_glob
        out = self.Xg @ v_g[m : m + n_e]
        for p in self.couplings.pieces():
            out[p.j0 : p.j1] += _per_judge(p.cross, p.X * v_g[p.cross.model][:, None])
        return out

    def xt_judge(self, v_j: np.ndarray) -> np.ndarray:
        """Xᵀ v for a judge-block vector (J, K): (n_G,)."""
        m, n_e = self.lay.n_models, self.lay.n_glob
        out = np.zeros(self.H.shape[0])
        out[:m] = _summed(
            np.bincount(p.cross.model, weights=np.einsum("et,et->e", p.X, v_j[p.j0 + p.cross.judge]), minlength=m)
            for p in self.couplings.pieces()
        )
        out[m : m + n_e] = np.einsum("jtc,jt->c", self.Xg, v_j)
        return out

    def matvec(self, v: np.ndarray) -> np.ndarray:
        """H v for a raw core vector (penalty terms included, constraints not; the centring's map E applied)."""
        if self.scale is not None:
            return self.scale.matvec(v, self._effective_matvec)
        return self._effective_matvec(v)

    def _effective_matvec(self, v: np.ndarray) -> np.ndarray:
        v_g, v_j = split(self.lay, v)
        out = join(self.lay, self.H @ v_g + self.xt_judge(v_j), np.einsum("jtu,ju->jt", self.A, v_j) + self.x_glob(v_g))
        for u, kinv in self.low_rank:
            if kinv != 0:  # a penalty (a negative κ too: the free log a_j's common mean); 0 marks a constraint
                out += u * (u @ v) / kinv
        return out

    def diag_mean(self) -> float:
        d = np.concatenate([np.diag(self.H), np.einsum("jtt->jt", self.A).ravel()])
        return float(np.mean(np.abs(d)))


#: A per-judge mask with at most this many runs of equal values (voters off, LLM judges on: the judges come in
#: groups) is applied a run of judges — and so of entries, which are sorted by judge — at a time; more: a gather.
MASK_RUNS = 64


def _mask_runs(values: np.ndarray) -> list[tuple[float, int, int]] | None:
    """A per-judge mask column as its runs of equal values (value, first judge, last judge + 1), or None when
    it has more than :data:`MASK_RUNS` of them."""
    change = np.flatnonzero(values[1:] != values[:-1]) + 1
    if change.size >= MASK_RUNS:
        return None
    bounds = [0, *change.tolist(), values.size]
    return [(float(values[lo]), lo, hi) for lo, hi in itertools.pairwise(bounds) if hi > lo]


def _scale_judges(a: np.ndarray, values: np.ndarray) -> None:
    """a[j] *= values[j] in place over the first (judge) axis: a run of judges at a time (a write, or nothing,
    where the mask is 0 or 1: no multiplications by a gathered mask), a per-judge product when the mask has
    many runs."""
    runs = _mask_runs(values)
    if runs is None:
        a *= values.reshape(-1, *(1,) * (a.ndim - 1))
        return
    for value, lo, hi in runs:
        if value == 0.0:
            a[lo:hi] = 0.0
        elif value != 1.0:
            a[lo:hi] *= value


def _masked_model_sums(x: np.ndarray, values: np.ndarray, cross: CrossIndex, m: int) -> np.ndarray:
    """Σ over the entries of each model of x times the entry's judge's mask ``values`` (per judge): over the
    mask's runs of entries where it is not 0 (the entries are sorted by judge), or by a gather per entry."""
    runs = _mask_runs(values)
    if runs is None:
        return np.bincount(cross.model, weights=x * values[cross.judge], minlength=m)
    out = np.zeros(m)
    for value, lo, hi in runs:
        if value != 0.0:
            e0, e1 = int(cross.starts[lo]), int(cross.starts[hi])
            part = x[e0:e1] if value == 1.0 else x[e0:e1] * value
            out += np.bincount(cross.model[e0:e1], weights=part, minlength=m)
    return out


def _mask_entries(x: np.ndarray, values: np.ndarray, cross: CrossIndex) -> None:
    """x[e] *= values[judge of entry e] in place (x: one column of the per-entry rows), a run of entries at a time
    (see :func:`_scale_judges`)."""
    runs = _mask_runs(values)
    if runs is None:
        x *= values[cross.judge]
        return
    for value, lo, hi in runs:
        e0, e1 = int(cross.starts[lo]), int(cross.starts[hi])
        if value == 0.0:
            x[e0:e1] = 0.0
        elif value != 1.0:
            x[e0:e1] *= value


def _written_only(values: np.ndarray, acted: np.ndarray) -> np.ndarray:
    """A per-judge mask ``values`` of a block with 1 (nothing to do) for the judges none of whose cells added to
    the block (``acted`` False, :attr:`~biasboard.ranking.model.BlockPartials.acted`): their entries are still
    0, and 0 · v is 0 for v ≥ 0, so masking them would write zeros over zeros."""
    return np.where(acted | (values < 0), values, 1.0)


def _as_slice(index: np.ndarray) -> slice | np.ndarray:
    """``index`` as the slice it spans when it is a run of consecutive integers (a view, no fancy indexing)."""
    if index.size and np.array_equal(index, np.arange(index[0], index[0] + index.size)):
        return slice(int(index[0]), int(index[0]) + index.size)
    return index


@dataclass(frozen=True)
class AssembleMasks:
    """What :func:`assemble` masks by, from the spec alone (made once per spec, :func:`assemble_masks`):
    ``dev`` (J, K) where the judge's own raw entry acts, ``mask`` (J, K) where effect t acts (through the global
    coefficient too), the blocks with some judge's ``dev`` not 1 (``masked_t``), and the runs of judges of each
    product dev_t · mask_c (``xg_runs[t][c]``: the judge rows × global effects) and mask_c · mask_d
    (``gg_runs[c][d]``: the global effects' block)."""

    dev: np.ndarray
    mask: np.ndarray
    masked_t: list[int]
    xg_runs: list[list[list[tuple[float, int, int]] | np.ndarray]]
    gg_runs: list[list[list[tuple[float, int, int]] | np.ndarray]]


def _product_runs(values: np.ndarray) -> list[tuple[float, int, int]] | np.ndarray:
    """:func:`_mask_runs` of a per-judge product, or the product itself when it has many runs."""
    runs = _mask_runs(values)
    return values if runs is None else runs


def assemble_masks(spec: Spec) -> AssembleMasks:
    """The spec's :class:`AssembleMasks` (an objective makes them once and passes them to every :func:`assemble`)."""
    ge = glob_blocks(spec.layout)
    mask = spec.masks.T
    dev = deviation_masks(spec)
    dev[:, SEV] = 0.0  # severity acts in grades alone, and a grader's is one of the globals (``Layout.graders``)
    mask_g = mask[:, ge]
    return AssembleMasks(
        dev,
        mask,
        np.flatnonzero((dev != 1).any(axis=0)).tolist(),
        [[_product_runs(dev[:, t] * mask_g[:, c]) for c in range(ge.size)] for t in range(dev.shape[1])],
        [[_product_runs(mask_g[:, c] * mask_g[:, d]) for d in range(ge.size)] for c in range(ge.size)],
    )


def _masked_judge_sum(a: np.ndarray, runs: list[tuple[float, int, int]] | np.ndarray) -> float:
    """Σ_j a[j] · w_j over a per-judge column ``a`` (contiguous) and a mask product's runs (or w itself)."""
    if isinstance(runs, np.ndarray):
        return float(a @ runs)
    return sum(float(a[lo:hi].sum()) * value for value, lo, hi in runs if value != 0.0)


def _masked_judge_copy(out: np.ndarray, a: np.ndarray, runs: list[tuple[float, int, int]] | np.ndarray) -> None:
    """out[j] = a[j] · w_j (``out`` zeros) over a mask product's runs (or w itself): nothing copied where w is 0."""
    if isinstance(runs, np.ndarray):
        np.multiply(a, runs, out=out)
        return
    for value, lo, hi in runs:
        if value == 1.0:
            out[lo:hi] = a[lo:hi]
        elif value != 0.0:
            np.multiply(a[lo:hi], value, out=out[lo:hi])


def assemble(
    part: BlockPartials,
    spec: Spec,
    precision: np.ndarray,
    gauges,
    cross: CrossIndex,
    raw: Couplings | None = None,
    masks: AssembleMasks | None = None,
) -> ArrowHessian:
    """The raw Hessian from judge-blocked partials (effective coordinates), the prior and its gauges.

    ``part`` is consumed: its arrays become the Hessian's, masked in place (the per-entry rows once made
    row-major).  The per-entry rows are ``part.C`` over ``cross``'s entries, or, from a streamed objective,
    the pieces ``raw`` (spilled to disk: masked a piece at a time, ``part.C`` unused)."""
    lay = spec.layout
    m, n_e = lay.n_models, lay.n_glob
    ge = glob_blocks(lay)
    masks = assemble_masks(spec) if masks is None else masks
    mask, dev = masks.mask, masks.dev
    # The judges whose block t is masked: only those whose cells added to it (the rest are 0 already).
    masked = {t: _written_only(dev[:, t], part.acted[t]) for t in masks.masked_t}
    prec_g, prec_j = split(lay, precision)
    # Everything is masked a run of judges at a time (:func:`_mask_runs`), block t only where some judge's
    # dev[:, t] is not 1 (an effect off for the voters, severity for every judge of pair cells).
    A = part.A  # judges fastest: A[lo:hi, t, u] is contiguous
    Xg = np.zeros((lay.n_judges, lay.n_blocks, n_e))
    for t in range(lay.n_blocks):
        for c, u in enumerate(ge.tolist()):
            _masked_judge_copy(Xg[:, t, c], A[:, t, u], masks.xg_runs[t][c])
    n_g = prec_g.size
    H = np.zeros((n_g, n_g))
    H[:m, :m] = part.H_theta
    raw = HeldCouplings(cross, part.C) if raw is None else raw
    columns: list[np.ndarray] = []  # each piece's θ × global-effect columns (M × n_glob)
    # A_j masked by dev_j dev_jᵀ and the entries' rows by their judge's dev_j (columns masked_t).

    def piece_rows(p: Piece) -> np.ndarray:
        X = p.X  # column-major as the slices sum it (a spilled piece: row-major, as written)
        cols = np.empty((m, ge.size))
        for c, t in enumerate(ge.tolist()):
            cols[:, c] = _masked_model_sums(X[:, t], mask[p.j0 : p.j1, t], p.cross, m)
        columns.append(cols)
        for t, values in masked.items():
            _mask_entries(X[:, t], values[p.j0 : p.j1], p.cross)
        # Row-major: the factorisation gathers entry rows (copy(order="C"): 2x faster than ascontiguousarray).
        return X if X.flags.c_contiguous else X.copy(order="C")

    couplings = raw.map(piece_rows)
    del raw
    if ge.size:
        col = _summed(columns)
        H[:m, m : m + ge.size] = col
        H[m : m + ge.size, :m] = col.T
    for c, t in enumerate(ge.tolist()):
        for d, u in enumerate(ge.tolist()):
            H[m + c, m + d] = _masked_judge_sum(A[:, t, u], masks.gg_runs[c][d])
    for t, values in masked.items():
        _scale_judges(A[:, t, :], values)
        _scale_judges(A[:, :, t], values)
    np.einsum("jtt->jt", A)[...] += prec_j  # a writeable view of the diagonals
    H[np.diag_indices(n_g)] += prec_g
    low_rank = []
    if gauges:
        position = np.full(lay.n_core, -1)
        position[glob_index(lay)] = np.arange(n_g)
    for idx, kappa in gauges:
        pos = position[idx]
        if np.all(pos >= 0):
            H[np.ix_(pos, pos)] += kappa
        else:
            u = np.zeros(lay.n_core)
            u[idx] = 1.0
            low_rank.append((u, 1.0 / kappa))
    scale = ScaleGauge.of(spec, precision)
    if scale is not None:  # the effective step's constraint wᵀt = 0
        u = np.zeros(lay.n_core)
        u[scale.at] = scale.w
        low_rank.append((u, 0.0))
    return ArrowHessian(lay, H, A, Xg, couplings, tuple(low_rank), dev > 0, scale=scale)


@dataclass(frozen=True)
class JudgeBatch:
    """Judges who each met the same n ≥ 1 models, with their entries and where their n × n blocks go in M × M."""

    judges: np.ndarray  # (b,)
    entries: np.ndarray  # (b, n): the entries are sorted by judge, so judge j's are one run
    key: np.ndarray  # (b, n, n) int32 (while M² fits): model_r · M + model_c of block entry (r, c)


def _judge_batches(cross: CrossIndex, n_models: int) -> Iterable[JudgeBatch]:
    """The judges in batches who each met the same n ≥ 1 models, at most :data:`BATCH_CELLS` // n² judges a
    batch; made once per :class:`CrossIndex` and kept (the keys, Σ_j n_j² integers, cost as much as the Gram's
    sums to make: 16 ms of every factorisation at 50k voter-judges), or, without ``cross.cache_batches``,
    made a batch at a time as they are used (memory: one batch's keys)."""
    if not cross.cache_batches:
        return _make_batches(cross, n_models)
    cached = cross._batches.get((BATCH_CELLS, n_models))
    if cached is None:
        cached = cross._batches[(BATCH_CELLS, n_models)] = list(_make_batches(cross, n_models))
    return cached


def _make_batches(cross: CrossIndex, n_models: int) -> Iterator[JudgeBatch]:
    """:func:`_judge_batches`, one batch at a time."""
    n_j = np.diff(cross.starts)
    order = np.argsort(n_j, kind="stable")
    model = cross.model.astype(_index_dtype(n_models * n_models))  # gathered in the keys' type: no int64 copy
    for group in np.split(order, np.flatnonzero(np.diff(n_j[order])) + 1):
        n = int(n_j[group[0]]) if group.size else 0
        if n == 0:
            continue
        step = max(1, BATCH_CELLS // (n * n))
        for lo in range(0, group.size, step):
            judges = group[lo : lo + step]
            entries = cross.starts[judges][:, None] + np.arange(n)
            met = np.take(model, entries)
            yield JudgeBatch(judges, entries, met[:, :, None] * n_models + met[:, None, :])


def _gram(
    pieces: Iterable[tuple[Piece, np.ndarray]], R: np.ndarray, Ainv: np.ndarray, n_models: int, zero: Sequence[int] = ()
) -> np.ndarray:
    """Σ_j X_jᵀA_j⁻¹X_j (M × M, symmetrised), X_j = judge j's rows (entries × K) at columns R with the columns
    ``zero`` (positions in R) zeroed (:func:`_entry_rows`), over the pieces (each with its rows).

    Judge j's term is an n_j × n_j block over the models it met; the judges who met equally many models
    have theirs made together by batched matmuls and added into M × M (:func:`_added_at`).  Measured at 50k
    voter-judges (n_j ~ 9.5 on average, 6 LLM judges at 100): 0.06 s, where the sparse product XᵀY with
    Y = A⁻¹X took 0.11 s, its CSR → CSC conversion 0.02 s and Y itself 0.03 s."""
    out = np.zeros(n_models * n_models)
    cols = _as_slice(R)
    for p, Xc in pieces:
        for batch in _judge_batches(p.cross, n_models):
            x = _entry_rows(Xc, batch.entries, cols, zero)
            block = x @ np.take(Ainv, p.j0 + batch.judges, axis=0) @ x.transpose(0, 2, 1)
            out += _added_at(block.ravel(), batch.key.ravel(), out.size)
    gram = out.reshape(n_models, n_models)
    return 0.5 * (gram + gram.T)


def _entry_rows(Xc: np.ndarray, entries: np.ndarray, cols: slice | np.ndarray, zero: Sequence[int]) -> np.ndarray:
    """The rows ``Xc[entries]`` at columns ``cols`` (entries (b, n): (b, n, |cols|)), those at positions ``zero``
    of ``cols`` times 0 (held fixed: :func:`_whole_columns`).  take: ~2x fancy indexing's speed."""
    x = np.take(Xc, entries, axis=0)[:, :, cols]
    for a in zero:
        x[:, :, a] *= 0.0
    return x


def _added_at(values: np.ndarray, keys: np.ndarray, size: int) -> np.ndarray:
    """``np.bincount(keys, values, minlength=size)`` (the same sums, in the same order) in one pass over
    int32 keys: a 1 × size CSR row holding the duplicate keys, made dense (which adds them up).  bincount
    reads its keys twice (their range first) at 8 bytes a key: 16 vs 12 ms at 50k voter-judges."""
    indptr = np.array([0, values.size], keys.dtype)
    return sp.csr_matrix((values, keys, indptr), shape=(1, size)).toarray().ravel()


def _whole_columns(f_j: np.ndarray, f_m: np.ndarray, R: np.ndarray) -> list[int] | None:
    """The positions in R of the coupled columns fixed for every judge when nothing else coupled to θ is fixed
    (``f_j`` (J, K), ``f_m`` the models' θ: the first phase of a fit fixes every judge's discrimination,
    nothing else; [] with nothing fixed), else None.  Such columns are zeroed by each use of the rows
    (:func:`_entry_rows`, :func:`_zeroed`), not in a copy of them (:func:`_without_fixed`: 22 MB of fresh
    pages at 50k voter-judges)."""
    free_r = f_j[:, R] > 0
    whole = ~free_r.any(axis=0)
    if not f_m.all() or not np.all(free_r.all(axis=0) | whole):
        return None
    return np.flatnonzero(whole).tolist()


def _without_fixed(X: np.ndarray, f_j: np.ndarray, f_m: np.ndarray, cross: CrossIndex) -> np.ndarray:
    """A copy of the per-entry rows ``X`` (entries × K) with the rows of fixed parameters zeroed: column t
    where judge j's ``f_j[j, t]`` is 0, every column where the entry's model's θ (``f_m``) is.  A column
    fixed (or free) for every judge alike is zeroed (or left) whole, without a per-entry gather.  Nothing
    fixed (a fit's second phase): ``X`` itself, not a copy — its readers do not write to it (a streamed fit
    read its couplings back and copied them on every solve: 2.0 of 23.5 s of a reference fit at 50k voters)."""
    if f_j.all() and f_m.all():
        return X
    out = X.copy()
    for t in range(X.shape[1]):
        if not f_j[:, t].all():
            out[:, t] *= f_j[cross.judge, t] if f_j[:, t].any() else 0.0
    if not f_m.all():
        out *= f_m[cross.model][:, None]
    return out


@contextmanager
def _zeroed(X: np.ndarray, cols: Sequence[int]) -> Iterator[np.ndarray]:
    """``X`` (entries × K) with its columns ``cols`` times 0 inside the block, restored on exit (the values of a
    zeroed copy, for one gather from them: 3 ms against a 6 ms copy of 22 MB fresh pages at 50k voter-judges)."""
    saved = [X[:, t].copy() for t in cols]
    for t in cols:
        X[:, t] *= 0.0
    try:
        yield X
    finally:
        for t, column in zip(cols, saved, strict=True):
            X[:, t] = column


class ArrowFactor:
    """The factorised (damped) Newton system of an :class:`ArrowHessian` over the ``free`` parameters.

    Fixed parameters get identity rows and no coupling, so their step is 0.  ``solve`` has the
    interface of :class:`~biasboard.ranking.solver.NewtonFactor` (no prompt block here).

    Only the effects R switched on for some judge are factorised as blocks (the inverses of A_j restricted
    to R, from their Cholesky factors: ``AinvT`` (R, R, J), judges fastest, for the solves' effect-major
    products, and its copy ``Ainv`` (J, R, R) for the batched per-judge gathers, held only with ``hold``); every
    other judge entry is a diagonal (``diag``).  The
    couplings to θ are, per piece of the couplings, a sparse (J_p·R × M) matrix (``Xsp``, row j·R + r: judge
    j's effect r over the models it met: the solves' products) and the same rows per entry (``Xc``), kept
    when the couplings are held; else the rows are read back a piece at a time by the passes that need them (the
    Gram's, the covariance's) and the sparse matrices, made in the Gram's pass, are kept on disk for the solves
    (:class:`SparseStore`).  Σ_j X_jᵀA_j⁻¹X_j
    and the covariance's per-judge terms are made judge block by judge block, batched over the judges who met
    equally many models (:func:`_judge_batches`) — O(R·Σ_j n_j²) for judges meeting n_j models.
    """

    def __init__(self, hess: ArrowHessian, free: np.ndarray, mu: float, hold: bool = False):
        lay = self.lay = hess.lay
        # Of the Hessian only its couplings and switches are kept (what _pieces reads): its blocks (20 MB at 50k
        # voter-judges) are freed with the evaluation while this factorisation serves chord steps.
        self.free, self._couplings, self._on = free, hess.couplings, hess.on
        self.all_free = bool(free.all())
        m, n_e = lay.n_models, lay.n_glob
        f_g, f_j = split(lay, free.astype(float))
        # The effects switched on for some judge, free or not (a fixed entry gets an identity row in its
        # block): the same R, and so the same sparse layout, in both phases of a fit.
        R = self.R = np.flatnonzero(hess.on.any(axis=0))
        self._cols = _as_slice(R)
        self._rest = np.setdiff1d(np.arange(lay.n_blocks), R)  # the judge entries outside the blocks: diagonal
        # Entries outside the coupled blocks: a diagonal (fixed ones: identity, so their step is 0).
        # At μ = 0 with every entry free (a fit's Newton steps) the diagonals as they are: 1·a + 0 is a.
        plain = mu == 0 and bool(f_j.all())
        diag = np.einsum("jtt->jt", hess.A)
        self.diag = diag.copy() if plain else diag * f_j + np.where(f_j > 0, mu, 1.0)
        rest = np.delete(self.diag, R, axis=1)
        self._diag_rest = np.ascontiguousarray(rest.T)  # (K − R, J), as the solves' effect-major rows
        if np.any(rest <= 0) or not np.all(np.isfinite(rest)):
            raise np.linalg.LinAlgError("a judge entry's curvature is not positive")
        fR = f_j[:, R]
        every = bool(fR.all() and f_g.all())  # nothing fixed (a fit; profiles and the oracle fix some)
        # A judges-fastest (assemble's layout): A_t[r, c] is a contiguous row of J, and so are A's blocks
        # restricted to R here, what the entry-by-entry inverses step through.
        A_t, fR_t = hess.A.transpose(1, 2, 0), fR.T
        A = np.empty((R.size, R.size, lay.n_judges))
        for a, r in enumerate(R.tolist()):
            A[a] = A_t[r, self._cols]  # a view when R is a run: one copy
        if not every:
            A *= fR_t[:, None, :] * fR_t[None, :, :]
        if not plain:
            A[np.arange(R.size), np.arange(R.size)] += np.where(fR_t > 0, mu, 1.0)
        # (R, R, J); raises LinAlgError when a block is not positive definite.  The effects switched off or fixed
        # for a judge are 1 × 1 blocks there.
        self.AinvT = _block_inverses(A, ~hess.on[:, R].T | (fR_t == 0))
        del A
        self._Ainv: np.ndarray | None = None
        self._Yg: np.ndarray | None = None
        Ainv = self.Ainv  # (J, R, R): the Gram's gathers and Yg's products, then let go unless held (see Ainv)
        self.every = every
        self._f_g, self._f_j = f_g, f_j
        # Columns fixed for every judge (the first phase's discrimination): zeroed by each use, else in a copy.
        # (Held couplings: a piece read back from disk is not written to.)
        self._zero = _whole_columns(f_j, f_g[:m], R) if hess.couplings.held else None
        Xg = hess.Xg[:, _as_slice(R)]  # a view when R is a run (the usual case): copied once, below
        if not every:
            Xg = Xg * fR[:, :, None] * f_g[None, None, m : m + n_e]
        self.Xg = np.ascontiguousarray(Xg)  # C-ordered: the solves use it as a (J·R × n_e) matrix, no copy
        S = hess.H * f_g[:, None] * f_g[None, :]
        S[np.diag_indices_from(S)] += np.where(f_g > 0, mu, 1.0)
        Yg = self._yg(Ainv)
        # Couplings held in memory: their masked rows and sparse matrix made once and kept; spilled ones' rows are
        # read back a piece at a time by each pass that needs them, their sparse matrices kept on disk from the
        # Gram's pass on (memory: one piece).
        self._held: list[tuple[Piece, np.ndarray, sp.csr_matrix]] | None = None
        self._kept: SparseStore | None = None  # spilled couplings: their sparse matrices, from the Gram's pass on
        if hess.couplings.held:
            self._held = list(self._pieces())
        store = hess.couplings.sparse_store()
        k = R.size
        crosses: list[np.ndarray] = []  # each piece's Xᵀ(A⁻¹X)_g, made in the Gram's pass over the pieces

        def with_cross(yg: np.ndarray) -> Iterator[tuple[Piece, np.ndarray]]:
            for p, Xc, Xsp in self._pieces():
                crosses.append(np.asarray(Xsp.T @ yg[p.j0 * k : p.j1 * k]))
                if store is not None:
                    store.put(p.j0, p.j1, Xsp)
                yield p, Xc

        S[:m, :m] -= _gram(with_cross(Yg), R, Ainv, m, self._zero or ())
        self._kept = store
        cross_g = _summed(crosses)
        S[:m, m : m + n_e] -= cross_g
        S[m : m + n_e, :m] -= cross_g.T
        S[m : m + n_e, m : m + n_e] -= self.Xg.reshape(-1, n_e).T @ Yg
        # The prompts (grades): eliminated into the globals, S −= B (D + μ)⁻¹ Bᵀ, as the dense path's Schur step.
        self.d = hess.D + mu
        if np.any(self.d <= 0):
            raise np.linalg.LinAlgError("a prompt's curvature is not positive")
        self.B = hess.B if every or not self.d.size else hess.B * f_g[:, None]
        if self.d.size:
            S -= (self.B / self.d) @ self.B.T
        if hold:
            self._Ainv, self._Yg = Ainv, Yg
        del Ainv, Yg
        self.S = S
        self.factor = sla.cho_factor(S, lower=True, check_finite=False)
        if not np.all(np.isfinite(self.factor[0])):
            raise np.linalg.LinAlgError("Schur complement is not finite")
        us = [(u if self.all_free else u * free, kinv) for u, kinv in hess.low_rank]
        us = [(u, kinv) for u, kinv in us if np.any(u)]
        #: (indices, p + μ) of the centred log a_j when they are free: the step is solved for t (module docstring).
        self._scale: tuple[np.ndarray, float] | None = None
        sc = hess.scale
        if sc is not None and free[sc.at].any():
            if not free[sc.at].all():
                raise ValueError("the centred log a_j are held only in part: hold all of them or none")
            curvature = sc.precision + mu
            u = np.zeros(lay.n_core)
            u[sc.at] = 1.0
            us.append((u, -sc.at.size / curvature))  # −(p + μ)/n (1ᵀt)²: the prior of s = F t, less t's own
            self._scale = (sc.at, curvature)
        self.U = np.array([u for u, _ in us]).reshape(len(us), lay.n_core)
        self.Z = np.array([self._base_solve(u) for u, _ in us]).reshape(len(us), lay.n_core)
        self.M = np.diag([kinv for _, kinv in us]) + self.U @ self.Z.T
        if us:
            self.Minv = np.linalg.inv(self.M)

    def _rows(self) -> Iterator[tuple[Piece, np.ndarray]]:
        """Each piece of the couplings with its rows masked to the free parameters (``Xc``: per entry, all K
        columns: the batched Gram and covariance take the R of them; columns fixed for every judge,
        ``_zero``, are left as they are and zeroed by each gather, :func:`_entry_rows`)."""
        if self._held is not None:
            for p, Xc, _ in self._held:
                yield p, Xc
            return
        m = self.lay.n_models
        for p in self._couplings.pieces():
            Xc = p.X  # the coupled columns R are gathered straight into the sparse rows
            if self._zero is None:  # fixed parameters: no coupling (whole columns: zeroed by each use)
                Xc = _without_fixed(Xc, self._f_j[p.j0 : p.j1], self._f_g[:m], p.cross)
            yield p, Xc

    def _pieces(self) -> Iterator[tuple[Piece, np.ndarray, sp.csr_matrix]]:
        """:meth:`_rows` with the sparse (J_p·R × M) matrix of each piece's coupled rows (``Xsp``, row j·R + r:
        judge j0 + j's effect r over the models it met; zero at fixed parameters)."""
        if self._held is not None:
            yield from self._held
            return
        m, R = self.lay.n_models, self.R
        for p, Xc in self._rows():
            # Switched-off rows (a voter's affinity) left out: they carry no work.  (Rows of fixed parameters
            # stay, zero: both phases of a fit share one layout.)
            with _zeroed(Xc, R[self._zero or []].tolist()):
                Xsp = p.cross.coupling(Xc, m, R, self._on[p.j0 : p.j1, R])
            yield p, Xc, Xsp

    def sparse_couplings(self) -> Iterator[tuple[int, int, sp.csr_matrix]]:
        """Each piece's judge range j0 … j1 − 1 and sparse (J_p·R × M) coupling matrix (``Xsp`` of :meth:`_pieces`)
        for the products: held, or kept by the factorisation's first pass (:class:`SparseStore`), else made."""
        if self._kept is not None:
            yield from self._kept.items()
            return
        for p, _, Xsp in self._pieces():
            yield p.j0, p.j1, Xsp

    @staticmethod
    def build(hess: ArrowHessian, free: np.ndarray, mu: float = 0.0, hold: bool = False) -> ArrowFactor | None:
        try:
            return ArrowFactor(hess, free, mu, hold)
        except (np.linalg.LinAlgError, sla.LinAlgError, ValueError):
            return None

    @property
    def Ainv(self) -> np.ndarray:
        """A_j⁻¹ judge-major (J, R, R), what the batched per-judge gathers take: a copy of ``AinvT``'s blocks.

        Held only by a factorisation made with ``hold`` (the one the covariance is taken from: the solver's
        polishing step, :func:`~biasboard.ranking.solver.laplace_covariance`); a Newton step's lets it go once
        made (with :meth:`_yg`'s rows: 16 MB at 50k voter-judges that stayed alive across the gradient passes
        between two factorisations, the fit's peak memory) and makes it again if asked (2 ms)."""
        if self._Ainv is not None:
            return self._Ainv
        return np.ascontiguousarray(self.AinvT.transpose(2, 0, 1))

    def _yg(self, Ainv: np.ndarray) -> np.ndarray:
        """The rows of A_j⁻¹X_j's globals' part (J·R × n_e) from ``Ainv`` (:attr:`Ainv`); held like it (4 ms)."""
        if self._Yg is not None:
            return self._Yg
        return np.matmul(Ainv, self.Xg).reshape(-1, self.lay.n_glob)

    def _ainv(self, v: np.ndarray, judge_major: bool = False, out: np.ndarray | None = None) -> np.ndarray:
        """A_j⁻¹ v_j for every judge, v effect-major (R, J): rows of J against ``AinvT``'s (0.9 ms at 50k
        judges; 1.5 ms judge-major against ``Ainv``); the result effect-major too, or judge-major (J, R) (as
        fast: what the couplings' products take), into ``out`` when given."""
        return np.einsum("ikj,kj->ji" if judge_major else "ikj,kj->ij", self.AinvT, v, out=out)

    def _x_glob(self, v_g: np.ndarray) -> np.ndarray:
        m, n_e = self.lay.n_models, self.lay.n_glob
        k = self.R.size
        out = self.Xg.reshape(-1, n_e) @ v_g[m : m + n_e]
        for j0, j1, Xsp in self.sparse_couplings():
            out[j0 * k : j1 * k] += Xsp @ v_g[:m]
        return out.reshape(-1, k)

    def _xt_judge(self, v: np.ndarray) -> np.ndarray:
        m, n_e, k = self.lay.n_models, self.lay.n_glob, self.R.size
        out = np.zeros(self.S.shape[0])
        flat = np.ascontiguousarray(v).ravel()
        out[:m] = _summed(Xsp.T @ flat[j0 * k : j1 * k] for j0, j1, Xsp in self.sparse_couplings())
        out[m : m + n_e] = self.Xg.reshape(-1, n_e).T @ flat
        return out

    def _base_solve(self, rhs: np.ndarray) -> np.ndarray:
        """x with (H_free + μ) x = rhs, low-rank terms left out."""
        lay = self.lay
        r = rhs if self.all_free else rhs * self.free
        gi, judges = glob_index(lay), slice(lay.block(0).start, lay.tau.start)
        x = np.empty(lay.n_core)
        # The judge blocks effect-major (K, J), as the core holds them: views of r and x (r_c too when R is a
        # run), so the steps read and write them in place.
        r_t, x_t = (v[judges].reshape(lay.n_blocks, lay.n_judges) for v in (r, x))
        r_c = r_t[self._cols]
        x_g = sla.cho_solve(self.factor, r[gi] - self._xt_judge(self._ainv(r_c, judge_major=True)), check_finite=False)
        d = r_c - self._x_glob(x_g).T
        if isinstance(self._cols, slice):  # written straight into x's rows (no fresh (R, J) array to copy)
            self._ainv(d, out=x_t[self._cols])
        else:
            x_t[self._cols] = self._ainv(d)
        x_t[self._rest] = r_t[self._rest] / self._diag_rest
        x[gi] = x_g  # last: a grader's severity is a global (its judge entry, solved above, is unused)
        if not self.all_free:
            x *= self.free
        return x

    def full_solve(self, rhs: np.ndarray) -> np.ndarray:
        """x with (H_free + μ + Σκuuᵀ) x = rhs (and uᵀx = 0 for each constraint), by Woodbury; with the centring of
        log a_j, the raw step s = F t + (mean r / (p + μ)) 1 of the effective step t (module docstring)."""
        if self._scale is not None:
            at, curvature = self._scale
            mean = float(rhs[at].mean())
            rhs = rhs.copy()
            rhs[at] -= mean
        x = self._base_solve(rhs)
        if len(self.U):
            c = self.Minv @ (self.U @ x)
            # One constraint (the centring): Z's row times a number, the same bits as Zᵀc, whose matmul with
            # an inner dimension of 1 is ~6x slower (1.3 ms on a 300k-entry core); subtracted in place.
            x -= self.Z[0] * c[0] if c.size == 1 else self.Z.T @ c
        if self._scale is not None:
            x[at] += mean / curvature - x[at].mean()
        return x

    def solve(self, g: np.ndarray, g_diag: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The step (over the free core, over the prompts) for the gradient (g, g_diag): the prompts eliminated
        as :class:`~biasboard.ranking.solver.NewtonFactor` does, s = S⁻¹(−g + B d⁻¹ g_δ), t = −d⁻¹(g_δ + Bᵀs)."""
        if self.all_free:
            rhs = -g  # a new array: written below
        else:
            rhs = np.zeros(self.lay.n_core)
            rhs[self.free] = -g
        gi = glob_index(self.lay)
        if self.d.size:
            rhs[gi] += self.B @ (g_diag / self.d)
        x = self.full_solve(rhs)
        t = -(g_diag + self.B.T @ x[gi]) / self.d if self.d.size else np.zeros(0)
        return (x if self.all_free else x[self.free]), t

    def coupled_covariance(self, sinv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For F_j = A_j⁻¹X_j (judge j's coupled rows, R × n_G) and a symmetric n_G × n_G matrix ``sinv`` (S⁻¹ for the
        Laplace covariance, the globals' sandwich for the Godambe one, :mod:`~biasboard.ranking.composite`): the
        diagonal of F_j·sinv·F_jᵀ (J, R) and −F_j·sinv's global-effect columns (J, R, n_e), for every judge at once.
        """
        lay, R = self.lay, self.R
        m, n_e, k = lay.n_models, lay.n_glob, R.size
        n_j = lay.n_judges
        cols = _as_slice(R)
        # Minus the coupled rows' covariance with the global effects, A_j⁻¹X_jᵀS⁻¹_θg + A_j⁻¹X_g,jS⁻¹_gg: the
        # first from X_jᵀS⁻¹_θg for every judge at once (a sparse (J·R × M) @ (M × n_e) product per piece,
        # O(entries · n_e)) and one batched (J, R, R) @ (J, R, n_e) matmul (6x an einsum's speed).  Made
        # contiguous (J, R, n_e) and copied into cov_jg's coupled columns once, at the end: the elementwise
        # passes below over a strided view of cov_jg cost more than that copy (matmul, two passes and the copy:
        # 4.9 ms, against 6.1 ms in place in the view, at 50k judges).
        s_mg = np.ascontiguousarray(sinv[:m, m : m + n_e])
        xs = [(j0, j1, Xsp @ s_mg) for j0, j1, Xsp in self.sparse_couplings()]
        if len(xs) == 1 and xs[0][:2] == (0, n_j):
            xs_all = xs[0][2].reshape(n_j, k, n_e)
        else:  # pieces by judge range; a judge with grades alone (no battles) is in none: no coupling
            xs_all = np.zeros((n_j, k, n_e))
            for j0, j1, rows in xs:
                xs_all[j0:j1] = rows.reshape(j1 - j0, k, n_e)
        del xs
        Ainv = self.Ainv
        cov_c = np.matmul(Ainv, xs_all)
        yg = self._yg(Ainv)
        Yg = yg.reshape(n_j, k, n_e)
        yg_gg = (yg @ sinv[m : m + n_e, m : m + n_e]).reshape(Yg.shape)  # one (J·R × n_e) product
        cov_c += yg_gg
        # var_c: the diagonal of (A⁻¹X)S⁻¹(A⁻¹X)ᵀ's rows.  Its globals' part Yg·(yg_gg + 2·S⁻¹_gθ yᵀ) (S⁻¹ is
        # symmetric: the cross term is twice one product) = Yg·(2·cov_c − yg_gg), a column at a time (2·cov_c
        # made in xs_all's memory: no fresh pages).
        yg_gg -= np.multiply(cov_c, 2.0, out=xs_all)
        del xs_all
        yg_gg *= Yg
        var_c = -yg_gg[:, :, 0]
        for c in range(1, n_e):
            var_c -= yg_gg[:, :, c]
        del yg_gg
        np.negative(cov_c, out=cov_c)
        # Its θ part, the diagonal of A_j⁻¹X_jᵀ S⁻¹_θθ X_jA_j⁻¹, judge j's made over the n_j models it met only
        # (S⁻¹ gathered there: O(Σ_j n_j²), not a dense (J·R × M) product); y = X_jA_j⁻¹ (A_j⁻¹ is symmetric).
        s_mm = np.ascontiguousarray(sinv[:m, :m]).ravel()
        for p, Xc in self._rows():
            for batch in _judge_batches(p.cross, m):
                judges = p.j0 + batch.judges
                y = _entry_rows(Xc, batch.entries, cols, self._zero or ()) @ np.take(Ainv, judges, axis=0)
                var_c[judges] += np.einsum("jnr,jnr->jr", np.take(s_mm, batch.key) @ y, y)
        return var_c, cov_c

    def coupling_columns(self) -> Iterator[np.ndarray]:
        """X_j's column at each global in turn (globals' order), every judge's coupled rows: (J, R), zero at fixed
        parameters and for the graders' severities and τ (no judge couples to them).  Each piece's sparse rows are
        made column-major once (O(entries) memory): for the Godambe covariance's per-judge terms
        (:mod:`~biasboard.ranking.composite`)."""
        lay, k = self.lay, self.R.size
        m, n_e, n_j = lay.n_models, lay.n_glob, lay.n_judges
        by_model = [(j0, j1, sp.csc_matrix(Xsp)) for j0, j1, Xsp in self.sparse_couplings()]
        for model in range(m):
            out = np.zeros((n_j, k))
            for j0, j1, Xcsc in by_model:
                out[j0:j1] = Xcsc[:, [model]].toarray().reshape(j1 - j0, k)
            yield out
        for c in range(n_e):
            yield np.array(self.Xg[:, :, c])
        for _ in range(self.S.shape[0] - m - n_e):
            yield np.zeros((n_j, k))

    def ainv_rows(self, v: np.ndarray) -> np.ndarray:
        """A_j⁻¹ v_j for every judge over all K entries, v judge-major (J, K, …): the coupled ones by the blocks'
        inverses, the others by their diagonal."""
        out = v / self.diag.reshape(self.diag.shape + (1,) * (v.ndim - 2))
        out[:, self.R] = np.einsum("jrs,js...->jr...", self.Ainv, v[:, self.R])
        return out

    def covariance(self) -> BlockCovariance:
        """The Laplace covariance blocks at this factorisation (μ = 0): see the module docstring."""
        lay, R = self.lay, self.R
        m, n_e = lay.n_models, lay.n_glob
        n_g = self.S.shape[0]
        sinv = sla.cho_solve(self.factor, np.eye(n_g), check_finite=False)
        # Symmetric from here on: S⁻¹_gθ is then S⁻¹_θgᵀ exactly, so judge j's term yS⁻¹_θg·Yg + Yg·S⁻¹_gθyᵀ
        # (of the diagonal below) is twice one product — gathered and multiplied once, not twice.
        sinv = 0.5 * (sinv + sinv.T)
        n_j = lay.n_judges
        var_j = 1.0 / self.diag
        for a, r in enumerate(R.tolist()):  # A_j⁻¹'s diagonal: contiguous rows of AinvT (3x a strided einsum's speed)
            var_j[:, r] = self.AinvT[a, a]
        cov_jg = np.zeros((n_j, lay.n_blocks, n_e))
        cols = _as_slice(R)  # the coupled columns: usually a run (a view of cov_jg)
        var_c, cov_jg[:, cols] = self.coupled_covariance(sinv)
        var_j[:, cols] += var_c
        if len(self.U):
            z_g = self.Z[:, glob_index(lay)]
            z_j = self.Z[:, lay.block(0).start : lay.tau.start].reshape(len(self.U), lay.n_blocks, n_j)
            sinv = sinv - z_g.T @ self.Minv @ z_g
            var_j -= np.einsum("ptj,pq,qtj->jt", z_j, self.Minv, z_j)
            # Σ_pq z_j[p, t, j] M⁻¹[p, q] z_g[q, c], a (p, c) at a time: no (J, K, n_e) temporary.
            low = self.Minv @ z_g[:, m : m + n_e]
            for q in range(len(self.U)):
                z_q = np.ascontiguousarray(z_j[q].T)
                for c in range(n_e):
                    cov_jg[:, :, c] -= z_q * low[q, c]
        return self.blocks(sinv, var_j, cov_jg)

    def blocks(self, glob: np.ndarray, var_j: np.ndarray, cov_jg: np.ndarray) -> BlockCovariance:
        """The published blocks of a covariance (the Laplace one, or the Godambe one of
        :mod:`~biasboard.ranking.composite`): fixed parameters' rows zeroed, a grader's severity read from the
        globals' block (its judge entry unused)."""
        lay = self.lay
        m, n_e = lay.n_models, lay.n_glob
        if not self.all_free:
            f_g, f_j = split(lay, self.free.astype(float))
            glob = glob * f_g[:, None] * f_g[None, :]
            var_j = var_j * f_j
            cov_jg = cov_jg * f_j[:, :, None] * f_g[None, None, m : m + n_e]
        if lay.graders:  # a grader's severity is a global: its variance and covariances are the globals' block's
            at, graders = m + n_e + np.arange(len(lay.graders)), np.array(lay.graders)
            var_j[graders, SEV] = np.diag(glob)[at]
            cov_jg[graders, SEV] = glob[at, m : m + n_e]
        return BlockCovariance(glob_index(lay), 0.5 * (glob + glob.T), var_j, cov_jg)


@dataclass(frozen=True)
class BlockCovariance:
    """Laplace (or Godambe: ``information``) covariance of a judge-blocked fit: what is published, without the
    (KJ)² matrix.

    ``glob`` is the dense covariance of the globals (core indices ``glob_index``: θ, global effects, τ);
    ``judge_var[j, t]`` the variance of judge j's raw entry t (log a_j: of ρ_j − mean ρ, the centred
    value); ``judge_glob[j, t, c]`` its covariance with global effect c (the coefficient of block
    ``layout.global_effects[c]``).
    """

    glob_index: np.ndarray
    glob: np.ndarray
    judge_var: np.ndarray
    judge_glob: np.ndarray
    #: The factorisation these came from (μ = 0), when kept: covariances of any other linear functions of
    #: the core (:func:`row_covariance`: the reference gate's joint covariance of the judges' excesses).
    factor: ArrowFactor | None = field(default=None, repr=False, compare=False)
    #: J, the Hessian of the objective with its parts' weights squared, when these blocks are the Godambe
    #: sandwich H_w⁻¹ J H_w⁻¹ of an ω-weighted fit (:mod:`~biasboard.ranking.composite`): the covariances of other
    #: linear functions are then that sandwich's too (:func:`biasboard.ranking.gate.row_covariance`).
    information: ArrowHessian | None = field(default=None, repr=False, compare=False)

    def block(self, index: slice | int) -> np.ndarray:
        """The covariance of core parameters ``index`` (a slice or one index, among the globals)."""
        pos = np.full(int(self.glob_index.max()) + 1, -1)
        pos[self.glob_index] = np.arange(self.glob_index.size)
        sel = np.atleast_1d(pos[index])
        if np.any(sel < 0):
            raise IndexError("a judge-blocked covariance holds only the globals' block and per-judge variances")
        out = self.glob[np.ix_(sel, sel)]
        return out if isinstance(index, slice) else out[0, 0]


# --------------------------------------------------------------------------- covariance of linear functions


@dataclass(frozen=True)
class RowCovariance:
    """C = V Σ Vᵀ for p linear functions V (p × n_core) of a judge-blocked fit, never as a (KJ)² matrix.

    With Σ = H⁻¹ (the arrowhead inverse, :class:`ArrowFactor`'s constraints by Woodbury)::

        C = V_J A⁻¹ V_Jᵀ  +  Q S⁻¹ Qᵀ  −  P M⁻¹ Pᵀ,     Q = V_G − V_J A⁻¹ X,   P = V Zᵀ

    (``judge``, ``coupled``, ``low``): the first term is block-diagonal over judges (diagonal when each
    row is one judge's entry, as the gate's excesses are), the others have rank ≤ n_G + constraints.  So
    the diagonal costs O(p·n_G) in row slices and a quadratic form dᵀC⁻¹d is one Woodbury solve of
    size n_G — what the reference gate needs for 10⁴–10⁶ voter-judges.
    """

    judge: sp.csr_matrix  # (p, p)
    coupled: sp.csr_matrix  # Q (p, n_G)
    low: np.ndarray  # P (p, n_constraints)
    factor: ArrowFactor

    def _s_solve(self, rhs: np.ndarray) -> np.ndarray:
        return sla.cho_solve(self.factor.factor, rhs, check_finite=False)

    def _low_inv(self) -> np.ndarray:
        return self.factor.Minv if self.low.shape[1] else np.zeros((0, 0))

    def dense(self) -> np.ndarray:
        """C as a dense (p × p) matrix (for a few rows: a rating map, one judge's effects)."""
        q = self.coupled.toarray()
        out = self.judge.toarray() + q @ self._s_solve(q.T) - self.low @ self._low_inv() @ self.low.T
        return 0.5 * (out + out.T)

    def diagonal(self) -> np.ndarray:
        """diag(C), in row slices of :data:`DENSE_ROWS` (O(p·n_G) time, O(DENSE_ROWS·n_G) memory)."""
        out = self.judge.diagonal().astype(float)
        for lo in range(0, out.size, DENSE_ROWS):
            q = self.coupled[lo : lo + DENSE_ROWS].toarray()
            out[lo : lo + DENSE_ROWS] += np.einsum("rc,cr->r", q, self._s_solve(q.T))
        low = self.low
        out -= np.einsum("rc,cd,rd->r", low, self._low_inv(), low)
        return out

    def wald(self, d: np.ndarray) -> tuple[float, int]:
        """(dᵀC⁻¹d, p) by Woodbury around the diagonal judge term; ValueError when that term is not a
        positive diagonal (rows sharing a judge: use :meth:`dense`)."""
        D = self.judge
        diag = D.diagonal()
        if D.count_nonzero() != np.count_nonzero(diag) or not np.all(diag > 0):
            raise ValueError("the Woodbury Wald form needs one positive-variance judge entry per row")
        dinv = 1.0 / diag
        Q, P = self.coupled, self.low
        QD = sp.csr_matrix(Q.multiply(dinv[:, None]))
        S = self.factor.S
        n_g, n_u = S.shape[0], P.shape[1]
        core = np.zeros((n_g + n_u, n_g + n_u))
        core[:n_g, :n_g] = S + (Q.T @ QD).toarray()
        if n_u:
            cross = np.asarray(QD.T @ P)
            core[:n_g, n_g:] = cross
            core[n_g:, :n_g] = cross.T
            core[n_g:, n_g:] = -self.factor.M + P.T @ (P * dinv[:, None])
        rhs = np.concatenate([np.asarray(QD.T @ d).ravel(), P.T @ (d * dinv)])
        value = float(d @ (d * dinv)) - float(rhs @ np.linalg.solve(core, rhs))
        return value, int(d.size)


def row_covariance(factor: ArrowFactor, rows: sp.csr_matrix) -> RowCovariance:
    """The covariance of the linear functions ``rows`` (p × n_core, sparse) at ``factor`` (μ = 0).

    Memory O(nnz(rows) + p·n_G + J·K²): the judge part of each row is multiplied by the block-diagonal
    A⁻¹ (the factor's A_j⁻¹) and then by the sparse couplings, batched over judges.  Fixed
    parameters have zero covariance (as in :meth:`ArrowFactor.covariance`).
    """
    parts = row_parts(factor, rows)
    judge = sp.csr_matrix(parts.PA @ parts.VR.T + parts.rest_rows() @ parts.rest_rows().T)
    Q = sp.csr_matrix(parts.G - coupled_through(factor, parts.PA, factor.sparse_couplings(), factor.Xg))
    low = np.asarray(parts.V @ factor.Z.T) if len(factor.U) else np.zeros((parts.V.shape[0], 0))
    return RowCovariance(judge, Q, low, factor)


@dataclass(frozen=True)
class RowParts:
    """Linear functions V (p × n_core) of a judge-blocked fit split along its factorisation: the globals' part ``G``
    (p × n_G), the coupled judge entries ``VR`` (p × J·R, row j·R + r: judge j's effect R[r]), those outside the
    coupled blocks as (row, judge, effect, value) ``rest``, and ``PA`` = V_J A⁻¹ (the rows through the blocks'
    inverses); fixed parameters' entries dropped, a grader's severity among the globals."""

    V: sp.csr_matrix
    G: sp.csr_matrix
    VR: sp.csr_matrix
    rest: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
    PA: sp.csr_matrix
    factor: ArrowFactor

    def rest_rows(self, curvature: np.ndarray | None = None) -> sp.csr_matrix:
        """The entries outside the coupled blocks (diagonal d there) as rows whose Gram is their covariance:
        v/√d (Laplace), or v·√c/d for the sandwich with J's diagonal ``curvature`` c (J, K) there."""
        row, j, t, value = self.rest
        d = self.factor.diag[j, t]
        scaled = value / np.sqrt(d) if curvature is None else value * np.sqrt(curvature[j, t]) / d
        lay = self.factor.lay
        return sp.csr_matrix(
            (scaled, (row, j * lay.n_blocks + t)), shape=(self.V.shape[0], lay.n_judges * lay.n_blocks)
        )


def row_parts(factor: ArrowFactor, rows: sp.csr_matrix) -> RowParts:
    """``rows`` split along ``factor`` (:class:`RowParts`)."""
    lay, R = factor.lay, factor.R
    jn, k = lay.n_judges, factor.R.size
    V = rows @ sp.diags(factor.free.astype(float))
    p = V.shape[0]
    G = sp.csr_matrix(V[:, glob_index(lay)])
    J = V[:, lay.block(0).start : lay.tau.start].tocoo()
    if lay.graders:  # a grader's severity is among the globals (G), not in its judge's block
        grader = np.zeros(jn, bool)
        grader[list(lay.graders)] = True
        keep = ~((J.col // jn == SEV) & grader[J.col % jn])
        J = sp.coo_matrix((J.data[keep], (J.row[keep], J.col[keep])), shape=J.shape)
    t, j = J.col // jn, J.col % jn
    position = np.full(lay.n_blocks, -1)
    position[R] = np.arange(k)
    coupled = position[t] >= 0
    VR = sp.csr_matrix((J.data[coupled], (J.row[coupled], j[coupled] * k + position[t[coupled]])), shape=(p, jn * k))
    # Entries outside the coupled blocks are a diagonal of their own (no coupling to the globals).
    rest = ~coupled
    PA = VR @ block_diagonal(factor.Ainv)  # rows of V_J A⁻¹
    return RowParts(sp.csr_matrix(V), G, VR, (J.row[rest], j[rest], t[rest], J.data[rest]), sp.csr_matrix(PA), factor)


def coupled_through(
    factor: ArrowFactor, rows: sp.csr_matrix, sparse: Iterable[tuple[int, int, sp.csr_matrix]], Xg: np.ndarray
) -> sp.csr_matrix:
    """``rows`` (p × J·R) times the judges' couplings to the globals (p × n_G): to θ by the pieces' sparse
    (J_p·R × M) matrices ``sparse``, to the global effects by ``Xg`` (J, R, n_e); none to the graders and τ.
    The couplings are H_w's (:meth:`ArrowFactor.sparse_couplings`) or, for the Godambe rows, J's."""
    lay, k = factor.lay, factor.R.size
    p, n_e = rows.shape[0], lay.n_glob
    theta = functools.reduce(operator.add, (sp.csr_matrix(rows[:, j0 * k : j1 * k] @ Xsp) for j0, j1, Xsp in sparse))
    parts = [theta, sp.csr_matrix(rows @ Xg.reshape(lay.n_judges * k, n_e))]
    n_g = factor.S.shape[0]
    if n_g > lay.n_models + n_e:  # the graders' severities and τ: no coupling to any judge
        parts.append(sp.csr_matrix((p, n_g - lay.n_models - n_e)))
    return sp.csr_matrix(sp.hstack(parts))
