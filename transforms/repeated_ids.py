"""Battle ids counted on more than one day: found and said, never counted twice without a word.

Within a day a repeated ``battle_id`` is dead-lettered (:class:`~biasboard.transforms.validate.SeenIds`) and a
whole file stored under two days is refused (:func:`~biasboard.transforms.read.check_copies`), but a row that
comes back on another day — an export that re-emits yesterday's rows in today's file, a backfill folder and a
live folder that overlap — was counted on both days without a sound.

Each day's aggregation stores the sorted 64-bit hashes of the battle ids it counted (:data:`IDS_FILE`, 8 bytes
a battle, beside its cells).  :func:`repeated_ids` counts, for every day, its counted rows whose id was counted
on an earlier day, and the summary sums them (``counts.repeated_ids``) and names the days in a warning.

The copies stay counted: dropping them would make a day's cells depend on every earlier day, so a late or
corrected earlier day would change later days' cells (and a backfill could no longer aggregate days
independently).  The warning says which days to clean upstream.

Incremental like the cells: the counts are kept in the state (:data:`CACHE_FILE`) with the days' ids-file
digests; a refresh recounts only the days from the first one that is new, changed or gone, each against the
days before it.  A few recounted days (a daily refresh: the new day) are held and every earlier day's hashes
read once against them, one day at a time; a long recount (a backfilled history) cuts every day's hashes by
hash range into scratch files and counts a range at a time (:func:`_count_by_hash_range`): each day is read
once and memory is one range, where counting it a block of days at a time read the days before every block
again (time grew with the square of the history).  Days aggregated before ids were kept, or hashed otherwise (before
:func:`~biasboard.schemas.string_hash.string_hash`, with polars' hash, which is stable within a polars version
only), are not checked, and a warning names them with the backfill that re-aggregates them.  Hashes, not ids: two
different ids collide with probability ~2⁻⁶⁴ a pair (about 10⁻⁷ for a new day of 10⁵ ids against 10⁸).  The
warning quotes a few of the repeated ids (:data:`EXAMPLES` a named day): the counts keep their hashes (the
smallest), and the ids are found again by reading the id column of that day's input, when it is still there.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np
import polars as pl
import pyarrow as pa
from biasboard.ranking.allocator import release_freed_memory
from biasboard.ranking.spill import scratch_folder
from biasboard.schemas import rules
from biasboard.schemas import summary as S
from biasboard.schemas.errors import InputError
from biasboard.transforms import read, state, storage
from biasboard.transforms.validate import ID_HASH_SCHEME, first_hash

_LOG = logging.getLogger(__name__)

#: A day's counted battle ids as sorted 64-bit hashes (one column, ``h1``), stored beside its cells.
IDS_FILE = state.BATTLE_IDS_FILE
#: The per-day counts of the last check, and the ids-file digests they were made from.
CACHE_FILE = "repeated_ids.json"
CACHE_VERSION = 2  # 2: each day's example hashes
#: The hash an ids file holds, in its schema metadata: files of another scheme are not compared.
SCHEME_KEY = b"biasboard.ids_hash"
#: Recounted ids held at once against the days before them (:func:`_count`); a recount of more is counted by
#: hash range (:func:`_count_by_hash_range`).
BLOCK_IDS = 1 << 21
#: Ids (of every day) per hash range of :func:`_count_by_hash_range`: its memory (~50 bytes an id: ~50 MB).
RANGE_IDS = 1 << 20
#: Days a warning names (the ones with the most repeats), then a count of the rest.
DAYS_NAMED = 3
#: Repeated battle ids a warning quotes per named day (read back from the day's input: the state keeps hashes).
EXAMPLES = 3


def ids_table(hashes: np.ndarray, scheme: str = ID_HASH_SCHEME) -> pa.Table:
    """A day's :data:`IDS_FILE`: the hashes of the ids it counted, sorted, with their scheme in the metadata."""
    column = pa.array(np.sort(np.asarray(hashes, np.uint64)), pa.uint64())
    return pa.table({"h1": column}).replace_schema_metadata({SCHEME_KEY: scheme.encode()})


