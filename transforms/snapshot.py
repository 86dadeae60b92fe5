"""What a snapshot is made of: the merged cells of every stored day, both fits, the summary and the report.

One function, :func:`fit_state`, turns the state folder into a snapshot's
parts; the fit stage of the refresh pipeline (:class:`~biasboard.transforms.fit.FitModels`)
calls it on a worker and stages :func:`snapshot_files` for the launcher to
publish.  It is deterministic in the stored cells: the cells are put in key
order before the fit, so the numbers do not depend on the order days were
aggregated in, on which worker fits them, or on the runner.
"""

from __future__ import annotations

import io
import json
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from biasboard.audit.measures import PAIR_KEYS, PAIR_MEASURES, order_models_table, records
from biasboard.plan import JudgedRows
from biasboard.ranking import ModelConfig
from biasboard.ranking.allocator import release_freed_memory
from biasboard.ranking.attribution import move_table
from biasboard.ranking.data import CodedFold, Dataset, build_dataset, pool_judge_names
from biasboard.ranking.diagnostics import CROSSING_TYPICAL
from biasboard.ranking.leaderboard import side_by_side, top_k_warnings
from biasboard.ranking.reference import NAMED_RATERS, Reference, ReferenceFit, ReferenceSettings, fit_with_reference
from biasboard.ranking.spill import SpilledRows, as_table, spill_rows
from biasboard.ranking.stream import stream_dataset, streaming_wanted
from biasboard.report.html import render_report
from biasboard.schemas import summary as S
from biasboard.schemas.battle import SLICE_LABEL_SEPARATOR
from biasboard.schemas.cells import PAIR_CELLS_SCHEMA, SCORE_CELL_KEYS
from biasboard.schemas.errors import InputError
from biasboard.schemas.families import FamilyMap
from biasboard.schemas.names import AliasMap
from biasboard.schemas.summary import Summary
from biasboard.schemas.wording import first_few
from biasboard.transforms import publish, state, storage
from biasboard.transforms.anchors import read_anchors
from biasboard.transforms.audit import AUDIT_JSON, JSON_TABLES, busiest_judge_names, table_file
from biasboard.transforms.audit_cache import ORDER_PAIRS_SCHEMA
from biasboard.transforms.cells import IngestCounts, head_to_head, judge_summary
from biasboard.transforms.day_warnings import (
    battle_rows_read,
    no_battle_message,
    off_day_warnings,
    rejected_share_warnings,
    rejection_warnings,
)
from biasboard.transforms.judge_pool import pool_buckets, pool_table
from biasboard.transforms.plan import plan_inputs
from biasboard.transforms.ranks import rank_intervals
from biasboard.transforms.repeated_ids import repeated_ids
from biasboard.transforms.slices import (
    DEFAULT_MIN_BATTLES,
    SLICES_FILE,
    BucketSlices,
    SliceSource,
    TableSlices,
    fit_slices,
    slice_config,
)
from biasboard.transforms.style import kept_config, style_battles, style_info

_LOG = logging.getLogger(__name__)
if TYPE_CHECKING:
    from _typeshed import DataclassInstance
T = TypeVar("T", bound="DataclassInstance")

#: The refresh's stamp in the audit folder (the input digest the audit was made from); not an audit file.
AUDIT_INPUTS = "inputs.json"


@dataclass
class SnapshotParts:
    """Everything a snapshot is made of, before serialisation."""

    leaderboard: pl.DataFrame
    bias: pl.DataFrame
    summary: Summary
    model_options: dict
    n_cells: int
    extra_files: dict[str, bytes] = field(default_factory=dict)
    #: The per-slice boards (``slice`` then the leaderboard columns) when slices were asked for.
    slices: pl.DataFrame | None = None
    #: Seconds spent merging the stored cells (part of the fit stage; the merged-cells cache shortens it).
    merge_s: float = 0.0


@dataclass(frozen=True)
class FitSpec:
    """What the fit needs besides the stored cells: the model options and what "unbiased" means.

    ``reference``/``settings``: the raters the corrections are taken against and
    the trusted-anchor gate's settings (:mod:`biasboard.ranking.reference`);
    ``anchors``: trusted verdicts (a battle-shaped Parquet glob), read with
    ``family_map`` and renamed by ``aliases`` as the battles are; ``slices``: per-slice boards
    (:mod:`biasboard.transforms.slices`); ``import_rejected``: what the imports whose folders are the inputs
    rejected (the launcher counts them), reported, never fitted.
    """

    config: ModelConfig
    reference: Reference = field(default_factory=Reference)
    settings: ReferenceSettings = field(default_factory=ReferenceSettings)
    anchors: str | None = None
    family_map: FamilyMap | None = None
    #: Slice keys to fit a board per label of (``refresh --slices``), and the battles a slice needs to be fit.
    slices: tuple[str, ...] = ()
    slice_min_battles: int = DEFAULT_MIN_BATTLES
    import_rejected: tuple[S.ImportRejections, ...] = ()
    #: ``--aliases``: the anchors' names renamed as the battles' (else an anchor of a renamed model was a verdict on
    #: a model the board does not have, left out of the reference without a word).
    aliases: AliasMap | None = None


@dataclass(frozen=True)
class DaysWithoutInput:
    """Stored days no input file matches any more: ``kept`` in the fit, or ``dropped`` from the state before it.

    The launcher finds them (it lists the input); the fit only reports them in
    the summary, so a day whose files were deleted is never silently kept or lost.
    """

    kept: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()
    #: Of ``kept``, the days aggregated under other ingest settings than this run's, and which settings differ.
    other_settings: tuple[str, ...] = ()
    settings_differing: tuple[str, ...] = ()

    def warnings(self) -> list[str]:
        """What the board mixes when a kept day's cells were made under other ingest settings (none otherwise)."""
        if not self.other_settings:
            return []
        days = self.other_settings
        named = first_few(days, DAYS_NAMED)
        kept = ["the names and families of those settings"] if set(self.settings_differing) - set(UNREAD) else []
        kept += [
            f"the {UNREAD[flag]} of {flag}, which this run does not read"
            for flag in self.settings_differing
            if flag in UNREAD
        ]
        return [
            f"{len(days)} day(s) kept in the fit without input were aggregated under other ingest settings "
            f"({', '.join(self.settings_differing)}) than this run's: {named}; their cells keep "
            f"{' and '.join(kept)}, so the board mixes the two. Restore their input files to aggregate them "
            "again, or drop them (refresh --drop-missing-days)"
        ]


