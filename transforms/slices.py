"""Per-slice boards (``refresh --slices category,language``): one naive and one corrected board per label.

Why in the fit stage and from the cells: the slice labels are keys of the pair
cells (:mod:`biasboard.schemas.cells`), so the one pass over the battles that
makes the overall cells also makes every slice's; a slice's board is the same
two fits on the cells of its label (summed over the other slice key by the
fit).  No battle is read twice.

Unlabelled battles (null ``category``) count on the overall board and in no
``category`` slice.  A slice with fewer than ``min_battles`` battles is listed
in the summary with its count and not fit: a board from a few hundred verdicts
would be mostly prior.  A slice whose fit cannot be made (e.g. the reference
judge never judged in it) is listed with the reason instead of failing the
snapshot.
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
from biasboard.schemas.cells import SLICE_KEYS
from biasboard.schemas.errors import InputError

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
        labels = sorted(v for v in pc.unique(column).to_pylist() if v is not None)
        for value in labels:
            part = cells.filter(pc.equal(column, value))
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
            _LOG.info("slice %s: %d battles, %s", name, battles, "fit" if info.fitted else info.note)
            infos.append(info)
    return (pl.concat(boards) if boards else pl.DataFrame(schema={"slice": pl.String})), infos


def slice_config(config, models: int):
    """The model options for a slice of ``models`` models: top-k no larger than the slice."""
    return dataclasses.replace(config, k=max(1, min(config.k, models - 1)))
