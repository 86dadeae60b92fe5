"""The planner: which comparisons to run next (top-k-aware acquisition and its baselines).

Not part of the model core: it reads a fit's posterior
(:func:`~biasboard.plan.acquisition.posterior_from_fit`) and spends a judge
budget where it can still change who is in the top k
(:mod:`biasboard.plan.acquisition`).  The job ``biasboard plan`` is
:mod:`biasboard.pipelines.plan`.
"""

from biasboard.plan.acquisition import (
    PLAN_COLUMNS,
    STRATEGIES,
    JudgedRows,
    Posterior,
    Selection,
    circle_schedule,
    davidson_information,
    posterior_from_fit,
    select_comparisons,
)

__all__ = [
    "PLAN_COLUMNS",
    "STRATEGIES",
    "JudgedRows",
    "Posterior",
    "Selection",
    "circle_schedule",
    "davidson_information",
    "posterior_from_fit",
    "select_comparisons",
]
