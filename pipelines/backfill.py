"""``biasboard backfill``: battle logs → validated, covariate-tagged cells, one partition per day.

Reads day-partitioned Parquet battle logs (and, optionally, ordinal score
logs), dead-letters every bad row with its reason, and writes per day::

    STATE/cells/day=D/pair_cells.parquet       (+ score_cells.parquet with --scores)
    STATE/deadletters/day=D/dead_letters.parquet
    STATE/manifests/day=D.json                 inputs + fingerprints, counts by reason

A day is the unit of work (a backfill is embarrassingly parallel per day): the
pipeline is ``Create(days) | Reshuffle | ParDo(AggregateDay)``, where each day's
DoFn streams its files as Arrow record batches and calls the same per-batch
function the tests and benchmark call (:func:`~biasboard.transforms.cells.partial_cells`),
merging the partials with the cell monoid.  Duplicated ``battle_id`` are found
across the whole day, which is why a day is not split across workers.
Re-running a day replaces its partition, so the job is idempotent.

Run locally (the default runner is FnApiRunner)::

    biasboard backfill --input 'logs/battles/**.parquet' --state state/ --from 2024-05-01 --to 2024-05-31

On Dataflow (the package ships to workers with ``--setup_file``)::

    biasboard backfill --input 'gs://B/battles/**.parquet' --state gs://B/state \\
        --runner DataflowRunner --project P --region R --temp_location gs://B/tmp --setup_file ./setup.py

Every run prints (and stores per day in the manifest) the conservation
identity ``read = counted + rejected`` with the rejections by reason, and a
per-judge summary of the cells it wrote.
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass, field

import apache_beam as beam
import pyarrow as pa
from apache_beam.metrics.metric import Metrics, MetricsFilter
from biasboard.pipelines.options import beam_options
from biasboard.schemas.cells import PAIR_CELLS_SCHEMA, SCORE_CELLS_SCHEMA
from biasboard.schemas.errors import InputError, StateError, recover_user_error
from biasboard.schemas.families import FamilyMap
from biasboard.transforms import storage
from biasboard.transforms.cells import (
    BatchCells,
    IngestCounts,
    judge_summary,
    merge_batches,
    partial_cells,
    partial_score_cells,
)
from biasboard.transforms.read import (
    DEFAULT_BATCH_ROWS,
    InputFile,
    iter_batches,
    list_input_days,
    load_family_map,
    rows_of_day,
    validate_day,
)
from biasboard.transforms.state import (
    DEAD_LETTERS_FILE,
    PAIR_CELLS_FILE,
    SCORE_CELLS_FILE,
    SCORE_DEAD_LETTERS_FILE,
    load_cells,
    read_manifest,
    write_day,
)
from biasboard.transforms.validate import SeenIds

log = logging.getLogger(__name__)

METRICS_NAMESPACE = "biasboard.ingest"
#: Merge a day's partial cells whenever this many partial rows have piled up,
#: so a day's memory is bounded by its cells, not by its number of batches.
MERGE_EVERY_ROWS = 1 << 19


@dataclass
class BackfillResult:
    """What a backfill did: the days written, their manifests, counts summed over days, Beam metrics."""

    state_dir: str
    days: list[str]
    manifests: dict[str, dict]
    counts: IngestCounts
    score_counts: IngestCounts | None
    metrics: dict[str, int] = field(default_factory=dict)


def plan_days(
    input_glob: str,
    days: list[str] | None = None,
    day_range: tuple[str | None, str | None] = (None, None),
    scores_glob: str | None = None,
) -> list[dict]:
    """The work list: one task per day with its battle (and score) files, all checked up front."""
    battles = list_input_days(input_glob, days, day_range, "battle")
    scores = list_input_days(scores_glob, days, day_range, "score") if scores_glob else {}
    all_days = sorted(set(battles) | set(scores))
    if days is not None:
        absent = sorted(set(days) - set(all_days))
        if absent:
            raise InputError(f"{input_glob}: no input files for day(s) {', '.join(absent)}")
    if not all_days:
        low, high = day_range
        raise InputError(f"{input_glob}: no input files in the day range {low or '…'} to {high or '…'}")
    return [
        {
            "day": day,
            "files": [f.to_dict() for f in battles.get(day, [])],
            "score_files": [f.to_dict() for f in scores.get(day, [])] if scores_glob else None,
        }
        for day in all_days
    ]


class AggregateDayFn(beam.DoFn):
    """One day's files → that day's cells, dead letters and manifest, written to the state folder."""

    def __init__(self, state_dir: str, family_map: FamilyMap, batch_rows: int = DEFAULT_BATCH_ROWS):
        self.state_dir = state_dir
        self.family_map = family_map
        self.batch_rows = batch_rows

    def _aggregate(self, day: str, files: list[dict], kind: str) -> BatchCells:
        partial = partial_cells if kind == "battle" else partial_score_cells
        schema = PAIR_CELLS_SCHEMA if kind == "battle" else SCORE_CELLS_SCHEMA
        seen = SeenIds()
        merged = merge_batches([], schema)
        pending: list[BatchCells] = []
        pending_rows = 0
        for spec in files:
            f = InputFile(**spec)
            for offset, batch in iter_batches(f.path, kind, self.batch_rows):
                if f.undated:
                    batch = rows_of_day(batch, offset, day, f.home_day)
                part = partial(batch, self.family_map, seen, f.path, offset)
                pending.append(part)
                pending_rows += part.cells.num_rows
                if pending_rows >= MERGE_EVERY_ROWS:
                    merged, pending, pending_rows = merge_batches([merged, *pending], schema, sort=False), [], 0
        # no sort: rows of a stored partition are in no particular order (load_cells sorts what it merges)
        return merge_batches([merged, *pending] if merged.counts.read else pending, schema, sort=False)

    def _count(self, counts: IngestCounts, prefix: str) -> None:
        Metrics.counter(METRICS_NAMESPACE, f"{prefix}_read").inc(counts.read)
        Metrics.counter(METRICS_NAMESPACE, f"{prefix}_counted").inc(counts.counted)
        for reason, n in counts.rejected.items():
            Metrics.counter(METRICS_NAMESPACE, f"{prefix}_rejected:{reason}").inc(n)

    def process(self, task: dict):
        day = task["day"]
        battles = self._aggregate(day, task["files"], "battle")
        self._count(battles.counts, "battles")
        Metrics.counter(METRICS_NAMESPACE, "self_battles").inc(battles.counts.self_battles)
        tables = {PAIR_CELLS_FILE: battles.cells, DEAD_LETTERS_FILE: battles.dead_letters}
        manifest = {
            "inputs": [InputFile(**f).fingerprint() for f in task["files"]],
            "counts": battles.counts.to_dict(),
        }
        if task["score_files"] is not None:
            scores = self._aggregate(day, task["score_files"], "score")
            self._count(scores.counts, "scores")
            tables[SCORE_CELLS_FILE] = scores.cells
            tables[SCORE_DEAD_LETTERS_FILE] = scores.dead_letters
            manifest["score_inputs"] = [InputFile(**f).fingerprint() for f in task["score_files"]]
            manifest["score_counts"] = scores.counts.to_dict()
        yield write_day(self.state_dir, day, manifest, tables)


class AggregateDays(beam.PTransform):
    """Day tasks → one committed partition per day (the DoFn writes it; manifests flow on)."""

    def __init__(self, state_dir: str, family_map: FamilyMap, batch_rows: int = DEFAULT_BATCH_ROWS):
        super().__init__()
        self.fn = AggregateDayFn(state_dir, family_map, batch_rows)

    def expand(self, tasks):
        # Reshuffle breaks fusion with Create, so a distributed runner spreads days over workers.
        return tasks | "SpreadDays" >> beam.Reshuffle() | "AggregateDay" >> beam.ParDo(self.fn)


def run_backfill(
    input_glob: str,
    state_dir: str,
    beam_args: list[str] | None = None,
    days: list[str] | None = None,
    family_map: FamilyMap | str | None = None,
    scores_glob: str | None = None,
    day_range: tuple[str | None, str | None] = (None, None),
    batch_rows: int = DEFAULT_BATCH_ROWS,
) -> BackfillResult:
    """Aggregate the selected days of ``input_glob`` into ``state_dir``; the entry point other jobs reuse.

    ``days``: only these days (refresh passes the new or changed ones);
    ``day_range``: inclusive (from, to) bounds; ``family_map``: a FamilyMap or
    the path of a user rule file.  Input problems raise InputError before any
    pipeline starts.
    """
    if not isinstance(family_map, FamilyMap):
        family_map = load_family_map(family_map)
    tasks = plan_days(input_glob, days, day_range, scores_glob)
    storage.ensure_dir(state_dir)  # an unwritable state folder fails here, in one line, not inside a worker
    log.info("backfill: %d day(s) from %s into %s", len(tasks), input_glob, state_dir)
    pipeline = beam.Pipeline(options=beam_options(beam_args))
    _ = (
        pipeline
        | "DayPartitions" >> beam.Create(tasks)
        | "AggregateDays" >> AggregateDays(state_dir, family_map, batch_rows)
    )
    try:
        outcome = pipeline.run()
        outcome.wait_until_finish()
    except Exception as err:
        user = recover_user_error(err)
        if user is not None:
            raise user from err
        raise
    metrics = {}
    try:
        for counter in outcome.metrics().query(MetricsFilter().with_namespace(METRICS_NAMESPACE))["counters"]:
            metrics[counter.key.metric.name] = metrics.get(counter.key.metric.name, 0) + int(counter.committed or 0)
    except Exception:  # some runners do not report metrics; the manifests hold the same counts
        log.debug("no metrics from the runner", exc_info=True)
    manifests = {}
    for task in tasks:
        manifest = read_manifest(state_dir, task["day"])
        if manifest is None:
            raise StateError(f"{state_dir}: day {task['day']} was not committed by the pipeline")
        manifests[task["day"]] = manifest
    counts = sum((IngestCounts.from_dict(m["counts"]) for m in manifests.values()), IngestCounts())
    score_counts = None
    if scores_glob:
        score_counts = sum((IngestCounts.from_dict(m["score_counts"]) for m in manifests.values()), IngestCounts())
    return BackfillResult(state_dir, sorted(manifests), manifests, counts, score_counts, metrics)


def format_counts(counts: IngestCounts, what: str = "battles") -> str:
    """The conservation line: ``read = counted + rejected`` with rejections by reason."""
    reasons = ", ".join(f"{r}: {n}" for r, n in sorted(counts.rejected.items())) or "none"
    status = "ok" if counts.conserved else "MISMATCH"
    line = (
        f"{what}: read {counts.read} = counted {counts.counted} + rejected {counts.rejected_total} "
        f"[{status}] (rejected by reason: {reasons})"
    )
    if what == "battles":
        line += f"; self-battles kept: {counts.self_battles}"
    return line


def format_summary(cells: pa.Table) -> str:
    """``backfill_summary``: per-judge totals of the cells as an aligned text table."""
    summary = judge_summary(cells).to_pylist()
    header = f"{'judge':<28} {'family':<14} {'battles':>10} {'models':>6} {'win_a':>7} {'win_b':>7} {'tie':>7}"
    lines = [header, "-" * len(header)]
    for row in summary:
        lines.append(
            f"{row['judge'][:28]:<28} {row['judge_family'][:14]:<14} {row['n']:>10} {row['models']:>6} "
            f"{row['win_a_share']:>7.1%} {row['win_b_share']:>7.1%} {row['tie_share']:>7.1%}"
        )
    if not summary:
        lines.append("(no counted battles)")
    return "\n".join(lines)


def backfill_summary(result: BackfillResult) -> str:
    """Conservation lines and the per-judge table for the days a backfill wrote."""
    parts = [f"backfill: {len(result.days)} day(s) written to {result.state_dir}", format_counts(result.counts)]
    if result.score_counts is not None:
        parts.append(format_counts(result.score_counts, "scores"))
    parts.append(format_summary(load_cells(result.state_dir, result.days)))
    return "\n".join(parts)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input", required=True, help="battle Parquet files: a glob or folder, local or gs://")
    parser.add_argument("--state", required=True, help="state folder for per-day cells (local or gs://)")
    parser.add_argument("--from", dest="day_from", metavar="YYYY-MM-DD", help="first day to aggregate (inclusive)")
    parser.add_argument("--to", dest="day_to", metavar="YYYY-MM-DD", help="last day to aggregate (inclusive)")
    parser.add_argument("--scores", metavar="GLOB", help="ordinal score Parquet files to aggregate too")
    parser.add_argument("--family-map", metavar="PATH", help="JSON family rules tried before the defaults")
    parser.add_argument("--batch-rows", type=int, default=DEFAULT_BATCH_ROWS, help=argparse.SUPPRESS)


def run(args: argparse.Namespace, beam_args: list[str]) -> int:
    low = validate_day(args.day_from, "--from") if args.day_from else None
    high = validate_day(args.day_to, "--to") if args.day_to else None
    if low and high and low > high:
        raise InputError(f"--from {low} is after --to {high}")
    result = run_backfill(
        args.input,
        args.state,
        beam_args,
        family_map=args.family_map,
        scores_glob=args.scores,
        day_range=(low, high),
        batch_rows=args.batch_rows,
    )
    print(backfill_summary(result))
    return 0 if result.counts.conserved else 1
