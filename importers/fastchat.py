"""FastChat / Chatbot Arena ``clean_battle*.json`` → battles.

The arena's own log format already is ours in spirit: ``model_a`` is the
answer shown first (left), ``winner`` holds the four FastChat verdicts,
``tstamp`` is the vote's epoch seconds and ``judge`` the voter.  What differs:

* ``question_id`` (when present) is the arena's per-conversation id, so it is
  the ``battle_id`` (FastChat's own dedupe key); without it the id is the
  composite ``fastchat:<judge>:<tstamp>:<model_a>:<model_b>`` (with no ``tstamp``
  column, ``row<N>``, the battle's row, in its place).  No prompt
  identity exists in these logs, so ``prompt_id`` stays null.
* Token counts, when the log has ``conv_metadata``, give the lengths
  (``sum_assistant_a_tokens`` / ``_b``: tokens, FastChat's style-control unit).
* The other style-control counts of ``conv_metadata`` give the style columns,
  summed as FastChat's ``clean_battle`` writes them: ``header_count_a`` over
  ``h1``..``h6``, ``list_count_a`` over ``ordered``/``unordered``,
  ``bold_count_a`` over ``**``/``__`` (likewise ``_b``); a plain number there
  is taken as the count, a sub-count written as text is read as a number (one
  that is not a number dead-letters the row as ``bad_style_count``); a row
  without them has no style information.
* A text ``language`` column (the arena's) and a text ``category`` column, when
  present, are kept as the battle's slice labels (``refresh --slices``).  Without
  a text ``category``, the arena's tags (``category_tag``, ``is_code``, ``turn``,
  ``conv_metadata.sum_user_tokens``) give it: the arena's category boards the
  battle is in (:mod:`biasboard.importers.arena_categories`).
* ``anony`` (the models were hidden until the vote) and ``dedup_tag.sampled``
  (the prompt survived the arena's de-duplication of its top 0.1% most
  repeated prompts, in LMArena's public files): the arena's leaderboard is fit
  on anonymous, sampled battles only (FastChat's ``elo_analysis``, the public
  notebook; the published tables' "anony" column), the others only enter its
  "full" column.  Every battle is imported by default, with a note counting
  those the arena leaves out; ``--anony-only`` and ``--sampled-only``
  dead-letter them (``not_anonymous``, ``not_sampled``; a null value too, as
  the arena's code reads it) so that the board is the one the arena publishes
  (:class:`ArenaFilter`).  On GenAI-Arena's file
  (546 of 2,061 battles not anonymous) the naive ratings of its 6 generation
  models differ from the published anony column by up to 18.3 points with every
  battle, 0.18 with ``--anony-only`` (the rest is the arena's L2 penalty).
* Everything else (``turn`` ...) is not part of a battle and is dropped; a row
  that is dead-lettered keeps all of it as text.

Self-battles (a model against itself, present in both public samples) are
converted like any other battle: the ingest's rules keep them.  A file without
``tstamp`` (no column, or null on every row) is undated and gets the default day,
also when read with dated files; a null stamp among a file's dated battles rejects its row.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl
from biasboard.importers.arena_categories import arena_category
from biasboard.importers.common import (
    REASON,
    SOURCE_FILE,
    ImportOptions,
    ImportResult,
    as_text,
    finalize_battles,
    fixed_day,
    fixed_epoch_seconds,
    json_truth,
    judge_expr,
    nested_field,
    non_text_slice_notes,
    read_all,
    text_slice_labels,
)
from biasboard.importers.style_counts import meta_field, style_counts
from biasboard.schemas.errors import InputError
from biasboard.schemas.rules import TS_MAX, TS_MIN

PATTERNS = ("*.json", "*.json.gz", "*.jsonl", "*.jsonl.gz")
TOKEN_FIELDS = ("sum_assistant_a_tokens", "sum_assistant_b_tokens")
#: Fields read as single values (a list or object there dead-letters the row as ``bad_type:<field>``).
#: The columns a clean_battle file cannot do without.
REQUIRED = ("model_a", "model_b", "winner")
SCALAR = ("question_id", *REQUIRED, "tstamp", "ts", "judge", "anony")
#: A battle whose models the voter could see (``anony`` false or null), dead-lettered by ``--anony-only``.
REASON_NOT_ANONYMOUS = "not_anonymous"
#: A battle the arena's prompt de-duplication did not sample (``dedup_tag.sampled`` false), by ``--sampled-only``.
REASON_NOT_SAMPLED = "not_sampled"


def _token_lengths(frame: pl.DataFrame, notes: list[str]) -> tuple[pl.Expr, pl.Expr]:
    """The answers' token counts, noted as the import's length unit (the note a refresh compares across imports)."""
    lengths = [found[0] for name in TOKEN_FIELDS if (found := meta_field(frame, name)) is not None]
    if len(lengths) == len(TOKEN_FIELDS):
        notes.append(f"lengths: tokens ({', '.join(TOKEN_FIELDS)})")
        return lengths[0], lengths[1]
    return pl.lit(None, dtype=pl.Int64), pl.lit(None, dtype=pl.Int64)


def _slice_labels(raw: pl.DataFrame, notes: list[str]) -> list[pl.Expr]:
    """The slice label columns: text ``language``/``category`` as given, else the arena's categories."""
    labels = text_slice_labels(raw)
    notes.extend(non_text_slice_notes(raw, ["language"]))
    category, boards = (None, ()) if raw.schema.get("category") == pl.String else arena_category(raw)
    if category is not None:
        labels.append(category.alias("category"))
        notes.append(f"category: the arena's category boards from its tags ({', '.join(boards)})")
    else:  # (text categories: the rows that held a list instead, if any)
        notes.extend(non_text_slice_notes(raw, ["category"]))
    return labels


