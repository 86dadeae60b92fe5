"""Per-slice boards (``refresh --slices category,language``): one naive and one corrected board per label.

Why in the fit stage and from the cells: the slice labels are keys of the pair
cells (:mod:`biasboard.schemas.cells`), so the one pass over the battles that
makes the overall cells also makes every slice's; a slice's board is the same
two fits on the cells of its label (summed over the other slice key by the
fit).  No battle is read twice.

A battle may belong to several slices of one dimension (Chatbot Arena's
categories overlap: a prompt can be coding *and* a hard prompt).  Its label
then lists them separated by ``|`` (:data:`~biasboard.schemas.battle.SLICE_LABEL_SEPARATOR`, e.g.
``coding|hard_prompts``; the FastChat importer writes them so): the battle is
still **one** cell row keyed by that whole label, so the overall board, which
sums over labels, counts it once, while the slice of each label it lists fits
the cells whose label contains it (so slices' battle counts may add up to more
than the battles counted).  Order and blanks inside a label do not matter, and
neither does case: ``Coding`` and ``coding`` are one slice (:func:`label_members`),
named by the spelling most of its battles carry, its note naming the others.

Unlabelled battles (null ``category``) count on the overall board and in no
``category`` slice.  A slice with fewer than ``min_battles`` battles is listed
in the summary with its count and not fit: a board from a few hundred verdicts
would be mostly prior.  A slice whose fit cannot be made (e.g. the reference
judge never judged in it) is listed with the reason instead of failing the
snapshot.  A fitted slice gets the overall board's rank intervals too, drawn
the same way (:func:`biasboard.transforms.ranks.rank_intervals`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
from biasboard.ranking.config import STYLE_EFFECTS
from biasboard.ranking.data import Dataset
from biasboard.ranking.fit import NO_LENGTHS_WARNING, STYLE_COVERAGE_PREFIX
from biasboard.ranking.leaderboard import side_by_side
from biasboard.ranking.reference import ReferenceFit
from biasboard.ranking.stream import JudgeBuckets, stream_dataset
from biasboard.schemas import summary as S
from biasboard.schemas.battle import SLICE_LABEL_SEPARATOR
from biasboard.schemas.cells import SLICE_KEYS
from biasboard.schemas.errors import InputError
from biasboard.schemas.names import in_name_form
from biasboard.transforms.ranks import rank_intervals

_LOG = logging.getLogger(__name__)

#: Default minimum battles for a slice to be fit (``refresh --slice-min-battles``).
DEFAULT_MIN_BATTLES = 200
#: The file the slice boards go to in the snapshot.
SLICES_FILE = "slices.parquet"
#: Below this share of its battles on pairs shown in both orders (by any judge), a slice is "shown in one order" and its
#: note says how its position effect was (or was not) told from quality (:func:`order_note`).
ONE_ORDER_SHARE = 0.1
#: A one-order slice whose every model was shown first in ½ ± this share of its battles tells position from quality
#: by that balance (:func:`first_share_range`): 0.1 keeps a fair coin's spread for a model of ~100 battles
#: (2 SD = 0.1) and calls a rule that puts some models first three times in five unbalanced.
BALANCED_FIRST_SHARE = 0.1


def parse_slices(text: str | None) -> tuple[str, ...]:
    """``--slices`` value ("category,language") → the slice keys; an unknown name is an InputError."""
    names = tuple(dict.fromkeys(n.strip() for n in (text or "").split(",") if n.strip()))
    unknown = [n for n in names if n not in SLICE_KEYS]
    if unknown:
        raise InputError(f"--slices: unknown slice column(s) {', '.join(unknown)} (known: {', '.join(SLICE_KEYS)})")
    return names


@dataclass(frozen=True)
class SlicePart:
    """One label's cells: their battles and models, and ``cells()`` — what the slice's fits take, made when
    the slice is fit (a context: a streamed data set is closed after its fits)."""

    label: str
    battles: int
    models: int
    cells: Callable[[], AbstractContextManager[pa.Table | Dataset]]
    streamed: bool = False  # its fits read the cells from disk a shard at a time
    both_orders: float | None = None  # :func:`both_orders_share` (None: no battle of known order)
    first_shares: tuple[float, float] | None = None  # :func:`first_share_range` (None: no battle of known order)
    other_spellings: tuple[str, ...] = ()  # the label's spellings besides ``label``, by case (:func:`label_members`)


class SliceSource:
    """The merged cells a refresh's slices are cut from: each dimension's labels as :class:`SlicePart`."""

    def parts(self, dim: str) -> Iterator[SlicePart]:
        raise NotImplementedError


class TableSlices(SliceSource):
    """The slices of the merged cells held in memory (a table): each label's rows filtered out of it."""

    def __init__(self, cells: pa.Table):
        self.table = cells

    def parts(self, dim: str) -> Iterator[SlicePart]:
        column = _as_strings(self.table.column(dim))
        sums = pa.table({"key": column, "n": self.table.column("n")}).group_by("key").aggregate([("n", "sum")])
        battles_of = {k: n for k, n in zip(sums["key"].to_pylist(), sums["n_sum"].to_pylist(), strict=True) if k}
        for label in label_members(battles_of):
            part = self.table.filter(pc.is_in(column, value_set=pa.array(label.keys, pa.string())))
            battles = int(pc.sum(part.column("n")).as_py() or 0)
            yield SlicePart(
                label.name,
                battles,
                _model_count(part),
                _held(part),
                both_orders=both_orders_share(part),
                first_shares=first_share_range(part),
                other_spellings=label.others,
            )


