"""The fit of a history too big to hold: the cells coded bucket by bucket onto disk, read a shard at a time.

Why: the Newton solve needs every cell's gradient and Hessian contribution at every evaluation, so held in
memory the coded cells (~120 B a cell) and the solver's per-cell terms (~285 B a cell at their peak) grow
with the history (docs/performance.md, Scale).  Streamed, the merged cells arrive as :class:`JudgeBuckets`
(disjoint sets of judges, every bucket's dictionaries the same global vocabularies), each bucket is coded into
the fit's arrays — the same codes, checks and group-by-sum as :func:`~biasboard.ranking.data.build_dataset` —
and written to a scratch folder as one ``.npy`` file per column, in shards of at most :data:`SHARD_CELLS`
cells, then freed.  The objective (:class:`~biasboard.ranking.solver.Objective` with a ``source``) reads the shards
back on every evaluation and keeps only their sums: the value, the gradient, the θ/global Hessian (M²) and the
per-judge blocks (J·K²).  The θ × judge couplings (one row of K per (judge, model) pair met, ~300 B a pair
in memory with what the factorisation derived from them) grow as each voter meets more models when its
history grows, so they are not held either: a Hessian evaluation sums them in a window of one shard's
entries and spills each judge range a shard completes to a file (:class:`SpilledCouplings`), and the
factorisation (the Schur complement Σ_j X_jᵀA_j⁻¹X_j, the solves' products with X and Xᵀ, the covariance's
per-judge terms: :mod:`biasboard.ranking.arrowhead`) reads them back a piece at a time.  What stays in
memory is one shard's arrays, O(J·K² + M²), the judges' first entries (J) and the cells summed per ordered
model pair (:meth:`PairStore.totals`: what the naive fit, the comparison graph, the battle counts and the
covariate report read).  Reading the shards costs one pass over the files per evaluation, and the couplings
one pass per factorisation, from the page cache: the sparse matrices a factorisation makes of them in that
pass go to files of their own (:class:`SpilledSparse`), which its solves read instead.

The arrowhead factorisation's per-judge batches (:func:`~biasboard.ranking.arrowhead._judge_batches`) are
made per factorisation instead of cached: their keys are Σ_j n_j² integers for judges meeting n_j models,
which grows faster than the cells as voter-judges meet more models.

The refresh's fit stage (:func:`~biasboard.transforms.snapshot.fit_state`) streams when
:func:`streaming_wanted`: more than :data:`STREAM_MIN_CELLS` stored battles (an upper bound of the merged cells,
known before any is read; ``BIASBOARD_STREAM_CELLS`` overrides it), the cells then merged by judge bucket on
disk (:func:`~biasboard.transforms.state.load_cells_by_judge`); below, the in-memory path is unchanged.  A
reference of judges (``--reference 'pool/*'``) streams too: its three fits are streamed fits, the gate and the
reference rating read covariances and the per-model-pair totals, never a judge's cells; so do ``--slices``
(each slice cut from the judge buckets, :class:`~biasboard.transforms.slices.BucketSlices`) and ``--judge-pool
prefix:SEP`` (the voter buckets renamed to their pools and cut into buckets of pools on disk,
:func:`~biasboard.transforms.judge_pool.pool_buckets`), and trusted anchors (one more judge's shards written after
the battles', :meth:`PairStore.with_judge`).  Score cells (single grades) are coded with the battles' vocabularies
and held in memory beside the streamed battles (:func:`stream_dataset`), as the in-memory data set holds them.
Bootstrap replicates stream as well: a replicate's store reads the same shards with their counts redrawn as each is
read (:meth:`PairStore.redrawn`, :class:`~biasboard.ranking.bootstrap.ShardRedraw`).
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

import numpy as np
import pyarrow as pa
import scipy.sparse as sp
from biasboard.ranking.arrowhead import (
    Couplings,
    CrossIndex,
    Piece,
    SparseStore,
    _unique_inverse,
)
from biasboard.ranking.data import (
    _FIT_PAIR_KEYS,
    _FIT_PAIR_SCHEMA,
    _PAIR_COUNTS,
    PAIR_CELL_MEASURES,
    Dataset,
    PairArrays,
    _add_score_judge_families,
    _checked_pair_counts,
    _checked_score_counts,
    _code_tables,
    _group_sum,
    _is_string,
    _pair_arrays,
    _recode,
    _score_arrays,
    _Vocab,
    clip_length,
    judge_totals,
    no_affinity_of,
    pair_vocabularies,
    score_vocabularies,
)
from biasboard.ranking.model import BlockPartials, BlockSlice, Spec, block_partials
from biasboard.schemas.cells import SCORE_CELLS_SCHEMA, UNKNOWN_FAMILY
from biasboard.schemas.errors import InputError

#: Stored battles (≥ merged pair cells) above which the fit stage streams the cells (``BIASBOARD_STREAM_CELLS``).
STREAM_MIN_CELLS: int = 1_000_000
#: Rows per judge bucket :class:`TableBuckets` cuts by default.
BUCKET_ROWS: int = 1 << 18
#: Cells per shard file set: what one evaluation holds of the cells at a time (~100 B a cell when read).
SHARD_CELLS: int = 1 << 18

#: Columns of a shard on disk: :class:`PairArrays`' own, in its types (read back without a conversion).
STORED: tuple[str, ...] = tuple(PairArrays.__dataclass_fields__)
#: What the likelihood reads of a cell (:func:`~biasboard.ranking.model.davidson_terms`, the dense partials).
OBJECTIVE_COLUMNS: tuple[str, ...] = ("a", "b", "j", "win_a", "win_b", "tie", "n", "x", "ds", "pos", "style")
#: A cell's counts: what a bootstrap replicate redraws (:meth:`PairStore.redrawn`).
_COUNTS: tuple[str, ...] = ("win_a", "win_b", "tie", "bothbad", "n")
#: Per-judge sums a streamed data set keeps (:meth:`~biasboard.ranking.data.Dataset.judge_sums`).
JUDGE_SUMS: tuple[str, ...] = ("n", "n_len", "n_pos", "n_versus", "n_style", "tie", "bothbad", "affinity")
_EMPTY = np.zeros(0)


def stream_min_cells() -> int:
    """Merged cells above which the fit streams (:data:`STREAM_MIN_CELLS`, or ``BIASBOARD_STREAM_CELLS``).

    A value that is not a whole number >= 0 is refused in one line, as the other knobs are (``abc`` raised a
    ValueError traceback from inside the fit stage, after every day had been aggregated)."""
    env = os.environ.get("BIASBOARD_STREAM_CELLS", "").strip()
    if not env:
        return STREAM_MIN_CELLS
    try:
        cells = int(env)
    except ValueError:
        cells = -1
    if cells < 0:
        raise InputError(f"BIASBOARD_STREAM_CELLS must be a whole number of cells >= 0, got {env!r}")
    return cells


class JudgeBuckets(Protocol):
    """Merged pair cells by judge bucket (the contract between the merge and the streamed fit).

    ``tables()`` starts again on every call; the buckets hold disjoint sets of judges, rows in key order
    within a bucket, string keys dictionary-encoded with the same global vocabularies in every bucket."""

    @property
    def n_rows(self) -> int: ...

    @property
    def n_buckets(self) -> int: ...

    def tables(self) -> Iterator[pa.Table]: ...


class TableBuckets:
    """:class:`JudgeBuckets` over a merged table in memory (``state.load_cells(dictionary=True)``): its judge
    runs cut into buckets of at least ``rows`` rows (a judge is never split), zero-copy slices.  For tables
    already in memory (tests, callers of the core); the refresh's merge hands over
    :func:`~biasboard.transforms.state.load_cells_by_judge`'s buckets, read from disk one at a time."""

    def __init__(self, table: pa.Table, rows: int = BUCKET_ROWS):
        self.table = table
        codes = _Vocab().codes(table.column("judge")) if table.num_rows else np.zeros(0, np.int32)
        starts = np.flatnonzero(np.concatenate([[True], codes[1:] != codes[:-1]])) if codes.size else codes
        if np.unique(codes).size != starts.size:
            raise ValueError("TableBuckets: the cells are not sorted by judge (each judge's rows must be one run)")
        cuts = [0]
        while cuts[-1] < table.num_rows:
            at = int(np.searchsorted(starts, cuts[-1] + rows))
            cuts.append(int(starts[at]) if at < starts.size else table.num_rows)
        self.bounds = list(itertools.pairwise(cuts))

    @property
    def n_rows(self) -> int:
        return int(self.table.num_rows)

    @property
    def n_buckets(self) -> int:
        return len(self.bounds)

    def tables(self) -> Iterator[pa.Table]:
        for lo, hi in self.bounds:
            yield self.table.slice(lo, hi - lo)


