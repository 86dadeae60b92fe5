"""The likelihood of both models as ONE pure function of (parameters, shard of cells) → partial sums.

Pairwise part, for a cell of judge j with model a shown first and b second::

    η = a_j (θ_a − θ_b) + γ_j + β_j x̄ + λ_j (s_a − s_b)
    P(a wins) ∝ exp(η/2),  P(b wins) ∝ exp(−η/2),  P(tie) ∝ ν_j = exp(ψ_j)        (Davidson 1970)

so without ties P(a wins) = σ(η) and θ is on the Bradley–Terry logit scale.  x̄ is the cell's mean
*standardised* log length ratio.  γ_j = γ₀ + u_j, β_j = β₀ + b_j, λ_j = λ₀ + l_j; a_j = exp(L_j) with
L_j = ρ_j − Σ_k w_k ρ_k over judges whose discrimination is enabled, w_k judge k's share of their pair verdicts
between two different models (the verdict-weighted mean of log a_j is 0, so θ keeps the scale of the average
verdict's judge, which a judge with a handful of verdicts cannot make uncertain) — unless ordinal scores fix the
scale of θ, or a judge with such verdicts whose a_j is fixed at 1 does (:func:`fixed_scale_judges`), then
L_j = ρ_j.
A self-battle has θ_a − θ_b = 0 and s_a − s_b = 0: it informs γ, β, ν only.

Ordinal part (Katoch et al. 2026, partial-credit many-facet Rasch), for a (judge, model, prompt) with counts n_k of
category k = 0..K−1::

    P(k) ∝ exp(k φ − Σ_{m≤k} τ_m),   φ = θ_m − δ_p − α_j

Naive model: η = θ_a − θ_b and a tie counts as half a win for each side (binomial likelihood on the
fractional counts w_a + t/2, w_b + t/2): the Bradley–Terry of arena leaderboards and of Evalica.

Every sum is over cells, so the objective, gradient and Hessian of a set of cells are the sums of
:func:`partials` over any partition of the cells into shards.  The partials are in
the *effective* coordinates (θ, per-judge γ_j, β_j, λ_j, L_j, ψ_j, α_j, τ) where every cell touches only
its own judge; :class:`Layout` maps them linearly to the free parameters (global + per-judge
deviations), a map that commutes with the sum over shards.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np
import scipy.sparse as sp
from biasboard.ranking.data import PairArrays, ScoreArrays

#: Per-judge blocks, in the same order in the raw and the effective vectors.
JUDGE_BLOCKS: tuple[str, ...] = ("position", "length", "affinity", "discrimination", "tie", "severity")
POS, LEN, AFF, DISC, TIE, SEV = range(6)
#: Style blocks (header, list, bold: LMArena's style control beside length), after the six, in a layout
#: with ``n_style = 3`` only — data without style counts have no such parameters at all (same numbers).
STYLE_BLOCKS: tuple[int, ...] = (6, 7, 8)
STYLE_NAMES: tuple[str, ...] = ("header", "list", "bold")
#: Effects with a global coefficient and per-judge deviations (in the order of the raw globals).
GLOBAL_EFFECTS: tuple[int, ...] = (POS, LEN, AFF, *STYLE_BLOCKS)


def block_name(t: int) -> str:
    """The effect name of block ``t`` (``position`` … ``severity``, ``header``, ``list``, ``bold``)."""
    return JUDGE_BLOCKS[t] if t < len(JUDGE_BLOCKS) else STYLE_NAMES[t - len(JUDGE_BLOCKS)]


@dataclass(frozen=True)
class Layout:
    """Positions of every parameter.

    Raw ("core") vector: θ (M) | γ₀, β₀, λ₀ [, δ₀ (3)] | u (J) | b (J) | l (J) | ρ (J) | ψ (J) | α (J)
    [| d_header (J) | d_list (J) | d_bold (J)] | τ (K−1); the bracketed style parts exist when ``n_style = 3``.
    Diagonal vector: δ_p (P prompts) — kept apart because its Hessian block is diagonal, which the
    solver eliminates by a Schur complement instead of storing a P × P matrix.
    Effective vector: θ (M) | γ_j | β_j | λ_j | L_j | ψ_j | α_j [| δ_j,header | δ_j,list | δ_j,bold] | τ.
    A naive layout has J = 0 and no ordinal part: θ only.
    """

    n_models: int
    n_judges: int
    n_tau: int = 0
    n_prompts: int = 0
    naive: bool = False
    n_style: int = 0  # 0, or 3: the style blocks (header, list, bold) exist
    #: The judges whose severity α_j is one of the globals of a judge-blocked fit (:mod:`~biasboard.ranking.arrowhead`):
    #: the graders of a fit with ordinal scores, so that the ordinal part touches the globals and the prompts only,
    #: never a judge's block.  Empty otherwise (the dense path, or pair cells only).
    graders: tuple[int, ...] = ()

    @property
    def theta(self) -> slice:
        return slice(0, self.n_models)

    @property
    def n_blocks(self) -> int:
        """Per-judge blocks in this layout: the six, plus the style blocks when there are style data."""
        return len(JUDGE_BLOCKS) + self.n_style

    @property
    def global_effects(self) -> tuple[int, ...]:
        """Blocks with a global coefficient: position, length, affinity, and the style blocks if any."""
        return GLOBAL_EFFECTS[: 3 + self.n_style]

    @property
    def eta_effects(self) -> tuple[int, ...]:
        """Blocks acting through η, in the order of the rows of :attr:`DavidsonTerms.z`."""
        return (*ETA_EFFECTS, *STYLE_BLOCKS[: self.n_style])

    @property
    def n_glob(self) -> int:
        return 0 if self.naive else 3 + self.n_style

    def glob(self, effect: int) -> int:
        return self.n_models + GLOBAL_EFFECTS.index(effect)

    def block(self, t: int) -> slice:
        start = self.n_models + self.n_glob + t * self.n_judges
        return slice(start, start + self.n_judges)

    @property
    def tau(self) -> slice:
        start = self.n_models + self.n_glob + self.n_blocks * self.n_judges
        return slice(start, start + self.n_tau)

    @property
    def n_core(self) -> int:
        return self.tau.stop

    def eff_block(self, t: int) -> slice:
        start = self.n_models + t * self.n_judges
        return slice(start, start + self.n_judges)

    @property
    def eff_tau(self) -> slice:
        start = self.n_models + self.n_blocks * self.n_judges
        return slice(start, start + self.n_tau)

    @property
    def n_eff(self) -> int:
        return self.eff_tau.stop


def fixed_scale_judges(disc_mask: np.ndarray, verdicts: np.ndarray | None) -> np.ndarray:
    """Per judge, whether its a_j is fixed at 1 (``disc_mask`` 0) while it has pair verdicts between two different
    models (``verdicts`` > 0, ``Dataset.judge_sums("n_versus")``; None: every judge has some) and some judge's a_j is
    free: its verdicts then set θ's scale (:class:`Spec`).  All False when every a_j is fixed (nothing is left to
    centre) or none is.  Why not every verdict: a self-battle has θ_a − θ_b = 0, so a fixed judge of self-battles
    alone tells nothing of the scale (taken to set it, it left the scale to the priors)."""
    off = np.asarray(disc_mask) <= 0
    if off.all() or not off.any():
        return np.zeros(off.size, bool)
    return off if verdicts is None else off & (np.asarray(verdicts) > 0)


@dataclass(frozen=True)
class Spec:
    """What is fixed during a fit: the layout, which effects each judge has, the covariate scale, weights.

    ``masks[t, j]`` is 1 when judge j has effect block t (0 fixes it at zero: a_j = 1 for discrimination).
    ``style_scale`` holds the RMS of each style covariate (the unit the style effects are fit in).
    """

    layout: Layout
    masks: np.ndarray  # (n_blocks, J) float
    x_scale: float = 1.0
    w_pair: float = 1.0
    w_ord: float = 1.0
    #: Fix a mean of log a_j at 0 — needed when only pairwise data set the scale of θ; with ordinal scores
    #: (where a_j does not enter) the common scale of a_j is identified and left free.
    centre_discrimination: bool = True
    #: Per judge, its weight in that mean (:meth:`disc_centring`); None: every enabled judge alike.  The fit
    #: weighs each judge by its share of the pair verdicts between two different models, so a judge whose a_j the
    #: data barely measure (mostly its prior) does not make the scale of θ, and every interval at the board's ends,
    #: uncertain — self-battles aside: θ_a − θ_b = 0 there, so they tell nothing of a_j (a judge of self-battles
    #: alone, its a_j the prior's, took a quarter of the scale's weight on a simulated board: slope on the truth
    #: 1.47 against the oracle's 1.36).
    disc_weights: np.ndarray | None = None
    #: Keep the per-judge Hessian as blocks and eliminate them by a Schur complement (many judges; pair
    #: cells only): :mod:`biasboard.ranking.arrowhead`.
    judge_blocks: bool = False
    #: ``tied[t, j] = 1``: judge j has no deviation of its own for effect t (position, length, affinity, style), so
    #: its effect is the global coefficient — the reference's (see ``ModelConfig.reference``).  None: no tie.
    tied: np.ndarray | None = None
    style_scale: np.ndarray | None = None  # (3,) when the layout has style blocks

    def unit(self, t: int) -> float:
        """Raw-covariate units per fitted unit of block ``t`` (1 / scale for length and style, else 1)."""
        if t == LEN:
            return 1.0 / self.x_scale
        if t in STYLE_BLOCKS and self.style_scale is not None:
            return 1.0 / float(self.style_scale[STYLE_BLOCKS.index(t)])
        return 1.0

    def deviation_mask(self, t: int) -> np.ndarray:
        """Where judge j's own deviation of effect t enters η: the effect is on and not tied to the global."""
        return self.masks[t] if self.tied is None or t >= len(self.tied) else self.masks[t] * (1.0 - self.tied[t])

    @cached_property
    def scale_set_by_fixed_judge(self) -> bool:
        """Whether a judge with pair verdicts has its a_j fixed at 1 (discrimination off) beside judges whose a_j is
        free: that judge's verdicts then set θ's scale, and the free log a_j are left uncentred (L_j = ρ_j), shrunk
        toward their own common mean rather than the fixed judge's 0
        (:func:`~biasboard.ranking.problem.free_discrimination_mean`).

        Why not centred as well: fixing the free judges' weighted mean of log a_j at 0 on top of a_k = 1 is a
        restriction of the model, not a convention — it forces their discriminations to average the fixed judge's
        (a fixed judge at 1 beside three at 1.5: θ's slope on the truth 1.34, the free a_j 0.98–1.03, 82 nats
        worse than the unrestricted fit; docs/design-notes.md, "Scale of θ")."""
        return self.centre_discrimination and bool(fixed_scale_judges(self.masks[DISC], self.disc_weights).any())

    def disc_centring(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(judges, weights) of the centring L_j = ρ_j − Σ_k w_k ρ_k of log a_j (weights over those judges, summing
        to 1), or None when log a_j is not centred (grades set the scale, a judge whose a_j is fixed at 1 does —
        :attr:`scale_set_by_fixed_judge` — or one judge alone: a_j = 1)."""
        if not self.centre_discrimination or self.scale_set_by_fixed_judge:
            return None
        on = np.flatnonzero(self.masks[DISC] > 0)
        if on.size < 2:
            return None
        if self.disc_weights is None:
            return on, np.full(on.size, 1.0 / on.size)
        w = np.asarray(self.disc_weights, float)[on]
        return on, w / w.sum() if w.sum() > 0 else np.full(on.size, 1.0 / on.size)

    def centred_disc(self, eff: np.ndarray, core: np.ndarray, transpose: bool = False) -> np.ndarray:
        """``eff`` with the centring of log a_j applied in O(J): E @ core from ``effective_map(centred=False) @ core``
        (``transpose``: Eᵀ g from ``effective_map(centred=False).T @ g``, ``core`` the effective gradient)."""
        centring = self.disc_centring()
        if centring is None:
            return eff
        on, w = centring
        lay = self.layout
        if transpose:
            eff[lay.block(DISC).start + on] -= w * core[lay.eff_block(DISC).start + on].sum()
        else:
            eff[lay.eff_block(DISC).start + on] -= w @ core[lay.block(DISC).start + on]
        return eff

    def effective_map(self, centred: bool = True) -> sp.csr_matrix:
        """The sparse linear map E with effective = E @ raw (constant over a fit).

        ``centred=False`` leaves out the centring of log a_j (L_j = ρ_j instead of ρ_j − mean ρ): its J²
        entries are applied as an O(J) correction by the judge-blocked path instead.
        """
        lay = self.layout
        if lay.naive:
            return sp.identity(lay.n_models, format="csr")
        # Every effective value is one raw entry, plus its global coefficient for a global effect (a column
        # left of the judge's): so E is built as two (column, value) slots per row, the left one for the global,
        # and the zeros dropped — straight into CSR, sorted, with no COO conversion (its sort and duplicate
        # sums: 13 ms at 50k judges).  The centring's J² entries, when asked for, are added as their own matrix.
        n = lay.n_eff
        col = np.zeros((n, 2), np.int32 if lay.n_core < np.iinfo(np.int32).max else np.int64)
        val = np.zeros((n, 2))
        m = np.arange(lay.n_models)
        col[m, 1], val[m, 1] = m, 1.0
        jj = np.arange(lay.n_judges)
        globs = lay.global_effects
        centring = None
        for t in range(lay.n_blocks):
            eff, raw = lay.eff_block(t), lay.block(t).start + jj
            col[eff, 1] = raw
            mask = self.masks[t]
            if t == DISC and self.centre_discrimination and not self.scale_set_by_fixed_judge:
                centre = self.disc_centring()
                if centre is not None:  # L_j = ρ_j − weighted mean over enabled judges; one judge alone: a_j = 1
                    on, w = centre
                    val[eff.start + on, 1] = 1.0
                    if centred:
                        rr, cc = np.meshgrid(eff.start + on, raw[on], indexing="ij")
                        centring = sp.csr_matrix(
                            (np.broadcast_to(-w, rr.shape).ravel(), (rr.ravel(), cc.ravel())), shape=(n, lay.n_core)
                        )
                continue
            val[eff, 1] = self.deviation_mask(t) if t in globs else mask
            if t in globs:
                col[eff, 0], val[eff, 0] = lay.glob(t), mask
        tt = np.arange(lay.n_tau)
        col[lay.eff_tau.start + tt, 1], val[lay.eff_tau.start + tt, 1] = lay.tau.start + tt, 1.0
        keep = val != 0
        kept = np.flatnonzero(keep)  # then gathers: 3x a boolean mask's indexing
        indptr = np.zeros(n + 1, col.dtype)  # rows' kept slots as bytes: summed 6x faster than over axis 1
        np.cumsum(keep[:, 0].view(np.uint8) + keep[:, 1].view(np.uint8), dtype=col.dtype, out=indptr[1:])
        E = sp.csr_matrix((np.take(val, kept), np.take(col, kept), indptr), shape=(n, lay.n_core))
        return E if centring is None else E + centring


@dataclass
class Partials:
    """Sums over a shard's cells, in effective coordinates, of the negative log-likelihood f and its derivatives."""

    f: float
    g: np.ndarray  # (n_eff,)
    H: np.ndarray  # (n_eff, n_eff) dense
    g_diag: np.ndarray  # (P,)
    H_diag: np.ndarray  # (P,)
    H_cross: np.ndarray  # (n_eff, P)

    def __iadd__(self, other: Partials) -> Partials:
        self.f += other.f
        self.g += other.g
        self.H += other.H
        self.g_diag += other.g_diag
        self.H_diag += other.H_diag
        self.H_cross += other.H_cross
        return self

    @staticmethod
    def zeros(lay: Layout) -> Partials:
        return Partials(
            0.0,
            np.zeros(lay.n_eff),
            np.zeros((lay.n_eff, lay.n_eff)),
            np.zeros(lay.n_prompts),
            np.zeros(lay.n_prompts),
            np.zeros((lay.n_eff, lay.n_prompts)),
        )


@dataclass(frozen=True)
class Shard:
    """A part of the cells: pair cells and (optionally) ordinal cells."""

    pairs: PairArrays | None
    scores: ScoreArrays | None = None
    #: What :meth:`chunks` and :meth:`pair_slices` made, kept with the shard: they depend on the cells (and the spec)
    #: alone, and an objective passes over the same shards many times.
    _memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def chunks(self, size: int) -> list[Shard]:
        """Consecutive sub-shards of at most ``size`` cells each (views; made on the first call, then kept)."""
        made = self._memo.get(size)
        if made is None:
            n_pairs = 0 if self.pairs is None else len(self.pairs)
            n_scores = 0 if self.scores is None else len(self.scores)
            made = self._memo[size] = [
                Shard(
                    None if self.pairs is None or start >= n_pairs else self.pairs.take(slice(start, start + size)),
                    None if self.scores is None or start >= n_scores else self.scores.take(slice(start, start + size)),
                )
                for start in range(0, max(n_pairs, n_scores, 1), size)
            ]
        return made

    def pair_slices(self, spec: Spec) -> list[tuple[PairArrays, PairPrep]]:
        """The pair cells in slices of at most :data:`PAIR_SLICE_CELLS`, each with its :class:`PairPrep` under
        ``spec`` (made on the first call for that spec, then kept)."""
        pairs = self.pairs
        assert pairs is not None
        kept = self._memo.get("pair_slices")
        if kept is None or kept[0] is not spec:
            parts = [
                pairs.take(slice(start, start + PAIR_SLICE_CELLS)) for start in range(0, len(pairs), PAIR_SLICE_CELLS)
            ]
            kept = self._memo["pair_slices"] = (spec, [(part, PairPrep.of(part, spec)) for part in parts])
        return kept[1]


#: Pair cells the dense partials work on at a time (a :class:`Shard` chunk's pair cells are split into slices of
#: this many).  About twenty arrays of a slice's cells are live at once: at 32k cells (256 KB each) they stay in a
#: core's cache, at 131k they do not.  Measured on 530k cells (100 models, 8 judges), the machine's 2 cores busy:
#: gradient pass 37 -> 22 ms, Hessian pass 93 -> 61 ms; 16k cells the same, 8k slower (Python's cost per slice).
PAIR_SLICE_CELLS: int = 1 << 15


@dataclass(frozen=True)
class PairPrep:
    """What the likelihood of a slice of pair cells reads besides the parameters and the cells' own columns, made
    once per slice (:meth:`Shard.pair_slices`, :class:`BlockSlice`): a gradient pass is a few dozen passes over
    the cells' arrays, so the ones that do not depend on the parameters are not redone on every pass.

    ``xs`` and ``style`` are the covariates in fitted units (x / x_scale, style / style scale), ``dw`` the win
    difference w_a − w_b, ``acts`` which η rows are not all zero (:attr:`DavidsonTerms.acts`), ``runs`` each
    judge's run of cells (:func:`judge_runs`; None: not sorted by judge, or many judges).
    """

    xs: np.ndarray
    style: tuple[np.ndarray, ...]
    dw: np.ndarray
    acts: tuple[bool, ...]
    runs: list[tuple[int, slice]] | None
    #: The cells' judges are judges[0] … judges[1] − 1 (a judge-blocked slice's few of the layout's many).
    judges: tuple[int, int] = (0, 0)

    @staticmethod
    def of(pairs: PairArrays, spec: Spec, first: int = 0, n_judges: int | None = None) -> PairPrep:
        """The slice's prep; its ``runs`` over judges ``first`` … ``first + n_judges − 1`` (the layout's by
        default: a judge-blocked slice passes the few judges it holds, of the layout's many)."""
        lay = spec.layout
        xs = pairs.x / spec.x_scale
        style: tuple[np.ndarray, ...] = ()
        if lay.n_style:
            assert pairs.style is not None and spec.style_scale is not None, "a style layout needs style cells"
            style = tuple(pairs.style[:, k] / spec.style_scale[k] for k in range(len(STYLE_BLOCKS)))
        rows = dict(zip([t for t in lay.eta_effects if t != DISC], [pairs.pos, xs, pairs.ds, *style], strict=True))
        acts = tuple(t == DISC or _nonzero(rows[t]) for t in lay.eta_effects)
        runs = judge_runs(pairs.j, lay.n_judges if n_judges is None else n_judges, first)
        judges = (int(pairs.j.min()), int(pairs.j.max()) + 1) if len(pairs) else (0, 0)
        return PairPrep(xs, style, pairs.win_a - pairs.win_b, acts, runs, judges)


def _laplacian_from_pairs(a: np.ndarray, b: np.ndarray, w: np.ndarray, m: int) -> np.ndarray:
    """Σ_c w_c (e_a − e_b)(e_a − e_b)ᵀ as a dense M × M matrix, via one bincount (self-pairs cancel)."""
    return _laplacian(a * m + b, w, m)


def _laplacian(key: np.ndarray, w: np.ndarray, m: int) -> np.ndarray:
    """:func:`_laplacian_from_pairs` from the cells' pair keys a·M + b."""
    weights = np.bincount(key, weights=w, minlength=m * m).reshape(m, m)
    out = -(weights + weights.T)
    out[np.diag_indices(m)] += weights.sum(axis=0) + weights.sum(axis=1)
    return out


def _signed_bincount(a, b, w, size):
    return np.bincount(a, weights=w, minlength=size) - np.bincount(b, weights=w, minlength=size)


#: Keys whose runs of equal values are at least this long on average are summed by segments (:class:`KeyRuns`).
RUN_SUMS: int = 4


@dataclass(frozen=True)
class KeyRuns:
    """A slice's cells' keys (their entries) in runs of equal values, where they come in long runs (an LLM judge's
    cells sorted by model a, then b): sums per key by segment (``np.add.reduceat``, after one gather when the keys
    are not sorted).  A bincount adds such cells into the same bin one after the other, each add waiting for the
    last: 5 bincounts over both ends took 0.85-0.91 ms per 32k cells, the runs' sums of the 5 rows 0.33.
    ``order`` None: sorted."""

    order: np.ndarray | None
    starts: np.ndarray  # each run's first position (in sorted order)
    keys: np.ndarray  # each run's key, increasing

    @staticmethod
    def of(keys: np.ndarray) -> KeyRuns | None:
        """The runs of ``keys``, or None when they are shorter than :data:`RUN_SUMS` on average (a bincount then)."""
        order = None
        if not bool(np.all(keys[1:] >= keys[:-1])):
            # Keys of a few judges' entries are small: sorted as 1-2 byte integers, numpy's stable sort is a radix
            # sort (the same order: 0.2-0.3 against 1.7 ms per 32k cells as intp).
            high = int(keys.max())
            small = high < 1 << 16 and int(keys.min()) >= 0
            order = np.argsort(keys.astype(np.min_scalar_type(high)) if small else keys, kind="stable")
        ordered = keys if order is None else keys[order]
        starts = np.flatnonzero(np.concatenate([[True], ordered[1:] != ordered[:-1]]))
        if starts.size * RUN_SUMS > keys.size:
            return None
        return KeyRuns(order, starts, ordered[starts])

    def sums(self, w: np.ndarray) -> np.ndarray:
        """Σ of ``w`` (…, cells) over each run: (…, runs)."""
        return np.add.reduceat(w if self.order is None else np.take(w, self.order, axis=-1), self.starts, axis=-1)


def _theta_gradient(sl: BlockSlice, w: np.ndarray, m: int) -> np.ndarray:
    """Σ_c w_c (e_a − e_b) over a judge-blocked slice's cells: by one bincount over the pair keys a·M + b (half the
    items of a bincount per side; 0.06 against 0.08-0.18 ms per 32k cells at M = 100) and the M × M sums' rows
    minus columns, when M² is not above the cells; else a bincount per side."""
    if m * m > len(w):
        return _signed_bincount(sl.pairs.a, sl.pairs.b, w, m)
    pairs = np.bincount(sl.pair_key, weights=w, minlength=m * m).reshape(m, m)
    return pairs.sum(axis=1) - pairs.sum(axis=0)


@dataclass
class DavidsonTerms:
    """Per-cell pieces of the Davidson pair likelihood, shared by the dense and the judge-blocked partials.

    ``z[i]`` = ∂η/∂(effective block ``layout.eta_effects[i]``) (position, length, affinity, discrimination,
    then the style blocks when the layout has them; the first four rows are indexed by their block); ``g_*`` and
    ``h_*`` are the cells' first and second derivatives of −log L in η and ψ (weighted); ``f`` is −log L.
    ``acts[i]`` is False when row ``z[i]`` is 0 on every cell of the slice (no affinity on a slice of human
    voters' cells: the cells come sorted by judge), so its sums, all zeros, can be skipped; never for
    discrimination, whose θ cross term does not vanish with z.
    """

    disc: np.ndarray
    z: tuple[np.ndarray, ...]  # rows, not stacked: the position and affinity rows are the cells' own arrays
    q: np.ndarray
    f: float
    g_eta: np.ndarray
    g_psi: np.ndarray
    acts: tuple[bool, ...]
    h_eta: np.ndarray | None = None
    h_eta_psi: np.ndarray | None = None
    h_psi: np.ndarray | None = None
    #: (p_a, p_b, p_t, p_a − p_b) when the ``h_*`` were not made: :meth:`add_hessian` makes them in these arrays
    #: (the difference None when :meth:`for_hessian` let it go: made again there).
    probs: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None] | None = None

    def for_hessian(self) -> DavidsonTerms:
        """These terms as a caller keeps them for the Hessian at the same point (:meth:`add_hessian`): without
        ``g_psi`` (read by the gradient only; left empty) and the probabilities' difference (made again by one
        subtraction, the same values): 16 bytes a cell less to hold (10 MB at 647k cells)."""
        probs = None if self.probs is None else (*self.probs[:3], None)
        return replace(self, g_psi=np.empty(0), probs=probs)

    def arrays(self) -> list[np.ndarray]:
        """The per-cell arrays these terms own (made by :func:`davidson_terms`, not views of the cells' columns):
        what the next pass over the same slice may write its terms into (``spare``) once these are done with."""
        owned = [self.disc, self.q, self.g_eta, self.g_psi, self.h_eta, self.h_eta_psi, self.h_psi, *(self.probs or ())]
        arrays = {id(a): a for a in owned if a is not None and a.size == self.disc.size}  # (h_η is p_a's array)
        return list(arrays.values())

    def add_hessian(self, n: np.ndarray, wgt: float) -> None:
        """The ``h_*`` from the kept probabilities (``n``: the cells' battles, ``wgt``: the pair weight), as
        :func:`davidson_terms` makes them (same arithmetic, same values); a no-op when they exist."""
        if self.h_eta is not None:
            return
        assert self.probs is not None
        p_a, p_b, p_t, diff = self.probs
        self.probs = None
        if diff is None:  # (let go by for_hessian) the same subtraction as davidson_terms'
            diff = p_a - p_b
        # Made in the probabilities' own arrays (theirs alone, consumed here): no fresh array, and each product in
        # the order of wgt·0.25·n·((p_a + p_b) − diff²), wgt·(−0.5)·n·diff·p_t and wgt·n·p_t·(1 − p_t).
        h_eta = np.add(p_a, p_b, out=p_a)
        scratch = np.multiply(diff, diff, out=p_b)
        h_eta -= scratch
        h_eta *= np.multiply(n, wgt * 0.25, out=scratch)
        h_eta_psi = np.multiply(n, wgt * (-0.5), out=p_b)
        h_eta_psi *= diff
        h_eta_psi *= p_t
        h_psi = np.multiply(n, wgt, out=diff)
        h_psi *= p_t
        h_psi *= np.subtract(1.0, p_t, out=p_t)
        self.h_eta, self.h_eta_psi, self.h_psi = h_eta, h_eta_psi, h_psi