#: The inputs a kept day may hold cells of that a run does not read (``DaysWithoutInput.settings_differing``
#: names their flags), and what those cells are.
UNREAD = {"--input": "battles", "--scores": "grades"}

#: A warning about kept days names at most this many of them (the rest are counted).
DAYS_NAMED = 10

#: Every stored day has input files (the default of the fit's callers).
ALL_DAYS_HAVE_INPUT = DaysWithoutInput()


#: A slice board is fit on its battles alone; beside grades the overall board's θ is on another scale (measured on
#: simulated grades and battles: a slice holding every battle rated the models with a slope of 0.83 against the true
#: θ, 4 of 8 CIs covering it, where the overall board had 1.00 and 8 of 8).
SLICES_BESIDE_GRADES_WARNING = (
    "--slices with --scores: a slice board is fit on its battles alone, so its ratings are on the scale of the "
    "judges' average discrimination, while the overall board's are set by the grades as well; compare a slice's "
    "ranks with the overall board's, not its points"
)


def fit_state(
    state_dir: str,
    spec: FitSpec,
    audit_files: Mapping[str, bytes] | None = None,
    without_input: DaysWithoutInput = ALL_DAYS_HAVE_INPUT,
) -> SnapshotParts:
    """Merge every stored day's cells and fit both models; the summary sums the days' manifests.

    ``audit_files``: the judge audit's files (name → bytes), added to the
    snapshot and summarised in it; ``without_input``: stored days whose input
    files have gone, reported in ``summary.days``.

    Deterministic in the stored cells: the cells are put in key order before the
    fit, so the numbers do not depend on the order days were aggregated in.
    """
    days = state.list_state_days(state_dir)
    if not days:
        raise InputError(f"{state_dir}: no aggregated days to fit (is --input empty?)")
    score_cells = state.load_score_cells(state_dir)
    score_cells = score_cells.sort_by([(k, "ascending") for k in SCORE_CELL_KEYS]) if score_cells.num_rows else None
    # The battles the days counted bound the merged cells from above before any is read: above the size, the
    # cells are merged by judge bucket on disk and streamed through the fit (biasboard.ranking.stream).
    streamed = streaming_wanted(state.stored_battles(state_dir))
    started = time.perf_counter()
    if streamed:
        buckets = state.load_cells_by_judge(state_dir, cache=True)  # key order within a bucket, global dictionaries
        n_rows = buckets.n_rows
    else:
        cells = state.load_cells(state_dir, dictionary=True, cache=True)  # key order, dictionary-encoded keys
        n_rows = cells.num_rows
    merge_s = time.perf_counter() - started
    if n_rows == 0:
        manifests = [state.read_day_manifest(state_dir, day) or {} for day in days]
        if score_cells is None or battle_rows_read(days, manifests):
            # Grades alone make an ordinal-only board; battles that were all rejected are an error, not that board.
            raise InputError(no_battle_message(state_dir, days, manifests))
    _LOG.info(
        "fit: merged %d pair cells%s from %d day(s) in %.1f s",
        n_rows,
        f" and {score_cells.num_rows} score cells" if score_cells is not None else "",
        len(days),
        merge_s,
    )
    n_cells = n_rows + (score_cells.num_rows if score_cells is not None else 0)
    fit_input: Dataset
    slice_cells: SliceSource | None = None
    if streamed:
        # A history too big to hold: each bucket coded onto a scratch folder, then read a shard at a time by every
        # evaluation; the buckets' files go once coded.
        totals = CellTotals.of_buckets(buckets.tables())  # the stored judges (voters), as the summary counts them
        totals = replace(totals, graders=stored_graders(score_cells))
        coded = time.perf_counter()
        if spec.config.judge_pool is not None:
            buckets = pool_buckets(buckets, spec.config.judge_pool, state.bucket_rows_setting())
            _LOG.info(
                "fit: pooled the judges by %s into %d pair cells in %.1f s",
                spec.config.judge_pool,
                buckets.n_rows,
                time.perf_counter() - coded,
            )
            coded = time.perf_counter()
        if score_cells is not None and spec.config.judge_pool is not None:
            score_cells = pool_table(score_cells, spec.config.judge_pool)
        fit_input = stream_dataset(buckets, score_cells=score_cells)  # the grades coded with it, held in memory
        slice_cells = BucketSlices(buckets) if spec.slices else None  # each slice cut from the buckets on disk
        _LOG.info(
            "fit: streamed %d pair cells (%d judge buckets, %d shards on disk) in %.1f s",
            buckets.n_rows,
            buckets.n_buckets,
            len(fit_input.stream.files.shards) if fit_input.stream is not None else 0,
            time.perf_counter() - coded,
        )
        del buckets
    else:
        totals = replace(CellTotals.of(cells), graders=stored_graders(score_cells))
        slice_cells = TableSlices(cells) if spec.slices else None  # the slices' boards need the labels: it stays
        # Coded once for every fit of this snapshot (anchors are added to the coded cells as one more judge); the
        # Arrow table goes before the fit (it is as big as the coded cells: bench/scale.py), unless the slices
        # need its labels.
        handed = iter([cells])  # once consumed, only build_dataset's views of its float columns hold it
        del cells
        fit_input = build_dataset(handed, score_cells, judge_pool=spec.config.judge_pool)
    try:
        return _fit_snapshot(
            state_dir,
            days,
            spec,
            (audit_files, without_input),
            totals,
            (fit_input, slice_cells),
            (n_cells, merge_s),
        )
    finally:
        if isinstance(fit_input, Dataset) and fit_input.stream is not None:
            fit_input.stream.close()


