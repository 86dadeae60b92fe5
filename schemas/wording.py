"""How a message names a few of many items: the first ones, then how many more."""

from __future__ import annotations

from collections.abc import Sequence


def first_few(items: Sequence[str], most: int) -> str:
    """``"a, b, c and 7 more"``: the first ``most`` of ``items``, then the count of the rest (none: the list alone)."""
    rest = len(items) - most
    return ", ".join(items[:most]) + (f" and {rest:,} more" if rest > 0 else "")
