"""The one immutable result of a fit that jobs, the report, the audit and the planner read."""

from __future__ import annotations

import builtins
import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import polars as pl
from biasboard.ranking.rank_stats import ranks_within, tie_runs
from biasboard.ranking.uncertainty import percentile_interval
from biasboard.schemas.summary import GLOBAL_JUDGE

#: Elo-like points per logit: 400 / ln 10, so 400 points is a 10:1 odds ratio.
ELO_PER_LOGIT: float = 400.0 / math.log(10.0)
ELO_CENTER: float = 1000.0
Z95: float = 1.959963984540054

BIAS_COLUMNS: dict[str, type[pl.DataType]] = {
    "judge": pl.String,
    "effect": pl.String,
    "estimate": pl.Float64,
    "ci_low": pl.Float64,
    "ci_high": pl.Float64,
    "identified": pl.Boolean,
    "enabled": pl.Boolean,
    "note": pl.String,
    "boot_ci_low": pl.Float64,
    "boot_ci_high": pl.Float64,
}


def empty_bias_table() -> pl.DataFrame:
    return pl.DataFrame(schema=BIAS_COLUMNS)


def rank_draws(draws: np.ndarray, component: np.ndarray | None = None) -> np.ndarray:
    """Ranks (1 = best) of each row of ``draws`` (draws × models), within each comparison component.

    A model is ranked only against models it can be compared with; models tied in a draw share the best rank of
    their run (competition ranks, as the published ranks: :func:`~biasboard.ranking.rank_stats.tie_runs`).
    """
    draws = np.atleast_2d(draws)
    ranks = np.empty(draws.shape, np.int64)
    groups = (
        [np.arange(draws.shape[1])]
        if component is None or component.size == 0
        else [np.flatnonzero(component == c) for c in np.unique(component)]
    )
    for members in groups:
        order, start, _ = tie_runs(draws[:, members])
        block = np.empty(order.shape, np.int64)
        np.put_along_axis(block, order, start + 1, axis=1)
        ranks[:, members] = block
    return ranks


def _sqrt_factor(cov: np.ndarray) -> np.ndarray:
    """A square root of a (possibly singular) covariance, via the symmetric eigendecomposition."""
    vals, vecs = np.linalg.eigh(0.5 * (cov + cov.T))
    return vecs * np.sqrt(np.clip(vals, 0.0, None))


#: Effects reported on the exp scale (their Laplace interval is exp(m ± z·sd) of a log-scale m).
LOG_SCALE_EFFECTS: frozenset[str] = frozenset({"discrimination", "tie"})
#: The per-judge effects a :class:`JudgeEffects` names.
JUDGE_EFFECTS: tuple[str, ...] = (
    "position",
    "length",
    "affinity",
    "discrimination",
    "tie",
    "severity",
    "header",
    "list",
    "bold",
)