def _fit_snapshot(
    state_dir: str,
    days: list[str],
    spec: FitSpec,
    audit: tuple[Mapping[str, bytes] | None, DaysWithoutInput],
    totals: CellTotals,
    inputs: tuple[Dataset, SliceSource | None],
    sizes: tuple[int, float],
) -> SnapshotParts:
    """:func:`fit_state` from the coded cells on: both fits, the summary, the slices.  ``inputs``: the fit's
    input (a coded data set, in memory or streamed, its grades in it; anchors are added to it by the fits) and what
    the slices are cut from when asked for (:class:`TableSlices` in memory,
    :class:`BucketSlices` on disk); ``sizes``: the cells and the merge's time."""
    audit_files, without_input = audit
    fit_input, cells = inputs
    n_cells, merge_s = sizes
    fitted = fit_with_anchors(fit_input, spec)
    # What the solve freed, back to the system: the steps after it allocate mostly outside glibc's heap (Python's
    # small objects, polars' and Arrow's pools), where it would only sit under them (bench/scale.py's N state:
    # anonymous memory 518 → 305 MB).
    release_freed_memory()
    naive, corrected = fitted.naive, fitted.corrected
    leaderboard = side_by_side(naive, corrected)
    kept = busiest_judges(totals.judges)
    audit_files = dict(audit_files or {})
    audit_tables, order_pairs, audit_clusters = None, None, None
    if audit_files:
        if AUDIT_JSON in audit_files:  # how many clusters recur across days: measured on the days' sketches only
            audit_clusters = json.loads(audit_files[AUDIT_JSON]).get("clusters")
        # The summary's judges' rows, from Parquet (audit.json keeps the busiest judges by the audit's own count,
        # transforms.audit): made records only for the judges summary.json lists, as a record a row is ~5 KB
        # (50,020 judges: +241 MB, held to the snapshot's end).
        audit_tables = {
            name: records(judges_rows(pl.read_parquet(io.BytesIO(audit_files[table_file(name)])), kept))
            for name in JSON_TABLES
            if table_file(name) in audit_files
        } or None
        pairs_file = table_file("order_pairs")  # per (judge, pair): only in Parquet (too big for audit.json)
        if pairs_file in audit_files:
            order_pairs = _pairs_over_judges(audit_files[pairs_file])
    summary = build_summary(
        state_dir,
        days,
        totals,
        naive,
        corrected,
        leaderboard,
        reference=fitted,
        audit_tables=audit_tables,
        order_pairs=order_pairs,
        audit_clusters=audit_clusters,
        seed=spec.config.seed,
        without_input=without_input,
    )
    summary.import_rejected = list(spec.import_rejected)
    summary.style = style_info(
        totals.style_battles,
        corrected,
        lambda: fit_with_anchors(fit_input, replace(spec, config=kept_config(spec.config))).corrected,
    )
    summary.warnings.extend(judge_pool_warnings(spec.config.judge_pool, totals))
    judge_files = keep_busiest_judges(summary, audit_files, kept)
    slice_files, boards = {}, None
    if spec.slices:
        assert cells is not None
        boards, summary.slices = fit_slices(
            cells,
            spec.slices,
            spec.slice_min_battles,
            _slice_fit(spec),
            overall_warnings=corrected.diagnostics.get("warnings", []),
            style_removed=summary.style is not None and spec.config.style,
        )
        if fit_input.scores is not None and any(info.fitted for info in summary.slices):
            summary.warnings.append(SLICES_BESIDE_GRADES_WARNING)
        unlabelled = [dim for dim in spec.slices if not any(info.dimension == dim for info in summary.slices)]
        if unlabelled:  # asked for, and not one battle carries a label: say so rather than publish no slice silently
            summary.warnings.append(
                f"--slices {','.join(unlabelled)}: no stored battle carries a label in "
                f"{'this column' if len(unlabelled) == 1 else 'these columns'} (null or blank everywhere), so "
                "there is no slice of it (days aggregated before the column existed read as unlabelled)"
            )
        if not boards.height:  # no slice could be fit: the file still has the board's columns
            boards = leaderboard.clear().select(pl.lit(None, dtype=pl.String).alias("slice"), pl.all())
        slice_files[SLICES_FILE] = publish.table_bytes(boards, "parquet")
    return SnapshotParts(
        leaderboard=leaderboard,
        bias=corrected.bias,
        summary=summary,
        model_options=_config_dict(fitted.config),
        n_cells=n_cells,
        extra_files={
            **audit_files,
            **plan_inputs(corrected, planned_judge_pairs(totals, spec.config.judge_pool)),
            **slice_files,
            **judge_files,
        },
        slices=boards,
        merge_s=merge_s,
    )


def _slice_fit(spec: FitSpec):
    """Both fits of one slice's cells: the snapshot's reference and options, top-k within the slice, and the
    anchors of that slice only (:func:`fit_with_anchors`)."""

    def fit(cells: pa.Table | Dataset, models: int, dim: str, label: str) -> ReferenceFit:
        return fit_with_anchors(cells, replace(spec, config=slice_config(spec.config, models)), only=(dim, label))

    return fit


def fit_with_anchors(cells: pa.Table | Dataset, spec: FitSpec, only: tuple[str, str] | None = None) -> ReferenceFit:
    """Both boards, corrected toward the reference ``spec`` names (anchors read and aggregated here).

    ``cells``: a slice's pair cells, or the snapshot's coded data set (its grades in it; in memory or streamed); the
    anchors are added to it as one more judge (:func:`~biasboard.ranking.data.with_judge`).
    """
    reference = spec.reference
    family_map = spec.family_map or FamilyMap.with_user_rules()
    anchors = read_anchors(spec.anchors, family_map, spec.aliases) if spec.anchors else None
    if anchors is not None:
        _LOG.info("fit: %d trusted anchor verdict(s) from %d rater name(s)", anchors.k, len(anchors.raters))
    anchor_cells = anchors.cells if anchors is not None and reference.kind == "anchors" else None
    if anchor_cells is not None and only is not None and anchor_cells.get_column(only[0]).drop_nulls().len():
        # A slice's fit takes the anchors labelled with the slice's label, as it takes its battles: anchors judged
        # on other categories' prompts compare the models on those categories' quality.  (Anchors without any
        # label in that column are all taken, as before.)  Without case, as the slices are cut (slices.label_members).
        dim, label = only
        labels = pl.col(dim).cast(pl.String).str.split(SLICE_LABEL_SEPARATOR)
        folded = labels.list.eval(pl.element().str.strip_chars().str.to_lowercase())
        anchor_cells = anchor_cells.filter(folded.list.contains(label.lower()).fill_null(False))
    fitted = fit_with_reference(
        cells,
        reference=reference,
        anchor_cells=anchor_cells,
        config=spec.config,
        settings=spec.settings,
    )
    if anchors is not None:
        fitted.notes.append(
            f"anchors: {anchors.counts.counted} verdict(s) kept of {anchors.counts.read} read "
            f"(rejected: {anchors.counts.rejected or 'none'})"
            + ("" if reference.kind == "anchors" else ANCHORS_NOT_FITTED.format(reference=reference.kind))
        )
    return fitted


