"""The bias table: one row per (judge, effect) with estimate, 95% CI, identified and enabled flags.

Every reported quantity is a linear combination vᵀp of the raw parameters p (e.g. the total position
effect of judge j is γ₀ + u_j), possibly passed through a monotone map (exp for the Davidson tie
propensity ν_j and the discrimination a_j; division by the length scale to give β per unit of the raw
log length ratio).  The Laplace CI is the map of vᵀp̂ ± 1.96·√(vᵀΣv); the bootstrap CI is the percentile
interval of the mapped replicates.

"Identified" follows Xu et al. 2026: a global covariate effect is identified when its profile likelihood
(θ and everything else re-optimised) drops by at least ``IDENTIFIED_NATS`` over ±2 prior SDs; when it
is flat the value is *prior-selected* and the note says so.  A per-judge effect is identified when the
data shrink its posterior variance below half of its prior variance.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import polars as pl
from biasboard.ranking.arrowhead import BlockCovariance, deviation_masks
from biasboard.ranking.model import AFF, DISC, LEN, POS, SEV, STYLE_BLOCKS, TIE
from biasboard.ranking.problem import BLOCK_EFFECT, LONE_GRADER_NOTE, ONE_GRADER_NOTE, Problem, prior_sd_of_effect
from biasboard.ranking.result import BIAS_COLUMNS, Z95
from biasboard.ranking.solver import Solution, covariance_block
from biasboard.ranking.uncertainty import percentile_interval
from biasboard.schemas.summary import GLOBAL_JUDGE

IDENTIFIED_NATS: float = 2.0
#: Notes of per-judge rows (the same in the dense loop and the vectorised judge-blocked rows).
PRIOR_SELECTED = "prior-selected: the data barely move this coefficient from its prior"
#: The note of a global ('*') row whose effect no judge has on (the judges' rows read ``DISABLED_NOTE``).
DISABLED_EVERY_JUDGE_NOTE = "disabled for every judge"
LEVEL_PRIOR_SELECTED = "differences between judges are identified; their common level is prior-selected"
#: The global effects a full or fast diagnostics run profiles (:data:`~biasboard.ranking.diagnostics.PROFILED`).
PROFILED = (POS, LEN, AFF)
#: A global effect's row without its profile likelihood (``--diagnostics off``): its "identified" is then the per-judge
#: rows' test, which the row would otherwise not say (the module docstring's rule is the profile's).
NO_PROFILE_NOTE = (
    "no profile likelihood (diagnostics off): identified means its posterior variance is below half its prior's"
)
BOTHBAD_NOTE = "share of this judge's ties that were 'tie (bothbad)'"
#: A judge that never ties, or ties every time: the tie propensity's maximum-likelihood value is 0 or infinite, so the
#: estimate (and one end of the interval) is the prior's, however many verdicts (:func:`tie_boundary`).
NO_TIES_NOTE = (
    "no tie among this judge's verdicts: the data bound its tie propensity from above only (estimate prior-set)"
)
ALL_TIES_NOTE = (
    "every verdict of this judge a tie: the data bound its tie propensity from below only (estimate prior-set)"
)
VARIANCE_SHRINK: float = 0.5


def informed_by_data(posterior_var: np.ndarray | float, prior_var: np.ndarray | float) -> np.ndarray:
    """Whether the verdicts, not the prior, set each coefficient: its posterior variance below :data:`VARIANCE_SHRINK`
    of its prior's (the bias table's "identified", the gate's informed excesses, the prior-selected corrections)."""
    return np.asarray(posterior_var) < VARIANCE_SHRINK * np.asarray(prior_var, dtype=float)


