"""A 64-bit hash of strings that is the same on every machine and with every library version.

Why not polars' ``Series.hash``: polars keeps it stable within a version only, and the hashes of a day's battle ids
are kept in the state for years (:mod:`~biasboard.transforms.repeated_ids`): a polars upgrade silently made every
day stored before it unmatchable with the days after, so a battle counted again on a later day was no longer found.
This hash is defined here, byte for byte, so a stored hash means the same thing as long as this definition does.

The definition (unsigned 64-bit arithmetic, wrapping; ``mix`` is SplitMix64's finaliser: ``z ^= z >> 30;
z *= 0xBF58476D1CE4E5B9; z ^= z >> 27; z *= 0x94D049BB133111EB; z ^= z >> 31``), for a string of UTF-8 bytes
b of length L and a seed s::

    h = mix(s ^ (L * 0x9E3779B97F4A7C15))
    for k in 0 … ceil(L / 8) − 1:  h = mix(h ^ w_k)     # w_k: b[8k : 8k + 8] read little-endian, zero-padded
    # a null: mix(s ^ NULL_TAG)

The seed may differ row by row (an array): a pair of columns (a, b) hashes as ``string_hash(b, string_hash(a, s))``
(:func:`pair_hash`), the chain of the two strings, for keys of two columns (the audit's (judge, prompt) sketch).

Each step is a bijection of h for a fixed word, so two strings of the same length that differ in one word always
differ; otherwise a pair collides with probability ~2⁻⁶⁴ (the finaliser passes BigCrush as a generator's output).
Not a cryptographic hash: ids chosen to collide could.  Vectorised over an Arrow string buffer: one pass of a
few numpy operations per 8 bytes of the longest string, a cache-sized block of rows at a time, no loop per row
(1M ids of 19 bytes: 12–13 ms, of varied lengths 16 ms; polars' own hash 3–6 ms: ``bench/repeated_ids.py``
prints both).
"""

from __future__ import annotations

from typing import TypeAlias

import numpy as np
import polars as pl
import pyarrow as pa

_U64 = np.uint64
_GOLDEN = _U64(0x9E3779B97F4A7C15)
_MUL1, _MUL2 = _U64(0xBF58476D1CE4E5B9), _U64(0x94D049BB133111EB)
_SHIFTS = (_U64(30), _U64(27), _U64(31))
#: What a null's hash starts from in place of its length term ``L * 0x9E37…``: the only length that gives it is
#: 1,018,231,460,777,725,123 bytes, so no string's hash starts where a null's does.
NULL_TAG = 0xFFFFFFFFFFFFFFFF
#: The masks that keep the first r bytes of a little-endian word, r = 0 … 8.
_KEEP = np.array([(1 << (8 * r)) - 1 for r in range(9)], dtype=_U64)


def _mix(z: np.ndarray, scratch: np.ndarray) -> None:
    """SplitMix64's finaliser, in place (``scratch``: an array of z's shape)."""
    np.right_shift(z, _SHIFTS[0], out=scratch)
    z ^= scratch
    z *= _MUL1
    np.right_shift(z, _SHIFTS[1], out=scratch)
    z ^= scratch
    z *= _MUL2
    np.right_shift(z, _SHIFTS[2], out=scratch)
    z ^= scratch


Seed: TypeAlias = int | np.ndarray
Strings: TypeAlias = pl.Series | pa.Array | pa.ChunkedArray


def string_hash(values: Strings, seed: Seed) -> np.ndarray:
    """The hash (module docstring) of each value of a string column, as a uint64 array of its length; ``seed`` one
    for every value or one per value (uint64)."""
    if isinstance(values, pl.Series):
        values = values.cast(pl.String).to_arrow()
    chunks = values.chunks if isinstance(values, pa.ChunkedArray) else [values]
    ends = np.cumsum([len(c) for c in chunks])
    parts = [
        _hash_array(chunk, seed if isinstance(seed, int) else seed[end - len(chunk) : end])
        for chunk, end in zip(chunks, ends.tolist(), strict=True)
    ]
    return np.concatenate(parts) if len(parts) != 1 else parts[0]


def pair_hash(first: Strings, second: Strings, seed: int) -> np.ndarray:
    """The hash of each row's pair of strings (``second``'s hash seeded by ``first``'s)."""
    return string_hash(second, string_hash(first, seed))


#: Rows hashed at a time: h, a word and the scratch of 2¹⁵ rows are 768 KB, inside a core's L2 cache (the whole
#: column's arrays, streamed through memory for each of the ~10 passes a word takes, were ~1.6x slower).
_BLOCK = 1 << 15


