"""The judge audit: what each judge does (order, length, self-preference, gold labels), before any correction.

Not part of the model core: pure polars/numpy measurements on validated
battles (:mod:`biasboard.audit.measures`).  The Beam composite that runs them
over a whole input is :mod:`biasboard.transforms.audit`, the job
``biasboard audit`` is :mod:`biasboard.pipelines.audit`, and the report's audit
section is :mod:`biasboard.report.audit`.
"""

from biasboard.audit.measures import (
    COUNT_DECIMALS,
    GOLD_COLUMN,
    AuditPartials,
    AuditResult,
    anchor_gold,
    audit,
    audit_partials,
    cross_tab,
    finish_audit,
    merge_partials,
    order_shard,
    pair_order_stats,
    records,
    reduce_order_rows,
)

__all__ = [
    "COUNT_DECIMALS",
    "GOLD_COLUMN",
    "AuditPartials",
    "AuditResult",
    "anchor_gold",
    "audit",
    "audit_partials",
    "cross_tab",
    "finish_audit",
    "merge_partials",
    "order_shard",
    "pair_order_stats",
    "records",
    "reduce_order_rows",
]
