"""Which comparisons to run next: top-k-aware acquisition and its baselines (pure numpy).

Why: a judge's budget is best spent where it can still change *who is in the top k*, not where it
refines the order of models that are clearly in or clearly out (Xu et al. 2026, appendix A; Katoch et al. 2026, §5).

The posterior is the Laplace one of a fit, θ ~ N(μ, Σ) on the logit scale (:class:`Posterior`).
A planned unit is an unordered pair {a, b} judged in **both orders** (a shown first, then b shown
first), so that the position effect stays identified from disagreement between orders (Xu et al. 2026,
"ordered-query effect"); a budget of B comparisons is ⌊B/2⌋ units.

Information of one unit, judged by judge j, about the contrast θ_a − θ_b (Gaussian approximation)::

    w_j(a, b) = a_j² · [h(η_ab) + h(η_ba)],   η_ab = a_j (μ_a − μ_b) + γ_j,   η_ba = a_j (μ_b − μ_a) + γ_j
    h(η) = ¼ [(p_a + p_b) − (p_a − p_b)²]                    (Davidson Fisher information, tie propensity ν_j;
                                                               = σ(η)(1 − σ(η)) without ties)
    gain(a, b) = ½ log(1 + w · v_ab),   v_ab = Var(θ_a − θ_b) = Σ_aa + Σ_bb − 2 Σ_ab

``gain`` is both the expected information (nats) about the contrast and the log-det increase of the
θ posterior precision from the unit, so it *is* the D-optimal criterion.  Length is unknown before a
comparison is run, so it enters as x = 0 (equal lengths); the position effect γ_j of the order shown
does enter, which is why both orders are scored.

On a board of several comparison components the fit centres each on its own; the planner gives each
component's level the uncertainty the θ prior leaves it (:meth:`Posterior.level_cov`), so a pair linking two
components is worth what it is (the most, until they are linked) and P(top k) is over the whole board.

Strategies (greedy, one unit at a time, ``B/2`` picks per batch):

``topk``       Xu et al.'s rule: membership uncertainty × expected information,
               ``score = [p_a(1 − p_a) + p_b(1 − p_b)] · gain(a, b)``, p = P(model in top k).  The
               membership factor is a boundary-targeted surrogate, not an exact expected
               top-k-entropy reduction (Xu et al. 2026 says the same of its own rule).
``dopt``       ``gain`` alone: maximal log-det increase of the θ posterior precision, blind to k.
``thompson``   draw θ̃ from the posterior, take its top-k set S̃, run the crossing pair (i ∈ S̃,
               j ∉ S̃) with the smallest sampled gap θ̃_i − θ̃_j (the sampled boundary).
``roundrobin`` the least-compared pair first (past counts if given: a snapshot's are the battles of the
               judges planned for), ties broken by the circle-method schedule, so every model plays once per round.

Without repeats (``repeat=False``, the frozen-judge protocol) no judge is given a (unordered) pair it has
judged before (:attr:`Posterior.judged`) or earlier in the batch; another judge may be.
``random``     a uniformly random pair.

Within a batch the verdicts are unknown, so after each pick the posterior is updated as if the unit
had been observed at its expected outcome ("kriging believer"): the mean stays, Σ loses the rank-one
part ``Σx xᵀΣ · w / (1 + w v)`` (x = e_a − e_b), and the Monte Carlo draws behind p are moved by
Matheron's rule to draws of the updated posterior — so later picks see the uncertainty the earlier
ones will remove and the batch spreads out instead of repeating one pair.
"""

from __future__ import annotations

import functools
import io
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import numpy as np
import polars as pl
import pyarrow as pa
from biasboard.ranking.config import Priors
from biasboard.ranking.reference import ANCHOR_JUDGE, EXCESS_ROW_NOTE, TIED_ROW_NOTE
from biasboard.ranking.result import ELO_CENTER, ELO_PER_LOGIT, JUDGE_EFFECTS
from biasboard.ranking.spill import SpilledRows

STRATEGIES: tuple[str, ...] = ("topk", "dopt", "thompson", "roundrobin", "random")

#: Why a selection holds fewer units than its budget (:attr:`Selection.stopped`): every pair was judged by every judge
#: planned for, before or in this batch (``repeat=False``), every pair holds its share of the batch, or every judge
#: does.
STOP_NO_REPEAT, STOP_PAIR_CAP, STOP_JUDGE_CAP = "no_repeat", "pair_cap", "judge_cap"

#: Name used for "any judge" (the global position effect, a = 1) when no judge is chosen.
ANY_JUDGE = ""
#: The judge a plan names for "a new judge of the population" — the next crowd voter of an arena, whose verdicts
#: carry the population's effects (the fit's global judge ``'*'``: its position effect, a = 1, the judges' median
#: tie propensity), as :data:`ANY_JUDGE` does — toward a reference, whose global position effect is the reference's own,
#: the judges' mean position effect (:func:`population_position`); the one judge to plan for on a board of
#: voter-judges, none of whom can be asked again by name.
POPULATION_JUDGE = "*"

#: Prior SD of one rating (logits): the bias-aware fit's θ prior, all that is known of the level of a comparison
#: component against another (:meth:`Posterior.level_cov`).
COMPONENT_LEVEL_SD = Priors().theta_sd

PLAN_COLUMNS: dict[str, type[pl.DataType]] = {
    "rank": pl.Int64,
    "unit": pl.Int64,
    "model_a": pl.String,
    "model_b": pl.String,
    "judge": pl.String,
    "strategy": pl.String,
    "score": pl.Float64,
    "info_nats": pl.Float64,
    "p_top_k_a": pl.Float64,
    "p_top_k_b": pl.Float64,
    "rating_a": pl.Float64,  # the posterior mean θ on the leaderboard's Elo-like scale (rating_elo)
    "rating_b": pl.Float64,
    "reason": pl.String,
}


def rating_elo(theta: np.ndarray) -> np.ndarray:
    """θ (logits, centred within each comparison component) on the leaderboard's Elo-like scale: 1000 + 400/ln 10 · θ.

    Why: the plan's ``rating_a``/``rating_b`` were θ in logits (0.78) beside the leaderboard's ``rating_corrected``
    of the same model (1135.1, AlpacaEval 2's gpt-3.5-turbo-1106_concise): one column name, two units.
    """
    return ELO_CENTER + ELO_PER_LOGIT * np.asarray(theta, dtype=float)


#: Rows (judge, model_a, model_b, n) of the battles judged: a frame, a table, or rows set aside on disk through the fit
#: (the refresh's :attr:`~biasboard.transforms.snapshot.CellTotals.judge_pairs`), read here a record batch at a time.
JudgedRows: TypeAlias = pl.DataFrame | pa.Table | SpilledRows


def record_batches(rows: JudgedRows, columns: list[str]) -> Iterator[pa.RecordBatch]:
    """``rows``' record batches (a chunk each: a bucket of the refresh's rows) with ``columns`` only."""
    batches = rows.to_arrow().to_batches() if isinstance(rows, pl.DataFrame) else rows.to_batches()
    for batch in batches:
        yield batch.select(columns)


