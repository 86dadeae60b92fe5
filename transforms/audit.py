"""Beam transform: the judge audit over Arrow batches of validated battles.

The audit needs prompt-level pairing (a battle meets its swapped-order partner,
which may sit in another file of the day), so it cannot run on the cells.
Days are its unit of work, as for the ingest: a day's both orders are paired
within the day (:func:`audit_day`), after which a day's partials are additive
and days just add — so the refresh keeps each day's partials and re-reads only
new or changed days, and memory is bounded by the largest day, not the history.
A swapped-order partner on another day counts as absent (for the PBA
consistency rate, as consistent; see :data:`CONVENTIONS`).

:class:`AuditBattles` audits a collection of batches as one slice, in this shape:

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

The transforms only move tables; every number comes from the audit package
(:mod:`biasboard.audit`), the same functions the tests call.

:func:`build_audit` is the whole graph ``biasboard audit`` runs (and
:func:`audit_days_incremental` the one ``biasboard refresh`` runs): each day's
files are read with the shared day reader
(:func:`~biasboard.transforms.read.day_batches`), validated with the ingest's
rules (rejected rows counted by reason), audited and paired within the day,
summed over days, and written under one folder (:func:`write_audit`: one
Parquet per table, the report fragment, and ``audit.json`` last).
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import apache_beam as beam
import polars as pl
import pyarrow as pa
from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions
from biasboard.audit import (
    GOLD_COLUMN,
    AuditPartials,
    AuditResult,
    anchor_gold,
    audit_partials,
    finish_audit,
    merge_partials,
    order_shard,
    pair_order_stats,
    records,
    reduce_order_rows,
)
from biasboard.report.audit import render_audit_section
from biasboard.schemas import summary as S
from biasboard.schemas.battle import WINNER_VALUES
from biasboard.schemas.errors import InputError
from biasboard.schemas.families import FamilyMap
from biasboard.schemas.names import AliasMap
from biasboard.transforms import publish, read, storage
from biasboard.transforms.cells import IngestCounts
from biasboard.transforms.covariates import resolve_families
from biasboard.transforms.judge_pool import carry, pool_by_column
from biasboard.transforms.runner import run_to_completion
from biasboard.transforms.validate import WINNER_CODE, SeenIds, validate_battles

_LOG = logging.getLogger(__name__)

#: Tables written as Parquet, in the order the report shows them.
TABLES: tuple[str, ...] = ("judges", "order_pairs", "order_models", "family")
AUDIT_JSON = "audit.json"
#: The tables ``audit.json`` also holds as records: the per-judge ones.  The per-(judge, model pair) and
#: per-(judge, model) tables grow with judges × pairs (millions of rows with arena voters as judges), so they
#: are only in their Parquet files (:func:`table_file`), which ``audit.json`` names.
JSON_TABLES: tuple[str, ...] = ("judges", "family")
AUDIT_HTML = "audit_section.html"
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
        return partials | "FinishAudit" >> FinishAudit(self._n_shards)


class FinishAudit(beam.PTransform):
    """PCollection of :class:`AuditPartials` (of batches, or of whole days) → one :class:`AuditResult`.

    Order rows are paired within hash shards of (judge, prompt), so a group
    lands whole in one shard whichever day or batch its rows came from.
    """

    def __init__(self, n_shards: int = DEFAULT_ORDER_SHARDS) -> None:
        super().__init__()
        self._n_shards = n_shards

    def expand(self, partials):
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


def audit_days(
    pipeline: beam.Pipeline,
    days: Mapping[str, list[read.InputFile]],
    out: str,
    family_map: FamilyMap,
    gold_lookup: pl.DataFrame | None = None,
    aliases: AliasMap | None = None,
) -> beam.PCollection:
    """Add the audit to ``pipeline``: read, validate and audit each day (its both orders paired within it),
    sum the days, write the files under ``out``; returns the PCollection of written paths (what a later stage
    waits for)."""
    audited = (
        pipeline
        | "Days" >> beam.Create(sorted(days.items()))
        | "SpreadDays" >> beam.Reshuffle()
        | "AuditDay" >> beam.Map(audit_day, family_map, gold_lookup, aliases)
    )
    return audited | "SumDays" >> SumDays(out)


class SumDays(beam.PTransform):
    """PCollection of (day's paired partials, day's row counts) → the audit files written under ``out``.

    The full audit's sum of days (the incremental one folds its stored days,
    :func:`sum_stored_days`): a day's partials are additive once
    :func:`audit_day` has paired its orders, so the days are summed by one
    global combine (exact whatever the order: every measure is a count or sits on
    a 2⁻²⁰ grid) and finished once.
    """

    def __init__(self, out: str) -> None:
        super().__init__()
        self._out = out

    def expand(self, days):
        counts = days | "DayCounts" >> beam.Map(lambda p: p[1]) | "SumCounts" >> beam.CombineGlobally(_sum_counts)
        return (
            days
            | "DayPartials" >> beam.Map(lambda p: p[0])
            | "SumAll" >> beam.CombineGlobally(MergePartialsFn())
            | "Finish" >> beam.Map(finish_audit)
            | "Write" >> beam.FlatMap(write_audit, self._out, beam.pvalue.AsSingleton(counts))
        )


def build_audit(
    options: PipelineOptions,
    days: Mapping[str, list[read.InputFile]],
    out: str,
    family_map: FamilyMap,
    gold_lookup: pl.DataFrame | None = None,
    aliases: AliasMap | None = None,
) -> beam.Pipeline:
    """The audit graph on its own (``biasboard audit``), built and not run."""
    pipeline = beam.Pipeline(options=options)
    audit_days(pipeline, days, out, family_map, gold_lookup, aliases)
    return pipeline


def run_audit(
    input_glob: str,
    out: str,
    options: PipelineOptions,
    anchors: str | None = None,
    family_map: FamilyMap | str | None = None,
    aliases: AliasMap | None = None,
) -> str:
    """Audit ``input_glob`` and write the files under ``out``; returns audit.json's path.

    What ``biasboard audit`` runs, and what ``biasboard refresh`` runs so that a
    snapshot carries the same audit.
    """
    storage.configure_gcs_auth(no_auth=options.view_as(GoogleCloudOptions).no_auth)
    inputs = audit_inputs(input_glob, out, anchors, family_map)
    run_to_completion(build_audit(options, *inputs, aliases=aliases))
    return storage.join(out, AUDIT_JSON)


def audit_inputs(
    input_glob: str,
    out: str,
    anchors: str | None,
    family_map: FamilyMap | str | None,
) -> tuple[dict[str, list[read.InputFile]], str, FamilyMap, pl.DataFrame | None]:
    """What :func:`audit_days` takes, from the job's options (input problems fail here, before any pipeline)."""
    families = family_map if isinstance(family_map, FamilyMap) else read.load_family_map(family_map)
    days = read.list_input_days(input_glob)
    lookup = load_anchor_lookup(anchors) if anchors else None
    return days, out, families, lookup


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
        pl.col("order_known"),
    )
    return out if out.get_column(GOLD_COLUMN).null_count() < out.height else out.drop(GOLD_COLUMN)


