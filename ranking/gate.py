"""The trusted-anchor gate (Xu et al. 2026): correct a judge's effect only where the reference's verdicts support it.

With a reference r in the fit (trusted anchors, or named judges such as human pools; see
:mod:`biasboard.ranking.reference`), every judge j has, per effect e (position, length, affinity, and
header, list and bold when the cells carry style counts), an *excess* d_je = e_j − e_r over the reference:
its bias.  The excess is identified by the data — j and r judge the same models, so quality cancels in the
contrast — but its uncertainty is the reference's: with K anchors, SE(d) shrinks like 1/√K.  The gate
asks, per effect, whether the excesses are zero:

* **the test** — a Wald test of H0 "d_je = 0 for every judge j" on the Laplace posterior of the fit with
  every correction on: W = d̂ᵀ C⁺ d̂ ~ χ²(rank C), C the posterior covariance of the excesses.  The
  threshold is the χ² quantile, so it follows the anchors' own noise through C; there is no fixed margin.
  The MAP is shrunk towards the reference by the prior and the posterior covariance is narrower than the
  sampling one by the same factor, so W is at most the unpenalised Wald statistic: the test is
  conservative, never anti-conservative, under H0.
* **jointly per effect** — all judges of an effect are tested together, in the fit where every other
  correction is on.  Testing one (judge, effect) at a time with the others off (the previous gate) divides
  a shared gain among the judges and let no single correction pass; a group test keeps the whole gain,
  and a judge whose own excess is small is corrected by its (shrunk, identified) estimate, which is then
  close to zero anyway.  A voter pool is a test group of its own (:func:`judge_pools`; Holm then runs over
  effects × groups), and a group's test weighs the excesses the judges' own battles inform
  (:func:`informed_excesses`): thousands of voters' near-zero excesses in one test with the LLM judges added
  degrees of freedom and almost no χ², and drowned the LLM judges' clear ones.
* **multiple testing** — Holm's step-down correction over the effects tested, so the probability of
  enabling any correction when no judge has an excess is at most ``level`` (the family-wise rate).
* **never below ``MIN_ANCHORS_FLOOR`` reference verdicts** (Xu et al. 2026 saw false enables at K = 5 and none at
  K ≥ 10).

Per (judge, effect) the table gives the excess, its SE, z, ½z², and the group's χ², p and Holm p that decide.
½z² is the Wald gain in nats (``gain_nats``: the quadratic approximation of the log-likelihood gain of freeing
that excess alone) only where the fit's likelihood is the plain one; an ω-weighted fit's (:data:`HALF_Z2_COLUMN`)
is half a Wald χ²(1) under the Godambe covariance, and no gain of any likelihood.

Memory is O(judges²) per effect with the dense solver, and O(judges·n_G) with the judge-blocked one (voter-judges:
the excesses' covariance is diagonal plus rank n_G, so the Wald form is a Woodbury solve;
:func:`biasboard.ranking.arrowhead.row_covariance`), independent of the number of anchors K: the anchors enter
the fit as cells (at most one per ordered pair, length bin and day), never as a K-long array.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import polars as pl
import scipy.sparse as sp
from biasboard.ranking.arrowhead import BlockCovariance, RowCovariance
from biasboard.ranking.arrowhead import row_covariance as blocked_rows
from biasboard.ranking.bias_table import informed_by_data
from biasboard.ranking.composite import SandwichRows, is_composite, sandwich_rows
from biasboard.ranking.model import AFF, LEN, POS, STYLE_BLOCKS, Layout, block_name
from biasboard.ranking.problem import Problem, prior_sd_of_effect
from biasboard.ranking.result import FitResult

#: Below this many reference verdicts the gate never enables anything (Xu et al. 2026).
MIN_ANCHORS_FLOOR = 10
#: The effects the gate decides in every model, with their judge blocks (:func:`gated_effects` adds style).
GATED: dict[str, int] = {"position": POS, "length": LEN, "affinity": AFF}
#: Judges listed per effect in the summary's gate (and per effect among the prior-selected corrections): an
#: effect of 25,000 voter-judges is decided by one group test, and its evidence per voter is in the bias table.
LISTED_JUDGES = 50
#: Judges a name prefix (``pool/…``) must group to be a voter pool, a test group of its own (:func:`judge_pools`):
#: two or three LLM judges named by vendor (``openai/gpt-4o``, ``openai/gpt-4o-mini``) are not a crowd of voters.
MIN_POOL_JUDGES = 20
#: Default family-wise level of the gate (``--gate-level``).
DEFAULT_LEVEL = 0.05

GATE_COLUMNS: dict[str, pl.DataType | type[pl.DataType]] = {
    "judge": pl.String,
    "effect": pl.String,
    "enabled": pl.Boolean,
    "excess": pl.Float64,
    "se": pl.Float64,
    "z": pl.Float64,
    "gain_nats": pl.Float64,
    "group_chi2": pl.Float64,
    "group_df": pl.Int64,
    "group_p": pl.Float64,
    "group_p_holm": pl.Float64,
    "reason": pl.String,
}


#: The name of the ½z² column, by whether the fit is ω-weighted (:func:`is_composite`).  Why: with the plain
#: likelihood ½z² is the quadratic approximation of the log-likelihood gain of freeing one excess, in nats.  At
#: ω ≠ 0.5 z's SE is the Godambe sandwich's, and ½z² is half a Wald χ²(1): the weighted objective's own gain would
#: be ½ excess² over H_w⁻¹'s variance instead, in nats that count the battles 2ω times, and the plain likelihood's
#: is not what was fitted — so neither "gain" nor "nats" describes it.
HALF_Z2_COLUMN = {False: "gain_nats", True: "half_z2"}


def gate_columns(godambe: bool) -> dict[str, pl.DataType | type[pl.DataType]]:
    """:data:`GATE_COLUMNS` with the ½z² column named for the fit (:data:`HALF_Z2_COLUMN`)."""
    half = HALF_Z2_COLUMN[godambe]
    return {half if name == HALF_Z2_COLUMN[False] else name: kind for name, kind in GATE_COLUMNS.items()}


#: The covariance the gate's method names, by whether the fit is ω-weighted (:func:`is_composite`).
GATE_COVARIANCE = {
    False: "the posterior covariance",
    True: "the Godambe (sandwich) covariance of the ω-weighted likelihood",
}


@dataclass(frozen=True)
class GateResult:
    """Per-(judge, effect) decisions with their evidence, and the corrections left off (tied to the reference)."""

    decisions: pl.DataFrame
    disabled: frozenset[tuple[str, str]]
    k: int
    level: float
    #: Which covariance the Wald tests read, as the summary's method names it: an ω-weighted fit's is the Godambe
    #: sandwich (:func:`row_covariance`), which the method had called "the posterior covariance".
    godambe: bool = False

    def to_json(self) -> dict[str, Any]:
        """The summary's gate.  An effect decided over more than :data:`LISTED_JUDGES` judges (voter-judges)
        lists the judges with the largest |z| and one row for the rest (the group's decision is theirs too);
        every judge's excess, CI and whether it is corrected are in the bias table."""
        listed = self.listed()
        rows = [
            {key: (None if isinstance(v, float) and not math.isfinite(v) else v) for key, v in row.items()}
            for row in listed.to_dicts()
        ]
        method = (
            "Wald test of each effect's excesses over the reference (all judges jointly, every other "
            f"correction on), Holm-corrected over effects; threshold from {GATE_COVARIANCE[self.godambe]}, no margin"
        )
        if listed.height < self.decisions.height:
            method += (
                f"; {LISTED_JUDGES} judges listed per effect (largest |z|) of {self.decisions.height} (judge, effect) "
                "decisions: every judge's excess is in the bias table"
            )
        names = set(zip(listed["judge"], listed["effect"], strict=True))
        return {
            "method": method,
            "k": self.k,
            "level": self.level,
            "decisions": rows,
            "disabled": sorted([list(pair) for pair in self.disabled if pair in names]),
        }

    def listed(self) -> pl.DataFrame:
        """The decisions the summary lists: all, or per effect and test group (a voter pool, or the other judges:
        :func:`judge_pools`; their reasons differ) the :data:`LISTED_JUDGES` with the largest |z| and a row ``(N more
        judges)`` carrying the group's decision for the rest."""
        parts = []
        for _, group in self.decisions.group_by("effect", "reason", maintain_order=True):
            if group.height <= LISTED_JUDGES:
                parts.append(group)
                continue
            top = group.with_row_index("_i").sort(pl.col("z").abs().fill_nan(-1.0), descending=True, nulls_last=True)
            top = top.head(LISTED_JUDGES).sort("_i").drop("_i")
            rest = group.head(1).with_columns(
                pl.lit(f"({group.height - LISTED_JUDGES} more judges)").alias("judge"),
                *(pl.lit(None, dtype=pl.Float64).alias(c) for c in ("excess", "se", "z", HALF_Z2_COLUMN[self.godambe])),
            )
            parts.append(pl.concat([top, rest]))
        return pl.concat(parts) if parts else self.decisions


def gated_effects(layout: Layout) -> dict[str, int]:
    """The effects measured against the reference and gated, with their judge blocks: :data:`GATED`, and the
    style effects (header, list, bold) when the model has them (the cells carry style counts)."""
    return {**GATED, **{block_name(t): t for t in STYLE_BLOCKS[: layout.n_style]}}


def excess_vectors(problem: Problem, t: int, reference: frozenset[str]) -> tuple[np.ndarray, sp.csr_matrix, float]:
    """(judge indices, rows v with excess_j = v_j · raw core, unit) of effect block ``t``.

    The excess is the judge's own deviation when the reference has the effect (the global coefficient is
    the reference's), else the judge's whole effect (the reference is zero).  ``unit`` converts to the
    reported scale (per unit of raw log length ratio for length, of the raw normalised difference for style).
    Reference judges and judges without the effect are left out.  The rows are sparse (one or two entries
    each): O(J), not J × n_core.
    """
    lay, spec = problem.layout, problem.spec
    ref = reference_mask(problem, reference)
    tied = spec.tied[t] > 0 if spec.tied is not None else np.zeros(lay.n_judges, bool)
    judges = np.flatnonzero((spec.masks[t] > 0) & ~ref & ~tied)
    unit = spec.unit(t)
    n = judges.size
    cols = [lay.block(t).start + judges]
    if not (spec.tied is not None and spec.tied[t].any()):
        cols.append(np.full(n, lay.glob(t)))
    col = np.stack(cols, axis=1)
    rows = sp.csr_matrix(
        (np.full(col.size, unit), col.ravel(), np.arange(0, col.size + 1, col.shape[1])), shape=(n, lay.n_core)
    )
    return judges, rows, unit


def excess_prior_var(problem: Problem, t: int) -> float:
    """The prior variance of a judge's excess of effect block ``t`` (as :func:`excess_vectors` forms it): its
    deviation's when the reference has the effect, else the judge's whole effect's (the global coefficient's and the
    deviation's)."""
    sd_glob, sd_dev = prior_sd_of_effect(problem, t)
    tied = problem.spec.tied is not None and bool(problem.spec.tied[t].any())
    return sd_dev**2 if tied else sd_glob**2 + sd_dev**2


def reference_mask(problem: Problem, reference: frozenset[str]) -> np.ndarray:
    """Which judges of the problem are reference raters (bool over the judges; read-only)."""
    return _reference_mask(problem.data.judges, reference)


@functools.lru_cache(maxsize=8)
def _reference_mask(judges: tuple[str, ...], reference: frozenset[str]) -> np.ndarray:
    """:func:`reference_mask`, made once per (judges, reference): a reference fit asks for it ~20 times, and over
    a voter pool's 50k judges each time cost ~11 ms of set look-ups."""
    mask = np.fromiter((judge in reference for judge in judges), bool, len(judges))
    mask.flags.writeable = False
    return mask


class DenseRows:
    """C = V Σ Vᵀ of a dense Laplace covariance, with :class:`~biasboard.ranking.arrowhead.RowCovariance`'s methods."""

    def __init__(self, cov: np.ndarray, rows: sp.csr_matrix):
        self.matrix = np.asarray(rows @ (rows @ cov).T)
        self.matrix = 0.5 * (self.matrix + self.matrix.T)

    def dense(self) -> np.ndarray:
        return self.matrix

    def diagonal(self) -> np.ndarray:
        return np.diag(self.matrix).copy()

    def wald(self, d: np.ndarray) -> tuple[float, int]:
        return wald_group(d, self.matrix)


def row_covariance(cov: np.ndarray | BlockCovariance, rows: sp.csr_matrix) -> DenseRows | RowCovariance | SandwichRows:
    """The posterior covariance of the linear functions ``rows`` (p × n_core) of a fit's raw core.

    A dense covariance (Laplace, or an ω-weighted fit's Godambe sandwich) gives it directly; a judge-blocked one
    (10⁴–10⁶ voter-judges) through the factorisation it keeps (:func:`~biasboard.ranking.arrowhead.row_covariance`),
    never as a (KJ)² matrix — the sandwich's rows when it is one (:func:`~biasboard.ranking.composite.sandwich_rows`:
    the same covariance the dense path's gate tests with).
    """
    if not isinstance(cov, BlockCovariance):
        return DenseRows(cov, rows)
    if cov.factor is None:
        raise ValueError("a judge-blocked covariance without its factorisation has no joint covariances")
    if cov.information is not None:
        return sandwich_rows(cov, rows)
    return blocked_rows(cov.factor, rows)


class _Wald(Protocol):
    def wald(self, d: np.ndarray) -> tuple[float, int]: ...

    def dense(self) -> np.ndarray: ...


def joint_wald(c: _Wald, d: np.ndarray) -> tuple[float, int]:
    """dᵀC⁺d and the rank; the blocked form falls back to the dense matrix when rows share a judge."""
    try:
        return c.wald(d)
    except ValueError:
        return wald_group(d, c.dense())


def holm(p: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values (family-wise error control, any dependence)."""
    p = np.asarray(p, float)
    order = np.argsort(p, kind="stable")
    m = p.size
    adjusted = np.minimum(1.0, (m - np.arange(m)) * p[order])
    out = np.empty(m)
    out[order] = np.maximum.accumulate(adjusted)
    return out


def wald_group(d: np.ndarray, cov: np.ndarray) -> tuple[float, int]:
    """W = dᵀ C⁺ d and the rank of C (eigenvalues below 1e-10 of the largest dropped)."""
    vals, vecs = np.linalg.eigh(0.5 * (cov + cov.T))
    keep = vals > 1e-10 * max(float(vals.max(initial=0.0)), 1e-300)
    proj = vecs[:, keep].T @ d
    return float(np.sum(proj**2 / vals[keep])), int(keep.sum())


def informed_excesses(posterior_var: np.ndarray, prior_var: float) -> np.ndarray:
    """Which excesses the joint test weighs: those the judges' own battles inform, their posterior variance below
    half their prior's (:func:`~biasboard.ranking.bias_table.informed_by_data`, the bias table's "identified"); all
    of them when none is.  ``prior_var``: the excess's prior variance — its deviation's when the reference has the
    effect, its deviation's and the global coefficient's when the excess is the judge's whole effect.

    Why: a few-battle voter's excess is its prior's, shrunk to 0 with a variance near the prior's, and adds a degree
    of freedom and almost no χ².  With a voter pool as the reference and the other pool split into 2,500 voters, the
    four LLM judges' position excesses (z 3.8 to 8.4) were tested on 2,503 df (χ² 2,377, p = 1) and not corrected,
    where the same battles with the other pool as one judge corrected them.  A prior-dominated excess is not applied
    anyway (identified-only), so leaving it out of the test loses nothing the board would use.  (Its whole effect's
    prior, not the deviation's alone, where the reference has none of the effect: LLMFAO's GPT-4 own-family excess
    over the crowd, +1.34 with SE 0.25 — z 5.4 — was measured against the deviation's SD of 0.25, called barely
    informed, and left uncorrected.)"""
    informed = informed_by_data(posterior_var, prior_var)
    return informed if informed.any() else np.ones_like(informed)


def judge_pools(names: np.ndarray) -> list[tuple[str | None, np.ndarray]]:
    """The judges' test groups, as positions in ``names``: one per voter pool (judges ``pool/…`` whose ``pool`` at
    least :data:`MIN_POOL_JUDGES` share, as ``--judge-pool prefix:/`` and ``--reference 'pool/*'`` read them), then
    the rest together (``None``).

    Why: one joint test over thousands of voters of another pool and four LLM judges let the voters' near-zero
    excesses outweigh the LLM judges' clear ones (z 3.8 to 8.4 on 2,295 df: χ² 2,293, p = 1), where the same
    battles with that pool as one judge corrected all four; a pool is tested as one unit, as it would be pooled."""
    prefix = np.array([name.split("/", 1)[0] if "/" in name else "" for name in names], dtype=object)
    pools, counts = np.unique(prefix[prefix != ""], return_counts=True)
    pooled = {str(pool) for pool, n in zip(pools, counts, strict=True) if n >= MIN_POOL_JUDGES}
    out: list[tuple[str | None, np.ndarray]] = [(pool, np.flatnonzero(prefix == pool)) for pool in sorted(pooled)]
    rest = np.flatnonzero(~np.isin(prefix, list(pooled)))
    if rest.size:
        out.append((None, rest))
    return out


def run_gate(
    problem: Problem, fit: FitResult, reference: frozenset[str], k: int, level: float = DEFAULT_LEVEL
) -> GateResult:
    """Decide per (judge, effect) from ``fit``, the bias-aware fit of ``problem`` with every correction on.

    ``k`` is the number of reference verdicts (anchors, or the reference judges' battles); below
    :data:`MIN_ANCHORS_FLOOR` nothing is enabled.
    """
    from scipy.special import chdtrc  # χ² upper tail without importing scipy.stats (rank_stats says why)

    if not 0.0 < level < 1.0:
        raise ValueError(f"gate level must be in (0, 1), got {level}")
    core, cov = fit.state.core, fit.state.cov_core
    names = np.asarray(problem.data.judges, dtype=object)
    godambe = is_composite(problem.spec)
    schema = gate_columns(godambe)
    groups = []
    for effect, t in gated_effects(problem.layout).items():
        judges_all, rows_all, unit = excess_vectors(problem, t, reference)
        for pool, members in judge_pools(names[judges_all]):
            judges, rows = judges_all[members], rows_all[members]
            d = rows @ core
            c = row_covariance(cov, rows)
            var = np.clip(c.diagonal(), 0.0, None)
            tested = informed_excesses(var / unit**2, excess_prior_var(problem, t))
            if not tested.all():
                c = row_covariance(cov, rows[np.flatnonzero(tested)])
            chi2, df = joint_wald(c, d[tested])
            p = float(chdtrc(df, chi2)) if df else 1.0
            label = effect if pool is None else f"{effect} ({pool}/*)"
            groups.append((label, effect, judges, d, np.sqrt(var), chi2, df, p, int(judges.size - df)))
    p_holm = holm(np.array([g[7] for g in groups])) if groups else np.zeros(0)
    frames: list[pl.DataFrame] = []
    disabled: set[tuple[str, str]] = set()
    for (label, effect, judges, d, se, chi2, df, p, untested), ph in zip(groups, p_holm, strict=True):
        enough = k >= MIN_ANCHORS_FLOOR
        on = enough and ph <= level
        if not enough:
            reason = f"only {k} reference verdicts (< {MIN_ANCHORS_FLOOR}): tied to the reference"
        elif on:
            reason = (
                f"{label}: excesses over the reference jointly significant (chi2 {chi2:.1f} on {df} df, "
                f"Holm p = {ph:.3g} <= {level})"
            )
        else:
            reason = (
                f"{label}: no excess over the reference supported (chi2 {chi2:.1f} on {df} df, "
                f"Holm p = {ph:.3g} > {level}): tied to the reference"
            )
        if untested and enough:
            reason += f"; {untested} excess(es) their judges' battles barely inform left out of the test"
        # One group's rows as columns (a voter pool's group holds tens of thousands of judges).
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.where(se > 0, d / se, np.nan)
        half_z2 = np.where(np.isfinite(z), 0.5 * z * z, np.nan)
        judge = names[judges].tolist()
        n = len(judge)
        scalars = {"effect": effect, "enabled": on, "group_chi2": chi2, "group_df": df, "group_p": p}
        columns = {"judge": judge, "excess": d, "se": se, "z": z, HALF_Z2_COLUMN[godambe]: half_z2}
        columns["group_p_holm"] = float(ph)
        frame = pl.DataFrame({**columns, **scalars, "reason": reason}, schema_overrides=schema)
        frames.append(frame.select(list(schema)))
        if not on:
            disabled.update(zip(judge, [effect] * n, strict=True))
    table = pl.concat(frames) if frames else pl.DataFrame(schema=schema)
    return GateResult(table, frozenset(disabled), k, level, godambe=godambe)