def _num_rows(rows: JudgedRows) -> int:
    return rows.height if isinstance(rows, pl.DataFrame) else rows.num_rows


@dataclass(frozen=True, eq=False)
class JudgedPairs:
    """Battles the data already holds per (judge, unordered model pair), as sparse rows (the refresh's count).

    ``judge`` indexes :attr:`Posterior.judges` (-1 when the posterior has no named judge: the battles of any
    judge), ``first`` < ``second`` index :attr:`Posterior.models`, ``n`` counts battles in either order.  Why
    rows and not a judge × model × model array: with 400 models and 50,000 voter-judges that array is 8e9
    cells, while the rows are at most the judged (judge, pair)s, which the cells already bound.
    """

    judge: np.ndarray
    first: np.ndarray
    second: np.ndarray
    n: np.ndarray

    def __post_init__(self) -> None:
        sizes = {np.asarray(getattr(self, name)).shape for name in ("judge", "first", "second", "n")}
        if len(sizes) != 1 or len(next(iter(sizes))) != 1:
            raise ValueError("posterior: judged pairs must be four columns of one length")

    def dense(self, judge_index: np.ndarray, m: int) -> np.ndarray:
        """``counts[i, a, b]``: battles of judge ``judge_index[i]`` between a and b (symmetric); index -1 → any judge.

        What :func:`select_comparisons` takes as ``counts``: only the judges a plan is for become arrays.
        """
        idx = np.asarray(judge_index, np.int64)
        judge, first, second, n = (np.asarray(a, np.int64) for a in (self.judge, self.first, self.second, self.n))
        counts = np.zeros((idx.size, m, m), np.int64)
        named = idx >= 0
        slot = np.full(int(max(judge.max(initial=-1), idx.max(initial=-1))) + 2, -1, np.int64)  # judge → plan row
        slot[idx[named]] = np.nonzero(named)[0]
        row = slot[np.where(judge < 0, slot.size - 1, judge)]  # the last slot stays -1: "any judge" rows
        kept = row >= 0
        np.add.at(counts, (row[kept], first[kept], second[kept]), n[kept])
        if not named.all():  # "any judge": every row, whoever judged it
            total = np.zeros((m, m), np.int64)
            np.add.at(total, (first, second), n)
            counts[~named] = total
        return counts + counts.transpose(0, 2, 1)

    @classmethod
    def of_frame(cls, frame: JudgedRows, models: Sequence[str], judges: Sequence[str]) -> JudgedPairs:
        """From rows (judge, model_a, model_b, n) of names (strings or dictionary codes): rows of other judges or
        models, and self-battles, are dropped; with no named judge every row counts as "any judge" (-1).

        Memory: the four int32 columns it returns (16 bytes a row, as ``posterior.npz`` stores them) and one chunk's
        coded keys and sort.  The names are coded through their dictionary (a lookup table of the names it holds, then
        a take), never by joins on the strings (their hash tables took +630 MB for 1.5M rows, the refresh's peak at
        bench/scale.py --scale 0.1) nor by decoding them; each chunk (or, past :data:`SUM_ROWS`, each slice of
        :data:`CODE_ROWS` rows) is summed on its own, and they are summed together only when their keys overlap.  The
        refresh's rows (:attr:`~biasboard.transforms.snapshot.CellTotals.judge_pairs`) are a chunk per judge bucket,
        in judge order and summed already: their keys come out in order and that last sum is skipped.  Why
        not the key and count of every row first, as before: at bench/scale.py's full 2N (5.16M rows, coded after
        the fit) those 16 bytes a row, with the int64 counts kept and copied to int32 for the file, made +216 MB
        over the fit's held memory, the refresh's peak then.
        """
        m = max(len(models), 1)
        code_model, code_judge = _NameCoder(models), _NameCoder(judges)
        columns = tuple(np.empty(_num_rows(frame), np.int32) for _ in _JUDGED_FIELDS)
        filled, last_key, in_order = 0, -1, True
        for chunk in record_batches(frame, ["judge", "model_a", "model_b", "n"]):
            # A bucket's chunk is summed whole (its rows are in no order: a slice of it would overlap the next);
            # a chunk past SUM_ROWS (one table of every row) a slice at a time, summed together below.
            segment = chunk.num_rows if chunk.num_rows <= SUM_ROWS else CODE_ROWS
            for start in range(0, chunk.num_rows, max(segment, 1)):
                keys, counts = _coded_rows(chunk.slice(start, segment), m, code_model, code_judge if judges else None)
                size = _sum_by_key(keys, counts)
                if size:
                    in_order = in_order and int(keys[0]) > last_key
                    last_key = int(keys[size - 1])
                    _decode_keys(keys[:size], counts[:size], m, columns, filled)
                    filled += size
        columns = tuple(column[:filled] for column in columns)
        if not in_order:  # the chunks' keys overlap: summed again, from the columns (freed as the keys are made)
            judge, first, second, n = columns
            keys = ((judge.astype(np.int64) + 1) * m + first) * m + second
            counts = n.astype(np.int64)
            del columns, judge, first, second, n
            filled = _sum_by_key(keys, counts)
            columns = tuple(np.empty(filled, np.int32) for _ in _JUDGED_FIELDS)
            _decode_keys(keys[:filled], counts[:filled], m, columns, 0)
        return cls(*columns)


def _coded_rows(
    rows: pa.RecordBatch, m: int, code_model: _NameCoder, code_judge: _NameCoder | None
) -> tuple[np.ndarray, np.ndarray]:
    """Rows (judge, model_a, model_b, n) as (judge, pair) keys and their counts, coded a slice of :data:`CODE_ROWS`
    at a time: rows of judges or models not coded, self-battles and rows of no count left out.  Without
    ``code_judge`` every row is "any judge" (-1)."""
    keys, counts = np.empty(rows.num_rows, np.int64), np.empty(rows.num_rows, np.int64)
    size = 0
    for lo in range(0, rows.num_rows, CODE_ROWS):
        part = rows.slice(lo, CODE_ROWS)
        j = code_judge(part.column(0)) if code_judge is not None else np.full(part.num_rows, -1, np.int64)
        a, b = code_model(part.column(1)), code_model(part.column(2))
        n = part.column(3)
        keep = (a >= 0) & (b >= 0) & (a != b) & n.is_valid().to_numpy(zero_copy_only=False)  # (a row of nulls)
        if code_judge is not None:
            keep &= j >= 0
        kept = int(keep.sum())
        keys[size : size + kept] = (((j + 1) * m + np.minimum(a, b)) * m + np.maximum(a, b))[keep]
        counts[size : size + kept] = n.fill_null(0).to_numpy(zero_copy_only=False)[keep]
        size += kept
    return keys[:size], counts[:size]