def _chain(h: np.ndarray, words: np.ndarray, starts: np.ndarray, length: np.ndarray, scratch: np.ndarray) -> None:
    """The definition's steps for a block of rows, in place on ``h`` (their start states): mix the start, then
    each 8-byte word (``words``: a little-endian word at every byte; ``starts``: each row's first byte), gathered."""
    _mix(h, scratch)
    longest = int(length.max()) if length.size else 0
    for k in range((longest + 7) // 8):
        # Past a value's end: a word read (at most the buffer's last), masked to 0, and not mixed.
        rem = length - 8 * k
        w = words[np.minimum(starts + 8 * k, words.size - 1)]
        w &= _KEEP[np.clip(rem, 0, 8)]
        stepped = h ^ w
        _mix(stepped, scratch)
        np.copyto(h, stepped, where=rem > 0)


def _chain_strided(h: np.ndarray, words: np.ndarray, start: int, width: int, scratch: np.ndarray) -> None:
    """:func:`_chain` for a block of values all ``width`` bytes long and back to back from byte ``start``: word k
    of value i is at ``start + i·width + 8k``, a strided read (no index array made or gathered through)."""
    _mix(h, scratch)
    for k in range((width + 7) // 8):
        w = np.array(np.lib.stride_tricks.as_strided(words[start + 8 * k :], (h.size,), (width,)))
        if width - 8 * k < 8:
            w &= _KEEP[width - 8 * k]
        h ^= w
        _mix(h, scratch)


def _hash_array(array: pa.Array, seed: Seed) -> np.ndarray:
    """:func:`string_hash` of one Arrow array (any string type: read as large_string's offsets and bytes)."""
    if array.type != pa.large_string():
        array = array.cast(pa.large_string())
    n = len(array)
    offsets_buf, data_buf = array.buffers()[1:3]
    offsets = np.frombuffer(offsets_buf, np.int64, n + 1, array.offset * 8) if n else np.zeros(1, np.int64)
    lo, hi = int(offsets[0]), int(offsets[-1])
    # The bytes with 8 zero bytes after them, read as a little-endian word at any byte: the last word of a string
    # at the end of the buffer reads past it into the padding (masked off below), never outside the array.
    padded = np.zeros(hi - lo + 8, np.uint8)
    if hi > lo:
        padded[: hi - lo] = np.frombuffer(data_buf, np.uint8, hi - lo, lo)
    words = np.ndarray((hi - lo + 1,), "<u8", padded, strides=(1,))
    held = np.diff(offsets)  # the bytes each slot holds (a null's may hold some)
    valid = np.ones(n, bool) if array.null_count == 0 else array.is_valid().to_numpy(zero_copy_only=False)
    length = np.where(valid, held, 0)
    h = length.astype(_U64)
    h *= _GOLDEN
    h[~valid] = _U64(NULL_TAG)
    h ^= _U64(seed) if isinstance(seed, int) else np.asarray(seed, _U64)
    starts = offsets[:-1] - lo
    filled = _one_length_rows(held, starts)
    if filled is None:  # lengths vary: each word gathered
        _blocks(h, words, starts, length)
    elif len(filled) == n and not array.null_count:  # every value as long (an id format): words read with a stride
        _strided_blocks(h, words, int(starts[0]) if n else 0, int(held[0]) if n else 0)
    else:  # one length besides empty values and nulls (a dirty batch's blank ids): the rest strided
        width = int(held[filled[0]]) if filled.size else 0
        # With one seed every slot holding bytes starts alike (a null's too: it is overwritten below): no gather of
        # h, the starts or the lengths at the ~500k filled rows of a dirty day (3 passes: 33-37 -> 25-29 ms a day).
        if isinstance(seed, int):
            part = np.full(filled.size, (width * int(_GOLDEN) & NULL_TAG) ^ seed, _U64)  # NULL_TAG: 2⁶⁴ − 1
        else:
            part = h[filled]
        _strided_blocks(part, words, int(starts[filled[0]]) if filled.size else 0, width)
        empty = length == 0
        blank = h[empty]
        _blocks(blank, words, starts[empty], length[empty])  # no word read: the start state mixed
        h[filled] = part
        h[empty] = blank  # last: a null whose slot holds bytes was strided over with the rest, and hashes as a null
    return h


def _one_length_rows(held: np.ndarray, starts: np.ndarray) -> np.ndarray | None:
    """The slots holding bytes (``held``: bytes per slot), when they all hold one length and lie back to back in
    the buffer; else None.

    Why: the strided read (:func:`_chain`) needs value i at ``start_0 + i·L``.  A dirty batch's ids are one format
    but for a few empty ones and nulls (0.1% of a 1%-bad day; polars' nulls may keep a value's bytes), which used
    to send every row to the gathered path (~3x slower: 28–35 against 10–11 ms for 505k ids).  An empty value or a
    null hashes without reading a word, so only the slots holding bytes need be evenly spaced.  Offsets never
    decrease, so with every such slot L bytes long they lie back to back exactly when the first and last are
    ``L·(k − 1)`` bytes apart.
    """
    filled = np.flatnonzero(held)
    if not filled.size:  # every value empty or null: no word to read
        return filled
    width = int(held[filled[0]])
    if np.count_nonzero(held == width) != filled.size:  # some slot of another length
        return None
    return filled if int(starts[filled[-1]] - starts[filled[0]]) == width * (filled.size - 1) else None


def _blocks(h: np.ndarray, words: np.ndarray, starts: np.ndarray, length: np.ndarray) -> None:
    """:func:`_chain` over ``h`` in place, a block of rows at a time: its few arrays stay in the CPU's cache."""
    scratch = np.empty(min(h.size, _BLOCK), _U64)
    for first in range(0, h.size, _BLOCK):
        last = min(h.size, first + _BLOCK)
        _chain(h[first:last], words, starts[first:last], length[first:last], scratch[: last - first])


def _strided_blocks(h: np.ndarray, words: np.ndarray, start: int, width: int) -> None:
    """:func:`_chain_strided` over ``h`` in place (values of ``width`` bytes back to back from byte ``start``), a
    block of rows at a time."""
    scratch = np.empty(min(h.size, _BLOCK), _U64)
    for first in range(0, h.size, _BLOCK):
        last = min(h.size, first + _BLOCK)
        _chain_strided(h[first:last], words, start + first * width, width, scratch[: last - first])