def streaming_wanted(size: int) -> bool:
    """Whether a fit streams its cells: ``size`` (the stored battles, or the cells) above :func:`stream_min_cells`."""
    return size > stream_min_cells()


# --------------------------------------------------------------------------------------------- the store


@dataclass
class _Shard:
    """One shard's file: its columns back to back, raw (no header to parse per read), where each one is."""

    path: Path
    n: int
    columns: dict[str, tuple[int, np.dtype, tuple[int, ...]]] = field(default_factory=dict)  # offset, dtype, shape

    def append(self, name: str, value: np.ndarray) -> None:
        value = np.ascontiguousarray(value)
        with open(self.path, "ab") as out:
            offset = out.tell()
            out.write(value.data.cast("B"))
        self.columns[name] = (offset, value.dtype, value.shape)

    def read_rows(self, name: str, lo: int, hi: int) -> np.ndarray:
        """Rows lo … hi − 1 of the column ``name`` (a 1-d column)."""
        offset, dtype, _ = self.columns[name]
        value = np.empty(hi - lo, dtype)
        with open(self.path, "rb", buffering=0) as src:
            src.seek(offset + lo * value.itemsize)
            view = value.data.cast("B")
            got = src.readinto(view)
        if got != view.nbytes:
            raise OSError(f"{self.path}: short read of column {name} ({got} of {view.nbytes} bytes)")
        return value

    def read(self, names: Iterable[str]) -> dict[str, np.ndarray]:
        """The columns ``names`` this shard has, each read into its own (writable) array."""
        out = {}
        with open(self.path, "rb", buffering=0) as src:
            for name in names:
                if name not in self.columns:
                    continue
                offset, dtype, shape = self.columns[name]
                value = np.empty(shape, dtype)
                src.seek(offset)
                view = value.data.cast("B")
                got = src.readinto(view)
                if got != view.nbytes:
                    raise OSError(f"{self.path}: short read of column {name} ({got} of {view.nbytes} bytes)")
                out[name] = value
        return out


