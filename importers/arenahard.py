"""arena-hard-auto judgments (``model_judgment/<judge>/<model>.jsonl``) → two battles per line.

arena-hard-auto's ``gen_judgment.py`` judges every model against one baseline
on each question twice, once in each order, and writes one line per
(question, model)::

    {"question_id" | "uid": ..., "model": ..., "judge": ..., ["baseline": ..., "category": ...,]
     "games": [{"score": "A>B", "judgment": ..., ...}, {"score": "B>>A", ...}]}

Game 1 shows the **baseline as Assistant A** and the model as B; game 2 swaps
them (v0.1: ``answer, baseline = baseline, answer`` for the second game; v2:
``pairwise_judgment(baseline=answer, answer=baseline)``).  So:

====== ============ ============
game   ``model_a``  ``model_b``
====== ============ ============
g1     baseline     model
g2     model        baseline
====== ============ ============

``score`` is the label the judge's text ended with, in A/B (= shown-order)
terms: ``A>>B``, ``A>B``, ``A=B``, ``B>A``, ``B>>A`` (``show_result.py`` also
maps ``A<<B``, ``A<B``, ``B=A``, ``B<<A``, ``B<A``).  Both ``>>`` and ``>``
are a win for the side named; ``show_result.py`` counts a ``>>`` three times,
which would treat one judgment as three independent battles — here it is one
battle, and its strength is kept as the ordinal ``strength`` column (2 for
``>>``/``<<``, 1 for ``>``/``<``, 0 for a tie) for analyses that can use it.
A null game or score (no parsable label, or the API call failed) is
dead-lettered as ``no_verdict`` per game; any other label reaches the rules
unchanged (``bad_winner``).

Every line is read as at least two games, and as many as its ``games`` list
holds: arena-hard-auto writes exactly two, and its ``show_result.py`` reads
``games[0]`` and ``games[1]`` only, so no order is defined beyond them.  A
line with fewer games dead-letters each absent one as ``missing_game`` (the
judge was not asked, unlike ``no_verdict``); a third or later game is
dead-lettered as ``extra_game`` rather than dropped, so ``rows_read`` counts
every game in the file.  Each row (and dead letter) carries its ``game`` number
and ``games_in_line``, the length of its line's list.

v0.1 lines name no baseline (it is ``baseline_model`` in the run's
``judge_config.yaml``, ``gpt-4-0314`` for arena-hard-v0.1): pass
``--baseline``.  v2 lines carry ``baseline`` (per category), which wins over
``--baseline``.  A blank ``baseline`` (empty, whitespace) names none: ``--baseline`` fills it, and without the flag
each of its games is dead-lettered as ``no_baseline``; a note counts the lines of a file with a ``baseline`` field
that name none.  ``prompt_id`` is ``question_id`` (v0.1) or ``uid`` (v2);
``battle_id`` = ``arena-hard:<judge>:<prompt>:<model>:<baseline>:g<game>``.
v2's ``category`` (``hard_prompt``, ``creative_writing``) is kept as the battle's
slice label: arena-hard-auto publishes a board per category, each against its
own baseline, and ``refresh --slices category`` fits the same boards.
The files are undated (default day) and carry no lengths: those come from the
run's answers, ``model_answer/<model>.jsonl`` beside ``model_judgment/``
(found there, or given with ``--answers``), in tokens when every answer
records its count, else in characters
(:func:`biasboard.importers.answers.arena_hard_answer_lengths`); without that
folder the battles have no lengths and the length effect is not fit.  Judge
explanations and prompts are not carried into dead letters (only each game's
``score``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import polars as pl
from biasboard.importers.answers import FILE_KEY, answer_folders, arena_hard_answer_lengths, keyed_by_folder
from biasboard.importers.common import (
    REASON,
    REASON_NO_VERDICT,
    SOURCE_FILE,
    SOURCE_ROW,
    ImportOptions,
    ImportResult,
    finalize_battles,
    fixed_day,
    judge_expr,
    non_text_slice_notes,
    read_all,
    stable_id,
    text_slice_labels,
)
from biasboard.importers.mtbench import attach_answer_lengths, with_missing_lengths_note
from biasboard.schemas.errors import InputError
from biasboard.schemas.names import canonical_names
from biasboard.schemas.wording import first_few

#: ``model_judgment/<judge>/<model>.jsonl``: a judge folder, the ``model_judgment`` folder or one file.
PATTERNS = ("*.jsonl", "*.jsonl.gz", "*/*.jsonl", "*/*.jsonl.gz")
REQUIRED = ("model", "games")
#: Labels in shown-order terms → (winner, strength).
LABELS: dict[str, tuple[str, int]] = {
    "A>>B": ("model_a", 2), "B<<A": ("model_a", 2),
    "A>B": ("model_a", 1), "B<A": ("model_a", 1),
    "A=B": ("tie", 0), "B=A": ("tie", 0),
    "B>A": ("model_b", 1), "A<B": ("model_b", 1),
    "B>>A": ("model_b", 2), "A<<B": ("model_b", 2),
}  # fmt: skip


#: Games per line in arena-hard-auto's layout: game 1 (baseline shown first) and game 2 (model shown first).
GAMES_PER_LINE = 2
#: A line holds fewer than two games: the absent one was never judged.
REASON_MISSING_GAME = "missing_game"
#: A game beyond the two orders arena-hard-auto defines: no shown order to give it.
REASON_EXTRA_GAME = "extra_game"
#: A line that names no baseline (none, or a blank one) and no ``--baseline`` to fill it: the model met no one.
REASON_NO_BASELINE = "no_baseline"


def _games(lines: pl.DataFrame) -> pl.DataFrame:
    """One row per game, at least :data:`GAMES_PER_LINE` per line, with its ``score`` label and the line's count.

    Rows are made for every game the list holds *and* for the two the layout
    expects, so an extra game or a missing one becomes a counted row (and a
    dead letter) instead of vanishing; the games' texts are dropped.
    """
    games = pl.col("games")
    count = games.list.len().fill_null(0)
    numbers = pl.int_ranges(1, pl.max_horizontal(count, GAMES_PER_LINE) + 1, dtype=pl.Int64)
    listed = lines.schema["games"]  # (a list of structs: checked by the caller)
    inner = listed.inner if isinstance(listed, pl.List) else None
    score = (
        games.list.get(pl.col("game") - 1, null_on_oob=True).struct.field("score").cast(pl.String)
        if isinstance(inner, pl.Struct) and "score" in {f.name for f in inner.fields}
        else pl.lit(None, dtype=pl.String)  # games with no score at all: each a no-verdict dead letter
    )
    keep = [c for c in lines.columns if c != "games"]
    exploded = lines.with_columns(numbers.alias("game"), count.alias("games_in_line")).explode("game")
    return exploded.select(*keep, "game", "games_in_line", score.alias("score"))


def _game_reason(game: pl.Expr, count: pl.Expr, baseline: pl.Expr, score: pl.Expr) -> pl.Expr:
    """Why a game is no battle: beyond the two orders, absent from its line, against no baseline, or without a
    verdict; else null."""
    return (
        pl.when(game > GAMES_PER_LINE)
        .then(pl.lit(REASON_EXTRA_GAME))
        .when(game > count)
        .then(pl.lit(REASON_MISSING_GAME))
        .when(baseline.is_null())
        .then(pl.lit(REASON_NO_BASELINE))
        .when(score.is_null())
        .then(pl.lit(REASON_NO_VERDICT))
        .otherwise(None)
    )


#: Baselines an unused ``--baseline`` note names at most (a v2 run has one per category).
NAMED_BASELINES = 5


def named_baseline(baseline: pl.Expr) -> pl.Expr:
    """A line's own baseline as text, null where it names none or a blank one (empty, whitespace, invisible marks).

    Why: :func:`~biasboard.importers.common.name_text` leaves a blank name as written for the rules to reject, so a
    ``"baseline": ""`` line was taken as naming one: ``--baseline`` did not fill it, and its games were dead-lettered
    as ``missing:model_a`` / ``missing:model_b`` with the flag given, a reason that named neither field nor flag."""
    text = baseline.cast(pl.String)
    return pl.when(canonical_names(text) != "").then(text)


def _line_baselines(lines: pl.DataFrame) -> pl.Series | None:
    """Each line's :func:`named_baseline`, or None when the files have no ``baseline`` field (v0.1)."""
    if "baseline" not in lines.columns:
        return None
    return lines.select(named_baseline(pl.col("baseline"))).to_series()


