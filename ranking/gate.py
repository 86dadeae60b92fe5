"""The trusted-anchor gate (seed 000): enable a judge's bias correction only where anchors support it.

Comparisons alone cannot tell quality from an item-level bias (the split is
chosen by the prior), so whether a correction helps is a question the battles
cannot answer.  Trusted verdicts can: given K anchor comparisons (humans or a
strong judge), a correction is enabled for a (judge, effect) only when the
ratings fitted *with* it predict the anchors better than the ratings fitted
*without* it, by a margin a paired permutation test supports.

Per candidate (judge, effect):

* **baseline** — the bias-aware model with every candidate correction switched
  off (``ModelConfig.disabled``): the uncorrected ("naive") reading of the same
  model, so that the two fits differ in exactly one thing;
* **corrected** — the same with this one (judge, effect) switched on;
* per anchor i between models a and b with trusted outcome y_i (1: a won,
  0: b won, ½: tie), the log loss ℓ_i = −[y log p + (1 − y) log(1 − p)],
  p = σ(θ_a − θ_b), under each fit; the improvement d_i = ℓ_base,i − ℓ_corr,i;
* the one-sided paired **sign-flip permutation test** of H0 "mean(d) ≤ margin"
  (signs flipped on d − margin; exact up to 2^16 sign patterns, Monte Carlo
  beyond), and a bootstrap CI of mean(d);
* **enabled** iff K ≥ ``min_anchors`` (never below 10: seed 000 saw false
  enables at K = 5 and none at K ≥ 10), mean(d) > ``margin`` and p ≤ ``alpha``.

Why a margin: a correction that barely moves the ratings shifts every anchor's
loss by the same hair, and a sign test finds such a uniform hair "significant"
(measured here: +1e-5 nats, p = 5e-5, for a position correction of a judge
with no position bias).  The test must support an improvement worth having.

The result is JSON-able evidence plus the ``ModelConfig.disabled`` set a
refresh fits with.  Anchors between models absent from the fit are counted and
left out.  Pure numpy/polars over the ranking core's fits; no Beam.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
from biasboard.ranking.config import ModelConfig
from biasboard.ranking.fit import fit_bias_aware
from biasboard.ranking.result import FitResult
from biasboard.schemas.errors import InputError

#: Below this many anchors the gate never enables anything (seed 000).
MIN_ANCHORS_FLOOR = 10
#: Effects the gate decides by default: the covariates of DESIGN §4 plus position.
DEFAULT_EFFECTS: tuple[str, ...] = ("position", "length", "affinity")
#: Up to this many anchors the permutation test enumerates every sign pattern.
_EXACT_MAX = 16


@dataclass(frozen=True)
class GateSettings:
    """Knobs of the gate, with the reasons for their defaults.

    ``alpha = 0.05``: one-sided, per decision; the seed's gate reports no false
    enables at K ≥ 10 with a test of this size.  ``margin = 0.01`` nats per
    anchor (about 2% of the loss of ratings that predict anchors well): the
    smallest improvement worth a correction; the test is of mean(d) > margin.  ``permutations`` Monte
    Carlo sign patterns when K > 16; ``bootstrap`` resamples for the CI.
    """

    min_anchors: int = MIN_ANCHORS_FLOOR
    alpha: float = 0.05
    margin: float = 0.01
    permutations: int = 20_000
    bootstrap: int = 2_000
    seed: int = 0

    def __post_init__(self) -> None:
        if self.min_anchors < MIN_ANCHORS_FLOOR:
            raise ValueError(f"min_anchors must be at least {MIN_ANCHORS_FLOOR} (seed 000), got {self.min_anchors}")
        if self.margin < 0:
            raise ValueError(f"margin must be >= 0, got {self.margin}")
        if not 0.0 < self.alpha < 1.0:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha}")


@dataclass(frozen=True)
class GateResult:
    """Per-(judge, effect) decisions with their evidence, and the set of corrections left off."""

    decisions: pl.DataFrame
    disabled: frozenset[tuple[str, str]]
    k: int
    anchors_unmatched: int
    settings: GateSettings

    def config(self, base: ModelConfig | None = None) -> ModelConfig:
        """``base`` (default ModelConfig()) with the corrections the gate did not enable switched off."""
        base = base or ModelConfig()
        return replace(base, disabled=frozenset(base.disabled) | self.disabled)

    def to_json(self) -> dict[str, Any]:
        rows = []
        for row in self.decisions.to_dicts():
            rows.append({k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()})
        return {
            "method": "trusted-anchor gate (seed 000): paired sign-flip permutation test on per-anchor log loss, "
            "corrected vs uncorrected bias-aware fit",
            "k": self.k,
            "anchors_unmatched": self.anchors_unmatched,
            "min_anchors": self.settings.min_anchors,
            "alpha": self.settings.alpha,
            "margin": self.settings.margin,
            "decisions": rows,
            "disabled": sorted([list(pair) for pair in self.disabled]),
        }


def anchor_outcomes(anchors: pa.Table | pl.DataFrame) -> pl.DataFrame:
    """Trusted verdicts → (model_a, model_b, y) with y = 1 (first won), 0 (second won), ½ (tie)."""
    frame = anchors if isinstance(anchors, pl.DataFrame) else pl.from_arrow(anchors)
    assert isinstance(frame, pl.DataFrame)
    missing = [c for c in ("model_a", "model_b", "winner") if c not in frame.columns]
    if missing:
        raise InputError(f"anchors: missing column(s) {', '.join(missing)}")
    y = (
        pl.when(pl.col("winner") == "model_a")
        .then(1.0)
        .when(pl.col("winner") == "model_b")
        .then(0.0)
        .when(pl.col("winner").is_in(["tie", "tie (bothbad)"]))
        .then(0.5)
        .otherwise(None)
    )
    out = frame.select(pl.col("model_a").cast(pl.String), pl.col("model_b").cast(pl.String), y.alias("y"))
    bad = out.filter(pl.col("y").is_null()).height
    if bad:
        raise InputError(f"anchors: {bad} row(s) with a winner outside model_a/model_b/tie/tie (bothbad)")
    return out.filter(pl.col("model_a") != pl.col("model_b"))


def anchor_log_loss(fit: FitResult, a: np.ndarray, b: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per-anchor log loss of p = σ(θ_a − θ_b) (indices into ``fit.models``)."""
    diff = fit.rating[a] - fit.rating[b]
    # log σ(z) = −log(1 + e^{−z}), stably
    log_p = -np.logaddexp(0.0, -diff)
    log_q = -np.logaddexp(0.0, diff)
    return -(y * log_p + (1.0 - y) * log_q)


