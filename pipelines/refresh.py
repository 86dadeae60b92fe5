"""``biasboard refresh``: the scheduled job — aggregate what is new, merge, fit, publish.

    biasboard refresh --input 'logs/battles/day=*/*.parquet' --state STATE --out OUT [Beam options]
    biasboard refresh --scores 'grades/scores/day=*/*.parquet' --state STATE --out OUT   # ordinal-only

Either input may be given alone or both: with ``--scores`` and no ``--input``
the board is *ordinal-only* (single grades such as MT-Bench's: the many-facet
model alone, judge severity and prompt difficulty; the naive board is the grades
pooled over judges and prompts), and the audit, the pair diagnostics, anchors,
slices and plans, which need battles, are skipped or refused.

1. **read** (launcher): list the input files, group them by day and
   fingerprint each day (path, size, modification time, checksum of every
   file); a day is *new* when the state has no committed partition for it,
   *changed* when its fingerprint differs from the one stored in the day's
   state manifest.
2. **one pipeline** (:func:`build_refresh`), wherever the Beam options say:
   *aggregate* only those days (:class:`~biasboard.transforms.ingest.AggregateDays`
   replaces each day's cells partition — never adds to it — so re-running never
   double-counts); *audit* the whole input when it changed
   (:mod:`biasboard.transforms.audit`); then *fit*: the last stage
   (:class:`~biasboard.transforms.fit.FitModels`) merges every stored day's
   cells on one worker, fits both models (naive Bradley–Terry and the
   bias-aware model), renders the report and stages the snapshot's files.
3. **publish** (launcher): the staged snapshot is made visible by one rename
   and ``LATEST`` is replaced (:mod:`biasboard.transforms.publish`).

Running it twice on the same input aggregates nothing the second time and
publishes nothing new: ``LATEST`` stays.  So does a refit that makes the board
``LATEST`` holds (the same files and fit options; e.g. a day file uploaded again
with the same rows): no second snapshot of one board is published, and the
state notes that these inputs make ``LATEST`` (:func:`_remember_fit`).  The fit is
deterministic in the stored cells, so a run killed at any point and re-run
publishes exactly what an uninterrupted run would have, once.

The launcher (an Airflow task, a cron host) only compares fingerprints and
renames a folder; a multi-GB fit runs on a worker that asks for
``--fit-min-ram`` (a Beam resource hint).  Locally FnApiRunner runs the same
graph.  With ``--dry_run`` or ``--template_location`` the job is only built
(and staged): nothing runs and nothing is published.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import io
import json
import logging
import platform
import time
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from importlib import metadata
from typing import Any

import apache_beam as beam
import polars as pl
from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions, StandardOptions, TestOptions
from biasboard.pipelines import validation
from biasboard.pipelines.code_fingerprint import code_fingerprint
from biasboard.pipelines.options import GivenOnce, OneFile, OneFolder, beam_options, defaults_from, options_from
from biasboard.pipelines.validation import NumberRule
from biasboard.plan.acquisition import POPULATION_JUDGE
from biasboard.ranking import ModelConfig
from biasboard.ranking.config import LENGTH_CLIP_EDGES
from biasboard.ranking.reference import Reference, ReferenceSettings
from biasboard.report.text import ORDINAL_TITLES, PAIRWISE_TITLES, agreement_text, fmt, side_by_side_text
from biasboard.schemas import summary as S
from biasboard.schemas.errors import InputError, StateError, raise_if_unreachable
from biasboard.schemas.families import FamilyMap
from biasboard.schemas.names import AliasMap
from biasboard.schemas.summary import Summary
from biasboard.transforms import publish, read, repeated_ids, state, storage
from biasboard.transforms.anchors import unmatched_aliases
from biasboard.transforms.audit import (
    AUDIT_JSON,
    DAY_PARTIALS,
    audit_days_incremental,
    audit_inputs,
    day_partials_dir,
    stored_day_key,
)
from biasboard.transforms.audit import (
    METRICS_NAMESPACE as AUDIT_METRICS,
)
from biasboard.transforms.fit import DEFAULT_FIT_RAM, FitModels
from biasboard.transforms.ingest import METRICS_NAMESPACE as INGEST_METRICS
from biasboard.transforms.ingest import committed, day_tasks, ingest_days, ingest_settings
from biasboard.transforms.judge_pool import JudgePool
from biasboard.transforms.plan import LEFT_BEFORE_WRITING as PLAN_NOT_WRITTEN
from biasboard.transforms.plan import MAX_BUDGET, PlanTooLarge, has_posterior, make_plan
from biasboard.transforms.publish import failpoint
from biasboard.transforms.run_lock import folders_lock
from biasboard.transforms.runner import counters, run_to_completion
from biasboard.transforms.slices import DEFAULT_MIN_BATTLES, parse_slices
from biasboard.transforms.snapshot import AUDIT_INPUTS, DaysWithoutInput, FitSpec

_LOG = logging.getLogger(__name__)


# --------------------------------------------------------------------------- CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--input",
        action=GivenOnce,
        help="battle Parquet files: a glob or a folder (local or gs://; a `biasboard import --out` folder, or its "
        "battles/, is read without its dead letters, which the summary and report count as rejected at import; a glob "
        "of such folders, e.g. 'imp/*/battles', reads each as if given alone); optional with --scores",
    )
    parser.add_argument(
        "--state", action=OneFolder, required=True, help="state folder: per-day cells, dead letters, manifests"
    )
    parser.add_argument(
        "--out", action=OneFolder, required=True, help="output folder: snapshots/ and LATEST (local or gs://)"
    )
    parser.add_argument(
        "--scores",
        action=GivenOnce,
        dest="scores_glob",
        help="ordinal score Parquet files (glob or folder), e.g. from 'biasboard import --format mtbench-single'; "
        "alone (no --input) they make an ordinal-only board",
    )
    parser.add_argument(
        "--family-map",
        "--families",
        dest="families",
        action=OneFile,
        help="family map file (model/judge name → family), tried before the defaults; as in backfill and audit",
    )
    parser.add_argument(
        "--aliases", action=OneFile, help="JSON object: judge/model name -> canonical name (e.g. case variants)"
    )
    parser.add_argument("--k", **_number("--k"), help="top-k for the membership probabilities (default %(default)s)")
    parser.add_argument(
        "--bootstrap", **_number("--bootstrap"), help="Poisson-bootstrap replicates (default %(default)s: Laplace)"
    )
    parser.add_argument("--seed", **_number("--seed"), help="seed of the Monte Carlo parts (default %(default)s)")
    parser.add_argument("--title", help="title of report.html (default %(default)r)")
    parser.add_argument(
        "--no-audit", dest="audit", action="store_false", help="skip the judge audit (order, length, family)"
    )
    parser.add_argument(
        "--anchors",
        action=GivenOnce,
        help="trusted verdicts (battle-shaped Parquet glob): correct a judge's bias only where these anchors "
        "support it (the trusted-anchor gate), and score each judge's gold-label accuracy",
    )
    parser.add_argument(
        "--reference",
        help="what 'unbiased' means: 'none' (each judge's effects against zero, style control), 'anchors' (the "
        "--anchors raters; the default when --anchors is given) or JUDGE[,JUDGE...] (judges of the input, e.g. "
        "human pools, pooled; a glob such as 'human-pool-1/*' selects a pool of voter-judges, and a name that is "
        "a judge's exact name, such as 'judge[1]', is that judge, a glob only when no judge has it): judges are "
        "corrected only for their excess over the reference, and the corrected rating is what the reference "
        "concludes on each model's typical answers",
    )
    parser.add_argument(
        "--gate-level",
        **_number("--gate-level"),
        help="family-wise level of the trusted-anchor gate (default %(default)s): an effect is corrected only where "
        "the judges' excesses over the reference are jointly significant at this level (Holm over effects)",
    )
    parser.add_argument(
        "--apply-unidentified",
        action="store_true",
        help="also apply corrections the identifiability check reports as prior-selected (default: listed in the "
        "summary with what applying them would change, not applied)",
    )
    parser.add_argument(
        "--length-clip",
        **_number("--length-clip"),
        help="bound of the length covariate |ln(len_a/len_b)| (a length-bin edge, 0.25..2.5; 'none' = unbounded; "
        "default %(default)s, a 4.5x length ratio): past it a judge's verbosity preference is taken to saturate",
    )
    parser.add_argument(
        "--diagnostics",
        choices=("full", "fast", "off"),
        default="full",
        help="profile-likelihood identifiability checks: full (each point solved), fast (quadratic approximation "
        "from one factorisation per effect), off (no checks, and no "
        "account of what moved each model: summary.json's attribution, export's moves table; default full)",
    )
    parser.add_argument(
        "--judge-pool",
        default=None,
        help="fit one judge per pool: 'prefix:SEP' pools judges by their name up to SEP (e.g. 'prefix:/' fits all "
        "'arena/<voter>' as 'arena'); 'column:NAME' makes each battle's (and grade's) judge the value of its column "
        "NAME (e.g. 'column:voter_group'; a null or blank value keeps the row's own judge; applied while days are "
        "aggregated, so changing it re-aggregates every day); default: every judge its own effect, voters shrunk "
        "to their population",
    )
    parser.add_argument(
        "--plan-budget",
        **_number("--plan-budget"),
        help="also plan this many next comparisons (top-k-aware) from the new snapshot, for every judge of the fit's "
        "battles, or for '*' (a new judge of the population: the next crowd voter) on a board of voter-judges too "
        "many to weigh each (default %(default)s: no plan)",
    )
    parser.add_argument(
        "--slices",
        help="also fit a naive and a corrected board per label of these optional battle columns "
        "(category,language): slices.parquet and a Slices section in the report; unlabelled battles count on "
        "the overall board only",
    )
    parser.add_argument(
        "--slice-min-battles",
        **_number("--slice-min-battles"),
        help="battles a slice needs to be fit (default %(default)s); smaller slices are listed, not fit",
    )
    parser.add_argument(
        "--fit-min-ram", help="memory the fit stage asks its worker for (a Beam resource hint; default %(default)s)"
    )
    parser.add_argument(
        "--drop-missing-days",
        action="store_true",
        help="remove stored days no input file matches any more from the state before the fit (default: keep "
        "them in the fit; either way refresh logs them and summary.json's days lists them)",
    )
    parser.add_argument(
        "--refit",
        action="store_true",
        help="fit even when nothing changed since the LATEST snapshot (default: it stays LATEST); a board the same "
        "as LATEST's (its files and fit options) is still not published again",
    )
    defaults_from(parser, RefreshOptions())


#: The most bootstrap replicates a refresh runs.  Why a bound: ``--bootstrap 1000000000`` was killed for its memory
#: (or, capped, failed in a numpy traceback) with nothing said.  At 10,000 the Monte Carlo error of a 95% percentile
#: interval's ends is ~0.7% of its width (normal case: √(0.025·0.975/B)/φ(1.96) SDs against 3.92), and 100
#: replicates take ~5.5 s at 530k cells (bench/bootstrap.py), so 10,000 take ~10 minutes.
MAX_BOOTSTRAP = 10_000

#: The numeric flags and what each accepts: one rule reads the command line (``type=``) and checks the
#: options a caller of :func:`refresh` passed (:func:`check_options`), naming the flag either way.
NUMBER_FLAGS: dict[str, tuple[str, NumberRule]] = {
    "--k": ("k", NumberRule(integer=True, low=1)),
    "--bootstrap": ("bootstrap", NumberRule(integer=True, low=0, high=MAX_BOOTSTRAP)),
    "--seed": ("seed", NumberRule(integer=True, low=0)),
    "--gate-level": ("gate_level", NumberRule(above=0.0, below=1.0)),
    "--length-clip": ("length_clip", NumberRule(edges=LENGTH_CLIP_EDGES, none="none")),
    "--plan-budget": ("plan_budget", NumberRule(integer=True, low=0)),
    "--slice-min-battles": ("slice_min_battles", NumberRule(integer=True, low=1)),
}


def _number(flag: str) -> dict[str, Any]:
    """``add_argument`` keywords of a numeric flag: read and checked by its :data:`NUMBER_FLAGS` rule."""
    return {"type": NUMBER_FLAGS[flag][1].flag_type(flag)}


#: Rows of each leaderboard ``refresh`` prints when it is done.
TOP_PRINTED = 10


def warning_lines(summary: S.Summary) -> list[str]:
    """The summary's warnings (the report's Warnings box) as console lines, ``warning: …`` each: a scheduled
    refresh's log is often all anyone reads, and a board published with a warning must not read as a clean one."""
    return [f"warning: {warning}" for warning in summary.warnings]