def read_day(
    day_files: tuple[str, list[read.InputFile]],
    family_map: FamilyMap,
    aliases: AliasMap | None = None,
    judge_column: str | None = None,
):
    """One day's files → validated audit frames, plus a ``counts`` output (read / valid / rejected by reason).

    Repeated battle ids are detected across all the day's files, and names are
    trimmed, aliased and pooled by ``judge_column`` (``--judge-pool column:NAME``), as ingest does.
    """
    day, files = day_files
    seen = SeenIds()
    for f, offset, batch in read.day_batches(day, files, carry=AUDIT_CARRY + carry(judge_column)):
        batch = pool_by_column(batch, judge_column)
        checked = validate_battles(
            batch, seen, source_file=f.path, row_offset=offset, carry=AUDIT_CARRY, aliases=aliases
        )
        self_battles = checked.valid.filter(pl.col("model_a") == pl.col("model_b")).height
        counts = IngestCounts(checked.read, checked.valid.height, dict(checked.rejected), self_battles)
        yield beam.pvalue.TaggedOutput("counts", counts)
        if checked.valid.height:
            yield audit_frame(resolve_families(checked.valid, family_map))


def audit_day(
    day_files: tuple[str, list[read.InputFile]],
    family_map: FamilyMap,
    gold_lookup: pl.DataFrame | None = None,
    aliases: AliasMap | None = None,
    judge_column: str | None = None,
) -> tuple[AuditPartials, IngestCounts]:
    """One day's files → the day's audit partials with its both orders paired, and its row counts.

    Pairing within the day makes the result additive over days (a day is
    audited once and kept; memory is bounded by the day).  A prompt judged in
    one order on one day and in the other on another day is two unpaired
    verdicts — as when a partner's verdict is missing.
    """
    parts: list[AuditPartials] = []
    counts = IngestCounts()
    for out in read_day(day_files, family_map, aliases, judge_column):
        if isinstance(out, beam.pvalue.TaggedOutput):
            counts = counts + out.value
        else:
            parts.append(audit_partials(out, gold_lookup))
    return reduce_order_rows(merge_partials(parts)), counts


def _sum_counts(parts) -> IngestCounts:
    """Row accounting of the whole run (``read = counted + rejected``), as the ingest keeps it."""
    return sum(parts, IngestCounts())


