"""Beam transform: the judge audit over Arrow batches of validated battles.

The audit needs prompt-level pairing (a battle meets its swapped-order partner,
which may sit in another file or another day), so it cannot run on the cells.
Its shape instead:

1. each batch → :func:`~biasboard.audit.audit_partials` (additive
   per-key counts, plus *compact order rows*: one per (judge, prompt, unordered
   pair) with verdict counts per presentation order — already far fewer rows
   than battles);
2. the compact order rows are keyed by a hash shard of (judge, prompt), so every
   group lands whole in one shard, summed there, and reduced by
   :func:`~biasboard.audit.pair_order_stats` to additive per-(judge,
   model pair) counts;
3. everything else is per-judge counts; all of it is summed by one global
   combine and finished by :func:`~biasboard.audit.finish_audit`.

The transforms only move tables; every number comes from the core, the same
functions the tests call.
"""

from __future__ import annotations

import dataclasses

import apache_beam as beam
import polars as pl
import pyarrow as pa
from biasboard.audit import (
    AuditPartials,
    AuditResult,
    audit_partials,
    finish_audit,
    merge_partials,
    order_shard,
    pair_order_stats,
)

#: Shards for order pairing: enough to spread the shuffle over workers, few enough to keep partials large.
DEFAULT_ORDER_SHARDS = 16


class MergePartialsFn(beam.CombineFn):
    """Sums :class:`AuditPartials` (the monoid of the core); buffers a few before merging to amortise polars calls."""

    _BUFFER = 32

    def create_accumulator(self) -> list[AuditPartials]:
        return []

    def add_input(self, acc: list[AuditPartials], element: AuditPartials) -> list[AuditPartials]:
        acc.append(element)
        if len(acc) >= self._BUFFER:
            acc[:] = [merge_partials(acc)]
        return acc

    def merge_accumulators(self, accs) -> list[AuditPartials]:
        return [merge_partials([p for acc in accs for p in acc])]

    def extract_output(self, acc: list[AuditPartials]) -> AuditPartials:
        return merge_partials(acc)


def _batch_partials(batch: pa.Table | pl.DataFrame, gold_lookup: pl.DataFrame | None) -> AuditPartials:
    return audit_partials(batch, gold_lookup)


def _shard_order_rows(partials: AuditPartials, n_shards: int):
    """(shard, partial holding only that shard's compact order rows) for each non-empty shard."""
    rows = partials.order_rows
    if rows.height == 0:
        return
    keyed = rows.with_columns(order_shard(rows, n_shards))
    for (shard,), part in keyed.partition_by("shard", as_dict=True, include_key=False).items():
        yield int(shard), AuditPartials(order_rows=part)


def _reduce_shard(keyed: tuple[int, AuditPartials]) -> AuditPartials:
    """A shard's complete order rows → additive per-pair stats."""
    _, partials = keyed
    return AuditPartials(order_pairs=pair_order_stats(partials.order_rows))


def _without_order_rows(partials: AuditPartials) -> AuditPartials:
    return dataclasses.replace(partials, order_rows=AuditPartials().order_rows)


class AuditBattles(beam.PTransform):
    """PCollection of validated battle batches (``pa.Table`` or polars frames) → one :class:`AuditResult`.

    ``gold_lookup``: trusted verdicts from :func:`~biasboard.audit.anchor_gold`
    (small; passed by value to every worker).
    """

    def __init__(self, gold_lookup: pl.DataFrame | None = None, n_shards: int = DEFAULT_ORDER_SHARDS) -> None:
        super().__init__()
        self._gold_lookup = gold_lookup
        self._n_shards = n_shards

    def expand(self, batches):
        partials = batches | "BatchPartials" >> beam.Map(_batch_partials, self._gold_lookup)
        pairs = (
            partials
            | "ShardOrderRows" >> beam.FlatMap(_shard_order_rows, self._n_shards)
            | "SumShard" >> beam.CombinePerKey(MergePartialsFn())
            | "PairStats" >> beam.Map(_reduce_shard)
        )
        counts = partials | "CountsOnly" >> beam.Map(_without_order_rows)
        return (
            (pairs, counts)
            | "Together" >> beam.Flatten()
            | "SumAll" >> beam.CombineGlobally(MergePartialsFn())
            | "Finish" >> beam.Map(finish_audit)
        )


__all__ = ["AuditBattles", "AuditResult", "MergePartialsFn"]
