"""AlpacaEval annotations → battles; rows whose shown order is unknown are counted with ``order_known`` false.

Input: AlpacaEval's own layout — ``results/<model>/<annotator>/annotations.json``
given as that file, a model's folder or the whole ``results/`` tree (folders are
searched recursively) — or the compact JSON lines with ``instruction_id`` and
``len_*`` columns that the shared fixtures use.  An annotation compares
``generator_1``'s output (the baseline) with ``generator_2``'s on one
instruction.  ``preference`` is AlpacaEval's encoding: 1 = output_1 wins,
2 = output_2 wins, 1.5 or 0 = draw (0 is AlpacaEval's legacy draw value;
``metrics/helpers.py`` treats both as draws), and in AlpacaEval 2 a probability
``2 - P(m)`` anywhere in [1, 2].  A generator's output against its own identical output is no verdict:
AlpacaEval sets it to a draw without asking the judge, so it is dead-lettered as ``identical_outputs``.

**Verdict.** AlpacaEval's own discrete count (``n_wins``: preference - 1 > 0.5)
is the threshold: the sign of preference - 1.5 decides (> → generator_2 wins,
< → generator_1), exactly 1.5 (or 0) is a tie; ``--tie-band W`` widens the tie
to |preference - 1.5| <= W.  Null (or ``NaN``, how a pandas round trip writes it)
→ ``no_verdict``; any other value outside [1, 2] → ``bad_winner``.

**Shown order.** AlpacaEval randomises which output the judge sees first and
does not store the draw, but the judge's answer gives it away where the
log-probabilities survived: the prompt lists the first-shown output as model
``m`` and the second as ``M``, AlpacaEval computes ``2 - P(m)`` on the shown
pair and flips it back (``3 - p``) when it had swapped them.  So with
``P(m)`` from ``raw_completion``'s first-token top log-probabilities
(normalised over ``m`` and ``M``, as AlpacaEval's ``logprob_parser`` does),
``preference ≈ 2 - P(m)`` means output_1 was shown first and
``preference ≈ 1 + P(m)`` means output_2 was (within 1e-6; P(m) ≈ 0.5 cannot
tell).  The compact fixtures carry the recovered order as ``shown_first``.
Where neither says, the row is **kept** with ``order_known`` false and
``model_a`` = generator_1 (the listed order): it informs quality, length,
affinity and ties but not the position effect (AlpacaEval 1 files carry no
order at all).

**Judge.** ``judge`` is the annotator config (``weighted_alpaca_eval_gpt4_turbo``
...), which names its judge model rather than a family the ingest's name rules
know (``alpaca_farm`` would read as Stanford's Alpaca).  So
``judge_family`` is set from the config's model token (:data:`ANNOTATOR_FAMILIES`:
``gpt4``/``gpt-4``/``chatgpt``/``gpt3``/``davinci`` → openai, ``claude`` →
anthropic, ``llama`` → meta, ...), null when none matches.  Model families stay
null (the family map assigns them from the generator names).

Lengths: ``len_chars_*`` / ``len_words_*`` when given, else computed from
``output_1``/``output_2`` (characters, or whitespace-separated words with
``--length-unit words``).  No time stamps: every battle gets the default day.
``prompt_id`` is ``instruction_id`` when given, else the first 16 hex digits of
the instruction text's SHA-1 (the same instruction gets the same id in every
file of one layout; a compact file's ``instruction_id`` and an ``annotations.json``'s
text name it differently, so where both layouts hold one annotator's verdicts on one
pair of generators the text rows are dead-lettered ``in_both_layouts``: the same
verdicts again, under other ids).  ``battle_id`` = ``alpacaeval:<annotator>:<prompt>:<generator_1>:<generator_2>``,
so the two copies of one annotation file nested in some results folders
collide and the second is a ``duplicate_battle_id``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow.compute as pc
from biasboard.importers.common import (
    REASON,
    REASON_NO_VERDICT,
    SOURCE_FILE,
    SOURCE_ROW,
    TIE_BAND,
    ImportOptions,
    ImportResult,
    column_or_null,
    finalize_battles,
    fixed_day,
    json_number,
    judge_expr,
    pick_length_unit,
    read_all,
    require_columns,
    stable_id,
)
from biasboard.schemas.rules import first_reason

#: Searched recursively, so a model folder or the whole ``results/`` tree works as ``--in``.
PATTERNS = tuple(f"**/annotations*.{ext}" for ext in ("json", "json.gz", "jsonl", "jsonl.gz"))
REQUIRED = ("generator_1", "generator_2", "preference")
#: Model tokens in AlpacaEval annotator config names → judge family (first match, on the lower-cased name).
ANNOTATOR_FAMILIES: tuple[tuple[str, str], ...] = (
    # AlpacaFarm's pool (``alpaca_farm``) simulates annotators with GPT-4, ChatGPT and text-davinci-003 prompts; the
    # family map read it as Stanford's Alpaca models
    (r"gpt-?4|gpt-?3|chatgpt|davinci|openai|^alpaca_farm", "openai"),
    (r"claude|anthropic", "anthropic"),
    (r"llama", "meta"),
    (r"mistral|mixtral", "mistral"),
    (r"gemini|palm|bison", "google"),
    (r"qwen", "alibaba"),
)
DRAW = 1.5
LEGACY_DRAW = 0.0
#: Dead-letter reason of a generator's output against its own identical output: AlpacaEval fills such a row in as a
#: draw itself (its annotator's "deals with equality" step sets the preference to 1.5, 0 in old files), without
#: asking the judge (see :func:`unjudged_self_battle`).
REASON_IDENTICAL_OUTPUTS = "identical_outputs"
#: An annotations.json row (instruction text) whose annotator and generators a compact file (instruction_id) holds.
REASON_BOTH_LAYOUTS = "in_both_layouts"
#: How close ``preference`` must sit to ``2 - P(m)`` (or ``1 + P(m)``) to name the shown order (AlpacaEval
#: rounds preferences to 10 decimals; the log-probabilities are rounded to about 7 significant digits).
ORDER_TOLERANCE = 1e-6
#: The tokens AlpacaEval's prompt names the first- and second-shown outputs by.
FIRST_TOKEN, SECOND_TOKEN = "m", "M"

#: Fields read as single values (a list or object there dead-letters the row as ``bad_type:<field>``).
SCALAR = (
    "instruction_id", "instruction", "generator_1", "generator_2", "preference", "annotator", "shown_first",
    "output_1", "output_2", "len_chars_1", "len_chars_2", "len_words_1", "len_words_2",
)  # fmt: skip


def listed_winner(preference: pl.Expr, tie_band: float) -> pl.Expr:
    """'output_1' / 'output_2' / 'tie' from a preference; null when missing or out of range."""
    in_range = preference.is_between(1.0, 2.0)
    return (
        pl.when(preference.is_null())
        .then(pl.lit(None, dtype=pl.String))
        .when(preference == LEGACY_DRAW)
        .then(pl.lit("tie"))
        .when(~in_range)
        .then(pl.lit(None, dtype=pl.String))
        .when((preference - DRAW).abs() <= tie_band)
        .then(pl.lit("tie"))
        .when(preference > DRAW)
        .then(pl.lit("output_2"))
        .otherwise(pl.lit("output_1"))
    )


def no_preference(frame: pl.DataFrame, preference: pl.Expr) -> pl.Expr:
    """Whether the row holds no verdict: a null ``preference``, or NaN (``NaN`` in the JSON, or its text).

    Why NaN: AlpacaEval writes null where the judge gave no verdict, and a pandas round trip of its annotations
    (``json.dump`` of a frame's records) writes that missing value as ``NaN``; read as a number out of [1, 2] it was
    dead-lettered ``bad_winner``, as if the judge had answered something unreadable.  A JSON boolean, which
    :func:`~biasboard.importers.common.json_number` also reads as NaN, stays a ``bad_winner``.
    """
    missing = pl.col("preference").is_null()
    if frame.schema["preference"] == pl.Boolean:
        return missing
    return missing | preference.is_nan().fill_null(False)


def copy_in_other_layout(frame: pl.DataFrame, judge: pl.Expr) -> pl.Expr:
    """Whether a row identified by its instruction text alone (AlpacaEval's ``annotations.json``) is of an annotator
    and pair of generators that rows with an ``instruction_id`` (a compact file) hold too.

    Why: the two layouts name one instruction by two prompt ids (``"0"``, the text's SHA-1), so the same annotation
    in both got two battle ids and was imported twice: the documented ``import --format alpacaeval --in alpacaeval/``
    over the shared folder counted the real-layout files' 2,414 verdicts twice.  Within one layout such a repeat is a
    ``duplicate_battle_id``; across the two it is this, and the ``instruction_id`` rows are kept.
    """
    if "instruction_id" not in frame.columns or "instruction" not in frame.columns:
        return pl.lit(False)
    by_id = pl.col("instruction_id").is_not_null()
    key = pl.concat_str(
        [judge.fill_null(""), *(pl.col(c).cast(pl.String).fill_null("") for c in ("generator_1", "generator_2"))],
        separator="\x1f",
    )
    return (~by_id & pl.col("instruction").is_not_null() & by_id.any().over(key)).fill_null(False)


def unjudged_self_battle(frame: pl.DataFrame, preference: pl.Expr) -> pl.Expr:
    """Whether a row compares a generator's output with its own identical output, set to a draw by AlpacaEval.

    AlpacaEval's annotator gives identical outputs a draw (1.5, or 0 in old files) without asking the judge, so
    such a row is no verdict of it.  The baseline's own results folder is 805 of them
    (``gpt4_1106_preview`` against itself in AlpacaEval 2): kept as self-battles, they were the judge's only ties
    but ~150, raising its fitted tie propensity from 0.015 to 0.100 and moving corrected ratings up to 58 points
    (position -0.89 → -0.97, length 1.44 → 1.55).  Identical means the same text when the file has the outputs,
    else the same length in each unit it gives.
    """
    same = pl.col("generator_1").cast(pl.String) == pl.col("generator_2").cast(pl.String)
    # Row by row (null where the row lacks the field): files of both layouts imported together hold the outputs on
    # some rows and only lengths on others, and a test on the outputs alone kept the compact rows' self-battles.
    tests = []
    if "output_1" in frame.columns and "output_2" in frame.columns:
        tests.append(pl.col("output_1").cast(pl.String) == pl.col("output_2").cast(pl.String))
    lengths = [u for u in ("chars", "words") if f"len_{u}_1" in frame.columns and f"len_{u}_2" in frame.columns]
    if lengths:
        tests.append(pl.all_horizontal([pl.col(f"len_{u}_1") == pl.col(f"len_{u}_2") for u in lengths]))
    identical = pl.coalesce(tests) if tests else same
    draw = (preference == DRAW) | (preference == LEGACY_DRAW)
    return (same & identical & draw).fill_null(False)


def annotator_family(annotator: pl.Expr) -> pl.Expr:
    """The judge family an annotator config name states (see :data:`ANNOTATOR_FAMILIES`), else null."""
    lowered = annotator.str.to_lowercase()
    return first_reason([(lowered.str.contains(pattern), family) for pattern, family in ANNOTATOR_FAMILIES])


def _field_path(dtype: pl.DataType, *names: str) -> bool:
    """Whether nested struct fields ``names`` exist under ``dtype`` (lists are looked through)."""
    current: Any = dtype
    for name in names:
        while isinstance(current, pl.List):
            current = current.inner
        if not isinstance(current, pl.Struct):
            return False
        fields = {f.name: f.dtype for f in current.fields}
        if name not in fields:
            return False
        current = fields[name]
    return True


#: Where the first token's top log-probabilities sit in ``raw_completion`` (OpenAI chat completion layout).
TOP_LOGPROBS_PATH = "$.logprobs.content[0].top_logprobs"


def _typed_masses(top: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    """(P(m), P(M)) unnormalised from the top-log-probability list as parsed structs; null where there is no list.

    A token listed with a logprob that is no number (text, or ``true``, read as text) has an unknown mass, so its
    row's order is not recovered.  Why: counted as no mass, it recovered a confident wrong order (a ``true`` for
    ``M``'s logprob, P(M) ≈ 1 in the file, swapped the row); read as 1.0 (pyarrow's reading of ``true`` among
    floats) it was a probability of e ≈ 2.7.
    """

    def mass(token: str) -> pl.Expr:
        element = pl.element().struct
        # A logprob that is no number (text: a field whose kind varies is read as text) is cast to null, not raised.
        logprob = element.field("logprob").cast(pl.Float64, strict=False)
        listed = element.field("token") == token
        unknown = top.list.eval(listed & logprob.is_null()).list.any()
        return pl.when(~unknown).then(top.list.eval(pl.when(listed).then(logprob.exp())).list.sum())

    return mass(FIRST_TOKEN), mass(SECOND_TOKEN)


def _text_masses(text: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    """(P(m), P(M)) unnormalised from ``raw_completion`` kept as JSON text; null where there is no list.

    The field is text for every row as soon as one row holds something else
    than an object (a string, a number): :func:`~biasboard.importers.common.read_records`
    keeps a field whose JSON type varies as text.  JSONPath reads each row on
    its own (text that is no JSON, or lacks the path, gives null for that row
    only), where a typed decode would fail for the whole column.  A token's
    first entry counts (the API lists each token once); one listed with a logprob that is no number has an unknown
    mass, as in :func:`_typed_masses`.
    """
    listed = text.str.json_path_match(f"{TOP_LOGPROBS_PATH}[*].token").is_not_null()

    def mass(token: str) -> pl.Expr:
        entry = f"{TOP_LOGPROBS_PATH}[?(@.token == '{token}')]"
        present = text.str.json_path_match(f"{entry}.token").is_not_null()
        logprob = text.str.json_path_match(f"{entry}.logprob").cast(pl.Float64, strict=False)
        return pl.when(listed & ~(present & logprob.is_null())).then(logprob.exp().fill_null(0.0))

    return mass(FIRST_TOKEN), mass(SECOND_TOKEN)


def first_shown_probability(frame: pl.DataFrame) -> pl.Expr:
    """P(m) — the judge's probability for the first-shown output — from ``raw_completion``; null if absent.

    AlpacaEval's ``logprob_parser``: the first token's top log-probabilities, ``m`` normalised against
    ``m`` and ``M`` (a token missing from the top list has probability 0).  Read from the parsed
    structs when every row holds an object, else row by row from the JSON text (:func:`_text_masses`),
    so one malformed completion loses only its own row's order.
    """
    dtype = frame.schema.get("raw_completion")
    if dtype == pl.String:
        p_first, p_second = _text_masses(pl.col("raw_completion"))
    elif dtype is not None and _field_path(dtype, "logprobs", "content", "top_logprobs", "token"):
        top = pl.col("raw_completion").struct.field("logprobs").struct.field("content").list.first()
        p_first, p_second = _typed_masses(top.struct.field("top_logprobs"))
    else:
        return pl.lit(None, dtype=pl.Float64)
    total = p_first + p_second
    return pl.when(total > 0).then(p_first / total).otherwise(None)


def shown_first(frame: pl.DataFrame, preference: pl.Expr) -> pl.Expr:
    """'output_1' / 'output_2' (which output the judge saw first), null when the file cannot say."""
    given = column_or_null(frame, "shown_first").cast(pl.String)
    p_m = first_shown_probability(frame)
    unswapped = (preference - (2.0 - p_m)).abs() <= ORDER_TOLERANCE
    swapped = (preference - (1.0 + p_m)).abs() <= ORDER_TOLERANCE
    recovered = (
        pl.when(unswapped & ~swapped)
        .then(pl.lit("output_1"))
        .when(swapped & ~unswapped)
        .then(pl.lit("output_2"))
        .otherwise(pl.lit(None, dtype=pl.String))
    )
    return pl.when(given.is_in(["output_1", "output_2"])).then(given).otherwise(recovered)


def _lengths(frame: pl.DataFrame, unit: str) -> tuple[pl.Expr, pl.Expr]:
    """(length of output_1, of output_2): the row's ``len_<unit>_*`` values, else measured on its outputs.

    Row by row: a compact file (lengths, no outputs) imported with AlpacaEval's ``annotations.json`` (outputs, no
    lengths) left every annotations.json row without lengths when the file-wide choice took the length columns.
    """

    def length(side: str) -> pl.Expr:
        given, output = f"len_{unit}_{side}", f"output_{side}"
        parts = [pl.col(given)] if given in frame.columns else []
        if output in frame.columns:
            text = pl.col(output).cast(pl.String)
            measured = text.str.len_chars() if unit == "chars" else text.str.count_matches(r"\S+")
            numeric = given not in frame.columns or frame.schema[given].is_numeric()
            parts.append(measured.cast(pl.Int64 if numeric else pl.String))  # (a length read as text stays text)
        return pl.coalesce(parts) if parts else pl.lit(None, dtype=pl.Int64)

    return length("1"), length("2")


def prompt_ids(frame: pl.DataFrame, paths: Sequence[Path]) -> pl.Expr:
    """``instruction_id`` when the row has it, else 16 hex digits of SHA-1 of the instruction text.

    The hash runs once per *distinct* instruction (805 in AlpacaEval), not per row.  Per row, because an AlpacaEval
    ``annotations.json`` (no ``instruction_id``) imported with a file that has one gave every row of it a null
    prompt: one battle id per annotator and pair of generators, all its other rows dead-lettered as duplicates.
    """
    given = pl.col("instruction_id").cast(pl.String) if "instruction_id" in frame.columns else None
    if given is not None and ("instruction" not in frame.columns or frame["instruction_id"].null_count() == 0):
        return given
    require_columns(frame, ("instruction",), paths, "AlpacaEval annotation")
    texts = frame.get_column("instruction").cast(pl.String).drop_nulls().unique()
    digests = [hashlib.sha1(t.encode("utf-8")).hexdigest()[:16] for t in texts.to_list()]
    lookup = dict(zip(texts.to_list(), digests, strict=True))
    hashed = pl.col("instruction").cast(pl.String).replace_strict(lookup, default=None, return_dtype=pl.String)
    return hashed if given is None else pl.coalesce(given, hashed)


def convert(paths: Sequence[Path], options: ImportOptions) -> ImportResult:
    TIE_BAND.check(options.tie_band, "--tie-band")
    unit = pick_length_unit(options)
    raw = read_all(paths, scalar=SCALAR, required=REQUIRED, what="AlpacaEval annotation")
    judge, renamed = judge_expr(raw, options, paths, column="annotator")
    preference = json_number(raw, "preference")
    listed = listed_winner(preference, options.tie_band)
    first = shown_first(raw, preference)
    first_is_2 = (first == "output_2").fill_null(False)
    len_1, len_2 = _lengths(raw, unit)
    g1, g2 = pl.col("generator_1").cast(pl.String), pl.col("generator_2").cast(pl.String)
    winner = (
        pl.when(listed == "tie")
        .then(pl.lit("tie"))
        .when(listed.is_null())
        .then(pl.lit("bad_preference"))  # not a verdict value: the rules reject it as bad_winner
        .when((listed == "output_2") == first_is_2)
        .then(pl.lit("model_a"))
        .otherwise(pl.lit("model_b"))
    )
    reason = (
        pl.when(copy_in_other_layout(raw, judge))
        .then(pl.lit(REASON_BOTH_LAYOUTS))
        .when(no_preference(raw, preference))
        .then(pl.lit(REASON_NO_VERDICT))
        .when(unjudged_self_battle(raw, preference))
        .then(pl.lit(REASON_IDENTICAL_OUTPUTS))
        .otherwise(None)
    )
    prompt = prompt_ids(raw, paths)
    mapped = raw.select(
        stable_id("alpacaeval", judge, prompt, g1, g2).alias("battle_id"),
        fixed_day(options).alias("ts"),
        judge.alias("judge"),
        pl.when(first_is_2).then(g2).otherwise(g1).alias("model_a"),
        pl.when(first_is_2).then(g1).otherwise(g2).alias("model_b"),
        winner.alias("winner"),
        prompt.alias("prompt_id"),
        pl.when(first_is_2).then(len_2).otherwise(len_1).alias("len_a"),
        pl.when(first_is_2).then(len_1).otherwise(len_2).alias("len_b"),
        reason.cast(pl.String).alias(REASON),
        annotator_family(judge).alias("judge_family"),
        pl.when(first.is_null()).then(False).otherwise(None).cast(pl.Boolean).alias("order_known"),
    )
    result = finalize_battles(raw, mapped, sources=paths, source_rows=raw.height, notes=[renamed] if renamed else [])
    banded = _band_ties(raw, preference, options.tie_band, result)
    notes = (*_notes(result, options, unit, banded), *_baselines_note(raw, judge), *result.notes)
    return replace(result, notes=notes)


def _baselines_note(raw: pl.DataFrame, judge: pl.Expr) -> tuple[str, ...]:
    """A note naming each annotator's baseline (its most common ``generator_1``) when the annotators' differ.

    Why: AlpacaEval's ``results/`` tree holds AlpacaEval 1's annotators (``alpaca_eval_gpt4``, against
    ``text_davinci_003``) beside AlpacaEval 2's (``weighted_alpaca_eval_gpt4_turbo``, against ``gpt4_1106_preview``),
    which AlpacaEval publishes as two leaderboards.  Imported together they are two judges of one board, which is
    a fit the model supports, but a user who imported the tree to reproduce one leaderboard got both silently.
    """
    pairs = raw.select(judge.alias("judge"), pl.col("generator_1").cast(pl.String).alias("baseline")).drop_nulls()
    counted = pairs.group_by("judge", "baseline").len().sort("len", "baseline", descending=[True, False])
    top = counted.group_by("judge", maintain_order=True).first().sort("judge")
    if top.get_column("baseline").n_unique() < 2:
        return ()
    listed = "; ".join(f"{j} against {b} ({n:,} rows)" for j, b, n in top.iter_rows())
    example = top.get_column("judge")[-1]
    return (
        f"annotators with different baselines (generator_1): {listed}. AlpacaEval publishes each baseline's results "
        "as a leaderboard of its own (AlpacaEval 1 against text_davinci_003, 2 against gpt4_1106_preview); here every "
        "annotator is a judge of one board. To rank against one baseline, import its annotator's folders alone "
        f"(--in 'results/*/{example}/annotations*')",
    )


def _band_ties(raw: pl.DataFrame, preference: pl.Expr, tie_band: float, result: ImportResult) -> int:
    """How many of the battles written ``--tie-band`` made ties that the strict rule (1.5 or 0) left wins.

    Why: the note said the rule alone, so ``--tie-band 0.2`` on AlpacaEval 1 (preferences 1, 1.5 and 2 only) read as
    if it had widened the ties, where it had made none.  Rows dead-lettered (duplicates, no verdict) are no battle,
    so they are not counted: the written ties are the strict rule's plus these.
    """
    made_tie = (listed_winner(preference, tie_band) == "tie") & (listed_winner(preference, 0.0) != "tie")
    keys = ["source_file", "source_row"]
    rows = raw.select(
        pl.col(SOURCE_FILE).cast(pl.String).alias(keys[0]),
        pl.col(SOURCE_ROW).cast(pl.Int64).alias(keys[1]),
        made_tie.fill_null(False).alias("made_tie"),
    )
    dead = pl.DataFrame(result.dead_letters.select(keys)).with_columns(pl.col(keys[0]).cast(pl.String))
    return int(rows.join(dead, on=keys, how="anti")["made_tie"].sum())


def _notes(result: ImportResult, options: ImportOptions, unit: str, banded: int) -> tuple[str, ...]:
    """The manifest's notes; the shown-order counts are of the battles written, so they add up to rows_converted.

    Counted after :func:`~biasboard.importers.common.finalize_battles`: a row it
    rejects (``no_verdict``, a ``duplicate_battle_id`` copy) is no battle, known
    order or not.  The caller appends finalize's own notes (whether the duplicate ids repeat their kept row
    exactly): replacing them silenced that line for AlpacaEval alone.  ``banded``: the rows the tie band made
    ties (:func:`_band_ties`), said when a band is given.
    """
    unknown = int(pc.sum(pc.invert(pc.fill_null(result.rows.column("order_known"), True))).as_py() or 0)
    identical = result.dead_by_reason().get(REASON_IDENTICAL_OUTPUTS, 0)
    unjudged = (
        (
            f"{REASON_IDENTICAL_OUTPUTS}: {identical} rows compare a generator's output with its own identical "
            "output, which AlpacaEval sets to a draw without asking the judge: no verdict, so no battle",
        )
        if identical
        else ()
    )
    copies = result.dead_by_reason().get(REASON_BOTH_LAYOUTS, 0)
    both = (
        (
            f"{REASON_BOTH_LAYOUTS}: {copies} annotations.json rows (instruction text, no instruction_id) are of "
            "annotators and generators a file with instruction_id holds too: the same verdicts under other prompt "
            "ids, so only the instruction_id rows are kept",
        )
        if copies
        else ()
    )
    return (
        f"no time stamps in AlpacaEval annotations: every battle dated {options.default_date.isoformat()} 00:00 UTC",
        f"verdict threshold: preference > 1.5 → generator_2, < 1.5 → generator_1, |p - 1.5| <= {options.tie_band} "
        "or p == 0 → tie" + (f" (the band turned {banded} verdict(s) into ties)" if options.tie_band else ""),
        f"shown order: recovered for {result.rows_converted - unknown} battles; {unknown} battles kept with "
        "order_known = false (listed order; no position information)",
        *unjudged,
        *both,
        f"lengths: {unit}",
    )