def run(args: argparse.Namespace, beam_args: list[str]) -> int:
    outcome = refresh(
        args.input,
        args.state,
        args.out,
        beam_args,
        options_from(RefreshOptions, args),
    )
    if outcome.published is None:
        print(f"job built, not run ({outcome.reason}); nothing published")
        return 0
    if outcome.reason:  # nothing new: LATEST stays, and the line says why
        print(outcome.reason)
    else:
        print(f"snapshot {outcome.published.snapshot_id} published to {outcome.published.path}")
    if outcome.leaderboard is not None and outcome.summary is not None:
        ordinal = outcome.summary.board == S.ORDINAL_ONLY
        if ordinal:
            print(f"ordinal-only board (single grades, no battles): {S.ORDINAL_ONLY_BOARDS}")
        print(side_by_side_text(outcome.leaderboard, TOP_PRINTED, ORDINAL_TITLES if ordinal else PAIRWISE_TITLES))
        print(f"Kendall tau naive vs corrected: {fmt(outcome.summary.kendall_tau, 3)}")
        agreement = agreement_text(outcome.summary.reference)
        if agreement:
            print(agreement)
        for line in warning_lines(outcome.summary):
            print(line)
    print(f"report: {storage.join(outcome.published.path, 'report.html')}")
    if outcome.plan_path:
        print(f"plan: {outcome.plan_path}")
    return 0