def davidson_terms(
    eff: np.ndarray,
    pairs: PairArrays,
    spec: Spec,
    hessian: bool = True,
    prep: PairPrep | None = None,
    spare: list[np.ndarray] | None = None,
    psi_gradient: bool = True,
) -> DavidsonTerms:
    """η, the Davidson probabilities and the per-cell derivatives of one slice of pair cells.

    Without ``hessian`` the second derivatives are left to :meth:`DavidsonTerms.add_hessian` (the
    probabilities are kept).  Without ``psi_gradient`` ``g_psi`` is left empty: a pass that wants θ's gradient
    only (:func:`block_theta_partials`) reads no ∂f/∂ψ, and its three passes over the cells are skipped.
    ``prep`` is the slice's :class:`PairPrep` when the caller keeps it (made here
    otherwise).  ``spare``: arrays of the slice's length the caller is done with (the last pass's terms,
    :meth:`DavidsonTerms.arrays`), written over here (consumed) instead of fresh ones for the terms that outlive
    the call: fresh memory each pass was handed back to the kernel between passes and faulted in again.
    """
    lay = spec.layout
    prep = PairPrep.of(pairs, spec) if prep is None else prep
    size = len(pairs)
    spare = [] if spare is None else spare

    def fresh() -> np.ndarray:
        return spare.pop() if spare else np.empty(size)

    theta = eff[lay.theta]
    wgt = spec.w_pair
    j, runs = pairs.j, prep.runs
    blk = [eff[lay.eff_block(t)] for t in range(lay.n_blocks)]
    # a_j = exp(L_j) for the slice's judges only (a slice of voters holds ~6.5k of 50k: the rest, never read, unset).
    lo, hi = prep.judges
    a_j = np.empty(lay.n_judges)
    np.exp(blk[DISC][lo:hi], out=a_j[lo:hi])
    disc = _per_cell(a_j, j, runs, out=fresh())
    xs = prep.xs
    # z_i = ∂η/∂(effective block lay.eta_effects[i]): position, length, affinity, discrimination, style.
    q = np.take(theta, pairs.a, out=fresh(), mode="clip")  # (the models' codes are < M by construction)
    q -= theta[pairs.b]
    q *= disc
    # pos = 0 where the shown order is unknown: γ_j does not act there (and is not learnt from those cells).
    z = (pairs.pos, xs, pairs.ds, q, *prep.style)
    # η = q + γ_j pos + λ_j x + β_j ds (+ style), summed in that order, in place: a gradient pass is a few dozen
    # passes over the cells' arrays, each about as costly as an exponential, so every temporary saved counts.
    eta = _per_cell(blk[POS], j, runs, pairs.pos)
    eta += q
    term = np.empty_like(eta)
    acts = dict(zip(lay.eta_effects, prep.acts, strict=True))
    for t, row in [(LEN, xs), (AFF, pairs.ds), *zip(STYLE_BLOCKS[: lay.n_style], prep.style, strict=True)]:
        if acts[t]:  # a row that is 0 on every cell (a voter's affinity) adds nothing: no gather, no pass
            eta += _per_cell(blk[t], j, runs, row, out=term)
    psi = _per_cell(blk[TIE], j, runs)
    half = eta
    half *= 0.5
    # P ∝ (e^{η/2}, e^{−η/2}, e^ψ), each scaled by e^{−top} (top their largest exponent: no overflow, the sum in
    # [1, 3]): three exponentials and one log per cell, half the transcendentals of nested logaddexp.
    top = np.abs(half)
    np.maximum(top, psi, out=top)
    p_a = np.subtract(half, top, out=fresh())
    p_b = np.add(half, top, out=fresh())
    np.negative(p_b, out=p_b)  # −(η/2 + top) = −η/2 − top, bit for bit
    p_t = np.subtract(psi, top, out=fresh())
    for e in (p_a, p_b, p_t):
        np.exp(e, out=e)
    total = p_a + p_b
    total += p_t
    log_norm = np.log(total, out=fresh())
    log_norm += top
    inv = np.divide(1.0, total, out=total)
    for e in (p_a, p_b, p_t):
        e *= inv
    n = pairs.n
    dw = prep.dw
    # Σ w_a η/2 − w_b η/2 + t ψ − n log Z as three dot products (the cells' sum, not a sum of per-cell terms).
    f = -wgt * (_dot(dw, half) + _dot(pairs.tie, psi) - _dot(n, log_norm))
    diff = p_a - p_b
    # w (−(w_a − w_b)/2 + n (p_a − p_b)/2) and w (n p_t − t), bit for bit, in place (halving is exact).
    g_eta = np.multiply(n, diff, out=log_norm)
    g_eta -= dw
    g_eta *= 0.5 * wgt
    g_psi = np.empty(0)
    if psi_gradient:
        g_psi = np.multiply(n, p_t, out=top)
        g_psi -= pairs.tie
        g_psi *= wgt
    terms = DavidsonTerms(disc, z, q, f, g_eta, g_psi, prep.acts, probs=(p_a, p_b, p_t, diff))
    if hessian:
        terms.add_hessian(n, wgt)
    return terms


