"""The Battle, Score and Anchor contracts: what an input row must look like.

A *battle* is one judged pairwise comparison: ``model_a`` was shown first,
``model_b`` second, and ``winner`` holds FastChat's verdict values.  When the
log does not record the shown order (most AlpacaEval files), ``order_known`` is
false: ``model_a``/``model_b`` are then just the listed order, and the battle
informs quality, length, affinity and ties but not the position effect.  A
null or absent ``order_known`` means the order is known (older files).
``strength`` optionally keeps how strongly the judge preferred the winner
(arena-hard-auto's ``A>>B`` = 2, ``A>B`` = 1, a tie 0); the fit reads the
winner only.  ``category`` and ``language`` optionally label the battle for
the per-slice boards (``refresh --slices``); blank or null means unlabelled (the
battle counts on the overall board, in no slice of that dimension).  These
schemas are the contract that readers validate against; the rules that turn a
bad row into a dead letter live in :mod:`biasboard.schemas.rules`.
"""

from __future__ import annotations

import pyarrow as pa

#: FastChat's four verdicts.  ``tie (bothbad)`` is a tie whose share is reported.
WINNER_VALUES: tuple[str, ...] = ("model_a", "model_b", "tie", "tie (bothbad)")

BATTLE_SCHEMA = pa.schema(
    [
        pa.field("battle_id", pa.string(), nullable=False),
        pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("judge", pa.string(), nullable=False),
        pa.field("model_a", pa.string(), nullable=False),  # shown first
        pa.field("model_b", pa.string(), nullable=False),  # shown second
        pa.field("winner", pa.string(), nullable=False),
        pa.field("prompt_id", pa.string()),
        pa.field("len_a", pa.int64()),  # response length, one unit per dataset
        pa.field("len_b", pa.int64()),
        pa.field("family_a", pa.string()),
        pa.field("family_b", pa.string()),
        pa.field("judge_family", pa.string()),
        pa.field("order_known", pa.bool_()),  # false: the shown order is unknown; null/absent: known
        pa.field("strength", pa.int8()),  # optional verdict strength: 2 "much better", 1 "better", 0 tie
        pa.field("category", pa.string()),  # optional slice label (e.g. "coding"); null: no category
        pa.field("language", pa.string()),  # optional slice label (e.g. "English"); null: no language
        pa.field("header_count_a", pa.int64()),  # optional style counts (markdown headers, list items, bold)
        pa.field("header_count_b", pa.int64()),
        pa.field("list_count_a", pa.int64()),
        pa.field("list_count_b", pa.int64()),
        pa.field("bold_count_a", pa.int64()),
        pa.field("bold_count_b", pa.int64()),
    ]
)

#: Columns a battle file must have; the rest are optional.
BATTLE_REQUIRED: tuple[str, ...] = ("battle_id", "ts", "judge", "model_a", "model_b", "winner")
#: Optional label columns a board can be sliced by (``refresh --slices``); they are keys of the pair cells.
SLICE_COLUMNS: tuple[str, ...] = ("category", "language")
#: Joins the labels of a battle in several slices of one dimension ("hard_prompts|coding"): one battle, one
#: cell row, in each listed slice (biasboard.transforms.slices).
SLICE_LABEL_SEPARATOR = "|"
#: The style features beside length (LMArena's style control), each counted per answer.
STYLE_FEATURES: tuple[str, ...] = ("header", "list", "bold")
#: Their optional battle columns, (first-shown answer's, second-shown answer's) per feature.
STYLE_COLUMNS: tuple[tuple[str, str], ...] = tuple((f"{f}_count_a", f"{f}_count_b") for f in STYLE_FEATURES)
#: The same six columns, flat.
STYLE_COUNT_COLUMNS: tuple[str, ...] = tuple(c for pair in STYLE_COLUMNS for c in pair)

SCORE_SCHEMA = pa.schema(
    [
        pa.field("score_id", pa.string(), nullable=False),
        pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("judge", pa.string(), nullable=False),
        pa.field("model", pa.string(), nullable=False),
        pa.field("prompt_id", pa.string(), nullable=False),
        pa.field("score", pa.float64(), nullable=False),  # ordinal grade 1..K on a half-point grid (8.5 allowed)
        pa.field("len", pa.int64()),
        pa.field("family", pa.string()),
        pa.field("judge_family", pa.string()),
    ]
)
SCORE_REQUIRED: tuple[str, ...] = ("score_id", "ts", "judge", "model", "prompt_id", "score")

#: FastChat / arena column names accepted by readers, mapped onto ours.
FASTCHAT_COLUMN_MAP: dict[str, str] = {
    "question_id": "battle_id",
    "tstamp": "ts",
}