@dataclass(frozen=True)
class DayRepeats:
    """One day's counted rows whose id an earlier day counted, (the first few of) those earlier days, the hashes
    of a few of those ids (the smallest), and those ids when the warning names the day and its input is readable."""

    rows: int
    earlier: tuple[str, ...] = ()
    example_hashes: tuple[int, ...] = ()
    examples: tuple[str, ...] = ()

    def said(self) -> str:
        """What the warning says of the day: the earlier days, and the ids it quotes."""
        text = f"first counted on {', '.join(self.earlier)}"
        if self.examples:
            more = ", …" if self.rows > len(self.examples) else ""
            text += f"; battle_id {', '.join(self.examples)}{more}"
        return text


@dataclass(frozen=True)
class RepeatedIds:
    """The check over every stored day: each day's repeats, and the days that could not be checked."""

    days: dict[str, DayRepeats] = field(default_factory=dict)
    unchecked: tuple[str, ...] = ()

    @property
    def total(self) -> int:
        return sum(r.rows for r in self.days.values())

    def warnings(self) -> list[str]:
        """One line naming the days with the most repeats (none when there are none), and one naming the days that
        could not be checked (when there is another day to check them against)."""
        return self._repeat_warnings() + self._unchecked_warnings()

    def info(self) -> S.RepeatedIdsInfo | None:
        """``summary.repeated_ids``: the days with repeats (the most first) and the unchecked days; None without
        either."""
        if not self.total and not self.unchecked:
            return None
        days = [
            S.RepeatedDay(day, self.days[day].rows, list(self.days[day].earlier), list(self.days[day].examples))
            for day in _busiest(self.days)
        ]
        return S.RepeatedIdsInfo(days, list(self.unchecked))

    def _repeat_warnings(self) -> list[str]:
        if not self.total:
            return []
        busiest = _busiest(self.days)
        named = [
            f"day={day}: {self.days[day].rows:,} ({self.days[day].said()})" for day in sorted(busiest[:DAYS_NAMED])
        ]
        more = busiest[DAYS_NAMED:]
        rest = f"; {sum(self.days[d].rows for d in more):,} more on {len(more)} other day(s)" if more else ""
        return [
            f"{self.total:,} counted rows repeat a battle_id an earlier day counted, so those battles are counted "
            f"twice: {'; '.join(named)}{rest}. Remove the repeated rows from the later day's input (same battle_id "
            "on two days) and refresh"
        ]

    def _unchecked_warnings(self) -> list[str]:
        if not self.unchecked or len(self.days) + len(self.unchecked) < 2:
            return []
        first, last = self.unchecked[0], self.unchecked[-1]
        which = f"day={first}" if first == last else f"days {first} … {last}"
        return [
            f"battle ids not checked for repeats across days on {len(self.unchecked):,} stored day(s) ({which}): "
            "they were aggregated before this version of biasboard kept their ids' hashes (or with the former, "
            f"polars-version-bound hash). `biasboard backfill --from {first} --to {last}` over the same input and "
            "state re-aggregates them (their cells come out the same) and the next refresh checks them"
        ]


def _busiest(days: dict[str, DayRepeats]) -> list[str]:
    """The days with repeats, the most first (ties by date)."""
    return sorted((d for d, r in days.items() if r.rows), key=lambda d: (-days[d].rows, d))


def _digest(manifest: dict) -> str | None:
    """The stored ids file's digest from the day's manifest (None: the day keeps no ids file)."""
    for path, digest in manifest.get("sha256", {}).items():
        if path.endswith("/" + IDS_FILE):
            return str(digest)
    return None


def unchecked_days(state_dir: str, manifests: dict[str, dict]) -> list[str]:
    """The stored days (``manifests``: day → its manifest) whose battle ids the check cannot compare: no ids file,
    or ids hashed otherwise (polars' hash) as the last count found that very file.

    Part of refresh's fit inputs: the backfill that mends such a day leaves its input's fingerprint as it was, so
    without this the next refresh found nothing new, kept ``LATEST`` and repeated its "not checked" warning.
    """
    foreign = {
        e.get("day"): e.get("digest")
        for e in _read_cache(storage.join(state_dir, CACHE_FILE)).get("days", [])
        if isinstance(e, dict) and e.get("foreign")
    }
    return sorted(day for day, m in manifests.items() if (d := _digest(m)) is None or foreign.get(day) == d)


def _read_ids(state_dir: str, day: str, manifest: dict) -> tuple[np.ndarray, str]:
    table = state.read_day_table(state_dir, day, manifest, IDS_FILE)
    assert table is not None  # only days whose manifest names the file are read
    scheme = (table.schema.metadata or {}).get(SCHEME_KEY, b"").decode()
    return table.column("h1").to_numpy(), scheme


