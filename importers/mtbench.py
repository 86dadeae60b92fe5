"""FastChat ``llm_judge`` pairwise judgments (MT-Bench ``gpt-4_pair.jsonl``) → two battles per line.

Each line is one (question, turn, model_1, model_2) match judged twice
(FastChat ``play_a_match_pair``): game 1 shows ``model_1`` as Assistant A,
game 2 shows ``model_2`` as Assistant A.  FastChat maps both verdicts back to
model labels before writing (``g1_map = {A: model_1, B: model_2}``,
``g2_map = {A: model_2, B: model_1}``), so:

====== ============ ============= ============================== ==========================
game   ``model_a``  ``model_b``   ``gN_winner == "model_1"`` →   ``"model_2"`` →
====== ============ ============= ============================== ==========================
g1     model_1      model_2       ``model_a``                    ``model_b``
g2     model_2      model_1       ``model_b``                    ``model_a``
====== ============ ============= ============================== ==========================

``tie`` stays ``tie``; ``error`` (no ``[[A]]/[[B]]/[[C]]`` in the judge's text)
is dead-lettered as ``no_verdict``, per game, so one bad game never costs the
other.  One line is therefore two conversion units: ``rows_read`` counts games,
and a dead letter carries the whole line plus its ``game`` (1 or 2).

``judge`` is FastChat's ``[model, prompt]`` pair: the judge is the model; the
prompt template only enters the id.  ``prompt_id`` is ``<question_id>:t<turn>``
so both games of a match (and the same question in other MT-Bench sources)
share it.  ``battle_id`` is
``mtbench-pair:<judge>:<prompt>:<question>:t<turn>:<model_1>:<model_2>:<tstamp>:g<game>``.
Lengths come from the run's ``model_answer`` folder when present (see
:mod:`biasboard.importers.answers`); the manifest counts the battles left
without one and names the models that have no answer file.

``ts`` from ``tstamp`` by the rule MT-Bench single grades follow
(:func:`~biasboard.importers.common.tstamp_or_default_day`): epoch seconds,
also when written as text (``"1687222032.5"``; one such line turns the whole
field into text); a line without one gets the default day (the manifest counts
the games); an unreadable one (``"yesterday"``) rejects that line's two games
as ``bad_timestamp``, and only those.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import polars as pl
from biasboard.importers.answers import (
    FILE_KEY,
    FolderLengths,
    answer_lengths,
    keyed_by_folder,
    missing_lengths_note,
    models_without_lengths,
    read_answer_folders,
)
from biasboard.importers.common import (
    REASON,
    REASON_NO_VERDICT,
    SOURCE_FILE,
    ImportOptions,
    ImportResult,
    as_text,
    finalize_battles,
    integer_field,
    judge_parts,
    read_all,
    stable_id,
    tstamp_or_default_day,
)

PATTERNS = ("*pair*.jsonl", "*pair*.jsonl.gz")
REQUIRED = ("question_id", "model_1", "model_2", "g1_winner", "g2_winner")
#: Fields read as single values (a list or object there dead-letters the row as ``bad_type:<field>``).
SCALAR = (*REQUIRED, "turn", "tstamp")


def explode_games(raw: pl.DataFrame) -> pl.DataFrame:
    """Two rows per match line, game 1 then game 2, in line order."""
    return raw.with_columns(pl.lit([1, 2], dtype=pl.List(pl.Int64)).alias("game")).explode("game")


def shown_order_winner(game: pl.Expr, verdict: pl.Expr) -> pl.Expr:
    """FastChat's model-label verdict → our shown-order winner (see the table in the module doc)."""
    first_is_model_1 = game == 1
    return (
        pl.when(verdict == "tie")
        .then(pl.lit("tie"))
        .when(verdict == "model_1")
        .then(pl.when(first_is_model_1).then(pl.lit("model_a")).otherwise(pl.lit("model_b")))
        .when(verdict == "model_2")
        .then(pl.when(first_is_model_1).then(pl.lit("model_b")).otherwise(pl.lit("model_a")))
        .otherwise(verdict)  # anything else reaches the rules unchanged: bad_winner (or missing:winner)
    )