@dataclass
class _Files:
    """The shards written for one data set, and what is derived from them once (shared by clipped views)."""

    folder: Path
    shards: list[_Shard]
    n_models: int
    n_judges: int
    has_style: bool
    sums: dict[str, np.ndarray]  # JUDGE_SUMS, per judge
    totals: dict[float | None, PairArrays] = field(default_factory=dict)
    cross: CrossIndex | None = None
    models: _Shard | None = None  # each (judge, model) entry's model (:meth:`PairStore.cross_index`)
    owned: bool = False  # the folder is ours to remove (close())

    def cross_starts(self) -> np.ndarray:
        assert self.cross is not None, "the cross index is made first (PairStore.cross_index)"
        return self.cross.starts


#: Redrawn counts of one shard's cells: (the shard's cells, the shard's number) → the cells with new counts
#: (a bootstrap replicate's, :class:`~biasboard.ranking.bootstrap.ShardRedraw`).
Redraw = Callable[[PairArrays, int], PairArrays]


class PairStore:
    """A streamed data set's pair cells on disk: shards read back as :class:`PairArrays` (see the module
    docstring).  ``clip``: the length covariate clipped at ±clip as it is read (the problem's covariate);
    ``redraw``: each shard's counts replaced as it is read (a bootstrap replicate's cells, :meth:`redrawn`)."""

    def __init__(self, files: _Files, clip: float | None = None, redraw: Redraw | None = None):
        self.files = files
        self.clip = clip
        self.redraw = redraw

    def clipped(self, clip: float | None) -> PairStore:
        """The same cells with the length covariate clipped at ±``clip`` (:func:`clip_length`) as read."""
        return PairStore(self.files, clip, self.redraw)

    def redrawn(self, redraw: Redraw) -> PairStore:
        """The same cells with their counts redrawn by ``redraw`` as each shard is read: a bootstrap replicate of
        the store without a copy of it.  ``redraw`` must give a shard the same counts on every read (each pass of
        a replicate's refit reads every shard again): a function of the shard's number, not of the read order."""
        return PairStore(self.files, self.clip, redraw)

    @property
    def n_cells(self) -> int:
        return sum(shard.n for shard in self.files.shards)

    def __len__(self) -> int:
        return self.n_cells

    def close(self) -> None:
        """Remove the scratch folder (when the store made it)."""
        if self.files.owned:
            shutil.rmtree(self.files.folder, ignore_errors=True)

    def with_judge(self, data: Dataset, name: str, family: str, pairs: PairArrays) -> Dataset:
        """``data`` (this store's data set) with one more judge, ``pairs`` (coded as judge number J, the last;
        :func:`~biasboard.ranking.data.with_judge`), written as shards after this store's: the shards stay in
        judge order, and nothing already on disk is coded or written again.

        The new store reads this one's shards where they are, from a folder of its own inside this store's (its
        cross index and spilled couplings go there; removed with this store's folder): it does not own them."""
        files = self.files
        folder = Path(tempfile.mkdtemp(prefix="with-judge-", dir=files.folder))
        shards = [_Shard(shard.path, shard.n, dict(shard.columns)) for shard in files.shards]
        for start in range(0, len(pairs), SHARD_CELLS):
            shards.append(_write_shard(folder, len(shards), pairs.take(slice(start, start + SHARD_CELLS))))
        jn = files.n_judges + 1
        sums = {what: np.append(files.sums[what], judge_totals(pairs, jn, what)[-1]) for what in JUDGE_SUMS}
        has_style = files.has_style or pairs.style is not None
        store = PairStore(_Files(folder, shards, files.n_models, jn, has_style, sums), self.clip)
        return replace(
            data,
            judges=(*data.judges, name),
            judge_families=(*data.judge_families, family),
            pairs=store.totals(),
            stream=store,
        )

    def judge_pairs(self, judges: np.ndarray) -> PairArrays:
        """The cells of the judges ``judges`` selects (bool over the judges), every column, read back from the
        shards that hold them (in judge order)."""
        parts = []
        for number, stored in enumerate(self.files.shards):
            own = np.flatnonzero(judges[stored.read(("j",))["j"]])  # only the judge column of the other shards
            if own.size:
                parts.append(self._shard_pairs(stored, STORED, number).take(own))
        return PairArrays.concat(parts) if parts else self.totals().take(slice(0, 0))

    def judge_sums(self, what: str) -> np.ndarray:
        if what not in self.files.sums:
            raise KeyError(f"no per-judge sum {what!r} (one of {', '.join(JUDGE_SUMS)})")
        return self.files.sums[what]

    def _pairs(self, raw: dict[str, np.ndarray], n: int, names: tuple[str, ...]) -> PairArrays:
        """Stored columns → :class:`PairArrays` in the fit's types (columns not read: empty arrays)."""
        cols: dict[str, np.ndarray | None] = {}
        for name in PairArrays.__dataclass_fields__:
            value = raw.pop(name, None)
            if value is None:
                style_part = name in ("style", "n_style", "style_sq")
                if style_part and not self.files.has_style:
                    cols[name] = None
                elif style_part and name in names:
                    cols[name] = np.zeros((n, 3) if name != "n_style" else n)  # a shard without style counts
                else:
                    cols[name] = _EMPTY
                continue
            cols[name] = value
        return PairArrays(**cols)  # type: ignore[arg-type]

    def shards(self, columns: Iterable[str] = OBJECTIVE_COLUMNS, entries: bool = False) -> Iterator[PairShard]:
        """Each shard's cells (``columns`` read, the rest empty), the length covariate clipped; with ``entries``
        each cell's (judge, model a) and (judge, model b) entries of :meth:`cross_index` (int32)."""
        names = tuple(columns)
        for number, stored in enumerate(self.files.shards):
            pairs = self._shard_pairs(stored, names, number)
            at = stored.read(("at_a", "at_b")) if entries else {}
            yield PairShard(pairs, at.get("at_a"), at.get("at_b"))
            del pairs, at

    def _shard_pairs(self, stored: _Shard, names: tuple[str, ...], number: int) -> PairArrays:
        """Shard ``number``'s cells (``names`` read, the rest empty), the length covariate clipped, the counts
        redrawn (a replicate's store; its counts read whatever ``names`` asks for)."""
        if self.redraw is not None and any(name in names for name in _COUNTS):
            names = tuple(dict.fromkeys((*names, *_COUNTS)))
        pairs = self._pairs(stored.read(names), stored.n, names)
        if self.redraw is not None and "win_a" in names:
            pairs = self.redraw(pairs, number)
        if self.clip is not None and "x" in names:
            if "sum_x2" in names and "n_len" in names:
                pairs = clip_length(pairs, self.clip)
            else:
                np.clip(pairs.x, -self.clip, self.clip, out=pairs.x)
        return pairs

    def totals(self) -> PairArrays:
        """The cells summed per ordered model pair (over judges, length bins, order, style bins), under the
        store's clip: battles and verdicts summed; ``x`` and ``style`` the battle-weighted means of the
        cells' (so n_len·x sums as the cells' do); ``sum_x2`` of the clipped covariate; ``j`` is −1 (no
        judge), ``ds`` 0 and ``pos`` 1.  Made once per clip, by one pass over the shards (a redrawn store's on
        every call: its counts are not the files')."""
        cached = self.files.totals.get(self.clip) if self.redraw is None else None
        if cached is not None:
            return cached
        m = self.files.n_models
        keys = np.zeros(0, np.int64)
        summed: dict[str, np.ndarray] = {}
        additive = ["win_a", "win_b", "tie", "bothbad", "n", "n_len", "sum_x2", "sum_loglen_a", "sum_loglen_b"]
        columns = ["a", "b", "x", *additive]
        if self.files.has_style:
            columns += ["style", "n_style", "style_sq"]
        for shard in self.shards(columns):
            p = shard.pairs
            parts = {name: getattr(p, name) for name in additive}
            parts["wx"] = p.n_len * p.x
            if self.files.has_style:
                assert p.style is not None and p.n_style is not None and p.style_sq is not None
                for k in range(3):
                    parts[f"ws{k}"] = p.n_style * p.style[:, k]
                    parts[f"sq{k}"] = p.style_sq[:, k]
                parts["n_style"] = p.n_style
            key = p.a * m + p.b
            keys, inverse = _unique_inverse(np.concatenate([keys, key]), m * m)
            old = inverse[: inverse.size - key.size]
            new = inverse[inverse.size - key.size :]
            summed = {
                name: np.bincount(old, weights=summed[name], minlength=keys.size)
                + np.bincount(new, weights=values, minlength=keys.size)
                if name in summed
                else np.bincount(new, weights=values, minlength=keys.size)
                for name, values in parts.items()
            }
        zero = np.zeros(keys.size)
        x = np.divide(summed["wx"], summed["n_len"], out=zero.copy(), where=summed["n_len"] > 0) if keys.size else zero
        style = n_style = style_sq = None
        if self.files.has_style:
            n_style = summed["n_style"]
            ws = np.column_stack([summed[f"ws{k}"] for k in range(3)])
            style = np.divide(ws, n_style[:, None], out=np.zeros_like(ws), where=n_style[:, None] > 0)
            style_sq = np.column_stack([summed[f"sq{k}"] for k in range(3)])
        out = PairArrays(
            a=keys // m,
            b=keys % m,
            j=np.full(keys.size, -1, np.int64),
            **{name: summed.get(name, zero) for name in additive[:5]},
            x=x,
            ds=zero,
            n_len=summed.get("n_len", zero),
            sum_x2=summed.get("sum_x2", zero),
            sum_loglen_a=summed.get("sum_loglen_a", zero),
            sum_loglen_b=summed.get("sum_loglen_b", zero),
            pos=np.ones(keys.size),
            style=style,
            n_style=n_style,
            style_sq=style_sq,
        )
        if self.redraw is None:
            self.files.totals[self.clip] = out
        return out

    def cross_index(self) -> CrossIndex:
        """The (judge, model) pairs of the cells (:class:`~biasboard.ranking.arrowhead.CrossIndex`) without the
        per-cell entries, which are written beside each shard (``at_a``, ``at_b``: read with
        ``shards(entries=True)``); its per-judge batches are not cached.  Made once, by two passes."""
        files = self.files
        if files.cross is not None:
            return files.cross
        m, jn = files.n_models, files.n_judges
        n_keys = jn * m
        table = n_keys <= 8 * self.n_cells  # as _unique_inverse decides: mark a table of all keys, or sort
        seen = np.zeros(n_keys if table else 0, bool)
        uniq_parts = []
        for shard in self.shards(("a", "b", "j")):
            p = shard.pairs
            if table:
                seen[p.j * m + p.a] = True
                seen[p.j * m + p.b] = True
            else:
                uniq_parts.append(np.unique(np.concatenate([p.j * m + p.a, p.j * m + p.b])))
        uniq = np.flatnonzero(seen) if table else np.unique(np.concatenate([np.zeros(0, np.int64), *uniq_parts]))
        del seen, uniq_parts
        index = np.int32 if uniq.size < np.iinfo(np.int32).max else np.int64
        position = np.empty(n_keys if table else 0, index)
        position[uniq] = np.arange(uniq.size, dtype=index)

        def entries(key: np.ndarray) -> np.ndarray:
            return position[key] if table else np.searchsorted(uniq, key).astype(index)

        for stored, shard in zip(files.shards, self.shards(("a", "b", "j")), strict=True):
            p = shard.pairs
            stored.append("at_a", entries(p.j * m + p.a))
            stored.append("at_b", entries(p.j * m + p.b))
        # Each entry's model, on disk beside the shards (what the spilled couplings' pieces read back); in memory
        # only the judges' first entries.
        files.models = _Shard(files.folder / "cross-model.bin", int(uniq.size))
        files.models.append("model", (uniq % m).astype(np.int32))
        judge = uniq // m
        empty = np.zeros(0, np.int64)
        files.cross = CrossIndex(empty, empty, np.searchsorted(judge, np.arange(jn + 1)), (), (), cache_batches=False)
        return files.cross

    def block_partials(
        self, eff: np.ndarray, spec: Spec, hessian: bool, chunk: int
    ) -> tuple[BlockPartials, SpilledCouplings | None]:
        """The judge-blocked partials of every shard, in slices of at most ``chunk`` cells (the streamed
        :class:`~biasboard.ranking.solver.Objective`'s), and with the Hessian its θ × judge rows spilled to disk
        (:class:`SpilledCouplings`) instead of held: the rows are summed in a window of entries, and when a
        shard is read every judge before its first is complete (the shards come in judge order), so their
        rows go to disk as one piece and leave the window.  Memory: a shard's entries, not the history's."""
        lay = spec.layout
        starts = self.cross_index().starts
        total = BlockPartials.zeros(lay, 0, hessian)
        spilled = SpilledCouplings(self.files) if hessian else None
        base, done = 0, 0  # the window's first entry; the first judge not spilled yet
        for shard in self.shards(entries=True):
            pairs, at_a, at_b = shard.pairs, shard.at_a, shard.at_b
            assert at_a is not None and at_b is not None
            if spilled is not None:
                first = int(pairs.j.min())
                cut = int(starts[first])
                if first > done:
                    spilled.add(done, first, total.C[: cut - base])
                    done = first
                end = max(int(max(at_a.max(), at_b.max())) + 1, base + len(total.C))
                window = np.zeros((lay.n_blocks, end - cut)).T  # column-major, as BlockPartials.zeros makes it
                kept = total.C[cut - base :]
                window[: len(kept)] = kept
                total.C, base = window, cut
                del kept, window
            for start in range(0, len(pairs), chunk):
                sl = slice(start, start + chunk)
                block_partials(
                    eff, BlockSlice.of(pairs.take(sl), at_a[sl] - base, at_b[sl] - base, spec), spec, total, hessian
                )
            del shard, pairs, at_a, at_b  # not held while the next shard is read
        if spilled is not None:
            spilled.add(done, starts.size - 1, total.C[: int(starts[-1]) - base])
            total.C = np.zeros((lay.n_blocks, 0)).T
        return total, spilled


