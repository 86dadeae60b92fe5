"""AlpacaEval annotations → battles, only where the shown order is known.

An annotation compares ``generator_1``'s output (the baseline) with
``generator_2``'s on one instruction.  ``preference`` is AlpacaEval's encoding:
1 = output_1 wins, 2 = output_2 wins, 1.5 or 0 = draw (0 is AlpacaEval's
legacy draw value; ``metrics/helpers.py`` treats both as draws), and in
AlpacaEval 2 a probability ``2 - P(m)`` anywhere in [1, 2].

**Verdict.** AlpacaEval's own discrete count (``n_wins``: preference - 1 > 0.5)
is the threshold: preference > 1.5 → generator_2 wins, < 1.5 → generator_1
wins, exactly 1.5 (or 0) → tie.  ``--tie-band W`` widens the tie to
|preference - 1.5| <= W.  The strength of a continuous preference is not kept.
Null → ``no_verdict``; any other value outside [1, 2] → ``bad_winner``.

**Shown order.** AlpacaEval randomises which output the judge sees first and
does not store the draw.  For AlpacaEval 2 rows whose logprobs survived, the
fixture's compiler recovered it as ``shown_first`` (``output_1``/``output_2``);
``model_a`` is then that generator.  Rows without it *cannot* satisfy the
battle contract (``model_a`` = shown first), so they are dead-lettered with
reason ``unknown_order`` rather than given a guessed order that would fake a
position effect.  The dead letter keeps the preference and lengths as text, so
an order-free analysis (a raw win rate) can still use them.  AlpacaEval 1
annotation files carry no order at all: every row becomes ``unknown_order``.

**Judge.** ``judge`` is the annotator config (``weighted_alpaca_eval_gpt4_turbo``
...), which names its judge model rather than a family the ingest's name rules
know (``alpaca_eval_gpt4`` would read as Stanford's Alpaca).  So
``judge_family`` is set from the config's model token (:data:`ANNOTATOR_FAMILIES`:
``gpt4``/``gpt-4``/``chatgpt``/``gpt3``/``davinci`` → openai, ``claude`` →
anthropic, ``llama`` → meta, ...), null when none matches.  Model families stay
null (the family map assigns them from the generator names).

Lengths: ``len_chars_*`` (default) or ``len_words_*`` (``--length-unit words``).
No time stamps: every battle gets the default day.  ``battle_id`` =
``alpacaeval:<annotator>:<instruction>:<generator_1>:<generator_2>``, so the two
copies of one annotation file nested in some results folders collide and the
second is a ``duplicate_battle_id``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import polars as pl
from biasboard.importers.common import (
    REASON,
    REASON_NO_VERDICT,
    REASON_UNKNOWN_ORDER,
    ImportOptions,
    ImportResult,
    column_or_null,
    finalize_battles,
    fixed_day,
    judge_expr,
    pick_length_unit,
    read_all,
    require_columns,
)
from biasboard.schemas.errors import InputError
from biasboard.schemas.rules import first_reason

PATTERNS = ("annotations*.json", "annotations*.json.gz", "annotations*.jsonl", "annotations*.jsonl.gz")
REQUIRED = ("instruction_id", "generator_1", "generator_2", "preference")
#: Model tokens in AlpacaEval annotator config names → judge family (first match, on the lower-cased name).
ANNOTATOR_FAMILIES: tuple[tuple[str, str], ...] = (
    (r"gpt-?4|gpt-?3|chatgpt|davinci|openai", "openai"),
    (r"claude|anthropic", "anthropic"),
    (r"llama", "meta"),
    (r"mistral|mixtral", "mistral"),
    (r"gemini|palm|bison", "google"),
    (r"qwen", "alibaba"),
)
DRAW = 1.5
LEGACY_DRAW = 0.0


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


def annotator_family(annotator: pl.Expr) -> pl.Expr:
    """The judge family an annotator config name states (see :data:`ANNOTATOR_FAMILIES`), else null."""
    lowered = annotator.str.to_lowercase()
    return first_reason([(lowered.str.contains(pattern), family) for pattern, family in ANNOTATOR_FAMILIES])


def convert(paths: Sequence[Path], options: ImportOptions) -> ImportResult:
    if not 0.0 <= options.tie_band < 0.5:
        raise InputError(f"--tie-band must be in [0, 0.5), not {options.tie_band}")
    unit = pick_length_unit(options)
    raw = read_all(paths)
    require_columns(raw, REQUIRED, paths, "AlpacaEval annotation")
    judge = judge_expr(raw, options, paths, column="annotator")
    preference = pl.col("preference").cast(pl.Float64, strict=False)
    listed = listed_winner(preference, options.tie_band)
    shown = column_or_null(raw, "shown_first").cast(pl.String)
    first_is_1 = shown == "output_1"
    first_is_2 = shown == "output_2"
    len_1 = column_or_null(raw, f"len_{unit}_1", pl.Int64)
    len_2 = column_or_null(raw, f"len_{unit}_2", pl.Int64)
    g1, g2 = pl.col("generator_1").cast(pl.String), pl.col("generator_2").cast(pl.String)
    winner = (
        pl.when(listed == "tie")
        .then(pl.lit("tie"))
        .when(listed.is_null())
        .then(pl.lit("bad_preference"))  # not a verdict value: the rules reject it as bad_winner
        .when((listed == "output_1") == first_is_1)
        .then(pl.lit("model_a"))
        .otherwise(pl.lit("model_b"))
    )
    reason = (
        pl.when(pl.col("preference").is_null())
        .then(pl.lit(REASON_NO_VERDICT))
        .when(~(first_is_1 | first_is_2).fill_null(False))
        .then(pl.lit(REASON_UNKNOWN_ORDER))
        .otherwise(pl.lit(None, dtype=pl.String))
    )
    instruction = pl.col("instruction_id").cast(pl.String)
    battle_id = pl.concat_str(
        [pl.lit("alpacaeval"), judge.fill_null(""), instruction.fill_null(""), g1.fill_null(""), g2.fill_null("")],
        separator=":",
    )
    mapped = raw.select(
        battle_id.alias("battle_id"),
        fixed_day(options).alias("ts"),
        judge.alias("judge"),
        pl.when(first_is_2).then(g2).otherwise(g1).alias("model_a"),
        pl.when(first_is_2).then(g1).otherwise(g2).alias("model_b"),
        winner.alias("winner"),
        instruction.alias("prompt_id"),
        pl.when(first_is_2).then(len_2).otherwise(len_1).alias("len_a"),
        pl.when(first_is_2).then(len_1).otherwise(len_2).alias("len_b"),
        reason.alias(REASON),
        annotator_family(judge).alias("judge_family"),
    )
    notes = [
        f"no time stamps in AlpacaEval annotations: every battle dated {options.default_date.isoformat()} 00:00 UTC",
        f"verdict threshold: preference > 1.5 → generator_2, < 1.5 → generator_1, |p - 1.5| <= {options.tie_band} "
        "or p == 0 → tie",
        f"lengths: {unit}",
    ]
    return finalize_battles(raw, mapped, sources=paths, source_rows=raw.height, notes=notes)
