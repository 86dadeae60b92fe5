"""A plan from a published snapshot: read its posterior, select the next comparisons, write them.

Plan runs no Beam pipeline (it reads two small files); it uses Beam's file
systems for ``gs://``.  The selection itself is
:func:`biasboard.plan.select_comparisons`; this module moves bytes.
:func:`plan_inputs` is what a refresh adds to a snapshot so a plan can be made
from it; :func:`make_plan` is what ``biasboard plan`` runs, and what ``biasboard
refresh --plan-budget`` runs after publishing.

A plan is ``plan.parquet`` and ``plan.csv``, then ``plan.json`` (what was planned from what): the folder's
``plan.json`` is removed before the tables are written and written after them (:func:`write_plan`), so a
``plan.json`` always describes complete tables beside it, and tables without one are a plan cut short.  Storage
lost mid-run leaves one line saying so (:data:`LEFT_BEFORE_WRITING`, :func:`left_writing`).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl
from biasboard.plan import JudgedRows, Posterior, Selection, posterior_from_fit, select_comparisons
from biasboard.plan.acquisition import POPULATION_JUDGE, STOP_JUDGE_CAP, STOP_NO_REPEAT, STOP_PAIR_CAP
from biasboard.schemas import summary as S
from biasboard.schemas.errors import InputError, StateError
from biasboard.schemas.summary import ORDINAL_ONLY
from biasboard.schemas.wording import first_few
from biasboard.transforms import publish, storage

_LOG = logging.getLogger(__name__)

#: The snapshot file plan reads; :func:`plan_inputs` writes it.
POSTERIOR_FILE = "posterior.npz"
PLAN_FILES = ("plan.parquet", "plan.csv", "plan.json")


def plan_inputs(fit_result, judged: JudgedRows | None = None) -> dict[str, bytes]:
    """Files to add to a snapshot so ``plan`` can run from it: ``{"posterior.npz": bytes}``.

    Call with the corrected (bias-aware) :class:`~biasboard.ranking.result.FitResult` when
    publishing: ``files.update(plan_inputs(corrected, judged))`` before ``publish_snapshot``.  ``judged``: the
    battles per (judge, model_a, model_b) the fit's data holds (``n``), so that ``plan --no-repeat`` skips what
    was judged before and round-robin counts it (:attr:`~biasboard.plan.acquisition.Posterior.judged`); without
    it the posterior says nothing of the past.  A fit of fewer than two models has no comparison to plan and gets
    no posterior (``plan`` then says so): building one raised, and took the whole refresh down with a traceback.
    """
    if fit_result.n_models < 2:
        return {}
    return {POSTERIOR_FILE: posterior_from_fit(fit_result, judged).to_bytes()}


def _shortfall_notes(selection: Selection, units: int) -> list[str]:
    """Why the plan holds fewer units than the budget asked for (the caps are limits, not hints)."""
    if selection.n_units >= units:
        return []
    if selection.stopped == STOP_NO_REPEAT:
        return [
            f"only {selection.n_units} units are available without repeats (every other pair was judged by each "
            "judge planned for, before or earlier in this plan)"
        ]
    held = {STOP_PAIR_CAP: ("pair", "--max-pair-share"), STOP_JUDGE_CAP: ("judge", "--max-judge-share")}
    if selection.stopped not in held:
        return []
    what, flag = held[selection.stopped]
    cap = selection.pair_cap if selection.stopped == STOP_PAIR_CAP else selection.judge_cap
    short = ""
    if selection.stopped == STOP_JUDGE_CAP:  # a judge below its share had no pair left it may be given (--no-repeat)
        given = np.bincount(selection.judge, minlength=len(selection.judges))
        below = [f"{name} ({int(n)})" for name, n in zip(selection.judges, given, strict=True) if n < cap]
        if below:
            has = "has" if len(below) == 1 else "have"
            short = f", but {first_few(below, 5)}, which {has} no other pair left it may be given"
    return [
        f"planned {selection.n_units} of the {units} units (a pair in both orders) the budget allows: every {what} "
        f"holds its share of the batch ({cap} unit{'s' if cap != 1 else ''} each){short}; raise {flag} to plan more"
    ]


def _components_note(posterior: Posterior) -> str:
    """Why a plan on a board of several comparison components links them first, and reads P(top k) otherwise."""
    return (
        f"the board has {posterior.n_components} comparison components (no battle links them): their levels "
        "against each other are known only from the rating prior, so pairs that link two components carry the "
        "most information, and p_top_k_a/_b here are over the whole board (the leaderboard's are within each "
        "component)"
    )


@dataclass(frozen=True)
class PlanResult:
    snapshot_id: str
    frame: pl.DataFrame
    paths: list[str]
    notes: list[str]
    strategy: str  # the one used: the one asked for, unless there is no top-k boundary to aim at (see notes)


def has_posterior(out_dir: str, snapshot_id: str) -> bool:
    """Whether the snapshot holds a posterior to plan from (not when its fit rated fewer than two models)."""
    return storage.exists(storage.join(publish.resolve_snapshot(out_dir, snapshot_id), POSTERIOR_FILE))


#: A plan's note when the snapshot's published uncertainty is the bootstrap's (:func:`_bootstrap_note`).
BOOTSTRAP_NOTE = (
    "p_top_k_a/_b are the Laplace posterior's, the one this plan updates after each pick; the leaderboard's P(top k) "
    "are percentiles of the snapshot's bootstrap replicates (--bootstrap), so the two can differ"
)


def _snapshot_summary(snapshot_path: str) -> dict:
    """The snapshot's summary.json as plain values ({} when it has none)."""
    path = storage.join(snapshot_path, "summary.json")
    return publish.read_snapshot_json(path) if storage.exists(path) else {}