# --------------------------------------------------------------------------- the job


@dataclass(frozen=True)
class RefreshOptions:
    """The job's own options (Beam's come separately)."""

    scores_glob: str | None = None
    families: str | None = None
    aliases: str | None = None
    k: int = 10
    bootstrap: int = 0
    seed: int = 0
    title: str = "biasboard report"
    audit: bool = True
    anchors: str | None = None
    plan_budget: int = 0
    length_clip: float | None = 1.5
    diagnostics: str = "full"
    judge_pool: str | None = None
    reference: str | None = None
    gate_level: float = 0.05
    apply_unidentified: bool = False
    fit_min_ram: str = DEFAULT_FIT_RAM
    refit: bool = False
    slices: str | None = None  # "category,language"
    slice_min_battles: int = DEFAULT_MIN_BATTLES
    drop_missing_days: bool = False


@dataclass
class Outcome:
    """What a refresh did: the snapshot (None for a dry run), its summary and the days it aggregated.

    ``reason``: why nothing was published, when nothing was — the build-only flag (``--dry_run``), or the
    nothing-new line (:func:`nothing_new`) when ``LATEST`` stays.
    """

    published: publish.Published | None
    summary: Summary | None = None
    aggregated_days: list[str] = field(default_factory=list)
    reason: str = ""
    job: object | None = None
    plan_path: str | None = None
    leaderboard: pl.DataFrame | None = None