@dataclass(frozen=True)
class ArenaFilter:
    """One of the arena's own filters before its leaderboard's fit, and the import flag that applies it.

    Why: the arena fits its published board on anonymous battles (``anony``) whose prompt survived its
    de-duplication of the top 0.1% most repeated prompts (``dedup_tag.sampled``; the public notebook keeps a
    battle only when it is true).  A board of every battle is not the arena's, so each filter is counted in a
    note when the file carries its field, and applied (the others dead-lettered with ``reason``) with ``flag``.
    """

    flag: str
    option: str
    reason: str
    field: tuple[str, ...]
    what: str

    def kept(self, raw: pl.DataFrame) -> pl.Expr | None:
        """True for a battle the arena keeps (null or absent counts as not kept, as the arena's code reads it).

        A flag written as a number is true when not 0, as Python's truth test in the arena's code reads it.  Why: a
        ``sampled`` of 1 (a log whose JSON types vary, or a database export's 0/1) made the reader type the whole
        field as integers, ``true`` included, and every battle was dead-lettered as not sampled; an ``anony`` of 1
        beside ``true`` ones was left out as "not anonymous (anony false)".
        """
        found = nested_field(raw, *self.field)
        if found is None:
            return None
        return json_truth(found[0])

    def reason_expr(self, raw: pl.DataFrame, options: ImportOptions, notes: list[str]) -> pl.Expr:
        """The dead-letter reason of a battle this filter leaves out (null when kept), and a note of the count."""
        applied = getattr(options, self.option)
        kept = self.kept(raw)
        if kept is None:
            if applied:
                raise InputError(f"{self.flag}: the file has no {'.'.join(self.field)} field, so nothing to filter on")
            return pl.lit(None, dtype=pl.String)
        left = raw.select((~kept).sum()).item()
        if left and applied:
            notes.append(f"{self.flag}: {left} of {raw.height} battles {self.what} left out")
        elif left:
            notes.append(
                f"{left} of {raw.height} battles {self.what}: the arena's leaderboard leaves them out; "
                f"{self.flag} does too"
            )
        return pl.when(kept | (not applied)).then(None).otherwise(pl.lit(self.reason))


#: The arena's filters, in the order a battle's reason is given.
ARENA_FILTERS = (
    ArenaFilter("--anony-only", "anony_only", REASON_NOT_ANONYMOUS, ("anony",), "are not anonymous (anony false)"),
    ArenaFilter(
        "--sampled-only",
        "sampled_only",
        REASON_NOT_SAMPLED,
        ("dedup_tag", "sampled"),
        "are not sampled by the arena's de-duplication (dedup_tag.sampled false)",
    ),
)


def _arena_filters(raw: pl.DataFrame, options: ImportOptions, notes: list[str]) -> pl.Expr:
    """The first arena filter that leaves a battle out, as its dead-letter reason; null when every one keeps it."""
    return pl.coalesce(f.reason_expr(raw, options, notes) for f in ARENA_FILTERS)


def _stamp_text(stamp: pl.Expr) -> pl.Expr:
    """A text ``tstamp`` (the field's JSON type varies, so every value arrives as text) for the ingest's rules: epoch
    seconds in the datable range as ISO text to the microsecond (what the rules make of the number), anything else
    as written — an ISO date is then read as one (as refresh reads ``ts``), other text is ``bad_timestamp``.
    Why: every non-number was NaN, so an ISO ``tstamp`` was rejected here and accepted by refresh."""
    seconds = stamp.str.strip_chars().cast(pl.Float64, strict=False)
    datable = seconds.is_between(TS_MIN.timestamp(), TS_MAX.timestamp(), closed="left")
    micros = (seconds * 1e6).round().cast(pl.Int64)
    iso = pl.from_epoch(micros, time_unit="us").dt.strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
    return pl.when(datable).then(iso).otherwise(stamp)