#: Appended to the anchors' note when ``--reference`` is not ``anchors``.  Why: the note said "N verdict(s) kept"
#: while the fit left every one of them out (the gate measured the judges against the named judges, or zero), so a
#: reader took the board for one corrected toward the anchors.
ANCHORS_NOT_FITTED = (
    "; not in the fit: the reference is {reference} (--reference), so the anchors enter only the audit's "
    "gold-label accuracy"
)


#: A reference discrimination a_r (1: the judges' verdict-weighted geometric mean, the grades' scale beside grades,
#: or the discrimination of a judge fixed at 1 where one sets the scale: :func:`_discrimination_unit`)
#: whose whole 95% interval lies below this is warned of: its verdicts follow the comparisons' quality order only
#: weakly.
WEAK_REFERENCE: float = 0.25


#: What a_r = 1 is, in :func:`weak_reference_warning`: with battles alone the judges' verdict-weighted geometric mean
#: of a_j is fixed at 1 (unless a judge's a_j fixed at 1 sets the scale: :data:`FIXED_UNIT`); beside grades the
#: grades set the scale and the a_j are free (it said the judges' mean there).
JUDGES_UNIT = "1 is the judges' geometric mean, weighted by their verdicts"
GRADED_UNIT = "1 is the grades' scale"
#: Where a judge's discrimination fixed at 1 sets the scale (``diagnostics["scale_judges"]``): 1 is that judge's.
FIXED_UNIT = "1 is the discrimination of {judges}, fixed at 1"


def _discrimination_unit(fitted: ReferenceFit) -> str:
    """What a discrimination of 1 is on ``fitted``'s board, in the words of :func:`weak_reference_warning`: the
    grades' scale beside grades, the fixed judge's where one sets the scale, else the judges' weighted mean."""
    if fitted.graded_scale:
        return GRADED_UNIT
    fixed = fitted.corrected.diagnostics.get("scale_judges")
    return FIXED_UNIT.format(judges=first_few(fixed, 3)) if fixed else JUDGES_UNIT


def weak_reference_warning(fitted: ReferenceFit) -> list[str]:
    """A warning when the reference's verdicts barely follow the quality order the comparisons show (a_r's 95%
    interval below :data:`WEAK_REFERENCE`).

    Why: its rating φ = θ + (β_r / a_r)·x̄ divides its own preferences by a_r, so a reference that agrees with the
    comparisons by little more than chance (anchors with their verdicts flipped: a_r ≈ 0.1) reordered the board by
    ten times its length preference (Kendall τ 0.11 against the naive board), and only the agreement table, well
    down the report, gave it away."""
    disc = fitted.own_effects.get("discrimination")
    if not disc or disc.get("ci_high") is None or disc["ci_high"] >= WEAK_REFERENCE:
        return []
    return [
        f"the reference's verdicts follow the comparisons' quality order only weakly: its discrimination a_r is "
        f"{disc['estimate']:.2f} [{disc['ci_low']:.2f}, {disc['ci_high']:.2f}] "
        f"({_discrimination_unit(fitted)}), "
        f"so its own preferences enter its rating divided by it — ×{1 / disc['estimate']:.0f}; check that the "
        "reference judges the same task in the same sense (flipped or mislabelled verdicts, another benchmark)"
    ]


def _reference_who(fitted: ReferenceFit) -> str:
    """The reference as the warning names it: ``anchors``, or the judges it matched (one judge: singular).

    Why the matches, not the names given: ``--reference 'claude-sim-judge-[1]'`` was warned of as "reference judge
    claude-sim-judge-[1]", a pattern no judge is called, while the report named the judge.  A pool of voters (more
    than :data:`~biasboard.ranking.reference.NAMED_RATERS`) is named by its count and the patterns that matched it."""
    ref = fitted.reference
    if ref.kind != "judges":
        return ref.kind
    names = sorted(fitted.raters) or list(ref.judges)
    if len(names) > NAMED_RATERS:
        return f"{len(names):,} judges matching {', '.join(ref.judges)}"
    return f"{'judge' if len(names) == 1 else 'judges'} {', '.join(names)}"


def reference_warnings(fitted: ReferenceFit) -> list[str]:
    """Plain-words warnings of the reference fit: what the gate enabled, what was not applied and why."""
    out = []
    if fitted.gate is not None:
        # A correction the gate supports is still left off when it is prior-selected (without --apply-unidentified):
        # counted apart (ReferenceFit.gate_counts).
        enabled, withheld, tested = fitted.gate_counts()
        others = "; the others are tied to the reference" if enabled + withheld < tested else ""
        who = _reference_who(fitted)
        left = (
            f" ({withheld} more it supports are prior-selected and not applied: tied to the reference)"
            if withheld
            else ""
        )
        out.append(
            f"reference {who} ({fitted.k:,} verdicts): the gate corrected {enabled} of "
            f"{tested} (judge, effect) excesses at level {fitted.gate.level}{left}{others}"
        )
    out.extend(weak_reference_warning(fitted))
    for entry in fitted.unidentified:
        if not entry["applied"]:
            tau, judge = entry["if_applied"].get("kendall_tau"), S.judge_label(entry["judge"])
            out.append(
                f"{entry['effect']} correction of {judge} is prior-selected and was not applied "
                f"(applying it: Kendall tau {tau if tau is None else round(tau, 3)} against the published board; "
                "--apply-unidentified forces it)"
            )
    return out


