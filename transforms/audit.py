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
   than battles — and *cluster rows*, the length and family counts of the same
   groups, for the clustered standard errors);
2. the compact order and cluster rows are keyed by a hash shard of the prompt
   (every judge's rows of a prompt together: the pooled per-model SE clusters by
   prompt across judges), so every (judge, prompt) group, and every prompt, lands
   whole in one shard, summed there, and reduced by
   :func:`~biasboard.audit.reduce_order_rows` to additive per-(judge,
   model pair) counts and per-judge sums over clusters;
3. everything else is per-judge counts; all of it is summed by one global
   combine and finished by :func:`~biasboard.audit.finish_audit`.

The transforms only move tables; every number comes from the audit package
(:mod:`biasboard.audit`), the same functions the tests call.

:func:`build_audit` is the whole graph ``biasboard audit`` runs (and
:func:`audit_days_incremental` the one ``biasboard refresh`` runs; the former is
the latter with every day to do): each day's files are read with the shared day
reader (:func:`~biasboard.transforms.read.day_batches`), validated with the
ingest's rules (rejected rows counted by reason), audited and paired within the
day, its partials stored, the stored days summed by a fold outside the runner
(:func:`sum_stored_days`) and written under one folder (:func:`write_audit`: one
Parquet per table, the report fragment, and ``audit.json`` last).  The refresh
keeps the sum too (:mod:`~biasboard.transforms.audit_cache`), so a +1 day refresh
sums the cached sum and the new day, not the history.
"""

from __future__ import annotations

import dataclasses
import io
import itertools
import json
import logging
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import apache_beam as beam
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.metrics.metric import Metrics
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
    records,
    reduce_order_rows,
)
from biasboard.audit.measures import (
    HISTORY_CLOSURE_MAX_KEYS,
    KEYED_PARTIALS,
    PAIR_KEYS,
    ClusterRecurrence,
    close_over_history,
    closes_over_history,
    drop_keyed_sums,
    finish_with_pairs,
    judge_order_sums,
    merge_sketches,
    order_models_table,
    order_pairs_table,
    with_history_units,
    without_keyed_sums,
)
from biasboard.ranking.allocator import release_freed_memory
from biasboard.ranking.data import CodedFold
from biasboard.ranking.spill import BucketedFold, bucket_bounds, judge_cuts, scratch_folder
from biasboard.report.audit import render_audit_section
from biasboard.schemas import summary as S
from biasboard.schemas.battle import WINNER_VALUES
from biasboard.schemas.errors import InputError, StateError
from biasboard.schemas.families import FamilyMap
from biasboard.schemas.names import AliasMap
from biasboard.schemas.wording import first_few
from biasboard.transforms import audit_cache, publish, read, state, storage
from biasboard.transforms.anchors import unmatched_aliases
from biasboard.transforms.cells import IngestCounts
from biasboard.transforms.covariates import resolve_families
from biasboard.transforms.ingest import ALIASED
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
#: Beam counters of the audit's wall time in milliseconds: ``days_ms`` (auditing the days to do, summed over
#: days) and ``sum_ms`` (summing the stored days and writing the files); the refresh reports them as stages.
METRICS_NAMESPACE = "biasboard.audit"
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


#: The partials that wait for whole (judge, prompt) groups: sharded by prompt (every judge's rows of a prompt in one
#: shard, as the pooled per-model SE's prompt clusters need; :func:`~biasboard.audit.order_shard`), reduced per shard.
_GROUPED = ("order_rows", "cluster_rows")


def _shard_order_rows(partials: AuditPartials, n_shards: int):
    """(shard, partial holding only that shard's compact order and cluster rows) for each non-empty shard."""
    shards: dict[int, dict[str, pl.DataFrame]] = {}
    for name in _GROUPED:
        rows = getattr(partials, name)
        if rows.height == 0:
            continue
        keyed = rows.with_columns(order_shard(rows, n_shards))
        for (shard,), part in keyed.partition_by("shard", as_dict=True, include_key=False).items():
            shards.setdefault(int(shard), {})[name] = part
    for shard, parts in sorted(shards.items()):
        yield shard, AuditPartials(**parts)


def _reduce_shard(keyed: tuple[int, AuditPartials]) -> AuditPartials:
    """A shard's complete order rows → additive per-pair stats; its complete cluster rows → clustered squares."""
    _, partials = keyed
    return reduce_order_rows(partials, whole_slice=False)  # the shards of one slice: counted once, not per shard


def _without_order_rows(partials: AuditPartials) -> AuditPartials:
    empty = AuditPartials()
    return dataclasses.replace(partials, **{name: getattr(empty, name) for name in _GROUPED})


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

    Order rows are paired within hash shards of the prompt, so a (judge, prompt)
    group — and a prompt across judges, the pooled per-model SE's cluster — lands
    whole in one shard whichever day or batch its rows came from.
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
    anchors: str | None = None,
) -> beam.PCollection:
    """Add the audit to ``pipeline``: read, validate and audit each day (its both orders paired within it),
    sum the days, write the files under ``out``; returns the PCollection of written paths (what a later stage
    waits for).  ``audit.json`` gets the note on ``aliases`` entries that renamed no counted row nor name a rater
    or model of the ``anchors`` files (:func:`~biasboard.transforms.anchors.unmatched_aliases`), as refresh prints.

    The refresh's incremental audit (:func:`audit_days_incremental`) with every day to do and the days'
    partials kept in a scratch folder under ``out`` (:data:`SCRATCH_DAYS`, removed once the files are
    written): the days are summed by the same fold outside the runner (:func:`sum_stored_days`) instead
    of a Beam combine, which held every day's partials — about one row per cell with voter-judges.
    """
    todo = {day: (files, "") for day, files in days.items()}
    scratch = storage.join(out, SCRATCH_DAYS)
    return audit_days_incremental(
        pipeline,
        todo,
        sorted(days),
        scratch,
        out,
        family_map,
        gold_lookup,
        aliases,
        scratch=True,
        note_aliases=(aliases, anchors) if aliases is not None else None,
    )