def _undated_file(time_column: str | None) -> pl.Expr:
    """Whether a battle's file has no time stamp at all: no time column, or one null on every row of that file.

    Why per file: files read together share one set of columns, so a file without ``tstamp`` imported with one that
    has it had every battle dead-lettered ``missing:ts`` (their ids, made from the stamp, colliding too), where alone
    it gets the default day.  A null stamp in a file that dates its other battles stays an error of that row.
    """
    if time_column is None:
        return pl.repeat(True, pl.len())  # (a column, not a literal: its sum counts the rows)
    return pl.col(time_column).is_null().all().over(SOURCE_FILE)


def _default_stamp(dtype: pl.DataType, options: ImportOptions) -> pl.Expr:
    """The default day in the time column's own kind (epoch seconds, ISO text or a datetime), for undated files."""
    if dtype == pl.String:
        return pl.lit(f"{options.default_date.isoformat()}T00:00:00Z")
    if dtype.is_numeric():
        return pl.lit(fixed_epoch_seconds(options))
    if isinstance(dtype, pl.Datetime) and dtype.time_zone is None:
        return pl.lit(dt.datetime.combine(options.default_date, dt.time()), dtype=dtype)
    return fixed_day(options)


def _row_key() -> pl.Expr:
    """``row<N>``, the row's position in the input (files in the order read): the id's part that tells battles
    apart when the log has no time stamp.  Why: the composite id without it is the same for every vote of one voter
    on one ordered pair, so different votes were dead-lettered as ``duplicate_battle_id`` (33 of 124 battles of
    MTEB-Arena's clustering file with its ``tstamp`` removed, 23 of them with another winner)."""
    return pl.concat_str([pl.lit("row"), pl.int_range(pl.len()).cast(pl.String)])


def convert(paths: Sequence[Path], options: ImportOptions) -> ImportResult:
    raw = read_all(paths, scalar=SCALAR, required=REQUIRED, what="FastChat battle")
    judge, renamed = judge_expr(raw, options, paths)
    notes: list[str] = [renamed] if renamed else []
    time_column = next((c for c in ("tstamp", "ts") if c in raw.columns), None)
    undated = _undated_file(time_column)
    if time_column is None:
        ts = fixed_day(options)
        notes.append(f"no tstamp column: every battle dated {options.default_date.isoformat()} 00:00 UTC")
    else:
        stamp = pl.col(time_column)
        if time_column == "tstamp" and raw.schema["tstamp"] == pl.String:
            stamp = _stamp_text(stamp)
        ts = pl.when(undated).then(_default_stamp(raw.schema[time_column], options)).otherwise(stamp)
        if files := raw.filter(undated)[SOURCE_FILE].unique().len():
            notes.append(
                f"{files} file(s) without {time_column}: their {raw.select(undated.sum()).item()} battles dated "
                f"{options.default_date.isoformat()} 00:00 UTC"
            )
    composite = pl.concat_str(
        [
            pl.lit("fastchat"),
            judge.fill_null(""),
            pl.when(undated).then(_row_key()).otherwise(as_text(raw, time_column)) if time_column else _row_key(),
            pl.col("model_a").cast(pl.String).fill_null(""),
            pl.col("model_b").cast(pl.String).fill_null(""),
        ],
        separator=":",
    )
    battle_id = (
        pl.coalesce(pl.col("question_id").cast(pl.String), composite) if "question_id" in raw.columns else composite
    )
    if time_column is None or raw.select(undated.any()).item():
        no_id = undated if "question_id" not in raw.columns else undated & pl.col("question_id").is_null()
        by_row = raw.select(no_id.sum()).item()
        if by_row:
            notes.append(
                f"{by_row} battle(s) have neither question_id nor tstamp: each is its own battle, its id made from its "
                "row in the input (fastchat:<judge>:row<N>:<model_a>:<model_b>), so a battle listed twice counts twice"
            )
    len_a, len_b = _token_lengths(raw, notes)
    labels = _slice_labels(raw, notes)
    mapped = raw.select(
        battle_id.alias("battle_id"),
        ts.alias("ts"),
        judge.alias("judge"),
        pl.col("model_a").cast(pl.String),
        pl.col("model_b").cast(pl.String),
        pl.col("winner").cast(pl.String),
        pl.lit(None, dtype=pl.String).alias("prompt_id"),
        len_a.alias("len_a"),
        len_b.alias("len_b"),
        *style_counts(raw, notes),  # header/list/bold counts (conv_metadata), when the log has them
        *labels,
        _arena_filters(raw, options, notes).alias(REASON),
    )
    return finalize_battles(raw, mapped, sources=paths, source_rows=raw.height, notes=notes)