@dataclass(frozen=True)
class CellTotals:
    """What the summary reads off the merged pair cells besides the fits, taken before the fit frees them."""

    judges: pa.Table  # judge_summary: a row per judge
    model_pairs: pa.Table  # battles and verdicts per (model_a, model_b), over judges and the other keys
    style_battles: int
    #: Battles per judge and pair of models in either order (``model_a`` the first by name), self-battles left out:
    #: what each judge has already judged, which the snapshot's posterior keeps for ``plan --no-repeat``
    #: (:func:`planned_judge_pairs`).  Rows, not an array: at most one per judged (judge, pair), which the cells
    #: already bound.  A refresh's are spilled to disk until the plan reads them (:meth:`of_buckets`).
    judge_pairs: pa.Table | SpilledRows
    #: The stored graders' names (the score cells' judges), read before ``--judge-pool`` pools them: a prefix
    #: rule that pools nothing reads them too (:func:`judge_pool_warnings`).
    graders: tuple[str, ...] = ()

    @classmethod
    def of(cls, cells: pa.Table) -> CellTotals:
        frame = pl.from_arrow(cells.select(_PAIR_TOTALS))
        assert isinstance(frame, pl.DataFrame)
        pairs = frame.group_by("model_a", "model_b").agg(pl.col(c).cast(pl.Int64).sum() for c in _PAIR_TOTALS[2:])
        pairs = pairs.with_columns(pl.col("model_a", "model_b").cast(pl.String))
        return cls(judge_summary(cells), pairs.to_arrow(), style_battles(cells), judge_pair_counts(cells))

    @classmethod
    def of_buckets(cls, tables: Iterable[pa.Table]) -> CellTotals:
        """:meth:`of` the concatenated tables, a table at a time: each holds its judges' cells whole
        (:class:`~biasboard.ranking.stream.JudgeBuckets`), so the judges' rows are the tables' rows and the
        model pairs' counts (integers) their sums."""
        judges: list[pl.DataFrame] = []
        judged: list[pa.Table] = []  # a bucket's judges are whole in it: its rows are final
        pairs: pl.DataFrame | None = None
        style = 0
        for table in tables:
            if not table.num_rows:
                continue
            part = cls.of(table)
            del table
            judges.append(_frame(part.judges))
            judged.append(part.judge_pairs)
            # summed as the buckets come: every bucket's pairs kept until the end grew with the history (a
            # bucket has up to a row per model pair: 24 x 160k rows at bench/scale.py's full 2N, ~150 MB)
            pairs = _frame(part.model_pairs) if pairs is None else _summed_pairs(pairs, _frame(part.model_pairs))
            style += part.style_battles
        if pairs is None:
            return cls.of(PAIR_CELLS_SCHEMA.empty_table())
        # Read again only for the plan's posterior, after the fit, a bucket at a time: on disk until then, not held
        # through the solve (~20 bytes a judged pair: 103 MB at bench/scale.py's full 2N, 68 MB at N)
        judge_pairs = spill_rows(pa.concat_tables(judged))
        del judged
        return cls(pl.concat(judges).sort("judge", "judge_family").to_arrow(), pairs.to_arrow(), style, judge_pairs)


def _summed_pairs(total: pl.DataFrame, part: pl.DataFrame) -> pl.DataFrame:
    """Two :attr:`CellTotals.model_pairs` frames added by model pair (integer counts: exact in any order)."""
    return pl.concat([total, part]).group_by("model_a", "model_b").agg(pl.col(c).sum() for c in _PAIR_TOTALS[2:])


def _frame(table: pa.Table) -> pl.DataFrame:
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    return frame


def judge_pair_counts(cells: pa.Table) -> pa.Table:
    """:attr:`CellTotals.judge_pairs` of pair cells: ``n`` summed over both orders of a pair and every other key
    (bins, families, slices).

    Grouped and kept as dictionary codes over the cells' own dictionaries (the models' one dictionary for both
    sides), never as strings: the rows, ~0.8 a cell with voter-judges, are held from before the fit until the
    snapshot is written, and as strings they took ~72 bytes a row (plus what polars' allocator kept of the cast),
    against 20 now.  At bench/scale.py's full N they set the refresh's peak, held through the streamed solve.
    """
    used = ("judge", "model_a", "model_b", "n")
    table = cells.select(used) if cells.num_rows else PAIR_CELLS_SCHEMA.empty_table().select(used)
    (judge,) = _dictionary_codes(table.column("judge"))
    model_a, model_b = _dictionary_codes(table.column("model_a"), table.column("model_b"))
    # Both orders of a pair summed into one row, the models in name order: the plan counts a pair's battles in
    # either order, and the rows held through the fit are a third fewer (4.96M ordered, 3.38M unordered at
    # bench/scale.py's full N).  The codes' order is not the names' (a dictionary need not be sorted): by rank.
    rank = pa.array(np.argsort(np.argsort(np.asarray(model_a.dictionary.to_pylist(), dtype=object))), pa.int32())
    a, b = (pc.take(rank, column.indices) for column in (model_a, model_b))
    a_first = pc.less(a, b)
    frame = pl.DataFrame(
        {
            "judge": judge.indices,
            "model_a": pc.if_else(a_first, model_a.indices, model_b.indices),
            "model_b": pc.if_else(a_first, model_b.indices, model_a.indices),
            "n": table.column("n"),
        }
    )
    del a, b, a_first
    grouped = (
        frame.filter(pl.col("model_a") != pl.col("model_b"))  # one dictionary: equal codes are one model
        .group_by("judge", "model_a", "model_b")
        .agg(pl.col("n").cast(pl.Int64).sum())
    )

    def coded(column: str, dictionary: pa.Array) -> pa.DictionaryArray:
        return pa.DictionaryArray.from_arrays(grouped.get_column(column).to_arrow().cast(pa.int32()), dictionary)

    return pa.table(
        {
            "judge": coded("judge", judge.dictionary),
            "model_a": coded("model_a", model_a.dictionary),
            "model_b": coded("model_b", model_b.dictionary),
            "n": grouped.get_column("n").to_arrow(),
        }
    )


