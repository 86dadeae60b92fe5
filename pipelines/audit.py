"""``biasboard audit``: what each judge does — order, length, self-preference, gold labels.

    biasboard audit --input 'logs/day=*/*.parquet' --out audit/ [--anchors 'anchors/*.parquet']
    biasboard audit --input 'gs://bucket/logs/**' --out gs://bucket/audit --runner=DataflowRunner ...

Reads battle logs day by day as Arrow batches, validates them with the ingest
rules (rejected rows are counted by reason in ``audit.json``; ``biasboard
backfill`` keeps the dead letters themselves), audits each day with its both
orders paired within the day (:func:`~biasboard.transforms.audit.audit_day`)
and sums the days.  Writes under ``--out``:

* ``audit_judges.parquet`` — one row per judge: first/second/tie split, order
  consistency and flip rate (and the Position-Bias-Analyzer rate), identical-answer
  check, length profile of picks, gold-label accuracy with its baselines;
* ``audit_order_pairs.parquet`` — per judge and model pair: the cross-tab of the
  two orders' verdicts, averaged and order-consistent win rates;
* ``audit_order_models.parquet`` — per judge and model: win rate among
  order-consistent pairs ± SE;
* ``audit_family.parquet`` — own-family win rate under the judge vs other-family judges;
* ``audit_section.html`` — the report's audit section (a fragment);
* ``audit.json`` — all of the above plus row counts and ``notes`` (what could not be measured and why:
  rows rejected, no ``prompt_id``, no pair judged in both orders; also printed), written last; an earlier
  run's is removed before the files are written, so files without ``audit.json`` are an audit cut short.

Storage lost midway ends the job in one line naming the storage and what it left
(:func:`~biasboard.transforms.audit.run_audit`).

Gold labels come from a ``gold`` column in the battles (the correct verdict in
FastChat's values, for that row's order) and/or ``--anchors``: battle-shaped
Parquet whose verdicts are trusted, matched to battles by prompt and model pair.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass

from apache_beam.options.pipeline_options import GoogleCloudOptions
from biasboard.pipelines import validation
from biasboard.pipelines.options import GivenOnce, OneFile, OneFolder, beam_options, defaults_from, options_from
from biasboard.transforms import storage
from biasboard.transforms.audit import run_audit
from biasboard.transforms.read import load_aliases, resolve_input


@dataclass(frozen=True)
class AuditOptions:
    """The job's own options besides ``--input`` and ``--out`` (Beam's come separately); their defaults."""

    anchors: str | None = None
    family_map: str | None = None
    aliases: str | None = None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--input", action=GivenOnce, required=True, help="battle Parquet: a glob or folder, local or gs://"
    )
    parser.add_argument("--out", action=OneFolder, required=True, help="folder for the audit files (local or gs://)")
    parser.add_argument(
        "--anchors",
        action=GivenOnce,
        help="optional trusted verdicts (battle-shaped Parquet glob) for gold-label accuracy",
    )
    parser.add_argument(
        "--family-map",
        action=OneFile,
        help="optional JSON family rules (model/judge name → family), before the defaults",
    )
    parser.add_argument("--aliases", action=OneFile, help="optional JSON object: judge/model name -> canonical name")
    defaults_from(parser, AuditOptions())


def run(args: argparse.Namespace, beam_args: list[str]) -> int:
    job = options_from(AuditOptions, args)
    options = beam_options(beam_args, validate=True)
    storage.configure_gcs(no_auth=options.view_as(GoogleCloudOptions).no_auth)
    families = validation.family_map(job.family_map)
    validation.outside_input((("--input", args.input), ("--anchors", job.anchors)), out=args.out)
    validation.writable_folder(args.out, "--out")
    validation.not_owned(args.out, "--out")
    validation.input_buckets(("--input", args.input), ("--anchors", job.anchors))
    aliases = load_aliases(job.aliases)
    # A glob checked against the files it matches, as refresh does: ``--out`` a day folder of ``day=*/*.parquet``
    # was accepted, and the next audit read its own audit_*.parquet as battles (a missing battle_id).
    if storage.is_pattern(args.input):
        matched = [m.path for m in resolve_input(args.input, "--input").files]
        validation.files_outside("--input", args.input, matched, out=args.out)
    # the workers read and write these: never relative to a worker's own working directory
    glob, anchors = storage.launcher_path(args.input), storage.launcher_path(job.anchors)
    path = run_audit(glob, storage.launcher_path(args.out), options, anchors, families, aliases)
    with storage.if_unreachable(f"the audit is complete ({path} was written last); only its notes were not printed"):
        notes = json.loads(storage.read_text(path)).get("notes", [])
    for note in notes:
        print(f"note: {note}")
    print(path)
    return 0