def z_value(alpha: float) -> float:
    """The two-sided normal quantile z_{1−α/2} (1.96 at α = 0.05)."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    from scipy.special import ndtri  # the normal quantile without importing scipy.stats (rank_stats says why)

    return float(ndtri(1.0 - alpha / 2.0))


@dataclass(frozen=True)
class Effect:
    """One bias coefficient with its Laplace uncertainty, in the units the bias table reports.

    ``link_estimate`` ± ``link_se`` is the approximately normal posterior on the scale the model is
    linear in (log for discrimination and tie propensity, identity otherwise); :meth:`conf_int` maps
    ``link_estimate ± z·link_se`` back, which is exactly how the bias table's 95% CI is made.
    """

    judge: str
    name: str
    estimate: float
    link_estimate: float
    link_se: float
    log_scale: bool
    identified: bool
    enabled: bool
    note: str = ""

    @property
    def se(self) -> float:
        """Standard error on the reported scale (delta method for the exp-scale effects)."""
        return self.link_se * (math.exp(self.link_estimate) if self.log_scale else 1.0)

    def conf_int(self, alpha: float = 0.05) -> tuple[float, float]:
        """The (1 − alpha) Laplace interval on the reported scale; a disabled effect has zero width."""
        half = z_value(alpha) * self.link_se if self.enabled else 0.0
        lo, hi = self.link_estimate - half, self.link_estimate + half
        return (math.exp(lo), math.exp(hi)) if self.log_scale else (lo, hi)

    @classmethod
    def from_row(cls, row: dict) -> Effect:
        """An effect from a bias-table row: the Laplace CI fn(m ± Z95·sd) gives m and sd back exactly."""
        log_scale = row["effect"] in LOG_SCALE_EFFECTS
        lo, hi = row["ci_low"], row["ci_high"]
        link = (lambda v: math.log(v) if v > 0 else -math.inf) if log_scale else (lambda v: v)
        if any(v is None or not math.isfinite(v) for v in (lo, hi, row["estimate"])):
            link_estimate, link_se = math.nan, math.nan
        else:
            link_estimate, link_se = link(row["estimate"]), (link(hi) - link(lo)) / (2.0 * Z95)
        return cls(
            judge=row["judge"],
            name=row["effect"],
            estimate=row["estimate"],
            link_estimate=link_estimate,
            link_se=link_se,
            log_scale=log_scale,
            identified=bool(row["identified"]),
            enabled=bool(row["enabled"]),
            note=row["note"] or "",
        )


@dataclass(frozen=True)
class JudgeEffects:
    """One judge's effects by name: ``result.judges["gpt-4"].length.conf_int(0.1)``.

    Judge ``"*"`` holds the global (population) effects.  An effect the model does not have for this
    judge (severity without ordinal scores, a global discrimination) is None.
    """

    judge: str
    position: Effect | None = None
    length: Effect | None = None
    affinity: Effect | None = None
    discrimination: Effect | None = None
    tie: Effect | None = None
    severity: Effect | None = None
    #: Style effects (log-odds per unit of the normalised count difference); None without style counts.
    header: Effect | None = None
    list: Effect | None = None
    bold: Effect | None = None

    def effects(self) -> builtins.list[Effect]:  # ``list`` is the style effect's name in this class
        return [e for e in (getattr(self, name) for name in JUDGE_EFFECTS) if e is not None]


@dataclass(frozen=True, eq=False)
class SolverState:
    """What the solver ends with, for code that extends the fit (gate, reference map): not estimates.

    ``core``/``diag`` are the raw parameter vectors at the MAP, ``cov_core`` their Laplace covariance
    (dense, or per-judge blocks), ``theta_chol`` a Cholesky factor of θ's uncentred covariance.
    """

    core: np.ndarray
    diag: np.ndarray
    cov_core: Any
    theta_chol: np.ndarray | None = None


@dataclass(frozen=True, eq=False)
class FitResult:
    """A fitted leaderboard model.

    ``rating`` is θ on the logit scale, centred to mean 0 (only contrasts are identified); ``cov`` is
    the posterior covariance of those centred ratings (Laplace: the inverse Hessian at the MAP,
    projected on the sum-to-zero subspace), ``se``/``ci_*`` are its marginals (95%).  ``bias`` has one
    row per (judge, effect), judge ``'*'`` for global effects.  ``p_top_k[m]`` is the posterior
    probability that model m is among the ``k`` best.  ``component[m]`` numbers the connected
    components of the comparison graph: ratings in different components are not comparable.
    """

    models: tuple[str, ...]
    rating: np.ndarray
    se: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    cov: np.ndarray
    n_battles: np.ndarray
    bias: pl.DataFrame
    p_top_k: np.ndarray
    k: int
    diagnostics: dict
    converged: bool
    grad_norm: float
    iterations: int
    method: str
    rel_grad: float = float("nan")
    loglik: float = float("nan")
    component: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    boot_ci_low: np.ndarray | None = None
    boot_ci_high: np.ndarray | None = None
    solver: SolverState | None = None
    #: The Poisson-bootstrap replicates of the centred ratings (replicates × models), when published.
    boot_theta: np.ndarray | None = None
    #: Where ``ci_*``, ``p_top_k`` and the rank intervals come from: "laplace" (posterior draws),
    #: "godambe" (draws from the Godambe sandwich of an ω-weighted fit: :mod:`~biasboard.ranking.composite`) or
    #: "bootstrap" (the replicates in ``boot_theta``, percentile CIs).
    uncertainty: str = "laplace"
    #: The reference rating φ at each bootstrap replicate (replicates × models, uncentred) when the fit has a
    #: reference with a rated effect of its own (:func:`~biasboard.ranking.reference_rating.reference_replicates`):
    #: what the reference board's intervals are read from.
    boot_reference: np.ndarray | None = None

    @property
    def n_models(self) -> int:
        return len(self.models)

    @property
    def state(self) -> SolverState:
        """The solver's end state (raises when this result was built without one)."""
        if self.solver is None:
            raise ValueError(f"this {self.method} fit carries no solver state")
        return self.solver

    @property
    def params(self) -> dict[str, float]:
        """Every estimate by name, as statsmodels' ``params``: ``rating[<model>]``, ``<effect>[<judge>]``."""
        out = {f"rating[{m}]": float(r) for m, r in zip(self.models, self.rating, strict=True)}
        for judge in self.judges.values():
            out.update({f"{e.name}[{e.judge}]": float(e.estimate) for e in judge.effects()})
        return out

    @cached_property
    def judges(self) -> dict[str, JudgeEffects]:
        """Named judge effects from the bias table: ``result.judges["gpt-4"].position.estimate``."""
        by_judge: dict[str, dict[str, Effect]] = {}
        if self.bias.height:
            for row in self.bias.filter(pl.col("effect").is_in(JUDGE_EFFECTS)).to_dicts():
                by_judge.setdefault(row["judge"], {})[row["effect"]] = Effect.from_row(row)
        return {judge: JudgeEffects(judge, **effects) for judge, effects in by_judge.items()}

    def conf_int(self, alpha: float = 0.05) -> pl.DataFrame:
        """(1 − alpha) Laplace intervals of every rating (logit scale) and judge effect (reported scale)."""
        half = z_value(alpha) * self.se
        rows = [
            {"name": f"rating[{m}]", "estimate": float(r), "low": float(r - h), "high": float(r + h)}
            for m, r, h in zip(self.models, self.rating, half, strict=True)
        ]
        for judge in self.judges.values():
            for e in judge.effects():
                lo, hi = e.conf_int(alpha)
                rows.append({"name": f"{e.name}[{e.judge}]", "estimate": e.estimate, "low": lo, "high": hi})
        return pl.DataFrame(
            rows, schema={"name": pl.String, "estimate": pl.Float64, "low": pl.Float64, "high": pl.Float64}
        )

    def summary(self, alpha: float = 0.05) -> str:
        """A text table a person reads: the fit, every rating, every judge effect, with (1 − alpha) intervals."""
        level = f"{1 - alpha:.0%}"
        judges = sum(1 for j in self.judges if j != GLOBAL_JUDGE)
        lines = [
            f"{self.method} fit: {self.n_models} models" + (f", {judges} judges" if judges else "") + ", "
            f"{'converged' if self.converged else 'NOT converged'} in {self.iterations} iterations, "
            f"log likelihood {self.loglik:.3f}",
            "",
        ]
        width = max([len(m) for m in self.models] + [len(j) for j in self.judges] + [12])
        lines.append(f"{'model':<{width}}  {'rating':>8}  {'se':>7}  {level + ' interval':>20}  {'battles':>8}")
        half = z_value(alpha) * self.se
        for i in np.argsort(-self.rating, kind="stable"):
            lines.append(
                f"{self.models[i]:<{width}}  {self.rating[i]:8.3f}  {self.se[i]:7.3f}  "
                f"[{self.rating[i] - half[i]:8.3f}, {self.rating[i] + half[i]:8.3f}]  "
                f"{self.n_battles[i]:8.0f}"
            )
        if self.judges:
            lines += [
                "",
                f"{'judge':<{width}}  {'effect':<14}  {'estimate':>8}  {'se':>7}  {level + ' interval':>20}  note",
            ]
            for judge in sorted(self.judges, key=lambda j: (j != GLOBAL_JUDGE, j)):
                for e in self.judges[judge].effects():
                    lo, hi = e.conf_int(alpha)
                    flag = "" if e.enabled else "off"
                    flag = flag or ("" if e.identified else "prior-selected")
                    lines.append(
                        f"{judge:<{width}}  {e.name:<14}  {e.estimate:8.3f}  {e.se:7.3f}  "
                        f"[{lo:8.3f}, {hi:8.3f}]  {flag}"
                    )
        return "\n".join(lines)

    def index(self, model: str) -> int:
        try:
            return self.models.index(model)
        except ValueError:
            raise KeyError(f"model {model!r} is not in this fit") from None

    def elo(self, anchor: str | None = None) -> pl.DataFrame:
        """Ratings on the Elo-like scale: 1000 + (400/ln 10)·θ, centred on the mean or on ``anchor``.

        With an anchor the anchor sits at 1000 with zero width and every other CI is that of the
        contrast θ_m − θ_anchor (variance var_m + var_anchor − 2 cov).
        """
        boot = self.boot_theta if self.uncertainty == "bootstrap" else None
        if anchor is None:
            centre = self.rating
            var = np.diag(self.cov)
        else:
            i = self.index(anchor)
            centre = self.rating - self.rating[i]
            var = np.diag(self.cov) + self.cov[i, i] - 2.0 * self.cov[:, i]
            boot = None if boot is None else boot - boot[:, [i]]
        sd = np.sqrt(np.clip(var, 0.0, None))
        low, high = centre - Z95 * sd, centre + Z95 * sd
        if boot is not None:  # the published CIs are the replicates' percentile intervals
            low, high = percentile_interval(boot)
        return pl.DataFrame(
            {
                "model": list(self.models),
                "rating": ELO_CENTER + ELO_PER_LOGIT * centre,
                "ci_low": ELO_CENTER + ELO_PER_LOGIT * low,
                "ci_high": ELO_CENTER + ELO_PER_LOGIT * high,
            }
        )

    def posterior_samples(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` draws of the centred θ vector from the Laplace posterior, shape (n, models)."""
        chol = self.solver.theta_chol if self.solver is not None else None
        if chol is not None:  # uncentred draws, centred: the same law as N(rating, cov), at Cholesky cost
            z = rng.standard_normal((n, self.n_models)) @ chol.T
            if self.component.size and self.component.max() > 0:  # each component centred on its own
                for c in np.unique(self.component):
                    members = self.component == c
                    z[:, members] -= z[:, members].mean(axis=1, keepdims=True)
                return self.rating[None, :] + z
            return self.rating[None, :] + z - z.mean(axis=1, keepdims=True)
        root = _sqrt_factor(self.cov)
        z = rng.standard_normal((n, self.n_models))
        return self.rating[None, :] + z @ root.T

    def ranks(self, among: np.ndarray | None = None) -> np.ndarray:
        """Competition rank of each model (1 = best; ties share the best rank) by rating, within its comparison
        component: the leaderboard's.  (Ranked as one posterior draw, two models of the same rating took consecutive
        ranks by their index: summary.json's ranks then disagreed with the leaderboard's.)  ``among``: the models
        ranked (bool over the models; the others are left out and take no rank), every model when None."""
        keep = self._among(among)
        return ranks_within(self.rating[keep], self.component[keep] if self.component.size else self.component)

    def rank_interval(
        self, level: float = 0.95, *, draws: int = 2000, seed: int = 0, among: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Central ``level`` interval of each model's rank over ``draws`` posterior draws (within components), for
        the models ``among`` selects (as :meth:`ranks`).

        Why: overlapping rating CIs say two models may swap, but not how far a model may fall; the rank
        interval answers "could this model be anywhere from 2nd to 9th?" directly.
        """
        if not 0.0 < level < 1.0:
            raise ValueError(f"level must be in (0, 1), got {level}")
        keep = self._among(among)
        boot = self.boot_theta if self.uncertainty == "bootstrap" else None
        samples = boot if boot is not None else self.posterior_samples(draws, np.random.default_rng(seed))
        ranks = rank_draws(samples[:, keep], self.component[keep] if self.component.size else None)
        tail = 50.0 * (1.0 - level)
        low, high = np.percentile(ranks, [tail, 100.0 - tail], axis=0, method="inverted_cdf")
        return low.astype(np.int64), high.astype(np.int64)

    def _among(self, among: np.ndarray | None) -> np.ndarray:
        return np.ones(self.n_models, bool) if among is None else np.asarray(among, bool)

    def table(self) -> pl.DataFrame:
        """One row per model: logit rating, SE, CI, battles, p_top_k."""
        return pl.DataFrame(
            {
                "model": list(self.models),
                "rating": self.rating,
                "se": self.se,
                "ci_low": self.ci_low,
                "ci_high": self.ci_high,
                "n_battles": self.n_battles.astype(np.int64),
                "p_top_k": self.p_top_k,
                "component": self.component.astype(np.int64),
            }
        )
