"""``biasboard import``: other tools' judge logs → biasboard's day-partitioned battle (or score) Parquet.

Examples::

    biasboard import --format fastchat --in clean_battle_20240220.json.gz --out imported/genai
    biasboard import --format mtbench-pair --in data/mt_bench/model_judgment/gpt-4_pair.jsonl --out imported/mtb
    biasboard import --format mtbench-single --in judgments.jsonl.gz --judge gpt-4 --out imported/arena-bench
    biasboard import --format alpacaeval --in alpacaeval/ --out imported/alpacaeval
    biasboard import --format pba --in 'mtbench-position-bias-analyzer/mtbench_judgments_*' --out imported/pba
    biasboard import --format arena-hard --in data/arena-hard-v0.1/model_judgment/gpt-4-1106-preview \
        --baseline gpt-4-0314 --out imported/arena-hard
    biasboard refresh --input 'imported/pba/battles/**/*.parquet' --state state --out site

``--in`` is a file, a folder (searched with the format's file patterns) or a
glob.  Conversion is columnar (pyarrow/polars on whole files) and needs no Beam
runner: these files are small next to battle logs, and the ingest that reads the
output is the Beam job.  Every input row is either converted or dead-lettered
with a reason; the printed counts and ``OUT/import_manifest.json`` add up.  An
import that yields no row at all is an error (exit code 2), never a silent
empty success.
Each format's module docstring (``biasboard.importers.<format>``) says exactly how
its verdicts and shown order are mapped.
"""

from __future__ import annotations

import argparse
import datetime as dt
from dataclasses import replace
from pathlib import Path

from biasboard.importers.common import DEFAULT_DATE, TIE_BAND, ImportOptions, resolve_inputs, unused_date_note
from biasboard.importers.output import summary_lines, write_import
from biasboard.importers.registry import FORMATS, convert
from biasboard.pipelines import validation
from biasboard.pipelines.options import OneFolder
from biasboard.schemas.errors import InputError
from biasboard.schemas.names import canonical_name, name_fault
from biasboard.schemas.rules import undatable_day
from biasboard.schemas.summary import GLOBAL_JUDGE


def _date(text: str) -> dt.date:
    try:
        day = dt.date.fromisoformat(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"not a YYYY-MM-DD date: {text!r}") from err
    why = undatable_day(day)  # else every undated row is dead-lettered bad_timestamp, the option unnamed
    if why:
        raise argparse.ArgumentTypeError(f"{text!r} is {why}")
    return day


def add_arguments(parser: argparse.ArgumentParser) -> None:
    formats = "; ".join(f"{f.name}: {f.summary}" for f in FORMATS.values())
    parser.add_argument("--format", required=True, choices=sorted(FORMATS), help=f"input format ({formats})")
    parser.add_argument("--in", dest="input", required=True, metavar="PATH", help="input file, folder or glob")
    parser.add_argument(
        "--out", action=OneFolder, required=True, metavar="DIR", help="output folder (one import per folder)"
    )
    parser.add_argument(
        "--date",
        type=_date,
        metavar="YYYY-MM-DD",
        help=f"day stamped on rows whose source has no time stamp (default {DEFAULT_DATE.isoformat()}, "
        "an obviously artificial day); rows the source dates keep their own day (a note says when it dated none)",
    )
    parser.add_argument(
        "--judge",
        help="judge name for every row: needed when the file names none; over a file naming one judge it replaces "
        "that name (a note says which, on how many rows); refused over a file naming several",
    )
    parser.add_argument(
        "--voters",
        action="store_true",
        help="name each vote's judge <judge>/<voter> where the format records the voter (llmfao: the crowd's "
        "worker): refresh then fits every voter as a judge shrunk to the voters' population, and "
        "--judge-pool prefix:/ pools them back into one judge",
    )
    parser.add_argument(
        "--anony-only",
        action="store_true",
        help="fastchat: import only the anonymous battles (anony true), the ones the arena's leaderboard is fit on; "
        "the others become dead letters (not_anonymous). Default: every battle, with a note counting those "
        "not anonymous",
    )
    parser.add_argument(
        "--sampled-only",
        action="store_true",
        help="fastchat: import only the battles the arena's prompt de-duplication sampled (dedup_tag.sampled "
        "true, in LMArena's public files), as its leaderboard does; the others become dead letters (not_sampled)",
    )
    parser.add_argument(
        "--length-unit",
        choices=("chars", "words"),
        default="chars",
        help="length column to use where the source has both (alpacaeval, llmfao, pba; default chars)",
    )
    parser.add_argument(
        "--tie-band",
        type=TIE_BAND.flag_type("--tie-band"),
        default=0.0,
        metavar="W",
        help="alpacaeval: a preference within W of 1.5 is a tie (default 0: only exactly 1.5)",
    )
    parser.add_argument(
        "--baseline",
        help="arena-hard: the baseline model of a v0.1 run (its judge_config.yaml baseline_model, e.g. gpt-4-0314)",
    )
    parser.add_argument(
        "--answers",
        metavar="DIR",
        help="mtbench-pair/-single, arena-hard: the run's model_answer folder for lengths "
        "(default: the model_answer folder beside model_judgment, if present)",
    )