def unnamed_baseline_note(lines: pl.DataFrame, baseline: str | None) -> list[str]:
    """The note counting the lines of files with a ``baseline`` field that name none (how many of them a blank one),
    and what became of them: ``--baseline`` is theirs, or their games are ``no_baseline`` dead letters.

    Why: in a v2 run (or a folder continued from v0.1) such lines either took the flag's baseline or were dropped,
    and neither was said; v0.1 files, with no field at all, need no note (the flag is every line's baseline)."""
    named = _line_baselines(lines)
    if named is None or not (unnamed := named.null_count()):
        return []
    blank = unnamed - lines.get_column("baseline").null_count()
    fate = (
        f"--baseline {baseline} is theirs"
        if baseline
        else f"their games are dead-lettered as {REASON_NO_BASELINE} (pass --baseline)"
    )
    return [f"baseline: {unnamed:,} of the {lines.height:,} lines name none ({blank:,} a blank one): {fate}"]


def unused_baseline_note(lines: pl.DataFrame, baseline: str | None) -> list[str]:
    """The note for a ``--baseline`` that set no line's baseline: every line names its own (v2), which wins.

    Why: over a v2 run the flag did nothing without a word, so ``--baseline gpt-4-0314`` on a run judged against
    o3-mini and gemini-2.0-flash read as a board against gpt-4-0314 (``--date`` says the same of a file whose every
    row is dated).  No note where every line names the flag's baseline itself: nothing won over it."""
    named = _line_baselines(lines)
    if not baseline or named is None or named.null_count():
        return []
    own = sorted(named.unique().to_list())
    if own == [baseline]:
        return []
    return [
        f"--baseline {baseline} set no line's baseline: every line names its own "
        f"({first_few(own, NAMED_BASELINES)}), which wins over it"
    ]


