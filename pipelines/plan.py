"""``biasboard plan``: the next comparisons to run, from a published snapshot's posterior.

    biasboard plan --out OUT --budget B [--k K] [--judge J ...] [--strategy topk|dopt|thompson|roundrobin|random]
                   [--snapshot ID] [--to DIR] [--seed S] [--no-repeat]

Reads ``posterior.npz`` (θ mean and covariance, k, each judge's position/discrimination/tie effects)
from the snapshot ``LATEST`` names (or ``--snapshot ID``) under ``OUT`` — local or ``gs://`` — and
writes ``plan.parquet``, ``plan.csv`` and ``plan.json`` (what was planned from what) to ``--to``
(default ``OUT/plans/<snapshot id>/``; snapshots themselves are immutable).  Each planned pair comes
as two consecutive rows, one per order, so the position effect stays identified.  ``plan.json`` is
written last, so a harness polling it never reads a half-written plan.

The selection itself is :func:`biasboard.plan.select_comparisons`; this module only
moves bytes.  :func:`plan_inputs` is what ``refresh`` calls to put the posterior into a snapshot.
Plan runs no Beam pipeline (it reads two small files); it uses Beam's file systems for ``gs://``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl
from biasboard.plan import STRATEGIES, Posterior, posterior_from_fit, select_comparisons
from biasboard.schemas.errors import InputError, StateError
from biasboard.transforms import publish, storage

_LOG = logging.getLogger(__name__)

#: The snapshot file plan reads; :func:`plan_inputs` writes it.
POSTERIOR_FILE = "posterior.npz"
PLAN_FILES = ("plan.parquet", "plan.csv", "plan.json")


def plan_inputs(fit_result) -> dict[str, bytes]:
    """Files to add to a snapshot so ``plan`` can run from it: ``{"posterior.npz": bytes}``.

    Call with the corrected (bias-aware) :class:`~biasboard.ranking.result.FitResult` when
    publishing: ``files.update(plan_inputs(corrected))`` before ``publish_snapshot``.
    """
    return {POSTERIOR_FILE: posterior_from_fit(fit_result).to_bytes()}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="output folder holding snapshots/ and LATEST (local or gs://)")
    parser.add_argument("--budget", required=True, type=int, help="comparisons to plan (pairs x 2 orders)")
    parser.add_argument("--k", type=int, default=None, help="size of the top set to target (default: the fit's k)")
    parser.add_argument("--judge", action="append", default=None,
                        help="plan for this judge (repeatable; default: every judge of the fit)")
    parser.add_argument("--strategy", choices=STRATEGIES, default="topk",
                        help="topk (seed 000's rule, default), dopt, thompson, roundrobin or random")
    parser.add_argument("--snapshot", default=None, help="snapshot id (default: the one LATEST names)")
    parser.add_argument("--to", default=None, help="where to write the plan (default: OUT/plans/<snapshot id>)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the Monte Carlo draws (plans are deterministic)")
    parser.add_argument("--no-repeat", action="store_true",
                        help="plan each pair at most once (frozen judge: re-asking gives the same verdict)")


def run(args: argparse.Namespace, beam_args: list[str]) -> int:
    from apache_beam.options.pipeline_options import GoogleCloudOptions
    from biasboard.pipelines.options import beam_options

    storage.configure_gcs_auth(no_auth=beam_options(beam_args).view_as(GoogleCloudOptions).no_auth)
    result = make_plan(args.out, args.budget, strategy=args.strategy, k=args.k, judges=args.judge,
                       snapshot_id=args.snapshot, to=args.to, seed=args.seed, repeat=not args.no_repeat)
    print(f"planned {result.frame.height} comparisons ({result.frame.height // 2} pairs, both orders) "
          f"by {args.strategy} from snapshot {result.snapshot_id}")
    for note in result.notes:
        print(f"note: {note}")
    for path in result.paths:
        print(path)
    return 0


@dataclass(frozen=True)
class PlanResult:
    snapshot_id: str
    frame: pl.DataFrame
    paths: list[str]
    notes: list[str]


def read_posterior(snapshot_path: str) -> Posterior:
    """The snapshot's ``posterior.npz``; a :class:`StateError` saying how to get one when it is absent."""
    path = storage.join(snapshot_path, POSTERIOR_FILE)
    if not storage.exists(path):
        raise StateError(
            f"{path} does not exist: this snapshot was published without the posterior that plan needs "
            "(refresh must add biasboard.pipelines.plan.plan_inputs(fit) to the snapshot's files)"
        )
    try:
        return Posterior.from_bytes(storage.read_bytes(path), source=path)
    except ValueError as err:
        raise StateError(str(err)) from None


#: The largest plan one call makes: picks are greedy with a posterior update each, O(models²) apiece.
MAX_BUDGET = 100_000


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
) -> PlanResult:
    """Plan ``budget`` comparisons from a snapshot and write them; refresh may call this after publishing."""
    if budget < 2:
        raise InputError(f"--budget {budget}: at least 2 comparisons (one pair in both orders) are needed")
    if budget > MAX_BUDGET:
        raise InputError(
            f"--budget {budget}: at most {MAX_BUDGET} comparisons per plan (the posterior is updated after each "
            "pick, so one plan is for the next round; refresh and plan again for the round after)"
        )
    if k is not None and k < 1:
        raise InputError(f"--k {k}: must be at least 1")
    source = publish.resolve_snapshot(out_dir, snapshot_id)
    chosen = publish.read_manifest(source).get("snapshot_id") or source.rstrip("/").rsplit("/", 1)[-1]
    posterior = read_posterior(source)
    notes: list[str] = []
    if k is not None and k >= posterior.n_models:
        raise InputError(f"--k {k}: the snapshot has only {posterior.n_models} models, so every model is in the top k")
    try:
        selection = select_comparisons(posterior, budget, strategy, k=k, judges=judges, seed=seed, repeat=repeat)
    except KeyError as err:
        raise InputError(f"--judge: {err.args[0]}") from None
    if budget % 2:
        notes.append(f"budget {budget} is odd: planned {budget - 1} (each pair runs in both orders)")
    if 2 * selection.n_units < budget - budget % 2:
        notes.append(f"only {selection.n_units} distinct pairs are available without repeats")
    frame = selection.to_frame(posterior)
    dest = to or storage.join(out_dir, "plans", chosen)
    paths = []
    for name, fmt in (("plan.parquet", "parquet"), ("plan.csv", "csv")):
        path = storage.join(dest, name)
        storage.atomic_write_bytes(path, publish.table_bytes(frame, fmt))
        paths.append(path)
    meta = {
        "snapshot_id": chosen,
        "source": source,
        "strategy": strategy,
        "budget": budget,
        "planned": frame.height,
        "k": k if k is not None else posterior.k,
        "judges": list(selection.judges),
        "seed": seed,
        "repeat": repeat,
        "posterior_method": posterior.method,
        "files": list(PLAN_FILES[:2]),
        "notes": notes,
        "planned_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    meta_path = storage.join(dest, "plan.json")
    storage.atomic_write_bytes(meta_path, publish.json_bytes(meta))
    paths.append(meta_path)
    _LOG.info("plan: %d comparisons by %s from %s → %s", frame.height, strategy, chosen, dest)
    return PlanResult(chosen, frame, paths, notes)