#: Where ``biasboard audit`` keeps each day's partials until the days are summed (under its output folder).
SCRATCH_DAYS = ".audit_days"


def build_audit(
    options: PipelineOptions,
    days: Mapping[str, list[read.InputFile]],
    out: str,
    family_map: FamilyMap,
    gold_lookup: pl.DataFrame | None = None,
    aliases: AliasMap | None = None,
    anchors: str | None = None,
) -> beam.Pipeline:
    """The audit graph on its own (``biasboard audit``), built and not run."""
    pipeline = beam.Pipeline(options=options)
    audit_days(pipeline, days, out, family_map, gold_lookup, aliases, anchors)
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

    What ``biasboard audit`` runs (``biasboard refresh`` runs :func:`audit_days_incremental` in its own pipeline).
    ``out``'s ``audit.json`` is removed before any audit file is written, and written last, so an ``audit.json``
    always describes complete files beside it: a rerun into the same folder that stopped midway left the previous
    run's ``audit.json`` beside some of this run's tables.  Storage lost midway says so in one line
    (:data:`LEFT_BEFORE_WRITING`, :func:`left_writing`).
    """
    storage.configure_gcs(no_auth=options.view_as(GoogleCloudOptions).no_auth)
    with storage.if_unreachable(LEFT_BEFORE_WRITING):
        inputs = audit_inputs(input_glob, out, anchors, family_map, aliases)
    marker = storage.join(out, AUDIT_JSON)
    with storage.if_unreachable(left_writing(out)):
        storage.delete([marker])
        run_to_completion(build_audit(options, *inputs, aliases=aliases, anchors=anchors))
        _add_import_rejections(marker, read.import_rejections([("--input", input_glob)]))
    return marker


def _add_import_rejections(marker: str, rejections: Sequence[S.ImportRejections]) -> None:
    """``audit.json`` at ``marker`` with what the import behind ``--input`` rejected: its ``import_rejected`` and a
    note each.  Why: an import's folder is read without its dead letters, so the audit's counts start after the
    import and its notes said nothing of the rows that never became battles (the refresh's summary said it); written
    again, atomically, after the tables it describes (still last).  An import that rejected nothing is listed (0,
    as the refresh's summary lists it) without a note: a note is a warning, and there is nothing to warn of."""
    if not rejections:
        return
    notes = []
    for rejected in (r for r in rejections if r.rejected_total):
        reasons = ", ".join(f"{reason} {n:,}" for reason, n in sorted(rejected.rejected.items()))
        notes.append(
            f"the import behind {rejected.option} rejected {rejected.rejected_total:,} row(s) of its source before "
            f"they became battles ({reasons}; see {rejected.path}): not audited"
        )
    _amend_audit(marker, notes, import_rejected=S.to_jsonable(list(rejections)))


def _amend_audit(marker: str, notes: Sequence[str], **fields: object) -> None:
    """``audit.json`` at ``marker`` written again, atomically, with ``notes`` added and ``fields`` set: what only the
    job that wrote it knows, after the tables it describes (so still last)."""
    document = json.loads(storage.read_text(marker))
    document.update(fields)
    document["notes"].extend(notes)
    storage.atomic_write_bytes(marker, publish.json_bytes(document))


def _add_left_out_days(marker: str, days: Sequence[str]) -> None:
    """``audit.json`` at ``marker`` with a note naming the ``days`` it could not audit: kept in the fit without input
    files and with no audit partials stored under the current settings (aggregated with ``--no-audit``).  Why: the
    board counts their battles and the audit does not, and only the run that found them logged it; the note stays
    with the audit (which is redone when the kept days change)."""
    if not days:
        return
    note = (
        f"{len(days)} day(s) the board keeps without input have no audit partials stored under these settings "
        f"(aggregated with --no-audit): not audited, so this audit counts fewer battles than the board "
        f"({', '.join(sorted(days))})"
    )
    _amend_audit(marker, [note])


def _add_unmatched_gold(out: str) -> None:
    """``audit.json`` under ``out`` with a note when ``--anchors`` were given and no battle has a gold label.

    Why: anchors are matched to battles by ``prompt_id`` and model pair; anchors without a ``prompt_id``, on other
    prompts or other models left every gold column null and the notes silent, an audit that read as if no anchors
    had been given.  Read from the judges' Parquet file, which holds every judge (``audit.json`` may hold a few)."""
    judges = pl.read_parquet(io.BytesIO(storage.read_bytes(storage.join(out, table_file("judges")))))
    if "gold_n_labeled" in judges.columns and judges.get_column("gold_n_labeled").fill_null(0).sum() > 0:
        return
    note = (
        "no battle matches a trusted verdict of --anchors (matched by prompt_id and model pair; an anchor without "
        "a prompt_id matches none): gold-label accuracy is not measured"
    )
    _amend_audit(storage.join(out, AUDIT_JSON), [note])


def _add_unmatched_aliases(
    marker: str, days: Sequence[str], days_dir: str, aliases: AliasMap, anchors: str | None
) -> None:
    """``audit.json`` at ``marker`` with the note on ``--aliases`` entries that renamed no counted row of ``days``
    (their stored ``day.json`` lists the entries that did) nor name a rater or model of ``anchors``.  Why:
    ``biasboard audit --aliases`` said nothing of a map whose entries matched nothing, where refresh names them (the
    same note, :func:`~biasboard.transforms.anchors.unmatched_aliases`)."""
    stored = [json.loads(storage.read_text(storage.join(day_partials_dir(days_dir, day), _DAY_DONE))) for day in days]
    note = unmatched_aliases(aliases, stored, anchors)
    if note:
        _amend_audit(marker, [note])


#: What an audit that lost its storage before writing leaves (:func:`storage.if_unreachable`): it only read.
LEFT_BEFORE_WRITING = "no audit file was written (an audit.json there is the previous audit's, with its files)"


def left_writing(out: str) -> str:
    """What an audit that lost its storage while writing under ``out`` leaves (:func:`run_audit`)."""
    return (
        f"{storage.join(out, AUDIT_JSON)} is removed before the audit files are written and written after them: "
        f"without it the files there are partial; rerun (a complete audit also removes the scratch {SCRATCH_DAYS}/)"
    )


def audit_inputs(
    input_glob: str,
    out: str,
    anchors: str | None,
    family_map: FamilyMap | str | None,
    aliases: AliasMap | None = None,
    beside: str | None = None,
) -> tuple[dict[str, list[read.InputFile]], str, FamilyMap, pl.DataFrame | None]:
    """What :func:`audit_days` takes, from the job's options (input problems fail here, before any pipeline).

    ``aliases`` rename the anchors' names as they rename the battles' (:func:`load_anchors`); ``beside``: the
    refresh's ``--scores``, whose grades are not battles to audit
    (:func:`~biasboard.transforms.read.without_nested`)."""
    families = family_map if isinstance(family_map, FamilyMap) else read.load_family_map(family_map)
    days = read.list_input_days(input_glob, beside=beside)
    lookup = load_anchor_lookup(anchors, aliases) if anchors else None
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
            batch, seen, source_file=f.path, row_offset=offset, carry=AUDIT_CARRY, aliases=aliases, day=day
        )
        self_battles = checked.valid.filter(pl.col("model_a") == pl.col("model_b")).height
        # counted as the ingest counts them (trimmed and renamed names, rows dated outside their day included), so
        # audit.json's counts say what the day manifests and the summary say
        yield beam.pvalue.TaggedOutput("counts", IngestCounts.validated(checked, checked.valid.height, self_battles))
        if checked.valid.height:
            yield audit_frame(resolve_families(checked.valid, family_map))


def audit_day(
    day_files: tuple[str, list[read.InputFile]],
    family_map: FamilyMap,
    gold_lookup: pl.DataFrame | None = None,
    aliases: AliasMap | None = None,
    judge_column: str | None = None,
    history: pl.DataFrame | None = None,
) -> tuple[AuditPartials, IngestCounts]:
    """One day's files → the day's audit partials with its both orders paired, and its row counts.

    Pairing within the day makes the result additive over days (a day is
    audited once and kept; memory is bounded by the day).  A prompt judged in
    one order on one day and in the other on another day is two unpaired
    verdicts — as when a partner's verdict is missing.  The day keeps its clusters' sums by key for the history
    closure unless it, with the ``history`` of the days stored beside it (their keys' sketch,
    :func:`stored_history_sketch`), has too many keys for it (:func:`~biasboard.audit.measures.drop_keyed_sums`).
    """
    parts: list[AuditPartials] = []
    counts = IngestCounts()
    for out in read_day(day_files, family_map, aliases, judge_column):
        if isinstance(out, beam.pvalue.TaggedOutput):
            counts = counts + out.value
        else:
            parts.append(audit_partials(out, gold_lookup))
    return drop_keyed_sums(reduce_order_rows(merge_partials(parts)), history), counts


def load_anchors(glob: str, aliases: AliasMap | None = None) -> pl.DataFrame:
    """Trusted verdicts (battle-shaped Parquet), validated by the ingest's rules, as audit rows.

    Every verdict is kept by its id (repeats of a pair are evidence); the refresh's reference reads the
    same files through :func:`biasboard.transforms.anchors.read_anchors`.  ``aliases`` (``--aliases``) rename
    their model names as they rename the battles': the gold lookup matches battles by model name, and with the
    battles renamed and the anchors not, no battle of a renamed model found its gold label (gold accuracy null,
    without a word).
    """
    frames = []
    seen = SeenIds()  # one id set over every anchor file: a repeated id is a duplicate, a repeated pair is not
    for day, files in read.list_input_days(glob, flag="--anchors").items():
        for f, offset, batch in read.day_batches(day, files, carry=AUDIT_CARRY):
            checked = validate_battles(
                batch, seen, source_file=f.path, row_offset=offset, carry=AUDIT_CARRY, aliases=aliases
            )
            if checked.rejected:
                _LOG.warning(
                    "anchors %s: %s rows rejected: %s", f.path, sum(checked.rejected.values()), checked.rejected
                )
            frames.append(audit_frame(checked.valid))
    if not frames:
        raise InputError(f"--anchors: no valid trusted verdicts in {glob}")
    return pl.concat(frames, how="diagonal_relaxed")


def load_anchor_lookup(glob: str, aliases: AliasMap | None = None) -> pl.DataFrame:
    """Trusted verdicts → the gold lookup (by judge-free prompt and pair) the audit scores judges against."""
    lookup = anchor_gold(load_anchors(glob, aliases))
    if lookup.height == 0:
        _LOG.warning("anchors %s: no verdict has a prompt_id to match battles by; no gold-label accuracy", glob)
    return lookup


# --------------------------------------------------------------------------------------------
# Writing: Parquet + JSON + the report fragment
# --------------------------------------------------------------------------------------------


def audit_files(
    result: AuditResult,
    counts: IngestCounts | Mapping[str, Any] | None = None,
    parquet: Mapping[str, bytes] | None = None,
) -> dict[str, bytes]:
    """Every audit file by name (a refresh adds these to its snapshot); ``audit.json`` is last.

    ``parquet``: tables' files already written (by name), in place of ``result``'s tables of those names.
    """
    if isinstance(counts, IngestCounts):
        counts = counts.to_dict()
    tables = result.tables()
    parquet = parquet or {}
    files = {
        table_file(name): parquet.get(table_file(name)) or publish.table_bytes(frame, "parquet")
        for name, frame in tables.items()
    }
    files[AUDIT_HTML] = render_audit_section(result).encode("utf-8")
    json_tables, judge_tables = busiest_judge_rows({name: tables[name] for name in JSON_TABLES})
    document = {
        "counts": dict(counts or {}),
        "tables": {name: records(frame) for name, frame in json_tables.items()},
        "judge_tables": judge_tables,
        "files": {name: table_file(name) for name in tables},
        "conventions": CONVENTIONS,
        "clusters": result.clusters.to_json(),
        "notes": audit_notes(result.judges, counts or {}, result.clusters, result.family),
    }
    files[AUDIT_JSON] = publish.json_bytes(document)
    return files


def audit_notes(
    judges: pl.DataFrame,
    counts: Mapping[str, Any],
    clusters: ClusterRecurrence | None = None,
    family: pl.DataFrame | None = None,
) -> list[str]:
    """What the audit could not measure, and why, in plain words (``audit.json``'s ``notes``; the CLI prints them).

    Why: an input whose every row was rejected, or whose battles carry no ``prompt_id``, gave an audit
    with empty or dashed columns and exit code 0, and nothing said which of the input's properties made them
    empty.  And what its SEs do not cover: clusters that recur across days (:meth:`ClusterRecurrence.note`).
    """
    notes = _row_notes(counts)
    if judges.height:
        notes += _order_notes(judges)
        notes += _length_notes(judges)
        if family is not None:
            notes += _family_notes(family)
    recurring = clusters.note() if clusters is not None else None
    if recurring:
        notes.append(recurring)
    return notes


def _row_notes(counts: Mapping[str, Any]) -> list[str]:
    read, counted = int(counts.get("read") or 0), int(counts.get("counted") or 0)
    rejected = counts.get("rejected") or {}
    reasons = ", ".join(f"{reason} {n:,}" for reason, n in sorted(rejected.items()))
    if read == 0:
        return ["no battle rows were read (the input files hold no rows): nothing to audit"]
    if counted == 0:
        return [f"none of the {read:,} rows read is a valid battle ({reasons}): nothing to audit"]
    if rejected:
        return [f"{read - counted:,} of the {read:,} rows read were rejected and not audited ({reasons})"]
    return []


def _length_notes(judges: pl.DataFrame) -> list[str]:
    """Why the length measures are missing, if they are: no battle between two models has both lengths."""
    if "len_n" in judges.columns and judges.get_column("len_n").fill_null(0).sum() > 0:
        return []
    return [
        "no battle between two different models has both lengths (len_a and len_b): the length measures (longer-wins "
        "rate, chosen vs rejected length, agreement with pick-the-longer) are not measured"
    ]


def _family_notes(family: pl.DataFrame) -> list[str]:
    """Why no judge's self-preference is measured, if none is: it needs a judge's verdicts on models of its own
    family and verdicts on that family by judges of another family (a single judge, or judges all of one family,
    have none to compare with)."""
    if family.height and family.get_column("self_preference").is_not_null().any():
        return []
    return [
        "no judge judged models of its own family with judges of another family judging that family too: "
        "self-preference is not measured (families: the --family-map rules, then the built-in ones)"
    ]


def _order_notes(judges: pl.DataFrame) -> list[str]:
    """Why the order measures are missing, if they are.  The first/second split needs only battles of known shown
    order between two models (``slot_n``): none has one in AlpacaEval 1's files, of which the note had said the
    split was measured."""
    pairs = judges.get_column("order_pairs").fill_null(0.0)
    split = (
        "the first/second split is"
        if "slot_n" in judges.columns and judges.get_column("slot_n").fill_null(0).sum() > 0
        else "nor is the first/second split: no battle's shown order is known"
    )
    if pairs.sum() > 0:
        unpaired = judges.filter(pairs == 0).get_column("judge").to_list()
        if not unpaired:
            return []
        shown = first_few(unpaired, 10)
        return [
            f"no pair judged in both orders for {len(unpaired):,} judge(s) ({shown}): their flip rates are not measured"
        ]
    if judges.get_column("pba_judgments").fill_null(0.0).sum() == 0:
        return [
            "no battle between two different models has a prompt_id (and a known shown order), so none can be "
            f"paired with its swapped-order partner: flip rates and order consistency are not measured ({split})"
        ]
    return [
        "no judge saw the same prompt and model pair in both orders on the same day: flip rates and order "
        f"consistency are not measured ({split}; a swapped partner on another day is not paired)"
    ]


def busiest_judge_rows(tables: Mapping[str, pl.DataFrame]) -> tuple[dict[str, pl.DataFrame], dict | None]:
    """audit.json's per-judge tables cut to the :data:`~S.SUMMARY_JUDGES_MAX` judges with the most battles.

    The summary's rule, for the same reason: with arena voters as judges (50,000) a row per judge in JSON
    grew with the voters (11 MB at 5,020 judges); every judge's rows stay in the Parquet files.  Returns the
    tables and ``{"total", "kept", "files"}`` (None, and the tables unchanged, below the cap).
    """
    judges = tables["judges"]
    kept = busiest_judge_names(judges, "slot_n")
    if kept is None:
        return dict(tables), None
    cut = {name: frame.filter(pl.col("judge").is_in(kept.implode())) for name, frame in tables.items()}
    files = {name: table_file(name) for name in tables}
    return cut, {"total": judges.height, "kept": kept.len(), "files": files}


def busiest_judge_names(judges: pl.DataFrame, count: str) -> pl.Series | None:
    """The ``judge`` column of the :data:`~S.SUMMARY_JUDGES_MAX` rows of ``judges`` with the most ``count``, names
    breaking ties (a judge's rows in their order); None when there are no more rows than that.  The rule of
    audit.json's cut (``slot_n``) and of summary.json's (the cells' ``n``, ``transforms.snapshot``)."""
    if judges.height <= S.SUMMARY_JUDGES_MAX:
        return None
    busiest = judges.sort([count, "judge"], descending=[True, False], maintain_order=True)
    return busiest.head(S.SUMMARY_JUDGES_MAX).get_column("judge")


def table_file(name: str) -> str:
    """The Parquet file of audit table ``name``."""
    return f"audit_{name}.parquet"


def write_audit(
    result: AuditResult,
    out: str,
    counts: IngestCounts | Mapping[str, Any] | None = None,
    parquet: Mapping[str, bytes] | None = None,
) -> list[str]:
    """Write the audit files under ``out``, each atomically, ``audit.json`` last (``parquet``: :func:`audit_files`)."""
    storage.ensure_dir(out)
    written = []
    publish.failpoint("audit-summed")
    for name, data in audit_files(result, counts, parquet).items():
        path = storage.join(out, name)
        storage.atomic_write_bytes(path, data)
        written.append(path)
    return written


#: Plain-words definitions written beside the numbers.
CONVENTIONS: dict[str, str] = {
    "order_pairs": "prompt-pairs judged in both orders by the same judge (same prompt_id, the two models swapped)",
    "order_flip_rate": "share of those pairs whose two verdicts disagree (ties are a verdict class of their own); "
    "SE (order_flip_rate_se) cluster-robust, one cluster = the judge's pairs judged in both orders on one prompt_id "
    "(a position-biased judge's flips on one prompt are correlated across its pairs; see clusters for the days); "
    "per pair of models (audit_order_pairs) the unit is the prompt-pair",
    "order_prefers_first_rate": "share of pairs where the first-shown answer won in both orders",
    "pba_consistency_rate": "Position-Bias-Analyzer convention: consistent verdicts over all verdicts with a "
    "prompt_id, where a verdict whose swapped partner is absent counts as consistent; null when no pair was "
    "judged in both orders (every verdict would count as consistent)",
    "consistent_win_rate": "win rate (tie = half) among order-consistent pairs; SE cluster-robust, one cluster = "
    "the judge's consistent pairs of the model on one prompt_id (every opponent it met there); pooled "
    "over judges (the summary's order_models) one cluster = every judge's consistent pairs of the model on one "
    "prompt_id, as the judges of a prompt judge the same answers; per pair of models "
    "(consistent_win_rate_x_se) the unit is the prompt-pair; a prompt-pair judged more than once in one order "
    "weighs its consistent share",
    "identical": "self-battles (model_a == model_b) are taken as identical answers",
    "len_agreement_pick_longer": "share of battles with different lengths where the judge picked the longer answer",
    "gold_accuracy": "on the discriminative subset (the label names a winner); a judge tie scores 1/2; SE "
    "(gold_accuracy_se) cluster-robust: a gold case judged in both orders is one cluster, not two cases",
    "family": "cross-family battles only; other judges = judges of other families",
    "se": "every *_se is one standard error (the ± of the report). len_longer_win_rate_se, self_preference_se, "
    "gold_accuracy_se, order_flip_rate_se and consistent_win_rate_se are cluster-robust, one cluster = one "
    "judge's verdicts on one prompt_id (both orders, repeats, every model pair; a battle without a "
    "prompt_id is a cluster of its own); the consistent win rate pooled over judges (the summary's) clusters by "
    "prompt_id across judges; the per-pair-of-models SEs of audit_order_pairs (flip_rate_se, "
    "consistent_win_rate_x_se) take the prompt-pair as the unit, the cluster restricted to that pair. Each "
    "variance carries the CR1 small-sample factor G/(G - 1), G = the clusters with a case (Stata's and "
    "statsmodels' default); with one cluster the SE is null",
    "clusters": "clusters.closed_over says where the clusters were closed: 'history' = over every day audited "
    f"(a prompt_id judged on several days is one cluster), while the days hold fewer than "
    f"{HISTORY_CLOSURE_MAX_KEYS:,} distinct (judge, prompt_id) keys; 'day' = within each day, past that bound "
    "(an arena's unique prompts), so verdicts on one prompt_id on several days are counted as independent "
    "clusters; clusters.day_keys sums each day's distinct (judge, prompt_id) keys, "
    "clusters.distinct_keys estimates their union (a HyperLogLog sketch, about 1.6% error) and "
    "clusters.recurring_share = 1 - distinct_keys/day_keys is the share of day-clusters repeating a key of another "
    "day (0 with one day); closed within a day, from 5% a note says the SEs are too small if verdicts on a prompt "
    "correlate across days",
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
                 aliases: AliasMap | None = None, judge_column: str | None = None,
                 history: pl.DataFrame | None = None):  # fmt: skip
        self.days_dir = days_dir
        self.history = history
        self.family_map = family_map
        self.gold_lookup = gold_lookup
        self.aliases = aliases
        self.judge_column = judge_column

    def process(self, task: tuple[str, list[read.InputFile], str]):
        day, files, key = task
        started = time.perf_counter()
        merged, counts = audit_day(
            (day, files), self.family_map, self.gold_lookup, self.aliases, self.judge_column, self.history
        )
        folder = day_partials_dir(self.days_dir, day)
        storage.ensure_dir(folder)
        for f in dataclasses.fields(AuditPartials):
            frame = getattr(merged, f.name)
            storage.atomic_write_bytes(storage.join(folder, f"{f.name}.parquet"), publish.table_bytes(frame, "parquet"))
        done = {"day": day, "key": key, "counts": counts.to_dict()}
        if counts.aliased:  # as a day manifest keeps them: which --aliases entries matched (aliases_matched)
            done[ALIASED] = sorted(counts.aliased)
        storage.atomic_write_bytes(storage.join(folder, _DAY_DONE), publish.json_bytes(done))
        Metrics.counter(METRICS_NAMESPACE, "days_ms").inc(round(1000 * (time.perf_counter() - started)))
        yield day


def _day_partial_path(days_dir: str, day: str, name: str) -> str:
    return storage.join(day_partials_dir(days_dir, day), f"{name}.parquet")


def read_day_partials(day: str, days_dir: str, keyed: bool = True) -> tuple[AuditPartials, IngestCounts]:
    """A stored day's partials and row counts (see :class:`AuditDayFn`); a file that cannot be read is a
    :class:`StateError` naming it (the stored days are the truth: nothing to fall back to).  ``keyed`` false:
    without the clusters' keyed sums (not read: a sum closed within each day has no use for them)."""
    frames = {}
    path = storage.join(day_partials_dir(days_dir, day), _DAY_DONE)
    try:
        for f in dataclasses.fields(AuditPartials):
            if not keyed and f.name in KEYED_PARTIALS:
                continue
            path = _day_partial_path(days_dir, day, f.name)
            frames[f.name] = pl.read_parquet(io.BytesIO(storage.read_bytes(path)))
        path = storage.join(day_partials_dir(days_dir, day), _DAY_DONE)
        counts = IngestCounts.from_dict(json.loads(storage.read_text(path))["counts"])
    except Exception as err:
        raise StateError(f"{path}: unreadable audit partials: {state.failure_reason(err)}") from err
    return AuditPartials(**frames), counts


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
    scratch: bool = False,
    keys: Mapping[str, str] | None = None,
    left_out: Sequence[str] = (),
    note_aliases: tuple[AliasMap, str | None] | None = None,
) -> beam.PCollection:
    """Add the incremental audit to ``pipeline``: audit the ``todo`` days (day → (files, key)) into
    ``days_dir``, then sum the stored partials of ``all_days`` and write the audit files under ``out``
    (``scratch``: then delete ``days_dir``).  ``keys``: every day's key (of ``all_days``), for the summed
    days' cache (:mod:`~biasboard.transforms.audit_cache`): the refresh's; None, no cache.  ``left_out``: days
    the board has that the audit cannot read (kept without input, never audited), named in a note of
    ``audit.json`` (:func:`_add_left_out_days`).  Given a ``gold_lookup`` that labels no battle, a note says so
    (:func:`_add_unmatched_gold`).  ``note_aliases``: the ``--aliases`` map and the ``--anchors`` glob whose
    unmatched entries a note of ``audit.json`` names (:func:`_add_unmatched_aliases`: ``biasboard audit``'s; a
    refresh logs its own from the day manifests).

    The result equals a full audit of every day (:func:`audit_days`): both
    audit each day by :func:`audit_day` and sum the days.  Returns the written
    paths (what a later stage waits for).
    """
    tasks = [(day, files, key) for day, (files, key) in sorted(todo.items())]
    history = stored_history_sketch(days_dir, [day for day in all_days if day not in todo])
    audited = (
        pipeline
        | "AuditDays" >> beam.Create(tasks)
        | "SpreadAuditDays" >> beam.Reshuffle()
        | "AuditDay" >> beam.ParDo(AuditDayFn(days_dir, family_map, gold_lookup, aliases, judge_column, history))
    )
    return (
        audited
        | "AllDaysAudited" >> beam.combiners.Count.Globally()
        | "SumStoredDays"
        >> beam.FlatMap(
            _sum_and_write,
            sorted(all_days),
            days_dir,
            out,
            scratch,
            keys,
            left_out,
            gold_lookup is not None,
            note_aliases,
        )
    )