def _per_cell(
    values: np.ndarray,
    j: np.ndarray,
    runs: list[tuple[int, slice]] | None,
    row: np.ndarray | None = None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Each cell's judge value ``values[j]``, times ``row`` when given (into ``out`` when given).

    Cells in runs by judge (:func:`judge_runs`): the value is a scalar over each run (a fill, or one multiply),
    not a gather over the cells — the same products, bit for bit.  Otherwise a gather: j are the cells' judge
    codes (< n_judges by construction), so take's mode="clip" changes nothing but skips the bounds-checked
    buffer numpy makes for out= otherwise.
    """
    if runs is None:
        out = np.take(values, j, out=out, mode="clip")
        if row is not None:
            out *= row
        return out
    out = np.empty(j.size) if out is None else out
    for judge, cells in runs:
        if row is None:
            out[cells] = values[judge]
        else:
            np.multiply(row[cells], values[judge], out=out[cells])
    return out


def _dot(x: np.ndarray, y: np.ndarray) -> float:
    """Σ x·y over the cells by numpy's own vectorised loop (einsum), not BLAS: a multi-threaded BLAS dot of a
    chunk of cells is slower on a busy machine than one thread, and the caller may not have limited BLAS."""
    return float(np.einsum("i,i->", x, y))


def _nonzero(row: np.ndarray) -> bool:
    """Whether ``row`` has an entry other than 0 (NaN counts), by its max and min: two vectorised reductions."""
    return bool(row.size) and bool(row.max() != 0 or row.min() != 0)


#: The judge effects that act through η (the tie propensity acts through ψ instead).
ETA_EFFECTS: tuple[int, ...] = (POS, LEN, AFF, DISC)


def _add_value_and_gradient(
    out: Partials | BlockPartials,
    lay: Layout,
    pairs: PairArrays,
    tm: DavidsonTerms,
    runs: list[tuple[int, slice]] | None,
) -> None:
    """Add the pairs' log-likelihood and its gradient to ``out`` (the dense partials; the judge-blocked ones share
    :func:`_judge_gradient`).

    θ gets ∂f/∂η times the discrimination (signed: +a for the first-shown model, −b for the second); each
    judge effect gets ∂f/∂η times its column of ``z``; the tie propensity gets ∂f/∂ψ.  ``runs``: the cells'
    :func:`judge_runs`.
    """
    out.f += tm.f
    out.g[lay.theta] += _signed_bincount(pairs.a, pairs.b, tm.g_eta * tm.disc, lay.n_models)
    acting = [i for i in range(len(lay.eta_effects)) if tm.acts[i]]
    sums = _judge_gradient(tm, acting, pairs.j, lay.n_judges, runs)
    for i, total in zip([*acting, None], sums, strict=True):
        out.g[lay.eff_block(TIE if i is None else lay.eta_effects[i])] += total


def _judge_gradient(
    tm: DavidsonTerms, acting: list[int], j: np.ndarray, j_count: int, runs: list[tuple[int, slice]] | None
) -> list[np.ndarray]:
    """Each judge's Σ ∂f/∂η·z over its cells for the η rows ``acting``, then its Σ ∂f/∂ψ (j_count each).

    ``j``: the cells' judges (< j_count); ``runs``: their :func:`judge_runs` over judges 0 … j_count − 1, or
    None: a bincount per sum."""
    if runs is None:
        sums = [np.bincount(j, weights=tm.g_eta * tm.z[i], minlength=j_count) for i in acting]
        sums.append(np.bincount(j, weights=tm.g_psi, minlength=j_count))
        return sums
    # Each judge's sums over its run of cells: dot products, not a bincount per effect.
    per_judge = np.zeros((len(acting) + 1, j_count))
    for judge, cells in runs:
        g_eta = tm.g_eta[cells]
        for k, row in enumerate(acting):  # a dot per row: no stacked copy of the rows
            per_judge[k, judge] = _dot(tm.z[row][cells], g_eta)
        per_judge[-1, judge] = tm.g_psi[cells].sum()
    return list(per_judge)


#: Up to this many judges (the dense path's few LLM judges) a judge's sums are taken over its run of cells by
#: small matrix products when the cells come sorted by judge, as the coded cells do.
RUN_JUDGES: int = 64


def judge_runs(j: np.ndarray, j_count: int, first: int = 0) -> list[tuple[int, slice]] | None:
    """(judge, its cells) for every judge with cells when the cells are sorted by judge and there are at most
    :data:`RUN_JUDGES` judges, ``first`` … ``first + j_count − 1``; None otherwise (the sums are then bincounts)."""
    if j_count > RUN_JUDGES or not j.size or not bool(np.all(j[1:] >= j[:-1])):
        return None
    bounds = np.searchsorted(j, np.arange(first, first + j_count + 1))
    return [
        (first + judge, slice(bounds[judge], bounds[judge + 1]))
        for judge in range(j_count)
        if bounds[judge + 1] > bounds[judge]
    ]


def _theta_cross_rows(
    tm: DavidsonTerms, eta_types: tuple[int, ...], hd: np.ndarray, width: int | None = None
) -> tuple[list[int], np.ndarray]:
    """The blocks and per-cell weights (one row each, made in place in one array) of the θ × judge-block Hessian
    entries: h_η·a_j·z for each η effect (plus ∂f/∂η·a_j for discrimination, since ∂²η/∂θ_a∂L_j = a_j) and the
    tie block's h_ηψ·a_j; an effect whose z is 0 on every cell (``tm.acts``) has none.

    ``hd`` is h_η·a_j (the caller's: the θ block's weights are hd·a_j).  The rows are ``width`` long when given
    (the weights in their first cells' columns, the rest the caller's), else a column a cell."""
    assert tm.h_eta_psi is not None
    acting = [i for i in range(len(eta_types)) if tm.acts[i]]
    n = tm.disc.size
    rows = np.empty((len(acting) + 1, n if width is None else width))
    tie = rows[-1, :n]
    for row, i in zip(rows[:, :n], acting, strict=False):
        np.multiply(hd, tm.z[i], out=row)
        if eta_types[i] == DISC:
            row += np.multiply(tm.g_eta, tm.disc, out=tie)  # the tie row, made last, as scratch
    np.multiply(tm.h_eta_psi, tm.disc, out=tie)
    return [*(eta_types[i] for i in acting), TIE], rows


def _pair_partials(
    eff: np.ndarray,
    pairs: PairArrays,
    spec: Spec,
    out: Partials,
    hessian: bool = True,
    slices: list[tuple[PairArrays, PairPrep]] | None = None,
) -> None:
    """Add the pair cells' partials to ``out``; the Davidson ones a slice at a time (``slices``: the cells' own,
    :meth:`Shard.pair_slices`; the cells as one slice when not given)."""
    lay = spec.layout
    if not lay.naive:
        for part, prep in [(pairs, PairPrep.of(pairs, spec))] if slices is None else slices:
            _davidson_partials(eff, part, spec, out, hessian, prep)
        return
    m_count = lay.n_models
    a, b = pairs.a, pairs.b
    wgt = spec.w_pair
    # Naive: ties as half wins: binomial log-likelihood of (w_a + t/2) successes in n trials.
    s_a = pairs.win_a + 0.5 * pairs.tie
    theta = eff[lay.theta]
    eta = theta[a] - theta[b]
    log_p = -np.logaddexp(0.0, -eta)
    log_q = -np.logaddexp(0.0, eta)
    out.f -= wgt * float(np.sum(s_a * log_p + (pairs.n - s_a) * log_q))
    p = np.exp(log_p)
    g_eta = wgt * (pairs.n * p - s_a)
    out.g[lay.theta] += _signed_bincount(a, b, g_eta, m_count)
    if hessian:
        h_eta = wgt * pairs.n * p * (1.0 - p)
        out.H[lay.theta, lay.theta] += _laplacian_from_pairs(a, b, h_eta, m_count)


def _davidson_partials(
    eff: np.ndarray, pairs: PairArrays, spec: Spec, out: Partials, hessian: bool, prep: PairPrep
) -> None:
    """Add one slice of pair cells' Davidson partials (value, gradient, dense Hessian) to ``out``."""
    lay = spec.layout
    m_count, j_count = lay.n_models, lay.n_judges
    a, b, j = pairs.a, pairs.b, pairs.j
    tm = davidson_terms(eff, pairs, spec, hessian, prep)
    disc, z, q, g_eta = tm.disc, tm.z, tm.q, tm.g_eta
    _add_value_and_gradient(out, lay, pairs, tm, prep.runs)
    th = lay.theta
    eta_types = lay.eta_effects
    if not hessian:
        return
    h_eta, h_eta_psi, h_psi = tm.h_eta, tm.h_eta_psi, tm.h_psi
    assert h_eta is not None and h_eta_psi is not None and h_psi is not None

    # θ block: Laplacian of the pairs and the θ × per-judge cross terms.
    hd = h_eta * disc
    idx_a = a * j_count + j
    idx_b = b * j_count + j
    size = m_count * j_count
    for t, w in zip(*_theta_cross_rows(tm, eta_types, hd), strict=True):
        block = _signed_bincount(idx_a, idx_b, w, size).reshape(m_count, j_count)
        cols = lay.eff_block(t)
        out.H[th, cols] += block
        out.H[cols, th] += block.T
    out.H[th, th] += _laplacian_from_pairs(a, b, np.multiply(hd, disc, out=hd), m_count)  # h_η·a_j·a_j

    # Per-judge blocks: every cell touches only its own judge, so each (t, t') pair is a diagonal.
    jj = np.arange(j_count)
    blocks = _judge_blocks(j, j_count, z, h_eta, h_eta_psi, h_psi, prep.runs)
    k_eta = len(eta_types)
    disc_i = eta_types.index(DISC)
    blocks[:, disc_i, disc_i] += np.bincount(j, weights=g_eta * q, minlength=j_count)  # ∂²η/∂L_j² = q
    rows = [lay.eff_block(t).start + jj for t in (*eta_types, TIE)]
    for i1 in range(k_eta + 1):
        for i2 in range(k_eta + 1):
            out.H[rows[i1], rows[i2]] += blocks[:, i1, i2]


