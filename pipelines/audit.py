"""``biasboard audit``: what each judge does — order, length, self-preference, gold labels.

    biasboard audit --input 'logs/day=*/*.parquet' --out audit/ [--anchors 'anchors/*.parquet']
    biasboard audit --input 'gs://bucket/logs/**' --out gs://bucket/audit --runner=DataflowRunner ...

Reads battle logs day by day as Arrow batches, validates them with the ingest
rules (rejected rows are counted by reason in ``audit.json``; ``biasboard
backfill`` keeps the dead letters themselves), and runs
:class:`~biasboard.transforms.audit.AuditBattles`.  Writes under ``--out``:

* ``audit_judges.parquet`` — one row per judge: first/second/tie split, order
  consistency and flip rate (and the Position-Bias-Analyzer rate), identical-answer
  check, length profile of picks, gold-label accuracy with its baselines;
* ``audit_order_pairs.parquet`` — per judge and model pair: the cross-tab of the
  two orders' verdicts, averaged and order-consistent win rates;
* ``audit_order_models.parquet`` — per judge and model: win rate among
  order-consistent pairs ± SE;
* ``audit_family.parquet`` — own-family win rate under the judge vs other-family judges;
* ``audit_section.html`` — the report's audit section (a fragment);
* ``audit.json`` — all of the above plus row counts, written last.

Gold labels come from a ``gold`` column in the battles (the correct verdict in
FastChat's values, for that row's order) and/or ``--anchors``: battle-shaped
Parquet whose verdicts are trusted, matched to battles by prompt and model pair.
"""

from __future__ import annotations

import argparse
import html
import logging
import math
from collections.abc import Mapping
from typing import Any

import apache_beam as beam
import polars as pl
from apache_beam.options.pipeline_options import GoogleCloudOptions
from biasboard.audit import GOLD_COLUMN, AuditResult, anchor_gold
from biasboard.pipelines.options import beam_options
from biasboard.schemas.battle import WINNER_VALUES
from biasboard.schemas.errors import InputError, recover_user_error
from biasboard.schemas.families import FamilyMap
from biasboard.transforms import publish, read, storage
from biasboard.transforms.audit import DEFAULT_ORDER_SHARDS, AuditBattles
from biasboard.transforms.cells import IngestCounts
from biasboard.transforms.covariates import resolve_families
from biasboard.transforms.validate import WINNER_CODE, SeenIds, validate_battles

_LOG = logging.getLogger(__name__)

#: Tables written as Parquet, in the order the report shows them.
TABLES: tuple[str, ...] = ("judges", "order_pairs", "order_models", "family")
AUDIT_JSON = "audit.json"
AUDIT_HTML = "audit_section.html"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input", required=True, help="battle Parquet: a glob or folder, local or gs://")
    parser.add_argument("--out", required=True, help="folder for the audit files (local or gs://)")
    parser.add_argument(
        "--anchors", default=None, help="optional trusted verdicts (battle-shaped Parquet glob) for gold-label accuracy"
    )
    parser.add_argument(
        "--family-map", default=None, help="optional JSON family rules (model/judge name → family), before the defaults"
    )
    parser.add_argument(
        "--order-shards",
        type=int,
        default=DEFAULT_ORDER_SHARDS,
        help=f"shards for pairing battles with their swapped order (default {DEFAULT_ORDER_SHARDS})",
    )


def run(args: argparse.Namespace, beam_args: list[str]) -> int:
    run_audit(args.input, args.out, beam_args, args.anchors, args.family_map, args.order_shards)
    print(storage.join(args.out, AUDIT_JSON))
    return 0


