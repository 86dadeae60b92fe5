"""From a coded dataset and a config to the objects the solver needs: layout, spec, prior, shards.

Kept apart from the fitting entry points so that the bootstrap, the profile likelihood and the oracle
fit (judge effects fixed at their true values) rebuild exactly the same problem with one change.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
from biasboard.ranking.arrowhead import CrossIndex
from biasboard.ranking.config import ModelConfig, Priors
from biasboard.ranking.data import Dataset, PairArrays, ScoreArrays, clip_length, shard_indices
from biasboard.ranking.graph import grader_groups
from biasboard.ranking.model import (
    AFF,
    DISC,
    JUDGE_BLOCKS,
    LEN,
    POS,
    SEV,
    STYLE_BLOCKS,
    STYLE_NAMES,
    TIE,
    Layout,
    Shard,
    Spec,
    fixed_scale_judges,
)
from biasboard.ranking.solver import Objective, Prior
from biasboard.schemas.summary import GLOBAL_JUDGE, TIED_TO_REFERENCE

#: Why a pair effect is off on an ordinal-only board.
ORDINAL_ONLY_NOTE = "ordinal-only board: no battles, so no position, length, affinity, tie or discrimination"
#: Why a judge has no length effect: none of its battles carries both answers' lengths (``len_a``, ``len_b``).
NO_LENGTHS_NOTE = "no battles with both lengths known"
NO_ORDER_NOTE = "no battle with a known shown order"

#: Why a judge's effect is off when ``ModelConfig.disabled`` (the user, or a reference's gate) switched it off.
DISABLED_NOTE = "disabled by configuration"

#: The severity note of a judge who is the only one grading.
ONE_GRADER_NOTE = "the only judge with grades: severity is measured from the graders' mean, so 0 by definition"
LONE_GRADER_NOTE = (
    "no other grader grades a model comparable with this judge's: severity is measured from the mean of the graders "
    "of comparable models, so 0 by definition"
)

#: Config effect name of each judge block.
BLOCK_EFFECT: dict[int, str] = {
    POS: "position",
    LEN: "length",
    AFF: "affinity",
    DISC: "discrimination",
    TIE: "tie",
    SEV: "severity",
    **dict(zip(STYLE_BLOCKS, STYLE_NAMES, strict=True)),
}


def make_shards(pairs: PairArrays, scores: ScoreArrays | None, shards: int) -> list[Shard]:
    """Split cells into ``shards`` parts; any split gives the same sums (and so the same fit)."""
    pair_parts = [pairs.take(i) for i in shard_indices(len(pairs), shards)]
    if scores is None:
        return [Shard(p, None) for p in pair_parts]
    score_parts = [scores.take(i) for i in shard_indices(len(scores), shards)]
    return [Shard(p, s) for p, s in zip(pair_parts, score_parts, strict=True)]


class JudgeNotes:
    """Why a judge's effect is switched off (or tied, or special): at most one note per (block, judge).

    Kept as a (blocks × judges) array of codes into a list of texts, not a dict: an arena log has 10⁴-10⁶
    voter-judges, every one of them without affinity or severity, and a dict entry per (block, voter) cost
    ~0.25 s to write and to read back into the bias table at 50k voters.
    """

    def __init__(self, n_blocks: int, n_judges: int):
        self.codes = np.full((n_blocks, n_judges), -1, np.int32)  # -1: no note
        self.texts: list[str] = []

    def _code(self, text: str) -> int:
        if text not in self.texts:
            self.texts.append(text)
        return self.texts.index(text)

    def set(self, block: int, judges, text: str) -> None:
        """Note ``text`` for ``judges`` (indices or a mask) on ``block``, replacing any note they had."""
        self.codes[block, judges] = self._code(text)

    def set_default(self, block: int, judges, text: str) -> None:
        """Note ``text`` for those of ``judges`` that have no note on ``block`` yet."""
        row = self.codes[block]
        which = np.zeros(row.size, bool)
        which[judges] = True
        row[which & (row < 0)] = self._code(text)

    def noted(self, block: int, text: str) -> np.ndarray:
        """Which judges have note ``text`` on ``block`` (a mask over the judges)."""
        if text not in self.texts:
            return np.zeros(self.codes.shape[1], bool)
        return self.codes[block] == self.texts.index(text)

    def get(self, key: tuple[int, int], default: str = "") -> str:
        code = int(self.codes[key])
        return self.texts[code] if code >= 0 else default

    def column(self, block: int) -> np.ndarray:
        """Every judge's note on ``block`` ("" for none), as an object array."""
        return np.array([*self.texts, ""], dtype=object)[self.codes[block]]


