"""FitModels on the real FnApiRunner: several days' cell tables in, the same fits as the core out."""

from __future__ import annotations

import apache_beam as beam
import numpy as np
from apache_beam.testing.util import assert_that
from biasboard.pipelines.options import beam_options
from biasboard.ranking import ModelConfig, fit_leaderboards
from biasboard.schemas.cells import SCORE_CELLS_SCHEMA
from biasboard.schemas.families import FamilyMap
from biasboard.simulate import SimulationConfig, simulate_days
from biasboard.transforms.cells import merge_cells, partial_cells, partial_score_cells
from biasboard.transforms.fit import FitModels

CONFIG = ModelConfig(profile=False, posterior_draws=300, k=3)


def test_fit_transform_matches_the_core_on_day_partitioned_cells():
    sim = SimulationConfig(battles=6_000, models=8, judges=3, days=3, seed=2, scores=0.2, prompts=30)
    family_map = FamilyMap.with_user_rules()
    days, score_days = [], []
    for _, battles, scores in simulate_days(sim):
        days.append(partial_cells(battles, family_map).cells)
        score_days.append(partial_score_cells(scores, family_map).cells)
    expected_naive, expected = fit_leaderboards(
        merge_cells(days), merge_cells(score_days, SCORE_CELLS_SCHEMA), config=CONFIG
    )

    def check(results):
        assert len(results) == 1
        naive, corrected = results[0]
        assert naive.models == expected_naive.models
        assert np.max(np.abs(naive.rating - expected_naive.rating)) < 1e-9
        assert np.max(np.abs(corrected.rating - expected.rating)) < 1e-9
        assert corrected.converged and corrected.method == "bias_aware"
        assert corrected.bias.filter(corrected.bias["effect"] == "severity")["enabled"].any()

    with beam.Pipeline(options=beam_options(["--runner=FnApiRunner"])) as p:
        cells = p | "Days" >> beam.Create(days)
        scores = p | "ScoreDays" >> beam.Create(score_days)
        fits = cells | FitModels(CONFIG, scores=scores, shards=4)
        assert_that(fits, check)