def run_audit(
    input_glob: str,
    out: str,
    beam_args: list[str] | None = None,
    anchors: str | None = None,
    family_map: str | None = None,
    order_shards: int = DEFAULT_ORDER_SHARDS,
) -> str:
    """Run the audit pipeline over ``input_glob`` and write its files to ``out``; returns audit.json's path.

    The entry point the refresh job calls, so that a snapshot carries the same
    audit that ``biasboard audit`` writes.
    """
    if order_shards < 1:
        raise InputError(f"--order-shards: must be at least 1, got {order_shards}")
    options = beam_options(beam_args)
    storage.configure_gcs_auth(no_auth=options.view_as(GoogleCloudOptions).no_auth)
    families = read.load_family_map(family_map)
    days = read.list_input_days(input_glob)
    lookup = load_anchor_lookup(anchors) if anchors else None
    pipeline = beam.Pipeline(options=options)
    battles = (
        pipeline
        | "Days" >> beam.Create(sorted(days.items()))
        | "SpreadDays" >> beam.Reshuffle()
        | "ReadValidate" >> beam.FlatMap(read_day, families).with_outputs("counts", main="battles")
    )
    counts = battles.counts | "SumCounts" >> beam.CombineGlobally(_sum_counts)
    _ = (
        battles.battles
        | "Audit" >> AuditBattles(lookup, n_shards=order_shards)
        | "Write" >> beam.Map(write_audit, out, beam.pvalue.AsSingleton(counts))
    )
    try:
        pipeline.run().wait_until_finish()
    except Exception as err:  # a worker's InputError comes back wrapped by the runner
        user = recover_user_error(err)
        if user is not None:
            raise user from err
        raise
    return storage.join(out, AUDIT_JSON)


# --------------------------------------------------------------------------------------------
# Reading: validated battles per day, with the optional gold column kept
# --------------------------------------------------------------------------------------------


#: Columns of each valid row the audit needs beyond what the cells need.
AUDIT_CARRY = ("prompt_id", GOLD_COLUMN)


def audit_frame(valid: pl.DataFrame) -> pl.DataFrame:
    """Validated rows (``validate_battles(..., carry=AUDIT_CARRY)``) → the columns the audit reads.

    Uses the validator's parsed verdict code and lengths.
    """
    codes = pl.DataFrame({WINNER_CODE: pl.Series(range(len(WINNER_VALUES)), dtype=pl.Int8), "_w": WINNER_VALUES})
    frame = valid.join(codes, on=WINNER_CODE, how="left")
    out = frame.select(
        "judge",
        "model_a",
        "model_b",
        pl.col("_w").alias("winner"),
        pl.col("prompt_id").cast(pl.String),
        pl.col("_len_a").cast(pl.Int64, strict=False).alias("len_a"),
        pl.col("_len_b").cast(pl.Int64, strict=False).alias("len_b"),
        pl.col("family_a").cast(pl.String),
        pl.col("family_b").cast(pl.String),
        pl.col("judge_family").cast(pl.String),
        pl.col(GOLD_COLUMN),
    )
    return out if out.get_column(GOLD_COLUMN).null_count() < out.height else out.drop(GOLD_COLUMN)


def read_day(day_files: tuple[str, list[read.InputFile]], family_map: FamilyMap):
    """One day's files → validated audit frames, plus a ``counts`` output (read / valid / rejected by reason).

    Repeated battle ids are detected across all the day's files, as ingest does.
    """
    day, files = day_files
    seen = SeenIds()
    for f in files:
        for offset, batch in read.iter_batches(f.path, "battle", carry=AUDIT_CARRY):
            if f.undated:
                batch = read.rows_of_day(batch, offset, day, f.home_day)
            checked = validate_battles(batch, seen, source_file=f.path, row_offset=offset, carry=AUDIT_CARRY)
            self_battles = checked.valid.filter(pl.col("model_a") == pl.col("model_b")).height
            counts = IngestCounts(checked.read, checked.valid.height, dict(checked.rejected), self_battles)
            yield beam.pvalue.TaggedOutput("counts", counts)
            if checked.valid.height:
                yield audit_frame(resolve_families(checked.valid, family_map))


def _sum_counts(parts) -> IngestCounts:
    """Row accounting of the whole run (``read = counted + rejected``), as the ingest keeps it."""
    return sum(parts, IngestCounts())