@dataclass
class Problem:
    """One model on one dataset: everything but the parameter values."""

    data: Dataset
    layout: Layout
    spec: Spec
    prior: Prior
    notes: JudgeNotes = field(default_factory=lambda: JudgeNotes(0, 0))  # why a (block, judge) effect is off
    naive: bool = False
    #: Per effect block tied to a reference: the per-judge deviation precision the model has without one (its
    #: excess prior, ``Priors.excess_sd``, replaces it).  What a judge's battles must pin its deviation by for
    #: a profile to free it (:func:`~biasboard.ranking.diagnostics._informed`).
    untied_precision: dict[int, float] = field(default_factory=dict)
    #: Per judge, the group of graders its severity is measured from the mean of (-1: not a grader; None: every
    #: grader one group): :func:`~biasboard.ranking.graph.grader_groups`.
    severity_group: np.ndarray | None = None
    _cross: dict[int, CrossIndex] = field(default_factory=dict, repr=False, compare=False)

    def objective(
        self,
        shards: int = 1,
        pairs: PairArrays | None = None,
        scores: ScoreArrays | None = None,
        prior: Prior | None = None,
    ) -> Objective:
        """The objective on these cells (or on redrawn counts of the same cells: ``pairs``/``scores``)."""
        scores = (None if self.naive else self.data.scores) if scores is None else scores
        stream = self.data.stream
        if pairs is None and stream is not None:  # the cells on disk, read a shard at a time per evaluation
            if self.naive:
                raise ValueError("a naive problem of a streamed data set is fit on its pair totals: pass them")
            score_parts = [] if scores is None else [Shard(None, scores)]
            return Objective(self.spec, score_parts, self.prior if prior is None else prior, source=stream)
        pairs = self.data.pairs if pairs is None else pairs
        parts = make_shards(pairs, scores, shards)
        cross = None
        if self.spec.judge_blocks:  # the (judge, model) index depends on the cells' keys only: build it once
            same_keys = pairs.a is self.data.pairs.a and pairs.b is self.data.pairs.b and pairs.j is self.data.pairs.j
            cached = self._cross.get(shards)
            if cached is None or not same_keys:
                lay = self.layout
                cached = CrossIndex.of([p.pairs for p in parts if p.pairs is not None], lay.n_models, lay.n_judges)
                if same_keys:
                    self._cross[shards] = cached
            cross = cached
        return Objective(self.spec, parts, self.prior if prior is None else prior, cross)

    def zeros(self) -> tuple[np.ndarray, np.ndarray]:
        return np.zeros(self.layout.n_core), np.zeros(self.layout.n_prompts)

    def without_caches(self) -> Problem:
        """This problem without the (judge, model) index its objectives keep (:class:`CrossIndex`, with its batches
        and coupling layouts ~60 MB at 50k voter-judges), for a caller that holds the problem past its fit while
        other fits run (a reference fit's all-on board); an objective made from it builds the index again."""
        return replace(self, _cross={})

    def profile_prior(self, block: int, informed: np.ndarray | None = None) -> Prior:
        """The prior of a likelihood profile over the common level of effect ``block``.

        θ loses its prior (a location gauge instead) and the per-judge deviations of the profiled effect
        lose theirs but sum to zero (a stiff gauge), so the global coefficient is the judges' mean level
        and the deviations are free to absorb anything but that level — e.g. the a_j-proportional shifts
        that keep a per-model-constant covariate exactly flat.  Only the deviations their judges' battles pin
        (``informed``, per judge; default every judge: :func:`~biasboard.ranking.diagnostics._informed`): the
        others (sparse voters) keep their prior and stay out of the gauge, shrunk as in the fit.
        """
        lay = self.layout
        precision = self.prior.precision.copy()
        precision[lay.theta] = 0.0
        profiled = self.spec.deviation_mask(block) > 0
        if informed is not None:
            profiled &= informed
        on = lay.block(block).start + np.flatnonzero(profiled)
        precision[on] = 0.0
        theta = np.arange(lay.n_models)
        if self.spec.tied is not None and self.spec.tied[block].any():
            # The global level is the reference's own effect: deviations are measured from it, no gauge.
            return replace(self.prior, precision=precision, gauges=(*self.prior.gauges, (theta, 1.0)))
        stiff = 1e4 * max(1.0, float(np.max(self.prior.precision)))
        return replace(self.prior, precision=precision, gauges=(*self.prior.gauges, (theta, 1.0), (on, stiff)))