def stored_history_sketch(days_dir: str, days: Sequence[str]) -> pl.DataFrame | None:
    """The (judge, prompt) keys' sketch of the stored ``days`` the new days will be summed with, for
    :func:`~biasboard.audit.measures.drop_keyed_sums`: the summed-days cache's when there is one (one read),
    else the days' own, read until they pass ``HISTORY_CLOSURE_MAX_KEYS`` (an arena's, after a few days).
    A guess that may only drop keyed sums too early, never keep too few: a day stored without them is counted
    ``unkeyed`` and its sums closed within each day."""
    cached = audit_cache.cached_recurrence(days_dir)
    if cached is not None:
        return cached
    sketches: list[pl.DataFrame] = []
    for day in days:
        path = _day_partial_path(days_dir, day, "recurrence")
        if storage.exists(path):
            sketches.append(pl.read_parquet(io.BytesIO(storage.read_bytes(path))))
            if not closes_over_history(merge_sketches(sketches)):
                break
    return merge_sketches(sketches) if sketches else None


def _sum_and_write(
    _: int,
    days: list[str],
    days_dir: str,
    out: str,
    scratch: bool,
    keys: Mapping[str, str] | None,
    left_out: Sequence[str] = (),
    gold_expected: bool = False,
    note_aliases: tuple[AliasMap, str | None] | None = None,
) -> list[str]:
    started = time.perf_counter()
    written = write_stored_sum(days, days_dir, out, keys)
    _add_left_out_days(storage.join(out, AUDIT_JSON), left_out)
    if gold_expected:
        _add_unmatched_gold(out)
    if note_aliases is not None:
        _add_unmatched_aliases(storage.join(out, AUDIT_JSON), days, days_dir, *note_aliases)
    if scratch:
        storage.delete_tree(days_dir)
    Metrics.counter(METRICS_NAMESPACE, "sum_ms").inc(round(1000 * (time.perf_counter() - started)))
    return written


