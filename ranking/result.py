"""The one immutable result of a fit that jobs, the report, the audit and the planner read."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import polars as pl

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

    A model is ranked only against models it can be compared with; ties in a draw are broken by index.
    """
    draws = np.atleast_2d(draws)
    ranks = np.empty(draws.shape, np.int64)
    groups = [np.arange(draws.shape[1])] if component is None or component.size == 0 else [
        np.flatnonzero(component == c) for c in np.unique(component)
    ]
    for members in groups:
        order = np.argsort(-draws[:, members], axis=1, kind="stable")
        ranks[:, members] = np.argsort(order, axis=1, kind="stable") + 1
    return ranks


def _sqrt_factor(cov: np.ndarray) -> np.ndarray:
    """A square root of a (possibly singular) covariance, via the symmetric eigendecomposition."""
    vals, vecs = np.linalg.eigh(0.5 * (cov + cov.T))
    return vecs * np.sqrt(np.clip(vals, 0.0, None))


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
    params: dict = field(default_factory=dict)

    @property
    def n_models(self) -> int:
        return len(self.models)

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
        if anchor is None:
            centre = self.rating
            var = np.diag(self.cov)
        else:
            i = self.index(anchor)
            centre = self.rating - self.rating[i]
            var = np.diag(self.cov) + self.cov[i, i] - 2.0 * self.cov[:, i]
        sd = np.sqrt(np.clip(var, 0.0, None))
        return pl.DataFrame(
            {
                "model": list(self.models),
                "rating": ELO_CENTER + ELO_PER_LOGIT * centre,
                "ci_low": ELO_CENTER + ELO_PER_LOGIT * (centre - Z95 * sd),
                "ci_high": ELO_CENTER + ELO_PER_LOGIT * (centre + Z95 * sd),
            }
        )

    def posterior_samples(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` draws of the centred θ vector from the Laplace posterior, shape (n, models)."""
        chol = self.params.get("theta_chol")
        if chol is not None:  # uncentred draws, centred: the same law as N(rating, cov), at Cholesky cost
            z = rng.standard_normal((n, self.n_models)) @ chol.T
            return self.rating[None, :] + z - z.mean(axis=1, keepdims=True)
        root = _sqrt_factor(self.cov)
        z = rng.standard_normal((n, self.n_models))
        return self.rating[None, :] + z @ root.T

    def ranks(self) -> np.ndarray:
        """Rank of each model (1 = best) by rating, within its comparison component."""
        return rank_draws(self.rating[None, :], self.component)[0]

    def rank_interval(self, level: float = 0.95, *, draws: int = 2000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Central ``level`` interval of each model's rank over ``draws`` posterior draws (within components).

        Why: overlapping rating CIs say two models may swap, but not how far a model may fall; the rank
        interval answers "could this model be anywhere from 2nd to 9th?" directly.
        """
        if not 0.0 < level < 1.0:
            raise ValueError(f"level must be in (0, 1), got {level}")
        ranks = rank_draws(self.posterior_samples(draws, np.random.default_rng(seed)), self.component)
        tail = 50.0 * (1.0 - level)
        low, high = np.percentile(ranks, [tail, 100.0 - tail], axis=0, method="inverted_cdf")
        return low.astype(np.int64), high.astype(np.int64)

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