def _judge_blocks(
    j: np.ndarray,
    j_count: int,
    z: tuple[np.ndarray, ...],
    h_eta: np.ndarray,
    h_eta_psi: np.ndarray,
    h_psi: np.ndarray,
    runs: list[tuple[int, slice]] | None,
) -> np.ndarray:
    """Each judge's (K + 1)² block Σ_c y_c y_cᵀ-weighted of the η rows ``z`` and ψ: [z h_η zᵀ, z h_ηψ; ·, h_ψ].

    Cells sorted by judge and few judges (``runs``, :func:`judge_runs`): one small matrix product per judge's run
    of cells (the (K + 1)(K + 2)/2 weighted sums, 14 ms against 44 ms for a bincount per entry on 530k cells);
    otherwise a bincount per entry.
    """
    k = len(z)
    out = np.zeros((j_count, k + 1, k + 1))
    if runs is not None:
        zs = np.stack(z)
        zh = zs * h_eta
        for judge, cells in runs:
            out[judge, :k, :k] = zh[:, cells] @ zs[:, cells].T
            out[judge, :k, k] = zs[:, cells] @ h_eta_psi[cells]
            out[judge, k, k] = h_psi[cells].sum()
    else:
        for i1 in range(k):
            for i2 in range(i1, k):
                out[:, i1, i2] = np.bincount(j, weights=h_eta * z[i1] * z[i2], minlength=j_count)
                out[:, i2, i1] = out[:, i1, i2]
            out[:, i1, k] = np.bincount(j, weights=h_eta_psi * z[i1], minlength=j_count)
        out[:, k, k] = np.bincount(j, weights=h_psi, minlength=j_count)
    out[:, k, :k] = out[:, :k, k]
    return out