def load_anchors(glob: str) -> pl.DataFrame:
    """Trusted verdicts (battle-shaped Parquet), validated by the ingest's rules, as audit rows.

    Shared by the audit's gold-label accuracy and the refresh's trusted-anchor gate.
    """
    frames = []
    for files in read.list_input_days(glob).values():
        for f in files:
            for offset, batch in read.iter_batches(f.path, "battle", carry=AUDIT_CARRY):
                checked = validate_battles(batch, None, source_file=f.path, row_offset=offset, carry=AUDIT_CARRY)
                if checked.rejected:
                    _LOG.warning(
                        "anchors %s: %s rows rejected: %s", f.path, sum(checked.rejected.values()), checked.rejected
                    )
                frames.append(audit_frame(checked.valid))
    if not frames:
        raise InputError(f"--anchors: no valid trusted verdicts in {glob}")
    return pl.concat(frames, how="diagonal_relaxed").unique()


def load_anchor_lookup(glob: str) -> pl.DataFrame:
    """Trusted verdicts → the gold lookup (by judge-free prompt and pair) the audit scores judges against."""
    lookup = anchor_gold(load_anchors(glob))
    if lookup.height == 0:
        raise InputError(f"--anchors: {glob} has no verdicts with a prompt_id to match battles by")
    return lookup


# --------------------------------------------------------------------------------------------
# Writing: Parquet + JSON + the report fragment
# --------------------------------------------------------------------------------------------


def audit_files(result: AuditResult, counts: IngestCounts | Mapping[str, Any] | None = None) -> dict[str, bytes]:
    """Every audit file by name (a refresh adds these to its snapshot); ``audit.json`` is last."""
    if isinstance(counts, IngestCounts):
        counts = counts.to_dict()
    files = {f"audit_{name}.parquet": publish.table_bytes(frame, "parquet") for name, frame in result.tables().items()}
    files[AUDIT_HTML] = render_audit_section(result).encode("utf-8")
    document = {"counts": dict(counts or {}), "tables": result.to_json(), "conventions": CONVENTIONS}
    files[AUDIT_JSON] = publish.json_bytes(document)
    return files


def write_audit(result: AuditResult, out: str, counts: IngestCounts | Mapping[str, Any] | None = None) -> list[str]:
    """Write the audit files under ``out`` (each atomically; ``audit.json`` last)."""
    storage.ensure_dir(out)
    written = []
    for name, data in audit_files(result, counts).items():
        path = storage.join(out, name)
        storage.atomic_write_bytes(path, data)
        written.append(path)
    return written


#: Plain-words definitions written beside the numbers.
CONVENTIONS: dict[str, str] = {
    "order_pairs": "prompt-pairs judged in both orders by the same judge (same prompt_id, the two models swapped)",
    "order_flip_rate": "share of those pairs whose two verdicts disagree (ties are a verdict class of their own)",
    "order_prefers_first_rate": "share of pairs where the first-shown answer won in both orders",
    "pba_consistency_rate": "Position-Bias-Analyzer convention: consistent verdicts over all verdicts with a "
    "prompt_id, where a verdict whose swapped partner is absent counts as consistent",
    "consistent_win_rate": "win rate (tie = half) among order-consistent pairs; SE = sqrt(var(score)/n)",
    "identical": "self-battles (model_a == model_b) are taken as identical answers",
    "len_agreement_pick_longer": "share of battles with different lengths where the judge picked the longer answer",
    "gold_accuracy": "on the discriminative subset (the label names a winner); a judge tie scores 1/2",
    "family": "cross-family battles only; other judges = judges of other families",
}


# --------------------------------------------------------------------------------------------
# The report's audit section
# --------------------------------------------------------------------------------------------


def _fmt(value: Any, kind: str = "rate") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    if kind == "rate":
        return f"{100 * float(value):.1f}%"
    if kind == "count":
        return f"{float(value):,.0f}" if float(value).is_integer() else f"{float(value):,.1f}"
    if kind == "num":
        return f"{float(value):,.1f}"
    return html.escape(str(value))


