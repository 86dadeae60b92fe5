"""Answer lengths for FastChat ``llm_judge`` judgments, from the run's ``model_answer/`` folder.

MT-Bench judgment files carry no lengths, but the answers they judged sit beside
them (``data/mt_bench/model_answer/<model>.jsonl`` next to
``data/mt_bench/model_judgment/``).  FastChat names a model by its answer
file's *stem* (``alpaca_mt.jsonl`` is model ``alpaca_mt`` whatever its
``model_id`` says), and when a file answers a question twice the later answer
wins (FastChat loads answers into a dict).  We do the same.

Length unit: characters of what the judge saw for that turn: turn 1 → the first
answer; turn 2 (multi-turn prompts show the whole dialogue) → both answers.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import polars as pl
from biasboard.importers.common import SOURCE_ROW, read_records
from biasboard.schemas.errors import InputError

ANSWER_PATTERNS = ("*.jsonl", "*.jsonl.gz")
LENGTH_KEYS = ("model", "question_id", "turn")


def default_answers_dir(judgment_files: Sequence[Path]) -> Path | None:
    """FastChat's layout: ``<bench>/model_judgment/x.jsonl`` → ``<bench>/model_answer`` when it exists."""
    for path in judgment_files:
        candidate = path.parent.parent / "model_answer"
        if candidate.is_dir():
            return candidate
    return None


def _stem(path: Path) -> str:
    name = path.name.removesuffix(".gz")
    return name.removesuffix(".jsonl")


def answer_lengths(answers_dir: Path) -> pl.DataFrame:
    """(model, question_id as text, turn, len) per answer turn; one row per key (the file's last answer wins)."""
    files = sorted(p for pattern in ANSWER_PATTERNS for p in answers_dir.glob(pattern))
    if not files:
        raise InputError(f"{answers_dir}: no model answer files (*.jsonl[.gz]) in this folder")
    frames = []
    for path in files:
        frame = read_records(path)
        if "question_id" not in frame.columns or "choices" not in frame.columns:
            raise InputError(f"{path}: FastChat answer file lacks 'question_id' or 'choices'")
        turn_chars = pl.col("choices").list.first().struct.field("turns").list.eval(pl.element().str.len_chars())
        per_answer = frame.select(
            pl.lit(_stem(path)).alias("model"),
            pl.col("question_id").cast(pl.String),
            pl.col(SOURCE_ROW),
            turn_chars.alias("chars"),
        )
        for turn in (1, 2):
            enough = pl.col("chars").list.len() >= turn
            frames.append(
                per_answer.select(
                    "model",
                    "question_id",
                    SOURCE_ROW,
                    pl.lit(turn, dtype=pl.Int64).alias("turn"),
                    pl.when(enough).then(pl.col("chars").list.head(turn).list.sum()).cast(pl.Int64).alias("len"),
                )
            )
    lengths = pl.concat(frames).sort(SOURCE_ROW)
    return lengths.unique(subset=list(LENGTH_KEYS), keep="last", maintain_order=True).drop(SOURCE_ROW)
