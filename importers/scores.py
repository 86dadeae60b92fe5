"""Single-answer grades (FastChat ``gpt-4_single.jsonl``, Arena-Bench-v1 judgments) → score rows.

FastChat's single grading writes one line per (model, question, turn):
``score`` is the integer parsed from the judge's ``[[n]]``, ``-1`` when the
judge gave none (FastChat's ``show_result.py`` drops those), ``judge`` is
``[model, prompt]``.  Arena-Bench-v1 files are the same format without
``judge``/``turn``/``tstamp`` on most rows (pass ``--judge``) and with
``null`` for a missing rating and whole floats such as ``10.0``.

Mapping and decisions:

* ``score`` null, ``-1`` or ``NaN`` → dead letter ``no_verdict``; a half point (8.5, 9.5:
  the judge wrote ``[[8.5]]``) is kept: the ingest's rule accepts grades on the
  half-point grid, and the ordinal model gives each grade actually used its own
  category (8.5 sits between 8 and 9); ``10.0`` is the grade 10.
* ``score_id`` = ``single:<judge>:<prompt>:<question>:t<turn>:<model>:<tstamp>``:
  the time stamp keeps both judgments when a run graded regenerated answers
  twice (alvarobartt's ``mistral-orpo``), while a copy of the same judgment in
  another file collides and is deduplicated.
* ``prompt_id`` = ``<question>:t<turn>`` (turn defaults to 1), as for pairs.
* ``ts`` from ``tstamp``; rows without one get the default day (the manifest
  counts them).
* ``len``: characters of the judged answer turn(s) from a FastChat
  ``model_answer`` folder beside the judgments, or, for Arena-Bench-v1, the
  ``answer_chars`` of a ``scores.csv`` beside the input (the judged text); each
  file its own folder's.  The manifest counts the grades left without a length.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import polars as pl
from biasboard.importers.answers import (
    FILE_KEY,
    FolderPart,
    answer_lengths,
    keyed_by_folder,
    missing_lengths_note,
    models_without_lengths,
    read_answer_folders,
    sidecars_by_file,
)
from biasboard.importers.common import (
    REASON,
    REASON_NO_VERDICT,
    SOURCE_FILE,
    ImportOptions,
    ImportResult,
    as_text,
    finalize_scores,
    integer_field,
    judge_parts,
    name_text,
    read_all,
    read_records,
    stable_id,
    tstamp_or_default_day,
)
from biasboard.importers.mtbench import attach_answer_lengths

PATTERNS = ("*single*.jsonl", "*single*.jsonl.gz", "judgments.jsonl", "judgments.jsonl.gz")
REQUIRED = ("question_id", "model", "score")
#: Fields read as single values (a list or object there dead-letters the row as ``bad_type:<field>``).
SCALAR = (*REQUIRED, "turn", "tstamp")
SCORES_SIDECAR = "scores.csv"


def _sidecar_lengths(paths: Sequence[Path]) -> list[FolderPart]:
    """Arena-Bench-v1's ``scores.csv`` (question_id, model, answer_chars) beside each input, keyed like answers,
    with the input files beside it (for :func:`~biasboard.importers.answers.keyed_by_folder`): a file takes its own
    folder's, not the first one found.  A ``scores.csv`` without those columns gives none."""
    found: list[FolderPart] = []
    for sidecar, files in sidecars_by_file(paths, SCORES_SIDECAR).items():
        table = read_records(sidecar)
        if {"question_id", "model", "answer_chars"} <= set(table.columns):
            lengths = table.select(
                name_text(pl.col("model")),  # joined on the names as read_all reads them
                pl.col("question_id").cast(pl.String),
                pl.lit(1, dtype=pl.Int64).alias("turn"),
                pl.col("answer_chars").cast(pl.Int64).alias("len"),
            ).unique(subset=["model", "question_id", "turn"], keep="last", maintain_order=True)
            found.append((sidecar, lengths, files))
    return found


def _no_grade(raw: pl.DataFrame, score: pl.Expr) -> pl.Expr:
    """Whether the judge gave no grade: null, FastChat's ``-1``, or NaN (a pandas round trip writes a missing
    rating as ``NaN``: it was dead-lettered ``bad_score``, as if the judge had graded off the scale).  A JSON
    boolean is no grade of either kind and stays for the rules to reject."""
    missing = pl.col("score").is_null() | (score == -1)
    return missing if raw.schema["score"] == pl.Boolean else missing | score.is_nan().fill_null(False)


