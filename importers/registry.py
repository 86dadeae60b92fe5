"""The import formats by CLI name: converter, the file patterns a folder input is searched with, and a summary."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from biasboard.importers import alpacaeval, arenahard, fastchat, llmfao, mtbench, pba, scores
from biasboard.importers.common import ImportOptions, ImportResult, MissingColumn
from biasboard.schemas.errors import InputError


@dataclass(frozen=True)
class ImportFormat:
    name: str
    convert: Callable[[Sequence[Path], ImportOptions], ImportResult]
    patterns: tuple[str, ...]
    summary: str
    #: The columns the format cannot do without (what a file of another format is told it lacks).
    required: tuple[str, ...]
    #: The source records who cast each vote, so ``--voters`` can name every voter a judge.
    voters: bool = False
    #: The source gives lengths in characters and in words, so ``--length-unit`` chooses (else it has one unit).
    length_units: bool = False
    #: The source records the arena's own filters (``anony``, ``dedup_tag``): ``--anony-only``/``--sampled-only``.
    arena_filters: bool = False
    #: The format's own flags among ``--tie-band``, ``--baseline`` and ``--answers`` (given to another, refused).
    flags: frozenset[str] = frozenset()


FORMATS: dict[str, ImportFormat] = {
    f.name: f
    for f in (
        ImportFormat(
            "fastchat",
            fastchat.convert,
            fastchat.PATTERNS,
            "FastChat/arena clean_battle JSON",
            fastchat.REQUIRED,
            arena_filters=True,
        ),
        ImportFormat(
            "mtbench-pair",
            mtbench.convert,
            mtbench.PATTERNS,
            "FastChat llm_judge pair judgments (2 games)",
            mtbench.REQUIRED,
            flags=frozenset({"--answers"}),
        ),
        ImportFormat(
            "mtbench-single",
            scores.convert,
            scores.PATTERNS,
            "single-answer 1-10 grades → score rows",
            scores.REQUIRED,
            flags=frozenset({"--answers"}),
        ),
        ImportFormat(
            "alpacaeval",
            alpacaeval.convert,
            alpacaeval.PATTERNS,
            "AlpacaEval annotations",
            alpacaeval.REQUIRED,
            length_units=True,
            flags=frozenset({"--tie-band"}),
        ),
        ImportFormat(
            "llmfao",
            llmfao.convert,
            llmfao.PATTERNS,
            "LLMFAO comparison CSVs (left/right)",
            llmfao.REQUIRED,
            voters=True,
            length_units=True,
        ),
        ImportFormat(
            "pba",
            pba.convert,
            pba.PATTERNS,
            "Position-Bias-Analyzer judgments (both orders)",
            pba.REQUIRED,
            length_units=True,
        ),
        ImportFormat(
            "arena-hard",
            arenahard.convert,
            arenahard.PATTERNS,
            "arena-hard-auto model_judgment (2 games)",
            arenahard.REQUIRED,
            flags=frozenset({"--baseline", "--answers"}),
        ),
    )
}


def convert(fmt: ImportFormat, paths: Sequence[Path], options: ImportOptions) -> ImportResult:
    """``fmt.convert``; a file that lacks a column the format needs is told which formats its columns do fit.

    The usual cause of a missing column is a file of another tool given the wrong ``--format`` (FastChat's
    clean_battle JSON as AlpacaEval annotations): the error then names the format to try.
    """
    try:
        return fmt.convert(paths, options)
    except MissingColumn as err:
        # The most specific first (the most required columns): a Position-Bias-Analyzer file fits fastchat too, whose
        # ids (question_id) then collided on 98% of its rows.
        fits = [f for f in FORMATS.values() if f is not fmt and set(f.required) <= set(err.present)]
        fitting = [f.name for f in sorted(fits, key=lambda f: -len(f.required))]
        if not fitting:
            raise
        names = " or ".join(f"--format {name}" for name in fitting)
        raise InputError(f"{err}; its columns fit {names}") from err


def import_path(format_name: str, spec: str | Path, options: ImportOptions | None = None) -> ImportResult:
    """Convert the file, folder or glob ``spec`` in format ``format_name`` (no output written)."""
    from biasboard.importers.common import resolve_inputs

    fmt = FORMATS[format_name]
    return convert(fmt, resolve_inputs(spec, fmt.patterns), options or ImportOptions())