def attach_answer_lengths(
    frame: pl.DataFrame, lengths: FolderLengths | None, pairs: Sequence[tuple[str, str]]
) -> pl.DataFrame:
    """Left-join answer lengths for each (model column → length column) pair, keeping row order; each row joins only
    the lengths of its own file's folder (its :data:`~biasboard.importers.answers.FILE_KEY` mapped by
    :attr:`~biasboard.importers.answers.FolderLengths.key`, as the returned frame keeps it)."""
    if lengths is not None:
        frame = frame.with_columns(lengths.key)
    for model_column, length_column in pairs:
        if lengths is None:
            frame = frame.with_columns(pl.lit(None, dtype=pl.Int64).alias(length_column))
            continue
        keyed = lengths.table.rename(
            {"model": model_column, "question_id": "__qid", "turn": "__turn", "len": length_column}
        )
        frame = frame.join(keyed, on=[model_column, "__qid", "__turn", FILE_KEY], how="left", maintain_order="left")
    return frame


def convert(paths: Sequence[Path], options: ImportOptions) -> ImportResult:
    lines = read_all(paths, scalar=SCALAR, required=REQUIRED, what="MT-Bench pair")
    raw = explode_games(lines)
    # (on the games, the rows the import counts: over the judgment lines the note said "75 of its 75 rows" beside
    # "read 150 rows (games)")
    judge, prompt, renamed = judge_parts(raw, options, paths)
    notes: list[str] = [renamed] if renamed else []
    game = pl.col("game")
    turn, bad_turn = integer_field(raw, "turn", 1)
    verdict = pl.when(game == 1).then(pl.col("g1_winner")).otherwise(pl.col("g2_winner")).cast(pl.String)
    ts, undated = tstamp_or_default_day(raw, options, unit="games")
    if undated:
        notes.append(undated)
    qid = pl.col("question_id").cast(pl.String)
    battle_id = stable_id(
        "mtbench-pair",
        judge,
        prompt,
        qid,
        pl.format("t{}", turn),
        pl.col("model_1").cast(pl.String),
        pl.col("model_2").cast(pl.String),
        as_text(raw, "tstamp") if "tstamp" in raw.columns else pl.lit(""),
        pl.format("g{}", game),
    )
    mapped = raw.select(
        battle_id.alias("battle_id"),
        ts.alias("ts"),
        judge.alias("judge"),
        pl.when(game == 1).then(pl.col("model_1")).otherwise(pl.col("model_2")).cast(pl.String).alias("model_a"),
        pl.when(game == 1).then(pl.col("model_2")).otherwise(pl.col("model_1")).cast(pl.String).alias("model_b"),
        shown_order_winner(game, verdict).alias("winner"),
        pl.format("{}:t{}", qid, turn).alias("prompt_id"),
        pl.coalesce(bad_turn, pl.when(verdict == "error").then(pl.lit(REASON_NO_VERDICT)))
        .cast(pl.String)
        .alias(REASON),
        qid.alias("__qid"),
        turn.alias("__turn"),
        pl.col(SOURCE_FILE).alias(FILE_KEY),
    )
    lengths = keyed_by_folder(read_answer_folders(paths, options.answers_dir, answer_lengths))
    if lengths is not None:
        notes.append(f"lengths: characters of the judged answer turns, from {', '.join(map(str, lengths.folders))}")
    mapped = attach_answer_lengths(mapped, lengths, (("model_a", "len_a"), ("model_b", "len_b")))
    result = finalize_battles(raw, mapped, sources=paths, source_rows=lines.height, notes=notes)
    return with_missing_lengths_note(result, mapped, lengths)


def with_missing_lengths_note(
    result: ImportResult, mapped: pl.DataFrame, lengths: FolderLengths | None
) -> ImportResult:
    """``result`` with a note counting its battles left without a length and naming the models that have no
    answer file (:func:`~biasboard.importers.answers.missing_lengths_note`); as it was when no answers were read.

    ``mapped``: the rows as :func:`attach_answer_lengths` returned them (keyed by their folder)."""
    if lengths is None:
        return result
    sides = (("model_a", "len_a"), ("model_b", "len_b"))
    lacking = models_without_lengths(mapped, lengths.table, [(model, model) for model, _ in sides])
    said = missing_lengths_note(result, sides, "battles", lacking)
    return replace(result, notes=(*result.notes, said)) if said else result