def _dictionary_codes(*columns: pa.ChunkedArray) -> list[pa.DictionaryArray]:
    """``columns`` as dictionary arrays of one chunk each, all over one dictionary (codes comparable across them).

    Why one dictionary: a merged bucket's columns already share the global sorted dictionaries (only it is copied),
    while a table of strings or of separately encoded chunks would compare codes of different dictionaries.
    """
    encoded = [c if pa.types.is_dictionary(c.type) else c.dictionary_encode() for c in columns]
    value_type = encoded[0].type.value_type
    chunks = [chunk.cast(pa.dictionary(pa.int32(), value_type)) for c in encoded for chunk in c.chunks]
    merged = pa.table({"c": pa.chunked_array(chunks, pa.dictionary(pa.int32(), value_type))}).unify_dictionaries()
    unified, out, start = merged.column("c").chunks, [], 0
    for column in encoded:
        parts = unified[start : start + column.num_chunks]
        start += column.num_chunks
        # A copy: a merged bucket's dictionary lies in its memory-mapped file, which a view would keep resident
        # (every bucket's whole table: +1.2 GB at bench/scale.py's full N), not the few names it holds.
        dictionary = pa.concat_arrays([parts[0].dictionary] if parts else [pa.array([], value_type)])
        indices = pa.concat_arrays([p.indices for p in parts]) if parts else pa.array([], pa.int32())
        out.append(pa.DictionaryArray.from_arrays(indices, dictionary))
    return out


def planned_judge_pairs(totals: CellTotals, judge_pool: str | None) -> JudgedRows:
    """The judged pairs under the fit's judge names (``--judge-pool`` renames voters to their pools, and a pool
    has judged what any of its voters has): what :func:`~biasboard.transforms.plan.plan_inputs` keeps.  Without
    pools, the held rows themselves (dictionary codes, a chunk per judge bucket: no copy of them is made)."""
    if judge_pool is None or not totals.judge_pairs.num_rows:
        return totals.judge_pairs
    frame = _frame(as_table(totals.judge_pairs))
    stored = frame.get_column("judge").unique().to_list()
    pools = dict(zip(stored, pool_judge_names(stored, judge_pool), strict=True))
    renamed = frame.with_columns(pl.col("judge").replace_strict(pools, return_dtype=pl.String))
    return renamed.group_by("judge", "model_a", "model_b").agg(pl.col("n").sum())


#: The columns of :attr:`CellTotals.model_pairs` (what :func:`head_to_head` reads).
_PAIR_TOTALS = ("model_a", "model_b", "n", "win_a", "win_b", "tie", "tie_bothbad")


def stored_graders(score_cells: pa.Table | None) -> tuple[str, ...]:
    """The distinct judges of the stored score cells (none without grades)."""
    if score_cells is None or not score_cells.num_rows:
        return ()
    return tuple(score_cells.column("judge").cast(pa.string()).unique().to_pylist())


def judge_pool_warnings(rule: str | None, totals: CellTotals) -> list[str]:
    """A ``--judge-pool prefix:SEP`` that pools nothing (no stored judge's or grader's name holds SEP) said, not
    silent.  The graders count: on a board of grades alone the battle judges are none."""
    if rule is None:
        return []
    stored = sorted({*totals.judges.column("judge").to_pylist(), *totals.graders})
    if not stored or pool_judge_names(stored, rule) != tuple(stored):
        return []
    separator = rule.partition(":")[2]
    said = f"--judge-pool {rule}: no judge's name holds {separator!r}, so every judge is its own pool (nothing pooled)"
    return [said]


def build_summary(
    state_dir: str,
    days: list[str],
    totals: CellTotals,
    naive,
    corrected,
    leaderboard: pl.DataFrame,
    *,
    reference: ReferenceFit | None = None,
    audit_tables: Mapping[str, list] | None = None,
    order_pairs: pl.DataFrame | None = None,
    audit_clusters: Mapping[str, Any] | None = None,
    seed: int = 0,
    without_input: DaysWithoutInput = ALL_DAYS_HAVE_INPUT,
) -> Summary:
    """summary.json, the one producer of :class:`~biasboard.schemas.summary.Summary`.

    τ and ρ naive vs corrected, counts by reason, judges, the fit's diagnostics, the audit's per-judge
    and per-model order tables (when the audit ran), rank intervals of both boards and the head-to-head
    matrices of the top models, warnings.  ``audit_tables``: audit.json's per-judge tables;
    ``order_pairs``: audit_order_pairs.parquet, pooled over judges into the per-model order table;
    ``audit_clusters``: audit.json's ``clusters`` (how many (judge, prompt) clusters recur on other days).
    """
    manifests = [state.read_day_manifest(state_dir, day) or {} for day in days]
    counts = sum((IngestCounts.from_dict(m["counts"]) for m in manifests if "counts" in m), IngestCounts())
    score_manifests = [m["score_counts"] for m in manifests if "score_counts" in m]
    score_counts = sum((IngestCounts.from_dict(c) for c in score_manifests), IngestCounts())
    fit_diag = corrected.diagnostics
    comparison = fit_diag.get("naive_vs_corrected")
    fit_profiles = fit_diag.get("profile_likelihood", {})
    profiles = {name: _record(S.Profile, info) for name, info in fit_profiles.items()}
    identifiability = {  # the profile's verdict, not its warning (which also says a point did not converge)
        name: S.Identifiability(
            profile_range_nats=p.range_nats,
            prior_selected=bool(fit_profiles[name].get("prior_selected")),
            message=p.note,
        )
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
            covariance=naive.diagnostics.get("covariance"),
            components=naive.diagnostics.get("components"),
        ),
        n_components=fit_diag.get("n_components", 1),
        profile_likelihood=profiles,
        profiles=fit_diag.get("profiles"),
        covariates=covariates,
        naive_vs_corrected=_record(S.Comparison, comparison) if comparison else None,
        omega=fit_diag.get("omega"),
        judges_discrimination=fit_diag.get("judges_discrimination"),
        scale_judges=fit_diag.get("scale_judges"),
        length_scale=fit_diag.get("length_scale"),
        length_clip=fit_diag.get("length_clip"),
        components=fit_diag.get("components"),
        order=[_record(S.JudgeAudit, row) for row in audit.get("judges", [])],
        order_models=_pooled_order_models(order_pairs if order_pairs is not None else audit.get("order_pairs", [])),
        family=[_record(S.FamilyPreference, row) for row in audit.get("family", [])],
        gate=S.from_jsonable(S.Gate, gate.to_json(), "gate") if gate is not None else None,
        audit_clusters=S.from_jsonable(S.AuditClusters, dict(audit_clusters), "audit clusters")
        if audit_clusters
        else None,
    )
    board = fit_diag.get("board", S.PAIRWISE)
    # Once each: both boards report the same split comparison graph.
    warnings = list(dict.fromkeys([*naive.diagnostics.get("warnings", []), *fit_diag.get("warnings", [])]))
    if not counts.conserved:
        warnings.append(
            f"row accounting does not add up: read {counts.read} != counted {counts.counted} + "
            f"rejected {counts.rejected_total}"
        )
    warnings.extend(rejection_warnings(counts, days, manifests, state_dir))
    warnings.extend(rejected_share_warnings(score_counts, state_dir, "score rows"))
    warnings.extend(off_day_warnings(days, manifests))
    warnings.extend(without_input.warnings())
    repeats = repeated_ids(state_dir, days, manifests)
    warnings.extend(repeats.warnings())
    if reference is not None:
        warnings.extend(reference_warnings(reference))
    warnings.extend(top_k_warnings(corrected.k, leaderboard))
    top = head_to_head_models(leaderboard)
    return S.Summary(
        kendall_tau=comparison.get("kendall_tau") if comparison else None,
        spearman=comparison.get("spearman") if comparison else None,
        models=len(corrected.models),
        top_k=corrected.k,
        ci_level=0.95,
        days=S.Days(
            count=len(days),
            first=days[0],
            last=days[-1],
            without_input=list(without_input.kept),
            dropped=list(without_input.dropped),
            other_settings=list(without_input.other_settings),
        ),
        counts=S.from_jsonable(S.Counts, {**counts.to_dict(), "repeated_ids": repeats.total}, "counts"),
        repeated_ids=repeats.info(),
        judges=[_record(S.JudgeCounts, row) for row in totals.judges.to_pylist()],
        diagnostics=diagnostics,
        warnings=warnings,
        score_counts=S.from_jsonable(S.Counts, score_counts.to_dict(), "counts") if score_manifests else None,
        uncertainty=corrected.uncertainty,
        ranks=rank_intervals(naive, corrected, seed),
        head_to_head=S.HeadToHead(models=top, **head_to_head(totals.model_pairs, top)),
        reference=S.from_jsonable(S.ReferenceInfo, reference.summary(), "reference") if reference is not None else None,
        board=board,
        attribution=_attribution(corrected, leaderboard),
    )