def _table(caption: str, headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return (
        f'<table class="audit"><caption>{html.escape(caption)}</caption><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table>"
    )


def _records(audit: AuditResult | Mapping[str, Any], name: str) -> list[dict[str, Any]]:
    if isinstance(audit, AuditResult):
        return audit.to_json()[name]
    tables = audit.get("tables", audit)
    return list(tables.get(name, []))


def render_audit_section(audit: AuditResult | Mapping[str, Any]) -> str:
    """The audit as an HTML fragment (``<section>``) for the report; every name from the data is escaped.

    Accepts an :class:`AuditResult` or the document of ``audit.json``.
    """
    judges = _records(audit, "judges")
    name = lambda r: html.escape(str(r.get("judge")))  # noqa: E731
    parts = ['<section class="audit" id="judge-audit"><h2>Judge audit</h2>']
    if not judges:
        parts.append("<p>No battles to audit.</p></section>")
        return "".join(parts)
    parts.append(
        _table(
            "Position: verdict split and order consistency (pairs judged in both orders)",
            [
                "judge",
                "verdicts",
                "first",
                "second",
                "tie",
                "pairs",
                "flip rate",
                "first won both",
                "second won both",
                "consistency (PBA)",
            ],
            [
                [
                    name(r),
                    _fmt(r.get("slot_n"), "count"),
                    _fmt(r.get("slot_first_share")),
                    _fmt(r.get("slot_second_share")),
                    _fmt(r.get("slot_tie_share")),
                    _fmt(r.get("order_pairs"), "count"),
                    _fmt(r.get("order_flip_rate")),
                    _fmt(r.get("order_prefers_first_rate")),
                    _fmt(r.get("order_prefers_second_rate")),
                    _fmt(r.get("pba_consistency_rate")),
                ]
                for r in judges
            ],
        )
    )
    identical = [r for r in judges if r.get("identical_n")]
    if identical:
        parts.append(
            _table(
                "Identical answers (self-battles): an unbiased judge calls them ties",
                ["judge", "battles", "first", "second", "tie", "winner declared"],
                [
                    [
                        name(r),
                        _fmt(r.get("identical_n"), "count"),
                        _fmt(r.get("identical_first"), "count"),
                        _fmt(r.get("identical_second"), "count"),
                        _fmt((r.get("identical_tie") or 0) + (r.get("identical_bothbad") or 0), "count"),
                        _fmt(r.get("identical_declared_share")),
                    ]
                    for r in identical
                ],
            )
        )
    lengths = [r for r in judges if r.get("len_n")]
    if lengths:
        parts.append(
            _table(
                "Length profile of picks",
                [
                    "judge",
                    "battles",
                    "mean length chosen",
                    "mean length rejected",
                    "longer wins",
                    "agrees with pick-the-longer",
                ],
                [
                    [
                        name(r),
                        _fmt(r.get("len_n"), "count"),
                        _fmt(r.get("len_mean_chosen"), "num"),
                        _fmt(r.get("len_mean_rejected"), "num"),
                        _fmt(r.get("len_longer_win_rate")),
                        _fmt(r.get("len_agreement_pick_longer")),
                    ]
                    for r in lengths
                ],
            )
        )
    family = _records(audit, "family")
    if family:
        parts.append(
            _table(
                "Own-family preference (cross-family battles)",
                ["judge", "family", "win rate under this judge", "under other-family judges", "difference ± SE"],
                [
                    [
                        name(r),
                        html.escape(str(r.get("judge_family"))),
                        _fmt(r.get("win_rate_self")),
                        _fmt(r.get("win_rate_other_judges")),
                        f"{_fmt(r.get('self_preference'))} ± {_fmt(r.get('self_preference_se'))}",
                    ]
                    for r in family
                ],
            )
        )
    gold = [r for r in judges if r.get("gold_n_discriminative")]
    if gold:
        parts.append(
            _table(
                "Gold labels: accuracy on the discriminative subset",
                ["judge", "cases", "accuracy", "random pick", "longest pick", "lift over random", "lift over longest"],
                [
                    [
                        name(r),
                        _fmt(r.get("gold_n_discriminative"), "count"),
                        _fmt(r.get("gold_accuracy")),
                        _fmt(r.get("gold_random_pick_baseline")),
                        _fmt(r.get("gold_longest_pick_baseline")),
                        _fmt(r.get("gold_lift_over_random")),
                        _fmt(r.get("gold_lift_over_longest")),
                    ]
                    for r in gold
                ],
            )
        )
    parts.append("</section>")
    return "".join(parts)