def _read_cache(path: str) -> dict:
    try:
        cache = json.loads(storage.read_text(path))
    except Exception:  # none yet, or unreadable: everything is recounted (and the cache written again)
        return {}
    return cache if isinstance(cache, dict) and cache.get("version") == CACHE_VERSION else {}


def repeated_ids(state_dir: str, days: list[str], manifests: list[dict], scheme: str = ID_HASH_SCHEME) -> RepeatedIds:
    """Every stored day's counted rows whose battle id an earlier day counted (see the module docstring).

    ``days`` sorted, ``manifests`` theirs; ``scheme``: how this installation hashes ids (files hashed otherwise
    are not compared).
    """
    digests = {day: _digest(m) for day, m in zip(days, manifests, strict=True)}
    checked = [day for day in days if digests[day] is not None]
    cache_path = storage.join(state_dir, CACHE_FILE)
    cached = _read_cache(cache_path).get("days", [])
    # Counts stay valid up to the first day that is new, changed or gone (a day's count depends on the days before it).
    keep = 0
    for day, entry in zip(checked, cached, strict=False):
        if entry.get("day") != day or entry.get("digest") != digests[day] or entry.get("scheme") != scheme:
            break
        keep += 1
    entries = cached[:keep]
    if keep < len(checked):
        started = time.perf_counter()
        by_day = dict(zip(days, manifests, strict=True))
        recounted = _recount(state_dir, checked, keep, by_day, scheme)
        release_freed_memory()  # the recount's hashes: back to the system before the summary and report
        for day, (rows, earlier, examples) in recounted.items():
            foreign = rows is None
            entries.append(
                {"day": day, "digest": digests[day], "scheme": scheme, "rows": rows or 0, "earlier": earlier}
                | ({"examples": examples} if examples else {})
                | ({"foreign": True} if foreign else {})
            )
        _LOG.info(
            "repeated ids: %d day(s) recounted against the %d before them in %.2f s",
            len(checked) - keep,
            keep,
            time.perf_counter() - started,
        )
        try:
            storage.atomic_write_text(cache_path, json.dumps({"version": CACHE_VERSION, "days": entries}, indent=1))
        except Exception as err:  # the counts are right either way; the next refresh recounts
            _LOG.warning("repeated ids: could not keep the counts in %s (%s); the next run recounts", cache_path, err)
    unchecked = sorted([d for d in days if digests[d] is None] + [e["day"] for e in entries if e.get("foreign")])
    repeats = {
        e["day"]: DayRepeats(int(e["rows"]), tuple(e["earlier"]), tuple(e.get("examples", ())))
        for e in entries
        if not e.get("foreign")
    }
    by_day = dict(zip(days, manifests, strict=True))
    for day in _busiest(repeats)[:DAYS_NAMED]:  # the days the warning names
        repeats[day] = replace(repeats[day], examples=example_ids(by_day[day], repeats[day].example_hashes))
    return RepeatedIds(repeats, tuple(unchecked))


def example_ids(manifest: dict, hashes: tuple[int, ...]) -> tuple[str, ...]:
    """The battle ids with these hashes, read back from the day's input files (their id column only), sorted; none
    when the files are gone or unreadable (the warning then names the day only)."""
    if not hashes:
        return ()
    wanted = np.array(hashes, np.uint64)
    found: dict[int, str] = {}
    for entry in manifest.get("inputs", []):
        try:
            ids = _id_column(str(entry["path"]))
        except Exception as err:  # the check's counts stand without the examples
            _LOG.info("repeated ids: no example ids from %s (%s)", entry.get("path"), err)
            continue
        hashed = first_hash(ids)
        hit = np.flatnonzero(np.isin(hashed, wanted))
        for h, value in zip(hashed[hit].tolist(), ids.gather(hit).to_list(), strict=True):
            found.setdefault(h, value)
        if len(found) == len(hashes):
            break
    return tuple(sorted(found.values()))


def _id_column(path: str) -> pl.Series:
    """A battle file's ``battle_id`` column (or its FastChat alias) as text."""
    with read.open_parquet(path) as reader:
        names = reader.schema_arrow.names
        name = rules.source_column(names, "battle_id")
        if name is None:
            raise InputError(f"{path}: no battle_id column")
        column = pl.from_arrow(reader.read(columns=[name]).column(0))
    assert isinstance(column, pl.Series)
    return column.cast(pl.String)


