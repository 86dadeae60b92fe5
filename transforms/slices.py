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
than the battles counted).  Order and blanks inside a label do not matter.

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
from collections.abc import Callable, Sequence

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
from biasboard.ranking.leaderboard import side_by_side
from biasboard.ranking.reference import ReferenceFit
from biasboard.schemas import summary as S
from biasboard.schemas.battle import SLICE_LABEL_SEPARATOR
from biasboard.schemas.cells import SLICE_KEYS
from biasboard.schemas.errors import InputError
from biasboard.transforms.ranks import rank_intervals

_LOG = logging.getLogger(__name__)

#: Default minimum battles for a slice to be fit (``refresh --slice-min-battles``).
DEFAULT_MIN_BATTLES = 200
#: The file the slice boards go to in the snapshot.
SLICES_FILE = "slices.parquet"


def parse_slices(text: str | None) -> tuple[str, ...]:
    """``--slices`` value ("category,language") → the slice keys; an unknown name is an InputError."""
    names = tuple(dict.fromkeys(n.strip() for n in (text or "").split(",") if n.strip()))
    unknown = [n for n in names if n not in SLICE_KEYS]
    if unknown:
        raise InputError(f"--slices: unknown slice column(s) {', '.join(unknown)} (known: {', '.join(SLICE_KEYS)})")
    return names


def fit_slices(
    cells: pa.Table,
    dimensions: Sequence[str],
    min_battles: int,
    fit: Callable[[pa.Table, int], ReferenceFit],
) -> tuple[pl.DataFrame, list[S.SliceInfo]]:
    """Every slice's side-by-side board (column ``slice`` first) and its summary entry.

    ``cells``: the merged pair cells; ``fit(cells, models)``: both fits of a slice's cells with the
    snapshot's own reference and model options (``models``: how many the slice has).
    Slices come in dimension order, then label order.
    """
    boards: list[pl.DataFrame] = []
    infos: list[S.SliceInfo] = []
    for dim in dimensions:
        column = cells.column(dim)
        if pa.types.is_dictionary(column.type):
            column = column.cast(pa.string())
        members = _label_members(pc.unique(column).to_pylist())
        for value, keys in members.items():
            part = cells.filter(pc.is_in(column, value_set=pa.array(keys, pa.string())))
            name = f"{dim}={value}"
            battles = int(pc.sum(part.column("n")).as_py())
            models = len(set(part.column("model_a").to_pylist()) | set(part.column("model_b").to_pylist()))
            info = S.SliceInfo(name, dim, value, battles, models, False, min_battles)
            if battles < min_battles:
                info.note = f"{battles} battles, fewer than the {min_battles} a slice needs to be fit: not fit"
            else:
                try:
                    fitted = fit(part, models)
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
            _LOG.info("slice %s: %d battles, %s", name, battles, "fit" if info.fitted else info.note)
            infos.append(info)
    return (pl.concat(boards) if boards else pl.DataFrame(schema={"slice": pl.String})), infos


def _label_members(keys: Sequence[str | None]) -> dict[str, list[str]]:
    """Each label (sorted) → the cell keys that list it: ``["a|b", "a"]`` → ``{"a": ["a|b", "a"], "b": ["a|b"]}``."""
    members: dict[str, list[str]] = {}
    for key in keys:
        if key is None:
            continue
        for label in dict.fromkeys(part.strip() for part in key.split(SLICE_LABEL_SEPARATOR)):
            if label:
                members.setdefault(label, []).append(key)
    return dict(sorted(members.items()))


def slice_config(config, models: int):
    """The model options for a slice of ``models`` models: top-k no larger than the slice."""
    return dataclasses.replace(config, k=max(1, min(config.k, models - 1)))