class BucketSlices(SliceSource):
    """The slices of merged cells on disk by judge bucket (a history the fit streams,
    :func:`~biasboard.transforms.state.load_cells_by_judge`): each label's rows filtered out of every bucket as it
    is read, and streamed through the slice's fits (:func:`~biasboard.ranking.stream.stream_dataset`), however
    small the slice.  Gathering the slices below the streaming size into memory instead raised the peak: on 2M
    battles in 4 categories of 500k, the overall board streamed at 505 MB and the slices, fit in memory one after
    the other, took the process to 949 MB (all in memory: 818 MB; every slice streamed: 657 MB).  Memory: one
    bucket, and each cell key's battles of known order summed by shown pair (at most keys × M² rows); every label
    reads the buckets three times (one pass to count, two to code)."""

    def __init__(self, buckets: JudgeBuckets):
        self.buckets = buckets

    def parts(self, dim: str) -> Iterator[SlicePart]:
        battles_of: dict[str, float] = {}
        models_of: dict[str, set[str]] = {}
        shown: list[pl.DataFrame] = []  # per bucket: battles of known order by (key, model_a, model_b)
        for table in self.buckets.tables():  # one pass: each cell key's battles, models and orders, by group-bys
            keyed = pa.table({"key": _as_strings(table.column(dim)), "n": table.column("n")})
            shown.append(_shown_pairs(table, keyed.column("key")))
            sums = keyed.group_by("key").aggregate([("n", "sum")]).to_pydict()
            for key, n in zip(sums["key"], sums["n_sum"], strict=True):
                if key is not None:
                    battles_of[key] = battles_of.get(key, 0.0) + float(n)
            for side in ("model_a", "model_b"):
                met = pa.table({"key": keyed.column("key"), "model": _as_strings(table.column(side))})
                pairs = met.group_by(["key", "model"]).aggregate([]).to_pydict()
                for key, model in zip(pairs["key"], pairs["model"], strict=True):
                    if key is not None:
                        models_of.setdefault(key, set()).add(model)
        orders = pl.concat(shown).group_by("key", "model_a", "model_b").agg(pl.col("n").sum()) if shown else None
        for label in label_members(battles_of):
            members = label.keys
            battles = int(sum(battles_of[k] for k in members))
            models = len(set().union(*(models_of[k] for k in members)))
            part = _FilteredBuckets(self.buckets, dim, tuple(members))
            order = None if orders is None else orders.filter(pl.col("key").is_in(list(members))).drop("key").to_arrow()
            yield SlicePart(
                label.name,
                battles,
                models,
                _streamed(part),
                streamed=True,
                both_orders=None if order is None else both_orders_share(order),
                first_shares=None if order is None else first_share_range(order),
                other_spellings=label.others,
            )


def _shown_pairs(table: pa.Table, key: pa.ChunkedArray) -> pl.DataFrame:
    """A bucket's battles of known order summed by (cell key, model shown first, model shown second): what
    :func:`both_orders_share` and :func:`first_share_range` of a streamed slice read, summed over its buckets."""
    return _known_rows(table, key=key).group_by("key", "model_a", "model_b").agg(pl.col("n").sum())