@dataclass
class ScorePartials:
    """Sums over ordinal cells in a compact index: θ (M), the severities of ``graders`` (G), τ (K − 1) — the only
    core parameters a grade touches — with the prompts' diagonal apart (``g_diag``, ``H_diag``, cross ``B``).

    The dense partials scatter them into the effective coordinates; a judge-blocked objective adds them to its
    globals, where the graders' severities are (``Layout.graders``)."""

    f: float
    g: np.ndarray  # (M + G + K − 1,)
    H: np.ndarray  # (M + G + K − 1)², dense
    g_diag: np.ndarray  # (P,)
    H_diag: np.ndarray  # (P,)
    B: np.ndarray  # (M + G + K − 1, P)

    def __iadd__(self, other: ScorePartials) -> ScorePartials:
        self.f += other.f
        self.g += other.g
        self.H += other.H
        self.g_diag += other.g_diag
        self.H_diag += other.H_diag
        self.B += other.B
        return self


def score_partials(
    eff: np.ndarray, delta: np.ndarray, scores: ScoreArrays, spec: Spec, graders: np.ndarray, hessian: bool = True
) -> ScorePartials:
    """The ordinal cells' :class:`ScorePartials`; ``graders`` (increasing judge codes) holds every judge of
    ``scores`` (without ``hessian`` the second derivatives stay zero)."""
    lay = spec.layout
    m_count, p_count, k_tau = lay.n_models, lay.n_prompts, lay.n_tau
    g_count = graders.size
    n_c = m_count + g_count + k_tau
    out = ScorePartials(
        0.0, np.zeros(n_c), np.zeros((n_c, n_c)), np.zeros(p_count), np.zeros(p_count), np.zeros((n_c, p_count))
    )
    counts = scores.counts
    n_cat = counts.shape[1]
    m, p = scores.m, scores.p
    j = np.searchsorted(graders, scores.j)  # the grader's rank: its severity's place after θ
    theta = eff[lay.theta]
    alpha = eff[lay.eff_block(SEV)][graders]
    tau = eff[lay.eff_tau]
    phi = theta[m] - delta[p] - alpha[j]
    cats = np.arange(n_cat, dtype=float)
    cum_tau = np.concatenate([[0.0], np.cumsum(tau)])  # T_k
    scores_k = phi[:, None] * cats[None, :] - cum_tau[None, :]
    log_z = np.logaddexp.reduce(scores_k, axis=1)
    prob = np.exp(scores_k - log_z[:, None])
    total = counts.sum(axis=1)
    wgt = spec.w_ord
    out.f -= wgt * float(np.sum(counts * scores_k) - np.sum(total * log_z))
    mean_k = prob @ cats
    # upper[:, m-1] = P(k >= m), m = 1..K−1; cnt_upper likewise for the observed counts.
    upper = np.cumsum(prob[:, ::-1], axis=1)[:, ::-1][:, 1:]
    cnt_upper = np.cumsum(counts[:, ::-1], axis=1)[:, ::-1][:, 1:]
    g_phi = wgt * -(counts @ cats - total * mean_k)
    g_tau = wgt * (cnt_upper - total[:, None] * upper)
    th = slice(0, m_count)
    sev = slice(m_count, m_count + g_count)
    ta = slice(sev.stop, n_c)
    out.g[th] += np.bincount(m, weights=g_phi, minlength=m_count)
    out.g[sev] -= np.bincount(j, weights=g_phi, minlength=g_count)
    out.g_diag -= np.bincount(p, weights=g_phi, minlength=p_count)
    out.g[ta] += g_tau.sum(axis=0)
    if not hessian:
        return out
    var_k = prob @ (cats * cats) - mean_k**2
    k_upper = np.cumsum((prob * cats)[:, ::-1], axis=1)[:, ::-1][:, 1:]  # E[k·1{k>=m}]
    h_phi = wgt * total * var_k
    h_phi_tau = wgt * -total[:, None] * (k_upper - mean_k[:, None] * upper)  # −N Cov(k, 1{k>=m})
    # Σ_r N_r (P_r(k >= max(m, m')) − P_r(k >= m) P_r(k >= m')): the first term from the column sums, the second one
    # product — no (rows, K − 1, K − 1) temporary (130 MB at 200k grades of 10 categories).
    at_max = np.maximum.outer(np.arange(n_cat - 1), np.arange(n_cat - 1))
    h_tau = wgt * ((total @ upper)[at_max] - (upper * total[:, None]).T @ upper)

    diag_theta = np.bincount(m, weights=h_phi, minlength=m_count)
    out.H[np.arange(m_count), np.arange(m_count)] += diag_theta
    ths = np.bincount(m * g_count + j, weights=h_phi, minlength=m_count * g_count).reshape(m_count, g_count)
    out.H[th, sev] -= ths
    out.H[sev, th] -= ths.T
    r = sev.start + np.arange(g_count)
    out.H[r, r] += np.bincount(j, weights=h_phi, minlength=g_count)
    out.H_diag += np.bincount(p, weights=h_phi, minlength=p_count)
    out.B[th] -= np.bincount(m * p_count + p, weights=h_phi, minlength=m_count * p_count).reshape(m_count, p_count)
    out.B[sev] += np.bincount(j * p_count + p, weights=h_phi, minlength=g_count * p_count).reshape(g_count, p_count)
    out.H[ta, ta] += h_tau
    for c in range(k_tau):
        w = h_phi_tau[:, c]
        col = ta.start + c
        v = np.bincount(m, weights=w, minlength=m_count)
        out.H[th, col] += v
        out.H[col, th] += v
        v = np.bincount(j, weights=w, minlength=g_count)
        out.H[sev, col] -= v
        out.H[col, sev] -= v
        out.B[col] -= np.bincount(p, weights=w, minlength=p_count)
    return out


