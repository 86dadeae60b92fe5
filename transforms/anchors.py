"""Trusted anchors as data: every verdict kept by its id, aggregated into the cells of one rater.

Anchors are battle-shaped rows (:mod:`biasboard.schemas.battle`) whose verdict is trusted.  They are validated by the
ingest's own rules (a bad row is counted by reason and left out, never silently dropped) with one id set over all
anchor files, so a repeated ``battle_id`` is a duplicate and is counted once, while repeats of the same
pair, by the same or by different raters, are distinct verdicts and all count: agreement between raters
is evidence.  No ``prompt_id`` is needed.  Every row is then attributed to one rater,
:data:`~biasboard.ranking.reference.ANCHOR_JUDGE`, with no family of its own, and aggregated into pair
cells (one per ordered pair and length bin), so the fit and the gate hold O(cells) ≤ O(K), never a
K-long array per test.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

import polars as pl
from biasboard.ranking.reference import ANCHOR_JUDGE
from biasboard.schemas.errors import InputError
from biasboard.schemas.families import FamilyMap
from biasboard.schemas.names import AliasMap, canonical_names, unmatched_aliases_note
from biasboard.transforms import read
from biasboard.transforms.cells import IngestCounts, merge_cells, partial_cells
from biasboard.transforms.ingest import aliases_matched
from biasboard.transforms.validate import SeenIds

_LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class AnchorSet:
    """The anchors' pair cells (judge :data:`ANCHOR_JUDGE`), their row accounting and the raters named in them."""

    cells: pl.DataFrame
    counts: IngestCounts
    raters: tuple[str, ...]

    @property
    def k(self) -> int:
        """Verdicts kept (self-battles included; the fit uses them for position and length only)."""
        return self.counts.counted


def as_anchor_rows(batch: pl.DataFrame) -> pl.DataFrame:
    """A batch of anchor rows attributed to the anchor rater: ``judge`` replaced, any judge family cleared.

    A row whose rater is missing (null, empty or blank) keeps a null judge, so the ingest's rules reject it as
    ``missing:judge`` — as the audit, which reads the same files with their raters, does (the fit counted such
    rows while the audit rejected them).  A file without a ``judge`` column is all the anchor rater's."""
    if "judge" in batch.columns:
        named = pl.col("judge").cast(pl.String).str.strip_chars().str.len_chars() > 0
        judge = pl.when(named).then(pl.lit(ANCHOR_JUDGE)).otherwise(pl.lit(None, dtype=pl.String))
    else:
        judge = pl.lit(ANCHOR_JUDGE)
    out = batch.with_columns(judge.alias("judge"))
    if "judge_family" in out.columns:
        out = out.with_columns(pl.lit(None, dtype=pl.String).alias("judge_family"))
    return out


def _rater_names(batch: pl.DataFrame, aliases: AliasMap | None) -> list[str]:
    """The raters a batch of anchors names, as the rows' judges are read: trimmed, in NFC (an NFD and an NFC spelling
    are one rater) and renamed by ``aliases`` (``--aliases``: a rater named by an alias in one file and by its
    canonical name in another is one rater, as the audit, which reads the anchors' judges through the same map,
    counts it)."""
    if "judge" not in batch.columns:
        return []
    named = canonical_names(batch.get_column("judge").cast(pl.String).unique())
    if aliases is not None and aliases.aliases:
        named = named.replace(dict(aliases.aliases))
    return [v for v in named.to_list() if v]


def names_among(glob: str, names: Collection[str]) -> frozenset[str]:
    """Which of ``names`` (in :func:`canonical_names`' form) name a rater or a model in the anchor files under
    ``glob``: the ``--aliases`` entries the anchors use, which the battles' day manifests do not list.

    Why: an entry that renames an anchor rater (or a model only the anchors judge) matched something, and the note
    on entries that matched nothing must not name it.  Read only when some entry matched no battle or grade."""
    wanted = pl.Series(list(names), dtype=pl.String)
    found: set[str] = set()
    for day, files in read.list_input_days(glob, flag="--anchors").items():
        for _, _, batch in read.day_batches(day, files):
            for column in ("judge", "model_a", "model_b"):
                if column in batch.columns:
                    named = canonical_names(batch.get_column(column).cast(pl.String).drop_nulls().unique())
                    found.update(named.filter(named.is_in(wanted.implode())).to_list())
    return frozenset(found)


def unmatched_aliases(aliases: AliasMap | None, manifests: Iterable[Mapping], anchors: str | None = None) -> str | None:
    """The note naming the ``--aliases`` entries that renamed no counted row of the days of ``manifests`` (every day
    the state holds) nor name a rater or model of the ``anchors`` files (:func:`unmatched_aliases_note`); None when
    all matched, no map was given, or which matched is unknown (:func:`aliases_matched`).

    Why one function: refresh and backfill apply the same map to the same state, and said different things of it."""
    if aliases is None or not aliases.aliases:
        return None
    matched = aliases_matched(manifests)
    if matched is None:
        return None
    if anchors and (unmatched := set(aliases.aliases) - matched):
        matched |= names_among(anchors, unmatched)
    return unmatched_aliases_note(aliases, matched)


def read_anchors(glob: str, family_map: FamilyMap | None = None, aliases: AliasMap | None = None) -> AnchorSet:
    """Validate and aggregate every anchor file under ``glob`` (local or ``gs://``), its names renamed by ``aliases``
    (``--aliases``) as the battles' are: with the battles renamed and the anchors not, every anchor verdict on a
    renamed model was on a model the board does not have, and left out of the reference."""
    family_map = family_map or FamilyMap.with_user_rules()
    seen = SeenIds()
    parts, counts = [], IngestCounts()
    raters: set[str] = set()
    for day, files in read.list_input_days(glob, flag="--anchors").items():
        for f, offset, batch in read.day_batches(day, files):
            raters.update(_rater_names(batch, aliases))
            result = partial_cells(as_anchor_rows(batch), family_map, seen, f.path, offset, aliases=aliases)
            counts = counts + result.counts
            if result.counts.rejected:
                _LOG.warning(
                    "anchors %s: %d row(s) rejected: %s",
                    f.path,
                    sum(result.counts.rejected.values()),
                    result.counts.rejected,
                )
            parts.append(result.cells)
    if counts.counted == 0:
        raise InputError(f"--anchors: no valid trusted verdicts in {glob}")
    cells = pl.from_arrow(merge_cells(parts))
    assert isinstance(cells, pl.DataFrame)
    return AnchorSet(cells, counts, tuple(sorted(raters)))
