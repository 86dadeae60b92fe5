"""Chatbot Arena's category boards from a FastChat battle's tags → the battle's ``category`` label.

The arena publishes a board per category; its battle logs carry the tags those
boards are filtered by, not a category name:

* ``category_tag`` (a nested object written by FastChat's
  ``serve/monitor/classify``): ``criteria_v0.1`` (seven flags: specificity,
  domain_knowledge, complexity, problem_solving, creativity,
  technical_accuracy, real_world), ``math_v0.1.math``, ``if_v0.1.if``
  (instruction following; the classifier sets it when its 0–5 score is ≥ 4),
  ``creative_writing_v0.1.creative_writing``;
* ``is_code``, ``turn`` and ``conv_metadata.sum_user_tokens``.

The arena's boards, and the label each becomes here:

===================== =========================================== ====================
arena board           battle is in it when                        ``category`` label
===================== =========================================== ====================
Hard Prompts          ≥ 6 of the ``criteria_v0.1`` flags are true ``hard_prompts``
Coding                ``is_code``                                 ``coding``
Math                  ``math_v0.1.math``                          ``math``
Instruction Following ``if_v0.1.if``                              ``instruction_following``
Creative Writing      ``creative_writing_v0.1.creative_writing``  ``creative_writing``
Longer Query          ``sum_user_tokens`` ≥ 500                   ``long_query``
Multi-Turn            ``turn`` ≥ 2                                ``multi_turn``
===================== =========================================== ====================

The boards overlap (a coding prompt is often a hard prompt too), and a battle
has one ``category`` value, so a battle in several is labelled with all of
them, joined by ``|`` in the order above (``hard_prompts|coding``): it stays
one battle on the overall board and is in each of those slices
(:mod:`biasboard.transforms.slices`).  A battle in none is unlabelled (null).
The language boards come from the log's own ``language`` column.  A tag that
is absent, null or not a flag counts as false; one written as a number (or a
number as text) is true when not 0, as the arena's Python code reads it; a tag
the file does not carry at all gives no board, and the import's notes say which
boards were derived.
"""

from __future__ import annotations

import polars as pl
from biasboard.importers.common import DType, json_truth, nested_field
from biasboard.schemas.battle import SLICE_LABEL_SEPARATOR

#: The arena's "Hard Prompts" board: at least this many of the seven criteria.
HARD_PROMPT_CRITERIA = 6
#: The arena's "Longer Query" board: user prompts of at least this many tokens.
LONG_QUERY_TOKENS = 500
#: The arena's "Multi-Turn" board: at least this many turns.
MULTI_TURN = 2


def _flag(found: tuple[pl.Expr, DType] | None) -> pl.Expr | None:
    """A tag as a Boolean (null and anything not a flag: false); None when the file lacks it or it is no flag.

    A boolean, a number and text are read alike (:func:`~biasboard.importers.common.json_truth`): a tag written
    ``1.0`` on some battles and ``true`` on others is text on every row, and ``"1.0"`` was read as false.
    """
    if found is None:
        return None
    expr, dtype = found
    if dtype == pl.Boolean or dtype.is_numeric() or dtype == pl.String:
        return json_truth(expr)
    return None


def _at_least(found: tuple[pl.Expr, DType] | None, threshold: int) -> pl.Expr | None:
    """A numeric tag ≥ ``threshold`` (null or not a number: false); None when the file lacks it."""
    if found is None:
        return None
    expr, dtype = found
    if not (dtype.is_numeric() or dtype == pl.String):
        return None
    return (expr.cast(pl.Float64, strict=False) >= threshold).fill_null(False)


def _hard(frame: pl.DataFrame) -> pl.Expr | None:
    found = nested_field(frame, "category_tag", "criteria_v0.1")
    if found is None or not isinstance(found[1], pl.Struct):
        return None
    flags = [_flag(nested_field(frame, "category_tag", "criteria_v0.1", f.name)) for f in found[1].fields]
    usable = [f.cast(pl.Int32) for f in flags if f is not None]
    return pl.sum_horizontal(usable) >= HARD_PROMPT_CRITERIA if usable else None


def arena_category(frame: pl.DataFrame) -> tuple[pl.Expr | None, list[str]]:
    """The ``category`` label of every battle (``|``-joined boards, null for none) and the boards derived.

    None when the file carries none of the tags.
    """
    boards = {
        "hard_prompts": _hard(frame),
        "coding": _flag(nested_field(frame, "is_code")),
        "math": _flag(nested_field(frame, "category_tag", "math_v0.1", "math")),
        "instruction_following": _flag(nested_field(frame, "category_tag", "if_v0.1", "if")),
        "creative_writing": _flag(nested_field(frame, "category_tag", "creative_writing_v0.1", "creative_writing")),
        "long_query": _at_least(nested_field(frame, "conv_metadata", "sum_user_tokens"), LONG_QUERY_TOKENS),
        "multi_turn": _at_least(nested_field(frame, "turn"), MULTI_TURN),
    }
    derived = {name: expr for name, expr in boards.items() if expr is not None}
    if not derived:
        return None, []
    names = pl.concat_list([pl.when(expr).then(pl.lit(name)) for name, expr in derived.items()]).list.drop_nulls()
    label = pl.when(names.list.len() > 0).then(names.list.join(SLICE_LABEL_SEPARATOR))
    return label.cast(pl.String), list(derived)