def _score_partials(
    eff: np.ndarray, delta: np.ndarray, scores: ScoreArrays, spec: Spec, out: Partials, hessian: bool = True
) -> None:
    """Add the ordinal cells' partials to the dense ``out``: :func:`score_partials` scattered into the effective
    coordinates (each entry gets one term of the compact sums: the scatter adds no rounding of its own)."""
    lay = spec.layout
    graders = np.unique(scores.j)
    at = np.concatenate(
        [np.arange(lay.n_models), lay.eff_block(SEV).start + graders, np.arange(lay.n_tau) + lay.eff_tau.start]
    )
    part = score_partials(eff, delta, scores, spec, graders, hessian)
    out.f += part.f
    out.g[at] += part.g
    out.g_diag += part.g_diag
    if not hessian:
        return
    out.H[np.ix_(at, at)] += part.H
    out.H_diag += part.H_diag
    out.H_cross[at] += part.B


def partials(eff: np.ndarray, delta: np.ndarray, shard: Shard, spec: Spec, hessian: bool = True) -> Partials:
    """THE pure function: effective parameters and prompt difficulties, one shard → its partial sums.

    ``eff`` is ``spec.effective_map() @ raw``; the result's sums over shards are the objective (negative
    log-likelihood, weighted), gradient and Hessian of all the cells, in effective coordinates.  With
    ``hessian=False`` the Hessian parts stay zero (about half the work): for steps that reuse a
    factorised Hessian, such as the bootstrap's refits from the MAP.
    """
    out = Partials.zeros(spec.layout)
    if shard.pairs is not None and len(shard.pairs):
        _pair_partials(eff, shard.pairs, spec, out, hessian, None if spec.layout.naive else shard.pair_slices(spec))
    if shard.scores is not None and len(shard.scores):
        _score_partials(eff, delta, shard.scores, spec, out, hessian)
    return out