def load_anchors(glob: str) -> pl.DataFrame:
    """Trusted verdicts (battle-shaped Parquet), validated by the ingest's rules, as audit rows.

    Every verdict is kept by its id (repeats of a pair are evidence); the refresh's reference reads the
    same files through :func:`biasboard.transforms.anchors.read_anchors`.
    """
    frames = []
    seen = SeenIds()  # one id set over every anchor file: a repeated id is a duplicate, a repeated pair is not
    for day, files in read.list_input_days(glob).items():
        for f, offset, batch in read.day_batches(day, files, carry=AUDIT_CARRY):
            checked = validate_battles(batch, seen, source_file=f.path, row_offset=offset, carry=AUDIT_CARRY)
            if checked.rejected:
                _LOG.warning(
                    "anchors %s: %s rows rejected: %s", f.path, sum(checked.rejected.values()), checked.rejected
                )
            frames.append(audit_frame(checked.valid))
    if not frames:
        raise InputError(f"--anchors: no valid trusted verdicts in {glob}")
    return pl.concat(frames, how="diagonal_relaxed")


def load_anchor_lookup(glob: str) -> pl.DataFrame:
    """Trusted verdicts → the gold lookup (by judge-free prompt and pair) the audit scores judges against."""
    lookup = anchor_gold(load_anchors(glob))
    if lookup.height == 0:
        _LOG.warning("anchors %s: no verdict has a prompt_id to match battles by; no gold-label accuracy", glob)
    return lookup


# --------------------------------------------------------------------------------------------
# Writing: Parquet + JSON + the report fragment
# --------------------------------------------------------------------------------------------


def audit_files(result: AuditResult, counts: IngestCounts | Mapping[str, Any] | None = None) -> dict[str, bytes]:
    """Every audit file by name (a refresh adds these to its snapshot); ``audit.json`` is last."""
    if isinstance(counts, IngestCounts):
        counts = counts.to_dict()
    tables = result.tables()
    files = {table_file(name): publish.table_bytes(frame, "parquet") for name, frame in tables.items()}
    files[AUDIT_HTML] = render_audit_section(result).encode("utf-8")
    json_tables, judge_tables = busiest_judge_rows({name: tables[name] for name in JSON_TABLES})
    document = {
        "counts": dict(counts or {}),
        "tables": {name: records(frame) for name, frame in json_tables.items()},
        "judge_tables": judge_tables,
        "files": {name: table_file(name) for name in tables},
        "conventions": CONVENTIONS,
    }
    files[AUDIT_JSON] = publish.json_bytes(document)
    return files


def busiest_judge_rows(tables: Mapping[str, pl.DataFrame]) -> tuple[dict[str, pl.DataFrame], dict | None]:
    """audit.json's per-judge tables cut to the :data:`~S.SUMMARY_JUDGES_MAX` judges with the most battles.

    The summary's rule, for the same reason: with arena voters as judges (50,000) a row per judge in JSON
    grew with the voters (11 MB at 5,020 judges); every judge's rows stay in the Parquet files.  Returns the
    tables and ``{"total", "kept", "files"}`` (None, and the tables unchanged, below the cap).
    """
    judges = tables["judges"]
    if judges.height <= S.SUMMARY_JUDGES_MAX:
        return dict(tables), None
    kept = judges.sort(["slot_n", "judge"], descending=[True, False]).head(S.SUMMARY_JUDGES_MAX)["judge"]
    cut = {name: frame.filter(pl.col("judge").is_in(kept.implode())) for name, frame in tables.items()}
    files = {name: table_file(name) for name in tables}
    return cut, {"total": judges.height, "kept": kept.len(), "files": files}


def table_file(name: str) -> str:
    """The Parquet file of audit table ``name``."""
    return f"audit_{name}.parquet"


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
# Incremental: each day's additive partials kept in the state, only new or changed days read
# --------------------------------------------------------------------------------------------

#: Per-day audit partials under the state folder: ``STATE/audit_days/day=D/<table>.parquet`` + ``day.json``.
DAY_PARTIALS = "audit_days"
_DAY_DONE = "day.json"


def day_partials_dir(days_dir: str, day: str) -> str:
    return storage.join(days_dir, f"day={day}")


def stored_day_key(days_dir: str, day: str) -> str | None:
    """The key (input digest and audit settings) a stored day's partials were made from; None when absent."""
    path = storage.join(day_partials_dir(days_dir, day), _DAY_DONE)
    return json.loads(storage.read_text(path)).get("key") if storage.exists(path) else None


