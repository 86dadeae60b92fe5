"""``biasboard backfill``: battle logs → validated, covariate-tagged cells, one partition per day.

Reads day-partitioned Parquet battle logs (and, optionally, ordinal score
logs), dead-letters every bad row with its reason, and writes per day::

    STATE/cells/day=D/pair_cells.parquet       (+ score_cells.parquet with --scores)
    STATE/deadletters/day=D/dead_letters.parquet
    STATE/manifests/day=D.json                 inputs + fingerprints, counts by reason

A day is the unit of work (a backfill is embarrassingly parallel per day); the
graph is :class:`~biasboard.transforms.ingest.AggregateDays` over one task per
day, and this module only parses the flags and prints the outcome.  Re-running a
day replaces its partition, so the job is idempotent.  Once its input is checked it takes the state's lock,
as a refresh does (:mod:`biasboard.transforms.run_lock`): beside a refresh or another backfill on that state it
does nothing and exits 2 in one line naming the holder.

Run locally (the default runner is FnApiRunner)::

    biasboard backfill --input 'logs/battles/**.parquet' --state state/ --from 2024-05-01 --to 2024-05-31

On Dataflow (the package ships to workers with ``--setup_file``)::

    biasboard backfill --input 'gs://B/battles/**.parquet' --state gs://B/state \\
        --runner DataflowRunner --project P --region R --temp_location gs://B/tmp --setup_file ./setup.py

Every run prints (and stores per day in the manifest) the conservation
identity ``read = counted + rejected`` with the rejections by reason, a warning when
the rows rejected reach 5% of those read or a day rejected most of its rows
(:mod:`biasboard.transforms.day_warnings`), the days with counted rows dated outside their day folder
(:mod:`biasboard.schemas.folder_day`), and a per-judge summary of the cells it wrote.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass

import pyarrow as pa
from apache_beam.options.pipeline_options import GoogleCloudOptions
from biasboard.pipelines import validation
from biasboard.pipelines.options import GivenOnce, OneFile, OneFolder, beam_options, defaults_from, options_from
from biasboard.pipelines.validation import NumberRule
from biasboard.schemas.errors import InputError
from biasboard.schemas.families import FamilyMap
from biasboard.schemas.names import AliasMap
from biasboard.transforms import storage
from biasboard.transforms.anchors import unmatched_aliases
from biasboard.transforms.cells import IngestCounts, judge_summary
from biasboard.transforms.day_warnings import off_day_warnings, rejected_share_warnings, rejection_warnings
from biasboard.transforms.ingest import IngestResult, run_ingest
from biasboard.transforms.read import DEFAULT_BATCH_ROWS, load_aliases, validate_day
from biasboard.transforms.repeated_ids import repeated_ids
from biasboard.transforms.run_lock import folder_lock
from biasboard.transforms.state import list_state_days, load_cells, read_committed_manifests

#: What a backfill that lost its storage leaves (:func:`storage.if_unreachable`): a day counts once its manifest,
#: written last, is there.
LEFT_BY_BACKFILL = "the days committed before are complete, the others were not committed: rerun to aggregate them"


@storage.if_unreachable(LEFT_BY_BACKFILL)
def run_backfill(
    input_glob: str,
    state_dir: str,
    beam_args: list[str] | None = None,
    days: list[str] | None = None,
    family_map: FamilyMap | str | None = None,
    scores_glob: str | None = None,
    day_range: tuple[str | None, str | None] = (None, None),
    batch_rows: int = DEFAULT_BATCH_ROWS,
    aliases: AliasMap | None = None,
    hold: Callable[[str], object] | None = None,
) -> IngestResult:
    """Aggregate the selected days of ``input_glob`` into ``state_dir`` (:func:`~biasboard.transforms.ingest.run_ingest`
    with the Beam options of ``beam_args``; ``hold``: as there, what takes the state's lock).

    Unless ``beam_args`` say how the local runner runs its workers
    (``--direct_running_mode``, ``--direct_num_workers``), a big input runs its
    days in one worker thread per core (:func:`~biasboard.transforms.ingest.use_worker_threads`).
    """
    options = beam_options(beam_args, validate=True)
    # As every job: bounded GCS requests, and anonymous at once on an emulator or with --no_auth (Beam's
    # credential lookup retried ~25 s).
    storage.configure_gcs(no_auth=options.view_as(GoogleCloudOptions).no_auth)
    auto = not any(a.startswith(("--direct_running_mode", "--direct_num_workers")) for a in beam_args or [])
    return run_ingest(
        input_glob, state_dir, options, days, family_map, scores_glob, day_range, batch_rows, aliases, auto, hold
    )


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
    if counts.empty_files:
        line += f"; empty files skipped: {counts.empty_files}"
    if counts.trimmed or counts.renamed:
        line += f"; names trimmed in {counts.trimmed} row(s), renamed by --aliases in {counts.renamed}"
    if counts.off_day.rows:
        line += f"; counted but dated outside their day folder: {counts.off_day.rows}"
    return line


def _share(value: float | None) -> str:
    """A share for the judges table, 7 wide; a dash where it is not defined (no battle of known order)."""
    return f"{'—':>7}" if value is None else f"{value:>7.1%}"


def format_summary(cells: pa.Table) -> str:
    """``backfill_summary``: per-judge totals of the cells as an aligned text table.

    win_a / win_b are over the battles whose shown order is known (a dash when none is); a line under the table
    says so when some battles' order is unknown.  tie is over all battles.
    """
    summary = judge_summary(cells).to_pylist()
    header = f"{'judge':<28} {'family':<14} {'battles':>10} {'models':>6} {'win_a':>7} {'win_b':>7} {'tie':>7}"
    lines = [header, "-" * len(header)]
    for row in summary:
        lines.append(
            f"{row['judge'][:28]:<28} {row['judge_family'][:14]:<14} {row['n']:>10} {row['models']:>6} "
            f"{_share(row['win_a_share'])} {_share(row['win_b_share'])} {row['tie_share']:>7.1%}"
        )
    if not summary:
        lines.append("(no counted battles)")
    unknown = sum(row["n"] - row["order_known"] for row in summary)
    if unknown:
        lines.append(
            f"win_a/win_b: of the battles whose shown order is known ({unknown} battle(s) without it); tie: of all"
        )
    return "\n".join(lines)


def backfill_summary(result: IngestResult, aliases: AliasMap | None = None) -> str:
    """Conservation lines and the per-judge table for the days a backfill wrote; with ``aliases``, a line naming
    its entries that renamed no counted row of any stored day (as a refresh logs it)."""
    parts = [f"backfill: {len(result.days)} day(s) written to {result.state_dir}", format_counts(result.counts)]
    if result.score_counts is not None:
        parts.append(format_counts(result.score_counts, "scores"))
    manifests = [result.manifests[d] for d in result.days]
    warnings = rejection_warnings(result.counts, result.days, manifests, result.state_dir)
    if result.score_counts is not None:
        warnings += rejected_share_warnings(result.score_counts, result.state_dir, "score rows")
    warnings += off_day_warnings(result.days, manifests)
    stored = list_state_days(result.state_dir)  # the days written may repeat ids of days stored before them
    every = read_committed_manifests(result.state_dir, stored, "lost its manifest during the backfill")
    warnings += repeated_ids(result.state_dir, stored, [every[d] for d in stored]).warnings()
    parts += [f"warning: {w}" for w in warnings]
    note = unmatched_aliases(aliases, every.values())
    parts += [note] if note else []
    parts.append(format_summary(load_cells(result.state_dir, result.days)))
    return "\n".join(parts)


@dataclass(frozen=True)
class BackfillOptions:
    """The job's own options besides ``--input`` and ``--state`` (Beam's come separately); their defaults."""

    day_from: str | None = None
    day_to: str | None = None
    scores: str | None = None
    family_map: str | None = None
    aliases: str | None = None
    batch_rows: int = DEFAULT_BATCH_ROWS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--input", action=GivenOnce, required=True, help="battle Parquet files: a glob or folder, local or gs://"
    )
    parser.add_argument(
        "--state", action=OneFolder, required=True, help="state folder for per-day cells (local or gs://)"
    )
    parser.add_argument("--from", dest="day_from", metavar="YYYY-MM-DD", help="first day to aggregate (inclusive)")
    parser.add_argument("--to", dest="day_to", metavar="YYYY-MM-DD", help="last day to aggregate (inclusive)")
    parser.add_argument(
        "--scores", action=GivenOnce, metavar="GLOB", help="ordinal score Parquet files to aggregate too"
    )
    parser.add_argument(
        "--family-map", metavar="PATH", action=OneFile, help="JSON family rules tried before the defaults"
    )
    parser.add_argument(
        "--aliases", metavar="PATH", action=OneFile, help="JSON object: judge/model name -> canonical name"
    )
    parser.add_argument(
        "--batch-rows", type=NumberRule(integer=True, low=1).flag_type("--batch-rows"), help=argparse.SUPPRESS
    )
    defaults_from(parser, BackfillOptions())


def run(args: argparse.Namespace, beam_args: list[str]) -> int:
    job = options_from(BackfillOptions, args)
    # Before the bucket checks below, which are the first to ask Beam for credentials.
    storage.configure_gcs(no_auth=beam_options(beam_args).view_as(GoogleCloudOptions).no_auth)
    low = validate_day(job.day_from, "--from") if job.day_from else None
    high = validate_day(job.day_to, "--to") if job.day_to else None
    if low and high and low > high:
        raise InputError(f"--from {low} is after --to {high}")
    family_map = validation.family_map(job.family_map)
    aliases = load_aliases(job.aliases)
    validation.outside_input((("--input", args.input), ("--scores", job.scores)), state=args.state)
    validation.writable_folder(args.state, "--state")
    validation.not_owned(args.state, "--state", state=False)
    validation.input_buckets(("--input", args.input), ("--scores", job.scores))
    # The state's lock, as a refresh takes it: a backfill beside a refresh (or another backfill) on one state raced
    # its day partitions and manifests.  Taken once the input is checked, and held while the summary writes the
    # repeated-id cache.
    with ExitStack() as held:
        result = run_backfill(
            args.input,
            args.state,
            beam_args,
            family_map=family_map,
            scores_glob=job.scores,
            day_range=(low, high),
            batch_rows=job.batch_rows,
            aliases=aliases,
            hold=lambda state: held.enter_context(folder_lock(state, "backfill")),
        )
        summary = backfill_summary(result, aliases)
    print(summary)
    return 0 if result.counts.conserved else 1