def _decode_keys(keys: np.ndarray, counts: np.ndarray, m: int, columns: tuple[np.ndarray, ...], at: int) -> None:
    """Write coded (judge, pair) keys and their counts into :class:`JudgedPairs`' int32 ``columns`` from row ``at``,
    a slice of :data:`CODE_ROWS` at a time (no int64 temporary of every row).  A count past int32 is stored as
    int32's largest (over 2.1 billion battles of one pair by one judge: a plan reads it as "judged" all the same)."""
    judge, first, second, n = columns
    top = np.iinfo(np.int32).max
    for lo in range(0, keys.size, CODE_ROWS):
        key, at_lo = keys[lo : lo + CODE_ROWS], at + lo
        judge[at_lo : at_lo + key.size] = key // (m * m) - 1
        first[at_lo : at_lo + key.size] = key // m % m
        second[at_lo : at_lo + key.size] = key % m
        n[at_lo : at_lo + key.size] = np.minimum(counts[lo : lo + CODE_ROWS], top)


def _sum_by_key(keys: np.ndarray, counts: np.ndarray) -> int:
    """Sum ``counts`` by ``keys`` in place (both views of one length): the distinct keys, sorted, and their sums come
    first; returns how many.  Integer counts: the sums do not depend on the order of equal keys.  In place, not
    :func:`~biasboard.ranking.data._group_sum` (the cells' fold): that one packs a copy of the key before it sorts,
    8 bytes a row more at the peak this function sets after the fit."""
    if not keys.size:
        return 0
    if keys.size == 1 or bool(np.all(keys[1:] > keys[:-1])):
        return keys.size  # sorted and distinct already (a bucket the refresh summed, in the key's order)
    order = np.argsort(keys)
    sorted_keys = keys[order]
    sorted_counts = counts[order]
    del order
    first_of_key = np.empty(keys.size, bool)
    first_of_key[0] = True
    np.not_equal(sorted_keys[1:], sorted_keys[:-1], out=first_of_key[1:])
    starts = np.flatnonzero(first_of_key)
    del first_of_key
    distinct = starts.size
    keys[:distinct] = sorted_keys[starts]
    counts[:distinct] = np.add.reduceat(sorted_counts, starts)
    return distinct


class _NameCoder:
    """Names → their index in ``names`` (-1: not there, or null), for string or dictionary-encoded Arrow columns.

    A dictionary column is coded through a lookup table over its dictionary (the refresh's judge buckets share one
    copy of the global dictionary: the table is built once and kept while the dictionary is the same); a column of
    strings is dictionary-encoded first, a slice at a time.
    """

    def __init__(self, names: Sequence[str]) -> None:
        self.index = {name: i for i, name in enumerate(names)}
        self._dictionary: pa.Array | None = None
        self._table = np.zeros(0, np.int64)

    def __call__(self, column: pa.Array) -> np.ndarray:
        if not pa.types.is_dictionary(column.type):
            column = column.dictionary_encode()
        dictionary = column.dictionary
        if self._dictionary is None or not dictionary.equals(self._dictionary):
            names = dictionary.cast(pa.string()).to_pylist()
            self._table = np.array([self.index.get(name, -1) for name in names] + [-1], np.int64)
            self._dictionary = dictionary
        indices = column.indices.fill_null(len(self._table) - 1)  # a null name: the table's last entry, -1
        return self._table[indices.to_numpy(zero_copy_only=False)]


#: Rows of (judge, model_a, model_b, n) names coded at once by :meth:`JudgedPairs.of_frame` (memory: a slice's).
CODE_ROWS = 1 << 18
#: Rows of one chunk :meth:`JudgedPairs.of_frame` sums whole (a judge bucket's: ~215k at bench/scale.py's full 2N);
#: a bigger chunk is summed a slice at a time, and the slices together after.
SUM_ROWS = 1 << 20