class _FilteredBuckets:
    """:class:`~biasboard.ranking.stream.JudgeBuckets` of the rows whose ``dim`` is one of ``keys``."""

    def __init__(self, buckets: JudgeBuckets, dim: str, keys: tuple[str, ...]):
        self.buckets, self.dim, self.keys = buckets, dim, pa.array(keys, pa.string())

    @property
    def n_rows(self) -> int:
        return sum(t.num_rows for t in self.tables())

    @property
    def n_buckets(self) -> int:
        return self.buckets.n_buckets

    def tables(self) -> Iterator[pa.Table]:
        for table in self.buckets.tables():
            yield table.filter(pc.is_in(_as_strings(table.column(self.dim)), value_set=self.keys))


def _held(table: pa.Table) -> Callable[[], AbstractContextManager[pa.Table]]:
    @contextmanager
    def cells() -> Iterator[pa.Table]:
        yield table

    return cells


def _streamed(part: _FilteredBuckets) -> Callable[[], AbstractContextManager[Dataset]]:
    @contextmanager
    def cells() -> Iterator[Dataset]:
        data = stream_dataset(part)
        try:
            yield data
        finally:
            if data.stream is not None:
                data.stream.close()

    return cells


def _as_strings(column: pa.ChunkedArray) -> pa.ChunkedArray:
    return column.cast(pa.string()) if pa.types.is_dictionary(column.type) else column


def _strings(column: pa.ChunkedArray) -> list[str]:
    return _as_strings(column).to_pylist()


def _model_count(table: pa.Table) -> int:
    return len(set(_strings(table.column("model_a"))) | set(_strings(table.column("model_b"))))


def fit_slices(
    cells: SliceSource,
    dimensions: Sequence[str],
    min_battles: int,
    fit: Callable[[pa.Table | Dataset, int, str, str], ReferenceFit],
    overall_warnings: Sequence[str] = (),
    style_removed: bool = False,
) -> tuple[pl.DataFrame, list[S.SliceInfo]]:
    """Every slice's side-by-side board (column ``slice`` first) and its summary entry.

    ``cells``: the merged pair cells (:class:`TableSlices` in memory, :class:`BucketSlices` on disk);
    ``fit(cells, models, dim, label)``: both fits of a slice's cells with the snapshot's own reference and model
    options (``models``: how many the slice has; ``dim``/``label``: which slice, for the anchors of that slice).
    ``overall_warnings``/``style_removed``: the overall board's warnings and whether it removes style, which a
    slice's note measures its own covariates against (:func:`coverage_note`).
    Slices come in dimension order, then label order.
    """
    boards: list[pl.DataFrame] = []
    infos: list[S.SliceInfo] = []
    for dim in dimensions:
        for part in cells.parts(dim):
            name = f"{dim}={part.label}"
            info = S.SliceInfo(name, dim, part.label, part.battles, part.models, False, min_battles)
            if part.battles < min_battles:
                info.note = f"{part.battles} battles, fewer than the {min_battles} a slice needs to be fit: not fit"
            else:
                try:
                    with part.cells() as slice_cells:
                        fitted = fit(slice_cells, part.models, dim, part.label)
                except InputError as err:
                    info.note = f"not fit: {err}"
                else:
                    board = side_by_side(fitted.naive, fitted.corrected)
                    boards.append(board.select(pl.lit(name).alias("slice"), pl.all()))
                    comparison = fitted.corrected.diagnostics.get("naive_vs_corrected") or {}
                    info.fitted, info.models = True, board.height
                    info.kendall_tau = comparison.get("kendall_tau")
                    info.top_k = fitted.corrected.k
                    info.ranks = rank_intervals(fitted.naive, fitted.corrected, fitted.config.seed)
                    said = order_note(part.both_orders, fitted, part.first_shares)
                    notes = (
                        split_note(board),
                        naive_note(fitted),
                        said,
                        left_off_note(fitted, position_said=bool(said)),
                        coverage_note(fitted, overall_warnings, style_removed),
                        gate_note(fitted),
                    )
                    info.note = "; ".join(n for n in notes if n)
            info.note = "; ".join(n for n in (info.note, spelling_note(part)) if n)
            done = ("fit, streamed" if part.streamed else "fit") if info.fitted else info.note
            done += f"; {info.note}" if info.fitted and info.note else ""
            _LOG.info("slice %s: %d battles, %s", name, part.battles, done)
            infos.append(info)
    return (pl.concat(boards) if boards else pl.DataFrame(schema={"slice": pl.String})), infos


