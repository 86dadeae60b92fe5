"""The simulator: day-partitioned judge-battle logs with a known truth, for tests, benchmarks and the demo.

Not part of the model core (:mod:`biasboard.ranking` never imports it); it
writes the same Battle/Score contracts (:mod:`biasboard.schemas`) the ingest
reads, so every job can be run and checked against the truth it was drawn from.
The generator is :mod:`biasboard.simulate.simulator`.
"""

from biasboard.simulate.simulator import (
    BAD_ROW_REASONS,
    DESIGNS,
    FAMILY_PREFIXES,
    Parameters,
    SimulationConfig,
    draw_parameters,
    grade_probabilities,
    simulate_days,
    truth,
    verdict_probabilities,
    write_simulation,
)

__all__ = [
    "BAD_ROW_REASONS",
    "DESIGNS",
    "FAMILY_PREFIXES",
    "Parameters",
    "SimulationConfig",
    "draw_parameters",
    "grade_probabilities",
    "simulate_days",
    "truth",
    "verdict_probabilities",
    "write_simulation",
]