@dataclass
class BlockPartials:
    """Sums over a shard's pair cells with the per-judge part kept as blocks (effective coordinates).

    For many judges (arena voters) the dense ``Partials.H`` would be (M + 6J)²; here the Hessian is kept
    as what it is — block-arrowhead: θ × θ dense (M × M), one K × K block per judge (K = ``n_blocks``), the
    θ × judge cross terms only at the (model, judge) pairs that occur (``C[e, t]`` for entry e of a
    :class:`~biasboard.ranking.arrowhead.CrossIndex`).  Pair cells only: grades touch the globals alone
    (:class:`ScorePartials`, added by the objective).
    """

    f: float
    g: np.ndarray  # (n_eff,)
    H_theta: np.ndarray  # (M, M)
    A: np.ndarray  # (J, K, K), K = layout.n_blocks; judges the fastest axis (each (t, u) sum is one run)
    C: np.ndarray  # (n_entries, K), column-major
    #: (K, J) bool: some slice of judge j's cells added to block t (to A's row and column t, C's column t at the
    #: judge's entries); elsewhere they are still 0, which :func:`~biasboard.ranking.arrowhead.assemble`'s masks
    #: leave (severity for pair cells, affinity for voters: zeros written over zeros, 5 ms of a 50k-judge Hessian).
    acted: np.ndarray

    @staticmethod
    def zeros(lay: Layout, n_entries: int, hessian: bool = True) -> BlockPartials:
        k = lay.n_blocks
        shape = (lambda *s: s) if hessian else (lambda *s: (0,) * len(s))
        return BlockPartials(
            0.0,
            np.zeros(lay.n_eff),
            np.zeros(shape(lay.n_models, lay.n_models)),
            np.zeros(shape(k, k, lay.n_judges)).transpose(2, 0, 1),  # judges fastest: each (t, u) a run
            np.zeros(shape(k, n_entries)).T,  # column-major: the slices add a column at a time
            np.zeros(shape(k, lay.n_judges), bool),
        )


