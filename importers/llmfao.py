"""LLMFAO comparison CSVs (crowd, GPT-4, GPT-3.5 on the same pairs) → battles.

Columns: ``id, prompt, model_x, model_y, [worker,] winner, left, right``.
``left`` is the name of ``model_x``, shown first (GPT judges: "Model A output";
crowd: the left panel); ``winner`` is ``left`` / ``right`` / ``tie``.  So
``model_a`` = ``left``, ``model_b`` = ``right``, and left → ``model_a``,
right → ``model_b``, tie → ``tie``.  Any other verdict reaches the rules as is
(``bad_winner``).

Judge: the file name's prefix (``crowd``, ``gpt4``, ``gpt3``: ``gpt4-crowd-
comparisons.csv`` is GPT-4 on the crowd's subset), or ``--judge`` (refused over files of several judges).
With ``--voters`` each crowd row's judge is ``crowd/<worker>``: the 124 workers fit as voter-judges, shrunk to
their population (and ``--judge-pool prefix:/`` gives the crowd back as one judge: the cells add up); rows
without a worker (the GPT files, or a blank ``worker`` value) keep their judge.
``battle_id`` = ``llmfao:<judge>:<id>`` (crowd rows add ``:<worker>``: one pair
is voted on by several workers), so the GPT-4 rows repeated in
``gpt4-crowd-comparisons.csv`` carry the same ids as in ``gpt4-comparisons.csv``.
``prompt_id`` is LLMFAO's prompt id.  The files are undated: every battle gets
the default day.  Lengths come from the ``response_lengths.csv`` beside each
input file when present (joined on model id and prompt id; ``len_chars`` or
``len_words``): a file in another folder takes its own folder's, or none; the
manifest counts the battles left without a length.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import polars as pl
from biasboard.importers.answers import (
    FILE_KEY,
    FolderLengths,
    FolderPart,
    keyed_by_folder,
    missing_lengths_note,
    models_without_lengths,
    sidecars_by_file,
)
from biasboard.importers.common import (
    REASON,
    SOURCE_FILE,
    ImportOptions,
    ImportResult,
    finalize_battles,
    fixed_day,
    mark_names_changed,
    name_text,
    one_judge_or_refuse,
    pick_length_unit,
    read_all,
    read_records,
)
from biasboard.schemas.names import canonical_name

PATTERNS = ("*comparisons.csv", "*comparisons.csv.gz")
REQUIRED = ("id", "prompt", "model_x", "model_y", "winner", "left", "right")
LENGTHS_SIDECAR = "response_lengths.csv"


def _file_prefix(path: str) -> str:
    """The file name up to its first ``-``, as written: ``gpt4-crowd-comparisons.csv`` → ``gpt4``."""
    return Path(path).name.split("-")[0]


def judge_from_file(path: str) -> str:
    """``gpt4-crowd-comparisons.csv`` → ``gpt4``; ``crowd-comparisons.csv`` → ``crowd``; read as every other name is
    (:func:`~biasboard.schemas.names.canonical_name`: trimmed, in NFC).

    Why: the judge is in every battle id (``llmfao:<judge>:<id>``), and a macOS file name is decomposed (or one
    copied by hand may end in a space): a folder's copy so named gave its repeated rows other ids, so two battles of
    one verdict, where the ingest then reads the two judges as one."""
    return canonical_name(_file_prefix(path))


def _judges_renamed(raw: pl.DataFrame, paths: Sequence[Path]) -> pl.DataFrame:
    """``raw`` with the rows of the files whose judge :func:`judge_from_file` changed marked as renamed, so the
    import's ``names:`` note counts them as it counts the fields' names."""
    changed = [str(p) for p in paths if judge_from_file(str(p)) != _file_prefix(str(p))]
    return mark_names_changed(raw, raw.get_column(SOURCE_FILE).is_in(changed))


def _lengths(paths: Sequence[Path], unit: str) -> tuple[FolderLengths | None, list[str]]:
    """Each folder's sidecar lengths by (model, prompt), keyed once by the sidecar (the input files beside it join
    them: :class:`~biasboard.importers.answers.FolderLengths`), and notes on the lengths they could not read.

    Per folder (:func:`~biasboard.importers.answers.sidecars_by_file`): a file joins only the sidecar beside it, not
    the first one found.  A sidecar without ``model_id``, ``prompt_id`` and ``len_<unit>`` gives no lengths.
    A length that is no whole number (``about 40``, a value past int64) is left unknown: those battles are kept
    without that answer's length, and the note counts them (it was a polars traceback)."""
    parts: list[FolderPart] = []
    notes = []
    for sidecar, files in sidecars_by_file(paths, LENGTHS_SIDECAR).items():
        table = read_records(sidecar)
        column = f"len_{unit}"
        if not {"model_id", "prompt_id", column} <= set(table.columns):
            continue
        given = pl.col(column)
        length = given.cast(pl.Int64, strict=False)
        if table.schema[column] in (pl.String, pl.Float64, pl.Float32):
            # Text or float: whole numbers only (a float 12.5 is not a length in characters or words).
            number = given.cast(pl.Float64, strict=False)
            length = pl.when(number == number.floor()).then(number.cast(pl.Int64, strict=False))
        lengths = table.select(
            name_text(pl.col("model_id")).alias("__model"),  # joined on the names as read_all reads them
            pl.col("prompt_id").cast(pl.String).alias("__prompt"),
            length.alias("__len"),
            (given.is_not_null() & length.is_null()).alias("__unread"),
        ).unique(subset=["__model", "__prompt"], keep="last", maintain_order=True)
        unread = int(lengths["__unread"].sum())
        if unread:
            notes.append(
                f"{sidecar}: {unread} {column} value(s) are not whole numbers; those answers' lengths are left "
                "unknown (their battles are kept, without the length covariate)"
            )
        parts.append((sidecar, lengths.drop("__unread"), files))
    return keyed_by_folder(parts), notes