def spelling_note(part: SlicePart) -> str:
    """What a slice whose label its battles spell several ways (by case) must say: the spellings read as this one.

    Empty when they spell it one way.  Why said: the slice's name is one spelling, and a reader counting a
    ``coding`` slice's battles in the log would miss those labelled ``Coding``."""
    if not part.other_spellings:
        return ""
    others = ", ".join(repr(spelling) for spelling in part.other_spellings)
    return f"its battles spell the label {part.label!r} also as {others} (labels are compared without case): one slice"


def split_note(board: pl.DataFrame) -> str:
    """What a fitted slice's reader must know when its battles fall into groups no battle links (its own
    comparison components, column ``component``): ranks, CIs and P(top k) hold within each group only, so two
    models ranked 1 are not tied.  Empty for a connected slice."""
    if board.is_empty() or board["component"].max() == 0:
        return ""
    groups = board.sort("component", "rank_corrected").group_by("component", maintain_order=True).agg("model")
    listed = "; ".join(", ".join(models) for models in groups["model"].to_list())
    return (
        f"its battles fall into {groups.height} groups no battle in the slice links ({listed}): ranks, CIs and "
        "P(top k) hold within each group, and ratings are not comparable across groups"
    )


def both_orders_share(cells: pa.Table) -> float | None:
    """Share of the battles of known order that sit on a pair seen in both orders (by any of the slice's judges):
    2·Σ min(n_ab, n_ba) over Σ n, a self-battle counting as balanced.  What separates position from quality without
    leaning on the model's transitivity; None when no battle's order is known (the fit then has no position effect
    to speak of).  Pooled over judges: voter-judges see a pair once each, in one order or the other, and the
    population effect they shrink to is told from quality by the pair's two orders across voters."""
    a, b = pl.col("model_a"), pl.col("model_b")
    known = _known_battles(cells)
    if known is None:
        return None
    pairs = known.group_by(
        pl.when(a < b).then(a).otherwise(b).alias("lo"),
        pl.when(a < b).then(b).otherwise(a).alias("hi"),
    ).agg(
        first=pl.when(a < b).then(pl.col("n")).when(a > b).then(0.0).otherwise(pl.col("n") / 2).sum(),
        n=pl.col("n").sum(),
    )
    balanced = pairs.select((2.0 * pl.min_horizontal("first", pl.col("n") - pl.col("first"))).sum()).item()
    return float(balanced / pairs["n"].sum())


def first_share_range(cells: pa.Table) -> tuple[float, float] | None:
    """The lowest and highest share of a model's battles (of known order, self-battles aside) in which it was shown
    first, over the slice's models.  Near ½ for every model (a left/right drawn at random, as LLMFAO's crowd saw it),
    each model's quality is measured as often in the first slot as in the second: the position effect's column is
    then orthogonal to every model's, and a slice showing each pair in one order still tells position from quality
    by that balance, not by the Bradley–Terry model's transitivity (which a fixed rule — first by name — leaves it
    to).  Measured (7 simulated models, 2 judges, 6 seeds, each pair kept in one order: ~3,000 battles): the judges'
    position estimates off the truth by 0.066 rms under a balanced (cyclic) rule, 0.109 first-by-name; 0.051 with
    every pair in both orders at twice the battles.  None when no battle's order is known."""
    known = _known_battles(cells)
    if known is None:
        return None
    sides = pl.concat(
        [
            known.filter(pl.col("model_a") != pl.col("model_b")).select(
                pl.col(side).alias("model"), pl.col("n"), (pl.col("n") * float(side == "model_a")).alias("first")
            )
            for side in ("model_a", "model_b")
        ]
    )
    shares = sides.group_by("model").agg(pl.col("first").sum() / pl.col("n").sum()).filter(pl.col("first").is_finite())
    if shares.is_empty():
        return None
    lo, hi = shares.select(pl.col("first").min().alias("lo"), pl.col("first").max().alias("hi")).row(0)
    return float(lo), float(hi)


def _known_battles(cells: pa.Table) -> pl.DataFrame | None:
    """The cells of known presentation order as (model_a shown first, model_b, n); None when they hold no battle."""
    if cells.num_rows == 0:
        return None
    known = _known_rows(cells)
    return None if known.is_empty() or known["n"].sum() <= 0 else known


