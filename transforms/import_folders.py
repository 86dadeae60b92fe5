"""Import folders given as input: found, their rejected rows kept apart, their manifests checked to agree.

A ``biasboard import --out DIR`` folder holds its rows (``DIR/battles/day=*/…`` or ``DIR/scores/…``), the rows the
import rejected (``DIR/import_dead_letters.parquet``, another schema, never read as input) and
``DIR/import_manifest.json`` (format, inputs, options, counts, notes).  An input names an import as ``DIR``, as
``DIR/battles`` (its rows' folder), or as a glob whose matches are such folders (``'imp/*/battles'``: several
imports side by side, read exactly as if each were given).  Each one named reports what it rejected
(:func:`biasboard.transforms.read.import_rejections`).

What must agree across the imports of one input
-----------------------------------------------
An import's rows carry their judge, models, lengths and (when the source names them) families; the ingest's
family map fills the rest in the same way for every folder, and each folder's judges are the point of reading
several.  Two things only the manifest says, and one board cannot mix:

* **the benchmark**: a board ranks models on one benchmark's prompts (one import of Position-Bias-Analyzer's
  MT-Bench and DevBench files is refused at import for that reason; two imports, one of each, are refused here).
  It is the import's ``benchmark:`` note when it wrote one (PBA: from its rows), else fixed by the format
  (AlpacaEval, LLMFAO), else the ``data/<bench>/model_judgment`` folder of FastChat's and arena-hard-auto's runs
  (``mt_bench``, ``arena-hard-v0.1``).  Names are compared without case and punctuation (PBA's ``MTBench`` is
  FastChat's ``mt_bench``).  An import that names none (a FastChat arena log) is compared with nothing.
* **the length unit** (its ``lengths:`` note: characters, words or tokens): the length covariate's per-battle log
  ratio is nearly unit-free, but each model's typical length (:mod:`biasboard.ranking.reference_rating`) is a mean
  log length against the pool's: a model measured in characters beside one measured in words would look
  ln(≈5.5) ≈ 1.7 longer, past the covariate's default clip.

Conflicts are refused in one line naming the folders of each side, before any file is read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from apache_beam.io.filesystem import FileSystem
from apache_beam.io.filesystems import FileSystems
from biasboard.importers.output import DEAD_LETTERS, MANIFEST
from biasboard.schemas.errors import InputError

#: The folders an import writes its rows to (its manifest's ``kind``).
KINDS = frozenset({"battles", "scores"})
#: Formats whose every import is one benchmark's.
FORMAT_BENCHMARK = {"alpacaeval": "AlpacaEval", "llmfao": "LLMFAO"}
#: Formats reading a run laid out as ``data/<bench>/model_judgment/…`` (FastChat llm_judge, arena-hard-auto).
JUDGMENT_FOLDER_FORMATS = frozenset({"mtbench-pair", "mtbench-single", "arena-hard"})
JUDGMENT_FOLDER = "model_judgment"
#: A length unit as the importers' ``lengths:`` notes spell it → its name.
LENGTH_UNITS = {"chars": "chars", "characters": "chars", "words": "words", "tokens": "tokens"}
#: Folders named per side of a conflict before "+N more".
NAMED_FOLDERS = 3


@dataclass(frozen=True)
class ImportFolder:
    """An import named by an input: ``folder`` as the input named it (``DIR`` or ``DIR/battles``), ``root`` its
    ``--out`` folder ``DIR``, ``manifest`` its ``import_manifest.json``."""

    folder: str
    root: str
    manifest: Mapping[str, Any]

    @property
    def dead_letters(self) -> str:
        """The rows the import rejected: never input, counted apart."""
        return f"{self.root}/{DEAD_LETTERS}"


def find_import(folder: str) -> ImportFolder | None:
    """The import ``folder`` names (its ``--out`` folder, or that folder's ``battles``/``scores``), else None.

    Why the rows' folder too: ``--input DIR/battles`` is the natural spelling of "these battles", and reading it
    without its import's manifest reported none of the rows the import rejected.
    """
    folder = folder.rstrip("/")
    parent, _, leaf = folder.rpartition("/")
    for root in (folder, parent) if leaf in KINDS and parent else (folder,):
        manifest = _manifest(root)
        if manifest is not None and (root == folder or manifest.get("kind") == leaf):
            return ImportFolder(folder, root, manifest)
    return None


def _manifest(root: str) -> Mapping[str, Any] | None:
    """``root``'s import manifest, None when there is none; an unreadable one is an InputError naming it."""
    path = f"{root}/{MANIFEST}"
    if not FileSystems.exists(path):
        return None
    try:
        with FileSystems.open(path, compression_type="uncompressed") as handle:
            manifest = json.loads(handle.read().decode("utf-8"))
    except (OSError, ValueError) as err:
        raise InputError(f"{path}: cannot read the import's manifest: {err}") from err
    if not isinstance(manifest, dict):
        raise InputError(f"{path}: the import's manifest is not a JSON object")
    return manifest


def folder_of(glob: str) -> Callable[[str], str]:
    """For a glob naming folders (no ``**``): the folder it matches that holds a file's path.

    Beam's own pattern translation (``*`` within one path segment), so a path is cut where Beam matched it.
    """
    prefix = re.compile(FileSystem.translate_pattern(glob.rstrip("/") + "/").removesuffix(r"\Z"))

    def folder(path: str) -> str:
        found = prefix.match(path)
        if found is None:  # listed under the pattern, so it matches; a bug if not
            raise AssertionError(f"{path} is not below {glob}")
        return found.group(0).rstrip("/")

    return folder


def _note(manifest: Mapping[str, Any], key: str) -> str | None:
    """The first word after ``key:`` in the manifest's notes (``lengths: chars``), None when no note says it."""
    for note in manifest.get("notes") or ():
        if isinstance(note, str) and note.startswith(f"{key}: "):
            words = note.removeprefix(f"{key}: ").split()
            return words[0] if words else None
    return None


def benchmark(manifest: Mapping[str, Any]) -> str | None:
    """The benchmark an import holds (see the module doc), None when it names none."""
    noted = _note(manifest, "benchmark")
    fmt = str(manifest.get("format"))
    if noted or fmt in FORMAT_BENCHMARK:
        return noted or FORMAT_BENCHMARK[fmt]
    if fmt not in JUDGMENT_FOLDER_FORMATS:
        return None
    benches = set()
    for source in manifest.get("inputs") or ():
        parts = str(source).replace("\\", "/").split("/")
        if JUDGMENT_FOLDER in parts[1:]:
            benches.add(parts[parts.index(JUDGMENT_FOLDER) - 1])
    return benches.pop() if len(benches) == 1 else None


def length_unit(manifest: Mapping[str, Any]) -> str | None:
    """The unit of an import's lengths (its ``lengths:`` note), None when it has none."""
    noted = _note(manifest, "lengths")
    return LENGTH_UNITS.get(noted.rstrip(",;").lower(), noted) if noted else None


def _same_name(name: str) -> str:
    """A benchmark's or unit's name without case and punctuation: ``MTBench`` and ``mt_bench`` are one."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


def check_agreement(imports: Sequence[ImportFolder], given: str) -> None:
    """Refuse, in one line naming each side's folders, imports of one input that hold different benchmarks or
    measure lengths in different units (see the module doc)."""
    checks = (
        (benchmark, "benchmarks", "one leaderboard ranks the models of one benchmark: refresh each on its own"),
        (
            length_unit,
            "length units",
            "one board's typical lengths need one unit: import them with the same --length-unit where the "
            "source has both, or refresh them apart",
        ),
    )
    for value_of, what, why in checks:
        sides: dict[str, tuple[str, list[str]]] = {}
        for found in imports:
            value = value_of(found.manifest)
            if value:
                sides.setdefault(_same_name(value), (value, []))[1].append(found.folder)
        if len(sides) > 1:
            held = "; ".join(f"{value}: {_named(folders)}" for value, folders in sides.values())
            raise InputError(f"{given}: these imports hold {len(sides)} {what} ({held}); {why}")


def _named(folders: Sequence[str]) -> str:
    """Up to :data:`NAMED_FOLDERS` folders, then how many more."""
    more = f" (+{len(folders) - NAMED_FOLDERS} more)" if len(folders) > NAMED_FOLDERS else ""
    return ", ".join(folders[:NAMED_FOLDERS]) + more