@dataclass
class Timings:
    """Wall time per stage, for the manifest and the log."""

    stages: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def stage(self, name: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.stages[name] = round(time.perf_counter() - start, 3)


#: What a refresh that lost its storage before moving ``LATEST`` leaves (:func:`storage.if_unreachable`): a day's
#: partition counts only once its manifest is written last, and ``LATEST`` moves only after the snapshot is whole.
LEFT_BEFORE_PUBLISHING = (
    "nothing was published (LATEST was not moved), the state holds only complete days, and a rerun resumes from them"
)
#: What a refresh had done when storage is lost while it writes the plan, after publishing; the plan's step then
#: says what it left of the plan (:data:`~biasboard.transforms.plan.LEFT_BEFORE_WRITING`, :func:`~biasboard.transforms
#: .plan.left_writing`).
LEFT_AFTER_PUBLISHING = "the snapshot was published (LATEST names it)"


@storage.if_unreachable(LEFT_BEFORE_PUBLISHING)
def refresh(
    input_glob: str | None,
    state_dir: str,
    out_dir: str,
    beam_args: list[str] | None = None,
    options: RefreshOptions | None = None,
) -> Outcome:
    """Aggregate new/changed days, merge all cells, fit both models, publish a snapshot.

    ``input_glob`` None: ordinal-only (``options.scores_glob`` must be given; see the module docstring).
    """
    options = options or RefreshOptions()
    check_inputs(input_glob, options)
    # the workers write these folders: a relative path would be taken from each worker's own working directory
    state_dir, out_dir = storage.launcher_path(state_dir), storage.launcher_path(out_dir)
    input_glob = storage.launcher_path(input_glob)
    options = replace(
        options, scores_glob=storage.launcher_path(options.scores_glob), anchors=storage.launcher_path(options.anchors)
    )
    if input_glob is None:  # the audit reads battles: there are none
        options = replace(options, audit=False)
    beam_args = list(beam_args or [])
    pipeline_options = beam_options(beam_args, validate=True)
    storage.configure_gcs(no_auth=pipeline_options.view_as(GoogleCloudOptions).no_auth)
    family_map = check_options(state_dir, out_dir, options)
    inputs = (("--input", input_glob), ("--scores", options.scores_glob))
    validation.outside_input(inputs, state=state_dir, out=out_dir)
    validation.input_buckets(*inputs, ("--anchors", options.anchors))
    aliases = read.load_aliases(options.aliases)
    import_rejected = read.import_rejections([("--input", input_glob), ("--scores", options.scores_glob)])
    spec = FitSpec(
        model_config(options),
        Reference.parse(options.reference, bool(options.anchors)),
        ReferenceSettings(options.gate_level, options.apply_unidentified),
        options.anchors,
        family_map,
        parse_slices(options.slices),
        options.slice_min_battles,
        tuple(import_rejected),
        aliases=aliases,
    )
    with folders_lock([state_dir, out_dir]):  # one refresh at a time on a state and an output (transforms.run_lock)
        return _refresh_checked(input_glob, state_dir, out_dir, options, pipeline_options, family_map, aliases, spec)


def _refresh_checked(
    input_glob: str | None,
    state_dir: str,
    out_dir: str,
    options: RefreshOptions,
    pipeline_options: PipelineOptions,
    family_map: FamilyMap,
    aliases: AliasMap | None,
    spec: FitSpec,
) -> Outcome:
    """:func:`refresh` once its flags, folders and inputs are checked and it holds the folders' locks."""
    inputs = (("--input", input_glob), ("--scores", options.scores_glob))
    timings = Timings()
    started = dt.datetime.now(dt.timezone.utc)

    with timings.stage("read"):
        settings = ingest_settings(
            family_map, aliases, JudgePool.parse(options.judge_pool).column, grades=options.scores_glob is not None
        )
        changes = input_changes(input_glob, state_dir, options.scores_glob, settings)
    for flag, given, kind in (("--input", input_glob, "files"), ("--scores", options.scores_glob, "score_files")):
        if given:
            matched = [f["path"] for fp in changes.fingerprints.values() for f in fp[kind] or []]
            validation.files_outside(flag, given, matched, state=state_dir, out=out_dir)
    _LOG.info(
        "read: %d input file(s) over %d day(s): %d new, %d changed, %d unchanged",
        changes.n_files,
        len(changes.fingerprints),
        len(changes.new),
        len(changes.changed),
        len(changes.unchanged),
    )
    if changes.without_input:
        _LOG.warning(
            "read: %d stored day(s) have no input file any more: %s; %s",
            len(changes.without_input),
            ", ".join(changes.without_input),
            "dropping them from the state (--drop-missing-days)"
            if options.drop_missing_days
            else "kept in the fit (--drop-missing-days removes them)",
        )
    todo = changes.new + changes.changed
    audit = AuditPlan.of(state_dir, changes, options, family_map)
    staging = publish.new_staging(out_dir)

    def graph(days_without_input: DaysWithoutInput) -> beam.Pipeline:
        """The one refresh graph; only what happens to stored days without input differs between calls."""
        return build_refresh(
            pipeline_options,
            input_glob,
            state_dir,
            staging,
            todo,
            spec,
            options,
            family_map,
            aliases,
            audit,
            days_without_input,
        )

    build_only = _build_only_reason(pipeline_options)
    if build_only:
        job = graph(DaysWithoutInput(kept=tuple(changes.without_input))).run()
        _LOG.info("refresh: %s: the job was built, nothing ran, nothing is published", build_only)
        return Outcome(None, aggregated_days=todo, reason=build_only, job=job)
    failpoint("after-read")

    reads = tuple(flag for flag, given in inputs if given)
    without_input = drop_days_without_input(state_dir, changes, options.drop_missing_days, settings, reads)
    fit_key = _fit_inputs_digest(state_dir, changes, options, family_map, aliases, spec.import_rejected)
    if not todo and not audit.rerun and not options.refit and not without_input.dropped:
        reused = _reuse_latest(out_dir, state_dir, fit_key)
        if reused is not None:
            return _with_plan(reused, out_dir, options)

    publish.clean_staging(out_dir)  # what killed runs left; this run stages its snapshot next
    audit.start()
    with timings.stage("pipeline"):
        result = run_to_completion(graph(without_input))
    metrics: dict[str, int] = {}
    if todo:
        ingested = committed(state_dir, todo, bool(options.scores_glob), counters(result, INGEST_METRICS))
        metrics = dict(sorted(ingested.metrics.items()))
        _LOG.info(
            "aggregate: %d day(s): read %d rows, counted %d, rejected %d",
            len(ingested.days),
            ingested.counts.read,
            ingested.counts.counted,
            ingested.counts.rejected_total,
        )
    else:
        _LOG.info("aggregate: nothing new; the stored cells are up to date")
    audit.finish()
    audit_ms = counters(result, AUDIT_METRICS) if audit.rerun else {}
    for name, ms in sorted(audit_ms.items()):  # days_ms, sum_ms: parts of the pipeline's time
        timings.stages[f"audit_{name.removesuffix('_ms')}"] = round(ms / 1000, 3)

    record = publish.read_run_record(staging)
    summary = Summary.from_json(json.loads(storage.read_text(storage.join(staging, "summary.json"))))
    leaderboard = pl.read_parquet(io.BytesIO(storage.read_bytes(storage.join(staging, "leaderboard.parquet"))))
    ordinal = summary.board == S.ORDINAL_ONLY
    counts = summary.score_counts if ordinal and summary.score_counts is not None else summary.counts
    _LOG.info(
        "fit: %d models, %d judges, %d cells; %d %s read, %d counted, %d rejected over %d day(s)",
        leaderboard.height,
        summary.n_judges,
        record.get("n_cells", 0),
        counts.read,
        "grades" if ordinal else "rows",
        counts.counted,
        counts.rejected_total,
        summary.days.count,
    )
    _note_unmatched_aliases(aliases, state_dir, options.anchors)
    timings.stages.update(record.get("timings_s", {}))

    manifest = {
        "job": "refresh",
        "started_at": started.isoformat(timespec="seconds"),
        "inputs": {
            "glob": input_glob,
            "scores_glob": options.scores_glob,
            "digest": changes.digest,
            "days": changes.fingerprints,
            "family_map": {"path": options.families, "sha256": family_map.digest()},
            "aliases": {"path": options.aliases, "sha256": aliases.digest()} if aliases is not None else None,
        },
        "state": state_dir,
        "aggregated_days": todo,
        "days_without_input": {"kept": list(without_input.kept), "dropped": list(without_input.dropped)},
        "versions": versions(),
        "options": {
            "refresh": asdict(options),
            "model": record.get("model_options", {}),
            "beam": _beam_options_for_manifest(pipeline_options),
        },
        "metrics": {"this_run": metrics, "source": "Beam counters of this run's aggregation (empty: nothing new)"},
        # As in summary.json: ``counts`` the battle rows, ``score_counts`` the grade rows (it held the grades' under
        # ``counts`` on an ordinal-only board, and left them out beside battles).
        "counts": S.to_jsonable(summary.counts),
        "score_counts": S.to_jsonable(summary.score_counts) if summary.score_counts is not None else None,
        "timings_s": timings.stages,
        "fit_inputs_sha256": fit_key,
    }
    previous = publish.latest_snapshot_id(out_dir)
    with timings.stage("publish"):
        same_board = _same_board(options, record.get("model_options", {}))
        published = publish.publish_staged(out_dir, staging, manifest, same_board=same_board)
    _remember_fit(state_dir, fit_key, published.snapshot_id)
    storage.delete([storage.join(state_dir, DROPPED)])  # the board just published lists the days dropped
    reason = ""
    if published.snapshot_id == previous:  # e.g. a day file uploaded again with the same rows
        reason = nothing_new(previous, "refitted: the same board, identical content and options")
        _LOG.info("refresh: %s", reason)
    else:
        _LOG.info(
            "publish: snapshot %s is LATEST; stage times: %s",
            published.snapshot_id,
            ", ".join(f"{k} {v:.2f} s" for k, v in timings.stages.items()),
        )
    return _with_plan(Outcome(published, summary, todo, reason, leaderboard=leaderboard), out_dir, options)


def _with_plan(outcome: Outcome, out_dir: str, options: RefreshOptions) -> Outcome:
    """``outcome`` with the plan ``--plan-budget`` asks for, made from its snapshot."""
    if not options.plan_budget or outcome.published is None:
        return outcome
    with storage.if_unreachable_after(LEFT_AFTER_PUBLISHING), storage.if_unreachable(PLAN_NOT_WRITTEN):
        if not has_posterior(out_dir, outcome.published.snapshot_id):  # a board of one model: nothing to compare
            _LOG.warning("--plan-budget: the snapshot rates fewer than two models, so there is no comparison to plan")
            return outcome
        try:
            # --seed seeds every Monte Carlo part, the plan's draws of P(top k) too (its plan.json said seed 0)
            plan = make_plan(out_dir, options.plan_budget, snapshot_id=outcome.published.snapshot_id, seed=options.seed)
        except PlanTooLarge as err:
            # Voter-judges, too many to weigh each for every pair (and none can be asked again by name): refresh has no
            # --judge, so it plans what an arena asks next — pairs for a new judge of the population — and says so.
            # The plan's own notes say so too: the log is gone by the time someone reads plan.json.
            fallback = (
                f"--plan-budget: {err}; planned for {POPULATION_JUDGE!r} instead (`biasboard plan --judge ...` plans "
                "for named judges)"
            )
            _LOG.warning("%s", fallback)
            plan = make_plan(
                out_dir,
                options.plan_budget,
                snapshot_id=outcome.published.snapshot_id,
                seed=options.seed,
                judges=[POPULATION_JUDGE],
                notes=[fallback],
            )
    outcome.plan_path = plan.paths[0] if plan.paths else None
    return outcome


#: Options that change nothing in a snapshot's content (a plan is written beside it, not in it).
_NOT_FIT_INPUTS = ("refit", "plan_budget", "fit_min_ram")


def _fit_inputs_digest(
    state_dir: str,
    changes: InputChanges,
    options: RefreshOptions,
    family_map: FamilyMap,
    aliases: AliasMap | None,
    import_rejected: tuple[S.ImportRejections, ...] = (),
) -> str:
    """One digest of everything a snapshot's content depends on, kept in its manifest.

    The input's per-day fingerprints (which fix the stored cells), the stored days whose battle ids cannot be
    checked for repeats (a backfill that mends them changes no fingerprint, but the summary's check), the maps,
    the anchors' file fingerprints, every option that reaches the fit or the
    report, what the input's import rejected (the summary reports it), the library versions and the fingerprint
    of biasboard's code.  Equal digests mean a refit would publish the same files again.
    """
    return _digest(
        {
            "state": state_dir,
            "inputs": changes.digest,
            "kept_without_input": changes.kept(options),
            "unchecked_ids": changes.unchecked_ids,
            "family_map": family_map.digest(),
            "aliases": aliases.digest() if aliases is not None else None,
            "anchors": _anchors_fingerprint(options),
            "import_rejected": S.to_jsonable(list(import_rejected)),
            "options": _fit_options(asdict(options)),
            "versions": versions(),
        }
    )


def _fit_options(refresh_options: Mapping[str, object]) -> dict[str, object]:
    """The refresh options (as a manifest records them) that reach the fit or the report.

    An option given empty (``--slices ''``, ``--reference ''``) does what it does when not given: the same value.
    """
    return {k: (None if v == "" else v) for k, v in refresh_options.items() if k not in _NOT_FIT_INPUTS}


def _same_board(options: RefreshOptions, model_options: Mapping[str, object]) -> publish.SameBoard:
    """Whether a snapshot's manifest records the options this run fitted with (a board is its files and these).

    Equal files made with other options (another ``--gate-level`` without a reference) are published anew, so
    a manifest never claims options its board was not made with.  Run-specific fields (times, input
    fingerprints, Beam options, library versions) are not compared: they do not change the board.
    """

    def options_of(refresh_options: object, model: object) -> object:
        fit = _fit_options(refresh_options) if isinstance(refresh_options, Mapping) else None
        return json.loads(publish.json_bytes({"refresh": fit, "model": model}))

    wanted = options_of(asdict(options), model_options)

    def same(manifest: Mapping[str, object]) -> bool:
        recorded = manifest.get("options")
        if not isinstance(recorded, Mapping):
            return False
        return options_of(recorded.get("refresh"), recorded.get("model")) == wanted

    return same


def _note_unmatched_aliases(aliases: AliasMap | None, state_dir: str, anchors: str | None) -> None:
    """A note (a log line, not a warning) naming the entries of ``--aliases`` that renamed no counted row of any
    stored day and no name of the anchors (:func:`~biasboard.transforms.anchors.unmatched_aliases`).

    Why: a map that matched nothing (a stale or wrong file, names spelled otherwise than the logs') was silent, only
    ``renamed: 0`` in summary.json; and a map most of whose entries matched said nothing of the one with a typo.
    A map reused across days may rightly miss some names on some days, so the entries are matched over every day
    the state holds."""
    if aliases is None or not aliases.aliases:  # no map: the state's days are not listed (a bucket listing on gs://)
        return
    manifests = (state.read_day_manifest(state_dir, day) or {} for day in state.list_state_days(state_dir))
    note = unmatched_aliases(aliases, manifests, anchors)
    if note:
        _LOG.info("%s", note)


def _anchors_fingerprint(options: RefreshOptions) -> list[dict] | None:
    """The anchor files' fingerprints (path, size, mtime, checksum): they change when an anchor file does."""
    if not options.anchors:
        return None
    return [
        f.fingerprint()
        for files in read.list_input_days(options.anchors, check=False, flag="--anchors").values()
        for f in files
    ]


#: Bumped when the stored per-day audit partials change form (every day is then audited again).
# 3: cluster rows and the clustered squares (standard errors); 4: gold accuracy's squares; 5: a cluster is the judge's
# verdicts on a prompt (every pair), not on a prompt and pair; 6: the order pairs carry the flip rate's and the
# consistent win rates' sums over (judge, prompt) clusters; 7: a day's partials carry the sketch of its (judge, prompt)
# keys (``recurrence``: how many clusters recur on other days); 8: the order pairs carry the per-model sums over prompt
# clusters across judges (``pcl_*``: the pooled consistent win rate's SE); 9: a day's partials keep its clusters' sums
# by key (``closed_clusters``, ``closed_pairs``: the history closure) and each SE's cluster count (CR1's G); 10: the
# sketch's keys hashed by biasboard's own hash (``pair_hash``), not polars' (stable within a polars version only)
AUDIT_DAYS_VERSION = 10


#: The state's note of the last fit: its fit-inputs digest and the snapshot it made (or found it made again).
LAST_FIT = "last_fit.json"


def _remember_fit(state_dir: str, fit_key: str, snapshot_id: str) -> None:
    """Note that the fit inputs ``fit_key`` make snapshot ``snapshot_id``.

    A snapshot's manifest keeps the fit inputs it was made from; when a refit of
    other inputs (a day file uploaded again, same rows, new modification time)
    made the same board, nothing is published and this note is what lets the
    next refresh of those inputs skip the fit (:func:`_reuse_latest`).
    """
    record = {"fit_inputs_sha256": fit_key, "snapshot_id": snapshot_id}
    storage.atomic_write_bytes(storage.join(state_dir, LAST_FIT), publish.json_bytes(record))


def _fit_inputs_of(state_dir: str, snapshot_id: str, manifest: Mapping[str, object]) -> set[object]:
    """The fit-inputs digests known to make ``snapshot_id``: its manifest's, and the state's note's if it names it."""
    known = {manifest.get("fit_inputs_sha256")}
    path = storage.join(state_dir, LAST_FIT)
    try:
        record = json.loads(storage.read_text(path)) if storage.exists(path) else {}
    except (OSError, ValueError, StateError) as err:  # a note only saves a fit: without it the board is refitted
        raise_if_unreachable(err)  # not unreadable: out of reach
        _LOG.warning("refresh: %s is unreadable (%s); ignored", path, err)
        record = {}
    if isinstance(record, Mapping) and record.get("snapshot_id") == snapshot_id:
        known.add(record.get("fit_inputs_sha256"))
    return known


def nothing_new(snapshot_id: str, why: str) -> str:
    """The one line a refresh that publishes nothing says (logged, and printed by the CLI)."""
    return f"nothing new since snapshot {snapshot_id} ({why}); it stays LATEST"


def _reuse_latest(out_dir: str, state_dir: str, fit_key: str) -> Outcome | None:
    """The LATEST snapshot, when it was made from exactly these fit inputs (nothing new: no refit)."""
    latest = publish.latest_snapshot_id(out_dir)
    if latest is None:
        return None
    try:
        path = publish.resolve_snapshot(out_dir, latest)
        if fit_key not in _fit_inputs_of(state_dir, latest, publish.read_snapshot_manifest(path)):
            return None
        summary = Summary.from_json(json.loads(storage.read_text(storage.join(path, "summary.json"))))
        leaderboard = pl.read_parquet(io.BytesIO(storage.read_bytes(storage.join(path, "leaderboard.parquet"))))
    except (OSError, ValueError, StateError) as err:  # gone, incomplete or unreadable: refit rather than trust it
        raise_if_unreachable(err)  # not gone: out of reach
        _LOG.warning("refresh: LATEST cannot be reused (%s); fitting and publishing a new snapshot", err)
        return None
    reason = nothing_new(latest, "same inputs, options and versions")
    _LOG.info("refresh: %s", reason)
    return Outcome(publish.Published(latest, path, reused=True), summary, [], reason, leaderboard=leaderboard)


def build_refresh(
    pipeline_options: PipelineOptions,
    input_glob: str | None,
    state_dir: str,
    staging: str,
    days: list[str],
    spec: FitSpec,
    options: RefreshOptions,
    family_map: FamilyMap,
    aliases: AliasMap | None,
    audit: AuditPlan,
    without_input: DaysWithoutInput,
) -> beam.Pipeline:
    """The refresh graph, built and not run: ingest ``days``, audit (when its input changed), fit and stage.

    The same graph runs locally (FnApiRunner), on a cluster, and is what a
    ``--dry_run`` or ``--template_location`` builds.  The fit waits for every
    day to be committed and for the audit's files.
    """
    pipeline = beam.Pipeline(options=pipeline_options)
    if days:
        tasks = day_tasks(input_glob, days, scores_glob=options.scores_glob)
        judge_column = JudgePool.parse(options.judge_pool).column
        written = ingest_days(pipeline, tasks, state_dir, family_map, aliases=aliases, judge_column=judge_column)
    else:
        written = pipeline | "NothingNew" >> beam.Create([])
    after = []
    if audit.rerun and input_glob is not None:  # never reruns without battles: refresh turns the audit off
        input_days, out, families, lookup = audit_inputs(
            input_glob, audit.written_to, options.anchors, family_map, aliases, beside=options.scores_glob
        )
        days_dir = storage.join(state_dir, DAY_PARTIALS)
        settings = _digest({"anchors": _anchors_fingerprint(options), "audit_version": AUDIT_DAYS_VERSION})
        todo_audit, keys = {}, {}
        for day, files in input_days.items():
            keys[day] = _digest({"day": audit.day_digests.get(day), "settings": settings})
            if stored_day_key(days_dir, day) != keys[day]:
                todo_audit[day] = (files, keys[day])
        _LOG.info("audit: %d of %d day(s) to audit; the others' partials are stored", len(todo_audit), len(input_days))
        kept_audited = _kept_days_audited(state_dir, without_input.kept, settings, keys)
        stored = list(input_days) + kept_audited
        after.append(
            audit_days_incremental(
                pipeline,
                todo_audit,
                stored,
                days_dir,
                out,
                families,
                lookup,
                aliases,
                JudgePool.parse(options.judge_pool).column,
                keys=keys,
                left_out=sorted(set(without_input.kept) - set(kept_audited)),
            )
        )
    _ = written | "FitModels" >> FitModels(
        state_dir,
        staging,
        spec,
        audit_dir=audit.written_to if options.audit else None,
        title=options.title,
        after=after,
        min_ram=options.fit_min_ram,
        without_input=without_input,
    )
    return pipeline


def _kept_days_audited(state_dir: str, kept: tuple[str, ...], settings: str, keys: dict[str, str]) -> list[str]:
    """The days kept in the fit without input whose stored audit partials are current, their keys put in ``keys``.

    Why: the board keeps such a day (``--drop-missing-days`` not given), so the snapshot's audit must sum it
    too, from the partials stored when it still had input; else audit.json and summary.json of one snapshot
    count different battles.  The partials count only when made from the input the day's manifest records
    under these audit ``settings`` (the key an audit of that input would have now); a kept day without such
    partials (audited under other settings or with ``--no-audit``) cannot be audited any more: it is logged.
    """
    days_dir = storage.join(state_dir, DAY_PARTIALS)
    current = {}
    for day in kept:
        manifest = state.read_day_manifest(state_dir, day) or {}
        digest = day_digest(manifest.get("inputs"), manifest.get("score_inputs"), manifest.get("settings"))
        key = _digest({"day": digest, "settings": settings})
        if stored_day_key(days_dir, day) == key:
            current[day] = key
    keys.update(current)
    missing = sorted(set(kept) - set(current))
    if missing:
        _LOG.warning(
            "audit: %d day(s) kept in the fit have no input and no audit partials stored under these settings, "
            "so the audit leaves them out: %s",
            len(missing),
            ", ".join(missing),
        )
    return list(current)


def drop_days_without_input(
    state_dir: str,
    changes: InputChanges,
    drop: bool,
    settings: Mapping[str, str] | None = None,
    reads: tuple[str, ...] | None = None,
) -> DaysWithoutInput:
    """The stored days no input file matches: kept, or (``drop``) removed from the state, one day at a time.

    An input that matches no file at all never gets here (listing it is an
    error), so a mistyped glob cannot empty the state.  Each day goes through
    :func:`~biasboard.transforms.state.delete_day` (manifest first), so a run
    killed midway leaves every day either whole or gone.  A kept day whose manifest records other ingest
    ``settings`` than this run's (:func:`~biasboard.transforms.ingest.ingest_settings`), or files of an input
    this run does not read (``reads``: the flags of the inputs it was given), is named: the other days
    are aggregated again under the new settings, it cannot be.
    """
    days = tuple(changes.without_input)
    # A run killed after dropping days and before publishing left them gone from the state with no snapshot
    # saying so: the rerun (with or without the flag) found nothing to drop and published a board without them
    # and an empty ``days.dropped``.  The note, written before the first removal, carries them to the next board.
    earlier = _dropped_unpublished(state_dir)
    if not drop or not days:
        kept = _kept(state_dir, days, settings, reads)
        return replace(kept, dropped=earlier) if earlier else kept
    dropped = tuple(sorted({*earlier, *days}))
    storage.atomic_write_bytes(storage.join(state_dir, DROPPED), publish.json_bytes({"days": list(dropped)}))
    for day in days:
        state.delete_day(state_dir, day)
        storage.delete_tree(day_partials_dir(storage.join(state_dir, DAY_PARTIALS), day))  # its audit partials
    _LOG.info("read: dropped %d stored day(s) from %s: %s", len(days), state_dir, ", ".join(days))
    return DaysWithoutInput(dropped=dropped)


#: The days ``--drop-missing-days`` removed from the state that no published snapshot lists yet (written before the
#: first removal, removed once a snapshot is published).
DROPPED = "dropped_days.json"


def _dropped_unpublished(state_dir: str) -> tuple[str, ...]:
    """The days of :data:`DROPPED` still absent from the state (one aggregated again since is not dropped)."""
    path = storage.join(state_dir, DROPPED)
    try:
        noted = json.loads(storage.read_text(path)).get("days", []) if storage.exists(path) else []
    except (OSError, ValueError, StateError, AttributeError) as err:  # a note only names days; without it none
        raise_if_unreachable(err)
        _LOG.warning("refresh: %s is unreadable (%s); ignored", path, err)
        return ()
    stored = set(state.list_state_days(state_dir))
    return tuple(sorted(str(day) for day in noted if str(day) not in stored))


#: The inputs a day manifest records the files of, by flag: a kept day with files of an input the run does not read
#: holds cells of it (grades after ``--scores`` was left out) that the days aggregated again have lost.
_INPUT_FILES = (("--input", "inputs"), ("--scores", "score_inputs"))


def _kept(
    state_dir: str, days: tuple[str, ...], settings: Mapping[str, str] | None, reads: tuple[str, ...] | None = None
) -> DaysWithoutInput:
    """``days`` kept in the fit, with those aggregated under other ingest ``settings`` than these, or from an input
    this run does not read (``reads``), and which."""
    if settings is None:
        return DaysWithoutInput(kept=days)
    other: list[str] = []
    differing: set[str] = set()
    for day in days:
        manifest = state.read_day_manifest(state_dir, day) or {}
        recorded = manifest.get("settings")
        names = set()
        if recorded is not None:  # (stored before manifests kept their settings: nothing to compare)
            names = {name for name in {*recorded, *settings} if recorded.get(name) != settings.get(name)}
        if reads is not None:
            names |= {flag for flag, key in _INPUT_FILES if manifest.get(key) and flag not in reads}
        if names:
            other.append(day)
            differing |= names
    return DaysWithoutInput(kept=days, other_settings=tuple(other), settings_differing=tuple(sorted(differing)))


#: Options that need battles, refused on an ordinal-only refresh (flag, the option's default).
_NEED_BATTLES = (("--anchors", "anchors"), ("--slices", "slices"), ("--plan-budget", "plan_budget"))


def check_inputs(input_glob: str | None, options: RefreshOptions) -> None:
    """At least one input; on an ordinal-only refresh (no ``--input``) no option that needs battles."""
    if input_glob is None and options.scores_glob is None:
        raise InputError("refresh needs --input (battle files), --scores (single-grade files), or both")
    if input_glob is None:
        given = [flag for flag, name in _NEED_BATTLES if getattr(options, name)]
        if options.reference not in (None, "none"):
            given.append("--reference")
        if given:
            raise InputError(
                f"{', '.join(given)}: need battles (--input); an ordinal-only board (--scores alone) has no "
                "pairwise verdicts"
            )


def check_options(state_dir: str, out_dir: str, options: RefreshOptions) -> FamilyMap:
    """Every check that can fail without data, before any is read; returns the family map the run uses.

    Numbers out of range, the two folders (distinct, writable, their buckets
    reachable) and the family map (read and parsed even when no day is new)
    fail here in one line, so a refused run has aggregated, fitted and
    published nothing.
    """
    for flag, (name, rule) in NUMBER_FLAGS.items():
        rule.check(getattr(options, name), flag)
    validation.memory_amount(options.fit_min_ram, "--fit-min-ram")
    if options.plan_budget:
        validation.at_least(options.plan_budget, 2, "--plan-budget (when given)")
        if options.plan_budget > MAX_BUDGET:
            raise InputError(f"--plan-budget {options.plan_budget}: at most {MAX_BUDGET} comparisons per plan")
    if not parse_slices(options.slices) and options.slice_min_battles != DEFAULT_MIN_BATTLES:
        # a threshold for slices that are not made: a --slices left out of the command, not silently ignored
        raise InputError(f"--slice-min-battles {options.slice_min_battles} is given without --slices: no slice is made")
    model_config(options)
    validation.distinct_folders(state=state_dir, out=out_dir)
    validation.writable_folder(state_dir, "--state")
    validation.writable_folder(out_dir, "--out")
    validation.not_owned(state_dir, "--state", state=False)  # (a state is its own; a site is not one)
    validation.not_owned(out_dir, "--out", site=False)
    return validation.family_map(options.families)


# --------------------------------------------------------------------------- read: what changed


@dataclass
class InputChanges:
    """Per day: its input fingerprint, and which days are new, changed or unchanged against the state.

    ``without_input``: days the state has committed that no input file matches any more; ``kept_digests`` the
    digest of each one's stored files (its manifest's hashes), which only the state can change.
    """

    fingerprints: dict[str, dict]
    new: list[str]
    changed: list[str]
    unchanged: list[str]
    n_files: int
    without_input: list[str] = field(default_factory=list)
    kept_digests: dict[str, str] = field(default_factory=dict)
    #: Unchanged days whose battle ids cannot be checked for repeats (:func:`~biasboard.transforms.repeated_ids.
    #: unchecked_days`): a fit input, since the backfill that mends them changes no fingerprint.
    unchecked_ids: list[str] = field(default_factory=list)

    def kept(self, options: RefreshOptions) -> dict[str, str]:
        """The days without input a run keeps in its board (none with ``--drop-missing-days``), with their digests.

        Part of the fit's and the audit's input: a kept day re-aggregated from an archive (``backfill``), or
        dropped by a refresh into another out folder, changes the board with the same ``--input``; without them the
        next refresh reused a LATEST that counted the old day."""
        return {} if options.drop_missing_days else dict(self.kept_digests)

    @property
    def digest(self) -> str:
        """One digest of the whole input (what the audit, which reads everything, depends on)."""
        return _digest({day: fp["digest"] for day, fp in self.fingerprints.items()})


def _digest(document: object) -> str:
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode("utf-8")).hexdigest()


