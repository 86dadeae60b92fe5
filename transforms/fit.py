"""FitModels: cells PCollection → (naive, corrected) fitted leaderboards, on a Beam worker.

Why the fit is one DoFn and not a chain of stages: a Newton solve needs the gradient and Hessian of
*all* cells at every iteration, and Beam has no loop across stages.  The cells, however, are small by
construction — bounded by judges × ordered model pairs × length bins whatever the number of battles
(DESIGN §5) — so the transform first combines every day's / batch's cell tables into one merged table
(the cells monoid: concatenate, group by the key, sum — associative and commutative, so Beam may combine
in any order, in parallel), then fits both models in a DoFn on whichever worker receives that table.
Inside the DoFn the cells are split into ``shards`` parts and every objective, gradient and Hessian is
the sum of :func:`biasboard.ranking.model.partials` — the one pure (params, shard) → partials function —
over the shards, exactly as a multi-worker fit would add them; the answer does not depend on ``shards``.

Usage::

    fits = (pair_cells                      # PCollection[pa.Table] in PAIR_CELLS_SCHEMA
            | 'Fit' >> FitModels(ModelConfig(k=10), scores=score_cells))
    # fits: a single-element PCollection of (naive FitResult, corrected FitResult)
"""

from __future__ import annotations

from collections.abc import Iterable

import apache_beam as beam
import pyarrow as pa
from apache_beam import pvalue
from biasboard.ranking.config import ModelConfig, NaiveConfig
from biasboard.schemas.cells import PAIR_CELLS_SCHEMA, SCORE_CELLS_SCHEMA
from biasboard.transforms.cells import merge_cells


class MergeCellsFn(beam.CombineFn):
    """The cells monoid as a CombineFn: accumulators are merged tables, so memory stays bounded by the cells."""

    def __init__(self, schema: pa.Schema = PAIR_CELLS_SCHEMA):
        self._schema = schema

    def create_accumulator(self) -> pa.Table:
        return self._schema.empty_table()

    def add_input(self, accumulator: pa.Table, table: pa.Table) -> pa.Table:
        return merge_cells([accumulator, table], self._schema)

    def add_inputs(self, accumulator: pa.Table, tables: Iterable[pa.Table]) -> pa.Table:
        return merge_cells([accumulator, *tables], self._schema)

    def merge_accumulators(self, accumulators: Iterable[pa.Table]) -> pa.Table:
        return merge_cells(list(accumulators), self._schema)

    def extract_output(self, accumulator: pa.Table) -> pa.Table:
        return accumulator


class _FitDoFn(beam.DoFn):
    def __init__(self, config: ModelConfig, naive_config: NaiveConfig | None, shards: int):
        self._config = config
        self._naive_config = naive_config
        self._shards = shards

    def process(self, cells: pa.Table, scores: pa.Table | None = None):
        from biasboard.ranking import fit_leaderboards

        if cells.num_rows == 0:
            return  # nothing to fit: no valid battle reached the cells (the jobs report this upstream)
        score_cells = scores if scores is not None and scores.num_rows else None
        yield fit_leaderboards(
            cells, score_cells, config=self._config, naive_config=self._naive_config, shards=self._shards
        )


class FitModels(beam.PTransform):
    """Merge the cell tables, then fit the naive and the bias-aware model (see the module docstring).

    ``scores`` is an optional PCollection of score-cell tables (SCORE_CELLS_SCHEMA) for the ordinal part.
    """

    def __init__(self, config: ModelConfig | None = None, *, scores: pvalue.PCollection | None = None,
                 naive_config: NaiveConfig | None = None, shards: int = 4, label: str | None = None):
        super().__init__(label)
        self._config = config or ModelConfig()
        self._scores = scores
        self._naive_config = naive_config
        self._shards = shards

    def expand(self, cells: pvalue.PCollection) -> pvalue.PCollection:
        merged = cells | "MergePairCells" >> beam.CombineGlobally(MergeCellsFn(PAIR_CELLS_SCHEMA))
        fit = _FitDoFn(self._config, self._naive_config, self._shards)
        if self._scores is None:
            return merged | "FitNaiveAndBiasAware" >> beam.ParDo(fit)
        scores = self._scores | "MergeScoreCells" >> beam.CombineGlobally(MergeCellsFn(SCORE_CELLS_SCHEMA))
        return merged | "FitNaiveAndBiasAware" >> beam.ParDo(fit, scores=pvalue.AsSingleton(scores))