def convert(paths: Sequence[Path], options: ImportOptions) -> ImportResult:
    lines = read_all(paths, required=REQUIRED, what="arena-hard-auto judgment")
    if not isinstance(lines.schema["games"], pl.List) or not isinstance(lines.schema["games"].inner, pl.Struct):
        raise InputError(f"{', '.join(map(str, paths))}: 'games' must be a list of game objects")
    if "uid" not in lines.columns and "question_id" not in lines.columns:
        raise InputError(f"{', '.join(map(str, paths))}: arena-hard-auto input lacks 'question_id' (or 'uid')")
    if "baseline" not in lines.columns and not options.baseline:
        raise InputError(
            f"{', '.join(map(str, paths))}: the file names no baseline model (arena-hard-auto v0.1); "
            "pass --baseline (the run's judge_config.yaml baseline_model, e.g. gpt-4-0314)"
        )
    raw = _games(lines).select(pl.exclude(SOURCE_FILE, SOURCE_ROW), SOURCE_FILE, SOURCE_ROW)
    judge, renamed = judge_expr(raw, options, paths)
    given = named_baseline(pl.col("baseline")) if "baseline" in raw.columns else pl.lit(None, dtype=pl.String)
    baseline = given.fill_null(pl.lit(options.baseline, dtype=pl.String))
    model = pl.col("model").cast(pl.String)
    # Row by row: judgments written by v0.1's code (question_id) and v2's (uid) in one run's folder
    # left the v0.1 rows' prompt null, so each model's games shared one id and were dead-lettered as duplicates.
    qid = pl.coalesce(pl.col(c).cast(pl.String) for c in ("uid", "question_id") if c in raw.columns)
    label = pl.col("score").str.strip_chars().str.to_uppercase().str.replace_all(" ", "")
    first = pl.col("game") == 1
    winner = label.replace_strict({k: w for k, (w, _) in LABELS.items()}, default=pl.col("score"))
    mapped = raw.select(
        stable_id("arena-hard", judge, qid, model, baseline, pl.format("g{}", pl.col("game"))).alias("battle_id"),
        fixed_day(options).alias("ts"),
        judge.alias("judge"),
        pl.when(first).then(baseline).otherwise(model).alias("model_a"),
        pl.when(first).then(model).otherwise(baseline).alias("model_b"),
        winner.cast(pl.String).alias("winner"),
        qid.alias("prompt_id"),
        qid.alias("__qid"),
        pl.lit(1, dtype=pl.Int64).alias("__turn"),
        _game_reason(pl.col("game"), pl.col("games_in_line"), baseline, pl.col("score")).cast(pl.String).alias(REASON),
        label.replace_strict({k: s for k, (_, s) in LABELS.items()}, default=None, return_dtype=pl.Int8).alias(
            "strength"
        ),
        *text_slice_labels(raw),  # v2's category (hard_prompt, creative_writing): its own board, its own baseline
        pl.col(SOURCE_FILE).alias(FILE_KEY),
    )
    notes = [
        f"no time stamps in arena-hard-auto judgments: every battle dated {options.default_date.isoformat()} 00:00 UTC",
        "game 1 shows the baseline first, game 2 the model; '>>' and '>' are both a win (strength 2 / 1)",
        *non_text_slice_notes(raw),
        *([renamed] if renamed else []),
        *unused_baseline_note(lines, options.baseline),
        *unnamed_baseline_note(lines, options.baseline),
    ]
    folders = answer_folders(paths, options.answers_dir, depth=2)
    lengths = None
    if folders:
        answers_dir, beside = _one_answers_dir(folders)
        table, unit = arena_hard_answer_lengths(answers_dir)
        lengths = keyed_by_folder([(answers_dir, table, beside)])
        notes.append(f"lengths: {unit} of each model's answer, from {answers_dir}")
        if len(beside) < len(paths):
            # Found beside some files only: the others (another bench's judgments, with no model_answer/ beside
            # them) took this run's answers' lengths wherever their model and question ids matched.
            notes.append(
                f"{len(paths) - len(beside)} judgment file(s) sit beside no model_answer folder: their battles "
                "have no lengths"
            )
    else:
        notes.append("no model_answer folder found (--answers): battles without lengths")
    mapped = attach_answer_lengths(mapped, lengths, (("model_a", "len_a"), ("model_b", "len_b")))
    result = finalize_battles(raw, mapped, sources=paths, source_rows=lines.height, notes=notes)
    return with_missing_lengths_note(result, mapped, lengths)


def _one_answers_dir(folders: Mapping[Path, list[str]]) -> tuple[Path, list[str]]:
    """The one ``model_answer/`` folder of the judgments (``folders``:
    :func:`~biasboard.importers.answers.answer_folders`) and the files beside it; an error when they sit beside
    more than one.

    Why: the first file's folder used to serve every file, so a glob over two benches gave the other bench's rows
    no lengths (or another run's answers' lengths) without a word.  Each folder's lengths may be in its own unit
    (token counts where every answer has one, else characters) and one import has one unit, so rather than mix
    them the import asks for one run at a time or one ``--answers`` folder.
    """
    found = sorted(folders)
    if len(found) > 1:
        shown = ", ".join(map(str, found[:3])) + (f" … ({len(found)} in all)" if len(found) > 3 else "")
        raise InputError(
            f"the judgments sit beside {len(found)} model_answer folders ({shown}): their lengths may be in "
            "different units; import one run at a time, or name one folder with --answers"
        )
    return found[0], folders[found[0]]
