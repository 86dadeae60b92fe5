"""``biasboard refresh``: the scheduled job — aggregate what is new, merge, fit, publish.

    biasboard refresh --input 'logs/battles/day=*/*.parquet' --state STATE --out OUT [Beam options]

1. **read**: list the input files, group them by day and fingerprint each day
   (path, size, modification time, checksum of every file); a day is *new* when
   the state has no committed partition for it, *changed* when its fingerprint
   differs from the one stored in the day's state manifest.
2. **aggregate**: only those days go through the ingest pipeline
   (:func:`biasboard.transforms.ingest.run_ingest`), which replaces each
   day's cells partition — never adds to it — so re-running never double-counts.
3. **fit**: all stored cells are merged and both models are fit on them
   (naive Bradley–Terry and the bias-aware model).
4. **publish**: leaderboard, bias table, summary, report and manifest go out as
   one snapshot, atomically (:mod:`biasboard.transforms.publish`).

Running it twice on the same input aggregates nothing the second time and
publishes the same numbers.  Everything after step 2 is deterministic in the
stored cells, so a run killed at any point and re-run publishes exactly what an
uninterrupted run would have.

The aggregation is a Beam pipeline and runs wherever the Beam options say
(``--runner=DataflowRunner|FlinkRunner|SparkRunner|PortableRunner``; local
default ``FnApiRunner``); the fit works on the bounded cells, not on battles,
so it runs in the launching process (an Airflow worker, a cron host).  With
``--dry_run`` or ``--template_location`` only the Dataflow job is built (and
staged), nothing runs and nothing is published.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import logging
import platform
import time
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from importlib import metadata
from typing import Any, TypeVar, cast

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions, StandardOptions, TestOptions
from biasboard.audit.measures import PAIR_KEYS, PAIR_MEASURES, order_models_table
from biasboard.pipelines import validation
from biasboard.pipelines.options import beam_options
from biasboard.ranking import ModelConfig
from biasboard.ranking.diagnostics import CROSSING_TYPICAL
from biasboard.ranking.leaderboard import side_by_side
from biasboard.ranking.reference import Reference, ReferenceFit, ReferenceSettings, fit_with_reference
from biasboard.report.html import render_report
from biasboard.report.text import fmt, side_by_side_text
from biasboard.schemas import summary as S
from biasboard.schemas.cells import PAIR_CELL_KEYS, SCORE_CELL_KEYS
from biasboard.schemas.errors import InputError
from biasboard.schemas.families import FamilyMap
from biasboard.schemas.names import AliasMap
from biasboard.schemas.summary import Summary
from biasboard.transforms import publish, read, state, storage
from biasboard.transforms.anchors import read_anchors
from biasboard.transforms.audit import AUDIT_JSON, run_audit
from biasboard.transforms.cells import IngestCounts, head_to_head, judge_summary
from biasboard.transforms.ingest import build_ingest, day_tasks, ingest_settings, run_ingest
from biasboard.transforms.plan import MAX_BUDGET, make_plan, plan_inputs
from biasboard.transforms.publish import failpoint

_LOG = logging.getLogger(__name__)
_T = TypeVar("_T")


# --------------------------------------------------------------------------- CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input", required=True, help="battle Parquet files: a glob or a folder (local or gs://)")
    parser.add_argument("--state", required=True, help="state folder: per-day cells, dead letters, manifests")
    parser.add_argument("--out", required=True, help="output folder: snapshots/ and LATEST (local or gs://)")
    parser.add_argument("--scores", default=None, help="optional ordinal score Parquet files (glob or folder)")
    parser.add_argument(
        "--family-map",
        "--families",
        dest="families",
        default=None,
        help="family map file (model/judge name → family), tried before the defaults; as in backfill and audit",
    )
    parser.add_argument(
        "--aliases", default=None, help="JSON object: judge/model name -> canonical name (e.g. case variants)"
    )
    parser.add_argument("--k", type=int, default=10, help="top-k for the membership probabilities (default 10)")
    parser.add_argument("--bootstrap", type=int, default=0, help="Poisson-bootstrap replicates (default 0: Laplace)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the Monte Carlo parts (default 0)")
    parser.add_argument("--title", default="biasboard report", help="title of report.html")
    parser.add_argument(
        "--no-audit", dest="audit", action="store_false", help="skip the judge audit (order, length, family)"
    )
    parser.add_argument(
        "--anchors",
        default=None,
        help="trusted verdicts (battle-shaped Parquet glob): correct a judge's bias only where these anchors "
        "support it (the trusted-anchor gate), and score each judge's gold-label accuracy",
    )
    parser.add_argument(
        "--reference",
        default=None,
        help="what 'unbiased' means: 'none' (each judge's effects against zero, style control), 'anchors' (the "
        "--anchors raters; the default when --anchors is given) or JUDGE[,JUDGE...] (judges of the input, e.g. "
        "human pools, pooled): judges are corrected only for their excess over the reference, and the corrected "
        "rating is what the reference concludes on each model's typical answers",
    )
    parser.add_argument(
        "--gate-level",
        type=float,
        default=0.05,
        help="family-wise level of the trusted-anchor gate (default 0.05): an effect is corrected only where the "
        "judges' excesses over the reference are jointly significant at this level (Holm over effects)",
    )
    parser.add_argument(
        "--apply-unidentified",
        action="store_true",
        help="also apply corrections the identifiability check reports as prior-selected (default: listed in the "
        "summary with what applying them would change, not applied)",
    )
    parser.add_argument(
        "--length-clip",
        type=_length_clip,
        default=1.5,
        help="bound of the length covariate |ln(len_a/len_b)| (a length-bin edge, 0.25..2.5; 'none' = unbounded; "
        "default 1.5, a 4.5x length ratio): past it a judge's verbosity preference is taken to saturate",
    )
    parser.add_argument(
        "--plan-budget",
        type=int,
        default=0,
        help="also plan this many next comparisons (top-k-aware) from the new snapshot (default 0: no plan)",
    )


def _length_clip(text: str) -> float | None:
    """``--length-clip`` value: a number, or 'none' for the unbounded covariate (checked by ModelConfig)."""
    return None if text.strip().lower() == "none" else float(text)


#: Rows of each leaderboard ``refresh`` prints when it is done.
TOP_PRINTED = 10


def run(args: argparse.Namespace, beam_args: list[str]) -> int:
    outcome = refresh(
        args.input,
        args.state,
        args.out,
        beam_args,
        RefreshOptions(
            scores_glob=args.scores,
            families=args.families,
            aliases=args.aliases,
            k=args.k,
            bootstrap=args.bootstrap,
            seed=args.seed,
            title=args.title,
            audit=args.audit,
            anchors=args.anchors,
            plan_budget=args.plan_budget,
            length_clip=args.length_clip,
            reference=args.reference,
            gate_level=args.gate_level,
            apply_unidentified=args.apply_unidentified,
        ),
    )
    if outcome.published is None:
        print(f"job built, not run ({outcome.reason}); nothing published")
        return 0
    print(f"snapshot {outcome.published.snapshot_id} published to {outcome.published.path}")
    if outcome.leaderboard is not None and outcome.summary is not None:
        print(side_by_side_text(outcome.leaderboard, TOP_PRINTED))
        print(f"Kendall tau naive vs corrected: {fmt(outcome.summary.kendall_tau, 3)}")
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
    reference: str | None = None
    gate_level: float = 0.05
    apply_unidentified: bool = False


@dataclass
class Outcome:
    """What a refresh did: the snapshot (None for a dry run), its summary and the days it aggregated."""

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


def refresh(
    input_glob: str,
    state_dir: str,
    out_dir: str,
    beam_args: list[str] | None = None,
    options: RefreshOptions | None = None,
) -> Outcome:
    """Aggregate new/changed days, merge all cells, fit both models, publish a snapshot."""
    options = options or RefreshOptions()
    beam_args = list(beam_args or [])
    pipeline_options = beam_options(beam_args)
    storage.configure_gcs_auth(no_auth=pipeline_options.view_as(GoogleCloudOptions).no_auth)
    family_map = check_options(state_dir, out_dir, options)
    aliases = read.load_aliases(options.aliases)
    timings = Timings()
    started = dt.datetime.now(dt.timezone.utc)

    with timings.stage("read"):
        changes = input_changes(input_glob, state_dir, options.scores_glob, ingest_settings(family_map, aliases))
    _LOG.info(
        "read: %d input file(s) over %d day(s): %d new, %d changed, %d unchanged",
        changes.n_files,
        len(changes.fingerprints),
        len(changes.new),
        len(changes.changed),
        len(changes.unchanged),
    )
    todo = changes.new + changes.changed

    build_only = _build_only_reason(pipeline_options)
    if build_only:
        job = build_aggregation_job(
            input_glob, state_dir, beam_options(beam_args), todo, options, family_map, aliases
        )
        _LOG.info("aggregate: %s: the job was built, nothing ran, nothing is published", build_only)
        return Outcome(None, aggregated_days=todo, reason=build_only, job=job)
    failpoint("after-read")

    metrics: dict[str, int] = {}
    with timings.stage("aggregate"):
        if todo:
            metrics = aggregate_days(
                input_glob, state_dir, beam_options(beam_args), todo, options, family_map, aliases
            )
        else:
            _LOG.info("aggregate: nothing new; the stored cells are up to date")
    failpoint("after-aggregate")

    audit_files: dict[str, bytes] = {}
    if options.audit:
        with timings.stage("audit"):
            audit_files = audit_state(input_glob, state_dir, beam_options(beam_args), changes, options, family_map)
    failpoint("after-audit")

    with timings.stage("fit"):
        fitted = fit_state(state_dir, options, audit_files)
    counts = fitted.summary.counts
    _LOG.info(
        "fit: %d models, %d judges, %d cells; %d rows read, %d counted, %d rejected over %d day(s)",
        fitted.leaderboard.height,
        len(fitted.summary.judges),
        fitted.n_cells,
        counts.read,
        counts.counted,
        counts.rejected_total,
        fitted.summary.days.count,
    )
    failpoint("after-fit")

    with timings.stage("report"):
        report_html = render(fitted, options)

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
        "versions": versions(),
        "options": {
            "refresh": asdict(options),
            "model": fitted.model_options,
            "beam": _beam_options_for_manifest(pipeline_options),
        },
        "metrics": {"this_run": metrics, "source": "Beam counters of this run's aggregation (empty: nothing new)"},
        "counts": S.to_jsonable(counts),
        "timings_s": timings.stages,
    }
    with timings.stage("publish"):
        files = publish.snapshot_files(fitted.leaderboard, fitted.bias, fitted.summary.to_json(), report_html)
        files.update(fitted.extra_files)
        published = publish.publish_snapshot(out_dir, files, manifest)
    _LOG.info(
        "publish: snapshot %s (%d files) is LATEST; stage times: %s",
        published.snapshot_id,
        len(files) + 1,
        ", ".join(f"{k} {v:.2f} s" for k, v in timings.stages.items()),
    )
    plan_path = None
    if options.plan_budget:
        plan = make_plan(out_dir, options.plan_budget, snapshot_id=published.snapshot_id)
        plan_path = plan.paths[0] if plan.paths else None
    return Outcome(published, fitted.summary, todo, plan_path=plan_path, leaderboard=fitted.leaderboard)


def check_options(state_dir: str, out_dir: str, options: RefreshOptions) -> FamilyMap:
    """Every check that can fail without data, before any is read; returns the family map the run uses.

    Numbers out of range, the two folders (distinct, writable, their buckets
    reachable) and the family map (read and parsed even when no day is new)
    fail here in one line, so a refused run has aggregated, fitted and
    published nothing.
    """
    validation.at_least(options.k, 1, "--k")
    validation.at_least(options.bootstrap, 0, "--bootstrap")
    validation.at_least(options.seed, 0, "--seed")
    validation.at_least(options.plan_budget, 0, "--plan-budget")
    if options.plan_budget:
        validation.at_least(options.plan_budget, 2, "--plan-budget (when given)")
        if options.plan_budget > MAX_BUDGET:
            raise InputError(f"--plan-budget {options.plan_budget}: at most {MAX_BUDGET} comparisons per plan")
    model_config(options)
    validation.distinct_folders(state=state_dir, out=out_dir)
    validation.writable_folder(state_dir, "--state")
    validation.writable_folder(out_dir, "--out")
    return validation.family_map(options.families)


# --------------------------------------------------------------------------- read: what changed


@dataclass
class InputChanges:
    """Per day: its input fingerprint, and which days are new, changed or unchanged against the state."""

    fingerprints: dict[str, dict]
    new: list[str]
    changed: list[str]
    unchanged: list[str]
    n_files: int

    @property
    def digest(self) -> str:
        """One digest of the whole input (what the audit, which reads everything, depends on)."""
        return _digest({day: fp["digest"] for day, fp in self.fingerprints.items()})


def _digest(document: object) -> str:
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode("utf-8")).hexdigest()


def _entries(fingerprints: object) -> list[dict] | None:
    """File fingerprints (path, size, mtime, checksum) in path order; None when absent."""
    if not isinstance(fingerprints, list):
        return None
    keys = ("path", "size", "mtime", "checksum")
    return sorted(
        ({k: e.get(k) for k in keys} for e in fingerprints if isinstance(e, Mapping)), key=lambda e: str(e["path"])
    )


def day_digest(inputs: object, score_inputs: object = None, settings: object = None) -> str:
    """Digest of one day's battle (and score) file fingerprints and ingest settings: it changes when any does."""
    return _digest({"inputs": _entries(inputs), "score_inputs": _entries(score_inputs), "settings": settings})


