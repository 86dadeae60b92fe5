"""Options of the two models: priors, the ordinal weight ω, switched-off effects, top-k, bootstrap.

Every default is written here once, with the reason for it, so the report and
the manifest can print the exact model that was fit.  All prior SDs are on the
logit scale of a pairwise verdict (the Bradley–Terry scale); the length prior is
on the *standardised* log length ratio (divided by the RMS of ``x`` over all
battles with lengths), and the fit reports β back in units of the raw log ratio.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from biasboard.schemas.cells import LEN_BIN_EDGES
from biasboard.schemas.summary import GLOBAL_JUDGE

#: Effects of the bias-aware model, as named in the bias table and in ``disabled``.
EFFECTS: tuple[str, ...] = ("position", "length", "affinity", "tie", "discrimination", "severity")
#: The style effects (present when the cells carry style counts), as named in the bias table and ``disabled``.
STYLE_EFFECTS: tuple[str, ...] = ("header", "list", "bold")
#: Effects the trusted-anchor gate (or a user) may switch off per judge.
SWITCHABLE: frozenset[str] = frozenset({"position", "length", "affinity", "discrimination", "severity", *STYLE_EFFECTS})


@dataclass(frozen=True)
class Priors:
    """Gaussian prior SDs (mean 0 unless stated) of the bias-aware model.

    Why these values:

    - ``theta_sd = 2``: weak on quality (arena spreads are 1–3 logits), yet not
      vacuous: Xu et al. 2026 shows that when a covariate is constant within each
      model the *prior* picks the quality/bias split; a θ prior of the order of
      the real spread encodes "quality is a priori uncorrelated with length".
    - ``position_sd = 1`` (γ₀) and ``position_dev_sd = 0.5`` (u_j): a first-shown
      preference of a few tenths of a logit is typical (Katoch et al. 2026: γ₀ = −0.17,
      SD(u_j) = 0.34); 0.5 shrinks a judge with little data towards the pool.
    - ``length_sd = 0.5``/``length_dev_sd = 0.25`` per SD of the log ratio:
      careful shrinkage — when length is not identified (flat profile) a wide
      prior removes real quality along with length (Xu et al.'s 7-point loss).
    - ``affinity_sd = 0.5``/``affinity_dev_sd = 0.25``: Katoch et al. 2026 estimates 0.41.
    - ``style_sd = 0.5``/``style_dev_sd = 0.25`` per SD of each normalised style difference (headers,
      lists, bold): the length prior's shrinkage, as the style features play length's part (LMArena's
      style-control coefficients on standardised features are ≤ 0.3 logits).
    - ``excess_sd = 2``: with a reference (``ModelConfig.reference``) the per-judge deviations are each
      judge's excess over the reference, and their prior replaces the ``*_dev_sd`` (three; six with style
      counts).  Wide on purpose:
      the reference's own effects must be estimated from *its* verdicts; a tight prior on the excesses makes
      every judge a pseudo-observation of the reference's level (measured: with 2,000 unbiased anchors and
      four judges at β ≈ 0.4, the anchors' β was pulled from 0 to ≈ 0.1 by the 0.25 prior).  The excesses stay
      identified by the contrast with the reference (both judge the same models).
    - ``tie_mean = 0``, ``tie_sd = 2`` on log ν_j (Davidson): ν = 1 gives a 1/3
      tie chance between equals; the data dominate whenever a judge has ties.
    - ``discrimination_sd = 0.3`` on log a_j (log-normal around 1); the mean of
      log a_j over judges, each weighted by its share of the pair verdicts between two different models, is fixed
      at 0 so θ keeps the scale of the average verdict's judge (a judge with few verdicts, its a_j mostly this
      prior, does not set it) — on a board of battles alone where no judge's a_j is fixed at 1 (grades, or such a
      judge, set the scale otherwise: docs/design-notes.md, "Scale of θ").
    - ``discrimination_mean_sd = 2``: where a judge whose a_j is fixed at 1 sets θ's scale, the free judges' log a_j
      are not centred, and each is ρ_j ~ N(μ_a, ``discrimination_sd``²) about their own common mean μ_a ~ N(0, 2²)
      (integrated out: :func:`~biasboard.ranking.problem.free_discrimination_mean`), not about the fixed judge's 0.
      Wide on purpose: the free judges may share a discrimination far from the fixed judge's, and a prior about 0
      shrank them all toward it (one fixed judge at a = 1 beside three at 1.5, 1,000 verdicts each, 400 seeds:
      log a_j 0.058 low on average, their 95% intervals covering 0.877 and θ's 0.926; now +0.007, 0.931 and 0.939 —
      docs/design-notes.md, "Scale of θ").
    - ``severity_sd = 1`` (α_j), ``difficulty_sd = 1`` (δ_p), ``threshold_sd = 2``
      (τ_k) for the ordinal many-facet Rasch part; weighted with the grades, 2(1 − ω), at ω ≠ 0.5, as is
      ``theta_sd`` for a model graded but in no battle (:func:`~biasboard.ranking.problem.weigh_grades_prior`).
    """

    theta_sd: float = 2.0
    position_sd: float = 1.0
    position_dev_sd: float = 0.5
    length_sd: float = 0.5
    length_dev_sd: float = 0.25
    affinity_sd: float = 0.5
    affinity_dev_sd: float = 0.25
    style_sd: float = 0.5
    style_dev_sd: float = 0.25
    excess_sd: float = 2.0
    tie_mean: float = 0.0
    tie_sd: float = 2.0
    discrimination_sd: float = 0.3
    discrimination_mean_sd: float = 2.0
    severity_sd: float = 1.0
    difficulty_sd: float = 1.0
    threshold_sd: float = 2.0


#: How the per-judge blocks are solved: ``dense`` (one (M + 6J)² Newton system), ``blocked`` (each judge's
#: block eliminated by a Schur complement — memory O(J + M²), for voter-judges; with grades the graders'
#: severities join the globals and the prompts are eliminated into them) or ``auto`` (blocked from
#: :data:`BLOCKED_MIN_JUDGES` judges on; dense for grades alone, which have no judge blocks).
JUDGE_SOLVERS: tuple[str, ...] = ("auto", "dense", "blocked")
#: Profile-likelihood diagnostics: ``full`` (every profile value solved to 1e-10 · |log L|, at most 1e-4 nats,
#: warm-started along the profile path from the MAP's factorisation:
#: :func:`biasboard.ranking.diagnostics.profile_ranges`),
#: ``fast`` (the quadratic (Wald) approximation from one factorisation per effect) or ``off``.
DIAGNOSTICS: tuple[str, ...] = ("full", "fast", "off")

#: The values ``length_clip`` may take besides None: the positive length-bin edges, so the clipped covariate is exact
#: from the cells (``ModelConfig``); ``refresh --length-clip`` names them when it refuses another.
LENGTH_CLIP_EDGES: tuple[float, ...] = tuple(float(e) for e in LEN_BIN_EDGES[LEN_BIN_EDGES > 0])
#: From how many judges ``judge_solver='auto'`` takes the judge-blocked solver, by the profile likelihoods
#: the fit computes (:attr:`ModelConfig.profiles`): where the two solvers' CPU times cross, measured by
#: ``bench/judge_solver.py`` (dense vs blocked, the same MAP to 1e-15) on LLMFAO's crowd with its J most
#: active workers as judges and on 1M simulated battles whose voters are merged into groups.  Without
#: profiles the blocked fit is as fast from 16 judges on (1M: 0.90 vs 0.90 s at 16, 0.87 vs 1.12 at 64;
#: LLMFAO: 1.0x at 16, 10x at 124).  Its ``full`` profile points, under the stiff sum-to-zero gauge, take
#: many chord steps (1M: 4.2 vs 1.7 s at 16 judges, 5.0 vs 2.3 at 64, then 3.0 vs 5.2 at 134 and 2.7 vs
#: 12.8 at 262), so ``full`` waits for ~100 judges; ``fast`` (one factorisation per effect) crosses between
#: 16 and 64 (1M: 1.32 vs 1.15 s at 16, 1.37 vs 1.63 at 64).
BLOCKED_MIN_JUDGES: dict[str, int] = {"off": 16, "fast": 32, "full": 96}


@dataclass(frozen=True)
class ModelConfig:
    """How the bias-aware model is fit.

    ``disabled`` holds (judge, effect) pairs whose effect is fixed at zero (for
    ``discrimination``: a_j fixed at 1, and a judge so fixed with pair verdicts sets θ's scale: the other a_j are
    then measured against it, not centred — :func:`~biasboard.ranking.model.fixed_scale_judges`); judge ``'*'``
    switches the effect off for every judge.  ``omega`` is Katoch et al.'s weight of the pairwise part against the
    ordinal part; the likelihoods are weighted 2ω and 2(1 − ω), so the default
    ω = 0.5 is the plain joint likelihood with its Laplace CIs.  Any other ω with grades is a
    composite likelihood: its CIs are the Godambe (sandwich) covariance (:mod:`biasboard.ranking.composite`),
    which is the Laplace one at ω = 0.5 and tends to the pairs' own as ω → 1.  ω = 1 drops the grades (the
    board of the battles alone, pairs weighted 1).  The priors of the parameters only the grades inform (α_j, τ,
    δ_p, and θ_m of a model in no battle) are weighted with the grades, 2(1 − ω): left at weight 1, at ω = 0.99
    they outweighed the grades, pulled θ's scale (which nothing else pins once the grades are weighted low) down
    by ~10% and θ's intervals covered 0.916 with unequal a_j; weighted, 0.944 (docs/design-notes.md, ω).  Left:
    near ω = 1 that scale rests on the
    priors of log a_j and θ, so a_j's intervals cover ~0.93 with unequal a_j, and θ's over-cover (~0.976) when
    every a_j is 1.

    ``length_clip`` bounds the length term: the covariate is x_c = clip(x, −c, c) with
    x = ln(len_a / len_b), so β is "log-odds per unit log length ratio, up to ±c" and no answer earns
    more than c·|β| from its length alone.  Why bounded: a linear, unbounded term extrapolates far past
    the lengths that identify it — on AlpacaEval 2 a model whose answers were ~30× shorter than the
    baseline's (x ≈ −3.4) got ~3 logits of credit from a β fitted on ordinary ratios and jumped from
    naive rank 34 to corrected rank 1 (AlpacaEval's own LC bounds its length term with a tanh).
    Why c must be a bin edge (:data:`~biasboard.schemas.cells.LEN_BIN_EDGES`): every battle of a cell
    lies in one length bin, so on one side of an edge; a cell beyond ±c has clipped mean exactly ±c and
    a cell inside keeps its mean — the clipped covariate is computed exactly from the cells, and merges
    exactly.  Default 1.5 (a 4.5× length ratio): wide enough that ordinary ratios (the simulator's, and
    nearly all of MT-Bench's and LLMFAO's battles) stay on the linear part, tight enough that a
    degenerate length (brevity or padding gaming) is not extrapolated to.  ``None``: unbounded (linear
    in x everywhere, the behaviour before the option existed).

    ``judge_solver`` (:data:`JUDGE_SOLVERS`) picks the Newton solver of the per-judge blocks; both give
    the same MAP and Laplace CIs (to ~1e-10), the blocked one in O(J) memory.  ``judge_pool``
    (``prefix:SEP``) fits one judge per name prefix — e.g. all ``arena/<voter>`` as ``arena`` — for
    users who want one effect per pool rather than voters shrunk towards their population.
    ``diagnostics`` (:data:`DIAGNOSTICS`) sets how the profile likelihoods are computed (``profile=False``
    is the same as ``off``).

    ``reference`` names the judges whose verdicts define "unbiased" (anchors, human pools; see
    :mod:`biasboard.ranking.reference`).  For position, length, affinity and (with style counts) header, list and
    bold the model's global coefficient is then the reference's own (pooled) effect: the reference judges have no
    deviation from it, every other judge's deviation is its bias relative to the reference, and ``disabled`` for
    such an effect means *tied to the reference* (deviation fixed at 0) rather than fixed at zero — unless the
    reference has no data for the effect (no lengths, no family of its own, no style counts), where the reference is
    zero as before.
    """

    priors: Priors = field(default_factory=Priors)
    omega: float = 0.5
    disabled: frozenset[tuple[str, str]] = frozenset()
    k: int = 10
    bootstrap: int = 0
    seed: int = 0
    posterior_draws: int = 4000
    tol: float = 1e-8
    max_iter: int = 200
    profile: bool = True
    length_clip: float | None = 1.5
    judge_solver: str = "auto"
    judge_pool: str | None = None
    diagnostics: str = "full"
    reference: frozenset[str] = frozenset()
    #: Fit the style effects when the cells carry style counts; False fits the model without them (the
    #: "style kept" board: θ then carries whatever the judges rewarded in headers, lists and bold).
    style: bool = True
    #: Work out which correction moved each model (:mod:`biasboard.ranking.attribution`: one gradient pass per
    #: correction and chord step) where diagnostics are on; off for boards whose attribution nothing publishes
    #: (a slice's: the summary and the report show the main board's only).
    attribution: bool = True

    def __post_init__(self) -> None:
        if self.diagnostics not in DIAGNOSTICS:
            raise ValueError(f"diagnostics must be one of {', '.join(DIAGNOSTICS)}, got {self.diagnostics!r}")
        if self.judge_pool is not None:
            kind, _, sep = self.judge_pool.partition(":")
            if kind != "prefix" or not sep:
                raise ValueError(f"judge_pool must be 'prefix:SEP' (e.g. 'prefix:/'), got {self.judge_pool!r}")
        if self.judge_solver not in JUDGE_SOLVERS:
            raise ValueError(f"judge_solver must be one of {', '.join(JUDGE_SOLVERS)}, got {self.judge_solver!r}")
        if not 0.0 < self.omega <= 1.0:
            raise ValueError(f"omega must be in (0, 1], got {self.omega}")
        for judge, effect in self.disabled:
            if effect not in SWITCHABLE:
                raise ValueError(f"disabled effect {effect!r} for judge {judge!r} is not one of {sorted(SWITCHABLE)}")
        if self.k < 1:
            raise ValueError(f"k must be >= 1, got {self.k}")
        if self.length_clip is not None and not any(float(self.length_clip) == e for e in LENGTH_CLIP_EDGES):
            raise ValueError(
                f"length_clip must be None or a positive length-bin edge (one of {list(LENGTH_CLIP_EDGES)}) so the "
                f"clipped covariate is exact from the cells, got {self.length_clip!r}"
            )

    @property
    def profiles(self) -> str:
        """The profile likelihoods this fit computes: :data:`DIAGNOSTICS`' mode, ``off`` when ``profile`` is False."""
        return self.diagnostics if self.profile else "off"

    @property
    def blocked_from(self) -> int:
        """From how many judges ``judge_solver='auto'`` takes the judge-blocked solver (:data:`BLOCKED_MIN_JUDGES`)."""
        return BLOCKED_MIN_JUDGES[self.profiles]

    def ratings_only(self) -> ModelConfig:
        """These options for a board that is only compared by its point ratings (the style-kept board; a
        reference fit's board with its prior-selected corrections applied): the same MAP without bootstrap
        replicates or profile likelihoods, which nothing reads there."""
        return replace(self, bootstrap=0, profile=False, diagnostics="off")

    def is_reference(self, judge: str) -> bool:
        return judge in self.reference

    def is_enabled(self, judge: str, effect: str) -> bool:
        return (judge, effect) not in self.disabled and (GLOBAL_JUDGE, effect) not in self.disabled


@dataclass(frozen=True)
class NaiveConfig:
    """Plain Bradley–Terry with ties as half wins.

    ``theta_sd=None`` is the maximum-likelihood fit arena leaderboards publish, with their sandwich intervals
    (:func:`~biasboard.ranking.fit.half_win_sandwich`); a fit under a prior keeps its Laplace posterior.
    When the MLE does not exist (a model never loses or never wins, or the
    comparison graph is split) the fit falls back to ``fallback_theta_sd`` and
    says so in the warnings, rather than letting ratings run to infinity.
    """

    theta_sd: float | None = None
    fallback_theta_sd: float = 10.0
    k: int = 10
    bootstrap: int = 0
    seed: int = 0
    posterior_draws: int = 4000
    tol: float = 1e-8
    max_iter: int = 200