def _bootstrap_note(summary: dict) -> list[str]:
    """Why the plan's P(top k) are not the leaderboard's when the snapshot published bootstrap intervals: the
    planner needs a posterior it can update (the Laplace one in posterior.npz), which the replicates are not
    (measured: 0.51 / 0.48 in the plan against the leaderboard's 0.60 / 0.40 at the top-3 boundary, B = 100)."""
    return [BOOTSTRAP_NOTE] if summary.get("uncertainty") == "bootstrap" else []


def _refuse_ordinal_only(summary: dict, snapshot_path: str) -> None:
    """An InputError for a snapshot fit on single grades alone, as ``refresh --plan-budget`` refuses one: its judges'
    pairwise effects were never estimated, so a plan of pairwise comparisons (written before, with "info 0.000
    nats") weighed parameters the fit does not have."""
    if summary.get("board") == ORDINAL_ONLY:
        raise InputError(
            f"{snapshot_path}: an ordinal-only board (single grades, no battles) has no pairwise verdicts to plan "
            "comparisons from"
        )


def read_posterior(snapshot_path: str) -> Posterior:
    """The snapshot's ``posterior.npz``; a :class:`StateError` saying how to get one when it is absent."""
    path = storage.join(snapshot_path, POSTERIOR_FILE)
    if not storage.exists(path):
        raise StateError(
            f"{path} does not exist: this snapshot has no posterior to plan from (its fit rated fewer than two "
            "models, so there is no comparison to plan; or it was published without "
            "biasboard.transforms.plan.plan_inputs(fit))"
        )
    try:
        return Posterior.from_bytes(storage.read_bytes(path), source=path)
    except ValueError as err:
        raise StateError(str(err)) from None


#: The planner's working memory per (judge planned for, ordered model pair): the judges' information about every
#: pair and its temporaries, the past counts and the "may be given" mask (measured with tracemalloc: 64–72 B).
PLAN_BYTES_PER_JUDGE_PAIR = 72
#: Most working memory a plan may take; past it the plan is refused, naming the judges to choose.
PLAN_MEMORY_LIMIT = 4 * 2**30


class PlanTooLarge(InputError):
    """Planning for every judge of the fit would not fit in :data:`PLAN_MEMORY_LIMIT` (voter-judges)."""