class Recount(NamedTuple):
    """One recounted day: its repeated rows (None: hashed otherwise, not compared), the first days that counted
    them, and a few of their hashes (the smallest: the warning's examples, found again in the day's input)."""

    rows: int | None
    earlier: list[str]
    examples: list[int]


def _recount(
    state_dir: str, checked: list[str], keep: int, manifests: dict[str, dict], scheme: str
) -> dict[str, Recount]:
    """The counts of ``checked[keep:]``: held together against the days before them (:func:`_count`) when they are
    at most :data:`BLOCK_IDS` ids, else every day counted by hash range (:func:`_count_by_hash_range`)."""
    if sum(_counted(manifests[day]) for day in checked[keep:]) <= BLOCK_IDS:
        return _count(state_dir, checked[:keep], checked[keep:], manifests, scheme)
    return _count_by_hash_range(state_dir, checked, keep, manifests, scheme)


def _counted(manifest: dict) -> int:
    """The battles a day counted: its ids file's length."""
    return int(manifest.get("counts", {}).get("counted", 0))


def _count(
    state_dir: str, before: list[str], recount: list[str], manifests: dict[str, dict], scheme: str
) -> dict[str, Recount]:
    """Each day of ``recount``: its rows whose id a day before it counted, those days (the first few) and the
    smallest :data:`EXAMPLES` hashes of those ids; rows None: hashed by another scheme, not compared.  ``before``:
    the stored days before the first of them.

    The recounted days' hashes are held, sorted by hash then day, so a repeated id is a run of entries whose
    first is its earliest recounted day; each day of ``before`` is then read once and marks the runs it holds.
    """
    out: dict[str, Recount] = {}
    hashes, owner = [], []
    for i, day in enumerate(recount):
        h, day_scheme = _read_ids(state_dir, day, manifests[day])
        if day_scheme != scheme:
            out[day] = Recount(None, [], [])
            continue
        hashes.append(h)
        owner.append(np.full(h.size, i, np.int32))
    h_all = np.concatenate(hashes) if hashes else np.zeros(0, np.uint64)
    day_of = np.concatenate(owner) if owner else np.zeros(0, np.int32)
    h_all, day_of, later, start = _runs(h_all, day_of)
    origin = np.full(h_all.size, -1, np.int32)  # at a run's first entry: the earliest day of ``before`` holding it
    for k, day in enumerate(before if h_all.size else []):
        h, day_scheme = _read_ids(state_dir, day, manifests[day])
        if day_scheme != scheme:
            continue
        at = np.minimum(np.searchsorted(h_all, h), h_all.size - 1)
        hit = at[h_all[at] == h]  # run starts (searchsorted finds a run's first entry)
        origin[hit[origin[hit] < 0]] = k
    repeated = later | (origin[start] >= 0)
    # Which day first counted each repeated id, as an index into ``before`` + ``recount``: a day of ``before``
    # when one holds it, else its run's first (earliest) recounted day.
    first = np.where(origin[start] >= 0, origin[start], len(before) + day_of[start])[repeated]
    tally = _Tally(len(recount), len(before) + len(recount))
    tally.add(day_of[repeated], first, h_all[repeated])
    return tally.result([*before, *recount], recount, out)


