"""The Summary contract: what ``summary.json`` holds, typed, with one producer and one reader.

Why typed: the report used to read an untyped ``summary.json`` through several accepted spellings per
key that no producer wrote, so a column could be blank in production while its tests, which pinned the
invented shapes, passed.  Now ``refresh``'s ``build_summary`` is the one producer of a :class:`Summary`,
the report (:mod:`biasboard.report.html`) the one reader, and both share these field names.

Serialisation is generic over the dataclasses below: :meth:`Summary.to_json` walks the fields (numpy
scalars become Python numbers, NaN and ±inf become ``null``), and :meth:`Summary.from_json` rebuilds the
dataclasses from their type hints, refusing a document of another major ``version`` or one missing a
required field.  Keys a newer producer added are ignored, so an older reader still opens a newer file.
**Adding a field is one line**: declare it, with a default, on the right dataclass; the producer fills it
and the reader reads it by name.

The published keys keep the meaning they had before the contract was typed (``kendall_tau``,
``counts``, ``judges``, ``diagnostics.identifiability`` …); the contract added fields beside them
(``version``, ``ranks``, ``head_to_head``, ``diagnostics.order_models``, ``diagnostics.family``, and
``attribution``: which correction moved each model).
``diagnostics.order`` keeps every column of the audit's per-judge table under the audit's own names.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, Union

from biasboard.schemas.errors import InputError

#: ``Summary.board`` values.
PAIRWISE = "pairwise"
ORDINAL_ONLY = "ordinal-only"
#: What the two boards of an ordinal-only snapshot are, in words (the report and the terminal say it).
ORDINAL_ONLY_BOARDS = (
    "corrected = partial-credit many-facet model (model quality, judge severity, prompt difficulty); naive = "
    "the grades pooled over judges and prompts (ranks as the mean grade does); no position, length, affinity "
    "or tie effects, and no judge audit"
)

#: Judge name of the global effects in the fit and the bias table: no judge of the input carries it.  Without a
#: reference they are the judges' population means; with one, the reference's own effects where the ratings keep them
#: (:func:`biasboard.ranking.reference.reference_global_notes` says which, row by row).
GLOBAL_JUDGE = "*"


#: How the report names a global row that holds the reference's own effect (:func:`judge_label`).
REFERENCE_OWN_LABEL = "the reference (its own effect)"


def judge_label(judge: object, reference_own: bool = False) -> str:
    """A judge as a reader is told it: the global rows are "all judges (global)" (the report's bias table, the
    warnings and the slices' notes say it alike), any other judge by its name.

    ``reference_own``: the row's effect is one the reference's rating keeps (:func:`reference_keeps`), so its global
    row is the reference's own effect, not the judges' — labelled "all judges (global)", it read as their mean."""
    if judge != GLOBAL_JUDGE:
        return str(judge)
    return REFERENCE_OWN_LABEL if reference_own else "all judges (global)"


def reference_keeps(effect: str, own_effects: dict[str, dict[str, Any]]) -> bool:
    """Whether the global ('*') row of ``effect`` holds the reference's own effect (``reference.own_effects``): the
    ratings keep it (it is not taken as zero, :func:`zero_reference_effect`).  Discrimination aside: the reference's
    a_r is no global row."""
    own = own_effects.get(effect)
    return effect != "discrimination" and own is not None and not zero_reference_effect(own)


#: ``ReferenceInfo.agreement`` rows of the boards' own ratings (beside one row per judge), in this order.
AGREEMENT_BOARDS = ("naive board", "published board")


def agreement_yardstick(kind: str) -> str:
    """Whose verdicts ``ReferenceInfo.agreement`` predicts, as a reader is told it (``kind``: the reference's)."""
    return "the anchors" if kind == "anchors" else "the reference judges"


def agreement_listed_note(kind: str, listed: int, judges: int) -> str:
    """The reference's note (``ReferenceInfo.notes``) when its agreement lists only the ``listed`` judges with the
    most battles (voter-judges); the report repeats it under the table (:func:`agreement_listed_in`)."""
    return f"{_agreement_head(kind)}the {listed} judges with the most battles of {judges}"


def agreement_listed_in(kind: str, notes: Sequence[str]) -> str | None:
    """What :func:`agreement_listed_note` says in ``notes`` (without its head), or None."""
    head = _agreement_head(kind)
    return next((note.removeprefix(head) for note in notes if note.startswith(head)), None)


def _agreement_head(kind: str) -> str:
    return f"agreement with {agreement_yardstick(kind)}: "


#: How a bias-table note begins for a judge's effect the reference ties (the gate found no excess to correct).
TIED_TO_REFERENCE = "tied to the reference"


def zero_reference_effect(own: dict[str, Any]) -> bool:
    """Whether one of the reference's own effects (``reference.own_effects``) is taken as zero by the ratings: no
    verdicts of the reference carry it (no interval), or its estimate was not told from zero (``applied`` 0).
    The bias table's notes and the report's reference line both say so, from this one test."""
    return own.get("ci_low") is None or own.get("applied") == 0.0


#: Major version of the contract: a reader refuses another major version rather than misread it.
SUMMARY_VERSION: int = 2

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")


# --------------------------------------------------------------------------- generic (de)serialisation


def to_jsonable(value: Any) -> Any:
    """A dataclass tree as plain JSON values: numpy scalars → Python, non-finite floats → None."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if hasattr(value, "item") and not isinstance(value, (int, float)):  # a numpy scalar
        value = value.item()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return value


def _convert(hint: Any, value: Any, where: str) -> Any:
    """``value`` (parsed JSON) as the type ``hint`` names; ``where`` is its path, for the error message."""
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None:
            if len(args) < len(typing.get_args(hint)):
                return None
            raise InputError(f"summary: {where} is null but must be {hint}")
        return _convert(args[0], value, where) if len(args) == 1 else value
    if hint is Any:
        return value
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise InputError(f"summary: {where} must be an object, got {type(value).__name__}")
        return from_jsonable(hint, value, where)
    if origin in (list, tuple):
        (item,) = typing.get_args(hint)[:1] or (Any,)
        if not isinstance(value, list):
            raise InputError(f"summary: {where} must be a list, got {type(value).__name__}")
        return [_convert(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        _, item = typing.get_args(hint) or (str, Any)
        if not isinstance(value, dict):
            raise InputError(f"summary: {where} must be an object, got {type(value).__name__}")
        return {str(k): _convert(item, v, f"{where}.{k}") for k, v in value.items()}
    if hint is float:
        if value is None:  # a non-finite number was written as null
            return math.nan
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InputError(f"summary: {where} must be a number, got {value!r}")
        return float(value)
    if hint in (int, str, bool) and not isinstance(value, hint):
        raise InputError(f"summary: {where} must be {hint.__name__}, got {value!r}")
    return value


@functools.cache
def _type_hints(cls: type) -> dict[str, Any]:
    """``cls``'s type hints, evaluated once per class: ``typing.get_type_hints`` compiles every string
    annotation on each call, which made reading a summary of 2,520 judges take 9.5 s (bench/scale.py)."""
    return typing.get_type_hints(cls)


def from_jsonable(cls: type[T], document: dict[str, Any], where: str = "summary") -> T:
    """Rebuild dataclass ``cls`` from ``document`` through its type hints (unknown keys are ignored)."""
    hints = _type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in document:
            kwargs[f.name] = _convert(hints[f.name], document[f.name], f"{where}.{f.name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise InputError(f"summary: {where} lacks the required field {f.name!r}")
    return cls(**kwargs)


# --------------------------------------------------------------------------- the parts


@dataclass
class Days:
    """The day partitions the fit merged, and the stored days whose input files have gone."""

    count: int
    first: str
    last: str
    #: Stored days no input file matches any more, kept in the fit (their cells are the history).
    without_input: list[str] = field(default_factory=list)
    #: Stored days no input file matched, removed from the state before this fit (refresh --drop-missing-days).
    dropped: list[str] = field(default_factory=list)
    #: Of ``without_input``, the days whose cells were aggregated under other ingest settings than this run's (another
    #: family map, aliases or ``--judge-pool column:``): with no input they cannot be aggregated again, so the board
    #: mixes two settings (a warning says which).
    other_settings: list[str] = field(default_factory=list)


@dataclass
class Counts:
    """Row accounting over every stored day: ``read == counted + rejected_total`` when nothing was lost."""

    read: int
    counted: int
    rejected: dict[str, int]
    rejected_total: int
    self_battles: int = 0
    #: Input files with no rows (empty part files), skipped.
    empty_files: int = 0
    #: Counted rows whose judge or model name lost surrounding whitespace (or invisible characters) / was renamed
    #: by ``--aliases``.
    trimmed: int = 0
    renamed: int = 0
    #: Counted rows dated outside the day their folder names (:mod:`biasboard.schemas.folder_day`): still counted
    #: under the folder's day; ``warnings`` names the days.  Days aggregated before the check was made count none.
    off_day: int = 0
    #: Counted rows whose ``battle_id`` an earlier day counted too (:mod:`biasboard.transforms.repeated_ids`): those
    #: battles are counted twice; ``warnings`` names the days.  Days stored before ids were kept are not checked.
    repeated_ids: int = 0

    @property
    def conserved(self) -> bool:
        return self.read == self.counted + self.rejected_total


@dataclass
class RepeatedDay:
    """A stored day whose counted rows repeat battle ids an earlier day counted (those battles count twice)."""

    day: str
    rows: int
    #: The earlier days that counted them first (the first few).
    first_counted_on: list[str]
    #: A few of the repeated ids, read back from the day's input: for the days the warning names, while the input
    #: is there (empty otherwise).
    examples: list[str] = field(default_factory=list)


@dataclass
class RepeatedIdsInfo:
    """Battle ids counted on more than one day (:mod:`biasboard.transforms.repeated_ids`; ``counts.repeated_ids`` is
    the total of ``days``): the days with repeats, the most first, and the stored days that could not be checked
    (aggregated before their ids' hashes were kept, or with another hash; a backfill of them mends it)."""

    days: list[RepeatedDay] = field(default_factory=list)
    unchecked_days: list[str] = field(default_factory=list)


@dataclass
class ImportRejections:
    """The rows a ``biasboard import`` rejected, when the refresh reads that import's ``--out`` folder.

    Why: the refresh reads the folder's battles and skips its ``import_dead_letters.parquet`` (another schema),
    so its :class:`Counts` start after the import; without this a reader took every row of the source to have
    made it.  Counted by reason from the file's ``reason`` column as it stands at this refresh: the current
    input's import, not stored in the state nor summed over refreshes (a re-import replaces the file).  Only a
    folder names its import: a glob into it (``OUT/battles/day=*/*.parquet``) may select some of its days, so
    none is attributed.
    """

    option: str  # "--input" or "--scores": which input folder the import wrote
    path: str  # its import_dead_letters.parquet
    rejected: dict[str, int]
    rejected_total: int


@dataclass
class JudgeCounts:
    """Per judge, from the cells: battles and the shares of first-shown wins, second-shown wins and ties.

    The first- and second-shown shares are of the ``order_known`` battles, null when the judge has none (a
    battle whose shown order the log does not record has no first-shown answer); the tie shares are of all ``n``.
    """

    judge: str
    judge_family: str
    n: int
    win_a_share: float | None
    win_b_share: float | None
    tie_share: float
    bothbad_share: float
    self_battles: int
    models: int
    #: Battles whose shown order is known (None in a summary written before it was counted).
    order_known: int | None = None


#: Judges whose per-judge rows ``summary.json`` (``judges``, ``diagnostics.order``, ``diagnostics.family``) and
#: ``bias.json`` keep at most: the ones with the most battles.  Every judge's rows stay in the snapshot's Parquet
#: files (:class:`JudgeTables`): with arena voters as judges (50,000) the JSON copies reached ~130 MB.
SUMMARY_JUDGES_MAX: int = 200


@dataclass
class JudgeTables:
    """Where every judge's rows are when the JSON files keep only the :data:`SUMMARY_JUDGES_MAX` busiest.

    ``files``: per-judge table → the snapshot file holding all its rows (``judges`` → ``judges.parquet``,
    ``bias`` → ``bias.parquet``, and ``audit_judges`` / ``audit_family`` when the audit ran).
    """

    total: int  # judges in the snapshot
    kept: int  # judges whose rows the JSON files keep (the most battles; names break ties)
    files: dict[str, str] = field(default_factory=dict)


@dataclass
class Identifiability:
    """Whether the data pins a global effect down (profile likelihood) and where correction stops helping."""

    profile_range_nats: float
    prior_selected: bool
    message: str = ""
    corr_theta: float | None = None
    crossing: float | None = None


@dataclass
class Connectivity:
    """The comparison graph's connected components (ratings compare only within one)."""

    n_components: int
    components: list[list[str]]


@dataclass
class Convergence:
    converged: bool
    iterations: int
    grad_norm: float


@dataclass
class Profile:
    """The profile log likelihood of one global effect at its MAP and ±2 prior SDs."""

    range_nats: float
    grid: list[float]
    loglik: list[float]
    note: str = ""
    warning: str | None = None
    #: How the values were had when not by solving each point (``--diagnostics full``, None): ``fast``'s quadratic
    #: (Wald) approximation, whose range is within about 2x of the profile's, not the profile itself.
    method: str | None = None


@dataclass
class Covariates:
    """Correlation of model quality with the length covariate (Xu et al.'s crossing-point check)."""

    corr_theta_length_corrected: float | None
    corr_theta_length_naive: float | None
    corr_theta_log_length_corrected: float | None
    corr_theta_log_length_naive: float | None
    crossing_point_range: list[float]
    length_profile: str


@dataclass
class Comparison:
    """The naive and the corrected ranking compared (over the models both rank)."""

    kendall_tau: float | None
    spearman: float | None
    n_models: int


#: Which covariance a naive board's intervals come from (:attr:`NaiveDiagnostics.covariance`).
NAIVE_SANDWICH, NAIVE_LAPLACE = "sandwich", "laplace"


@dataclass
class NaiveDiagnostics:
    n_components: int
    tie_convention: str
    prior_theta_sd: float | None = None
    components: list[list[str]] | None = None
    #: :data:`NAIVE_SANDWICH` or :data:`NAIVE_LAPLACE`: the covariance its intervals came from — the sandwich for a
    #: maximum-likelihood board of battles unless it left a rating no variance
    #: (:func:`~biasboard.ranking.fit.half_win_sandwich`), the Laplace one otherwise.  None in a summary written before
    #: it was recorded.
    covariance: str | None = None


@dataclass
class JudgeAudit:
    """One judge's row of the audit's per-judge table, every column under the audit's own name.

    ``slot_*``: all its verdicts between two different models — first-shown wins, second-shown wins,
    ties, and their shares; ``slot_tie`` counts the plain ties and ``slot_bothbad`` the ``tie (bothbad)`` ones
    (``first + second + tie + bothbad = n``), while ``slot_tie_share`` is the share of both kinds, so the
    first, second and tie shares add up to 1 (``slot_bothbad_share_of_ties`` splits it); ``identical_*``: the
    same over self-battles (identical answers);
    ``order_*``: over prompt-pairs judged in both orders, the 3×3 cross-tab (``order_c_uv``), flips and
    consistency (``order_flip_rate_se``: one standard error clustered on its pairs on one prompt — over the
    history, or within a day per ``audit_clusters.closed_over`` — as ``len_*``'s below); ``pba_*``:
    consistency under the Position-Bias-Analyzer convention; ``len_*``: the length
    profile of its picks (``len_longer_win_rate_se`` clustered on its verdicts on one prompt, every pair);
    ``gold_*``: accuracy against trusted labels and its baselines (``gold_accuracy_se``
    clustered the same way: a gold case judged in both orders is one cluster).  None where the
    data hold nothing to measure (no pair in both orders, no gold label).  ``order_c_uv``, ``order_consistent``
    and ``pba_consistent`` are counts with weights (a prompt judged more than once in one order is one pair
    split by its verdicts' shares: :data:`~biasboard.audit.measures.WEIGHTED_COUNTS`), shown to two decimals;
    the audit's Parquet tables keep the sums as computed.
    """

    judge: str
    slot_n: int | None = None
    slot_first: int | None = None
    slot_second: int | None = None
    slot_tie: int | None = None
    slot_bothbad: int | None = None
    slot_first_share: float | None = None
    slot_second_share: float | None = None
    slot_tie_share: float | None = None
    slot_bothbad_share_of_ties: float | None = None
    slot_declared_share: float | None = None
    slot_first_share_of_declared: float | None = None
    identical_n: int | None = None
    identical_first: int | None = None
    identical_second: int | None = None
    identical_tie: int | None = None
    identical_bothbad: int | None = None
    identical_first_share: float | None = None
    identical_second_share: float | None = None
    identical_tie_share: float | None = None
    identical_bothbad_share_of_ties: float | None = None
    identical_declared_share: float | None = None
    identical_first_share_of_declared: float | None = None
    order_pairs: float | None = None
    order_c_xx: float | None = None
    order_c_xy: float | None = None
    order_c_xt: float | None = None
    order_c_yx: float | None = None
    order_c_yy: float | None = None
    order_c_yt: float | None = None
    order_c_tx: float | None = None
    order_c_ty: float | None = None
    order_c_tt: float | None = None
    order_consistent: float | None = None
    order_consistency_rate: float | None = None
    order_flip_rate: float | None = None
    order_flip_rate_se: float | None = None
    order_tie_flip_rate: float | None = None
    order_prefers_first_rate: float | None = None
    order_prefers_second_rate: float | None = None
    pba_judgments: float | None = None
    pba_consistent: float | None = None
    pba_consistency_rate: float | None = None
    len_n: int | None = None
    len_n_diff: int | None = None
    len_n_decisive_diff: int | None = None
    len_mean_chosen: float | None = None
    len_mean_rejected: float | None = None
    len_longer_win_rate: float | None = None
    len_longer_win_rate_se: float | None = None
    len_agreement_pick_longer: float | None = None
    gold_n_labeled: int | None = None
    gold_n_discriminative: int | None = None
    gold_discriminative_share: float | None = None
    gold_accuracy: float | None = None
    gold_accuracy_se: float | None = None
    gold_strict_accuracy: float | None = None
    gold_judge_ties: int | None = None
    gold_random_pick_baseline: float | None = None
    gold_longest_pick_baseline: float | None = None
    gold_lift_over_random: float | None = None
    gold_lift_over_longest: float | None = None


@dataclass
class ModelConsistency:
    """A model's win rate among order-consistent pairs (ties half) ± SE, pooled over judges.

    Order-consistent: the judge saw the same prompt and pair in both orders and gave the same verdict
    both times, so position bias cannot have decided it (“Position bias in pairwise judging”).  ``consistent``
    is a count with weights, shown to two decimals (see :class:`JudgeAudit`).  ``consistent_win_rate_se`` is
    clustered by prompt across judges: one cluster = every judge's consistent pairs of the model on one prompt
    within a day (every opponent it met there).  The judges of a prompt judge the same answers, so their verdicts
    on the model's answer are correlated; clustered per judge, as it was, the SE was too small by up to
    √(judges) when judges agree (4 judges on shared prompts, simulated: 95% intervals covered 0.760, by prompt
    0.940).
    """

    model: str
    pairs: float
    consistent: float
    consistent_win_rate: float | None
    consistent_win_rate_se: float | None
    averaged_win_rate: float | None


@dataclass
class FamilyPreference:
    """Win rate of the judge's own family's models under the judge vs under judges of other families."""

    judge: str
    judge_family: str
    n_self: int
    n_other_judges: int
    win_rate_self: float | None
    win_rate_other_judges: float | None
    self_preference: float | None
    self_preference_se: float | None


@dataclass
class AuditClusters:
    """How many of the audit's (judge, prompt) clusters recur on other days (``audit.json``'s ``clusters``,
    :class:`biasboard.audit.measures.ClusterRecurrence`): the clustered SEs close a cluster over the whole history
    when its distinct keys are few, else within a day, where a prompt judged on several days is several clusters.
    A measurement, not a warning (the report says it beside the SEs from
    :data:`~biasboard.audit.measures.RECURRING_NOTE_SHARE` on, when they were closed within a day)."""

    day_keys: int
    distinct_keys: int
    days: int
    recurring_share: float
    #: ``history``: the clusters were closed over every day (few distinct keys), so a prompt on several days is one
    #: cluster and no note is due; ``day``: within each day (an older audit.json has no field: ``day``).
    closed_over: str = "day"


@dataclass
class Gate:
    """The trusted-anchor gate's decisions (written by :meth:`biasboard.ranking.gate.GateResult.to_json`)."""

    method: str
    k: int
    level: float
    decisions: list[dict[str, Any]]
    disabled: list[list[str]]


@dataclass
class ReferenceInfo:
    """Which raters define "unbiased" and their own effects (:meth:`biasboard.ranking.reference.ReferenceFit.summary`).

    ``own_effects`` maps position/length/affinity/discrimination to estimate and 95% CI; ``unidentified``
    lists prior-selected corrections with what applying them would change; ``all_corrections_on``
    compares the published board with every correction on; ``agreement`` scores each judge (and both
    boards) against the reference's verdicts — the anchors', or every verdict of the reference judges (all the
    voters a pattern names) — as accuracy and mean log loss on the decided ones: ``*_uncorrected`` with the
    judge's own fitted effects, ``*_corrected`` with the reference's effects in their place (the yardstick the
    gate and the rating use: for a pattern, the pool's shared coefficients).  One row per judge that is not a
    reference judge (with voter-judges, the ``LISTED_JUDGES`` with the most battles, said in ``notes``), then
    the ``AGREEMENT_BOARDS`` rows (the ratings alone; ``*_corrected`` null).  Empty without a reference.
    """

    kind: str
    judges: list[str]
    description: str
    corrected_rating: str
    verdicts: int
    own_effects: dict[str, dict[str, Any]] = field(default_factory=dict)
    gate: Gate | None = None
    unidentified: list[dict[str, Any]] = field(default_factory=list)
    all_corrections_on: dict[str, Any] = field(default_factory=dict)
    agreement: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class Diagnostics:
    """The fit's diagnostics as published; the audit parts are present when the audit ran."""

    identifiability: dict[str, Identifiability]
    connectivity: Connectivity
    convergence: dict[str, Convergence]
    naive: NaiveDiagnostics
    n_components: int
    profile_likelihood: dict[str, Profile] = field(default_factory=dict)
    #: How the profile likelihoods were computed: ``full``, ``fast`` or ``off`` (``refresh --diagnostics``; None in
    #: a summary written before the field).  ``off``: ``identifiability`` is empty because the check was not run.
    profiles: str | None = None
    covariates: Covariates | None = None
    naive_vs_corrected: Comparison | None = None
    omega: float | None = None
    #: The judges' average discrimination: the geometric mean of every judge's a_j, each weighted by its pair
    #: verdicts (``ranking.fit.judges_discrimination``), over all judges, not only those the summary lists.  None on
    #: an ordinal-only board and in a summary written before it was recorded.
    judges_discrimination: float | None = None
    #: The judges whose discrimination, fixed at 1 (``ModelConfig.disabled``), sets the ratings' scale
    #: (``ranking.fit.scale_judges``): on such a board a discrimination of 1 is theirs, not the judges' average.  None
    #: when the judges' average (or the grades) sets it, and in a summary written before it was recorded.
    scale_judges: list[str] | None = None
    length_scale: float | None = None
    length_clip: float | None = None
    components: list[list[str]] | None = None
    order: list[JudgeAudit] = field(default_factory=list)
    order_models: list[ModelConsistency] = field(default_factory=list)
    family: list[FamilyPreference] = field(default_factory=list)
    gate: Gate | None = None
    audit_clusters: AuditClusters | None = None


@dataclass
class RankInterval:
    """A model's rank and the central interval of its rank over posterior draws (or bootstrap replicates)."""

    model: str
    rank: int
    low: int
    high: int


@dataclass
class Ranks:
    """Rank intervals of both boards, at ``level`` (e.g. 0.95), from ``source`` draws."""

    level: float
    source: str
    draws: int
    naive: list[RankInterval]
    corrected: list[RankInterval]


@dataclass
class HeadToHead:
    """Observed results among the top models (by corrected rank), over all judges and both orders.

    ``battles[i][j]`` counts battles between models i and j; ``win_rate[i][j]`` is i's share of them
    (ties half), None where they never met.
    """

    models: list[str]
    battles: list[list[int]]
    win_rate: list[list[float | None]]


@dataclass
class SliceInfo:
    """One slice of ``refresh --slices``: its label, its battles, and whether its boards were fit.

    ``fitted`` false: fewer than ``min_battles`` battles, listed but not fit (``note`` says so); ``fitted`` true
    with a ``note``: the slice's battles fall into groups no battle links (its board's ``component``), named there,
    and/or they show each pair in one order only or nearly so, so its position correction was left off as
    prior-selected, or rests on each model's being shown first in about half its battles, or on the model's
    transitivity alone (:func:`~biasboard.transforms.slices.order_note`),
    and/or its battles do not identify some other correction, left off its board as prior-selected, or its fit did
    not converge (:func:`~biasboard.transforms.slices.left_off_note`), and/or they lack the lengths or style counts
    (some or all) the overall board corrects with (:func:`~biasboard.transforms.slices.coverage_note`), and with a
    reference what the slice's own gate corrected (:func:`~biasboard.transforms.slices.gate_note`), and whatever it
    says, the other spellings (by case) of its label its battles carry
    (:func:`~biasboard.transforms.slices.spelling_note`);
    ``kendall_tau``: naive vs corrected within the slice (None when not fit); ``ranks``: the slice's
    rank intervals, drawn as the overall board's are (None when not fit).
    """

    slice: str  # "category=coding"
    dimension: str
    value: str
    battles: int
    models: int
    fitted: bool
    min_battles: int
    top_k: int = 0  # the k of the slice's P(top k) (the snapshot's k, at most the slice's models - 1)
    kendall_tau: float | None = None
    note: str = ""
    ranks: Ranks | None = None


@dataclass
class StyleEffect:
    """A global style effect: log-odds per unit of the normalised difference (c_a − c_b)/(c_a + c_b), 95% CI."""

    feature: str  # "header", "list", "bold"
    estimate: float
    ci_low: float
    ci_high: float
    identified: bool


@dataclass
class StyleModel:
    """One model on the style-kept board, beside its rank on the published (style-removed) board."""

    model: str
    rating: float  # logit, centred like the leaderboard's rating_corrected
    rank: int  # on the style-kept board
    rank_corrected: int  # on the published corrected board (style removed)


@dataclass
class StyleInfo:
    """Style control (issue 12.4), present only when battles carry the style counts.

    The published corrected board (``leaderboard.*``) has style **removed**: θ is fitted beside per-judge
    header/list/bold effects, as it is beside length.  With a reference (``ReferenceInfo``) style is measured
    against it like length: a judge's excess over the reference's style effects is removed, and the reference's
    own preference (its ``own_effects``, when told from zero) is kept in the rating; ``effects`` (the bias table's
    ``*`` rows) are then the reference's own effects where the rating keeps them (estimated from its verdicts and
    those of the judges tied to it), and the judges' mean where the reference's is taken as zero (no data of it, or
    not told from zero: ``own_effects`` ``applied`` 0) — without a reference, the judges' population means.  ``kept``
    is the same bias-aware model fitted
    without the style effects (``ModelConfig(style=False)``, same reference, priors and length term):
    θ there keeps whatever the judges rewarded in formatting — LMArena's default board against its
    style-controlled one.  The per-judge style effects are rows of ``bias.*`` (effects ``header``,
    ``list``, ``bold``); ``kendall_tau`` compares the two boards.
    """

    features: list[str]
    battles: int  # battles with all six style counts
    effects: list[StyleEffect]
    kendall_tau: float | None
    kept: list[StyleModel]


@dataclass
class CorrectionMove:
    """What one correction did to one model: its rating with the correction removed, and the rank that gives."""

    effect: str  # "position", "length", "affinity", "header", "list", "bold", "severity"
    delta_rating: float  # Elo-like points the corrected rating would move with this correction removed
    rank_without: int  # the model's rank with this correction removed (every other one kept)
    # places this correction moved the model up (< 0: down), counted among the models both boards rank, as
    # rank_change is: rank_without − rank_corrected unless a graded-only model (no naive rank) was passed
    places: int


@dataclass
class ModelMove:
    """One model of the leaderboard: its rank change naive → corrected, split over the corrections."""

    model: str
    component: int
    rank_naive: int | None
    rank_corrected: int
    rank_change: int | None  # the leaderboard's: rank_naive − rank_corrected (among the models both rank)
    corrections: list[CorrectionMove]
    rank_without_all: int  # the rank with every correction removed at once (the Δ ratings summed)
    unexplained: int | None  # rank_change − Σ places: ties, judge scale, the corrections' interplay


@dataclass
class Attribution:
    """Which correction moved each model (:mod:`biasboard.ranking.attribution`): per model and correction of the
    published board, the rating change and rank with that correction removed.  ``left_out`` names the effects
    the published board does not correct (switched off by the gate or the configuration, prior-selected, tied to the
    reference, no data), with why; they have no rows."""

    method: str
    effects: list[str]
    left_out: dict[str, str]
    models: list[ModelMove]


@dataclass
class Summary:
    """summary.json: τ and ρ naive vs corrected, counts by reason, judges, diagnostics, warnings."""

    kendall_tau: float | None
    spearman: float | None
    models: int
    top_k: int
    ci_level: float
    days: Days
    counts: Counts
    judges: list[JudgeCounts]
    diagnostics: Diagnostics
    warnings: list[str] = field(default_factory=list)
    score_counts: Counts | None = None
    ranks: Ranks | None = None
    head_to_head: HeadToHead | None = None
    reference: ReferenceInfo | None = None
    #: Where the leaderboard's CIs, P(top-k) and rank intervals come from: "laplace" (the Laplace
    #: posterior), "godambe" (with grades weighed at ω ∉ {0.5, 1}: the Godambe sandwich of the weighted likelihood,
    #: ``ranking/composite.py``) or "bootstrap" (refresh --bootstrap B: the replicates, percentile CIs).
    uncertainty: str = "laplace"
    #: Per-slice boards (``refresh --slices``; their tables in slices.parquet); empty when not asked.
    slices: list[SliceInfo] = field(default_factory=list)
    #: What the boards are fit on: :data:`PAIRWISE` (battles, with or without grades) or :data:`ORDINAL_ONLY`
    #: (single grades alone: the many-facet model; no position, length, affinity, tie or audit).
    board: str = PAIRWISE
    #: The style-kept board and the global style effects; None when no battle carries style counts.
    style: StyleInfo | None = None
    #: Rows rejected at import, per input folder that is a ``biasboard import --out`` folder (not in ``counts``).
    import_rejected: list[ImportRejections] = field(default_factory=list)
    #: Set when the snapshot has more than :data:`SUMMARY_JUDGES_MAX` judges: the per-judge lists above keep
    #: the busiest judges only, and this says how many there are and which Parquet files hold them all.
    judge_tables: JudgeTables | None = None
    #: Which correction moved each model (None: a board fit without diagnostics).
    attribution: Attribution | None = None
    #: The days whose battle ids repeat an earlier day's, and the days not checked (None: neither; the check over
    #: the stored days, in ``counts.repeated_ids`` and the warnings too).
    repeated_ids: RepeatedIdsInfo | None = None
    version: int = SUMMARY_VERSION

    @property
    def n_judges(self) -> int:
        """Judges in the snapshot (``judges`` may list only the busiest; see :attr:`judge_tables`)."""
        return self.judge_tables.total if self.judge_tables is not None else len(self.judges)

    def to_json(self) -> dict[str, Any]:
        """The JSON document (a dict of plain values; :func:`biasboard.transforms.publish.json_bytes` writes it)."""
        return to_jsonable(self)

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> Summary:
        """Read a summary.json document back; another major version or a missing field is an InputError."""
        if not isinstance(document, dict):
            raise InputError("summary: the document must be a JSON object")
        version = document.get("version", 1)
        if version != SUMMARY_VERSION:
            raise InputError(f"summary: version {version!r} is not the version this reader knows ({SUMMARY_VERSION})")
        return from_jsonable(cls, document)


__all__ = [
    "ORDINAL_ONLY",
    "ORDINAL_ONLY_BOARDS",
    "PAIRWISE",
    "SUMMARY_JUDGES_MAX",
    "SUMMARY_VERSION",
    "Comparison",
    "Connectivity",
    "Convergence",
    "Counts",
    "Covariates",
    "Days",
    "Diagnostics",
    "FamilyPreference",
    "Gate",
    "HeadToHead",
    "Identifiability",
    "ImportRejections",
    "JudgeAudit",
    "JudgeCounts",
    "JudgeTables",
    "ModelConsistency",
    "NaiveDiagnostics",
    "Profile",
    "RankInterval",
    "Ranks",
    "RepeatedDay",
    "RepeatedIdsInfo",
    "SliceInfo",
    "StyleEffect",
    "StyleInfo",
    "StyleModel",
    "Summary",
    "from_jsonable",
    "to_jsonable",
]