def check_plan_size(posterior: Posterior, judges: Sequence[str] | None) -> None:
    """:class:`PlanTooLarge` when the judges planned for (default: every judge of the fit) times the model pairs
    exceed the planner's memory: every judge is a candidate for every pair, so a board of 50,000 voter-judges over
    400 models would need ~580 GB, and a voter cannot be asked for a verdict anyway.  ``KeyError`` for a judge not
    in the fit, as :meth:`Posterior.judge_index`."""
    names, _ = posterior.judge_index(judges)
    m = posterior.n_models
    need = len(names) * m * m * PLAN_BYTES_PER_JUDGE_PAIR
    if need <= PLAN_MEMORY_LIMIT:
        return
    most = max(1, PLAN_MEMORY_LIMIT // (m * m * PLAN_BYTES_PER_JUDGE_PAIR))
    raise PlanTooLarge(
        f"planning for {len(names):,} judges over {m} models needs ~{need / 2**30:,.1f} GiB (every judge is weighed "
        f"for every pair; at most {most:,} judges fit in {PLAN_MEMORY_LIMIT / 2**30:.0f} GiB): name the judges that "
        f"can be asked with --judge (repeatable), e.g. the LLM judges, not each voter, and --judge "
        f"'{POPULATION_JUDGE}' for a new judge of the population (the next crowd voter)"
    )


#: Said when ``--no-repeat`` cannot see the past: the posterior was written before it held the judged pairs.
NO_PAST_NOTE = (
    "this snapshot's posterior.npz does not record which pairs each judge has judged (written before it did), so "
    "--no-repeat avoids repeats within this plan only; a refresh writes one that does"
)


#: What a plan that lost its storage before writing leaves (:func:`storage.if_unreachable`): it only read.
LEFT_BEFORE_WRITING = "no plan was written (nothing was changed)"


def left_writing(dest: str) -> str:
    """What a plan that lost its storage while writing into ``dest`` leaves: see :func:`write_plan`."""
    return (
        f"{storage.join(dest, PLAN_FILES[2])} is removed before the plan's tables are written and written after them: "
        "without it the tables there are partial; rerun"
    )


def write_plan(dest: str, frame: pl.DataFrame, meta: dict) -> list[str]:
    """Write the plan's tables and then ``plan.json`` under ``dest``, removing the old ``plan.json`` first; the paths.

    Why first: a plan rerun into the same folder (the same snapshot, another budget or strategy) that stopped after
    a table left the previous plan's ``plan.json`` beside the new table, one plan's description over another's
    rows.  Each file is replaced atomically, so what is there is whole; without ``plan.json`` it is not a plan.
    """
    marker = storage.join(dest, PLAN_FILES[2])
    storage.delete([marker])
    publish.failpoint("plan-json-removed")
    paths = []
    for name, fmt in zip(PLAN_FILES[:2], ("parquet", "csv"), strict=True):
        path = storage.join(dest, name)
        storage.atomic_write_bytes(path, publish.table_bytes(frame, fmt))
        paths.append(path)
    storage.atomic_write_bytes(marker, publish.json_bytes(meta))
    return [*paths, marker]


#: The largest plan one call makes: picks are greedy with a posterior update each, O(models²) apiece.
MAX_BUDGET = 100_000


#: The strategies that aim at the top-k boundary (:mod:`biasboard.plan.acquisition`).
TOP_K_STRATEGIES: frozenset[str] = frozenset({"topk", "thompson"})


def make_plan(
    out_dir: str,
    budget: int,
    *,
    strategy: str = "topk",
    k: int | None = None,
    judges: Sequence[str] | None = None,
    snapshot_id: str | None = None,
    to: str | None = None,
    seed: int = 0,
    repeat: bool = True,
    max_pair_share: float | None = None,
    max_judge_share: float | None = None,
    notes: Sequence[str] = (),
) -> PlanResult:
    """Plan ``budget`` comparisons from a snapshot and write them; refresh may call this after publishing.

    ``notes`` are the caller's, kept first in the plan's ``notes`` (refresh's: why it planned for whom it did)."""
    if budget < 2:
        raise InputError(f"--budget {budget}: at least 2 comparisons (one pair in both orders) are needed")
    if budget > MAX_BUDGET:
        raise InputError(
            f"--budget {budget}: at most {MAX_BUDGET} comparisons per plan (the posterior is updated after each "
            "pick, so one plan is for the next round; refresh and plan again for the round after)"
        )
    if k is not None and k < 1:
        raise InputError(f"--k {k}: must be at least 1")
    if seed < 0:
        raise InputError(f"--seed {seed}: must be at least 0")
    for flag, share in (("--max-pair-share", max_pair_share), ("--max-judge-share", max_judge_share)):
        if share is not None and not 0.0 < share <= 1.0:
            raise InputError(f"{flag} {share}: must be a fraction of the batch in (0, 1]")
    with storage.if_unreachable(LEFT_BEFORE_WRITING):
        source = publish.resolve_snapshot(out_dir, snapshot_id)
        chosen = publish.read_snapshot_manifest(source).get("snapshot_id") or source.rstrip("/").rsplit("/", 1)[-1]
        summary = _snapshot_summary(source)
        _refuse_ordinal_only(summary, source)
        posterior = read_posterior(source)
    notes = list(notes)
    if k is not None and k >= posterior.n_models:
        raise InputError(f"--k {k}: the snapshot has only {posterior.n_models} models, so every model is in the top k")
    if k is None and posterior.k >= posterior.n_models and strategy in TOP_K_STRATEGIES:
        # The snapshot's own k (refresh's --k, 10 by default) on a smaller board: no top-k boundary to aim at, every
        # score would be 0 and the order arbitrary.  A refresh's --plan-budget gets here too, after publishing: a
        # plan for the whole board rather than an error.
        notes.append(
            f"the snapshot's k ({posterior.k}) is not below its {posterior.n_models} models, so there is no top-k "
            f"boundary: planned by dopt (every rating's precision) instead of {strategy}; pass --k to aim at one"
        )
        strategy = "dopt"
    try:
        check_plan_size(posterior, judges)
        counts = posterior.past_counts(judges)
        selection = select_comparisons(
            posterior,
            budget,
            strategy,
            k=k,
            judges=judges,
            counts=counts,
            seed=seed,
            repeat=repeat,
            max_pair_share=max_pair_share,
            max_judge_share=max_judge_share,
        )
    except KeyError as err:
        raise InputError(f"--judge: {err.args[0]}") from None
    if counts is None and not repeat:
        notes.append(NO_PAST_NOTE)
    if budget % 2:
        notes.append(f"budget {budget} is odd: planned {budget - 1} (each pair runs in both orders)")
    notes.extend(_shortfall_notes(selection, budget // 2))
    if posterior.n_components > 1:
        notes.append(_components_note(posterior))
    notes.extend(_bootstrap_note(summary))
    frame = selection.to_frame(posterior)
    dest = to or storage.join(out_dir, "plans", chosen)
    meta = {
        "snapshot_id": chosen,
        "source": source,
        "strategy": strategy,
        "budget": budget,
        "planned": frame.height,
        "k": k if k is not None else posterior.k,
        # the judges weighed, as the JSON files keep judges: past SUMMARY_JUDGES_MAX (a board of voter-judges) the
        # first of them and the count; plan.parquet's judge column names the judges the plan asks
        "judges": list(selection.judges)[: S.SUMMARY_JUDGES_MAX],
        "judges_count": len(selection.judges),
        "seed": seed,
        "repeat": repeat,
        "past_counts": counts is not None,
        "posterior_method": posterior.method,
        "files": list(PLAN_FILES[:2]),
        "notes": notes,
        "planned_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    with storage.if_unreachable(left_writing(dest)):
        paths = write_plan(dest, frame, meta)
    _LOG.info("plan: %d comparisons by %s from %s → %s", frame.height, strategy, chosen, dest)
    return PlanResult(chosen, frame, paths, notes, strategy)