@dataclass(frozen=True, eq=False)
class Posterior:
    """What acquisition needs from a fit: θ mean and covariance, k, and each judge's order effects.

    ``position[j]`` is γ_j (logit added to the first-shown model), ``discrimination[j]`` is a_j (scale
    on θ differences), ``tie[j]`` is the Davidson ν_j.  ``judges`` may be empty: then only the
    pseudo-judge :data:`ANY_JUDGE` exists, with ``global_position``, a = 1 and ``global_tie``.
    ``component[m]`` numbers the comparison components of the fit (empty: one component); ``mean`` and
    ``cov`` are centred within each component, so they say nothing of one component's level against
    another's (:meth:`level_cov` adds what the θ prior says of it).  ``judged``: the battles the data held per
    (judge, pair) when the posterior was made (None: a posterior written before they were recorded), what
    ``--no-repeat`` and round-robin read (:meth:`past_counts`).
    """

    models: tuple[str, ...]
    mean: np.ndarray
    cov: np.ndarray
    k: int
    judges: tuple[str, ...] = ()
    position: np.ndarray = field(default_factory=lambda: np.zeros(0))
    discrimination: np.ndarray = field(default_factory=lambda: np.zeros(0))
    tie: np.ndarray = field(default_factory=lambda: np.zeros(0))
    global_position: float = 0.0
    global_tie: float = 0.0
    method: str = ""
    component: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    judged: JudgedPairs | None = None

    def __post_init__(self) -> None:
        m = len(self.models)
        mean = np.asarray(self.mean, float)
        cov = np.asarray(self.cov, float)
        if mean.shape != (m,) or cov.shape != (m, m):
            raise ValueError(f"posterior: mean {mean.shape} and cov {cov.shape} do not match {m} models")
        if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(cov))):
            raise ValueError("posterior: mean or covariance holds NaN/inf")
        if len(set(self.models)) != m:
            raise ValueError("posterior: model names are not unique")
        if m < 2:
            raise ValueError("posterior: at least two models are needed to plan a comparison")
        nj = len(self.judges)
        for name in ("position", "discrimination", "tie"):
            if np.asarray(getattr(self, name)).shape != (nj,):
                raise ValueError(f"posterior: {name} must have one value per judge ({nj})")
        if self.k < 1:
            raise ValueError(f"posterior: k must be >= 1, got {self.k}")
        if np.asarray(self.component).size not in (0, m):
            raise ValueError(f"posterior: component must have one value per model ({m}) or none")
        if self.judged is not None:
            judge, first, second = (np.asarray(a) for a in (self.judged.judge, self.judged.first, self.judged.second))
            bad = (judge != -1) if nj == 0 else (judge < 0) | (judge >= nj)
            bad |= (first < 0) | (second >= m) | (first >= second)
            if bad.any():
                raise ValueError("posterior: judged pairs name a judge or model the posterior does not hold")

    @property
    def n_models(self) -> int:
        return len(self.models)

    @property
    def n_components(self) -> int:
        """Comparison components of the fit (models no chain of battles links are in different ones)."""
        component = np.asarray(self.component)
        return int(np.unique(component).size) if component.size else 1

    def level_cov(self) -> np.ndarray:
        """θ's covariance with each component's level as uncertain as the θ prior makes it.

        The fit centres each component on its own, so ``cov`` holds the contrasts within components only and
        makes a contrast across two of them look as sure as one within (the centring, not the data, fixed
        it).  With θ_m ~ N(0, σ²) a priori (σ = :data:`COMPONENT_LEVEL_SD`, the fit's prior), the mean of a
        component's n_c ratings is N(0, σ²/n_c) and no battle informs it, independent of the contrasts: its
        variance is added to every pair of models within that component.  Then a pair linking two components
        has the information it really has, and P(top k) over the board reflects the unknown levels.
        """
        cov = 0.5 * (np.asarray(self.cov, float) + np.asarray(self.cov, float).T)
        if self.n_components < 2:
            return cov
        component = np.asarray(self.component)
        sizes = np.bincount(component)
        level_var = COMPONENT_LEVEL_SD**2 / sizes[component]
        same = component[:, None] == component[None, :]
        return cov + np.where(same, level_var[:, None], 0.0)

    def judge_effects(self, judges: Sequence[str] | None) -> tuple[tuple[str, ...], np.ndarray, np.ndarray, np.ndarray]:
        """(names, γ, a, ν) of the judges to plan for; None → every judge, or ANY_JUDGE if there are none."""
        if (judges is None or len(judges) == 0) and not self.judges:
            return (ANY_JUDGE,), np.array([self.global_position]), np.ones(1), np.array([self.global_tie])
        judges, idx = self.judge_index(judges)
        glob = idx < 0
        safe = np.where(glob, 0, idx)

        def pick(values: np.ndarray, default: float) -> np.ndarray:
            if len(values) == 0:
                return np.full(idx.size, default, float)
            return np.where(glob, default, np.asarray(values, float)[safe])

        return (
            tuple(judges),
            pick(self.position, self.global_position),
            pick(self.discrimination, 1.0),
            pick(self.tie, self.global_tie),
        )

    def judge_index(self, judges: Sequence[str] | None) -> tuple[tuple[str, ...], np.ndarray]:
        """(names, index into :attr:`judges`) of the judges to plan for: None → every judge, or ANY_JUDGE (-1) if
        there are none; :data:`POPULATION_JUDGE` (unless a judge of the fit has that name) is -1 too; a ``KeyError``
        naming a judge the fit does not hold."""
        if judges is None or len(judges) == 0:
            judges = self.judges or (ANY_JUDGE,)
        # A judge named twice is one judge: two slots of it would each be "fresh" for the same pair (--no-repeat gave
        # it a pair twice) and JudgedPairs.dense fills only one of them with its past.
        judges = tuple(dict.fromkeys(judges))
        position = self._judge_position
        index = []
        for name in judges:
            if name in position:
                index.append(position[name])
            elif name in (ANY_JUDGE, POPULATION_JUDGE):
                index.append(-1)
            else:
                raise KeyError(f"judge {name!r} judged no battle of the fit ({self._judges_said()})")
        return tuple(judges), np.array(index, dtype=np.int64)

    @functools.cached_property
    def _judge_position(self) -> dict[str, int]:
        """Each judge's index in :attr:`judges`: a lookup per name planned for, where ``tuple.index`` scanned the
        judges for each (every judge of 20,000 voter-judges: 3.3 s; 50,000: ~20 s, before the plan's size check)."""
        return {name: i for i, name in enumerate(self.judges)}

    def _judges_said(self, listed: int = 10) -> str:
        """The fit's judges for an error message: the first ``listed`` by name and how many (a board of voter-judges
        named all 50,000 in one line), and :data:`POPULATION_JUDGE`, which is always there to plan for."""
        names = ", ".join(self.judges[:listed]) or "none"
        more = f", ... ({len(self.judges):,} in all)" if len(self.judges) > listed else ""
        return f"judges: {names}{more}; or {POPULATION_JUDGE!r}, a new judge of the population"

    def past_counts(self, judges: Sequence[str] | None) -> np.ndarray | None:
        """``counts[i, a, b]``: battles the data held between a and b by the i-th judge planned for (ANY_JUDGE: by
        any judge), the ``counts`` of :func:`select_comparisons`; None when the posterior predates the counts."""
        if self.judged is None:
            return None
        return self.judged.dense(self.judge_index(judges)[1], self.n_models)

    # ------------------------------------------------------------------ storage in a snapshot

    def to_bytes(self) -> bytes:
        """An ``.npz`` (no pickles: names are stored as unicode arrays) holding every field, compressed.

        Why compressed: the judged pairs' codes are most of it, and they compress well (small judge, model and
        count codes, sorted by judge): bench/scale.py's full 2N posterior held 84 MB stored and 13 MB deflated, which
        took 2.8 s to write and read back as fast.  The snapshot stays smaller, and so does the fit's peak memory,
        which holds the file's bytes beside the arrays they came from."""
        arrays: dict[str, Any] = dict(
            models=np.array(self.models, dtype=str),
            mean=np.asarray(self.mean, float),
            cov=np.asarray(self.cov, float),
            k=np.array(self.k, dtype=np.int64),
            judges=np.array(self.judges, dtype=str),
            position=np.asarray(self.position, float),
            discrimination=np.asarray(self.discrimination, float),
            tie=np.asarray(self.tie, float),
            global_position=np.array(self.global_position, float),
            global_tie=np.array(self.global_tie, float),
            method=np.array(self.method, dtype=str),
            component=np.asarray(self.component, dtype=np.int64),
            **self._judged_arrays(),
        )
        buffer = io.BytesIO()
        np.savez_compressed(buffer, **arrays)
        return buffer.getvalue()

    def _judged_arrays(self) -> dict[str, np.ndarray]:
        """:attr:`judged` as the ``.npz``'s ``judged_*`` arrays (none when unknown: an old file reads the same)."""
        if self.judged is None:
            return {}
        # int32: 16 bytes a row (1M rows, 50,000 voters' battles over 400 models: 16 MB), half of int64's
        return {f"judged_{name}": np.asarray(getattr(self.judged, name), np.int32) for name in _JUDGED_FIELDS}

    @classmethod
    def from_bytes(cls, data: bytes, source: str = "posterior.npz") -> Posterior:
        """Inverse of :meth:`to_bytes`; a clear ``ValueError`` naming ``source`` when a field is missing."""
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as z:
                get = {name: z[name] for name in z.files}
        except Exception as err:  # numpy raises several types for a corrupt file
            raise ValueError(f"{source}: not a readable .npz ({err})") from None
        missing = [n for n in ("models", "mean", "cov", "k") if n not in get]
        if missing:
            raise ValueError(f"{source}: missing {', '.join(missing)}")
        empty = np.zeros(0)
        judges = tuple(str(j) for j in get.get("judges", np.zeros(0, str)).tolist())
        return cls(
            models=tuple(str(m) for m in get["models"].tolist()),
            mean=get["mean"],
            cov=get["cov"],
            k=int(get["k"]),
            judges=judges,
            position=get.get("position", empty),
            discrimination=get.get("discrimination", empty),
            tie=get.get("tie", empty),
            global_position=float(get.get("global_position", 0.0)),
            global_tie=float(get.get("global_tie", 0.0)),
            method=str(get.get("method", "")),
            component=get.get("component", np.zeros(0, np.int64)),
            judged=JudgedPairs(*(get[f"judged_{n}"] for n in _JUDGED_FIELDS)) if "judged_n" in get else None,
        )


#: :class:`JudgedPairs`' columns, stored as ``judged_<name>`` in ``posterior.npz``.
_JUDGED_FIELDS = ("judge", "first", "second", "n")