#: Stored days read before their per-judge partials are merged into the running sum (amortises polars calls).  Not
#: more: with voter-judges a day's per-judge partials are not small (bench/scale.py: 46k family rows a day, 300k in
#: the sum), and 16 days held and merged at once took +370 MB for a moment, the refresh's peak at its full 2N; 4
#: days take +150 MB, and ~0.3 s a merge against ~0.6 s.
SUM_DAYS_CHUNK = 4
#: Order-pair rows coded before they are folded into the running sum (or a quarter of the sum, if more).
FOLD_ORDER_ROWS = 1 << 18
#: Order-pair rows finished at a time (cut at a judge's end): the rates, the per-model table, the Parquet row group.
FINISH_ROWS = 1 << 17
_ORDER_PAIRS_SCHEMA = audit_cache.ORDER_PAIRS_SCHEMA


def _order_pairs_fold(names: list[str], rows: np.ndarray) -> CodedFold:
    """The fold that sums the order pairs: in memory when they fit in one judge bucket
    (:func:`~biasboard.transforms.state.bucket_rows_for` rows), else by judge bucket on disk
    (:class:`~biasboard.ranking.spill.BucketedFold`, bounds from each judge's input ``rows``)."""
    fold = CodedFold(_ORDER_PAIRS_SCHEMA, PAIR_KEYS, [("judge",), ("model_x", "model_y")])
    bounds = bucket_bounds(names, rows, state.bucket_rows_for(fold))
    if not bounds:
        return fold
    scratch = scratch_folder()
    bucketed = BucketedFold(fold, "judge", bounds, scratch.name)
    bucketed.scratch = scratch  # removed with the fold
    return bucketed