def naive_problem(data: Dataset, theta_sd: float | None, component: np.ndarray | None = None) -> Problem:
    """Plain BT; without a θ prior each comparison component's ratings get their own location gauge."""
    m = len(data.models)
    lay = Layout(m, 0, naive=True)
    spec = Spec(lay, np.zeros((len(JUDGE_BLOCKS), 0)))
    precision = np.full(m, 0.0 if theta_sd is None else 1.0 / theta_sd**2)
    gauges: tuple[tuple[np.ndarray, float], ...] = ()
    if theta_sd is None:
        if component is None or component.size == 0 or component.max() == 0:
            gauges = ((np.arange(m), 1.0),)
        else:
            gauges = tuple((np.flatnonzero(component == c), 1.0) for c in range(int(component.max()) + 1))
    prior = Prior(np.zeros(m), precision, np.zeros(0), np.zeros(0), gauges=gauges)
    return Problem(data, lay, spec, prior, naive=True)


#: Name of the one pooled judge and the one pooled prompt of the naive ordinal board.
POOLED = "(pooled)"


def naive_ordinal_problem(data: Dataset, theta_sd: float | None, priors: Priors | None = None) -> Problem:
    """The naive board of single grades: the partial-credit model with the judge and prompt facets removed.

    Every grade of a model is pooled (one judge, one prompt: φ = θ_m, no severity, no difficulty), which is
    what a mean-score leaderboard such as MT-Bench's assumes.  θ_m's sufficient statistic is then its grades'
    mean category, so this board ranks models exactly as their mean category (the mean grade when the
    grades are evenly spaced) does, on the same logit scale and with the same CIs as the corrected board.
    ``theta_sd=None`` is maximum likelihood; it exists when no model's grades are all the lowest or all the
    highest used.  θ's common location (which the likelihood leaves free, with the thresholds' and the pooled
    difficulty's) is set by those two priors alone, so each θ_m's equation stays exactly "expected category = mean
    category".  A soft gauge on Σθ (κ/2 (Σθ)², as the pair boards have) was pulled against those priors, and its
    gradient, the same for every model, moved each θ_m by ~1/n_m: two models of mean 7.0 over 20 and 2,000 grades
    were ranked 1st and 2nd, 7e-5 logits apart.  (The published ratings are centred either way.)
    """
    priors = priors or Priors()
    scores = data.scores
    if scores is None:
        raise ValueError("naive_ordinal_problem needs score cells")
    m = len(data.models)
    counts = np.zeros((m, scores.counts.shape[1]))
    np.add.at(counts, scores.m, scores.counts)
    graded = np.flatnonzero(counts.sum(axis=1) > 0)
    zeros = np.zeros(graded.size, np.int64)
    pooled = replace(
        data,
        judges=(POOLED,),
        judge_families=(data.judge_families[0] if len(set(data.judge_families)) == 1 else POOLED,),
        prompts=(POOLED,),
        scores=ScoreArrays(zeros, graded.astype(np.int64), zeros, counts[graded]),
    )
    lay = Layout(m, 1, data.n_categories - 1, 1)
    spec = Spec(lay, np.zeros((len(JUDGE_BLOCKS), 1)), centre_discrimination=False)
    precision = np.ones(lay.n_core)  # the pair and judge parameters have no data: kept at 0 by their prior
    precision[lay.theta] = 0.0 if theta_sd is None else 1.0 / theta_sd**2
    precision[lay.tau] = 1.0 / priors.threshold_sd**2
    prior = Prior(np.zeros(lay.n_core), precision, np.zeros(1), np.full(1, 1.0 / priors.difficulty_sd**2))
    return Problem(pooled, lay, spec, prior)