def judged_names(judged: JudgedRows) -> set[str]:
    """The judges that rows (judge, model_a, model_b, n) name: of a dictionary column, the names its codes use (the
    refresh's millions of rows are not decoded to strings for it)."""
    names: set[str] = set()
    for batch in record_batches(judged, ["judge"]):
        chunk = batch.column(0)
        if pa.types.is_dictionary(chunk.type):
            used = np.unique(chunk.indices.drop_null().to_numpy(zero_copy_only=False))
            chunk = chunk.dictionary.take(pa.array(used, pa.int64()))
        names.update(name for name in chunk.cast(pa.string()).unique().to_pylist() if name is not None)
    return names


def posterior_from_fit(fit, judged: JudgedRows | None = None) -> Posterior:
    """The :class:`Posterior` of a :class:`~biasboard.ranking.result.FitResult`.

    Judge effects are the fit's named effects (:attr:`~biasboard.ranking.result.FitResult.judges`; judge
    ``'*'`` is global, except its position toward a reference: :func:`population_position`; the trusted anchors'
    rater is left out, and with ``judged`` a judge of no battle):
    ``position`` → γ_j (a judge's whole effect: its excess over a reference plus the reference's), ``discrimination``
    → a_j, ``tie`` → ν_j.  A naive fit has no judge effects: one pseudo-judge with no position effect, a = 1 and no
    ties (the naive model counts ties as half wins).  ``judged``: rows (judge, model_a, model_b, n) of the battles the
    fit's data holds per judge and pair (the refresh's :attr:`~biasboard.transforms.snapshot.CellTotals.judge_pairs`),
    kept as :attr:`Posterior.judged` for the judges and models of the fit.
    """
    effects = planned_effects(fit.bias)
    g_pos = _finite(effects.global_position, 0.0)
    frame = effects.judges
    if judged is not None:
        # A judge of single grades alone (a board of battles and grades) gave no pairwise verdict: its discrimination
        # and tie propensity are the prior's, which a plan of pairwise comparisons weighed as measured (it took an equal
        # share of every plan, "ν = 1, a = 1"), as an ordinal-only board's plan did before it was refused.
        frame = frame.filter(pl.col("judge").is_in(sorted(judged_names(judged))))
    judges = frame.get_column("judge").to_list()

    def estimate(effect: str, default: float) -> np.ndarray:
        values = frame.get_column(effect).to_numpy().astype(float)  # null (no row): NaN
        return np.where(np.isfinite(values), values, default)

    # A fit toward a reference reports a judge's position effect as its excess over the reference's (0 when tied to
    # it), the global coefficient; the judge's verdicts carry both.  Read as the whole effect, judges tied to a
    # reference of γ = -0.54 were planned as if they had no position bias at all.
    over_reference = frame.get_column("over_reference").to_numpy()
    pos = estimate("position", g_pos) + np.where(over_reference, g_pos, 0.0)
    disc = estimate("discrimination", 1.0)
    tie = estimate("tie", 0.0)
    g_tie = float(np.median(tie)) if tie.size else 0.0
    toward_reference = bool(over_reference.any())
    return Posterior(
        models=tuple(fit.models),
        mean=np.asarray(fit.rating, float),
        cov=np.asarray(fit.cov, float),
        k=int(fit.k),
        judges=tuple(judges),
        position=pos,
        discrimination=disc,
        tie=tie,
        global_position=population_position(pos) if toward_reference else g_pos,
        global_tie=g_tie,
        method=str(fit.method),
        component=np.asarray(fit.component, dtype=np.int64),
        judged=None if judged is None else JudgedPairs.of_frame(judged, tuple(fit.models), tuple(judges)),
    )


#: The judge effects a plan reads off a fit: γ_j, a_j and ν_j (:func:`posterior_from_fit`).
PLANNED_EFFECTS: tuple[str, ...] = ("position", "discrimination", "tie")


@dataclass(frozen=True)
class PlannedEffects:
    """What :func:`posterior_from_fit` reads off a fit's bias table.  ``judges``: a row per named judge (any judge
    effect), sorted by name, the anchors' rater and ``'*'`` left out, with each :data:`PLANNED_EFFECTS` estimate (null:
    no row) and ``over_reference`` (its position row holds its excess over a reference, or is tied to it: the row
    of a fit toward a reference, whose global position coefficient is the reference's own effect, not the judges'
    mean); ``global_position``: judge ``'*'``'s position estimate (None: no row)."""

    judges: pl.DataFrame
    global_position: float | None


def planned_effects(bias: pl.DataFrame) -> PlannedEffects:
    """:class:`PlannedEffects` of a bias table, by column.

    Why not :attr:`~biasboard.ranking.result.FitResult.judges`: it builds an object per effect, and with 50,000
    voter-judges (350k rows) that took +280 MB for a moment and kept +210 MB, the refresh's peak after the fit
    (bench/scale.py).  A judge's last row of an effect is the one read, as there.
    """
    rows = bias.filter(pl.col("effect").is_in(JUDGE_EFFECTS))
    # The trusted anchors are fitted as one more rater, under a name of the fit's own: not a judge of the battles, so
    # none a plan can ask or whose judged pairs --no-repeat sees (planned for, it took an equal share of every plan,
    # under --no-repeat pairs its anchors had already judged).
    frame = rows.select("judge").unique().filter(~pl.col("judge").is_in(["*", ANCHOR_JUDGE])).sort("judge")
    over_reference = pl.col("note").is_in([EXCESS_ROW_NOTE, TIED_ROW_NOTE]).fill_null(False).alias("over_reference")
    glob = None
    for effect in PLANNED_EFFECTS:
        part = rows.filter(pl.col("effect") == effect).unique("judge", keep="last", maintain_order=True)
        columns = [pl.col("estimate").cast(pl.Float64).alias(effect)]
        if effect == "position":
            star = part.filter(pl.col("judge") == "*").get_column("estimate")
            glob = star.item() if star.len() else None
            columns.append(over_reference)
        frame = frame.join(part.select("judge", *columns), on="judge", how="left", maintain_order="left")
    frame = frame.with_columns(pl.col("over_reference").fill_null(False))
    return PlannedEffects(frame, glob)


def population_position(positions: Sequence[float] | np.ndarray) -> float:
    """The position effect a new judge of the population (:data:`POPULATION_JUDGE`) is planned with, toward a
    reference: the judges' mean whole effect (the reference's effect plus the judges' mean excess over it).

    Why not the fit's global coefficient, as without a reference: there the judges' deviations are shrunk toward the
    global γ₀, which is thereby the model's estimate of the population mean.  Toward a reference the global coefficient
    *is* the reference's effect, and the excesses' prior (``Priors.excess_sd`` = 2) is centred on it wide on purpose,
    a device to keep the reference's effect its own verdicts', not a model of the population: the model says nothing
    of where a new judge's effect lies but what the judges' effects show.  A new judge's verdicts do not depend on
    which raters the board trusts, so '*' is planned as without a reference, from every judge of the fit (those of
    the reference included, each with the reference's effect): with the judges first-shown-biased by −0.8 logits and a
    reference without that bias, '*' was planned at the reference's −0.05, against −0.64 for the same judges without
    a reference (the truth over the five judges: −0.66).
    """
    return float(np.mean(positions)) if len(positions) else 0.0