class AuditDayFn(beam.DoFn):
    """(day, files, key) → that day's audit partials (:func:`audit_day`) and row counts, written to the state.

    ``day.json`` (the counts and the key the day was audited under) is written
    last: a day without it is audited again.
    """

    def __init__(self, days_dir: str, family_map: FamilyMap, gold_lookup: pl.DataFrame | None,
                 aliases: AliasMap | None = None, judge_column: str | None = None):  # fmt: skip
        self.days_dir = days_dir
        self.family_map = family_map
        self.gold_lookup = gold_lookup
        self.aliases = aliases
        self.judge_column = judge_column

    def process(self, task: tuple[str, list[read.InputFile], str]):
        day, files, key = task
        merged, counts = audit_day((day, files), self.family_map, self.gold_lookup, self.aliases, self.judge_column)
        folder = day_partials_dir(self.days_dir, day)
        storage.ensure_dir(folder)
        for f in dataclasses.fields(AuditPartials):
            frame = getattr(merged, f.name)
            storage.atomic_write_bytes(storage.join(folder, f"{f.name}.parquet"), publish.table_bytes(frame, "parquet"))
        done = {"day": day, "key": key, "counts": counts.to_dict()}
        storage.atomic_write_bytes(storage.join(folder, _DAY_DONE), publish.json_bytes(done))
        yield day


def read_day_partials(day: str, days_dir: str) -> tuple[AuditPartials, IngestCounts]:
    """A stored day's partials and row counts (see :class:`AuditDayFn`)."""
    folder = day_partials_dir(days_dir, day)
    frames = {}
    for f in dataclasses.fields(AuditPartials):
        data = storage.read_bytes(storage.join(folder, f"{f.name}.parquet"))
        frames[f.name] = pl.read_parquet(io.BytesIO(data))
    done = json.loads(storage.read_text(storage.join(folder, _DAY_DONE)))
    return AuditPartials(**frames), IngestCounts.from_dict(done["counts"])


def audit_days_incremental(
    pipeline: beam.Pipeline,
    todo: Mapping[str, tuple[list[read.InputFile], str]],
    all_days: list[str],
    days_dir: str,
    out: str,
    family_map: FamilyMap,
    gold_lookup: pl.DataFrame | None = None,
    aliases: AliasMap | None = None,
    judge_column: str | None = None,
) -> beam.PCollection:
    """Add the incremental audit to ``pipeline``: audit the ``todo`` days (day → (files, key)) into
    ``days_dir``, then sum the stored partials of ``all_days`` and write the audit files under ``out``.

    The result equals a full audit of every day (:func:`audit_days`): both
    audit each day by :func:`audit_day` and sum the days.  Returns the written
    paths (what a later stage waits for).
    """
    tasks = [(day, files, key) for day, (files, key) in sorted(todo.items())]
    audited = (
        pipeline
        | "AuditDays" >> beam.Create(tasks)
        | "SpreadAuditDays" >> beam.Reshuffle()
        | "AuditDay" >> beam.ParDo(AuditDayFn(days_dir, family_map, gold_lookup, aliases, judge_column))
    )
    return (
        audited
        | "AllDaysAudited" >> beam.combiners.Count.Globally()
        | "SumStoredDays" >> beam.FlatMap(lambda _, days: write_stored_sum(days, days_dir, out), sorted(all_days))
    )


#: Stored days read before they are folded into the running sum (amortises polars calls; bounds memory).
SUM_DAYS_CHUNK = 16


def sum_stored_days(days: Sequence[str], days_dir: str) -> tuple[AuditPartials, IngestCounts]:
    """The stored days' partials and row counts, summed: read a chunk of days at a time, fold it in.

    Why not a Beam combine: with voter-judges the summed ``order_pairs`` hold about
    one row per (voter, model pair) — the size of the cells — and a combine moves
    every day's partials and the accumulators through the runner as pickled
    frames, which a local runner keeps in memory while the fit runs
    (bench/scale.py: ~1 GB of the refresh's peak at 1M cells).  Here memory is
    the running sum plus :data:`SUM_DAYS_CHUNK` days, freed before the fit; the
    sum is exact whatever the grouping (every measure is a count or sits on a
    2⁻²⁰ grid), so it equals the combine's.
    """
    total, counts, pending = AuditPartials(), IngestCounts(), []
    for day in days:
        partials, day_counts = read_day_partials(day, days_dir)
        pending.append(partials)
        counts = counts + day_counts
        if len(pending) >= SUM_DAYS_CHUNK:
            total, pending = merge_partials([total, *pending]), []
    return merge_partials([total, *pending]), counts


def write_stored_sum(days: Sequence[str], days_dir: str, out: str) -> list[str]:
    """Sum the stored days (:func:`sum_stored_days`), finish the audit and write its files under ``out``."""
    partials, counts = sum_stored_days(days, days_dir)
    result = finish_audit(partials)
    del partials
    return write_audit(result, out, counts)
