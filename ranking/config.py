"""Options of the two models: priors, the ordinal weight ω, switched-off effects, top-k, bootstrap.

Every default is written here once, with the reason for it, so the report and
the manifest can print the exact model that was fit.  All prior SDs are on the
logit scale of a pairwise verdict (the Bradley–Terry scale); the length prior is
on the *standardised* log length ratio (divided by the RMS of ``x`` over all
battles with lengths), and the fit reports β back in units of the raw log ratio.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Effects of the bias-aware model, as named in the bias table and in ``disabled``.
EFFECTS: tuple[str, ...] = ("position", "length", "affinity", "tie", "discrimination", "severity")
#: Effects the trusted-anchor gate (or a user) may switch off per judge.
SWITCHABLE: frozenset[str] = frozenset({"position", "length", "affinity", "discrimination", "severity"})


@dataclass(frozen=True)
class Priors:
    """Gaussian prior SDs (mean 0 unless stated) of the bias-aware model.

    Why these values:

    - ``theta_sd = 2``: weak on quality (arena spreads are 1–3 logits), yet not
      vacuous: seed 000 shows that when a covariate is constant within each
      model the *prior* picks the quality/bias split; a θ prior of the order of
      the real spread encodes "quality is a priori uncorrelated with length".
    - ``position_sd = 1`` (γ₀) and ``position_dev_sd = 0.5`` (u_j): a first-shown
      preference of a few tenths of a logit is typical (seed 002: γ₀ = −0.17,
      SD(u_j) = 0.34); 0.5 shrinks a judge with little data towards the pool.
    - ``length_sd = 0.5``/``length_dev_sd = 0.25`` per SD of the log ratio:
      careful shrinkage — when length is not identified (flat profile) a wide
      prior removes real quality along with length (seed 000's 7-point loss).
    - ``affinity_sd = 0.5``/``affinity_dev_sd = 0.25``: seed 002 estimates 0.41.
    - ``tie_mean = 0``, ``tie_sd = 2`` on log ν_j (Davidson): ν = 1 gives a 1/3
      tie chance between equals; the data dominate whenever a judge has ties.
    - ``discrimination_sd = 0.3`` on log a_j (log-normal around 1); the mean of
      log a_j over judges is fixed at 0 so θ keeps the scale of the average judge.
    - ``severity_sd = 1`` (α_j), ``difficulty_sd = 1`` (δ_p), ``threshold_sd = 2``
      (τ_k) for the ordinal many-facet Rasch part.
    """

    theta_sd: float = 2.0
    position_sd: float = 1.0
    position_dev_sd: float = 0.5
    length_sd: float = 0.5
    length_dev_sd: float = 0.25
    affinity_sd: float = 0.5
    affinity_dev_sd: float = 0.25
    tie_mean: float = 0.0
    tie_sd: float = 2.0
    discrimination_sd: float = 0.3
    severity_sd: float = 1.0
    difficulty_sd: float = 1.0
    threshold_sd: float = 2.0


@dataclass(frozen=True)
class ModelConfig:
    """How the bias-aware model is fit.

    ``disabled`` holds (judge, effect) pairs whose effect is fixed at zero (for
    ``discrimination``: a_j fixed at 1); judge ``'*'`` switches the effect off for
    every judge.  ``omega`` is seed 002's weight of the pairwise part against the
    ordinal part; the likelihoods are weighted 2ω and 2(1 − ω), so the default
    ω = 0.5 is the plain joint likelihood and the Laplace CIs stay calibrated.
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

    def __post_init__(self) -> None:
        if not 0.0 < self.omega <= 1.0:
            raise ValueError(f"omega must be in (0, 1], got {self.omega}")
        for judge, effect in self.disabled:
            if effect not in SWITCHABLE:
                raise ValueError(f"disabled effect {effect!r} for judge {judge!r} is not one of {sorted(SWITCHABLE)}")
        if self.k < 1:
            raise ValueError(f"k must be >= 1, got {self.k}")

    def is_enabled(self, judge: str, effect: str) -> bool:
        return (judge, effect) not in self.disabled and ("*", effect) not in self.disabled


@dataclass(frozen=True)
class NaiveConfig:
    """Plain Bradley–Terry with ties as half wins.

    ``theta_sd=None`` is the maximum-likelihood fit arena leaderboards publish.
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