def _remove_spilled(folder: str, owner: int) -> None:
    """Remove a :class:`SpilledCouplings` folder, in the process that made it only: a forked worker (the
    profiles', :mod:`biasboard.ranking.forked`) that drops an object it inherited must leave its files."""
    if os.getpid() == owner:
        shutil.rmtree(folder, ignore_errors=True)


class SpilledCouplings(Couplings):
    """The θ × judge couplings of a streamed fit's Hessian on disk (:class:`~biasboard.ranking.arrowhead.Couplings`):
    one file per piece (a range of judges: those a shard completes, :meth:`PairStore.block_partials`), the
    entries' models read from the store's cross index (``cross-model.bin``).  Each pass over the pieces reads
    them back one at a time (from the page cache: ~K·8 + 4 bytes an entry).  The files go with the object, or
    with the store's folder."""

    def __init__(self, files: _Files):
        self.files = files
        self.folder = Path(tempfile.mkdtemp(prefix="couplings-", dir=files.folder))
        self.parts: list[tuple[int, int, _Shard]] = []
        weakref.finalize(self, _remove_spilled, str(self.folder), os.getpid())

    def add(self, j0: int, j1: int, rows: np.ndarray) -> None:
        """Judges j0 … j1 − 1's rows (their entries × K); none: no piece (judges without cells)."""
        if not len(rows):
            return
        shard = _Shard(self.folder / f"piece-{len(self.parts):06d}.bin", len(rows))
        shard.append("X", np.ascontiguousarray(rows))
        self.parts.append((j0, j1, shard))

    def pieces(self) -> Iterator[Piece]:
        starts, models = self.files.cross_starts(), self.files.models
        assert models is not None
        for j0, j1, shard in self.parts:
            e0, e1 = int(starts[j0]), int(starts[j1])
            local = starts[j0 : j1 + 1] - e0
            model = models.read_rows("model", e0, e1).astype(np.int64)
            judge = np.repeat(np.arange(j1 - j0), np.diff(local))
            cross = CrossIndex(model, judge, local, (), (), cache_batches=False)
            yield Piece(j0, cross, shard.read(("X",))["X"])

    def map(self, fn: Callable[[Piece], np.ndarray]) -> SpilledCouplings:
        out = SpilledCouplings(self.files)
        for piece in self.pieces():
            out.add(piece.j0, piece.j1, fn(piece))
        return out

    def sparse_store(self) -> SpilledSparse:
        return SpilledSparse(self.files.folder)