def _known_rows(cells: pa.Table, **extra: pa.ChunkedArray) -> pl.DataFrame:
    """``extra`` columns beside (model_a shown first, model_b, n) of the cells whose presentation order is known."""
    columns = {**extra, **{k: _as_strings(cells.column(k)) for k in ("model_a", "model_b")}}
    frame = pl.from_arrow(pa.table({**columns, "n": cells.column("n").cast(pa.float64())}))
    assert isinstance(frame, pl.DataFrame)
    return frame.filter(pl.Series(_known_order(cells)))


def _known_order(cells: pa.Table) -> list[bool] | np.ndarray:
    if "order_known" not in cells.column_names:  # cells stored before the column existed: order known
        return [True] * cells.num_rows
    return cells.column("order_known").to_numpy()


def order_note(share: float | None, fitted: ReferenceFit, first_shares: tuple[float, float] | None = None) -> str:
    """What a slice's reader must know when its battles show each pair in one order only (or nearly so): no pair
    seen in both orders tells position bias from quality there.  Either its position correction was left off as
    prior-selected (the models shown first keep the bias in their ratings), or every model was shown first in about
    half its battles (``first_shares``, :func:`first_share_range`, within :data:`BALANCED_FIRST_SHARE` of ½) and
    that balance tells them apart, or it rests on the Bradley–Terry model's transitivity alone (a quality difference
    peculiar to the slice's matchups reads as position bias).  Empty when the slice has swapped pairs enough."""
    if share is None or share >= ONE_ORDER_SHARE:
        return ""
    why = (
        f"only {share:.0%} of its battles are on a pair shown in both orders (below {ONE_ORDER_SHARE:.0%}), "
        "so no swapped order separates position bias from model quality"
    )
    left_off = any(e["effect"] == "position" and not e["applied"] for e in fitted.unidentified)
    if left_off:
        return f"position bias is not corrected in this slice: {why}, and its position effect is prior-selected"
    if first_shares is not None and max(abs(v - 0.5) for v in first_shares) <= BALANCED_FIRST_SHARE:
        lo, hi = first_shares
        return (
            f"{why}; but every model was shown first in {lo:.0%}-{hi:.0%} of its battles, and that balance (as a "
            "left/right drawn at random gives) tells its position correction from quality"
        )
    return (
        f"its position correction rests on the Bradley-Terry model's transitivity alone: {why}, and a quality "
        "difference peculiar to its matchups would read as position bias"
    )


def naive_note(fitted: ReferenceFit) -> str:
    """What the slice's naive fit says of itself (its ``naive …`` warnings): a slice where a model never wins or never
    loses has no maximum-likelihood ratings and is fit with a prior, which the overall board warns of on its own
    battles but a slice said nothing of (its naive CI [−1269, 1278] published as if fit as asked)."""
    warnings = fitted.naive.diagnostics.get("warnings", [])
    return "; ".join(w for w in warnings if w.startswith("naive "))


def coverage_note(fitted: ReferenceFit, overall_warnings: Sequence[str], style_removed: bool) -> str:
    """What a slice's corrected board could not remove for want of the covariates in its own battles: no lengths
    (:data:`~biasboard.ranking.fit.NO_LENGTHS_WARNING`), style counts on only some of its battles, or on none while
    the overall board removes style.  The slice's fit warns of the first two, but only its naive warnings reached its
    note: a slice from a source that logs no lengths or no style counts (its battles 4% of the history, under the
    overall board's 95% threshold) was published as "corrected" with its verbosity or formatting advantage kept, and
    not a word.  A warning the overall board gives itself (no lengths anywhere) is not repeated."""
    corrected = fitted.corrected
    said = [
        w.split(" (log the counts")[0]  # (a slice has no style-kept board to read beside it)
        for w in corrected.diagnostics.get("warnings", [])
        if (w == NO_LENGTHS_WARNING or w.startswith(STYLE_COVERAGE_PREFIX)) and w not in overall_warnings
    ]
    glob = corrected.judges.get("*")
    if style_removed and not any(getattr(glob, f, None) is not None for f in STYLE_EFFECTS):
        said.append(
            "no battle of this slice carries the header, list and bold counts: its corrected board is not "
            "corrected for style, as the overall board is"
        )
    return "; ".join(said)