@dataclass(frozen=True)
class BlockSlice:
    """One slice of pair cells with what its judge-blocked sums index by, made once per fit (it depends on
    the cells only, not on the parameters): each cell's judge and entries relative to the slice's first
    (``jl``, ``ends``: the cells come sorted by judge, so a slice's sums run over the few judges and
    entries it touches, O(slice) rather than O(entries + J)), its θ pair key, and its :class:`PairPrep` — with
    ``runs`` when the slice holds at most :data:`RUN_JUDGES` judges (an LLM judge's cells, thousands a judge)."""

    pairs: PairArrays
    j0: int
    n_judges: int  # judges j0 … j0 + n_judges − 1
    e0: int
    n_entries: int  # entries e0 … e0 + n_entries − 1
    jl: np.ndarray  # intp (np.bincount's index type: no conversion per sum)
    ends: np.ndarray  # intp, 2 × cells: each cell's (judge, model a) entry, then each cell's (judge, model b)
    pair_key: np.ndarray  # a·M + b
    prep: PairPrep

    @staticmethod
    def of(pairs: PairArrays, at_a: np.ndarray, at_b: np.ndarray, spec: Spec) -> BlockSlice:
        """The slice ``pairs`` with its cells' (judge, model a) and (judge, model b) entries ``at_a``, ``at_b``."""
        lay = spec.layout
        intp = np.intp
        j0, j1 = int(pairs.j.min()), int(pairs.j.max()) + 1
        e0 = int(min(at_a.min(), at_b.min()))
        e1 = int(max(at_a.max(), at_b.max())) + 1
        # Each index made once, in its final type (no temporaries to convert: the fit's first pass makes them all).
        n = len(pairs)
        ends = np.empty(2 * n, intp)
        np.subtract(at_a, e0, out=ends[:n])
        np.subtract(at_b, e0, out=ends[n:])
        pair_key = np.multiply(pairs.a, lay.n_models, dtype=intp)
        pair_key += pairs.b
        return BlockSlice(
            pairs,
            j0,
            j1 - j0,
            e0,
            e1 - e0,
            np.subtract(pairs.j, j0, dtype=intp),
            ends,
            pair_key,
            PairPrep.of(pairs, spec, j0, j1 - j0),
        )

    @cached_property
    def end_runs(self) -> tuple[KeyRuns, KeyRuns] | None:
        """:class:`KeyRuns` of the cells' (judge, model a) and (judge, model b) entries for a slice of a few judges
        (``prep.runs``: an LLM judge's cells, sorted by model a then b), else None (or either side not in long runs);
        made on a slice's first Hessian and kept with it (an in-memory fit makes its slices once)."""
        if self.prep.runs is None:
            return None
        n = len(self.pairs)
        sides = KeyRuns.of(self.ends[:n]), KeyRuns.of(self.ends[n:])
        return None if sides[0] is None or sides[1] is None else (sides[0], sides[1])


def _slice_theta_gradient(sl: BlockSlice, tm: DavidsonTerms, m: int) -> np.ndarray:
    """The slice's Σ_c ∂f/∂η_c · a_j (e_a − e_b): θ's data gradient over its cells (M,)."""
    return _theta_gradient(sl, tm.g_eta * tm.disc, m)


def block_theta_partials(
    eff: np.ndarray, sl: BlockSlice, spec: Spec, spare: list[np.ndarray] | None = None
) -> tuple[DavidsonTerms, np.ndarray]:
    """One slice's Davidson terms (value ``f`` included) and θ's data gradient over it, the same values
    :func:`block_partials` adds, but none of the judges' sums (their gradient, ∂f/∂ψ, the Hessian).

    Why: a pass that moves θ alone with every other parameter held (the attribution's chord steps,
    :mod:`~biasboard.ranking.attribution`) reads θ's gradient only; the per-judge sums were ~15% of a
    gradient pass over 647k voter cells.  ``spare``: as :func:`davidson_terms`'."""
    tm = davidson_terms(eff, sl.pairs, spec, False, sl.prep, spare, psi_gradient=False)
    return tm, _slice_theta_gradient(sl, tm, spec.layout.n_models)


def block_partials(
    eff: np.ndarray,
    sl: BlockSlice,
    spec: Spec,
    out: BlockPartials,
    hessian: bool = True,
    terms: DavidsonTerms | None = None,
    spare: list[np.ndarray] | None = None,
) -> DavidsonTerms:
    """Add one slice of pair cells to ``out``: the same sums as :func:`partials`, judge-blocked.

    Returns the slice's :class:`DavidsonTerms` (without ``hessian``: with the probabilities the Hessian
    weights are made from), so that a caller can add the Hessian at the same point later by passing them
    back as ``terms``: then only the Hessian is added (the value and gradient are the caller's already).
    ``spare``: arrays the terms may be written into (:func:`davidson_terms`).
    """
    lay = spec.layout
    pairs = sl.pairs
    tm = davidson_terms(eff, pairs, spec, hessian, sl.prep, spare) if terms is None else terms
    disc, z, q, g_eta = tm.disc, tm.z, tm.q, tm.g_eta
    eta_types = lay.eta_effects
    jl, n_j = sl.jl, sl.n_judges
    judges = slice(sl.j0, sl.j0 + n_j)
    # A slice of a few judges' cells (an LLM judge's thousands): sums over each judge's run of cells, small
    # products where a bincount would add every cell into the same bin one after the other.
    runs = None if sl.prep.runs is None else [(judge - sl.j0, cells) for judge, cells in sl.prep.runs]
    if terms is None:
        out.f += tm.f
        out.g[lay.theta] += _slice_theta_gradient(sl, tm, lay.n_models)
        acting = [i for i in range(len(eta_types)) if tm.acts[i]]
        for i, total in zip([*acting, None], _judge_gradient(tm, acting, jl, n_j, runs), strict=True):
            out.g[lay.eff_block(TIE if i is None else eta_types[i])][judges] += total
    if not hessian:
        return tm
    tm.add_hessian(pairs.n, spec.w_pair)
    h_eta, h_eta_psi, h_psi = tm.h_eta, tm.h_eta_psi, tm.h_psi
    assert h_eta is not None and h_eta_psi is not None and h_psi is not None
    hd = h_eta * disc
    # θ × judge entries: +w at each cell's (judge, model a) entry, −w at its (judge, model b) entry: each side's sums
    # by runs of entries (an LLM judge's cells), else one bincount over both ends (half the passes of two and a
    # difference: each row made twice as long, its second half its negative); out.C is column-major.
    C = out.C[sl.e0 : sl.e0 + sl.n_entries]
    n = len(pairs)
    if sl.end_runs is not None:
        cross_blocks, rows = _theta_cross_rows(tm, eta_types, hd)
        cols = np.array(cross_blocks)
        for side, sign in zip(sl.end_runs, (1.0, -1.0), strict=True):
            C[side.keys[:, None], cols] += sign * side.sums(rows).T
    else:
        cross_blocks, rows = _theta_cross_rows(tm, eta_types, hd, 2 * n)
        for t, both in zip(cross_blocks, rows, strict=True):
            np.negative(both[:n], out=both[n:])
            C[:, t] += np.bincount(sl.ends, weights=both, minlength=sl.n_entries)
    del rows
    out.acted[cross_blocks, judges] = True  # A's sums below add to these blocks (or, a few judges, to every η one)
    out.H_theta += _laplacian(sl.pair_key, np.multiply(hd, disc, out=hd), lay.n_models)  # h_η·a_j·a_j
    A = out.A[judges]
    if runs is not None:
        blocks = _judge_blocks(jl, n_j, z, h_eta, h_eta_psi, h_psi, runs)
        disc_i = eta_types.index(DISC)
        for judge, cells in runs:  # ∂²η/∂L_j² = q: a dot a judge (a bincount into 1-2 bins adds one after another)
            blocks[judge, disc_i, disc_i] += _dot(g_eta[cells], q[cells])
        types = np.array([*eta_types, TIE])
        A[:, types[:, None], types[None, :]] += blocks
        out.acted[types, judges] = True
        return tm
    hz, w, gq = np.empty((3, n))  # the products, made in place (no fresh array per sum)
    for i1, t1 in enumerate(eta_types):
        if not tm.acts[i1]:
            continue
        np.multiply(h_eta, z[i1], out=hz)
        for i2, t2 in enumerate(eta_types[i1:], start=i1):
            if not tm.acts[i2]:
                continue
            np.multiply(hz, z[i2], out=w)
            if t1 == DISC and t2 == DISC:
                w += np.multiply(g_eta, q, out=gq)  # ∂²η/∂L_j² = q
            d = np.bincount(jl, weights=w, minlength=n_j)
            A[:, t1, t2] += d
            if t1 != t2:
                A[:, t2, t1] += d
        d = np.bincount(jl, weights=np.multiply(h_eta_psi, z[i1], out=w), minlength=n_j)
        A[:, t1, TIE] += d
        A[:, TIE, t1] += d
    A[:, TIE, TIE] += np.bincount(jl, weights=h_psi, minlength=n_j)
    return tm