def length_scale(pairs: PairArrays) -> float:
    """RMS of the log length ratio over battles with lengths: the unit β is estimated in internally."""
    n_len = pairs.n_len.sum()
    if n_len <= 0:
        return 1.0
    rms = float(np.sqrt(pairs.sum_x2.sum() / n_len))
    return rms if rms > 0 else 1.0


def style_scale(pairs: PairArrays) -> np.ndarray:
    """RMS of each normalised style difference over battles with style counts: the unit the style effects
    are estimated in internally (LMArena standardises its style features likewise)."""
    assert pairs.n_style is not None and pairs.style_sq is not None
    n = float(pairs.n_style.sum())
    rms = np.sqrt(pairs.style_sq.sum(axis=0) / n) if n > 0 else np.ones(len(STYLE_BLOCKS))
    return np.where(rms > 0, rms, 1.0)


def bias_aware_problem(data: Dataset, config: ModelConfig) -> Problem:
    """The bias-aware problem; its ``data`` carry the length covariate as the model uses it (clipped at
    ``config.length_clip``), so the bootstrap, profiles, bias table and diagnostics all see that covariate.

    The style blocks exist only when the cells carry style counts and ``config.style`` is on: without
    them the layout, and so every number, is the one of a model that never heard of style."""
    if data.stream is not None:  # clipped as the shards are read; the pair totals of the clipped covariate
        stream = data.stream.clipped(config.length_clip)
        data = replace(data, pairs=stream.totals(), stream=stream)
    else:
        data = replace(data, pairs=clip_length(data.pairs, config.length_clip))
    if config.omega >= 1.0 and data.scores is not None and not data.ordinal_only:
        # ω = 1 weighs the grades 0: the board of the battles alone, without the grades' prompts and thresholds
        # (kept, prior-only, they left the blocked solver a prompt block of no grades: a crash).
        data = replace(data, scores=None, prompts=(), score_values=())
    m, jn = len(data.models), len(data.judges)
    scores = data.scores
    n_tau = max(data.n_categories - 1, 0)
    with_style = config.style and data.pairs.has_style
    lay = Layout(m, jn, n_tau, len(data.prompts), n_style=len(STYLE_BLOCKS) if with_style else 0)
    pairs = data.pairs
    masks = np.ones((lay.n_blocks, jn))
    notes = JudgeNotes(lay.n_blocks, jn)
    has_len = data.judge_sums("n_len") > 0
    has_aff = data.judge_sums("affinity") > 0
    has_scores = np.zeros(jn, bool) if scores is None else np.bincount(scores.j, minlength=jn) > 0
    for t, which in _disabled_judges(config, data.judges, lay.n_blocks).items():
        masks[t, which] = 0.0
        notes.set(t, which, DISABLED_NOTE)
    if data.ordinal_only:  # single grades alone: only severity acts (and a_j would be unidentified)
        for t in (POS, LEN, AFF, DISC, TIE):
            masks[t] = 0.0
            notes.set(t, slice(None), ORDINAL_ONLY_NOTE)
    checks = [
        # A judge none of whose battles has a known shown order (AlpacaEval 1's annotators) has no position effect:
        # it was estimated at the population's and marked identified, from the other judges' data alone.
        (POS, data.judge_sums("n_pos") > 0, NO_ORDER_NOTE),
        (LEN, has_len, NO_LENGTHS_NOTE),
        (AFF, has_aff, "no battle involves a model of the judge's own family"),
        (SEV, has_scores, "no ordinal scores from this judge"),
    ]
    if with_style:
        has_style = data.judge_sums("n_style") > 0
        checks += [(t, has_style, "no battles with style counts") for t in STYLE_BLOCKS]
    # Which judges have data for each effect with a global coefficient.
    has_data = {t: has for t, has, _ in checks if t in lay.global_effects}
    for t, has, why in checks:
        masks[t, ~has] = 0.0
        notes.set_default(t, ~has, why)
    if has_scores.sum() == 1:  # severities are reported from their mean over the graders (bias_table)
        notes.set_default(SEV, has_scores, ONE_GRADER_NOTE)
    severity_group = _severity_groups(data, masks[SEV] > 0, notes)
    tied = _tie_to_reference(data, config, masks, notes, has_data)
    has_ord = scores is not None and config.omega < 1.0
    versus = data.judge_sums("n_versus")
    if masks[DISC].sum() < 2 and not has_ord and not fixed_scale_judges(masks[DISC], versus).any():
        # (a lone free a_j beside a judge whose a_j is fixed at 1, with verdicts on two different models, is measured
        # against that judge)
        notes.set_default(DISC, masks[DISC] > 0, "fixed at 1: the scale of a single judge is the scale of θ")
        masks[DISC] = 0.0
    w_pair, w_ord = (2.0 * config.omega, 2.0 * (1.0 - config.omega)) if has_ord else (1.0, 0.0)
    if data.ordinal_only:  # ω weighs two parts against each other; with one part it is the plain likelihood
        has_ord, w_pair, w_ord = True, 0.0, 1.0
    blocked = config.judge_solver == "blocked" or (config.judge_solver == "auto" and jn >= config.blocked_from)
    if blocked and data.ordinal_only:
        if config.judge_solver == "blocked":
            raise ValueError("judge_solver='blocked' needs pair cells: grades alone have no judge blocks")
        blocked = False
    if blocked and has_ord:  # the graders' severities join the globals: a grade then touches no judge's block
        lay = replace(lay, graders=tuple(np.flatnonzero(masks[SEV] > 0).tolist()))
    spec = Spec(
        lay,
        masks,
        length_scale(pairs),
        w_pair,
        w_ord,
        centre_discrimination=not has_ord,
        disc_weights=None if has_ord else versus,
        judge_blocks=blocked,
        tied=tied,
        style_scale=style_scale(pairs) if with_style else None,
    )

    pr = config.priors
    precision = np.zeros(lay.n_core)
    mean = np.zeros(lay.n_core)
    precision[lay.theta] = 1.0 / pr.theta_sd**2
    precision[lay.glob(POS)] = 1.0 / pr.position_sd**2
    precision[lay.glob(LEN)] = 1.0 / pr.length_sd**2
    precision[lay.glob(AFF)] = 1.0 / pr.affinity_sd**2
    precision[lay.block(POS)] = 1.0 / pr.position_dev_sd**2
    precision[lay.block(LEN)] = 1.0 / pr.length_dev_sd**2
    precision[lay.block(AFF)] = 1.0 / pr.affinity_dev_sd**2
    for t in STYLE_BLOCKS[: lay.n_style]:
        precision[lay.glob(t)] = 1.0 / pr.style_sd**2
        precision[lay.block(t)] = 1.0 / pr.style_dev_sd**2
    untied: dict[int, float] = {}  # the deviation precision the excess prior replaces (Problem.untied_precision)
    if tied is not None:  # deviations measured from the reference: its excess prior (Priors.excess_sd)
        for t in has_data:
            if tied[t].any():
                untied[t] = float(precision[lay.block(t).start]) if lay.n_judges else 0.0
                precision[lay.block(t)] = 1.0 / pr.excess_sd**2
    precision[lay.block(DISC)] = 1.0 / pr.discrimination_sd**2
    precision[lay.block(TIE)] = 1.0 / pr.tie_sd**2
    mean[lay.block(TIE)] = pr.tie_mean
    precision[lay.block(SEV)] = 1.0 / pr.severity_sd**2
    precision[lay.tau] = 1.0 / pr.threshold_sd**2
    prior = Prior(
        mean,
        precision,
        np.zeros(lay.n_prompts),
        np.full(lay.n_prompts, 1.0 / pr.difficulty_sd**2),
        gauges=free_discrimination_mean(spec, pr),
    )
    if has_ord:
        prior = weigh_grades_prior(prior, lay, w_ord, models_without_battles(pairs, m))
    if not has_ord and scores is not None:
        data = replace(data, scores=None)
    return Problem(data, lay, spec, prior, notes, untied_precision=untied, severity_group=severity_group)


