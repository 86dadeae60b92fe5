"""The dead-letter contract: a rejected row, its original fields as text, and why.

Original values are kept as strings because a bad row is often bad precisely in
its type (an unparseable timestamp, a length that is not a number).  Judge and model names too are kept as
written, not as cleaned for the rules (trimmed, in NFC, renamed: :func:`biasboard.schemas.names.as_written`), so a
search of the source for a dead letter's names finds its row.
"""

from __future__ import annotations

import pyarrow as pa

#: Every reason a row can be rejected for.  ``missing:<column>`` is spelled per column.
REASON_MISSING_PREFIX = "missing:"
REASON_BAD_WINNER = "bad_winner"
REASON_NEGATIVE_LENGTH = "negative_length"
REASON_ABSURD_LENGTH = "absurd_length"
REASON_BAD_TIMESTAMP = "bad_timestamp"
REASON_DUPLICATE_ID = "duplicate_battle_id"
REASON_BAD_SCORE = "bad_score"

#: Lengths above this (tokens or characters) are rejected as absurd.
MAX_RESPONSE_LENGTH = 10_000_000

DEAD_LETTER_META = (
    pa.field("reason", pa.string(), nullable=False),
    pa.field("source_file", pa.string(), nullable=False),
    pa.field("source_row", pa.int64(), nullable=False),
)


def dead_letter_schema(original: pa.Schema) -> pa.Schema:
    """Schema of dead letters for rows of ``original``: every field as string, then the reason."""
    fields = [pa.field(f.name, pa.string()) for f in original if f.name not in {m.name for m in DEAD_LETTER_META}]
    return pa.schema([*fields, *DEAD_LETTER_META])