def convert(paths: Sequence[Path], options: ImportOptions) -> ImportResult:
    unit = pick_length_unit(options)
    raw = read_all(paths, scalar=(*REQUIRED, "worker"), required=REQUIRED, what="LLMFAO comparison")
    names = {str(p): judge_from_file(str(p)) for p in paths}
    source_judge = pl.col(SOURCE_FILE).replace_strict(names, return_dtype=pl.String)
    renamed = None  # the note saying which judge --judge replaced
    if options.judge:
        # Files of several judges (the folder: crowd, gpt3, gpt4) under one --judge made the crowd's votes and
        # GPT-3.5's verdicts GPT-4's, and dead-lettered the real GPT-4 rows as duplicate ids (exit 0).
        renamed = one_judge_or_refuse(raw.select(source_judge.alias("judge")), "judge", options.judge, paths)
        source_judge = pl.lit(options.judge)
    else:
        raw = _judges_renamed(raw, paths)
    judge = source_judge
    # A blank worker is no worker: as a judge name it would make one pseudo-voter ``crowd/`` of every such row.
    raw_worker = pl.col("worker").cast(pl.String)
    worker = pl.when(raw_worker.str.strip_chars() == "").then(None).otherwise(raw_worker)
    if options.voters and "worker" in raw.columns:  # the battle ids stay the same either way
        judge = pl.when(worker.is_null()).then(judge).otherwise(pl.concat_str([judge, worker], separator="/"))
    winner = pl.col("winner").cast(pl.String)
    parts = [pl.lit("llmfao"), source_judge.fill_null(""), pl.col("id").cast(pl.String).fill_null("")]
    if "worker" in raw.columns:
        parts.append(worker)  # null for GPT rows imported alongside: no suffix
    mapped = raw.select(
        pl.concat_str(parts, separator=":", ignore_nulls=True).alias("battle_id"),
        fixed_day(options).alias("ts"),
        judge.alias("judge"),
        pl.col("left").cast(pl.String).alias("model_a"),
        pl.col("right").cast(pl.String).alias("model_b"),
        pl.when(winner == "left")
        .then(pl.lit("model_a"))
        .when(winner == "right")
        .then(pl.lit("model_b"))
        .otherwise(winner)
        .alias("winner"),
        pl.col("prompt").cast(pl.String).alias("prompt_id"),
        pl.col("model_x").cast(pl.String).alias("__x"),
        pl.col("model_y").cast(pl.String).alias("__y"),
        pl.lit(None, dtype=pl.String).alias(REASON),
        pl.col(SOURCE_FILE).alias(FILE_KEY),
    )
    notes = [f"no time stamps in LLMFAO: every battle dated {options.default_date.isoformat()} 00:00 UTC"]
    if renamed:
        notes.append(renamed)
    if options.voters and "worker" not in raw.columns:
        notes.append("--voters: these files have no worker column: every vote keeps its file's judge")
    lengths, length_notes = _lengths(paths, unit)
    if lengths is None:
        mapped = mapped.with_columns(
            pl.lit(None, dtype=pl.Int64).alias("len_a"), pl.lit(None, dtype=pl.Int64).alias("len_b")
        )
    else:
        notes.extend([f"lengths: {unit} from {', '.join(map(str, lengths.folders))}", *length_notes])
        mapped = mapped.with_columns(lengths.key)
        for model_column, length_column in (("__x", "len_a"), ("__y", "len_b")):
            keyed = lengths.table.rename({"__model": model_column, "__prompt": "prompt_id", "__len": length_column})
            mapped = mapped.join(keyed, on=[model_column, "prompt_id", FILE_KEY], how="left", maintain_order="left")
    result = finalize_battles(raw, mapped, sources=paths, source_rows=raw.height, notes=notes)
    if lengths is None:
        return result
    sides = (("model_a", "len_a"), ("model_b", "len_b"))
    lacking = models_without_lengths(
        mapped, lengths.table.rename({"__model": "model"}), (("__x", "model_a"), ("__y", "model_b"))
    )
    said = missing_lengths_note(result, sides, "battles", lacking, f"no row in {LENGTHS_SIDECAR} for")
    return replace(result, notes=(*result.notes, said)) if said else result