def free_discrimination_mean(spec: Spec, priors: Priors) -> tuple[tuple[np.ndarray, float], ...]:
    """The prior's rank-one term that lets the free log a_j shrink toward their own common mean, where a judge whose
    a_j is fixed at 1 sets θ's scale (:attr:`~biasboard.ranking.model.Spec.scale_set_by_fixed_judge`); () otherwise.

    Why: those ρ_j are not centred, and each one's prior N(0, sd²) alone pulls every free judge toward a = 1, the
    fixed judge's value, though they may share a discrimination far from it.  The hierarchical model
    ρ_j = μ_a + e_j, e_j ~ N(0, sd²), μ_a ~ N(0, sd_μ²) (``Priors.discrimination_mean_sd``), with μ_a integrated
    out, is ρ ~ N(0, sd² I + sd_μ² 11ᵀ) over the n free judges: precision (I + κ sd² 11ᵀ)/sd² with
    κ = −1 / (sd² (n + sd²/sd_μ²)) — the diagonal prior already there plus one gauge of negative κ over their ρ_j.
    The MAP and the Laplace covariance are the explicit μ_a's (a Gaussian integrated exactly), with no new
    parameter in the layout, so both solvers take it as they take any gauge."""
    if not spec.scale_set_by_fixed_judge:
        return ()
    lay = spec.layout
    free = lay.block(DISC).start + np.flatnonzero(spec.masks[DISC] > 0)
    sd2, ratio = priors.discrimination_sd**2, (priors.discrimination_sd / priors.discrimination_mean_sd) ** 2
    return ((free, -1.0 / (sd2 * (free.size + ratio))),)