def _finite(value, default: float) -> float:
    return float(value) if value is not None and np.isfinite(value) else float(default)


# ---------------------------------------------------------------------------------------------- information


def davidson_information(eta: np.ndarray, nu: np.ndarray | float) -> np.ndarray:
    """Fisher information about η of one Davidson verdict: ¼[(p_a + p_b) − (p_a − p_b)²] (σ(1−σ) at ν = 0)."""
    half = 0.5 * np.asarray(eta, float)
    log_norm = np.logaddexp(np.logaddexp(half, -half), np.log(np.maximum(nu, 1e-300)))
    p_a = np.exp(half - log_norm)
    p_b = np.exp(-half - log_norm)
    return 0.25 * ((p_a + p_b) - (p_a - p_b) ** 2)


def unit_information(mean: np.ndarray, gamma: np.ndarray, disc: np.ndarray, nu: np.ndarray) -> np.ndarray:
    """w[j, a, b]: information about θ_a − θ_b of the two-order unit {a first, b first} by judge j (symmetric)."""
    d = mean[:, None] - mean[None, :]
    g = np.asarray(gamma, float)[:, None, None]
    a = np.asarray(disc, float)[:, None, None]
    n = np.asarray(nu, float)[:, None, None]
    w = a**2 * (davidson_information(a * d + g, n) + davidson_information(-a * d + g, n))
    return w


def membership(draws: np.ndarray, k: int) -> np.ndarray:
    """P(model in top k) from posterior draws (rows = draws); k ≥ M gives all ones."""
    n, m = draws.shape
    if k >= m:
        return np.ones(m)
    top = np.argpartition(-draws, k - 1, axis=1)[:, :k]
    return np.bincount(top.ravel(), minlength=m) / n


def _sqrt_factor(cov: np.ndarray) -> np.ndarray:
    vals, vecs = np.linalg.eigh(0.5 * (cov + cov.T))
    return vecs * np.sqrt(np.clip(vals, 0.0, None))