def input_changes(
    input_glob: str, state_dir: str, scores_glob: str | None = None, settings: Mapping[str, str] | None = None
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
    battles = read.list_input_days(input_glob, check=False)
    scores = read.list_input_days(scores_glob, kind="score", check=False) if scores_glob else {}
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
    for day, fingerprint in fingerprints.items():
        manifest = state.read_day_manifest(state_dir, day)
        if manifest is None:
            new.append(day)
        elif day_digest(manifest.get("inputs"), manifest.get("score_inputs"), manifest.get("settings")) != fingerprint[
            "digest"
        ]:
            changed.append(day)
        else:
            unchanged.append(day)
    n_files = len({f.path for files in (*battles.values(), *scores.values()) for f in files})
    return InputChanges(fingerprints, new, changed, unchanged, n_files)


# --------------------------------------------------------------------------- aggregate


def aggregate_days(
    input_glob: str,
    state_dir: str,
    pipeline_options: PipelineOptions,
    days: list[str],
    options: RefreshOptions,
    family_map: FamilyMap,
    aliases: AliasMap | None = None,
) -> dict[str, int]:
    """Run the ingest pipeline over ``days``; returns its Beam counters (rows read, counted, rejected by reason)."""
    result = run_ingest(
        input_glob,
        state_dir,
        pipeline_options,
        days=days,
        family_map=family_map,
        scores_glob=options.scores_glob,
        aliases=aliases,
    )
    _LOG.info(
        "aggregate: %d day(s): read %d rows, counted %d, rejected %d",
        len(result.days),
        result.counts.read,
        result.counts.counted,
        result.counts.rejected_total,
    )
    return dict(sorted(result.metrics.items()))


def build_aggregation_job(
    input_glob: str,
    state_dir: str,
    pipeline_options: PipelineOptions,
    days: list[str],
    options: RefreshOptions,
    family_map: FamilyMap,
    aliases: AliasMap | None = None,
) -> object:
    """Build (and, for a template, stage) the ingest job without running it; returns the runner's result.

    The same graph as :func:`~biasboard.transforms.ingest.run_ingest` runs
    (:func:`~biasboard.transforms.ingest.build_ingest`); used with ``--dry_run`` /
    ``--template_location``, where nothing runs, so there is nothing to wait for
    and no state to read back.
    """
    tasks = day_tasks(input_glob, days or None, scores_glob=options.scores_glob)
    return build_ingest(pipeline_options, tasks, state_dir, family_map, aliases=aliases).run()


def _build_only_reason(options: PipelineOptions) -> str:
    if options.view_as(TestOptions).dry_run:
        return "--dry_run"
    if options.view_as(GoogleCloudOptions).template_location:
        return "--template_location"
    return ""


# --------------------------------------------------------------------------- audit


AUDIT_DIR = "audit"
AUDIT_INPUTS = "inputs.json"


def audit_state(
    input_glob: str,
    state_dir: str,
    pipeline_options: PipelineOptions,
    changes: InputChanges,
    options: RefreshOptions,
    family_map: FamilyMap,
) -> dict[str, bytes]:
    """The judge audit of the whole input, kept under ``STATE/audit`` and re-run only when the input changed.

    Order pairing needs both orders of a prompt, which may sit on different
    days, so the audit reads all battles rather than per-day cells.  Its files
    are written by the audit job; ``inputs.json`` (the input digest) is written
    after it finished, so a run killed mid-audit re-runs it next time.
    Returns the files to add to the snapshot (name → bytes).
    """
    folder = storage.join(state_dir, AUDIT_DIR)
    stamp_path = storage.join(folder, AUDIT_INPUTS)
    stamp = {
        "input_digest": changes.digest,
        "input_glob": input_glob,
        "anchors": options.anchors,
        "family_map": family_map.digest(),
    }
    current = storage.exists(stamp_path) and json.loads(storage.read_text(stamp_path)) == stamp
    if not current:
        storage.delete_tree(folder)
        run_audit(input_glob, folder, pipeline_options, anchors=options.anchors, family_map=family_map)
        storage.atomic_write_bytes(stamp_path, publish.json_bytes(stamp))
        _LOG.info("audit: judge audit of %d day(s) written to %s", len(changes.fingerprints), folder)
    else:
        _LOG.info("audit: input unchanged; reusing %s", folder)
    files = {}
    for info in storage.list_files(folder):
        name = info.path.replace("\\", "/").rsplit("/", 1)[-1]
        if name != AUDIT_INPUTS:
            files[name] = storage.read_bytes(info.path)
    return files


# --------------------------------------------------------------------------- fit and summarise


@dataclass
class SnapshotParts:
    """Everything a snapshot is made of, before serialisation."""

    leaderboard: pl.DataFrame
    bias: pl.DataFrame
    summary: Summary
    model_options: dict
    n_cells: int
    extra_files: dict[str, bytes] = field(default_factory=dict)


def model_config(options: RefreshOptions) -> ModelConfig:
    try:
        ReferenceSettings(options.gate_level, options.apply_unidentified)
        Reference.parse(options.reference, bool(options.anchors))
        return ModelConfig(k=options.k, bootstrap=options.bootstrap, seed=options.seed, length_clip=options.length_clip)
    except ValueError as err:  # a bad option value, said in one line rather than a traceback
        raise InputError(f"refresh options: {err}") from err


def fit_state(
    state_dir: str, options: RefreshOptions, audit_files: Mapping[str, bytes] | None = None
) -> SnapshotParts:
    """Merge every stored day's cells and fit both models; the summary sums the days' manifests.

    Deterministic in the stored cells: the cells are put in key order before the
    fit, so the numbers do not depend on the order days were aggregated in.
    """
    days = state.list_state_days(state_dir)
    if not days:
        raise InputError(f"{state_dir}: no aggregated days to fit (is --input empty?)")
    cells = _dictionary_encoded(state.load_cells(state_dir).sort_by([(k, "ascending") for k in PAIR_CELL_KEYS]))
    score_cells = state.load_score_cells(state_dir)
    score_cells = score_cells.sort_by([(k, "ascending") for k in SCORE_CELL_KEYS]) if score_cells.num_rows else None
    if cells.num_rows == 0:
        raise InputError(f"{state_dir}: the stored days hold no valid battle (every row was rejected)")
    _LOG.info(
        "fit: merged %d pair cells%s from %d day(s)",
        cells.num_rows,
        f" and {score_cells.num_rows} score cells" if score_cells is not None else "",
        len(days),
    )
    fitted = fit_with_anchors(cells, score_cells, options)
    naive, corrected = fitted.naive, fitted.corrected
    leaderboard = side_by_side(naive, corrected)
    audit_files = dict(audit_files or {})
    audit_tables = None
    if audit_files:
        audit_tables = json.loads(audit_files[AUDIT_JSON]).get("tables") if AUDIT_JSON in audit_files else None
    summary = build_summary(
        state_dir, days, cells, naive, corrected, leaderboard, reference=fitted, audit_tables=audit_tables,
        seed=options.seed,
    )
    return SnapshotParts(
        leaderboard=leaderboard,
        bias=corrected.bias,
        summary=summary,
        model_options=_config_dict(fitted.config),
        n_cells=cells.num_rows,
        extra_files={**audit_files, **plan_inputs(corrected)},
    )


def fit_with_anchors(cells, score_cells, options: RefreshOptions) -> ReferenceFit:
    """Both boards, corrected toward the reference the options name (anchors read and aggregated here)."""
    reference = Reference.parse(options.reference, bool(options.anchors))
    anchors = read_anchors(options.anchors, read.load_family_map(options.families)) if options.anchors else None
    if anchors is not None:
        _LOG.info("fit: %d trusted anchor verdict(s) from %d rater name(s)", anchors.k, len(anchors.raters))
    fitted = fit_with_reference(
        cells,
        score_cells,
        reference=reference,
        anchor_cells=anchors.cells if anchors is not None and reference.kind == "anchors" else None,
        config=model_config(options),
        settings=ReferenceSettings(options.gate_level, options.apply_unidentified),
    )
    if anchors is not None:
        fitted.notes.append(f"anchors: {anchors.counts.counted} verdict(s) kept of {anchors.counts.read} read "
                            f"(rejected: {anchors.counts.rejected or 'none'})")
    return fitted


def reference_warnings(fitted: ReferenceFit) -> list[str]:
    """Plain-words warnings of the reference fit: what the gate enabled, what was not applied and why."""
    out = []
    if fitted.gate is not None:
        decisions = fitted.gate.decisions
        enabled = decisions.filter(pl.col("enabled")).height
        out.append(
            f"reference {fitted.reference.kind} ({fitted.k} verdicts): the gate corrected {enabled} of "
            f"{decisions.height} (judge, effect) excesses at level {fitted.gate.level}; the others are tied to the "
            "reference"
        )
    for entry in fitted.unidentified:
        if not entry["applied"]:
            tau = entry["if_applied"].get("kendall_tau")
            out.append(
                f"{entry['effect']} correction of {entry['judge']} is prior-selected and was not applied "
                f"(applying it: Kendall tau {tau if tau is None else round(tau, 3)} against the published board; "
                "--apply-unidentified forces it)"
            )
    return out


def _dictionary_encoded(table: pa.Table) -> pa.Table:
    """String key columns as dictionaries: the fit codes them without decoding, and the
    merged cells of a long history then cost a few bytes per row instead of a string each."""
    for i, field_ in enumerate(table.schema):
        if pa.types.is_string(field_.type) or pa.types.is_large_string(field_.type):
            table = table.set_column(i, field_.name, pc.dictionary_encode(table.column(i)))
    return table


def build_summary(
    state_dir: str,
    days: list[str],
    cells,
    naive,
    corrected,
    leaderboard: pl.DataFrame,
    *,
    reference: ReferenceFit | None = None,
    audit_tables: Mapping[str, list] | None = None,
    seed: int = 0,
) -> Summary:
    """summary.json, the one producer of :class:`~biasboard.schemas.summary.Summary` (DESIGN §6).

    τ and ρ naive vs corrected, counts by reason, judges, the fit's diagnostics, the audit's per-judge
    and per-model order tables (when the audit ran), rank intervals of both boards and the head-to-head
    matrices of the top models, warnings.
    """
    manifests = [state.read_day_manifest(state_dir, day) or {} for day in days]
    counts = sum((IngestCounts.from_dict(m["counts"]) for m in manifests if "counts" in m), IngestCounts())
    score_manifests = [m["score_counts"] for m in manifests if "score_counts" in m]
    fit_diag = corrected.diagnostics
    comparison = fit_diag.get("naive_vs_corrected")
    profiles = {name: _record(S.Profile, info) for name, info in fit_diag.get("profile_likelihood", {}).items()}
    identifiability = {
        name: S.Identifiability(profile_range_nats=p.range_nats, prior_selected=bool(p.warning), message=p.note)
        for name, p in profiles.items()
    }
    covariates = _record(S.Covariates, fit_diag["covariates"]) if "covariates" in fit_diag else None
    if "length" in identifiability and covariates is not None and covariates.corr_theta_length_corrected is not None:
        identifiability["length"].corr_theta = covariates.corr_theta_length_corrected
        identifiability["length"].crossing = CROSSING_TYPICAL
    audit = audit_tables or {}
    gate = reference.gate if reference is not None else None
    diagnostics = S.Diagnostics(
        identifiability=identifiability,
        connectivity=S.Connectivity(
            n_components=fit_diag.get("n_components", 1),
            components=fit_diag.get("components", [list(corrected.models)]),
        ),
        convergence={
            fit.method: S.Convergence(bool(fit.converged), int(fit.iterations), float(fit.grad_norm))
            for fit in (naive, corrected)
        },
        naive=S.NaiveDiagnostics(
            n_components=naive.diagnostics.get("n_components", 1),
            tie_convention=naive.diagnostics.get("tie_convention", ""),
            prior_theta_sd=naive.diagnostics.get("prior_theta_sd"),
            components=naive.diagnostics.get("components"),
        ),
        n_components=fit_diag.get("n_components", 1),
        profile_likelihood=profiles,
        covariates=covariates,
        naive_vs_corrected=_record(S.Comparison, comparison) if comparison else None,
        omega=fit_diag.get("omega"),
        length_scale=fit_diag.get("length_scale"),
        length_clip=fit_diag.get("length_clip"),
        components=fit_diag.get("components"),
        order=[_record(S.JudgeAudit, row) for row in audit.get("judges", [])],
        order_models=_pooled_order_models(audit.get("order_pairs", [])),
        family=[_record(S.FamilyPreference, row) for row in audit.get("family", [])],
        gate=S.from_jsonable(S.Gate, gate.to_json(), "gate") if gate is not None else None,
    )
    warnings = [*naive.diagnostics.get("warnings", []), *fit_diag.get("warnings", [])]
    if not counts.conserved:
        warnings.append(
            f"row accounting does not add up: read {counts.read} != counted {counts.counted} + "
            f"rejected {counts.rejected_total}"
        )
    if reference is not None:
        warnings.extend(reference_warnings(reference))
    top = leaderboard.sort("rank_corrected", "model")["model"].head(HEAD_TO_HEAD_TOP).to_list()
    return S.Summary(
        kendall_tau=comparison.get("kendall_tau") if comparison else None,
        spearman=comparison.get("spearman") if comparison else None,
        models=len(corrected.models),
        top_k=corrected.k,
        ci_level=0.95,
        days=S.Days(count=len(days), first=days[0], last=days[-1]),
        counts=S.from_jsonable(S.Counts, counts.to_dict(), "counts"),
        judges=[_record(S.JudgeCounts, row) for row in judge_summary(cells).to_pylist()],
        diagnostics=diagnostics,
        warnings=warnings,
        score_counts=S.from_jsonable(
            S.Counts, sum((IngestCounts.from_dict(c) for c in score_manifests), IngestCounts()).to_dict(), "counts"
        ) if score_manifests else None,
        ranks=S.Ranks(
            level=RANK_LEVEL,
            source="Laplace posterior draws",
            draws=RANK_DRAWS,
            naive=_rank_intervals(naive, seed),
            corrected=_rank_intervals(corrected, seed),
        ),
        head_to_head=S.HeadToHead(models=top, **head_to_head(cells, top)),
        reference=S.from_jsonable(S.ReferenceInfo, reference.summary(), "reference") if reference is not None else None,
    )


#: Level and number of draws of the published rank intervals; the head-to-head matrices cover this many models.
RANK_LEVEL = 0.95
RANK_DRAWS = 2000
HEAD_TO_HEAD_TOP = 20


def _record(cls: type[_T], row: Mapping) -> _T:
    """One audit/cells record as the contract's dataclass: the fields it declares, nothing guessed."""
    declared = {f.name: row[f.name] for f in fields(cast(Any, cls)) if f.name in row}
    return S.from_jsonable(cls, S.to_jsonable(declared), cls.__name__)


def _rank_intervals(fit, seed: int) -> list:
    low, high = fit.rank_interval(RANK_LEVEL, draws=RANK_DRAWS, seed=seed)
    rank = fit.ranks()
    rows = zip(fit.models, rank, low, high, strict=True)
    return [S.RankInterval(m, int(r), int(lo), int(hi)) for m, r, lo, hi in rows]


def _pooled_order_models(order_pairs: list) -> list:
    """Per model, over every judge: win rate among order-consistent pairs ± SE (the audit's formula)."""
    if not order_pairs:
        return []
    pairs = pl.DataFrame(order_pairs).select(*PAIR_KEYS, *PAIR_MEASURES)
    pooled = pairs.with_columns(pl.lit("*").alias("judge")).group_by(PAIR_KEYS).agg(pl.all().sum())
    return [_record(S.ModelConsistency, row) for row in order_models_table(pooled).sort("model").to_dicts()]


def _config_dict(config) -> dict:
    out = asdict(config)
    out["disabled"] = sorted(list(pair) for pair in config.disabled)
    out["reference"] = sorted(config.reference)
    return out


def render(fitted: SnapshotParts, options: RefreshOptions) -> str:
    return render_report(fitted.leaderboard, fitted.bias, fitted.summary, title=options.title)


# --------------------------------------------------------------------------- manifest helpers


_VERSIONED = ("biasboard", "apache-beam", "pyarrow", "polars", "numpy", "scipy", "google-cloud-storage")


def versions() -> dict[str, str]:
    """Versions of Python and of the libraries whose behaviour the numbers depend on."""
    found = {"python": platform.python_version()}
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