def _severity_groups(data: Dataset, graders: np.ndarray, notes: JudgeNotes) -> np.ndarray | None:
    """Per judge, the group of graders its severity is measured from (-1: not a grader), or None for one group;
    a grader alone in its group noted (:data:`LONE_GRADER_NOTE`): its severity is 0 by definition."""
    which = np.flatnonzero(graders)
    groups = grader_groups(data, which)
    if which.size < 2 or groups.max() == 0:
        return None
    group = np.full(graders.size, -1, np.int64)
    group[which] = groups
    lone = which[np.bincount(groups)[groups] == 1]
    if lone.size:
        notes.set_default(SEV, lone, LONE_GRADER_NOTE)
    return group


def _disabled_judges(config: ModelConfig, judges: Sequence[str], n_blocks: int) -> dict[int, np.ndarray]:
    """Per effect block, the judges ``config.disabled`` switches off (a mask).

    One pass over the switched-off entries, each set once per block: a reference fit on voter-judges switches
    off tens of thousands (the gate's decisions), and a mask and a note per entry took 0.17 s at 50k voters.
    """
    named = any(judge != GLOBAL_JUDGE for judge, _ in config.disabled)
    index = {name: j for j, name in enumerate(judges)} if named else {}  # made only when some judge is named
    block_of = {effect: t for t, effect in BLOCK_EFFECT.items()}
    out: dict[int, np.ndarray] = {}
    for judge, effect in config.disabled:
        t = block_of[effect]
        if t >= n_blocks:
            continue  # a style effect switched off where the data have no style counts: nothing to switch
        which = out.get(t)
        if which is None:
            which = out[t] = np.zeros(len(judges), bool)
        if judge == GLOBAL_JUDGE:
            which[:] = True
        elif judge in index:
            which[index[judge]] = True
    return out