class SpilledSparse(SparseStore):
    """A factorisation's sparse coupling matrices in files, one per piece (:class:`~biasboard.ranking.arrowhead.
    SparseStore`), in a folder of the store's that goes with the object (as :class:`SpilledCouplings`' does)."""

    def __init__(self, folder: Path):
        self.folder = Path(tempfile.mkdtemp(prefix="sparse-", dir=folder))
        self.parts: list[tuple[int, int, Path, tuple[int, int]]] = []
        weakref.finalize(self, _remove_spilled, str(self.folder), os.getpid())

    def put(self, j0: int, j1: int, matrix: sp.csr_matrix) -> None:
        path = self.folder / f"piece-{len(self.parts):06d}.npy"
        with open(path, "wb") as out:
            for array in (matrix.data, matrix.indices, matrix.indptr):
                np.save(out, array)
        self.parts.append((j0, j1, path, matrix.shape))

    def items(self) -> Iterator[tuple[int, int, sp.csr_matrix]]:
        for j0, j1, path, shape in self.parts:
            with open(path, "rb") as src:
                data, indices, indptr = np.load(src), np.load(src), np.load(src)
            yield j0, j1, sp.csr_matrix((data, indices, indptr), shape=shape)


@dataclass
class PairShard:
    """One shard as read: its cells and, when asked for, their cross-index entries."""

    pairs: PairArrays
    at_a: np.ndarray | None = None
    at_b: np.ndarray | None = None