def tie_boundary(ties: np.ndarray, verdicts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(never ties, always ties) per judge with pair verdicts: the judges whose tie propensity is at a boundary.

    Why: a judge that never tied got 0.0056 [0.0012, 0.027] marked identified (its posterior is narrow beside the
    prior's), and one that always tied 656 [156, 2764], where the data put the value at 0 and at infinity."""
    judged = verdicts > 0
    return judged & (ties == 0), judged & (ties >= verdicts)


def _wilson(successes: float, trials: float) -> tuple[float, float, float]:
    if trials <= 0:
        return float("nan"), float("nan"), float("nan")
    p = successes / trials
    denom = 1 + Z95**2 / trials
    centre = (p + Z95**2 / (2 * trials)) / denom
    half = Z95 * np.sqrt(p * (1 - p) / trials + Z95**2 / (4 * trials**2)) / denom
    return p, centre - half, centre + half


class _Rows:
    def __init__(self, solution: Solution, cov_core: np.ndarray | BlockCovariance, boot_core: np.ndarray | None):
        self.core = solution.core
        self.cov = cov_core
        self.boot = boot_core
        self.rows: list[dict] = []

    def add(
        self,
        judge: str,
        effect: str,
        v: np.ndarray,
        *,
        fn: Callable = lambda z: z,
        identified: bool,
        enabled: bool,
        note: str,
        boot: bool = True,
    ) -> float:
        """Add a row for vᵀp; ``boot=False``: no bootstrap interval (the global rows: see :func:`bias_table`)."""
        mean = float(v @ self.core)
        if isinstance(self.cov, BlockCovariance):  # global rows only: v lives on the globals
            vg = v[self.cov.glob_index]
            sd = float(np.sqrt(max(vg @ self.cov.glob @ vg, 0.0)))
        else:
            sd = float(np.sqrt(max(v @ self.cov @ v, 0.0)))
        lo, hi = (mean - Z95 * sd, mean + Z95 * sd) if enabled else (mean, mean)
        b_lo = b_hi = float("nan")
        if self.boot is not None and enabled and boot:
            b_lo, b_hi = (float(x) for x in percentile_interval(fn(self.boot @ v)))
        self.rows.append(
            dict(
                judge=judge,
                effect=effect,
                estimate=float(fn(mean)),
                ci_low=float(fn(lo)),
                ci_high=float(fn(hi)),
                identified=bool(identified),
                enabled=bool(enabled),
                note=note,
                boot_ci_low=b_lo,
                boot_ci_high=b_hi,
            )
        )
        return sd

    def add_plain(
        self,
        judge: str,
        effect: str,
        estimate: float,
        lo: float,
        hi: float,
        *,
        identified: bool,
        enabled: bool,
        note: str,
    ) -> None:
        self.rows.append(
            dict(
                judge=judge,
                effect=effect,
                estimate=estimate,
                ci_low=lo,
                ci_high=hi,
                identified=identified,
                enabled=enabled,
                note=note,
                boot_ci_low=float("nan"),
                boot_ci_high=float("nan"),
            )
        )


def bias_table(
    problem: Problem,
    solution: Solution,
    cov_core: np.ndarray | BlockCovariance,
    profiles: dict,
    boot_core: np.ndarray | None = None,
) -> pl.DataFrame:
    """Build the bias table of a bias-aware fit (see the module docstring for the rules)."""
    lay, spec, data = problem.layout, problem.spec, problem.data
    rows = _Rows(solution, cov_core, boot_core)
    masks = spec.masks
    pairs = data.pairs
    unit = {t: spec.unit(t) for t in (LEN, *STYLE_BLOCKS[: lay.n_style])}

    global_identified: dict[int, bool] = {}
    for t in lay.global_effects:
        name = BLOCK_EFFECT[t]
        any_on = bool(masks[t].any())
        info = profiles.get(name)
        v = np.zeros(lay.n_core)
        v[lay.glob(t)] = unit.get(t, 1.0)
        sd_glob, _ = prior_sd_of_effect(problem, t)
        if info is not None:
            # the profile's prior-selected verdict, as the summary and the gate read it (an affinity that is each
            # model's own property has a wide profile from the judges' discriminations, and is not identified)
            identified = info["range_nats"] >= IDENTIFIED_NATS and not info.get("prior_selected")
            note = info["note"]
        else:
            post = covariance_block(cov_core, lay.glob(t))
            identified = any_on and bool(informed_by_data(post, sd_glob**2))
            # (the style effects are never profiled: NO_PROFILE_NOTE is for the profiled three without diagnostics)
            note = (
                DISABLED_EVERY_JUDGE_NOTE if not any_on else NO_PROFILE_NOTE if not profiles and t in PROFILED else ""
            )
            if any_on and not identified and not note:
                note = PRIOR_SELECTED  # (a style feature constant over the battles: its row was the prior's, no word)
        global_identified[t] = bool(identified)
        # No bootstrap interval: the replicates redraw battles, not judges, so they measure the mean of these judges'
        # effects, not the population mean γ₀ the Laplace interval is for (12 seeds, B = 200: position 0.06 wide
        # against 0.95, covering γ₀ 0 of 12 times).
        rows.add(GLOBAL_JUDGE, name, v, identified=identified and any_on, enabled=any_on, note=note, boot=False)
        on = np.flatnonzero(spec.deviation_mask(t))
        if on.size >= 2:
            devs = solution.core[lay.block(t)][on] * unit.get(t, 1.0)
            rows.add_plain(
                GLOBAL_JUDGE,
                f"{name}_sd",
                float(np.std(devs, ddof=1)),
                float("nan"),
                float("nan"),
                identified=bool(identified),
                enabled=True,
                note="SD across judges of the per-judge deviations (MAP)",
            )

    ties = float(pairs.tie.sum())
    share, lo, hi = _wilson(float(pairs.bothbad.sum()), ties)
    rows.add_plain(
        GLOBAL_JUDGE,
        "tie_bothbad_share",
        share,
        lo,
        hi,
        identified=ties > 0,
        enabled=True,
        note="share of ties that were 'tie (bothbad)'",
    )

    tie_by_judge = data.judge_sums("tie")
    bothbad_by_judge = data.judge_sums("bothbad")
    never_ties, always_ties = tie_boundary(tie_by_judge, data.judge_sums("n"))
    if isinstance(cov_core, BlockCovariance):
        judges = _judge_rows_blocked(
            problem,
            solution,
            cov_core,
            boot_core,
            global_identified,
            tie_by_judge,
            bothbad_by_judge,
            (never_ties, always_ties),
        )
        # Not rechunked: a copy of the judges' rows (~30 MB of fresh memory at 50k voter-judges) for nothing.
        table = pl.concat([pl.DataFrame(rows.rows, schema=BIAS_COLUMNS), judges], rechunk=False)
        return _lone_grader(table)
    E = spec.effective_map().toarray()
    peers = {int(j): group for group in severity_groups(problem) for j in group}
    prior_var = judge_prior_var(problem)
    for j, judge in enumerate(data.judges):
        for t in (POS, LEN, AFF, DISC, TIE, SEV, *STYLE_BLOCKS[: lay.n_style]):
            name = BLOCK_EFFECT[t]
            enabled = bool(masks[t, j]) if t != TIE else True
            row = lay.eff_block(t).start + j
            v = E[row] * unit.get(t, 1.0)
            fn: Callable = np.exp if t in (DISC, TIE) else (lambda z: z)
            if t == SEV and enabled:
                v = E[row] - E[lay.eff_block(SEV).start + peers[j]].mean(axis=0)
            post_var = float(v @ cov_core @ v) / unit.get(t, 1.0) ** 2
            identified = enabled and bool(informed_by_data(post_var, prior_var[t, j]))
            note = problem.notes.get((t, j), "")
            if enabled and t in global_identified and identified and not global_identified[t]:
                note = LEVEL_PRIOR_SELECTED
            if t == TIE and (never_ties[j] or always_ties[j]):
                identified, note = False, NO_TIES_NOTE if never_ties[j] else ALL_TIES_NOTE
            if enabled and not identified and not note:
                note = PRIOR_SELECTED
            rows.add(judge, name, v, fn=fn, identified=identified, enabled=enabled, note=note)
        share, lo, hi = _wilson(bothbad_by_judge[j], tie_by_judge[j])
        rows.add_plain(
            judge,
            "tie_bothbad_share",
            share,
            lo,
            hi,
            identified=bool(tie_by_judge[j] > 0),
            enabled=True,
            note=BOTHBAD_NOTE,
        )
    return _lone_grader(pl.DataFrame(rows.rows, schema=BIAS_COLUMNS))


def judge_prior_var(problem: Problem) -> np.ndarray:
    """(blocks, J): the prior variance, in fitted units, of each judge's effect as the table reports it — what its
    posterior variance is measured against for "identified".

    The effect with a global coefficient is mask·c_t + deviation_mask·dev_jt: a judge tied to the reference (a
    reference judge, or a correction tied to it) has the global coefficient alone, whose prior is c_t's, not c_t's
    and the excess's (SD 2): a reference judge's length was "identified" on two cells beside the global row, the
    same number with the same interval, saying "not identified".  log a_j centred over n judges and a severity
    measured from the mean of its G graders have prior variance σ²(1 − 1/n) and σ²(1 − 1/G): with two judges
    σ²/2, so measured against σ² any data at all (35 battles of one of them) made both a_j "identified".  The free
    log a_j beside a judge whose a_j is fixed at 1 are uncentred and share a common mean: each is measured against its
    prior given the other free judges' (:func:`_given_the_other_free_judges`)."""
    lay, spec = problem.layout, problem.spec
    out = np.zeros((lay.n_blocks, lay.n_judges))
    for t in range(lay.n_blocks):
        sd_glob, sd_dev = prior_sd_of_effect(problem, t)
        out[t] = (spec.masks[t] if t != TIE else 1.0) * sd_dev**2
        if t in lay.global_effects:
            out[t] = spec.deviation_mask(t) * sd_dev**2 + spec.masks[t] * sd_glob**2
    centred = spec.disc_centring()
    if centred is not None:  # L_j = ρ_j − Σ w_k ρ_k: prior variance σ²((1 − w_j)² + Σ_{k≠j} w_k²)
        on, w = centred
        out[DISC, on] *= 1.0 - 2.0 * w + w @ w
    _given_the_other_free_judges(problem, out[DISC])
    for group in severity_groups(problem):
        out[SEV, group] *= 1.0 - 1.0 / group.size
    return out


def _given_the_other_free_judges(problem: Problem, disc_var: np.ndarray) -> None:
    """``disc_var`` (per judge, σ² on entry) with each free log a_j beside a fixed judge measured against
    Var(ρ_j | the other free ρ_k) = 1 / (1/σ² + κ): the diagonal of the prior's precision, its common mean's
    negative-κ gauge included (:func:`~biasboard.ranking.problem.free_discrimination_mean`); no change elsewhere.

    Why: there ρ_j = μ_a + e_j, μ_a ~ N(0, sd_μ²), so ρ_j's own verdicts must halve σ² plus what the other free
    judges leave unknown of μ_a.  Against σ² alone a lone free judge (its prior N(0, σ² + sd_μ²) = N(0, 2.02²)),
    60 verdicts beside a fixed judge's 1,000, was "prior-selected" on every simulated board though its estimate
    followed its own truth (slope 1.1); against the whole marginal σ² + sd_μ² a free judge of self-battles alone,
    its a_j read from the others' mean, was "identified" on every board (docs/design-notes.md, "Identified")."""
    start = problem.layout.block(DISC).start
    for at, kappa in problem.prior.gauges:
        judges = at - start
        if judges.size and judges.min() >= 0 and judges.max() < disc_var.size:  # a gauge over log a_j alone
            disc_var[judges] = 1.0 / (1.0 / disc_var[judges] + kappa)


def severity_groups(problem: Problem) -> list[np.ndarray]:
    """The graders (judge indices) whose mean each grader's severity is measured from, group by group
    (:attr:`~biasboard.ranking.problem.Problem.severity_group`; every grader one group when it is None)."""
    graders = np.flatnonzero(problem.spec.masks[SEV] > 0)
    if problem.severity_group is None:
        return [graders] if graders.size else []
    group = problem.severity_group
    graders = np.flatnonzero(group >= 0)
    order = graders[np.argsort(group[graders], kind="stable")]  # (one sort, not a pass over the judges per group)
    return np.split(order, np.flatnonzero(np.diff(group[order])) + 1)


def _lone_grader(table: pl.DataFrame) -> pl.DataFrame:
    """``table`` with a lone grader's severity row (:data:`~biasboard.ranking.problem.ONE_GRADER_NOTE`, or alone in
    its group: :data:`~biasboard.ranking.problem.LONE_GRADER_NOTE`) not identified.

    Why: that estimate is 0 with a zero-width interval by construction, which the table called identified and the
    report drew as a filled dot at 0 — a measured "neither harsh nor lenient" (MT-Bench's single grades, GPT-4 the
    only grader), its note notwithstanding."""
    lone = pl.col("note").fill_null("").is_in([ONE_GRADER_NOTE, LONE_GRADER_NOTE])
    return table.with_columns(pl.col("identified") & ~lone)


def _judge_rows_blocked(
    problem: Problem,
    solution: Solution,
    cov: BlockCovariance,
    boot_core: np.ndarray | None,
    global_identified: dict[int, bool],
    ties: np.ndarray,
    bothbad: np.ndarray,
    tie_bounds: tuple[np.ndarray, np.ndarray],
) -> pl.DataFrame:
    """The per-judge rows of a judge-blocked fit, vectorised over judges (the same rules as the loop above).

    Judge j's total effect t is mask·(c_t + dev_jt) for the effects with a global coefficient c_t (position,
    length, affinity and the style effects), so its variance is var(c_t) + var(dev_jt) + 2 cov(dev_jt, c_t),
    all in :class:`BlockCovariance`; log a_j is centred.
    """
    lay, spec = problem.layout, problem.spec
    jn, m = lay.n_judges, lay.n_models
    masks = spec.masks
    unit = {t: spec.unit(t) for t in (LEN, *STYLE_BLOCKS[: lay.n_style])}
    blocks = tuple(range(lay.n_blocks))  # the dense loop's order: the six, then the style blocks
    globs = lay.global_effects  # global coefficient c (at m + c among the globals) is block globs[c]
    centred = spec.disc_centring()
    groups = severity_groups(problem)

    dev = deviation_masks(spec).T  # (K, J)

    def effects(core: np.ndarray) -> np.ndarray:  # (..., K, J) effective judge effects from raw cores
        raw = core[..., lay.block(0).start : lay.tau.start].reshape(*core.shape[:-1], len(blocks), jn) * dev
        if centred is not None:
            on, w = centred
            raw[..., DISC, :] -= (raw[..., DISC, on] @ w)[..., None]
            raw[..., DISC, :] *= masks[DISC]
        for group in groups:
            raw[..., SEV, group] -= raw[..., SEV, group].mean(axis=-1, keepdims=True)
        raw[..., SEV, :] *= masks[SEV]
        for t in globs:
            raw[..., t, :] += core[..., lay.glob(t), None] * masks[t]
        return raw

    est = effects(solution.core)
    var = cov.judge_var.T * dev
    for c, t in enumerate(globs):
        var[t] += masks[t] * cov.glob[m + c, m + c] + 2.0 * masks[t] * dev[t] * cov.judge_glob[:, t, c]
    pos = np.full(lay.n_core, -1)
    pos[cov.glob_index] = np.arange(cov.glob_index.size)
    for group in groups:  # var(α_j − mean α) from the graders' block of the globals (their severities are globals)
        sub = cov.glob[np.ix_(*[pos[lay.block(SEV).start + group]] * 2)]
        var[SEV, group] = np.diag(sub) - 2.0 * sub.mean(axis=1) + sub.mean()
    var = np.clip(var, 0.0, None)
    boot = None if boot_core is None else effects(boot_core)
    # Columns laid out judge-major, as (J, K + 1) arrays — the K effects, then the bothbad share — (the dense
    # loop's order: judge by judge, effects in block order, then the share); notes as codes into ``texts``, so
    # no per-row Python string is made.  Each rule is applied to the (K, J) arrays of every block at once
    # (the same elementwise arithmetic as block by block; exp row by row) and the result written transposed
    # into its column: per block, ~15 passes over J entries cost more in calls than in arithmetic.
    rows = len(blocks) + 1
    cols = {
        name: np.empty((jn, rows), np.float64 if dtype == pl.Float64 else bool)
        for name, dtype in BIAS_COLUMNS.items()
        if name not in ("judge", "effect", "note", "boot_ci_low", "boot_ci_high") or boot is not None
    }
    texts = [*problem.notes.texts, "", PRIOR_SELECTED, LEVEL_PRIOR_SELECTED, BOTHBAD_NOTE, NO_TIES_NOTE, ALL_TIES_NOTE]
    scale = np.array([unit.get(t, 1.0) for t in blocks])[:, None]
    exp_rows = [t for t in blocks if t in (DISC, TIE)]
    enabled = masks[: len(blocks)] > 0
    enabled[TIE] = True
    mean, sd = est * scale, np.sqrt(var) * scale
    lo = np.where(enabled, mean - Z95 * sd, mean)
    hi = np.where(enabled, mean + Z95 * sd, mean)
    identified = enabled & informed_by_data(var, judge_prior_var(problem))
    noted = problem.notes.codes[: len(blocks)]
    code = np.where(noted >= 0, noted, texts.index(""))
    blank = enabled & (noted < 0)
    level = np.array([t in global_identified and not global_identified[t] for t in blocks])[:, None]
    code[blank & identified & level] = texts.index(LEVEL_PRIOR_SELECTED)
    code[blank & ~identified] = texts.index(PRIOR_SELECTED)
    for boundary, text in zip(tie_bounds, (NO_TIES_NOTE, ALL_TIES_NOTE), strict=True):  # (:func:`tie_boundary`)
        identified[TIE, boundary] = False
        code[TIE, boundary] = texts.index(text)
    codes = np.empty((jn, rows), np.uint32)  # gather indices as polars' own (u32): no conversion of 350k
    codes[:, :-1] = code.T
    for key, values in (("estimate", mean), ("ci_low", lo), ("ci_high", hi)):
        for t in exp_rows:  # the tie propensity and the discrimination are reported on their natural scale
            values[t] = np.exp(values[t])
        cols[key][:, :-1] = values.T
    cols["identified"][:, :-1] = identified.T
    cols["enabled"][:, :-1] = enabled.T
    if boot is not None:
        for t in blocks:
            fn: Callable = np.exp if t in exp_rows else (lambda z: z)
            b_lo, b_hi = percentile_interval(fn(boot[:, t, :] * scale[t, 0]))
            cols["boot_ci_low"][:, t] = np.where(enabled[t], b_lo, np.nan)
            cols["boot_ci_high"][:, t] = np.where(enabled[t], b_hi, np.nan)
    share, lo, hi = _wilson_arrays(bothbad, ties)
    for key, values in (
        ("estimate", share),
        ("ci_low", lo),
        ("ci_high", hi),
        ("identified", ties > 0),
        ("enabled", True),
        ("boot_ci_low", np.nan),
        ("boot_ci_high", np.nan),
    ):
        if key in cols:
            cols[key][:, -1] = values
    codes[:, -1] = texts.index(BOTHBAD_NOTE)
    names = [BLOCK_EFFECT[t] for t in blocks] + ["tie_bothbad_share"]
    strings = {
        "judge": pl.Series(problem.data.judges, dtype=pl.String).gather(
            np.repeat(np.arange(jn, dtype=np.uint32), rows)
        ),
        "effect": pl.Series(names, dtype=pl.String).gather(np.tile(np.arange(rows, dtype=np.uint32), jn)),
        "note": pl.Series(texts, dtype=pl.String).gather(codes.ravel()),
    }
    nan = np.full(jn * rows, np.nan)  # the bootstrap columns without replicates
    return pl.DataFrame(
        {
            key: strings[key]
            if key in strings
            else pl.Series(key, cols[key].ravel() if key in cols else nan, dtype=dtype)
            for key, dtype in BIAS_COLUMNS.items()
        }
    )


def _wilson_arrays(successes: np.ndarray, trials: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_wilson` over arrays (NaN where there are no trials)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        p = successes / trials
        denom = 1 + Z95**2 / trials
        centre = (p + Z95**2 / (2 * trials)) / denom
        half = Z95 * np.sqrt(p * (1 - p) / trials + Z95**2 / (4 * trials**2)) / denom
    bad = trials <= 0
    return np.where(bad, np.nan, p), np.where(bad, np.nan, centre - half), np.where(bad, np.nan, centre + half)