def _count_by_hash_range(
    state_dir: str, checked: list[str], keep: int, manifests: dict[str, dict], scheme: str
) -> dict[str, Recount]:
    """:func:`_count` of ``checked[keep:]`` against ``checked[:keep]``, by hash range: each day's sorted hashes are
    cut into ranges of the 64-bit hash (the ids' hashes are uniform over it: about :data:`RANGE_IDS` of all days'
    ids a range) and appended to a scratch file per range, then each range's file is counted on its own — an id's
    entries all fall in one range.  Every day is read once and the scratch files once; memory is one range."""
    n_ranges = max(1, -(-sum(_counted(manifests[day]) for day in checked) // RANGE_IDS))
    cuts = (np.arange(1, n_ranges) * (2.0**64 / n_ranges)).astype(np.uint64)
    out: dict[str, Recount] = {}
    blocks: list[list[tuple[int, int]]] = [[] for _ in range(n_ranges)]  # each range's (day, ids) in file order
    scratch = scratch_folder()
    try:
        paths = [os.path.join(scratch.name, f"range-{r:05d}.u64") for r in range(n_ranges)]
        for k, day in enumerate(checked):
            hashes, day_scheme = _read_ids(state_dir, day, manifests[day])
            if day_scheme != scheme:
                if k >= keep:
                    out[day] = Recount(None, [], [])
                continue
            if np.any(hashes[1:] < hashes[:-1]):  # written sorted (ids_table); a file that is not still counts
                hashes = np.sort(hashes)
            for r, part in enumerate(np.split(hashes, np.searchsorted(hashes, cuts))):
                if part.size:
                    with open(paths[r], "ab") as sink:
                        part.tofile(sink)
                    blocks[r].append((k, part.size))
        tally = _Tally(len(checked) - keep, len(checked))
        for r in range(n_ranges):
            if not blocks[r]:
                continue
            hashes = np.fromfile(paths[r], np.uint64)
            os.remove(paths[r])
            days, sizes = zip(*blocks[r], strict=True)
            day_of = np.repeat(np.array(days, np.int32), sizes)
            hashes, day_of, later, start = _runs(hashes, day_of)
            repeated = later & (day_of >= keep)
            tally.add(day_of[repeated] - keep, day_of[start[repeated]], hashes[repeated])
            del hashes, day_of, later, start, repeated
    finally:
        scratch.cleanup()
    return tally.result(checked, checked[keep:], out)


def _runs(hashes: np.ndarray, day_of: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``hashes`` and their days (``day_of``) sorted by hash, then day (a stable sort: the days' sorted runs come
    in day order), so an id's entries are a run whose first is its earliest day; ``later``: not its run's first
    entry (an earlier day counted the id); ``start``: each entry's run's first entry."""
    order = np.argsort(hashes, kind="stable")
    hashes, day_of = hashes[order], day_of[order]
    del order
    later = np.zeros(hashes.size, bool)
    later[1:] = hashes[1:] == hashes[:-1]
    start = np.maximum.accumulate(np.where(later, 0, np.arange(hashes.size)))
    return hashes, day_of, later, start


class _Tally:
    """The repeated ids found so far, per recounted day: how many, which days first counted them, the smallest hashes.

    Fed a part of the ids at a time (:meth:`add`: a block of days, or a hash range), parts in ascending hash order."""

    def __init__(self, days: int, n_names: int) -> None:
        self.counts = np.zeros(days, np.int64)
        self.n_names = n_names
        self.firsts: list[np.ndarray] = []  # (repeating day, first day) pairs, coded as one integer
        self.examples: list[list[int]] = [[] for _ in range(days)]

    def add(self, day: np.ndarray, first: np.ndarray, hashes: np.ndarray) -> None:
        """Repeated entries: for each, the recounted ``day`` it is on, the day that counted its id ``first`` (an
        index into the names :meth:`result` is given), and its hash (``hashes`` ascending)."""
        here = np.bincount(day, minlength=self.counts.size)
        self.counts += here
        # each (repeating day, first day) pair once (a whole re-emitted day repeats 10⁵ rows: no loop per row)
        self.firsts.append(np.unique(day.astype(np.int64) * self.n_names + first))
        # each day's smallest repeated hashes: a stable sort by day keeps them in hash order within each day
        by_day = np.argsort(day, kind="stable")
        sorted_days, sorted_hashes = day[by_day], hashes[by_day]
        for i in np.flatnonzero(here).tolist():
            need = EXAMPLES - len(self.examples[i])
            if need > 0:
                lo = int(np.searchsorted(sorted_days, i))
                self.examples[i].extend(sorted_hashes[lo : lo + min(need, int(here[i]))].tolist())

    def result(self, names: list[str], recount: list[str], out: dict[str, Recount]) -> dict[str, Recount]:
        """Each of ``recount``'s :class:`Recount` (the days in ``out`` as they are there), in ``recount``'s order;
        the first days named by ``names`` (the earliest :data:`DAYS_NAMED` of each day)."""
        firsts: dict[int, list[str]] = {}
        codes = np.unique(np.concatenate(self.firsts)) if self.firsts else np.zeros(0, np.int64)
        for code in codes.tolist():
            firsts.setdefault(code // self.n_names, []).append(names[code % self.n_names])
        for i, day in enumerate(recount):
            out.setdefault(day, Recount(int(self.counts[i]), firsts.get(i, [])[:DAYS_NAMED], self.examples[i]))
        return {day: out[day] for day in recount}
