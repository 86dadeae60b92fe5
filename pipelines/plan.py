"""``biasboard plan``: the next comparisons to run, from a published snapshot's posterior.

    biasboard plan --out OUT --budget B [--k K] [--judge J ...] [--strategy topk|dopt|thompson|roundrobin|random]
                   [--snapshot ID] [--to DIR] [--seed S] [--no-repeat]

Reads ``posterior.npz`` (θ mean and covariance, k, each judge's position/discrimination/tie effects,
the battles each judge has judged per model pair, which ``--no-repeat`` and round-robin read) from the
snapshot ``LATEST`` names (or ``--snapshot ID``) under ``OUT`` — local or ``gs://`` — and
writes ``plan.parquet``, ``plan.csv`` and ``plan.json`` (what was planned from what) to ``--to``
(default ``OUT/plans/<snapshot id>/``; snapshots themselves are immutable).  Each planned pair comes
as two consecutive rows, one per order, so the position effect stays identified.  ``plan.json`` is
removed first and written last, so a harness polling it never reads a half-written plan (nor an earlier
plan's ``plan.json`` beside this one's tables); storage lost midway ends the job in one line saying so.

The selection itself is :func:`biasboard.plan.select_comparisons` and the reading and writing
:func:`biasboard.transforms.plan.make_plan`; this module only parses the flags.
Plan runs no Beam pipeline (it reads two small files); it uses Beam's file systems for ``gs://``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import polars as pl
from apache_beam.options.pipeline_options import GoogleCloudOptions
from biasboard.pipelines import validation
from biasboard.pipelines.options import OneFolder, beam_options, defaults_from, options_from
from biasboard.pipelines.validation import NumberRule
from biasboard.plan import STRATEGIES
from biasboard.schemas.errors import InputError
from biasboard.schemas.names import canonical_name
from biasboard.transforms import storage
from biasboard.transforms.plan import make_plan

#: A cap's share of the batch as the command line reads it (plan checks the bound (0, 1] and says why).
SHARE = NumberRule(above=0.0)


@dataclass(frozen=True)
class PlanOptions:
    """The job's own options besides ``--out`` and ``--budget``; their defaults (None: decided from the fit)."""

    k: int | None = None
    judge: list[str] | None = None
    strategy: str = "topk"
    snapshot: str | None = None
    to: str | None = None
    seed: int = 0
    repeat: bool = True
    max_pair_share: float | None = None
    max_judge_share: float | None = None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out", action=OneFolder, required=True, help="output folder holding snapshots/ and LATEST (local or gs://)"
    )
    parser.add_argument(
        "--budget",
        required=True,
        type=NumberRule(integer=True, low=2).flag_type("--budget"),
        help="comparisons to plan (pairs x 2 orders)",
    )
    parser.add_argument(
        "--k",
        type=NumberRule(integer=True, low=1).flag_type("--k"),
        help="size of the top set to target (default: the fit's k)",
    )
    parser.add_argument(
        "--judge",
        action="append",
        help="plan for this judge (repeatable; default: every judge of the fit's battles); '*' is a new judge of the "
        "population (the next crowd voter: the fit's global effects; toward a --reference, the judges' mean "
        "position effect, not the reference's), what a board of voter-judges plans for",
    )
    parser.add_argument(
        "--strategy",
        choices=STRATEGIES,
        help="topk (Xu et al.'s rule), dopt, thompson, roundrobin or random (default %(default)s)",
    )
    parser.add_argument("--snapshot", help="snapshot id (default: the one LATEST names)")
    parser.add_argument("--to", action=OneFolder, help="where to write the plan (default: OUT/plans/<snapshot id>)")
    parser.add_argument(
        "--seed",
        type=NumberRule(integer=True, low=0).flag_type("--seed"),
        help="seed of the Monte Carlo draws (plans are deterministic; default %(default)s)",
    )
    parser.add_argument(
        "--no-repeat",
        dest="repeat",
        action="store_false",
        help="give no judge a pair it has already judged, in the snapshot's data or earlier in this plan (frozen "
        "judge: re-asking gives the same verdict; another judge's is new; prompts are not planned, so a pair "
        "judged on any prompt counts); a snapshot written before it recorded the judged pairs: within this plan only",
    )
    parser.add_argument(
        "--max-pair-share",
        type=SHARE.flag_type("--max-pair-share"),
        help="most of the batch one pair may take, a fraction in (0, 1] (default: an equal split "
        "over the pairs, rounded up); a limit, rounded down to whole units: a plan that fills it stops short of "
        "the budget, with a note",
    )
    parser.add_argument(
        "--max-judge-share",
        type=SHARE.flag_type("--max-judge-share"),
        help="most of the batch one judge may take, a fraction in (0, 1] (default: an equal split "
        "over the judges, rounded up); a limit, rounded down to whole units: a plan that fills it stops short of "
        "the budget, with a note; '*' (a new judge for every verdict) is not held by it",
    )
    defaults_from(parser, PlanOptions())


def run(args: argparse.Namespace, beam_args: list[str]) -> int:
    job = options_from(PlanOptions, args)
    storage.configure_gcs(no_auth=beam_options(beam_args).view_as(GoogleCloudOptions).no_auth)
    validation.input_buckets(("--out", args.out), ("--to", job.to))  # storage gone from the start: the probe's 12 s
    # read as the fit's judge names are: " gpt-4" or a decomposed "é" named no judge of the fit ('*' is kept)
    judges = [canonical_name(name) for name in job.judge] if job.judge else job.judge
    if judges and any(not name for name in judges):
        # '' is the planner's own stand-in for "no judge" (a board without judges): given, it planned for no judge
        raise InputError("--judge '': a judge name is empty (name a judge of the fit, or '*' for a new judge)")
    if job.to:
        validation.writable_folder(job.to, "--to")  # (a file there was "[Errno 17] File exists")
        validation.not_owned(job.to, "--to", allow=("plans",))
    result = make_plan(
        args.out,
        args.budget,
        strategy=job.strategy,
        k=job.k,
        judges=judges,
        snapshot_id=job.snapshot,
        to=job.to,
        seed=job.seed,
        repeat=job.repeat,
        max_pair_share=job.max_pair_share,
        max_judge_share=job.max_judge_share,
    )
    frame = result.frame
    pairs = frame.select(
        pl.min_horizontal("model_a", "model_b").alias("first"), pl.max_horizontal("model_a", "model_b").alias("second")
    ).n_unique()
    print(
        f"planned {frame.height} comparisons ({frame.height // 2} in both orders, over {pairs} distinct model "
        f"pair{'s' if pairs != 1 else ''}) by {result.strategy} from snapshot {result.snapshot_id}"
    )
    for note in result.notes:
        print(f"note: {note}")
    for path in result.paths:
        print(path)
    return 0
