"""The battle-id hash a day stores is the one its definition states, for every way a column can arrive.

A day's ids are stored as these hashes for years and compared with the hashes of days aggregated later, by later
versions of every library: the vectorised hash is checked against a plain-Python rendering of the definition in
:mod:`biasboard.schemas.string_hash`, and a few values are pinned, so a change to it fails here rather than making
every stored day silently unmatchable.
"""

from __future__ import annotations

import random

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
from biasboard.schemas.string_hash import NULL_TAG, pair_hash, string_hash
from biasboard.transforms.validate import first_hash

MASK = (1 << 64) - 1
SEED = 0x9E3779B97F4A7C15


def _mix(z: int) -> int:
    z ^= z >> 30
    z = (z * 0xBF58476D1CE4E5B9) & MASK
    z ^= z >> 27
    z = (z * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def _definition(value: str | None, seed: int) -> int:
    """The module docstring's definition, one byte string at a time."""
    if value is None:
        return _mix(seed ^ NULL_TAG)
    data = value.encode()
    h = _mix(seed ^ ((len(data) * 0x9E3779B97F4A7C15) & MASK))
    for k in range(0, len(data), 8):
        h = _mix(h ^ int.from_bytes(data[k : k + 8].ljust(8, b"\0"), "little"))
    return h


def _values(n: int, seed: int) -> list[str | None]:
    rng = random.Random(seed)
    alphabet = "ab-_0123456789é✓"
    return [
        None if rng.random() < 0.05 else "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 41)))
        for _ in range(n)
    ]


@pytest.mark.parametrize("seed", [0, SEED, MASK])
def test_the_vectorised_hash_is_the_definition(seed: int) -> None:
    values = _values(2000, seed=1)
    expected = [_definition(v, seed) for v in values]
    assert string_hash(pa.array(values), seed).tolist() == expected
    assert string_hash(pa.array(values, pa.large_string()), seed).tolist() == expected
    assert string_hash(pa.array(values).cast(pa.string_view()), seed).tolist() == expected
    assert string_hash(pl.Series(values), seed).tolist() == expected
    assert string_hash(pa.array(values)[37:1501], seed).tolist() == expected[37:1501]  # a slice: offsets not at 0
    chunked = pa.chunked_array([values[:10], values[10:10], values[10:]], pa.string())
    assert string_hash(chunked, seed).tolist() == expected


def test_a_pair_of_columns_hashes_as_the_chain_of_its_strings() -> None:
    """The audit's (judge, prompt) keys: the second string's hash seeded by the first's, row by row (chunked too)."""
    judges, prompts = _values(500, seed=2), _values(500, seed=3)
    expected = [_definition(p, _definition(j, SEED)) for j, p in zip(judges, prompts, strict=True)]
    assert pair_hash(pl.Series(judges), pl.Series(prompts), SEED).tolist() == expected
    chunked = pa.chunked_array([prompts[:123], prompts[123:]], pa.string())
    assert pair_hash(pa.array(judges), chunked, SEED).tolist() == expected
    swapped = pair_hash(pl.Series(prompts), pl.Series(judges), SEED)
    assert not np.array_equal(swapped, np.array(expected, np.uint64))  # ordered: (a, b) is not (b, a)


def test_values_of_one_length_take_the_strided_path_to_the_same_hashes() -> None:
    """Every value as long (an id format): the words are read with a stride, not gathered; the same hashes as
    among values of other lengths, at every length around a word's edge."""
    for length in (0, 1, 7, 8, 9, 16, 36):
        ids = [f"{i:0{length}d}"[-length:] if length else "" for i in range(300)]
        alone = string_hash(pa.array(ids), SEED)
        mixed = string_hash(pa.array([*ids, "x" * (length + 3)]), SEED)[:-1]
        assert np.array_equal(alone, mixed), length
        assert alone.tolist() == [_definition(v, SEED) for v in ids]


def test_ids_of_one_length_beside_blanks_and_nulls_are_read_with_a_stride(monkeypatch) -> None:
    """A dirty batch's ids: one format but for a few empty ones and nulls.  The rest keep the strided read (no word
    gathered; it once gathered every row's words, ~3x slower) and every hash is the definition's.  A null whose slot
    holds bytes hashes as a null: strided over when they are as many as the others', else (the values not evenly
    spaced) read by the gathered path."""
    from biasboard.schemas import string_hash as module

    chained = []  # (strided, longest value) per block hashed
    chain, strided_chain = module._chain, module._chain_strided

    def spy(h, words, starts, length, scratch):
        chained.append((False, int(length.max()) if length.size else 0))
        return chain(h, words, starts, length, scratch)

    def strided_spy(h, words, start, width, scratch):
        chained.append((True, width))
        return strided_chain(h, words, start, width, scratch)

    monkeypatch.setattr(module, "_chain", spy)
    monkeypatch.setattr(module, "_chain_strided", strided_spy)
    monkeypatch.setattr(module, "_BLOCK", 64)
    ids: list[str | None] = [f"b20240101-{i:09d}" for i in range(300)]
    for i in range(0, 300, 37):
        ids[i] = None if i % 2 else ""
    assert string_hash(pa.array(ids), SEED).tolist() == [_definition(v, SEED) for v in ids]
    assert chained and all(by_stride or longest == 0 for by_stride, longest in chained)  # no word gathered
    assert string_hash(pa.array(ids)[5:], SEED).tolist() == [_definition(v, SEED) for v in ids[5:]]
    for junk, strided in (("junk", False), ("12345678", True)):  # a null's slot holding 4 bytes, then 8
        data = pa.array(["x" * 8, junk, "y" * 8]).buffers()[2]
        offsets = pa.py_buffer(np.array([0, 8, 8 + len(junk), 16 + len(junk)], np.int32).tobytes())
        validity = pa.py_buffer(np.packbits([1, 0, 1], bitorder="little").tobytes())
        gap = pa.Array.from_buffers(pa.string(), 3, [validity, offsets, data], null_count=1)
        chained.clear()
        assert string_hash(gap, SEED).tolist() == [_definition(v, SEED) for v in ["x" * 8, None, "y" * 8]]
        assert all(by_stride or longest == 0 for by_stride, longest in chained) == strided, junk


def test_rows_hashed_a_block_at_a_time_hash_as_one(monkeypatch) -> None:
    """Blocks of rows (the cache-sized pieces the hash works in) of 7 rows: the same hashes, strided and not."""
    from biasboard.schemas import string_hash as module

    monkeypatch.setattr(module, "_BLOCK", 7)
    values = _values(500, seed=4)
    assert string_hash(pa.array(values), SEED).tolist() == [_definition(v, SEED) for v in values]
    ids = [f"battle-{i:05d}" for i in range(500)]
    assert string_hash(pa.array(ids)[3:], SEED).tolist() == [_definition(v, SEED) for v in ids[3:]]


def test_pinned_values() -> None:
    """The hashes of a few ids, as stored by every day aggregated since the definition was fixed."""
    values = ["", "a", "battle-0001", "é✓ unicode id 12345678", None]
    assert [hex(h) for h in string_hash(pa.array(values), SEED).tolist()] == [
        "0xe220a8397b1dcdaf",
        "0xaeff7d4b5b72ec99",
        "0x45c4bc62271516e8",
        "0x961f0a0d971c8d63",
        "0xde0a564cbcd060c4",
    ]


def test_a_day_stores_this_hash_of_its_ids() -> None:
    ids = pl.Series(["x1", "x2", "a-much-longer-battle-identifier"])
    assert np.array_equal(first_hash(ids), string_hash(ids, SEED))


def test_distinct_ids_get_distinct_hashes() -> None:
    """A million sequential ids (the likeliest to collide in a weak hash): no two alike."""
    ids = pa.array([f"battle-{i:08d}" for i in range(1_000_000)])
    assert np.unique(string_hash(ids, SEED)).size == 1_000_000
    assert string_hash(pa.array([], pa.string()), SEED).size == 0
