"""The ingest composite: day tasks → one committed cells partition per day in the state folder.

A day is the unit of work (a backfill is embarrassingly parallel per day): the
graph is ``Create(day tasks) | Reshuffle | ParDo(AggregateDayFn)``, where each
day's DoFn streams its files as Arrow/polars batches (:func:`~biasboard.transforms.read.day_batches`)
and calls the same per-batch function the tests and benchmark call
(:func:`~biasboard.transforms.cells.partial_cells`), merging the partials with
the cell monoid.  Duplicated ``battle_id`` are found across the whole day, which
is why a day is not split across workers.  Re-running a day replaces its
partition, so the transform is idempotent.  Rows read, counted and rejected (by
reason) are Beam counters in :data:`METRICS_NAMESPACE`, and each day's manifest
keeps the same counts.

``biasboard backfill`` runs this over a date range, ``biasboard refresh`` over
the new and changed days; both build the graph with :func:`build_ingest`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import apache_beam as beam
from apache_beam.metrics.metric import Metrics
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions
from biasboard.schemas.cells import PAIR_CELLS_SCHEMA, SCORE_CELLS_SCHEMA
from biasboard.schemas.errors import InputError
from biasboard.schemas.families import FamilyMap
from biasboard.schemas.names import AliasMap
from biasboard.transforms import storage
from biasboard.transforms.cells import (
    BatchCells,
    IngestCounts,
    merge_batches,
    partial_cells,
    partial_score_cells,
)
from biasboard.transforms.day_workers import day_workers, run_in_worker
from biasboard.transforms.judge_pool import carry, check_pool_column, pool_by_column
from biasboard.transforms.read import (
    DEFAULT_BATCH_ROWS,
    InputFile,
    check_copies,
    day_batches,
    list_input_days,
    load_family_map,
)
from biasboard.transforms.repeated_ids import ids_table
from biasboard.transforms.runner import counters, run_to_completion
from biasboard.transforms.state import (
    BATTLE_IDS_FILE,
    DEAD_LETTERS_FILE,
    PAIR_CELLS_FILE,
    SCORE_CELLS_FILE,
    SCORE_DEAD_LETTERS_FILE,
    list_state_days,
    read_committed_manifests,
    read_day_manifest,
    write_day,
)
from biasboard.transforms.validate import SeenIds

_LOG = logging.getLogger(__name__)

METRICS_NAMESPACE = "biasboard.ingest"
#: A local ingest reading at least this much Parquet (over two days or more) runs its days in one
#: worker thread per core (:func:`use_worker_threads`); below it a day or two's work leaves nothing to spread.
PARALLEL_INPUT_BYTES = 256 << 20
#: Beam's local runners whose ``--direct_running_mode=multi_threading`` runs worker threads here.
LOCAL_RUNNERS = frozenset({"FnApiRunner", "DirectRunner"})
#: Merge a day's partial cells whenever this many partial rows have piled up,
#: so a day's memory is bounded by its cells, not by its number of batches.
MERGE_EVERY_ROWS = 1 << 19


@dataclass
class IngestResult:
    """What an ingest run did: the days written, their manifests, counts summed over days, Beam metrics."""

    state_dir: str
    days: list[str]
    manifests: dict[str, dict]
    counts: IngestCounts
    score_counts: IngestCounts | None
    metrics: dict[str, int] = field(default_factory=dict)
    #: Worker threads the days ran in (0: Beam's default, one; see :func:`use_worker_threads`).
    worker_threads: int = 0
    #: Forked processes that did the days' work for those threads (0: the threads did it; see
    #: :mod:`~biasboard.transforms.day_workers`).
    worker_processes: int = 0


def day_tasks(
    input_glob: str | None,
    days: list[str] | None = None,
    day_range: tuple[str | None, str | None] = (None, None),
    scores_glob: str | None = None,
) -> list[dict]:
    """The work list: one task per day with its battle (and score) files, all checked up front.

    ``input_glob`` None: score files only (an ordinal-only refresh); each day's battle cells are then empty.
    """
    battles = (
        list_input_days(input_glob, days, day_range, "battle", beside=scores_glob) if input_glob is not None else {}
    )
    scores = list_input_days(scores_glob, days, day_range, "score", beside=input_glob) if scores_glob else {}
    all_days = sorted(set(battles) | set(scores))
    where = " and ".join(g for g in (input_glob, scores_glob) if g is not None)
    if days is not None:
        absent = sorted(set(days) - set(all_days))
        if absent:
            raise InputError(f"{where}: no input files for day(s) {', '.join(absent)}")
    if not all_days:
        raise InputError(f"{where}: {_why_no_days(day_range)}")
    return [
        {
            "day": day,
            "files": [f.to_dict() for f in battles.get(day, [])],
            "score_files": [f.to_dict() for f in scores.get(day, [])] if scores_glob else None,
        }
        for day in all_days
    ]


def _why_no_days(day_range: tuple[str | None, str | None]) -> str:
    """Why files that matched left no day to aggregate: outside the day range, or (no range) every one is empty.

    Without a range only a file with no rows and no day folder in its path is left out (:func:`list_input_days`),
    which was reported as "no input files in the day range … to …", a range the user never gave.
    """
    low, high = day_range
    if low is None and high is None:
        return "every file matched holds no rows (and no day=YYYY-MM-DD folder in its path): no day to aggregate"
    return f"no input files in the day range {low or '…'} to {high or '…'}"


def check_stored_copies(tasks: list[dict], state_dir: str) -> None:
    """Refuse a file whose content is already in the state (or in the tasks) under another day.

    A file copied or moved to a second day folder would have its rows counted
    on both days; the day manifests keep every input's content fingerprint, so
    the copy is caught here, in one line naming both paths, before any work.
    """
    todo = {task["day"] for task in tasks}
    stored = {}
    for day in list_state_days(state_dir):
        if day not in todo:
            manifest = read_day_manifest(state_dir, day) or {}
            stored[day] = [*(manifest.get("inputs") or []), *(manifest.get("score_inputs") or [])]
    for key in ("files", "score_files"):
        check_copies(
            {task["day"]: [InputFile(**spec) for spec in task[key] or []] for task in tasks},
            stored,
        )


def ingest_settings(
    family_map: FamilyMap, aliases: AliasMap | None = None, judge_column: str | None = None, grades: bool = False
) -> dict[str, str]:
    """Everything besides its input files that a day's cells depend on; stored in the day's manifest.

    Families are resolved, names aliased and judges pooled by a column
    (``--judge-pool column:NAME``, :mod:`biasboard.transforms.judge_pool`) while
    a day is aggregated and written into its cells, so the maps' digests and the
    pool column are part of what refresh compares to decide whether a stored day
    is still current (each only when given, so states written without them stay
    current).  ``grades``: the run reads grades (``--scores``), which the column pools too; a day stored when
    grades kept their graders under a column pool is therefore aggregated again.
    """
    settings = {"family_map": family_map.digest()}
    if aliases is not None and aliases.aliases:
        settings["aliases"] = aliases.digest()
    if judge_column:
        settings["judge_pool"] = f"column:{judge_column}"
        if grades:
            settings["judge_pool_grades"] = f"column:{judge_column}"
    return settings


class AggregateDayFn(beam.DoFn):
    """One day's files → that day's cells, dead letters and manifest, written to the state folder.

    ``workers``: the token of a pool of forked worker processes
    (:func:`~biasboard.transforms.day_workers.day_workers`) that does the day's
    work; the counts and manifest come back to this DoFn, which reports them.
    """

    def __init__(
        self,
        state_dir: str,
        family_map: FamilyMap,
        batch_rows: int = DEFAULT_BATCH_ROWS,
        aliases: AliasMap | None = None,
        judge_column: str | None = None,
        workers: str | None = None,
    ):
        self.state_dir = state_dir
        self.family_map = family_map
        self.batch_rows = batch_rows
        self.aliases = aliases
        self.judge_column = judge_column
        self.workers = workers

    def _aggregate(self, day: str, files: list[dict], kind: str) -> tuple[BatchCells, SeenIds]:
        partial = partial_cells if kind == "battle" else partial_score_cells
        schema = PAIR_CELLS_SCHEMA if kind == "battle" else SCORE_CELLS_SCHEMA
        seen = SeenIds()
        merged = merge_batches([], schema)
        pending: list[BatchCells] = []
        pending_rows = 0
        inputs = [InputFile(**spec) for spec in files]
        read_from: set[str] = set()
        column = self.judge_column  # grades too: a grader's grades pool with its battles (one judge, not two)
        for f, offset, batch in day_batches(day, inputs, kind, self.batch_rows, carry(column), dictionary=True):
            read_from.add(f.path)
            batch = pool_by_column(batch, column)
            part = partial(batch, self.family_map, seen, f.path, offset, aliases=self.aliases, day=day)
            pending.append(part)
            pending_rows += part.num_cells
            if pending_rows >= MERGE_EVERY_ROWS:
                merged, pending, pending_rows = merge_batches([merged, *pending], schema, sort=False), [], 0
        # no sort: rows of a stored partition are in no particular order (load_cells sorts what it merges)
        out = merge_batches([merged, *pending] if merged.counts.read else pending, schema, sort=False)
        out.counts.empty_files += sum(1 for f in inputs if f.path not in read_from and not f.undated)
        return out, seen

    def _count(self, counts: IngestCounts, prefix: str) -> None:
        Metrics.counter(METRICS_NAMESPACE, f"{prefix}_read").inc(counts.read)
        Metrics.counter(METRICS_NAMESPACE, f"{prefix}_counted").inc(counts.counted)
        for reason, n in counts.rejected.items():
            Metrics.counter(METRICS_NAMESPACE, f"{prefix}_rejected:{reason}").inc(n)

    def process(self, task: dict):
        manifest, battles, scores = run_in_worker(self.workers, self.write_day, task)
        self._count(battles, "battles")
        Metrics.counter(METRICS_NAMESPACE, "self_battles").inc(battles.self_battles)
        if scores is not None:
            self._count(scores, "scores")
        yield manifest

    def write_day(self, task: dict) -> tuple[dict, IngestCounts, IngestCounts | None]:
        """Aggregate and write one day; its manifest and its battle (and score) counts."""
        day = task["day"]
        battles, ids = self._aggregate(day, task["files"], "battle")
        tables = {
            PAIR_CELLS_FILE: battles.stored,
            DEAD_LETTERS_FILE: battles.dead_letters,
            BATTLE_IDS_FILE: ids_table(ids.kept_hashes()),  # to find its battles counted on other days
        }
        manifest = {
            "inputs": [InputFile(**f).fingerprint() for f in task["files"]],
            "counts": battles.counts.to_dict(),
            "settings": ingest_settings(
                self.family_map, self.aliases, self.judge_column, grades=task["score_files"] is not None
            ),
        }
        scores = None
        if task["score_files"] is not None:
            scores, _ = self._aggregate(day, task["score_files"], "score")
            tables[SCORE_CELLS_FILE] = scores.cells
            tables[SCORE_DEAD_LETTERS_FILE] = scores.dead_letters
            manifest["score_inputs"] = [InputFile(**f).fingerprint() for f in task["score_files"]]
            manifest["score_counts"] = scores.counts.to_dict()
        aliased = battles.counts.aliased | (scores.counts.aliased if scores is not None else frozenset())
        if aliased:  # the --aliases entries this day used (:func:`aliases_matched`)
            manifest[ALIASED] = sorted(aliased)
        written = write_day(self.state_dir, day, manifest, tables)
        return written, battles.counts, None if scores is None else scores.counts


class AggregateDays(beam.PTransform):
    """Day tasks → one committed partition per day (the DoFn writes it; manifests flow on)."""

    def __init__(
        self,
        state_dir: str,
        family_map: FamilyMap,
        batch_rows: int = DEFAULT_BATCH_ROWS,
        aliases: AliasMap | None = None,
        judge_column: str | None = None,
        workers: str | None = None,
    ):
        super().__init__()
        self.fn = AggregateDayFn(state_dir, family_map, batch_rows, aliases, judge_column, workers)

    def expand(self, tasks):
        # Reshuffle breaks fusion with Create, so a distributed runner spreads days over workers.
        return tasks | "SpreadDays" >> beam.Reshuffle() | "AggregateDay" >> beam.ParDo(self.fn)


def ingest_days(
    pipeline: beam.Pipeline,
    tasks: list[dict],
    state_dir: str,
    family_map: FamilyMap,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    aliases: AliasMap | None = None,
    judge_column: str | None = None,
    workers: str | None = None,
) -> beam.PCollection:
    """Add the ingest over ``tasks`` (see :func:`day_tasks`) to ``pipeline``; returns the committed days' manifests.

    A file already filed under another day (in ``tasks`` or in the state), or
    a battle or grade file without the ``judge_column`` to pool by, is refused here,
    while the graph is built, before anything runs.
    """
    check_stored_copies(tasks, state_dir)
    check_pool_column((f["path"] for task in tasks for f in task["files"]), judge_column)
    check_pool_column((f["path"] for task in tasks for f in task["score_files"] or []), judge_column, "grade")
    _LOG.info("ingest: %d day(s) into %s", len(tasks), state_dir)
    return (
        pipeline
        | "DayPartitions" >> beam.Create(tasks)
        | "AggregateDays" >> AggregateDays(state_dir, family_map, batch_rows, aliases, judge_column, workers)
    )


def build_ingest(
    options: PipelineOptions,
    tasks: list[dict],
    state_dir: str,
    family_map: FamilyMap,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    aliases: AliasMap | None = None,
    workers: str | None = None,
) -> beam.Pipeline:
    """The ingest graph on its own (``biasboard backfill``), built, not run (``workers``: :class:`AggregateDayFn`)."""
    pipeline = beam.Pipeline(options=options)
    ingest_days(pipeline, tasks, state_dir, family_map, batch_rows, aliases, workers=workers)
    return pipeline


def use_worker_threads(options: PipelineOptions, tasks: list[dict]) -> bool:
    """Spread a big local ingest's days over one worker thread per core; True when it did.

    Only for a local runner (:data:`LOCAL_RUNNERS`) on a machine with several
    cores, for at least two days and :data:`PARALLEL_INPUT_BYTES` of input;
    the caller asks only when the user set neither ``--direct_running_mode``
    nor ``--direct_num_workers`` (:func:`~biasboard.pipelines.backfill.run_backfill`).
    A day's work is polars, numpy and pyarrow kernels on Arrow batches, which
    release the GIL, with little Python between them, so two days in two
    threads of one process use both cores.  Worker processes did the same
    work with ~2.5 s of CPU each to start (Beam's SDK harness and the imports)
    and lost to threads on this shared 2-core machine: 20M battles at load 5-7,
    CPU 16.3 -> 14.1 s clean and 23.7 -> 18.6 s with 1% bad rows
    (``bench/ingest.py``; 12 days alternating: 14.3-18.5 s wall in processes,
    5.4-8.0 s in threads).  The Python between the kernels still holds the GIL
    (~1.65 of 2 cores busy), so :func:`run_ingest` also forks one worker
    process per thread that does the days' work (:mod:`~biasboard.transforms.day_workers`).
    """
    cores = os.cpu_count() or 1
    if options.view_as(StandardOptions).runner not in LOCAL_RUNNERS or cores < 2 or len(tasks) < 2:
        return False
    size = sum(int(f["size"]) for task in tasks for key in ("files", "score_files") for f in task[key] or [])
    if size < PARALLEL_INPUT_BYTES:
        return False
    direct = options.view_as(DirectOptions)
    direct.direct_running_mode = "multi_threading"
    direct.direct_num_workers = min(cores, len(tasks))
    _LOG.info("ingest: %d MB of input: days spread over %d worker threads", size >> 20, direct.direct_num_workers)
    return True


#: A day manifest's list of the ``--aliases`` keys that renamed a counted row of it (battles or grades).
ALIASED = "aliased"


def aliases_matched(manifests: Iterable[Mapping]) -> frozenset[str] | None:
    """The ``--aliases`` keys that renamed a counted row of any of these days (their :data:`ALIASED` lists); None
    when a day stored before manifests kept the list renamed rows, so which entries matched is unknown.

    Why from the manifests: a day kept from an earlier run is not read again, and its entries matched all the same."""
    found: set[str] = set()
    for manifest in manifests:
        renamed = sum(int(manifest.get(key, {}).get("renamed", 0)) for key in ("counts", "score_counts"))
        if ALIASED not in manifest and renamed:
            return None
        found.update(manifest.get(ALIASED, ()))
    return frozenset(found)


def committed(state_dir: str, days: list[str], with_scores: bool, metrics: dict[str, int]) -> IngestResult:
    """The result of an ingest run, read back from the day manifests it committed."""
    manifests = read_committed_manifests(state_dir, days, "was not committed by the pipeline")
    counts = sum((IngestCounts.from_dict(m["counts"]) for m in manifests.values()), IngestCounts())
    score_counts = None
    if with_scores:
        score_counts = sum((IngestCounts.from_dict(m["score_counts"]) for m in manifests.values()), IngestCounts())
    return IngestResult(state_dir, sorted(manifests), manifests, counts, score_counts, metrics)


def run_ingest(
    input_glob: str,
    state_dir: str,
    options: PipelineOptions,
    days: list[str] | None = None,
    family_map: FamilyMap | str | None = None,
    scores_glob: str | None = None,
    day_range: tuple[str | None, str | None] = (None, None),
    batch_rows: int = DEFAULT_BATCH_ROWS,
    aliases: AliasMap | None = None,
    worker_threads: bool = False,
    hold: Callable[[str], object] | None = None,
) -> IngestResult:
    """Aggregate the selected days of ``input_glob`` into ``state_dir`` and read their manifests back.

    ``days``: only these days (refresh passes the new or changed ones);
    ``day_range``: inclusive (from, to) bounds; ``family_map``: a FamilyMap or
    the path of a user rule file; ``aliases``: judge/model renames
    (:mod:`biasboard.schemas.names`); ``worker_threads``: a big input may
    run its days in worker threads (:func:`use_worker_threads`); ``hold``:
    called with the state folder once the input is checked and before
    anything is written there (a backfill takes the state's lock: a refusal
    for bad input leaves no folder behind).  Input problems raise InputError
    before any pipeline starts.
    """
    if not isinstance(family_map, FamilyMap):
        family_map = load_family_map(family_map)
    input_glob, scores_glob = storage.launcher_path(input_glob), storage.launcher_path(scores_glob)
    tasks = day_tasks(input_glob, days, day_range, scores_glob)
    state_dir = storage.launcher_path(state_dir)  # the workers write it: never relative to their working directory
    if hold is not None:
        hold(state_dir)
    storage.ensure_dir(state_dir)  # an unwritable state folder fails here, in one line, not inside a worker
    # Decided before the graph is built: Beam copies the options into it.
    parallel = worker_threads and use_worker_threads(options, tasks)
    threads = options.view_as(DirectOptions).direct_num_workers if parallel else 0
    # forked before the pipeline starts its threads: the workers are copies of this process as it is now
    with day_workers(threads) as workers:
        pipeline = build_ingest(options, tasks, state_dir, family_map, batch_rows, aliases, workers)
        outcome = run_to_completion(pipeline)
    days_written = [task["day"] for task in tasks]
    result = committed(state_dir, days_written, bool(scores_glob), counters(outcome, METRICS_NAMESPACE))
    result.worker_threads = threads
    result.worker_processes = threads if workers else 0
    return result