def _entries(fingerprints: object) -> list[dict] | None:
    """File fingerprints (path, size, mtime, checksum) in path order; None when absent.

    A local path is compared made absolute and normal (:func:`~biasboard.transforms.read.normal_path`), stored and
    listed alike: ``--input in``, ``./in`` and ``/abs/in`` name the same files, and re-spelling the input re-read and
    re-aggregated every day (the board the same)."""
    if not isinstance(fingerprints, list):
        return None
    keys = ("path", "size", "mtime", "checksum")
    entries = [{k: e.get(k) for k in keys} for e in fingerprints if isinstance(e, Mapping)]
    for entry in entries:
        if isinstance(entry["path"], str):
            entry["path"] = read.normal_path(entry["path"])
    return sorted(entries, key=lambda e: str(e["path"]))


def day_digest(inputs: object, score_inputs: object = None, settings: object = None) -> str:
    """Digest of one day's battle (and score) file fingerprints and ingest settings: it changes when any does."""
    return _digest({"inputs": _entries(inputs), "score_inputs": _entries(score_inputs), "settings": settings})


def input_changes(
    input_glob: str | None, state_dir: str, scores_glob: str | None = None, settings: Mapping[str, str] | None = None
) -> InputChanges:
    """Compare the input's per-day fingerprints with those the state's day manifests recorded.

    A file's fingerprint is its path, size, modification time and the file
    system's checksum (see :func:`biasboard.transforms.read.match_files`), so
    a rewritten or appended file changes its day's digest without the job
    reading any data; a day the state has no committed manifest for is new.
    ``settings`` (:func:`~biasboard.transforms.ingest.ingest_settings`: the
    family map's digest) is part of every day's fingerprint, so a changed map
    re-aggregates every day: families are stored in the cells.
    """
    settings = dict(settings) if settings is not None else None
    battles = read.list_input_days(input_glob, check=False, beside=scores_glob) if input_glob is not None else {}
    scores = read.list_input_days(scores_glob, kind="score", check=False, beside=input_glob) if scores_glob else {}
    fingerprints = {}
    for day in sorted(set(battles) | set(scores)):
        inputs = [f.fingerprint() for f in battles.get(day, [])]
        score_inputs = [f.fingerprint() for f in scores.get(day, [])] if scores_glob else None
        fingerprints[day] = {
            "digest": day_digest(inputs, score_inputs, settings),
            "files": inputs,
            "score_files": score_inputs,
            "settings": settings,
        }
    new, changed, unchanged = [], [], []
    stored: dict[str, dict] = {}
    for day, fingerprint in fingerprints.items():
        manifest = state.read_day_manifest(state_dir, day)
        if manifest is None:
            new.append(day)
        elif (
            day_digest(manifest.get("inputs"), manifest.get("score_inputs"), manifest.get("settings"))
            != fingerprint["digest"]
        ):
            changed.append(day)
        else:
            unchanged.append(day)
            stored[day] = manifest
    n_files = len({f.path for files in (*battles.values(), *scores.values()) for f in files})
    without_input = [day for day in state.list_state_days(state_dir) if day not in fingerprints]
    kept = {day: _digest((state.read_day_manifest(state_dir, day) or {}).get("sha256")) for day in without_input}
    unchecked = repeated_ids.unchecked_days(state_dir, stored) if stored else []
    return InputChanges(fingerprints, new, changed, unchanged, n_files, without_input, kept, unchecked)