def convert(paths: Sequence[Path], options: ImportOptions) -> ImportResult:
    raw = read_all(paths, scalar=SCALAR, required=REQUIRED, what="single-answer grading")
    judge, prompt, renamed = judge_parts(raw, options, paths)
    notes: list[str] = [renamed] if renamed else []
    turn, bad_turn = integer_field(raw, "turn", 1)
    ts, undated = tstamp_or_default_day(raw, options)
    if undated:
        notes.append(undated)
    qid = pl.col("question_id").cast(pl.String)
    score = pl.col("score").cast(pl.Float64, strict=False)
    score_id = stable_id(
        "single",
        judge,
        prompt,
        qid,
        pl.format("t{}", turn),
        pl.col("model").cast(pl.String),
        as_text(raw, "tstamp") if "tstamp" in raw.columns else pl.lit(""),
    )
    mapped = raw.select(
        score_id.alias("score_id"),
        ts.alias("ts"),
        judge.alias("judge"),
        pl.col("model").cast(pl.String),
        pl.format("{}:t{}", qid, turn).alias("prompt_id"),
        pl.col("score"),
        pl.coalesce(bad_turn, pl.when(_no_grade(raw, score)).then(pl.lit(REASON_NO_VERDICT)))
        .cast(pl.String)
        .alias(REASON),
        qid.alias("__qid"),
        turn.alias("__turn"),
        pl.col(SOURCE_FILE).alias(FILE_KEY),
    )
    parts = read_answer_folders(paths, options.answers_dir, answer_lengths)
    if options.answers_dir is None:  # a file beside no model_answer/ folder: the scores.csv beside it, if any
        answered = {file for _, _, files in parts for file in files}
        parts.extend(_sidecar_lengths([p for p in paths if str(p) not in answered]))
    lengths = keyed_by_folder(parts)
    if lengths is not None:
        notes.append(f"lengths: characters of the judged answer, from {', '.join(map(str, lengths.folders))}")
    mapped = attach_answer_lengths(mapped, lengths, (("model", "len"),))
    result = finalize_scores(raw, mapped, sources=paths, source_rows=raw.height, notes=notes)
    missing = (
        missing_lengths_note(
            result,
            (("model", "len"),),
            "grades",
            models_without_lengths(mapped, lengths.table, (("model", "model"),)),
            "no answer file (or scores.csv row) for",
        )
        if lengths is not None
        else None
    )
    said = [n for n in (missing, _repeat_note(result, lengths is not None), _off_scale_note(result)) if n]
    return replace(result, notes=(*result.notes, *said)) if said else result


#: The top of FastChat's single-grading scale (its prompt asks for a rating from 1 to 10).
SINGLE_SCALE_TOP = 10


def _off_scale_note(result: ImportResult) -> str | None:
    """A note counting kept grades above FastChat's 1-10 scale (the ingest accepts 1..100, for other scales): a judge
    prompt of another scale, or a misparsed ``[[n]]``, imported without a word (an 11 among 1-10 grades)."""
    scores = result.rows.column("score").to_numpy()
    above = int((scores > SINGLE_SCALE_TOP).sum())
    if not above:
        return None
    return (
        f"{above} grade(s) above {SINGLE_SCALE_TOP}, the top of FastChat's single-grading scale (highest "
        f"{scores.max():g}): kept, as the ingest accepts grades up to 100; check the judge prompt's scale"
    )


def _repeat_note(result: ImportResult, with_lengths: bool) -> str | None:
    """A note counting the grades written for a (judge, model, question, turn) graded more than once; else None.

    Both grades are kept (two gradings of regenerated answers, see ``score_id``),
    but the answer file holds one answer per key, so both get *its* length even
    where the text judged (quoted in ``user_prompt``) differs: the manifest says
    how many rows that concerns.  Counted on the rows written, not those read.
    """
    keys = pl.DataFrame(result.rows.select(["judge", "model", "prompt_id"])).group_by(pl.all()).len()
    repeated = keys.filter(pl.col("len") > 1)
    if repeated.height == 0:
        return None
    note = (
        f"{repeated.height} (judge, model, question, turn) graded more than once: {repeated['len'].sum()} grades kept"
    )
    if with_lengths:
        note += "; each has the answer file's length (its last answer), which may not be the answer it graded"
    return note