def circle_schedule(m: int) -> np.ndarray:
    """Order of every unordered pair by the circle method: rounds in which each model plays once.

    Returns ``order[a, b]`` (symmetric, diagonal −1): the position of pair {a, b} in the schedule.
    """
    players = list(range(m)) + ([-1] if m % 2 else [])
    n = len(players)
    order = np.full((m, m), -1, dtype=np.int64)
    pos = 0
    ring = players[1:]
    for _ in range(n - 1):
        line = [players[0], *ring]
        for i in range(n // 2):
            a, b = line[i], line[n - 1 - i]
            if a >= 0 and b >= 0:
                order[a, b] = order[b, a] = pos
                pos += 1
        ring = ring[-1:] + ring[:-1]
    return order


# ---------------------------------------------------------------------------------------------- selection


@dataclass(frozen=True)
class Selection:
    """The chosen units, best first: unit u is (first[u] shown first, second[u]) then the reverse.

    ``score`` is the strategy's criterion at the moment of the pick (see the module docstring),
    ``info`` the unit's expected information gain (nats) at that moment, ``p_top_k`` the membership
    probabilities before any pick (from ``draws`` posterior draws).  ``stopped`` says why fewer units than
    the budget's were chosen ("" when they all were): :data:`STOP_NO_REPEAT`, :data:`STOP_PAIR_CAP` or
    :data:`STOP_JUDGE_CAP`; ``pair_cap``/``judge_cap`` are the units one pair / one judge could take.
    """

    strategy: str
    first: np.ndarray
    second: np.ndarray
    judge: np.ndarray  # index into ``judges``
    judges: tuple[str, ...]
    score: np.ndarray
    info: np.ndarray
    p_top_k: np.ndarray
    reasons: tuple[str, ...]
    stopped: str = ""
    pair_cap: int = 0
    judge_cap: int = 0

    @property
    def n_units(self) -> int:
        return int(self.first.size)

    def ordered(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(shown first, shown second, judge index) of every comparison: each unit's two orders in turn."""
        a = np.column_stack([self.first, self.second]).ravel()
        b = np.column_stack([self.second, self.first]).ravel()
        return a, b, np.repeat(self.judge, 2)

    def to_frame(self, posterior: Posterior) -> pl.DataFrame:
        """The plan table (:data:`PLAN_COLUMNS`): one row per ordered comparison, in acquisition order."""
        a, b, j = self.ordered()
        names = np.array(posterior.models, dtype=object)
        judge_names = np.array(self.judges, dtype=object)
        rep = np.repeat
        return pl.DataFrame(
            {
                "rank": np.arange(1, a.size + 1, dtype=np.int64),
                "unit": rep(np.arange(1, self.n_units + 1, dtype=np.int64), 2),
                "model_a": names[a].tolist(),
                "model_b": names[b].tolist(),
                "judge": judge_names[j].tolist() if a.size else [],
                "strategy": [self.strategy] * a.size,
                "score": rep(self.score, 2),
                "info_nats": rep(self.info, 2),
                "p_top_k_a": self.p_top_k[a],
                "p_top_k_b": self.p_top_k[b],
                "rating_a": rating_elo(posterior.mean)[a],
                "rating_b": rating_elo(posterior.mean)[b],
                "reason": list(rep(np.array(self.reasons, dtype=object), 2)) if a.size else [],
            },
            schema=PLAN_COLUMNS,
        )


def select_comparisons(
    posterior: Posterior,
    budget: int,
    strategy: str = "topk",
    *,
    k: int | None = None,
    judges: Sequence[str] | None = None,
    counts: np.ndarray | None = None,
    repeat: bool = True,
    seed: int = 0,
    draws: int = 2000,
    max_pair_share: float | None = None,
    max_judge_share: float | None = None,
) -> Selection:
    """The next ``budget`` ordered comparisons (⌊budget/2⌋ units of both orders) by ``strategy``.

    ``k`` defaults to the posterior's.  ``judges``: plan for these judges (each unit goes to the judge
    whose verdict is most informative for it); None → every judge of the fit.  ``counts``: comparisons
    already run, either ``counts[i, a, b]`` by the i-th judge planned for (:meth:`Posterior.past_counts`) or
    ``counts[a, b]`` by any judge (every judge then counts as having run them).  Round-robin serves the pair
    least compared (by the judges planned for) first.  With ``repeat=False`` no judge is given a pair it has
    already judged, in the past or earlier in this batch — the frozen-judge protocol, where re-asking a judge
    the same pair returns the cached verdict (prompts are not planned, so a pair judged on any prompt counts);
    another judge's verdict on it is new; :data:`POPULATION_JUDGE` is a new judge for every verdict, never held
    back by it.  Deterministic for a given ``seed``.

    The batch is spread: no pair gets more than its share of the ⌊budget/2⌋ units — an equal split over
    the pairs that may be planned, rounded up — and no judge more than an equal split over the judges,
    rounded up (each unit goes to the most informative judge that still has room).  Why: without a cap
    the greedy rule spends most of a batch on the single most uncertain boundary pair and all of it on
    the single most discriminating judge, so a round's verdicts rest on one pair and one judge's biases.
    ``max_pair_share`` / ``max_judge_share`` (a fraction of the units, in (0, 1]) replace those caps
    when asked, e.g. 1.0 to let one pair or one judge take the whole batch; they are limits, rounded down (at
    least one unit): 0.5 of 15 units is 7, not 8.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    if budget < 0:
        raise ValueError(f"budget must be non-negative, got {budget}")
    m = posterior.n_models
    k = posterior.k if k is None else int(k)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    k = min(k, m)
    for flag, share in (("max_pair_share", max_pair_share), ("max_judge_share", max_judge_share)):
        if share is not None and not 0.0 < share <= 1.0:
            raise ValueError(f"{flag} must be in (0, 1], got {share}")
    names, gamma, disc, nu = posterior.judge_effects(judges)
    mean = np.asarray(posterior.mean, float)
    cov = posterior.level_cov()
    rng = np.random.default_rng(np.random.SeedSequence([seed, STRATEGIES.index(strategy)]))

    w_all = unit_information(mean, gamma, disc, nu)  # (J, M, M)
    pair_counts, fresh = _past(counts, len(names), m, repeat)
    # A new judge of the population is a new judge for every verdict: nothing it could repeat, before or in the batch.
    new_judge = np.array([n == POPULATION_JUDGE and n not in posterior.judges for n in names], dtype=bool)
    if not repeat:
        fresh[new_judge] = True
    allowed = ~np.eye(m, dtype=bool) & fresh.any(axis=0)
    upper = np.triu(np.ones((m, m), dtype=bool), 1)
    units = budget // 2
    pair_cap = _cap(units, int((allowed & upper).sum()), max_pair_share)
    judge_cap = _cap(units, len(names), max_judge_share)
    batch_pairs = np.zeros((m, m), dtype=np.int64)  # units of this batch per pair (upper triangle)
    judge_units = np.zeros(len(names), dtype=np.int64)

    def has_room() -> np.ndarray:
        # The judge cap spreads a batch over judges' biases; a new judge of the population is a new judge for each
        # verdict, so it has none to spread (capped, --judge '*' --max-judge-share 0.5 planned half the budget).
        return (judge_units < judge_cap) | new_judge

    best_judge, w, assignable = _best_judges(w_all, has_room(), fresh)

    samples = mean + rng.standard_normal((draws, m)) @ _sqrt_factor(cov).T
    p0 = membership(samples, k)
    p = p0.copy()
    schedule = circle_schedule(m)

    first, second, judge, score, info, reasons = [], [], [], [], [], []
    component = np.asarray(posterior.component) if posterior.n_components > 1 else np.zeros(0, np.int64)
    stopped = ""
    for pick in range(units):
        room = allowed & upper & (batch_pairs < pair_cap)
        cand = room & assignable
        stopped = _stop_reason(allowed & upper, room, cand)
        if stopped:
            break
        d = np.diag(cov)
        var = np.clip(d[:, None] + d[None, :] - 2.0 * cov, 0.0, None)
        gain = 0.5 * np.log1p(w * var)
        if strategy == "topk":
            u = p * (1.0 - p)
            crit = (u[:, None] + u[None, :]) * gain
            if (crit[cand] > 0).any():
                a, b = _stronger_first(mean, *_argmax_pair(crit, cand))
                # P(top k) as the earlier picks' verdicts would leave it (the believer update), which chose this
                # pick; the plan's p_top_k columns are the snapshot's, before any pick, and said otherwise unlabelled.
                after = "" if pick == 0 else " after the plan's earlier picks"
                reason = f"top-k boundary: P(top {k}){after} {p[a]:.2f} / {p[b]:.2f}, info {gain[a, b]:.3f} nats"
            else:
                a, b, reason = _settled_boundary_pair(mean, gain, cand, k)
        elif strategy == "dopt":
            crit = gain
            a, b = _stronger_first(mean, *_argmax_pair(crit, cand))
            reason = f"max log-det gain {gain[a, b]:.3f} nats (Var(θa−θb) {var[a, b]:.3f})"
        elif strategy == "thompson":
            draw = samples[pick % draws]
            top = np.zeros(m, dtype=bool)
            top[np.argpartition(-draw, k - 1)[:k]] = True
            gap = draw[:, None] - draw[None, :]
            crossing = cand & (top[:, None] ^ top[None, :])
            pool = crossing if crossing.any() else cand
            crit = -np.abs(gap)
            a, b = _stronger_first(mean, *_argmax_pair(crit, pool))
            reason = (
                "sampled top-k boundary" if crossing.any() else "closest sampled pair"
            ) + f": sampled gap {abs(gap[a, b]):.3f}"
        elif strategy == "roundrobin":
            big = m * m + 1
            crit = -(pair_counts * big + schedule).astype(float)
            a, b = _stronger_first(mean, *_argmax_pair(crit, cand))
            before = _past_said(counts)
            reason = f"least compared pair ({int(pair_counts[a, b])} {before})"
        else:  # random
            ia, ib = np.nonzero(cand)
            c = int(rng.integers(ia.size))
            a, b = _stronger_first(mean, int(ia[c]), int(ib[c]))
            crit = np.zeros((m, m))
            reason = "uniform random pair"
        if component.size and component[a] != component[b]:  # what the pair is for, whatever the strategy's own words
            reason = f"links comparison components {component[a]} and {component[b]}; {reason}"
        first.append(a)
        second.append(b)
        judge.append(int(best_judge[a, b]))
        score.append(float(crit[a, b]) if strategy != "random" else float("nan"))
        info.append(float(gain[a, b]))
        reasons.append(reason)
        # Believer update: Σ loses the unit's rank-one part; draws are moved to the updated posterior.
        cov, samples = _believer_update(cov, samples, mean, a, b, w[a, b], rng)
        if strategy == "topk":
            p = membership(samples, k)
        pair_counts[a, b] += 2
        pair_counts[b, a] += 2
        batch_pairs[min(a, b), max(a, b)] += 1
        judge_units[judge[-1]] += 1
        if not repeat and not new_judge[judge[-1]]:  # that judge has now judged the pair: it may still go to another
            fresh[judge[-1], a, b] = fresh[judge[-1], b, a] = False
            allowed[a, b] = allowed[b, a] = bool(fresh[:, a, b].any())
        if judge_units[judge[-1]] == judge_cap and not new_judge[judge[-1]]:  # its share is spent: to the others
            best_judge, w, assignable = _best_judges(w_all, has_room(), fresh)
        elif not repeat:
            _rejudge_pair((best_judge, w, assignable), w_all, has_room(), fresh, (a, b))
    return Selection(
        strategy=strategy,
        first=np.array(first, dtype=np.int64),
        second=np.array(second, dtype=np.int64),
        judge=np.array(judge, dtype=np.int64),
        judges=names,
        score=np.array(score, float),
        info=np.array(info, float),
        p_top_k=p0,
        reasons=tuple(reasons),
        stopped=stopped,
        pair_cap=pair_cap,
        judge_cap=judge_cap,
    )


def _stop_reason(plannable: np.ndarray, room: np.ndarray, candidates: np.ndarray) -> str:
    """Why no further unit can be planned ("" when one can): the caps are limits, never exceeded.

    ``plannable``: pairs some judge may still be given (``repeat=False``); ``room``: those below the pair cap;
    ``candidates``: those with a judge that may take them and has room.  Before, a batch whose every judge had
    spent its share went on giving units to the first judge (the most-informative choice among judges with no
    room is an argmax over -inf), past ``max_judge_share``.
    """
    if not plannable.any():
        return STOP_NO_REPEAT
    if not room.any():
        return STOP_PAIR_CAP
    if not candidates.any():
        return STOP_JUDGE_CAP
    return ""


def _cap(units: int, slots: int, share: float | None) -> int:
    """Most units one pair (or judge) may take: ``share`` of the units if given, else an equal split."""
    if share is not None:  # a limit: never more than that share of the batch (rounded down; at least one unit)
        return max(1, math.floor(share * units + 1e-9))
    return max(1, math.ceil(units / max(slots, 1)))


def _past(counts: np.ndarray | None, n_judges: int, m: int, repeat: bool) -> tuple[np.ndarray, np.ndarray]:
    """(comparisons per pair so far, ``fresh[j, a, b]``: judge j may be given the pair) from ``counts``.

    ``counts`` per planned judge (J × M × M) or by any judge (M × M), the comparisons between a and b in either order
    (symmetric, as :meth:`Posterior.past_counts`; one triangle alone reads the same); the pair counts round-robin
    reads are the sum over the judges planned for.  Without ``repeat`` a judge is fresh for a pair it has not judged.
    """
    if counts is None:
        per_judge = np.zeros((1, m, m))
    else:
        per_judge = np.asarray(counts, float)
        per_judge = per_judge[None] if per_judge.ndim == 2 else per_judge
        if per_judge.shape[1:] != (m, m) or per_judge.shape[0] not in (1, n_judges) or per_judge.ndim != 3:
            raise ValueError(f"counts must be {m}×{m} or {n_judges}×{m}×{m}, got {np.shape(counts)}")
    # The larger of the two halves, not their sum: the counts are symmetric already, and summed every past comparison
    # counted twice (round-robin's "26 before" read 52) while a planned unit added its two once, so a pair judged 3
    # times and planned once (5) still came before one judged 4 times.
    per_judge = np.maximum(per_judge, per_judge.transpose(0, 2, 1))
    pair_counts = per_judge.sum(axis=0)
    if repeat:
        return pair_counts, np.broadcast_to(np.True_, (n_judges, m, m))  # read only, and no judges x models² bytes
    return pair_counts, np.broadcast_to(per_judge == 0, (n_judges, m, m)).copy()


def _past_said(counts: np.ndarray | None) -> str:
    """How round-robin's reason names the comparisons it counted (:func:`_past`'s)."""
    if counts is None:
        return "earlier in this plan; past comparisons not known"
    return "before by these judges" if np.ndim(counts) == 3 else "before"


def _best_judges(w_all: np.ndarray, open_: np.ndarray, fresh: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per pair, the most informative judge among those with room left that may be given it, that judge's
    information, and whether there is such a judge."""
    eligible = open_[:, None, None] & fresh
    best = np.argmax(np.where(eligible, w_all, -np.inf), axis=0)
    return best, np.take_along_axis(w_all, best[None], axis=0)[0], eligible.any(axis=0)


def _rejudge_pair(
    chosen: tuple[np.ndarray, np.ndarray, np.ndarray],
    w_all: np.ndarray,
    open_: np.ndarray,
    fresh: np.ndarray,
    pair: tuple[int, int],
) -> None:
    """:func:`_best_judges` of the one pair just planned (in place, on ``chosen`` = its three arrays), now that
    its judge has judged it: O(judges), where recomputing every pair is O(judges × models²) a pick."""
    best, w, assignable = chosen
    a, b = pair
    eligible = open_ & fresh[:, a, b]
    j = int(np.argmax(np.where(eligible, w_all[:, a, b], -np.inf)))
    best[a, b] = best[b, a] = j
    w[a, b] = w[b, a] = w_all[j, a, b]
    assignable[a, b] = assignable[b, a] = bool(eligible.any())


def _settled_boundary_pair(mean: np.ndarray, gain: np.ndarray, cand: np.ndarray, k: int) -> tuple[int, int, str]:
    """The top-k rule's pick when every P(top k) is 0 or 1 in the draws (every score 0): the closest pair across the
    boundary of the top k by rating (the k-th against the (k+1)-th, when allowed), else the most informative pair.

    Why: with every score 0 the argmax took the first candidate pair, the two lowest-rated models on a settled
    board, labelled "top-k boundary" with the least information of any pair."""
    top = np.zeros(mean.size, dtype=bool)
    top[np.argsort(-mean, kind="stable")[:k]] = True
    crossing = cand & (top[:, None] ^ top[None, :])
    if crossing.any():
        a, b = _stronger_first(mean, *_argmax_pair(-np.abs(mean[:, None] - mean[None, :]), crossing))
        return a, b, f"top-{k} settled in every draw: the closest pair across it, info {gain[a, b]:.3f} nats"
    a, b = _stronger_first(mean, *_argmax_pair(gain, cand))
    return a, b, f"top-{k} settled in every draw, no pair across it: max log-det gain {gain[a, b]:.3f} nats"


def _stronger_first(mean: np.ndarray, a: int, b: int) -> tuple[int, int]:
    """The pair with the (currently) stronger model first: shown first in the unit's first order.

    Ordered before the reason is written, so its "P(top k) a / b" reads in the plan's model_a / model_b order
    (it was written before the swap, the two numbers then in the other order from the row's columns).
    """
    return (b, a) if mean[b] > mean[a] else (a, b)


def _argmax_pair(crit: np.ndarray, mask: np.ndarray) -> tuple[int, int]:
    """(a, b) of the largest ``crit`` where ``mask``; ties go to the first in row-major order."""
    flat = np.where(mask, crit, -np.inf).ravel()
    i = int(np.argmax(flat))
    m = crit.shape[0]
    return i // m, i % m


def _believer_update(
    cov: np.ndarray, samples: np.ndarray, mean: np.ndarray, a: int, b: int, w: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Condition N(μ, Σ) on y = θ_a − θ_b + ε, ε ~ N(0, 1/w), observed at y = μ_a − μ_b (mean unchanged).

    Σ' = Σ − Σx xᵀΣ / (v + 1/w); a draw θ moves by Matheron's rule θ + K (μ_a − μ_b + ε − (θ_a − θ_b)),
    K = Σx / (v + 1/w), which turns draws of N(μ, Σ) into draws of N(μ, Σ').
    """
    if w <= 0:
        return cov, samples
    sx = cov[:, a] - cov[:, b]
    v = sx[a] - sx[b]
    denom = v + 1.0 / w
    if denom <= 0:
        return cov, samples
    gain = sx / denom
    cov = cov - np.outer(sx, sx) / denom
    eps = rng.standard_normal(samples.shape[0]) / np.sqrt(w)
    resid = (mean[a] - mean[b]) + eps - (samples[:, a] - samples[:, b])
    samples = samples + resid[:, None] * gain[None, :]
    return cov, samples