# ------------------------------------------------------------------------------------------------ coding


def _feed_vocabs(table: pa.Table, vocabs: dict[str, _Vocab]) -> None:
    """Add every value of ``table``'s string key columns' dictionaries to ``vocabs`` (what
    :meth:`_Vocab.codes` would add, without coding the rows)."""
    for name, vocab in vocabs.items():
        if name not in table.column_names:
            continue
        for chunk in table.column(name).chunks:
            if not pa.types.is_dictionary(chunk.type):
                if not _is_string(chunk.type):
                    continue  # a non-string key: _code_tables casts it and reports what is wrong
                chunk = chunk.dictionary_encode()
            for value in chunk.dictionary.to_pylist():
                vocab.index.setdefault(value, len(vocab.index))


def _write_shard(folder: Path, number: int, pairs: PairArrays) -> _Shard:
    shard = _Shard(folder / f"shard-{number:06d}.bin", len(pairs))
    for name in STORED:
        value = getattr(pairs, name)
        if value is not None:
            shard.append(name, value)
    return shard


class _ShardCutter:
    """Writes the coded cells of the buckets, in order, as shards of :data:`SHARD_CELLS` cells (the last fewer).

    Why not a bucket's own shards: the buckets' bounds depend on the state's history (the merged-cells cache keeps
    the bounds it was made with, and new judges fall between them), while the concatenated buckets do not; a shard
    is a unit of the objective's float sums and of a bootstrap replicate's redraw (:class:`~biasboard.ranking
    .bootstrap.ShardRedraw`, drawn by shard number), so shards cut per bucket made a state that grew day by day
    publish other bits, and other bootstrap intervals, than a fresh state of the same input.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.shards: list[_Shard] = []
        self.carry: PairArrays | None = None  # the cells after the last full shard (fewer than SHARD_CELLS)

    def add(self, pairs: PairArrays) -> None:
        """The next cells in key order: every full shard written, the rest carried (copied: not a view of
        ``pairs``, which the caller frees)."""
        if self.carry is not None:
            need = SHARD_CELLS - len(self.carry)
            head = PairArrays.concat([self.carry, pairs.take(slice(0, need))])
            pairs, self.carry = pairs.take(slice(need, None)), None
            if len(head) < SHARD_CELLS:  # (a copy: concat joins two parts)
                self.carry = head
                return
            self._write(head)
        for begin in range(0, len(pairs), SHARD_CELLS):
            piece = pairs.take(slice(begin, begin + SHARD_CELLS))
            if len(piece) < SHARD_CELLS:
                self.carry = piece.take(np.arange(len(piece)))
                return
            self._write(piece)

    def _write(self, pairs: PairArrays) -> None:
        self.shards.append(_write_shard(self.root, len(self.shards), pairs))

    def finish(self) -> list[_Shard]:
        """Every shard, the carried cells the last."""
        if self.carry is not None and len(self.carry):
            self._write(self.carry)
        self.carry = None
        return self.shards


def stream_dataset(
    buckets: JudgeBuckets, folder: str | Path | None = None, score_cells: pa.Table | None = None
) -> Dataset:
    """The fit's data set of ``buckets``, streamed: each bucket coded and written under ``folder`` (a new
    temporary folder, removed by the store's ``close()``, when None) in shards, then freed.

    The same vocabularies, checks, group-by-sum and derived columns as
    :func:`~biasboard.ranking.data.build_dataset` of the concatenated buckets (two passes: the first reads
    only the dictionaries), so a streamed fit equals the in-memory one up to the order of float sums.
    ``score_cells`` (single grades) are coded with the same vocabularies and held in memory, as the in-memory
    data set holds them: the ordinal part's cells are a judge's (model, prompt, grade) counts, not its battles.
    """
    owned = folder is None
    root = Path(tempfile.mkdtemp(prefix="biasboard-fit-")) if folder is None else Path(folder)
    try:
        return _stream_dataset(buckets, root, owned, score_cells)
    except BaseException:
        if owned:
            shutil.rmtree(root, ignore_errors=True)
        raise


def _stream_dataset(buckets: JudgeBuckets, root: Path, owned: bool, score_cells: pa.Table | None) -> Dataset:
    vocabs = pair_vocabularies()
    for table in buckets.tables():
        _feed_vocabs(table, vocabs)
    prompt_v = _Vocab()
    score_vocabs = score_vocabularies(vocabs, prompt_v)
    scores = _code_tables(score_cells, SCORE_CELLS_SCHEMA, "score cells", score_vocabs)
    distinct = {id(v): v for v in [*vocabs.values(), prompt_v]}
    remaps = {key: vocab.finish()[1] for key, vocab in distinct.items()}
    judges, _ = vocabs["judge"].finish()
    models, _ = vocabs["model_a"].finish()
    families, _ = vocabs["family_a"].finish()
    prompts, _ = prompt_v.finish()
    if scores is not None:
        _recode(scores, score_vocabs, remaps)
    scores = _checked_score_counts(scores)
    no_affinity = no_affinity_of(families)
    jn = len(judges)
    fam_of_judge = np.full(jn, -1, np.int64)
    sums = {what: np.zeros(jn) for what in JUDGE_SUMS}
    cutter = _ShardCutter(root)
    has_style = False
    for number, table in enumerate(buckets.tables()):
        coded = _code_tables(table, _FIT_PAIR_SCHEMA, f"pair cells (bucket {number})", vocabs, _PAIR_COUNTS)
        del table
        if coded is None:
            continue
        _recode(coded, vocabs, remaps)
        coded = _checked_pair_counts(coded, judges, models)
        if not len(coded["n"]):
            continue
        col = _group_sum(coded, _FIT_PAIR_KEYS, PAIR_CELL_MEASURES)
        del coded
        fam_of_judge[col["judge"]] = col["judge_family"]
        pairs = _pair_arrays(col, no_affinity)
        del col
        has_style = has_style or pairs.style is not None
        for what in JUDGE_SUMS:
            sums[what] += judge_totals(pairs, jn, what)
        cutter.add(pairs)
        del pairs
    shards = cutter.finish()
    if not shards:
        raise InputError("pair cells: no battles (every cell has n = 0)")
    _add_score_judge_families(fam_of_judge, scores)
    judge_families = tuple(families[f] if f >= 0 else UNKNOWN_FAMILY for f in fam_of_judge)
    score_arrays, min_score, grades = _score_arrays(scores)
    store = PairStore(_Files(root, shards, len(models), jn, has_style, sums, owned=owned))
    return Dataset(models, judges, judge_families, prompts, min_score, store.totals(), score_arrays, grades, store)