# --------------------------------------------------------------------------- build only


def _build_only_reason(options: PipelineOptions) -> str:
    if options.view_as(TestOptions).dry_run:
        return "--dry_run"
    if options.view_as(GoogleCloudOptions).template_location:
        return "--template_location"
    return ""


# --------------------------------------------------------------------------- audit


AUDIT_DIR = "audit"
#: Where a re-run audit is written (and read by the snapshot) until the run succeeds; then it replaces ``audit``.
AUDIT_NEXT_DIR = "audit.next"


@dataclass
class AuditPlan:
    """The judge audit of the whole input, kept under ``STATE/audit`` and re-run only when the input changed.

    Order pairing needs both orders of a prompt, which may sit on different
    days, so the audit reads all battles rather than per-day cells.  A re-run is
    written to ``STATE/audit.next`` by the pipeline's audit branch and replaces
    ``STATE/audit`` only once the whole run has succeeded (:meth:`finish`): an
    input refused inside the pipeline (a file that is not Parquet, a missing
    column, a day file copied into another day) leaves the stored audit as it
    was, and so the next refresh of the unchanged input still finds nothing new.
    ``inputs.json`` (the input digest) is written last, so a run killed
    mid-swap re-runs the audit next time.
    """

    state_dir: str
    stamp: dict
    rerun: bool
    day_digests: dict[str, str] = field(default_factory=dict)

    @property
    def folder(self) -> str:
        """The stored audit, the one the last successful run wrote."""
        return storage.join(self.state_dir, AUDIT_DIR)

    @property
    def next_folder(self) -> str:
        return storage.join(self.state_dir, AUDIT_NEXT_DIR)

    @property
    def written_to(self) -> str:
        """Where this run's pipeline finds the audit's files: the re-run's own folder, else the stored audit."""
        return self.next_folder if self.rerun else self.folder

    @classmethod
    def of(
        cls,
        state_dir: str,
        changes: InputChanges,
        options: RefreshOptions,
        family_map: FamilyMap,
    ) -> AuditPlan:
        # The files, not how --input spelled them (a folder or its glob): the same files, the same audit.
        # The audit's version too: the stored files of an older audit lack what this code reads from them (an
        # upgrade over an unchanged input read audit_order_pairs.parquet without its new column and failed).
        stamp = {
            "input_digest": changes.digest,
            "anchors": _anchors_fingerprint(options),
            "family_map": family_map.digest(),
            "audit_version": AUDIT_DAYS_VERSION,
            # Days kept in the fit without input are audited from their stored partials: a day kept, dropped or
            # re-aggregated in the state changes the audit as it changes the board, with the same input.
            "kept_without_input": changes.kept(options),
        }
        if not options.audit:
            return cls(state_dir, stamp, rerun=False)
        stamp_path = storage.join(state_dir, AUDIT_DIR, AUDIT_INPUTS)
        current = storage.exists(stamp_path) and json.loads(storage.read_text(stamp_path)) == stamp
        # The stamp without the audit it stamps (two runs overlapping on one state, or a partly deleted folder) was
        # "unchanged": every later snapshot came out without an audit, without a word.
        current = current and storage.exists(storage.join(state_dir, AUDIT_DIR, AUDIT_JSON))
        if current:
            _LOG.info("audit: input unchanged; reusing %s", storage.join(state_dir, AUDIT_DIR))
        digests = {day: fingerprint["digest"] for day, fingerprint in changes.fingerprints.items()}
        return cls(state_dir, stamp, rerun=not current, day_digests=digests)

    def start(self) -> None:
        """Before a re-run: clear what a failed or killed run left in its folder."""
        if self.rerun:
            storage.delete_tree(self.next_folder)

    def finish(self) -> None:
        """After the run succeeded: the re-run audit replaces the stored one, then is stamped with its input."""
        if self.rerun:
            storage.delete_tree(self.folder)
            storage.rename_dir(self.next_folder, self.folder)
            storage.atomic_write_bytes(storage.join(self.folder, AUDIT_INPUTS), publish.json_bytes(self.stamp))
            _LOG.info("audit: judge audit of the whole input written to %s", self.folder)


