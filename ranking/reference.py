"""What "unbiased" means: correct every judge toward a trusted reference, gated, identified effects only.

A judge's effect is a bias only relative to what trusted raters do: humans prefer longer answers too, so
subtracting every length effect removes quality the humans see.  Three references (docs/design-notes.md):

* ``none`` — effects are measured against zero (style control, LMArena's choice); the corrected rating
  is θ_m.
* ``anchors`` — trusted verdicts given apart from the battles, fitted as one more rater
  (:data:`ANCHOR_JUDGE`, no family of its own) and not counted in the leaderboard's battles;
* named judges of the input (e.g. human pools): several are one rater for position, length, affinity and
  style, each keeping its own discrimination and tie propensity; a glob pattern names a pool of
  voter-judges (``human-pool-1/*``, see :class:`Reference`).

With a reference r the model's global position, length, affinity (and style) coefficients *are* r's own effects,
estimated from r's verdicts (``ModelConfig.reference``); every other judge's deviation is its bias, the
excess over r.  The corrected rating is what r would conclude on each model's typical answers::

    φ_m = θ_m + (β_r / a_r) · x̄_m + Σ_k (δ_rk / a_r) · s̄_mk,   x̄_m = clip(μ_m − mean_k μ_k, −c, c)

with μ_m model m's mean log length, c the length clip, β_r r's length effect per unit of log length ratio
and a_r r's discrimination (so r's preference is expressed on θ's scale); with style counts in the cells,
δ_rk is r's effect of style feature k (header, list, bold) per unit of normalised difference and s̄_mk model
m's typical difference: the least-squares fit of the pairs' mean differences it met, s̄_m − s̄_n ≈ the mean d
between m and n (:func:`~biasboard.ranking.reference_rating.typical_style`).
Position is averaged out and r's affinity (a rater's preference for its own family) is reported, not added.
φ (:mod:`biasboard.ranking.reference_rating`) is identified even where θ and β_r are not (length constant within
each model, Xu et al. 2026): r's verdicts measure θ_m + β_r·μ_m directly, whatever split the prior picks.  Its
covariance is the delta-method map of the Laplace posterior; with bootstrap replicates its intervals, top-k
probabilities and rank intervals are read from φ at each replicate
(:func:`~biasboard.ranking.reference_rating.reference_replicates`), which are made for the published board only:
the all-on board is fit without them and gets them only if the gate publishes it.

Which excesses are corrected is decided by the trusted-anchor gate (:mod:`biasboard.ranking.gate`), on the fit
with every correction on, where each excess is over the reference's own estimate, with that estimate's
uncertainty; an excess the gate does not support is *tied* to the reference (the judge is taken to do what r
does).  The reference's own length and style effects are tested too, at the same level, as its verdicts estimate
them in that fit (:func:`reference_effect_supported`): they enter every rating, and one the reference's verdicts
cannot tell from zero is taken as zero (a judge tied to it then keeps its own preference in θ).  The gate used to
run after that zeroing, so it tested the judges against an exact 0 and corrected what the reference may well
share.  An
effect the identifiability check reports as prior-selected is not applied to the published board unless
``apply_unidentified``: with a reference, a judge whose excess the data barely move from its prior; with
``none``, an effect whose profile likelihood is flat.  The summary lists each with what applying it would
change (τ and the largest rank moves).  Pure numpy/polars over the core's fit functions; no Beam.

Every covariance across judges (the gate's joint test, the relative bias table, the reference rating's
delta method) is a covariance of a few sparse linear functions of the core (:func:`gate.row_covariance`):
from the dense Laplace covariance, or with the judge-blocked solver (10⁴–10⁶ voter-judges) from the
fit's block-arrowhead factorisation, which is dropped (:func:`_lean`) once the reference has what it needs.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import polars as pl
import scipy.sparse as sp
from biasboard.ranking.arrowhead import BlockCovariance
from biasboard.ranking.attribution import NOT_APPLIED
from biasboard.ranking.bias_table import DISABLED_EVERY_JUDGE_NOTE, informed_by_data
from biasboard.ranking.config import ModelConfig, NaiveConfig
from biasboard.ranking.data import CellsInput, Dataset, build_dataset, with_judge
from biasboard.ranking.diagnostics import compare_rankings
from biasboard.ranking.fit import (
    bootstrap_interval_warnings,
    centred_draws,
    fit_naive,
    publish_bias_aware,
    solve_bias_aware,
)
from biasboard.ranking.gate import (
    DEFAULT_LEVEL,
    GATED,
    LISTED_JUDGES,
    GateResult,
    excess_prior_var,
    excess_vectors,
    gated_effects,
    reference_mask,
    row_covariance,
    run_gate,
)
from biasboard.ranking.model import DISC, LEN, POS, STYLE_BLOCKS
from biasboard.ranking.problem import DISABLED_NOTE, Problem, bias_aware_problem
from biasboard.ranking.rank_stats import ranks_desc
from biasboard.ranking.reference_rating import (
    RatingMap,
    discrimination_row,
    lengthless_warnings,
    rated_effects,
    reference_map,
)
from biasboard.ranking.result import Z95, FitResult
from biasboard.ranking.solver import Solution
from biasboard.ranking.uncertainty import centre_within, centring_matrix, percentile_interval, top_k_probabilities
from biasboard.schemas.errors import InputError
from biasboard.schemas.names import canonical_name
from biasboard.schemas.summary import (
    AGREEMENT_BOARDS,
    GLOBAL_JUDGE,
    TIED_TO_REFERENCE,
    agreement_listed_note,
    reference_keeps,
    zero_reference_effect,
)

#: The note of a bias-table row that holds a judge's excess over the reference (:func:`relative_bias`).
EXCESS_ROW_NOTE = "excess over the reference (the judge's bias relative to it)"
#: A judge's row of an effect the gate left uncorrected where the reference's own is taken as zero.
GATED_OFF_ZERO_REFERENCE_NOTE = (
    "not corrected: the gate does not support an excess over the reference, whose own effect is taken as zero, so "
    "this judge's preference stays in the ratings"
)
#: A judge's row of an effect the reference's own is taken as zero for (:func:`zero_reference_notes`).
ZERO_REFERENCE_EXCESS_NOTE = (
    "the judge's own effect: the reference's is taken as zero, so this is also its excess over the reference"
)
#: The note of a bias-table row of a judge tied to the reference (:func:`relative_bias`).
TIED_ROW_NOTE = f"{TIED_TO_REFERENCE}: no excess corrected"
#: The note of a tied row whose excess the gate supports but the data do not identify (prior-selected, not applied).
PRIOR_SELECTED_TIED_NOTE = (
    f"{TIED_TO_REFERENCE}: prior-selected (the data do not identify its excess), so not corrected although the gate "
    "supports the effect; --apply-unidentified applies it"
)
#: The bias table's bootstrap interval columns.
BOOT_COLUMNS: tuple[str, ...] = ("boot_ci_low", "boot_ci_high")
#: The judge name trusted anchors are fitted under (not a valid model or judge name of any import).
ANCHOR_JUDGE = "(anchors)"
REFERENCE_KINDS = ("none", "anchors")
#: A pattern's matches are named in the reference's description when there are at most this many (not 25,000 voters).
NAMED_RATERS = 5


@dataclass(frozen=True)
class Reference:
    """Which raters define "unbiased": ``none`` (zero), ``anchors``, or named judges of the input.

    A name with a glob character (``*``, ``?``, ``[``) is a pattern over the input's judges: arena logs name
    each voter as a judge (``human-pool-1/v17``), and ``human-pool-1/*`` makes the whole pool the reference
    without listing 25,000 voters.  A judge whose exact name it is comes first (:meth:`resolve`): ``judge[1]``
    names the judge called ``judge[1]``, which as a pattern would match ``judge1`` and never itself; it is a
    pattern only when no judge has that name.  Its voters are one rater for position, length and affinity (those are
    the model's global coefficients, every voter tied to them) and keep their own discrimination and tie
    propensity, shrunk to the population as without a reference.
    """

    kind: str = "none"
    judges: tuple[str, ...] = ()

    @staticmethod
    def parse(text: str | None, has_anchors: bool) -> Reference:
        """``--reference`` value → Reference (default: anchors when anchors are given, else none)."""
        if text is None or not text.strip():
            return Reference("anchors", (ANCHOR_JUDGE,)) if has_anchors else Reference()
        value = text.strip()
        if value == "none":
            return Reference()
        if value == "anchors":
            if not has_anchors:
                raise InputError("--reference anchors: no --anchors given")
            return Reference("anchors", (ANCHOR_JUDGE,))
        # read as the input's judge names are: a name pasted decomposed names its judge
        names = tuple(sorted({canonical_name(name) for name in value.split(",") if canonical_name(name)}))
        if not names:
            raise InputError(f"--reference: no judge named in {text!r}")
        return Reference("judges", names)

    @property
    def raters(self) -> frozenset[str]:
        """The names as given (patterns unexpanded: :meth:`resolve` matches them against the judges)."""
        return frozenset(self.judges)

    @property
    def has_patterns(self) -> bool:
        return any(_is_pattern(name) for name in self.judges)

    def resolve(self, judges: Sequence[str]) -> frozenset[str]:
        """The input's judges that the names and patterns select; InputError naming any that selects none.

        A name is first a judge's exact name, then (with a glob character and no judge of that name) a pattern."""
        if self.kind != "judges":
            return self.raters
        known = set(judges)
        chosen: set[str] = set()
        missing = []
        for name in self.judges:
            if name in known or not _is_pattern(name):
                found = [name] if name in known else []  # an exact judge name is that judge, even 'judge[1]'
            else:
                match = re.compile(fnmatch.translate(name)).match  # case-sensitive, as judge names are
                found = [judge for judge in judges if match(judge)]
            if not found:
                missing.append(name)
            chosen.update(found)
        if missing:
            shown = ", ".join(judges[:10]) + (", ..." if len(judges) > 10 else "")
            what = "no judge matches" if any(_is_pattern(name) for name in missing) else "no battles by judge(s)"
            raise InputError(f"--reference: {what} {', '.join(missing)} in the input (judges: {shown})")
        return frozenset(chosen)

    def describe(self, raters: Sequence[str], effects: Sequence[str] = ()) -> str:
        """The reference in words, as the fit used it: ``raters`` are the judges :meth:`resolve` selected, ``effects``
        the ones they share (default position, length and affinity).

        Several judges are one rater for those effects (the model's global coefficients, none of them deviating)
        and keep their own discrimination and tie propensity; one judge is simply that judge.  Why: the text said
        "pooled as one rater" of a single judge, and of a pattern only "g* (2 judges, ...)", never which."""
        if self.kind == "none":
            return "none: each judge's effects are measured against zero (style control)"
        if self.kind == "anchors":
            return "anchors: the trusted verdicts given with --anchors, fitted as one rater and not counted in battles"
        given = ", ".join(self.judges)
        names = sorted(raters) or list(self.judges)  # (a fit always has them: resolve refuses a name matching none)
        patterned = any(_is_pattern(name) and name not in names for name in self.judges)  # 'judge[1]' is a name
        shown = f", {_in_words(names)}," if patterned and len(names) <= NAMED_RATERS else ""
        if len(names) == 1:  # one rater, nothing pooled ('judge[1]' named exactly, or a pattern matching one)
            return f"judge: {names[0]}" + (f" (the one judge matching {given!r})" if patterned else "")
        shared = _in_words(list(effects) or ["position", "length", "affinity"])
        if patterned:
            what = f"the {len(names)} judges {'matching' if len(self.judges) == 1 else 'selected by'} {given!r}{shown}"
        else:
            what = f"the {len(names)} judges"
        return (
            f"judges: {given} ({what} together: one rater for {shared}, each judge with its own "
            "discrimination (the reference's: their geometric mean, weighted by their verdicts) and tie propensity)"
        )


def _in_words(items: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return ", ".join(items[:-1]) + f" and {items[-1]}" if len(items) > 1 else items[0]


def _is_pattern(name: str) -> bool:
    return any(c in name for c in "*?[")


@dataclass(frozen=True)
class ReferenceSettings:
    """The gate's family-wise level and whether prior-selected effects are applied anyway."""

    gate_level: float = DEFAULT_LEVEL
    apply_unidentified: bool = False

    def __post_init__(self) -> None:
        if not 0.0 < self.gate_level < 1.0:
            raise ValueError(f"gate level must be in (0, 1), got {self.gate_level}")


@dataclass(frozen=True)
class ReferenceFit:
    """The published boards and the evidence behind them.

    ``corrected`` carries the reference rating φ as its ``rating`` (with CI, top-k and the battles of the
    judges only); ``all_on`` is the same with every correction on (what the gate and the identified-only
    rule were deciding about); ``config`` is the model actually published.
    """

    reference: Reference
    naive: FitResult
    corrected: FitResult
    all_on: FitResult
    config: ModelConfig
    gate: GateResult | None
    own_effects: dict[str, dict[str, Any]]
    unidentified: list[dict[str, Any]]
    all_on_comparison: dict[str, Any]
    k: int = 0
    notes: list[str] = field(default_factory=list)
    agreement: list[dict[str, Any]] = field(default_factory=list)
    #: The input's judges the reference selects (its names, or its patterns' matches).
    raters: tuple[str, ...] = ()
    #: Grades beside the battles set θ's scale (the discriminations a_j, a_r among them, are free, not centred on the
    #: judges' verdict-weighted mean): what a_r's 1 means in words (``transforms.snapshot.weak_reference_warning``).
    graded_scale: bool = False

    def gate_counts(self) -> tuple[int, int, int]:
        """(excesses the published board corrects, excesses the gate supports but leaves off as prior-selected —
        without ``--apply-unidentified`` — and excesses the gate tested); zeros without a gate.  One count for the
        board's warning and each slice's note: "the gate corrected 12 of 12" was said of a board applying 10."""
        if self.gate is None:
            return 0, 0, 0
        decisions = self.gate.decisions
        supported = decisions.filter(pl.col("enabled")).select("judge", "effect").iter_rows()
        withheld = sum(1 for pair in supported if pair in self.config.disabled)
        return int(decisions["enabled"].sum()) - withheld, withheld, decisions.height

    @property
    def n_raters(self) -> int:
        """How many of the input's judges the reference selects."""
        return len(self.raters)

    @property
    def bias(self) -> pl.DataFrame:
        return self.corrected.bias

    def summary(self) -> dict[str, Any]:
        """The ``reference`` section of summary.json."""
        return {
            "kind": self.reference.kind,
            "judges": list(self.reference.judges),
            "description": self.reference.describe(
                self.raters, [effect for effect in self.own_effects if effect != "discrimination"]
            ),
            "corrected_rating": "theta"
            if self.reference.kind == "none"
            else "theta_m + (beta_r / a_r) * clip(mean log length_m - pool mean, -clip, clip) [+ sum_k (delta_rk / "
            "a_r) * typical style difference_mk (least squares over the pairs it met), with style counts]: what the "
            "reference concludes on each model's typical answers, position averaged out",
            "verdicts": self.k,
            "own_effects": self.own_effects,
            "gate": None if self.gate is None else self.gate.to_json(),
            "unidentified": self.unidentified,
            "all_corrections_on": self.all_on_comparison,
            "agreement": self.agreement,
            "notes": self.notes,
        }


# --------------------------------------------------------------------------- the reference rating


def effective_core(problem: Problem, core: np.ndarray) -> np.ndarray:
    """E @ core (the effective coordinates), the centring of log a_j applied in O(J) rather than through E."""
    return problem.spec.centred_disc(problem.spec.effective_map(centred=False) @ core, core)


def with_rating(
    fit: FitResult,
    rating: np.ndarray,
    jac: RatingMap,
    n_battles: np.ndarray,
    draws: int,
    seed: int,
    replicates: np.ndarray | None = None,
) -> FitResult:
    """``fit`` with θ replaced by another linear(ised) function of the core: centred rating, covariance, CIs,
    top-k probabilities recomputed; ``n_battles`` as given (the judges' battles only).

    With ``replicates`` (the rating at each bootstrap replicate, uncentred) the CIs (percentile), P(top-k) and the
    rank intervals come from them, as for θ (``uncertainty="bootstrap"``); else from the Laplace posterior mapped
    by ``jac`` (the delta method).  ``se`` is the delta method's either way.  The warnings about θ's bootstrap
    intervals (too wide, a rating outside its own) are replaced by the same checks of the published rating's: they
    named θ's models while the board showed φ's intervals (a reference board of 4 replicates warned of 1 rating
    outside its interval where 2 of the published ones were, and of none at 7 replicates where 1 was).
    """
    m = rating.size
    cov_u = jac.covariance(fit.state.cov_core)
    component = fit.component
    split = component if component.size and component.max() > 0 else None
    proj = centring_matrix(component, m)  # θ is centred within each comparison component
    cov = proj @ cov_u @ proj.T
    centred = centre_within(rating, split)
    se = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    jitter = 1e-12 * max(float(np.mean(np.diag(cov_u))), 1e-300)
    chol = np.linalg.cholesky(cov_u + jitter * np.eye(m))
    ci_low, ci_high = centred - Z95 * se, centred + Z95 * se
    boot = boot_lo = boot_hi = None
    if replicates is not None and len(replicates):
        boot = centre_within(replicates, split)
        boot_lo, boot_hi = percentile_interval(boot)
        ci_low, ci_high, samples = boot_lo, boot_hi, boot
    else:
        samples = centred_draws(centred, chol, draws, np.random.default_rng(seed), split)
    warnings = list(fit.diagnostics.get("warnings", []))
    if fit.boot_ci_low is not None and fit.boot_ci_high is not None and fit.boot_theta is not None:
        theta_warnings = bootstrap_interval_warnings(
            fit.method, fit.models, fit.rating, fit.se, fit.boot_ci_low, fit.boot_ci_high, len(fit.boot_theta)
        )
        warnings = [w for w in warnings if w not in theta_warnings]
    if boot is not None and boot_lo is not None and boot_hi is not None:
        warnings += bootstrap_interval_warnings(fit.method, fit.models, centred, se, boot_lo, boot_hi, len(boot))
    return replace(
        fit,
        diagnostics={**fit.diagnostics, "warnings": warnings},
        rating=centred,
        se=se,
        ci_low=ci_low,
        ci_high=ci_high,
        cov=cov,
        p_top_k=top_k_probabilities(samples, fit.k, split),
        n_battles=n_battles,
        solver=replace(fit.state, theta_chol=chol),
        boot_theta=boot,
        boot_ci_low=boot_lo,
        boot_ci_high=boot_hi,
        uncertainty="bootstrap" if boot is not None else ("godambe" if fit.uncertainty == "godambe" else "laplace"),
        boot_reference=None,
    )


def own_effects(problem: Problem, fit: FitResult, reference: frozenset[str]) -> dict[str, dict[str, Any]]:
    """The reference's own position, length, affinity, style (with style counts) and discrimination, 95% CIs."""
    lay, spec = problem.layout, problem.spec
    core, cov = fit.state.core, fit.state.cov_core
    out: dict[str, dict[str, Any]] = {}
    rows: dict[str, np.ndarray] = {}
    gated = gated_effects(lay)
    for effect, t in gated.items():
        if spec.tied is None or not spec.tied[t].any():
            out[effect] = {
                "estimate": 0.0,
                "ci_low": None,
                "ci_high": None,
                "source": "no data of the reference for this effect: its effect is taken as zero",
            }
            continue
        rows[effect] = np.zeros(lay.n_core)
        rows[effect][lay.glob(t)] = spec.unit(t)
    if reference_mask(problem, reference).any():
        rows["discrimination"] = discrimination_row(problem, reference)
    if not rows:
        return out
    sds = np.sqrt(np.clip(row_covariance(cov, sp.csr_matrix(np.array(list(rows.values())))).diagonal(), 0.0, None))
    others = np.array([judge not in reference for judge in problem.data.judges], bool)
    for (effect, v), sd in zip(rows.items(), sds, strict=True):
        est = float(v @ core)
        if effect == "discrimination":
            out[effect] = {
                "estimate": float(np.exp(est)),
                "ci_low": float(np.exp(est - Z95 * sd)),
                "ci_high": float(np.exp(est + Z95 * sd)),
                "source": "the reference's scale on quality differences (a_r)",
            }
        else:
            # A judge tied to the reference (its excess not supported, or switched off) shares this coefficient, so its
            # verdicts estimate it too: said, since its CI is then the pool's, far narrower than the reference's own
            # (8 anchors: ±0.04 where the gate's excess SE was 0.62).
            tied = int(np.count_nonzero(spec.tied[gated[effect]] * others)) if spec.tied is not None else 0
            out[effect] = {
                "estimate": est,
                "ci_low": est - Z95 * float(sd),
                "ci_high": est + Z95 * float(sd),
                "source": "estimated from the reference's verdicts"
                + (f" and those of the {tied} judge(s) tied to it (no excess over it corrected)" if tied else ""),
            }
    return {effect: out[effect] for effect in (*gated, "discrimination") if effect in out}


def zero_reference_notes(
    bias: pl.DataFrame,
    effects: dict[str, dict[str, Any]],
    raters: frozenset[str],
    gated_off: frozenset[tuple[str, str]] = frozenset(),
) -> pl.DataFrame:
    """``bias`` with the notes said plainly where the reference's own effect is taken as zero (it has no data for
    it, or its estimate is not distinguishable from zero): the reference's rows carry that reason (they read
    "disabled by configuration", the mechanism rather than the reason), and the '*' row — the reference's effect
    wherever the reference has one — says it is the judges' mean there, not the reference's (it read as the
    reference's, identified, while the rating applied zero).  The other judges' rows of such an effect are their
    own effects, i.e. their excess over a zero, and say so: they carried no note while the same judges' position rows
    read "excess over the reference" (LLMFAO with ``--reference crowd``: GPT-4's length −0.228, blank).  A judge
    whose excess the gate left uncorrected (``gated_off``) keeps its preference in the ratings and says so: it read
    "disabled by configuration" (8 anchors, under the gate's floor: no flag had disabled anything)."""
    zero = {e: v["source"] for e, v in effects.items() if zero_reference_effect(v)}
    if not zero:
        return bias
    note = pl.col("note")
    unnoted = note.is_null() | (note == "")
    for effect, source in zero.items():
        here = pl.col("effect") == effect
        note = (
            pl.when(here & pl.col("judge").is_in(list(raters)))
            .then(pl.lit(f"reference: {source}"))
            .when(here & (pl.col("judge") == GLOBAL_JUDGE))
            .then(pl.lit(f"the judges' mean, not the reference's (the reference's own: {source})"))
            .when(here & pl.col("judge").is_in([judge for judge, e in gated_off if e == effect]))
            .then(pl.lit(GATED_OFF_ZERO_REFERENCE_NOTE))
            .when(here & unnoted)
            .then(pl.lit(ZERO_REFERENCE_EXCESS_NOTE))
            .otherwise(note)
        )
    return bias.with_columns(note.alias("note"))


#: The start of the note of a '*' row that holds the reference's own effect (:func:`reference_global_notes`).
REFERENCE_GLOBAL_NOTE = "the reference's own effect, not the judges' mean"


def reference_global_notes(bias: pl.DataFrame, effects: dict[str, dict[str, Any]]) -> pl.DataFrame:
    """``bias`` with the '*' row of each effect the reference has its own of (and the ratings keep) said to be the
    reference's: with a reference the global coefficient *is* the reference's effect (the judges' rows are their
    deviations from it), so that row is not the judges' population mean it is without one, though the report labelled
    it "all judges (global)" (now :data:`~biasboard.schemas.summary.REFERENCE_OWN_LABEL`) and README called the style
    rows population means (simulated, a pool with header 0.3 beside three judges with 0.7-1.1: the '*' header row
    0.195, the pool's own, where the judges' mean is 0.9).  Its note says whose verdicts estimate it
    (:func:`own_effects`: the judges tied to it share it) before the row's own note."""
    kept = {e: v["source"] for e, v in effects.items() if reference_keeps(e, effects)}
    if not kept:
        return bias
    note = pl.col("note")
    for effect, source in kept.items():
        said = pl.lit(f"{REFERENCE_GLOBAL_NOTE} ({source})")
        here = (pl.col("effect") == effect) & (pl.col("judge") == GLOBAL_JUDGE)
        joined = (
            pl.when(note.is_null() | (note == "")).then(said).otherwise(pl.concat_str([said, note], separator="; "))
        )
        note = pl.when(here).then(joined).otherwise(note)
    return bias.with_columns(note.alias("note"))


def reference_effect_supported(own: dict[str, Any], level: float) -> bool:
    """Whether one of the reference's own effects (:func:`own_effects`) differs from zero at ``level`` (two-sided
    Wald).

    The reference's effects are gated like the judges': its length effect enters every rating (β_r·x̄_m),
    and with tens or hundreds of anchors it is known only to ±0.3 or so (measured in
    ``bench/reference_study.py``), enough to reorder a board whose reference in truth has no length
    preference; so do its style effects.  Position never enters the rating and affinity is not added, so
    only the :func:`rated_effects` are tested.
    """
    from scipy.special import ndtr  # the normal tail without importing scipy.stats (rank_stats says why)

    if own.get("ci_low") is None:
        return False
    sd = (own["ci_high"] - own["ci_low"]) / (2 * Z95)
    if sd <= 0:
        return True
    return bool(2 * ndtr(-abs(own["estimate"]) / sd) <= level)


def relative_bias(
    problem: Problem,
    fit: FitResult,
    reference: frozenset[str],
    withheld: frozenset[tuple[str, str]] = frozenset(),
) -> pl.DataFrame:
    """The bias table with each judge's position/length/affinity (and style) effect given as its excess over the
    reference.

    An excess row's bootstrap interval is left empty (NaN): the table's replicate intervals are of each judge's
    whole effect (the replicates' raw cores are not kept), which is not its excess — they did not even contain
    the excess's estimate.  Its Laplace interval (``ci_low``/``ci_high``) is the excess's own.

    ``withheld``: (judge, effect) corrections the gate supports but left off as prior-selected; their tied rows say so
    and are not identified.  Why: they read "tied to the reference: no excess corrected", identified, beside a gate
    table saying "enabled" for the same excess, and the report listed them as tied by the gate."""
    table = fit.bias
    core, cov = fit.state.core, fit.state.cov_core
    names = np.asarray(problem.data.judges, dtype=object)
    updates: list[pl.DataFrame] = []  # per effect, the excess rows and the tied rows, as columns (J ~ 10⁴-10⁶)
    for effect, t in gated_effects(problem.layout).items():
        if problem.spec.tied is None or not problem.spec.tied[t].any():
            continue
        judges, rows, _ = excess_vectors(problem, t, reference)
        est = rows @ core
        sd = np.sqrt(np.clip(row_covariance(cov, rows).diagonal(), 0.0, None))
        updates.append(
            _bias_updates(names[judges], effect, (est, est - Z95 * sd, est + Z95 * sd), True, EXCESS_ROW_NOTE)
        )
        tied = names[np.flatnonzero((problem.spec.tied[t] > 0) & ~reference_mask(problem, reference))]
        zero = np.zeros(tied.size)
        prior_selected = np.array([(judge, effect) in withheld for judge in tied], bool)
        for which, note in ((~prior_selected, TIED_ROW_NOTE), (prior_selected, PRIOR_SELECTED_TIED_NOTE)):
            if which.any():
                values = (zero[which], zero[which], zero[which])
                updates.append(_bias_updates(tied[which], effect, values, False, note))
    if not updates:
        return table
    upd = pl.concat(updates)
    updated = pl.col("_note").is_not_null()
    no_replicates = [pl.when(updated).then(float("nan")).otherwise(pl.col(c)).alias(c) for c in BOOT_COLUMNS]
    return (
        table.join(upd, on=["judge", "effect"], how="left")
        .with_columns(
            pl.coalesce("_e", "estimate").alias("estimate"),
            pl.coalesce("_lo", "ci_low").alias("ci_low"),
            pl.coalesce("_hi", "ci_high").alias("ci_high"),
            pl.coalesce("_on", "enabled").alias("enabled"),
            pl.coalesce("_note", "note").alias("note"),
            (pl.col("identified") & (pl.col("_note") != PRIOR_SELECTED_TIED_NOTE).fill_null(True)).alias("identified"),
            *no_replicates,
        )
        .drop("_e", "_lo", "_hi", "_on", "_note")
    )


#: The columns of :func:`_bias_updates` (typed even when no judge has such a row).
_UPDATES: dict[str, type[pl.DataType]] = {
    "judge": pl.String,
    "effect": pl.String,
    "_e": pl.Float64,
    "_lo": pl.Float64,
    "_hi": pl.Float64,
    "_on": pl.Boolean,
    "_note": pl.String,
}


def _bias_updates(
    judges: np.ndarray, effect: str, values: tuple[np.ndarray, np.ndarray, np.ndarray], enabled: bool, note: str
) -> pl.DataFrame:
    """Rows replacing the bias table's (judge, effect) estimate, interval, ``enabled`` and note
    (:func:`relative_bias`)."""
    estimate, low, high = values
    columns = {"judge": judges.tolist(), "_e": estimate, "_lo": low, "_hi": high}
    frame = pl.DataFrame({**columns, "effect": effect, "_on": enabled, "_note": note}, schema_overrides=_UPDATES)
    return frame.select(list(_UPDATES))


# --------------------------------------------------------------------------- agreement with the reference


def _scores(p: np.ndarray, win_a: np.ndarray, win_b: np.ndarray) -> tuple[float, float]:
    """(accuracy, mean log loss) of P(first wins) = p on decided verdicts (ties left out)."""
    n = float(win_a.sum() + win_b.sum())
    if n == 0:
        return float("nan"), float("nan")
    p = np.clip(p, 1e-12, 1 - 1e-12)
    correct = win_a * (p > 0.5) + win_b * (p < 0.5) + 0.5 * (win_a + win_b) * (p == 0.5)
    loss = -(win_a * np.log(p) + win_b * np.log1p(-p))
    return float(correct.sum() / n), float(loss.sum() / n)


def reference_effects(problem: Problem, core: np.ndarray) -> np.ndarray:
    """The reference's own effect of every block (fitted units; 0 for blocks without a global coefficient).

    The convention of the gate's excess (:func:`~biasboard.ranking.gate.excess_vectors`) and of the rating
    (:func:`~biasboard.ranking.reference_rating.rated_terms`): where the reference has an effect its judges are tied
    to the global coefficient, which *is* the reference's — one value for a pool of voter-judges, whatever each
    voter's own discrimination — and where it has none (no data, or taken as zero) the reference is zero."""
    lay, spec = problem.layout, problem.spec
    out = np.zeros(lay.n_blocks)
    if spec.tied is None:
        return out
    for t in lay.global_effects:
        if spec.tied[t].any():
            out[t] = core[lay.glob(t)]
    return out


def reference_agreement(
    problem: Problem, fit: FitResult, naive: FitResult, corrected: FitResult, reference: frozenset[str]
) -> list[dict[str, Any]]:
    """How well each judge's verdicts, as fitted, predict the reference's — with its own effects (uncorrected)
    and with its excess removed (the reference's effects in its place, corrected); plus the naive and the
    published boards (σ of the rating difference).  Accuracy on the reference's decided verdicts and mean log loss.

    What is predicted is every verdict of the reference (the anchors, or all the cells of the reference's judges:
    a pattern's thousands of voters pooled), self-battles left out; the reference's judges are not scored.
    Per reference cell and judge j: uncorrected η = a_j(θ_a − θ_b) + γ_j·pos + β_j·x (+ Σ_k δ_jk·d_k with style
    counts); corrected η = a_j(θ_a − θ_b) + γ_r·pos + β_r·x (+ Σ_k δ_rk·d_k), r's effects as the gate and the
    rating take them (:func:`reference_effects`); pos is 0 where the shown order is unknown, as in the fit.  The
    affinity term is left out: s_a − s_b of a reference cell is read against the reference's family (anchors have
    none), not j's.  Vectorised over the reference's cells; O(reference cells) memory per listed judge.
    """
    data, lay, spec = problem.data, problem.layout, problem.spec
    ref = reference_mask(problem, reference)
    if not ref.any():
        return []
    own = data.judge_pairs(ref)
    pairs = own.take(np.flatnonzero(own.a != own.b))
    eff = effective_core(problem, fit.state.core)
    yardstick = reference_effects(problem, fit.state.core)
    theta = eff[lay.theta]
    # Each covariate in fitted units, with its block (a judge's effective block: its whole effect).
    covariates = [(POS, pairs.pos), (LEN, pairs.x / spec.x_scale)]
    if lay.n_style and pairs.style is not None and spec.style_scale is not None:
        covariates += [(t, pairs.style[:, k] / spec.style_scale[k]) for k, t in enumerate(STYLE_BLOCKS)]
    discrimination = eff[lay.eff_block(DISC)]
    effect = {t: eff[lay.eff_block(t)] for t, _ in covariates}
    dtheta = theta[pairs.a] - theta[pairs.b]
    corrected_terms = sum(yardstick[t] * z for t, z in covariates)  # the same for every judge
    out = []
    for j in agreement_judges(data, ref):
        base = np.exp(discrimination[j]) * dtheta
        uncorrected = base + sum(effect[t][j] * z for t, z in covariates)
        row: dict[str, Any] = {"judge": data.judges[j]}
        for label, eta in (("uncorrected", uncorrected), ("corrected", base + corrected_terms)):
            acc, loss = _scores(1.0 / (1.0 + np.exp(-eta)), pairs.win_a, pairs.win_b)
            row[f"accuracy_{label}"], row[f"log_loss_{label}"] = acc, loss
        out.append(row)
    names = {m: i for i, m in enumerate(data.models)}
    for label, board in zip(AGREEMENT_BOARDS, (naive, corrected), strict=True):
        rating = np.full(len(data.models), np.nan)
        rating[[names[m] for m in board.models]] = board.rating
        acc, loss = _scores(1.0 / (1.0 + np.exp(-(rating[pairs.a] - rating[pairs.b]))), pairs.win_a, pairs.win_b)
        out.append(
            {
                "judge": label,
                "accuracy_uncorrected": acc,
                "log_loss_uncorrected": loss,
                "accuracy_corrected": None,
                "log_loss_corrected": None,
            }
        )
    return out


def agreement_judges(data: Dataset, reference: np.ndarray) -> np.ndarray:
    """The judges scored against the reference (``reference``: bool over the judges): every other one with a battle,
    or with voter-judges the :data:`LISTED_JUDGES` with the most battles (in the input's order).

    A judge of single grades alone (``--scores``) gave no pairwise verdict: its position, length and discrimination
    are the prior's, so its "fitted verdicts" were the prior's guesses, listed as that judge's agreement (a grader
    of no battle read 63.1% -> 66.5%, a correction that moved nothing of its own)."""
    battles = data.judge_sums("n")
    others = np.flatnonzero(~reference & (battles > 0))
    if others.size <= LISTED_JUDGES:
        return others
    return np.sort(others[np.argsort(-battles[others], kind="stable")[:LISTED_JUDGES]])


# --------------------------------------------------------------------------- identified-only


def unidentified_effects(
    problem: Problem, fit: FitResult, reference: frozenset[str], already_off: frozenset[tuple[str, str]] = frozenset()
) -> set[tuple[str, str]]:
    """(judge, effect) corrections the identifiability check reports as prior-selected.

    With a reference: a judge whose excess keeps more than half of its prior variance (the data barely
    move it).  Without: every judge's effect when the global profile likelihood of that effect is flat
    (judge ``'*'``).  Corrections in ``already_off`` (e.g. left off by the gate) are not listed.
    """
    out: set[tuple[str, str]] = set()
    if not reference:
        for effect, info in fit.diagnostics.get("profile_likelihood", {}).items():
            if info.get("prior_selected") and effect in GATED:
                out.add((GLOBAL_JUDGE, effect))
        return out
    cov = fit.state.cov_core
    gated = gated_effects(problem.layout)
    for effect, t in gated.items():
        if problem.spec.tied is None or not problem.spec.tied[t].any():
            continue  # zero reference for this effect: judged as without a reference
        judges, rows, unit = excess_vectors(problem, t, reference)
        post = row_covariance(cov, rows).diagonal() / unit**2
        informed = informed_by_data(post, excess_prior_var(problem, t))
        for j, known in zip(judges, informed, strict=True):
            pair = (problem.data.judges[j], effect)
            if not known and pair not in already_off:
                out.add(pair)
    info = fit.diagnostics.get("profile_likelihood", {})
    for effect, t in gated.items():
        if (problem.spec.tied is None or not problem.spec.tied[t].any()) and info.get(effect, {}).get("prior_selected"):
            out.add((GLOBAL_JUDGE, effect))
    return out


def rank_moves(a: FitResult, b: FitResult, top: int = 5) -> list[dict[str, Any]]:
    """The largest rank differences between two boards of the same models (b's rank minus a's)."""
    index = {m: i for i, m in enumerate(b.models)}
    ra, rb = ranks_desc(a.rating), ranks_desc(b.rating)
    moves = [(m, int(ra[i]), int(rb[index[m]])) for i, m in enumerate(a.models) if m in index]
    moves.sort(key=lambda r: (-abs(r[2] - r[1]), r[0]))
    return [{"model": m, "rank": x, "rank_if_applied": y} for m, x, y in moves[:top] if x != y]


def compare_boards(published: FitResult, other: FitResult) -> dict[str, Any]:
    """τ and Spearman between two corrected boards, and the largest rank moves."""
    out = compare_rankings(published, other.rating, other.models)
    out["largest_moves"] = rank_moves(published, other)
    return out


# --------------------------------------------------------------------------- the fit


def _keep_known_models(anchor_cells: pl.DataFrame, models: Sequence[str]) -> tuple[pl.DataFrame, int]:
    known = pl.Series(list(models))
    ok = pl.col("model_a").is_in(known) & pl.col("model_b").is_in(known)
    dropped = int(anchor_cells.filter(~ok).get_column("n").sum() or 0)
    return anchor_cells.filter(ok), dropped


def fit_with_reference(
    cells: CellsInput | Dataset,
    score_cells: CellsInput | None = None,
    *,
    reference: Reference | None = None,
    anchor_cells: pl.DataFrame | None = None,
    config: ModelConfig | None = None,
    naive_config: NaiveConfig | None = None,
    settings: ReferenceSettings | None = None,
) -> ReferenceFit:
    """Both boards of ``cells`` corrected toward ``reference`` (see the module docstring).

    ``anchor_cells``: pair cells of the trusted verdicts under judge :data:`ANCHOR_JUDGE` (anchors between
    models absent from the battles are dropped and counted in the notes); they enter the bias-aware fit
    only, as its last judge (:func:`~biasboard.ranking.data.with_judge`: the battles are coded once, streamed or
    not).  The naive board and every model's battle count come from ``cells`` alone.  ``cells`` may be a
    :class:`Dataset` coded by the caller (score cells included), in memory or streamed.
    """
    reference = reference or Reference()
    config = config or ModelConfig()
    settings = settings or ReferenceSettings()
    asked_off = frozenset(config.disabled)  # the caller's own switches: their rows keep "disabled by configuration"
    naive_config = naive_config or NaiveConfig(k=config.k, seed=config.seed, bootstrap=config.bootstrap)
    if isinstance(cells, Dataset):  # coded by the caller (score cells included)
        judge_data = cells
    else:
        judge_data = build_dataset(cells, score_cells, judge_pool=config.judge_pool)
    if judge_data.ordinal_only and reference.kind != "none":
        raise InputError("--reference/--anchors: an ordinal-only board (grades, no battles) has no pairwise bias")
    naive = fit_naive(judge_data, config=naive_config)
    notes: list[str] = []
    raters = reference.resolve(judge_data.judges)
    if reference.kind == "judges" and raters == set(judge_data.judges):
        raise InputError("--reference: every judge of the input is a reference judge; nothing to correct")
    data = judge_data
    k = 0
    if reference.kind == "anchors":
        if anchor_cells is None or anchor_cells.height == 0:
            raise InputError("--reference anchors: no anchor verdicts")
        if ANCHOR_JUDGE in judge_data.judges:
            raise InputError(f"the input has a judge named {ANCHOR_JUDGE!r}, the name reserved for anchors")
        anchor_cells, dropped = _keep_known_models(anchor_cells, judge_data.models)
        if dropped:
            notes.append(f"{dropped} anchor verdict(s) between models absent from the battles were left out")
        k = int(anchor_cells.get_column("n").sum() or 0)
        if k == 0:
            raise InputError("--anchors: no anchor compares two models that appear in the battles")
        data = with_judge(judge_data, anchor_cells.to_arrow())
    elif reference.kind == "judges":
        j = np.fromiter((name in raters for name in data.judges), bool, len(data.judges))
        k = int(data.judge_sums("n")[j].sum())  # (a streamed data set's pairs have no judge: per-judge sums)
        if k == 0:  # named in the cells' judges yet no battle here (a slice the reference never judged in)
            raise InputError(
                f"--reference: no battle by the reference judge(s) {', '.join(sorted(raters))} in these battles, "
                "so there is nothing to measure the other judges against"
            )
    config = replace(config, reference=raters)
    n_battles = naive.n_battles

    def solved(cfg: ModelConfig) -> tuple[Problem, Solution]:
        problem = bias_aware_problem(data, cfg)
        return problem, solve_bias_aware(problem, cfg)

    def board(cfg: ModelConfig) -> tuple[Problem, FitResult]:
        """A board published with ``cfg``'s replicates; its problem kept without the objective's caches."""
        problem, solution = solved(cfg)
        return problem.without_caches(), publish_bias_aware(problem, solution, cfg, naive=naive)

    def unpublished_board(cfg: ModelConfig) -> tuple[Problem, Solution | None, FitResult]:
        """A board the gate may still replace: solved and published without bootstrap replicates (they are made
        for the board that is published, :func:`with_replicates`), its solution kept to add them (only when
        ``cfg`` asks for replicates: a judge-blocked solution holds its Hessian, ~50 MB at 50k voter-judges)."""
        problem, solution = solved(cfg)
        fit = publish_bias_aware(problem, solution, replace(cfg, bootstrap=0), naive=naive)
        return problem.without_caches(), solution if cfg.bootstrap else None, fit

    def with_replicates(problem: Problem, solution: Solution | None, fit: FitResult, cfg: ModelConfig) -> FitResult:
        """``fit`` (published without replicates) with ``cfg``'s replicates: its covariance and profiles reused."""
        if solution is None or not cfg.bootstrap:
            return fit
        profiles = fit.diagnostics["profile_likelihood"]
        return publish_bias_aware(problem, solution, cfg, naive=naive, cov_core=fit.state.cov_core, profiles=profiles)

    clip, draws, seed = config.length_clip, config.posterior_draws, config.seed

    def published_rating(problem: Problem, fit: FitResult) -> FitResult:
        phi, jac = reference_map(problem, fit.state.core, raters, clip)
        battles = _aligned(n_battles, naive.models, fit.models)
        if jac is None:  # φ = θ: the fit's own posterior, untouched
            return replace(fit, n_battles=battles)
        out = with_rating(fit, phi, jac, battles, draws, seed, fit.boot_reference)
        diagnostics = dict(out.diagnostics)
        diagnostics["naive_vs_corrected"] = compare_rankings(naive, out.rating, out.models, out.component)
        diagnostics["warnings"] = [*diagnostics.get("warnings", []), *lengthless_warnings(problem, raters, clip)]
        return replace(out, diagnostics=diagnostics)

    problem_all, solution_all, fit_all = unpublished_board(config)
    all_on = published_rating(problem_all, fit_all)
    # The gate tests each excess over the reference's own estimate, with its uncertainty, in this fit.  (It tested
    # them in a refit where a reference effect its verdicts could not tell from zero was already zero: against an
    # exact 0, so 300 human verdicts sharing the judges' length preference (0.3) enabled every length correction at
    # Holm p 1.5e-13 and the board lost a preference the reference has.)
    gate = run_gate(problem_all, fit_all, raters, k, settings.gate_level) if raters else None
    gated_off = set(gate.disabled) if gate is not None else set()
    unidentified = unidentified_effects(problem_all, fit_all, raters, frozenset(gated_off))
    off = set(gated_off) if settings.apply_unidentified else gated_off | unidentified
    rated: dict[str, dict[str, Any]] = {}  # its own rated effects taken as zero, as its verdicts estimate them
    if raters:
        own = own_effects(problem_all, fit_all, raters)
        # Only effects the reference has data for: one it has none of is zero already (no refit to say so, e.g.
        # anchors without style counts beside battles with them).  One its verdicts cannot tell from zero is taken
        # as zero, so K noisy verdicts do not move every rating by an unsupported β_r·x̄; a judge tied to it then
        # keeps its own preference in θ, as it would beside a reference that has none.
        rated = {
            effect: value
            for effect, value in own.items()
            if effect in rated_effects(problem_all.layout)
            and value["ci_low"] is not None
            and not reference_effect_supported(value, settings.gate_level)
        }
    config = replace(config, disabled=frozenset(config.disabled) | {(r, e) for r in raters for e in rated})
    published_config = replace(config, disabled=config.disabled | frozenset(off))
    if off or rated:  # every joint covariance of the all-on fit has been taken: its factorisation goes first
        del solution_all
        fit_all, all_on = _lean(fit_all), _lean(all_on)
        problem_pub, corrected_fit = board(published_config)
        corrected = published_rating(problem_pub, corrected_fit)
    else:  # the all-on board is the published one: its replicates now
        fit_all = with_replicates(problem_all, solution_all, fit_all, config)
        del solution_all
        problem_pub, corrected_fit = problem_all, fit_all
        corrected = all_on = published_rating(problem_all, fit_all)
    if raters:
        withheld = frozenset() if settings.apply_unidentified else frozenset(unidentified)
        corrected = replace(corrected, bias=relative_bias(problem_pub, corrected, raters, withheld))
    effects = own_effects(problem_pub, corrected, raters) if raters else {}
    # Every joint covariance is taken: the factorisations go before the board that applies the unidentified ones.
    corrected, corrected_fit, fit_all, all_on = (_lean(f) for f in (corrected, corrected_fit, fit_all, all_on))
    unidentified_report: list[dict[str, Any]] = []
    if unidentified:
        if settings.apply_unidentified:
            applied = corrected
        elif gated_off:  # compared by its ratings alone: no replicates, no profiles
            gated_only = replace(config, disabled=frozenset(config.disabled) | gated_off)
            applied = published_rating(*board(gated_only.ratings_only()))
        else:
            applied = all_on
        comparison = compare_boards(corrected, applied)
        if_applied = {key: comparison[key] for key in ("kendall_tau", "spearman", "largest_moves")}
        unidentified_report = _unidentified_report(unidentified, settings.apply_unidentified, if_applied)
    for effect, first in rated.items():
        if effects.get(effect, {}).get("ci_low") is None:
            effects[effect] = {
                **first,
                "applied": 0.0,
                "source": f"{first['source']}; not distinguishable from zero at the gate level "
                f"{settings.gate_level:g}, so taken as zero",
            }
    if raters:
        bias = zero_reference_notes(corrected.bias, effects, raters, frozenset(gated_off))
        corrected = replace(corrected, bias=reference_global_notes(bias, effects))
    if not settings.apply_unidentified:
        corrected = withheld_notes(corrected, unidentified, asked_off)
    agreement = reference_agreement(problem_pub, corrected_fit, naive, corrected, raters) if raters else []
    # (the judges the agreement could score: not the reference's, and with a battle: :func:`agreement_judges`)
    scored = int((~reference_mask(problem_pub, raters) & (data.judge_sums("n") > 0)).sum())
    if raters and scored > LISTED_JUDGES:
        notes.append(agreement_listed_note(reference.kind, LISTED_JUDGES, scored))
    return ReferenceFit(
        reference=reference,
        naive=naive,
        corrected=corrected,
        all_on=all_on,
        config=published_config,
        gate=gate,
        own_effects=effects,
        unidentified=unidentified_report,
        all_on_comparison=compare_boards(corrected, all_on),
        k=k,
        notes=notes,
        agreement=agreement,
        raters=tuple(sorted(raters)),
        graded_scale=not problem_pub.spec.centre_discrimination,
    )


#: Why a correction is off the published board when the data do not identify it: its bias rows' note and the
#: moves table's reason (:func:`withheld_notes`).
WITHHELD_NOTE = (
    "prior-selected: the data do not identify this correction, so the published board does not apply it "
    "(--apply-unidentified applies it)"
)


def withheld_notes(
    fit: FitResult, withheld: set[tuple[str, str]], asked_off: frozenset[tuple[str, str]] = frozenset()
) -> FitResult:
    """``fit`` with the bias rows and the moves table of each effect whose global correction (judge ``'*'`` in
    ``withheld``) the published board left off as prior-selected saying so.

    Why: that correction is taken off through the switch a configuration uses, so on a refresh given no flag its rows
    read "disabled for every judge" and "disabled by configuration", and the moves table "switched off by the gate
    or the configuration", while the warnings said prior-selected (AlpacaEval 2's one judge: its affinity is
    constant within each model).  Rows the caller's own ``asked_off`` switched off keep their note, as do rows with
    any other note; a judge's own withheld excess under a reference is noted by :func:`relative_bias`."""
    everywhere = {effect for judge, effect in asked_off if judge == GLOBAL_JUDGE}
    effects = sorted({effect for judge, effect in withheld if judge == GLOBAL_JUDGE} - everywhere)
    if not effects:
        return fit
    kept = pl.lit(False)
    for effect in effects:
        judges = [judge for judge, e in asked_off if e == effect]
        if judges:
            kept = kept | ((pl.col("effect") == effect) & pl.col("judge").is_in(judges))
    off = pl.col("effect").is_in(effects) & pl.col("note").is_in([DISABLED_NOTE, DISABLED_EVERY_JUDGE_NOTE]) & ~kept
    bias = fit.bias.with_columns(pl.when(off).then(pl.lit(WITHHELD_NOTE)).otherwise(pl.col("note")).alias("note"))
    diagnostics = dict(fit.diagnostics)
    attribution = diagnostics.get("attribution")
    if attribution:
        left_out = {
            effect: WITHHELD_NOTE if effect in effects and why == NOT_APPLIED else why
            for effect, why in attribution["left_out"].items()
        }
        diagnostics["attribution"] = {**attribution, "left_out": left_out}
    return replace(fit, bias=bias, diagnostics=diagnostics)


def _unidentified_report(
    pairs: set[tuple[str, str]], applied: bool, if_applied: dict[str, Any]
) -> list[dict[str, Any]]:
    """One entry per prior-selected (judge, effect); an effect with more than :data:`LISTED_JUDGES` such judges
    (voter-judges with a handful of battles each) is one entry naming how many and the first few."""
    by_effect: dict[str, list[str]] = {}
    for judge, effect in sorted(pairs):
        by_effect.setdefault(effect, []).append(judge)
    out = []
    for effect, judges in sorted(by_effect.items()):
        grouped = len(judges) > LISTED_JUDGES
        for name in [f"{len(judges)} judges ({', '.join(judges[:3])}, ...)"] if grouped else judges:
            entry: dict[str, Any] = {"judge": name, "effect": effect}
            if grouped:
                entry["n_judges"] = len(judges)
            entry.update(
                applied=applied,
                reason="prior-selected: the data do not identify this correction",
                if_applied=if_applied,
            )
            out.append(entry)
    return sorted(out, key=lambda e: (e["judge"], e["effect"]))


def _lean(fit: FitResult) -> FitResult:
    """``fit`` without the factorisation a judge-blocked covariance keeps (hundreds of MB at 50,000 voter-judges), and
    a Godambe one's J: the reference's joint covariances are taken, and the published result needs only the blocks."""
    cov = fit.state.cov_core
    if not isinstance(cov, BlockCovariance) or cov.factor is None:
        return fit
    return replace(fit, solver=replace(fit.state, cov_core=replace(cov, factor=None, information=None)))


def _aligned(values: np.ndarray, models: Sequence[str], target: Sequence[str]) -> np.ndarray:
    index = {m: i for i, m in enumerate(models)}
    return np.array([values[index[m]] if m in index else 0.0 for m in target])
