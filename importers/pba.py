"""Position-Bias-Analyzer judgment files (MT-Bench, DevBench, the 9-judge repetition subset) → battles.

Each row is one judge call on one presentation order: ``model_a`` is the answer
shown first (``position_a == "first"`` in every published row; a row saying
``"second"`` is swapped into shown order; any other value keeps the listed order
with ``order_known`` false: counted, but not for the position effect),
``winner`` is already ``model_a`` / ``model_b`` / ``tie`` (extracted with the
repository's own regexes from ``verdict`` A / B / C), and a null verdict (the
judge's text matched no pattern) is dead-lettered as ``no_verdict``.  Both
orders of a pair are separate rows, so pairing them back (flip rates) is the
ingest's job, by ``prompt_id`` and the model pair.

``battle_id`` = ``pba:<benchmark>:<judge>:r<repetition>:<question>[:t<turn>]:<model_a>:<model_b>``
(repetition 0 in the main files) — the files have no ids and no time stamps
(every battle gets the default day).  ``prompt_id`` = ``<question>:t<turn>`` for
MT-Bench (turn 2 rows: the judge saw the whole two-turn dialogue), ``<question>``
for DevBench.  The question's ``category`` is kept as the battle's slice label
(``refresh --slices category``).  Lengths: ``len_chars_*`` (default; both turns for MT-Bench) or
``len_words_*``.  One import holds one benchmark: files of several (the repository's folder holds MT-Bench and
DevBench) are refused, naming each benchmark's glob (:func:`refuse_mixed_benchmarks`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import polars as pl
from biasboard.importers.common import (
    REASON,
    REASON_NO_VERDICT,
    ImportOptions,
    ImportResult,
    column_or_null,
    finalize_battles,
    fixed_day,
    judge_parts,
    non_text_slice_notes,
    pick_length_unit,
    read_all,
    text_slice_labels,
)
from biasboard.schemas.errors import InputError
from biasboard.schemas.rules import winner_expr

PATTERNS = ("*judgments*.jsonl", "*judgments*.jsonl.gz")
REQUIRED = ("question_id", "model_a", "model_b", "winner")
SWAPPED = {"model_a": "model_b", "model_b": "model_a"}
#: Fields read as single values: a list or object there dead-letters the row as ``bad_type:<field>`` (as
#: mtbench-pair does) instead of becoming part of an id such as prompt ``[1,2]:t2``.
SCALAR = (*REQUIRED, "turn", "repetition", "benchmark", "position_a")


def convert(paths: Sequence[Path], options: ImportOptions) -> ImportResult:
    unit = pick_length_unit(options)
    raw = read_all(paths, scalar=SCALAR, required=REQUIRED, what="Position-Bias-Analyzer judgment")
    named = refuse_mixed_benchmarks(raw, paths)
    judge, _, renamed = judge_parts(raw, options, paths)
    position = column_or_null(raw, "position_a").cast(pl.String).fill_null("first")
    second = position == "second"
    benchmark = column_or_null(raw, "benchmark").cast(pl.String).fill_null("")
    repetition = column_or_null(raw, "repetition", pl.Int64).cast(pl.String).fill_null("0")
    turn = column_or_null(raw, "turn", pl.Int64).cast(pl.String)
    qid = pl.col("question_id").cast(pl.String)
    a, b = pl.col("model_a").cast(pl.String), pl.col("model_b").cast(pl.String)
    shown_a, shown_b = pl.when(second).then(b).otherwise(a), pl.when(second).then(a).otherwise(b)
    len_a = column_or_null(raw, f"len_{unit}_a", pl.Int64)
    len_b = column_or_null(raw, f"len_{unit}_b", pl.Int64)
    # Normalised as the rules read it before the swap: "Model_A" on a row shown second was left unswapped, and the
    # rules' own normalisation then credited the other model with the win.
    winner = winner_expr("winner")
    battle_id = pl.concat_str(
        [
            pl.lit("pba"),
            benchmark,
            judge.fill_null(""),
            pl.format("r{}", repetition),
            qid.fill_null(""),
            pl.format("t{}", turn),  # null (no turn: DevBench) drops the part
            shown_a.fill_null(""),
            shown_b.fill_null(""),
        ],
        separator=":",
        ignore_nulls=True,
    )
    mapped = raw.select(
        battle_id.alias("battle_id"),
        fixed_day(options).alias("ts"),
        judge.alias("judge"),
        shown_a.alias("model_a"),
        shown_b.alias("model_b"),
        pl.when(second).then(winner.replace(SWAPPED)).otherwise(winner).alias("winner"),
        pl.when(turn.is_null()).then(qid).otherwise(pl.format("{}:t{}", qid, turn)).alias("prompt_id"),
        pl.when(second).then(len_b).otherwise(len_a).alias("len_a"),
        pl.when(second).then(len_a).otherwise(len_b).alias("len_b"),
        pl.when(winner.is_null()).then(pl.lit(REASON_NO_VERDICT)).otherwise(None).cast(pl.String).alias(REASON),
        pl.when(position.is_in(["first", "second"])).then(None).otherwise(False).cast(pl.Boolean).alias("order_known"),
        *text_slice_labels(raw),  # PBA's category: a slice label
    )
    notes = [
        f"no time stamps in Position-Bias-Analyzer files: every battle dated {options.default_date.isoformat()} "
        "00:00 UTC",
        f"lengths: {unit}",
        *([f"benchmark: {named}"] if named else []),  # what a refresh of several imports checks they agree on
        *_position_notes(raw),
        *_repetition_notes(raw),
        *non_text_slice_notes(raw),
        *([renamed] if renamed else []),
    ]
    return finalize_battles(raw, mapped, sources=paths, source_rows=raw.height, notes=notes)


def _position_notes(raw: pl.DataFrame) -> list[str]:
    """What the import assumed of rows whose ``position_a`` is missing or neither "first" nor "second" (the published
    files have "first" on every row): counted in a note, since the position effect reads the order they were given."""
    if "position_a" not in raw.columns:
        return []
    position = raw["position_a"].cast(pl.String)
    missing = position.null_count()
    other = position.drop_nulls().filter(~position.drop_nulls().is_in(["first", "second"]))
    notes = [f"position_a missing on {missing} row(s): read as shown first (model_a)"] if missing else []
    if other.len():
        seen = ", ".join(repr(v) for v in other.unique().sort().head(3).to_list())
        notes.append(
            f"position_a neither 'first' nor 'second' on {other.len()} row(s) ({seen}): kept in the listed order with "
            "order_known false (counted, not used for the position effect)"
        )
    return notes


def _repetition_notes(raw: pl.DataFrame) -> list[str]:
    """A note when rows re-judge a pair (``repetition`` above 0: the 9-judge repetition subset), each a battle of its
    own: the board and the audit then count those prompts several times, and the published consistency rates
    (one judgment per pair and order) are not what the audit reproduces."""
    if "repetition" not in raw.columns:
        return []
    repeated = int((raw["repetition"].cast(pl.Int64, strict=False).fill_null(0) > 0).sum())
    if not repeated:
        return []
    return [
        f"{repeated} row(s) are repeated judgments (repetition > 0, the repetition subset): each is a battle of its "
        "own, so their prompts count several times; the main files alone are '<benchmark>_judgments_*'"
    ]


def refuse_mixed_benchmarks(raw: pl.DataFrame, paths: Sequence[Path]) -> str | None:
    """The one benchmark the judgments hold (None when they name none); refused, in one line, when more than one.

    Why: the repository publishes MT-Bench's and DevBench's judgments side by side, so importing its folder gave
    one battle log — one leaderboard — over two benchmarks' models, prompts and judges (MT-Bench's 31 models and
    DevBench's 11 ranked together, their prompts' difficulty one scale).  A board ranks models on one benchmark;
    the message names the benchmarks with their rows and, where the files are named after them (``mtbench_*``,
    ``devbench_*``), the glob that imports each.
    """
    if "benchmark" not in raw.columns:
        return None
    counts = (
        raw.select(pl.col("benchmark").cast(pl.String))
        .filter(pl.col("benchmark").is_not_null() & (pl.col("benchmark") != ""))
        .group_by("benchmark")
        .len()
        .sort("benchmark")
    )
    if counts.height < 2:
        return counts["benchmark"][0] if counts.height else None
    held = ", ".join(f"{name}: {rows:,} rows" for name, rows in counts.iter_rows())
    globs = [_benchmark_glob(name, paths) for name in counts["benchmark"]]
    how = (
        "import each on its own (" + ", ".join(f"--in '{g}'" for g in globs) + ")"
        if all(globs)
        else "import each benchmark's files on their own"
    )
    raise InputError(
        f"these Position-Bias-Analyzer files hold {counts.height} benchmarks ({held}); one leaderboard ranks the "
        f"models of one benchmark: {how}"
    )


def _benchmark_glob(benchmark: str, paths: Sequence[Path]) -> str | None:
    """``<folder>/<benchmark>_judgments_*`` when the files named after ``benchmark`` (lower case) share a folder: the
    main judgment files, not the repetition subset beside them (``mtbench_repetition_judgments_9judges``, which
    ``mtbench_*judgments*`` also took: six more judges on three questions, re-judged three times)."""
    prefix = benchmark.lower() + "_"
    folders = {p.parent for p in paths if p.name.lower().startswith(prefix)}
    return str(folders.pop() / f"{prefix}judgments_*") if len(folders) == 1 else None