def gate_note(fitted: ReferenceFit) -> str:
    """What a slice's own gate corrected, with the reference's verdicts in the slice, when the board has a reference.

    The gate runs on each slice's battles and the reference's verdicts in that slice, so a slice's corrections need
    not be the overall board's; the overall board's warning says what its gate did, and no word said a slice's:
    a slice holding 5 of the reference's verdicts was published as "corrected" with none of the judges' excesses
    over it corrected (0 of 23; its naive and corrected orders the same), its note empty.  Empty without a gate."""
    gate = fitted.gate
    if gate is None:
        return ""
    corrected, _, tested = fitted.gate_counts()  # (prior-selected: not applied, not counted)
    return (
        f"the reference has {fitted.k:,} verdict(s) in this slice: its gate corrected {corrected} of "
        f"{tested} (judge, effect) excesses over the reference at level {gate.level}, the others tied to it"
    )


def left_off_note(fitted: ReferenceFit, position_said: bool) -> str:
    """The corrections a slice's board leaves off as prior-selected, by effect with its judges, and a fit that did not
    converge.  The overall board's warnings name only its own: a slice whose battles do not identify an effect (every
    battle of equal lengths, say) was published without it and without a word.  Position is left to
    :func:`order_note` when that said it (``position_said``); empty when nothing was left off."""
    judges: dict[str, list[str]] = {}
    for entry in fitted.unidentified:
        if not entry["applied"] and not (position_said and entry["effect"] == "position"):
            judges.setdefault(entry["effect"], []).append(entry["judge"])
    parts = []
    if judges:
        listed = "; ".join(
            f"{effect} of {', '.join(S.judge_label(n) for n in names)}" for effect, names in sorted(judges.items())
        )
        parts.append(
            f"not corrected in this slice, as prior-selected (its battles do not identify them; --apply-unidentified "
            f"forces them): {listed}"
        )
    if not fitted.corrected.converged:
        parts.append(f"its bias-aware fit did not converge (relative gradient {fitted.corrected.rel_grad:.2e})")
    return "; ".join(parts)


@dataclass(frozen=True)
class SliceLabel:
    """One slice of a dimension: its ``name``, the cell ``keys`` that list it, its ``others`` spellings by case."""

    name: str
    keys: tuple[str, ...]
    others: tuple[str, ...] = ()


def label_members(battles_of: Mapping[str, float]) -> list[SliceLabel]:
    """Each label (sorted by name) with the cell keys that list it: ``{"a|b": 5, "a": 3}`` → a: both keys, b: "a|b".

    Labels are compared without case: ``Coding`` and ``coding`` are one slice, named by the spelling with the most
    battles (``battles_of``: each cell key's), the first in sorted order on a tie.  Why: the ingest trims labels but
    keeps their case (the slice names a user wrote), so a log that spelled a category two ways split its battles over
    two boards, each fit on part of the evidence and one perhaps below ``--slice-min-battles``.  They are put in the
    names' Unicode form (NFC, :func:`~biasboard.schemas.names.in_name_form`) first: a composed and a decomposed
    ``français``, which display alike, were two slices.
    """
    keys_of: dict[str, list[str]] = {}
    spellings: dict[str, dict[str, float]] = {}
    for key, battles in battles_of.items():
        # in the names' Unicode form before the case fold: a decomposed "franc\u0327ais" (a macOS or JavaScript
        # export) is the slice "français" is, not a second one; one spelling, so the note names no other
        for label in dict.fromkeys(in_name_form(part.strip()) for part in key.split(SLICE_LABEL_SEPARATOR)):
            if label:
                keys = keys_of.setdefault(label.lower(), [])
                if key not in keys:  # "Coding|coding" lists the slice once
                    keys.append(key)
                count = spellings.setdefault(label.lower(), {})
                count[label] = count.get(label, 0.0) + battles
    out = []
    for folded, keys in keys_of.items():
        ranked = sorted(spellings[folded], key=lambda spelling: (-spellings[folded][spelling], spelling))
        out.append(SliceLabel(ranked[0], tuple(keys), tuple(sorted(ranked[1:]))))
    return sorted(out, key=lambda label: label.name)


def slice_config(config, models: int):
    """The model options for a slice of ``models`` models: top-k no larger than the slice, and no attribution of
    its moves (which correction moved each model: the report and summary show the main board's only; 6 gradient
    passes a slice at three corrections)."""
    return dataclasses.replace(config, k=max(1, min(config.k, models - 1)), attribution=False)