def _tie_to_reference(
    data: Dataset, config: ModelConfig, masks: np.ndarray, notes: JudgeNotes, has_data: dict[int, np.ndarray]
) -> np.ndarray | None:
    """The ``Spec.tied`` array of ``config.reference`` (None without a reference); updates masks and notes.

    For each effect with a global coefficient (position, length, affinity, and the style effects when the
    model has them: ``has_data``, which judges have data for each) on which some reference judge has data,
    the global coefficient becomes the reference's effect: reference judges are tied to it, and a judge
    whose correction is switched off is tied to it too (its effect equals the reference's: no excess)
    instead of being fixed at zero.  An effect the reference has no data for keeps the zero reference.
    """
    if not config.reference:
        return None
    ref = np.array([judge in config.reference for judge in data.judges])
    tied = np.zeros_like(masks)
    for t, has in has_data.items():
        if not masks[t, ref].any():
            continue
        tied[t, ref] = 1.0
        switched = ~ref & has & (masks[t] == 0) & notes.noted(t, DISABLED_NOTE)
        masks[t, switched] = 1.0
        tied[t, switched] = 1.0
        notes.set(t, switched, f"{TIED_TO_REFERENCE}: no excess over the reference's effect")
        notes.set(t, ref & (masks[t] > 0), "reference: this effect is the model's global coefficient")
    return tied


def models_without_battles(pairs: PairArrays, n_models: int) -> np.ndarray:
    """Per model: whether no battle between two different models involves it, so only its grades inform its θ
    (a self-battle has θ_a − θ_b = 0).  A board of battles and grades ranks such a model from its grades alone."""
    versus = pairs.n * (pairs.a != pairs.b)
    return (np.bincount(pairs.a, versus, n_models) + np.bincount(pairs.b, versus, n_models)) == 0


def weigh_grades_prior(prior: Prior, layout: Layout, weight: float, graded_only: np.ndarray) -> Prior:
    """``prior`` with the precisions of the parameters only the grades inform — the graders' severities α_j, the
    thresholds τ, the prompts' difficulties δ_p, and the θ of the models in no battle (``graded_only``, per model:
    :func:`models_without_battles`) — times ``weight`` (the ordinal part's, 2(1 − ω)).

    Why: those priors are the grades' own, so they weigh what the grades weigh.  Left at weight 1 beside grades
    weighted 0.02 (ω = 0.99), 1,000 grades counted as 20 against 30 difficulties and 9 thresholds held at their
    priors, and the grades, read through those shrunk parameters, pulled θ's scale down — the judges' common
    discrimination (mean log a_j), which nothing else pins once the grades are weighted low, came out 0.10
    high on average and θ's 95% intervals covered 0.916 (docs/design-notes.md, ω).  Weighted with their part,
    the grades' parameters given θ are the plain likelihood's at every ω (the weight multiplies their whole
    conditional objective); at ω = 0.5 the weight is 1 and nothing changes.  The Godambe J counts them with the
    weight squared, as the grades (:func:`~biasboard.ranking.composite.godambe_covariance`).  A model in no battle
    is the same case: its θ prior left at weight 1 beside its grades at 0.02 shrank its rating (slope on the truth
    0.95 at ω = 0.99, 0.58 at 0.999) and made its interval the prior's (0.30 wide at ω = 0.5, 0.60 and 2.9 there)."""
    precision = prior.precision.copy()
    precision[layout.block(SEV)] *= weight
    precision[layout.tau] *= weight
    precision[layout.theta][graded_only] *= weight
    return replace(prior, precision=precision, precision_diag=prior.precision_diag * weight)


def prior_sd_of_effect(problem: Problem, block: int) -> tuple[float, float]:
    """(global SD, per-judge deviation SD) of a block's prior (global 0 when the block has none).

    The severities' is the prior's own SD, without the grades' weight (:func:`weigh_grades_prior`): what their
    Godambe variance, in the same units as the plain likelihood's, is measured against for "identified"."""
    pr = problem.prior.precision
    lay = problem.layout
    weight = problem.spec.w_ord if block == SEV and problem.spec.w_ord > 0 else 1.0
    dev = 1.0 / np.sqrt(pr[lay.block(block).start] / weight) if lay.n_judges else 0.0
    glob = 1.0 / np.sqrt(pr[lay.glob(block)]) if block in lay.global_effects else 0.0
    return float(glob), float(dev)