# --------------------------------------------------------------------------- fit options


def model_config(options: RefreshOptions) -> ModelConfig:
    try:
        ReferenceSettings(options.gate_level, options.apply_unidentified)
        Reference.parse(options.reference, bool(options.anchors))
        return ModelConfig(
            k=options.k,
            bootstrap=options.bootstrap,
            seed=options.seed,
            length_clip=options.length_clip,
            diagnostics=options.diagnostics,
            judge_pool=JudgePool.parse(options.judge_pool).fit_rule,  # a column pools at ingest
        )
    except ValueError as err:  # a bad option value, said in one line rather than a traceback
        raise InputError(f"refresh options: {err}") from err


# --------------------------------------------------------------------------- manifest helpers


_VERSIONED = ("biasboard", "apache-beam", "pyarrow", "polars", "numpy", "scipy", "google-cloud-storage")


def versions() -> dict[str, str]:
    """Versions of Python and of the libraries whose behaviour the numbers depend on, and the fingerprint of
    biasboard's own code (a change without a version bump still counts: no stale snapshot is reused)."""
    found = {"python": platform.python_version(), "biasboard_code": code_fingerprint()}
    for name in _VERSIONED:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def _beam_options_for_manifest(options: PipelineOptions) -> dict:
    """The Beam options that were given explicitly (the runner always), for the manifest."""
    given = options.get_all_options(drop_default=True, retain_unknown_options=True)
    given["runner"] = options.view_as(StandardOptions).runner
    return {key: value for key, value in sorted(given.items()) if not callable(value)}


if __name__ == "__main__":  # ``python -m biasboard.pipelines.refresh …``: what Airflow's Beam operator runs
    import sys

    from biasboard.pipelines.cli import main

    sys.exit(main(["refresh", *sys.argv[1:]]))