def sign_flip_p_value(d: np.ndarray, permutations: int, rng: np.random.Generator) -> float:
    """One-sided p of mean(d) > 0 under H0 "d is symmetric about 0" (paired sign-flip permutation test).

    Exact over all 2^K sign patterns when K ≤ 16; otherwise ``permutations``
    random patterns with the usual (1 + hits) / (1 + draws) estimate.
    """
    d = np.asarray(d, dtype=float)
    observed = d.mean()
    tol = 1e-12 * max(1.0, float(np.abs(d).sum()))
    if d.size <= _EXACT_MAX:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=d.size)))
        return float(np.mean(signs @ d / d.size >= observed - tol))
    signs = rng.choice((1.0, -1.0), size=(permutations, d.size))
    hits = int(np.sum(signs @ d / d.size >= observed - tol))
    return (1 + hits) / (1 + permutations)


def bootstrap_ci(d: np.ndarray, replicates: int, rng: np.random.Generator, level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap CI of mean(d)."""
    idx = rng.integers(0, d.size, size=(replicates, d.size))
    means = d[idx].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def _judges_of(cells: pa.Table | pl.DataFrame | Sequence[pa.Table]) -> list[str]:
    tables = list(cells) if isinstance(cells, (list, tuple)) else [cells]
    names: set[str] = set()
    for t in tables:
        frame = t if isinstance(t, pl.DataFrame) else pl.DataFrame(t)
        names.update(frame.get_column("judge").unique().to_list())
    return sorted(names)


def run_gate(
    cells,
    anchors: pa.Table | pl.DataFrame,
    *,
    judges: Iterable[str] | None = None,
    effects: Iterable[str] = DEFAULT_EFFECTS,
    base_config: ModelConfig | None = None,
    settings: GateSettings | None = None,
    score_cells=None,
) -> GateResult:
    """Decide per (judge, effect) whether correction is enabled (see the module docstring).

    ``cells``: the pair cells the leaderboard is fit on; ``anchors``: battle-shaped
    trusted verdicts.  With fewer than ``min_anchors`` usable anchors nothing is
    enabled (and with fewer anchor rows than that, no model is even fit).
    """
    settings = settings or GateSettings()
    base_config = replace(base_config or ModelConfig(), profile=False, bootstrap=0)
    judges = sorted(judges) if judges is not None else _judges_of(cells)
    effects = tuple(effects)
    candidates = [(j, e) for j in judges for e in effects]
    outcomes = anchor_outcomes(anchors)
    columns = {
        "judge": pl.String,
        "effect": pl.String,
        "enabled": pl.Boolean,
        "reason": pl.String,
        "k": pl.Int64,
        "loss_uncorrected": pl.Float64,
        "loss_corrected": pl.Float64,
        "improvement": pl.Float64,
        "improvement_ci_low": pl.Float64,
        "improvement_ci_high": pl.Float64,
        "p_value": pl.Float64,
    }
    rows: list[dict[str, Any]] = []

    def decide_all_off(reason: str, k: int, unmatched: int) -> GateResult:
        for judge, effect in candidates:
            rows.append({"judge": judge, "effect": effect, "enabled": False, "reason": reason, "k": k})
        frame = pl.DataFrame(rows, schema=columns)
        return GateResult(frame, frozenset(candidates), k, unmatched, settings)

    if outcomes.height < settings.min_anchors:
        return decide_all_off(
            f"only {outcomes.height} anchors (< {settings.min_anchors}): correction stays off", outcomes.height, 0
        )
    disabled_all = frozenset(base_config.disabled) | frozenset(candidates)
    baseline = fit_bias_aware(cells, score_cells, config=replace(base_config, disabled=disabled_all))
    index = {m: i for i, m in enumerate(baseline.models)}
    known = outcomes.filter(pl.col("model_a").is_in(list(index)) & pl.col("model_b").is_in(list(index)))
    unmatched = outcomes.height - known.height
    k = known.height
    if k < settings.min_anchors:
        return decide_all_off(f"only {k} usable anchors (< {settings.min_anchors}): correction stays off", k, unmatched)
    a = np.array([index[m] for m in known["model_a"]])
    b = np.array([index[m] for m in known["model_b"]])
    y = known["y"].to_numpy()
    loss_base = anchor_log_loss(baseline, a, b, y)
    rng = np.random.default_rng(settings.seed)
    enabled: set[tuple[str, str]] = set()
    for judge, effect in candidates:
        config = replace(base_config, disabled=disabled_all - {(judge, effect)})
        corrected = fit_bias_aware(cells, score_cells, config=config)
        if tuple(corrected.models) != tuple(baseline.models):
            raise RuntimeError("gate: the corrected and uncorrected fits index models differently")
        loss_corr = anchor_log_loss(corrected, a, b, y)
        d = loss_base - loss_corr
        mean = float(d.mean())
        p = sign_flip_p_value(d - settings.margin, settings.permutations, rng)
        lo, hi = bootstrap_ci(d, settings.bootstrap, rng)
        ok = mean > settings.margin and p <= settings.alpha
        if ok:
            enabled.add((judge, effect))
            reason = f"anchors improve by {mean:.4f} nats (p = {p:.3g} <= {settings.alpha})"
        elif mean <= settings.margin:
            reason = f"no improvement on the anchors ({mean:+.4f} nats <= margin {settings.margin})"
        else:
            reason = f"improvement {mean:.4f} nats not supported (p = {p:.3g} > {settings.alpha})"
        rows.append(
            {
                "judge": judge,
                "effect": effect,
                "enabled": ok,
                "reason": reason,
                "k": k,
                "loss_uncorrected": float(loss_base.mean()),
                "loss_corrected": float(loss_corr.mean()),
                "improvement": mean,
                "improvement_ci_low": lo,
                "improvement_ci_high": hi,
                "p_value": p,
            }
        )
    decisions = pl.DataFrame(rows, schema=columns)
    return GateResult(decisions, frozenset(candidates) - enabled, k, unmatched, settings)