def _fold_when_due(pairs: CodedFold) -> None:
    """Fold the pending order pairs once they pass :data:`FOLD_ORDER_ROWS` (or a quarter of the sum)."""
    if pairs.pending_rows >= max(FOLD_ORDER_ROWS, pairs.total_rows // 4):
        pairs.fold()


def _summed_tables(pairs: CodedFold) -> Iterator[pa.Table]:
    """The summed order pairs in key order, as one table (in memory) or, from judge buckets on disk, a table per
    record batch of about :data:`FINISH_ROWS` rows (each ending at a judge's end), read one at a time."""
    if not isinstance(pairs, BucketedFold):
        yield pairs.table(dictionary=True)
        return
    buckets = pairs.finish(pairs.folder, batch_rows=FINISH_ROWS)
    buckets.scratch, pairs.scratch = pairs.scratch, None
    yield from buckets.batches()


def sum_stored_days(
    days: Sequence[str], days_dir: str, cached: audit_cache.CachedSum | None = None
) -> tuple[AuditPartials, Iterator[pa.Table], IngestCounts]:
    """The stored days' partials and row counts, summed: read a day at a time, fold it in.

    Returns the summed partials without their ``order_pairs``, which come apart as tables in key order
    (judge, model_x, model_y; keys dictionary-encoded; consecutive judge ranges, read one at a time): with
    voter-judges they hold about one row per (voter, model pair) — the size of the cells — so they are
    summed in integer codes (:class:`~biasboard.ranking.data.CodedFold`, as the fit merges the cells), by
    judge bucket on disk once they pass a bucket (:func:`_order_pairs_fold`: memory one bucket, not the
    history), never as a table of strings, and finished a judge-slice at a time (:func:`write_stored_sum`).
    Why not a Beam combine: a combine moves every day's partials and the accumulators through the runner as
    pickled frames, which a local runner keeps in memory while the fit runs (bench/scale.py: ~1 GB of the
    refresh's peak at 1M cells).
    The sums are exact whatever the grouping (every measure is a count or sits on a 2⁻²⁰ grid), so they
    equal the combine's, and starting from ``cached`` (the sum of some of ``days``) and reading only the
    days it lacks gives the same sums as reading every day.

    The clusters' keyed sums (for the history closure) are read and summed only when the days' distinct
    (judge, prompt) keys are few enough (:func:`_keyed_sums_needed`): an arena's history of unique prompts is
    summed without them, as before.
    """
    todo = [day for day in days if cached is None or day not in cached.days]
    keyed = _keyed_sums_needed(todo, days_dir, cached)
    judges = state.judge_rows([_day_partial_path(days_dir, day, "order_pairs") for day in todo])
    if cached is not None:
        judges = audit_cache.add_judge_rows(cached.judge_rows, judges)
    pairs = _order_pairs_fold(*judges)
    total, counts, pending = AuditPartials(), IngestCounts(), []
    if cached is not None:
        cached.add_pairs(pairs, _fold_when_due)
        total, counts = cached.partials if keyed else without_keyed_sums(cached.partials), cached.counts
    empty = AuditPartials().order_pairs
    for day in todo:
        partials, day_counts = read_day_partials(day, days_dir, keyed)
        partials = reduce_order_rows(partials)  # (stored days are paired already: a no-op)
        pairs.add(partials.order_pairs.to_arrow(), what=f"audit partials of day {day}")
        # Arrow's pool (mimalloc) kept what each day's coding freed, and the next fold's bucket was allocated on
        # top of it: the sum's peak grew with the days (bench/scale.py's states alone: 1,295 MB at N, 1,380 at
        # 2N; handed back after every day, 1,226 and 1,257; glibc's trim alone did not move it).
        release_freed_memory()
        pending.append(dataclasses.replace(partials, order_pairs=empty))
        counts = counts + day_counts
        if len(pending) >= SUM_DAYS_CHUNK:
            total, pending = merge_partials([total, *pending]), []
        _fold_when_due(pairs)
    return merge_partials([total, *pending]), _summed_tables(pairs), counts


def _keyed_sums_needed(todo: Sequence[str], days_dir: str, cached: audit_cache.CachedSum | None) -> bool:
    """Whether the sum of ``todo``'s stored days and ``cached`` will close its clusters over the history
    (:func:`~biasboard.audit.measures.closes_over_history`), from their (judge, prompt) keys' sketches alone
    (a 4 KB file a day), before any day's keyed sums are read."""
    sketches = [] if cached is None else [cached.partials.recurrence]
    for day in todo:
        path = _day_partial_path(days_dir, day, "recurrence")
        try:
            sketches.append(pl.read_parquet(io.BytesIO(storage.read_bytes(path))))
        except Exception as err:
            raise StateError(f"{path}: unreadable audit partials: {state.failure_reason(err)}") from err
    return closes_over_history(merge_sketches(sketches))


def _judge_slices(tables: Iterable[pa.Table]) -> Iterator[pl.DataFrame]:
    """The summed order pairs (tables in key order, each judge's rows in one table, the same dictionaries) as
    frames of about :data:`FINISH_ROWS` rows, each judge's rows whole: the slices of the tables concatenated.

    The rows a slice might still take from the next table are carried over to it (a table ends at a judge's
    end, so a cut inside the rows at hand is the cut the whole table would have), and the last table's rest
    is cut once the tables are done, as the whole table's end would be.  Memory: one table (a bucket's record
    batch, :func:`_summed_tables`) and the carried rows, copied out of their table (a slice shares its table's
    buffers: the whole table would stay resident beside the next one), and the next table is not read ahead.
    """
    carried: pa.Table | None = None
    for table in itertools.chain((t for t in tables if t.num_rows), [None]):  # (an empty sum: plain strings)
        last = table is None
        if table is not None:
            pairs = table if carried is None else pa.concat_tables([carried, table])
        elif carried is not None:
            pairs = carried
        else:
            return
        table = carried = None
        judge = np.concatenate([c.indices.to_numpy() for c in pairs.column("judge").chunks if len(c)])
        for start, end in itertools.pairwise(judge_cuts(judge, FINISH_ROWS)):
            if end == start:  # (no rows)
                break
            if not last and start + FINISH_ROWS >= len(judge):  # the last run, whose cut may lie in the next table
                carried = _owned(pairs.slice(start))
                break
            frame = pl.from_arrow(pairs.slice(start, end - start).cast(_ORDER_PAIRS_SCHEMA))
            assert isinstance(frame, pl.DataFrame)
            yield frame
        del pairs, judge


def _owned(table: pa.Table) -> pa.Table:
    """``table``'s rows in buffers of their own (written to an in-memory IPC stream and read back)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return pa.ipc.open_stream(sink.getvalue()).read_all()


class _ParquetRowGroups:
    """A Parquet file written a frame (a row group) at a time into memory, as :func:`publish.table_bytes` writes
    a whole table (zstd, no statistics): the same schema and values read back.  One frame alone is written
    by :func:`publish.table_bytes` itself, so an audit that fits in one slice has the same bytes as before."""

    def __init__(self) -> None:
        self._sink = pa.BufferOutputStream()
        self._writer: pq.ParquetWriter | None = None
        self._first: pl.DataFrame | None = None

    def write(self, frame: pl.DataFrame) -> None:
        if self._first is None and self._writer is None:
            self._first = frame
            return
        if self._writer is None:
            assert self._first is not None
            first, self._first = self._first.to_arrow(), None
            self._writer = pq.ParquetWriter(self._sink, first.schema, compression="zstd", write_statistics=False)
            self._writer.write_table(first)
        self._writer.write_table(frame.to_arrow())

    def bytes(self) -> bytes:
        if self._first is not None:
            return publish.table_bytes(self._first, "parquet")
        assert self._writer is not None, "no row group written"
        self._writer.close()
        return self._sink.getvalue().to_pybytes()


def write_stored_sum(days: Sequence[str], days_dir: str, out: str, keys: Mapping[str, str] | None = None) -> list[str]:
    """Sum the stored days (:func:`sum_stored_days`), finish the audit and write its files under ``out``.

    The per-(judge, pair) and per-(judge, model) tables are finished a judge-slice at a time
    (:func:`_judge_slices`) and written as Parquet row groups as they come, so memory holds the coded sum
    and one slice, not the whole tables with their strings and rate columns (~300 bytes a row, about one
    row per cell with voter-judges); the files read back as :func:`finish_audit`'s tables.

    ``keys`` (each of ``days``' key): start from the summed days' cache when it is valid for them and write
    it anew when a day was read (:mod:`~biasboard.transforms.audit_cache`): a +1 day refresh reads the
    cache and the new day, not the history, and writes the same files.  A cache file found broken while
    it is read is said and every day is summed again.
    """
    keys = {day: keys[day] for day in days} if keys is not None else None
    try:
        return _write_stored_sum(days, days_dir, out, keys, reuse=True)
    except state.BrokenCache as broken:
        state.warn_broken_cache(broken.path, broken.err)
        return _write_stored_sum(days, days_dir, out, keys, reuse=False)


def _write_stored_sum(
    days: Sequence[str], days_dir: str, out: str, keys: Mapping[str, str] | None, reuse: bool
) -> list[str]:
    cached = audit_cache.read_cache(days_dir, keys) if keys is not None and reuse else None
    todo = len(days) if cached is None else len(set(days) - set(cached.days))
    onto = "" if cached is None else f" onto the cached sum of {len(cached.days)} day(s)"
    _LOG.info("audit: %d stored day(s) read%s", todo, onto)
    release_freed_memory()  # what the stages before freed (the days' audit in the runner): the sum starts without it
    started = time.perf_counter()
    partials, pairs, counts = sum_stored_days(days, days_dir, cached)
    _LOG.info("audit: stored days summed in %.1f s", time.perf_counter() - started)
    started = time.perf_counter()
    writer = None
    if keys is not None and todo:
        writer = audit_cache.SumCacheWriter(days_dir)
        pairs = writer.tee(pairs)
    closed, unit_sums = close_over_history(partials)  # (``partials`` stay the additive sums the cache keeps)
    sums, pair_rows, model_rows = [], _ParquetRowGroups(), _ParquetRowGroups()
    try:
        for frame in _judge_slices(pairs):
            frame = with_history_units(frame, unit_sums)
            sums.append(judge_order_sums(frame))
            pair_rows.write(order_pairs_table(frame))
            model_rows.write(order_models_table(frame))
        del pairs
        if writer is not None:
            assert keys is not None
            writer.commit(keys, partials, counts)
    except BaseException:
        if writer is not None:
            writer.abandon()  # not left for the garbage collector to finish (a partial upload)
        raise
    empty = AuditPartials().order_pairs
    judge_sums = pl.concat(sums) if sums else judge_order_sums(empty)
    result = finish_with_pairs(
        closed, judge_sums, order_pairs_table(empty), order_models_table(empty), history=unit_sums is not None
    )
    streamed = {}
    if sums:
        streamed = {table_file("order_pairs"): pair_rows.bytes(), table_file("order_models"): model_rows.bytes()}
    written = write_audit(result, out, counts, streamed)
    del result, streamed, pair_rows, model_rows
    release_freed_memory()  # the fold's buckets and the slices' frames: the fit that follows starts without them
    _LOG.info("audit: finished by judge and %d file(s) written in %.1f s", len(written), time.perf_counter() - started)
    return written