def _attribution(corrected, leaderboard: pl.DataFrame) -> S.Attribution | None:
    """The summary's :class:`~biasboard.schemas.summary.Attribution` of the published board (None without one)."""
    table = move_table(corrected, leaderboard)
    return None if table is None else S.from_jsonable(S.Attribution, S.to_jsonable(table), "attribution")


#: The head-to-head matrices cover this many models (the top by corrected rank).
HEAD_TO_HEAD_TOP = 20


def head_to_head_models(leaderboard: pl.DataFrame) -> list[str]:
    """The models of the head-to-head matrices: the top :data:`HEAD_TO_HEAD_TOP` by corrected rank, the largest
    comparison component's first (``component`` 0), then the next one's.

    Why: ranks restart in each component, so sorted by rank alone the matrices interleaved two groups no battle
    links (1, 1, 2, 2, ...), numbering a small group's leader "1." above the largest group's and filling half the
    matrix with pairs that never met.
    """
    keys = (
        ["component", "rank_corrected", "model"] if "component" in leaderboard.columns else ["rank_corrected", "model"]
    )
    return leaderboard.sort(keys, nulls_last=True)["model"].head(HEAD_TO_HEAD_TOP).to_list()


def _record(cls: type[T], row: Mapping) -> T:
    """One audit/cells record as the contract's dataclass: the fields it declares, nothing guessed."""
    declared = {f.name: row[f.name] for f in fields(cls) if f.name in row}
    return S.from_jsonable(cls, S.to_jsonable(declared), cls.__name__)


#: Rows of audit_order_pairs.parquet read at a time to sum it over judges (:func:`_pairs_over_judges`).
_PAIRS_BATCH_ROWS = 1 << 14
#: What :func:`_pairs_over_judges` sums: the model pair and the additive measures.
_POOLED_PAIRS_SCHEMA = pa.schema([f for f in ORDER_PAIRS_SCHEMA if f.name != "judge"])


def _pairs_over_judges(parquet: bytes) -> pl.DataFrame:
    """audit_order_pairs.parquet's measures summed over judges per model pair (under judge ``*``): every judge's
    rows, as the prompt-cluster sums (``pcl_*``) of the pooled per-model SE need.

    The file has a row per (judge, model pair), about as many rows as the cells with voter-judges: it is read
    :data:`_PAIRS_BATCH_ROWS` rows at a time, only the columns summed, the model names as dictionary codes, and
    summed in codes (:class:`~biasboard.ranking.data.CodedFold`).  Read whole with its strings it cost ~250 bytes
    a row; a batch of 2¹⁷ rows at a time summed through polars still took +330 MB for a moment and kept +210 MB
    (bench/scale.py's 2N file alone: 5.2M rows), against +122 MB and +58 MB now.  The sums are exact (counts on a 2⁻²⁰
    grid), so the grouping does not matter.  Rows in model-pair order.
    """
    columns = ["model_x", "model_y", *PAIR_MEASURES]
    reader = pq.ParquetFile(io.BytesIO(parquet), read_dictionary=["model_x", "model_y"])
    fold = CodedFold(_POOLED_PAIRS_SCHEMA, ("model_x", "model_y"), [("model_x", "model_y")])
    for batch in reader.iter_batches(batch_size=_PAIRS_BATCH_ROWS, columns=columns, use_threads=False):
        fold.add([batch], "audit order pairs")
        if fold.pending_rows >= 4 * _PAIRS_BATCH_ROWS:
            fold.fold()
    if not fold.total_rows + fold.pending_rows:
        return pl.DataFrame()  # no pair judged in both orders
    pooled = _frame(fold.table())
    release_freed_memory()  # the batches' buffers: back to the system before the summary and the plan's posterior
    return pooled.select(pl.lit("*").alias("judge"), *columns)