def _local_only(*flags: tuple[str, str | None]) -> None:
    """Refuse a bucket (or any ``scheme://``) path: import reads and writes local files only.

    Why: the converters read with local paths and the output is written through :class:`pathlib.Path`, so
    ``--out gs://bucket/imp`` made a stray ``./gs:/bucket/imp/battles/`` folder in the working directory and
    ended in a pyarrow traceback (after a bucket probe that, without network, waits ~35 s), and ``--in gs://…``
    was reported as "input file not found".
    """
    for flag, value in flags:
        if value and "://" in value:
            raise InputError(
                f"{flag} {value}: import reads and writes local files only; copy the files here first (or the "
                "imported folder to the bucket afterwards: refresh --input reads gs://)"
            )


def run(args: argparse.Namespace, beam_args: list[str]) -> int:
    if beam_args:
        raise InputError(f"unrecognised arguments: {' '.join(beam_args)} (import runs no Beam pipeline)")
    fmt = FORMATS[args.format]
    if args.voters and not fmt.voters:
        with_voters = ", ".join(name for name, f in FORMATS.items() if f.voters)
        if fmt.name == "fastchat":  # its "judge" field is the voter already (LMArena's arena_user_<id>)
            raise InputError(
                "--voters: a FastChat log's judge field is its voter already, so each voter is imported as a judge "
                "without the flag; refresh --judge-pool prefix:SEP pools them back (prefix:_ for arena_user_<id>)"
            )
        raise InputError(f"--voters: the {fmt.name} format records no voter (formats that do: {with_voters})")
    for flag, given in (("--anony-only", args.anony_only), ("--sampled-only", args.sampled_only)):
        if given and not fmt.arena_filters:
            with_filters = ", ".join(name for name, f in FORMATS.items() if f.arena_filters)
            raise InputError(f"{flag}: the {fmt.name} format is no arena log (formats that are: {with_filters})")
    own = (("--tie-band", args.tie_band != 0.0), ("--baseline", args.baseline is not None))
    for flag, given in (*own, ("--answers", args.answers is not None)):
        if given and flag not in fmt.flags:  # it was accepted, kept in the manifest, and did nothing
            with_flag = ", ".join(name for name, f in FORMATS.items() if flag in f.flags)
            raise InputError(f"{flag}: the {fmt.name} format has no use for it (formats that do: {with_flag})")
    if args.length_unit != "chars" and not fmt.length_units:
        with_units = ", ".join(name for name, f in FORMATS.items() if f.length_units)
        raise InputError(
            f"--length-unit {args.length_unit}: the {fmt.name} format has one length unit (formats with characters "
            f"and words: {with_units})"
        )
    # written as the ingest reads a name (trimmed, composed), so the notes and ids name what the board will
    judge, baseline = (None if name is None else canonical_name(name) for name in (args.judge, args.baseline))
    for flag, name, given in (("--judge", judge, args.judge), ("--baseline", baseline, args.baseline)):
        # a name the ingest would reject on every row it is written into: refused here, where it is given
        fault = None if name is None else ("is empty" if not name else name_fault(name))
        if flag == "--judge" and name == GLOBAL_JUDGE:  # a name refresh refuses for a judge: refused where given
            fault = "the name of the global effects, which refresh refuses for a judge: give the judge's own name"
        if fault:
            raise InputError(f"{flag} {given[:40]!r}: not a usable name ({fault})")
    _local_only(("--in", args.input), ("--out", args.out), ("--answers", args.answers))
    validation.writable_folder(args.out, "--out")
    validation.not_owned(args.out, "--out")
    paths = resolve_inputs(args.input, fmt.patterns)
    answers = Path(args.answers) if args.answers else None
    if answers is not None and not answers.is_dir():
        raise InputError(f"{answers}: --answers folder not found")
    day = args.date or DEFAULT_DATE
    options = ImportOptions(
        default_date=day,
        judge=judge,
        length_unit=args.length_unit,
        tie_band=args.tie_band,
        answers_dir=answers,
        baseline=baseline,
        voters=args.voters,
        anony_only=args.anony_only,
        sampled_only=args.sampled_only,
    )
    result = convert(fmt, paths, options)
    if args.date is not None and (unused := unused_date_note(result.rows, args.date)):
        result = replace(result, notes=(*result.notes, unused))
    if result.rows_converted == 0:
        dead = ", ".join(f"{reason}: {n}" for reason, n in result.dead_by_reason().items()) or "none"
        raise InputError(
            f"{args.input}: the import yielded 0 rows (read {result.rows_read}; dead letters {dead}); nothing written"
        )
    manifest = write_import(
        result,
        Path(args.out),
        fmt.name,
        {
            "date": day.isoformat(),
            "judge": args.judge,
            "length_unit": args.length_unit,
            "tie_band": args.tie_band,
            "answers": args.answers,
            "baseline": args.baseline,
            "voters": args.voters,
            "anony_only": args.anony_only,
            "sampled_only": args.sampled_only,
        },
    )
    for line in summary_lines(manifest, Path(args.out)):
        print(line)
    return 0