def _pooled_order_models(order_pairs: pl.DataFrame | list) -> list:
    """Per model, over every judge: win rate among order-consistent pairs ± SE (the audit's formula).

    ``order_pairs``: the audit's per-(judge, pair) table (audit_order_pairs.parquet), or its records — every
    judge's rows, so the SE clusters by prompt across judges (``across_judges``: the judges of a prompt judge the
    same answers; each judge's verdicts taken as a cluster of their own made it too small).
    """
    if len(order_pairs) == 0:
        return []
    pairs = (order_pairs if isinstance(order_pairs, pl.DataFrame) else pl.DataFrame(order_pairs)).select(
        *PAIR_KEYS, *PAIR_MEASURES
    )
    pooled = pairs.with_columns(pl.lit("*").alias("judge")).group_by(PAIR_KEYS).agg(pl.all().sum())
    table = order_models_table(pooled, across_judges=True).sort("model")
    return [_record(S.ModelConsistency, row) for row in records(table)]


def _config_dict(config) -> dict:
    """The model options for the manifest, bounded in the number of judges.

    ``reference`` (judge names a pattern expanded to: 25,000 voters of a human pool) and ``disabled`` (the
    gate's (judge, effect) decisions, one per voter) list at most :data:`~S.SUMMARY_JUDGES_MAX` entries,
    sorted, with their full counts beside them; every decision is in ``bias.parquet``.
    """
    out = asdict(config)
    cap = S.SUMMARY_JUDGES_MAX
    disabled = sorted(list(pair) for pair in config.disabled)
    reference = sorted(config.reference)
    out.update(disabled=disabled[:cap], disabled_count=len(disabled))
    out.update(reference=reference[:cap], reference_count=len(reference))
    return out


#: Every judge's battles and shares, when summary.json keeps only the busiest (:func:`keep_busiest_judges`).
JUDGES_FILE = "judges.parquet"


def busiest_judges(judges: pa.Table) -> frozenset[str] | None:
    """The judges summary.json lists (:func:`keep_busiest_judges`): the :data:`~S.SUMMARY_JUDGES_MAX` with the most
    battles, names breaking ties; None when it lists every judge.  ``judges``: :attr:`CellTotals.judges`."""
    counts = pl.from_arrow(judges.select(["judge", "n"]))
    assert isinstance(counts, pl.DataFrame)
    busiest = busiest_judge_names(counts, "n")
    return None if busiest is None else frozenset(busiest.to_list())


def judges_rows(table: pl.DataFrame, kept: frozenset[str] | None) -> pl.DataFrame:
    """``table``'s rows of the ``kept`` judges (:func:`busiest_judges`; every row when None)."""
    return table if kept is None else table.filter(pl.col("judge").is_in(list(kept)))


def keep_busiest_judges(
    summary: Summary, audit_files: Mapping[str, bytes], kept: frozenset[str] | None
) -> dict[str, bytes]:
    """Cut summary.json's per-judge lists to the ``kept`` judges (:func:`busiest_judges`); their files.

    Past :data:`~S.SUMMARY_JUDGES_MAX` judges (arena voters: 50,000) the per-judge rows are kept
    in Parquet only: ``judges.parquet`` (returned, every judge's
    :class:`~S.JudgeCounts`), ``bias.parquet`` and the audit's
    ``audit_judges.parquet`` / ``audit_family.parquet``; ``summary.judge_tables``
    says how many judges there are and names those files.  The busiest judges
    are the ones with most battles, names breaking ties (the report's rule).
    Returns {} (and changes nothing) when ``kept`` is None: the summary lists few enough judges.
    """
    if kept is None:
        return {}
    every = pl.DataFrame([asdict(j) for j in summary.judges], schema=[f.name for f in fields(S.JudgeCounts)])
    files = {"judges": JUDGES_FILE, "bias": "bias.parquet"}
    files.update({name: table_file(name[len("audit_") :]) for name in ("audit_judges", "audit_family")})
    summary.judge_tables = S.JudgeTables(
        total=len(summary.judges),
        kept=len(kept),
        files={name: file for name, file in files.items() if name in ("judges", "bias") or file in audit_files},
    )
    summary.judges = [j for j in summary.judges if j.judge in kept]
    diagnostics = summary.diagnostics
    diagnostics.order = [row for row in diagnostics.order if row.judge in kept]
    diagnostics.family = [row for row in diagnostics.family if row.judge in kept]
    return {JUDGES_FILE: publish.table_bytes(every, "parquet")}


def json_bias(parts: SnapshotParts) -> pl.DataFrame:
    """bias.json's rows: every row, or the global ones and the kept judges' when summary.json cut the judges."""
    if parts.summary.judge_tables is None or parts.bias.is_empty():
        return parts.bias
    fitted = parts.bias.get_column("judge").unique()
    if fitted.filter(fitted != S.GLOBAL_JUDGE).len() <= S.SUMMARY_JUDGES_MAX:
        return parts.bias  # a pooled fit (--judge-pool prefix:SEP): few judges, however many voters the log names
    kept = [S.GLOBAL_JUDGE, *(j.judge for j in parts.summary.judges)]
    return parts.bias.filter(pl.col("judge").is_in(kept))


def render(parts: SnapshotParts, title: str) -> str:
    """report.html of a snapshot."""
    return render_report(parts.leaderboard, parts.bias, parts.summary, title=title, slices=parts.slices)


def snapshot_files(parts: SnapshotParts, title: str) -> dict[str, bytes]:
    """Every data file of the snapshot (all but the manifest), by name."""
    summary = parts.summary.to_json()
    files = publish.snapshot_files(parts.leaderboard, parts.bias, summary, render(parts, title), json_bias(parts))
    files.update(parts.extra_files)
    return files


def read_audit_files(folder: str) -> dict[str, bytes]:
    """The judge audit's files written under ``folder`` (name → bytes), without the refresh's stamp."""
    files = {}
    for info in storage.list_files(folder):
        name = info.path.replace("\\", "/").rsplit("/", 1)[-1]
        if name != AUDIT_INPUTS:
            files[name] = storage.read_bytes(info.path)
    return files
