"""Find input files, assign them to days, check them up front, stream them as Arrow batches.

Everything goes through Beam's ``FileSystems``, so a glob may be local or
``gs://`` (or any file system Beam knows).

Which day a file belongs to
---------------------------
Battle logs are partitioned by day.  A file's day comes from its path: a hive
segment ``day=YYYY-MM-DD`` (``date=`` and ``dt=`` are accepted too), else a
``YYYY-MM-DD`` in the file name.  A file with neither is *undated*: each of its
rows goes to the UTC date of its own ``ts``, and rows whose ``ts`` is missing
or unparseable go to the file's earliest such date (its "home" day), where they
are dead-lettered as ``bad_timestamp`` — so they are counted exactly once.  An
undated file with no parseable ``ts`` at all has no day and is an input error.

Up-front checks
---------------
Before any pipeline runs, every selected file's Parquet footer is read: a file
that cannot be opened or parsed, or lacks a required column, fails with an
:class:`~biasboard.schemas.errors.InputError` naming the file (and column).  A
file with no rows (an empty part file, as Spark and Beam leave) is not an
error: it is read as nothing and counted in the day's ``empty_files`` (an
undated one has no day and is skipped with a log line).  An empty ``--input``
and a folder without Parquet files are refused in one line.  A glob that matches
no file but folders (``'imp/*/battles'``: several imports side by side) is read
as if each folder were given (:func:`resolve_input`,
:mod:`biasboard.transforms.import_folders`).  Row-level faults
are never errors: they become dead letters.

The same file under two days
----------------------------
Each file's content fingerprint (:func:`content_fingerprint`: size, Parquet
footer, first 64 KiB) is stored in its day's manifest.  A file whose content
is already filed under another day, in this run or in the state, is refused
before any work, in one line naming both paths (:func:`check_copies`): its
rows would be counted on both days.  We refuse rather than dead-letter the
second copy because which copy is the wrong one (a stray ``cp``, or a file
moved to the right day after it was aggregated) is the operator's call.  Copies
within one day are not refused: their rows repeat ``battle_id`` and the day's
duplicate rule dead-letters them.
"""

from __future__ import annotations

import codecs
import functools
import glob as pyglob
import hashlib
import io
import logging
import os
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, replace

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystem import FileMetadata, FileSystem
from apache_beam.io.filesystems import FileSystems
from biasboard.schemas import rules
from biasboard.schemas.battle import BATTLE_REQUIRED, BATTLE_SCHEMA, SCORE_REQUIRED, SCORE_SCHEMA
from biasboard.schemas.errors import InputError, raise_if_unreachable
from biasboard.schemas.families import FamilyMap
from biasboard.schemas.names import AliasMap
from biasboard.schemas.summary import ImportRejections
from biasboard.schemas.wording import first_few
from biasboard.transforms import storage
from biasboard.transforms.import_folders import ImportFolder, check_agreement, find_import, folder_of
from biasboard.transforms.validate import SOURCE_ROW

_LOG = logging.getLogger(__name__)
_HIVE_DAY = re.compile(r"(?:^|/)(?:day|date|dt)=(\d{4}-\d{2}-\d{2})(?=/|$)")
_NAME_DAY = re.compile(r"(?<!\d)(\d{4}-\d{2}-\d{2})(?!\d)")
_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")

#: Rows per batch streamed from a file: large enough that per-batch overhead
#: and the re-merge of partial cells vanish, small enough that a batch with
#: its working columns stays within a few hundred MB.
DEFAULT_BATCH_ROWS = 1 << 19


@dataclass(frozen=True)
class InputFile:
    """One input file and its fingerprint (what refresh compares to see a change).

    ``undated``: rows are assigned to days by their ``ts`` (see module doc);
    ``home_day``: where an undated file's rows without a usable ``ts`` go;
    ``content``: :func:`content_fingerprint` (empty when not computed, or for a
    file without rows), stored in the day manifest so that a copy of the same
    file under another day is caught (:func:`check_copies`).
    """

    path: str
    size: int
    mtime: float
    checksum: str
    undated: bool = False
    home_day: str | None = None
    content: str = ""

    def fingerprint(self) -> dict:
        out = {"path": self.path, "size": self.size, "mtime": self.mtime, "checksum": self.checksum}
        if self.content:
            out["content"] = self.content
        return out

    def to_dict(self) -> dict:
        return asdict(self)


def day_of_path(path: str) -> str | None:
    """The day a file belongs to by its path (hive ``day=``/``date=``/``dt=``, else a date in the name).

    Nested day segments (``day=A/day=B/part.parquet``) file the rows under the
    innermost one, the folder the file actually sits in.
    """
    hive = _HIVE_DAY.findall(path)
    if hive:
        return _checked_day(hive[-1], path)
    name = path.rstrip("/").rsplit("/", 1)[-1]
    found = _NAME_DAY.findall(name)
    return _checked_day(found[-1], path) if found else None


def _checked_day(day: str, where: str, what: str = "in the path", datable: bool = True) -> str:
    """``day`` if it is a calendar day (and, ``datable``, one a battle can be dated on), else an InputError naming
    ``where`` it was given.  A day folder outside the datable days held rows that were all off their day, and one at
    the calendar's ends failed deep inside the ingest (``OverflowError`` from the day's window)."""
    try:
        import datetime as dt

        date = dt.date.fromisoformat(day)
    except ValueError as err:
        raise InputError(f"{where}: the date {day!r} {what} is not a calendar day") from err
    why = rules.undatable_day(date) if datable else None
    if why:
        raise InputError(f"{where}: the date {day!r} {what} is {why}")
    return day


def validate_day(day: str, option: str) -> str:
    """``YYYY-MM-DD`` or an InputError naming the option."""
    if not _DAY.match(day or ""):
        raise InputError(f"{option}: expected a day as YYYY-MM-DD, got {day!r}")
    return _checked_day(day, option, "given", datable=False)  # a range's bound: any day


#: The flag each kind of input file is given with (``--anchors`` are battle-shaped and name their own flag).
INPUT_FLAGS = {"battle": "--input", "score": "--scores"}
#: The other input flag, whose glob is read ``beside`` one's (:func:`without_nested`).
_BESIDE_FLAG = {"--input": "--scores", "--scores": "--input"}


def match_files(glob: str, beside: str | None = None, flag: str | None = None) -> list[InputFile]:
    """Files matching ``glob`` (see :func:`resolve_input`), sorted by path, with their fingerprints; ``beside``: the
    other input flag's glob, whose files are left to it (:func:`without_nested`); ``flag``: the flag ``glob`` was
    given with (:data:`INPUT_FLAGS`), named when nothing matches."""
    out = []
    files = without_nested(resolve_input(glob, flag).files, beside, _BESIDE_FLAG.get(flag or ""))
    for m in sorted(files, key=lambda m: m.path):
        try:
            checksum = str(FileSystems.checksum(m.path))
        except Exception as err:  # some file systems have no checksum; size + mtime still fingerprint
            raise_if_unreachable(err)
            checksum = ""
        out.append(InputFile(m.path, int(m.size_in_bytes or 0), float(m.last_updated_in_seconds or 0.0), checksum))
    return out


def without_nested(files: list[FileMetadata], beside: str | None, flag: str | None = None) -> list[FileMetadata]:
    """``files`` without those the other input flag's glob ``beside`` selects, when that is a part of them.

    Why: ``simulate --scores --out SIM`` writes ``SIM/battles`` and ``SIM/scores``, and ``refresh --input SIM --scores
    SIM/scores`` read the grades twice, the second time as battles, and failed saying they are read with
    ``--scores``, which the user had given.  A folder's recursion cannot mean the files another flag names
    explicitly, so they are that flag's alone.  Only a strict part is left out: the same files given to both flags
    (or files each selects some of) stay, and are refused as the wrong kind of file where they are read.  ``flag``:
    the one ``beside`` was given with, named when it matches nothing.
    """
    if not beside:
        return files
    other = {normal_path(m.path) for m in resolve_input(beside, flag).files}
    mine = {normal_path(m.path) for m in files}
    if not other < mine:
        return files
    return [m for m in files if normal_path(m.path) not in other]


@dataclass(frozen=True)
class ResolvedInput:
    """What an input names: its files (Beam's metadata) and the imports among the folders it names."""

    files: list[FileMetadata]
    imports: list[ImportFolder]


def resolve_input(glob: str, flag: str | None = None) -> ResolvedInput:
    """The files and imports ``glob`` names: a folder (every ``*.parquet`` below it, a writer's hidden files aside:
    :func:`_hidden`), a file, a glob of files, or a glob that matches no file but folders (``'imp/*/battles'``),
    read as if each folder were given.

    A folder that is an import's (:func:`~biasboard.transforms.import_folders.find_import`) is read without the
    rows the import rejected, and the imports of one input must agree
    (:func:`~biasboard.transforms.import_folders.check_agreement`).  A glob that matches files reads those files
    only (``day=*/*`` never reaches into a ``_temporary/`` folder beside them) and names no import: it may select
    only some of a folder's days.  An empty glob (an unset shell variable) is refused rather than read as the
    root folder, and a folder without Parquet files says so.  ``flag``: the flag ``glob`` was given with, named in
    those refusals ("no input files match" named the path alone: with --input, --scores and --anchors given, the
    user had to tell which of them it was).
    """
    if not glob.strip():
        raise InputError("the input path is empty (an unset shell variable?): give a folder or a glob of Parquet files")
    wildcard = storage.is_pattern(glob)
    if wildcard and (files := _listed(glob, glob)):
        _warn_skipped_folders(glob, files)
        return ResolvedInput(_literal_paths(files, glob), [])
    if not wildcard or "**" not in glob:
        folders = _folders_input(glob)
        if folders.files:
            return replace(folders, files=_literal_paths(folders.files, glob))
    if not wildcard and (files := _listed(glob, glob)):
        return ResolvedInput(_literal_paths(files, glob), [])
    hidden = _only_hidden(glob, glob) if wildcard else None
    if hidden is None and (not wildcard or "**" not in glob):  # a folder, or a glob of folders, of hidden files
        hidden = _only_hidden(glob.rstrip("/") + "/**.parquet", glob)
    if hidden is not None:
        raise hidden
    where = f"{flag} {glob}" if flag else glob
    if not wildcard and _is_folder(glob):
        raise InputError(f"{where}: the folder holds no .parquet files")
    if "[" in glob and _is_folder(glob):  # a folder named "in[v2]": the brackets are a character class
        raise InputError(
            f"{where}: no input files match: '[' starts a character class in a glob, and the readers take paths as "
            "patterns, so a folder of that name cannot be read; rename it"
        )
    raise InputError(f"{where}: no input files match")


def _folders_input(glob: str) -> ResolvedInput:
    """Every ``*.parquet`` below each folder ``glob`` names (one folder, or a glob's matches), without the imports'
    rejected rows; the imports among the folders checked to agree."""
    if FileSystems.get_scheme(glob) is None and storage.is_pattern(glob):
        names = _local_folders(glob)
        _refuse_glob_characters(names, glob)  # a folder of such a name lists nothing
        files = [m for name in names for m in _listed(f"{name}/**.parquet", glob)]
    else:
        files = _listed(glob.rstrip("/") + "/**.parquet", glob)
    folder = folder_of(glob)
    imports = [found for name in sorted({folder(m.path) for m in files}) if (found := find_import(name)) is not None]
    check_agreement(imports, glob)
    rejected = {normal_path(found.dead_letters) for found in imports}
    return ResolvedInput([m for m in files if normal_path(m.path) not in rejected], imports)


def _literal_paths(files: list[FileMetadata], glob: str) -> list[FileMetadata]:
    """``files``, refused in one line when a path holds a glob character (:func:`_refuse_glob_characters`)."""
    _refuse_glob_characters([m.path for m in files], glob)
    return files


def _refuse_glob_characters(paths: list[str], glob: str) -> None:
    """An InputError naming the first of ``paths`` (files or folders) that holds a glob character: Beam and polars read
    every path as a pattern, so such a file matched was then not found (``expanded paths were empty``, deep inside
    the ingest) and such a folder listed no file."""
    odd = next((path for path in paths if storage.holds_glob_characters(path)), None)
    if odd is not None:
        raise InputError(
            f"{glob}: {odd}: the path holds a glob character ({' '.join(storage.GLOB_CHARACTERS)}), and the readers "
            "take paths as patterns; rename the file or its folder"
        )


def _warn_skipped_folders(glob: str, matched: list[FileMetadata]) -> None:
    """Log the folders a glob of files matched beside them whose Parquet files it does not read.

    Why: ``'day=*/*'`` over a day whose file sits in ``day=D/sub/`` left the whole day out without a word.  Found the
    same way on every file system, by Beam's own reading of the pattern: each Parquet file below the glob's fixed
    prefix that it did not match, under a folder it does match (a local listing by folder had also named the folders
    ``in/**`` reads, and a bucket's listing knows no folders, so there it never warned).  Folders named ``_…`` or
    ``.…`` (Spark's ``_temporary``, ``.spark-staging``) are a writer's leftovers, not said."""
    read_paths = {normal_path(m.path) for m in matched}
    fixed = re.match(r"^[^[*?]*", glob)
    prefix = fixed.group(0) if fixed else ""
    folder_pattern = re.compile(FileSystem.translate_pattern(glob.rstrip("/")))
    skipped: set[str] = set()
    for m in _listed(f"{prefix}**.parquet", glob):
        if normal_path(m.path) in read_paths:
            continue
        parts = m.path[len(prefix) :].split("/")
        for depth in range(1, len(parts)):
            folder = prefix + "/".join(parts[:depth])
            if folder_pattern.match(folder):
                skipped.add(folder)
                break
    visible = sorted(f for f in skipped if not f.rsplit("/", 1)[-1].startswith(("_", ".")))
    if not visible:
        return
    named = first_few(visible, 5)
    message = (
        f"{glob}: matches files, so it reads those files only; {len(visible)} folder(s) it also matches hold Parquet "
        f"files that are not read: {named} (give a glob that reaches into them, or the folder itself)"
    )
    if message not in _SAID:  # a run resolves its input more than once: said once
        _SAID.add(message)
        _LOG.warning(message)


#: The warnings :func:`_warn_skipped_folders` has given in this process.
_SAID: set[str] = set()


def _local_folders(glob: str) -> list[str]:
    """The local folders ``glob`` matches, symbolic links to folders included, a writer's hidden ones aside
    (:func:`_hidden`, logged as :func:`_listed` logs hidden files).

    Why not Beam's listing below the glob: it walks from the glob's fixed prefix without following links, so an
    import folder linked in beside others (``imp/b -> /elsewhere/b``) was left out without a word.  Why the hidden
    ones are left out here: each folder is then listed by its own path, which spells the ``_`` or ``.`` the
    wildcard matched, so ``imp/*/battles`` read ``imp/_old/battles`` where ``imp/*/battles.parquet`` skips it.
    """
    names = sorted(name.rstrip("/") for name in pyglob.glob(glob) if os.path.isdir(name))
    _log_hidden(glob, [name for name in names if _hidden(name, glob)], "folder")
    return [name for name in names if not _hidden(name, glob)]


def _log_hidden(glob: str, hidden: list[str], what: str) -> None:
    """Say at info which hidden files or folders (``what``) ``glob`` matched and are not read."""
    if hidden:
        _LOG.info(
            "%s: %d hidden %s(s) (named _… or .…, or below such a folder) not read: %s",
            glob,
            len(hidden),
            what,
            first_few(hidden, 3),
        )


def _listed(pattern: str, glob: str) -> list[FileMetadata]:
    """The files (not folders, not Spark's ``_SUCCESS`` markers, not a writer's hidden files: :func:`_hidden`) Beam
    lists for ``pattern``; InputError naming ``glob`` when the listing fails."""
    files, hidden = _split_hidden(pattern, glob)
    _log_hidden(glob, hidden, "file")
    return files


def _split_hidden(pattern: str, glob: str) -> tuple[list[FileMetadata], list[str]]:
    """(the files :func:`_listed` reads, the sorted paths of the hidden ones it leaves out) for ``pattern``."""
    try:
        metadata = FileSystems.match([pattern])[0].metadata_list
    except Exception as err:  # Beam raises BeamIOError with nested causes
        raise InputError(f"{glob}: cannot list input files: {err}") from err
    files = [m for m in metadata if not m.path.rstrip("/").endswith("/_SUCCESS") and not _is_folder(m.path)]
    hidden = {m.path for m in files if _hidden(m.path, pattern)}
    return [m for m in files if m.path not in hidden], sorted(hidden)


def _only_hidden(pattern: str, glob: str) -> InputError | None:
    """The error for an input whose every match is hidden (:func:`_hidden`), or None when none is.

    Why: a folder ``data/_2024`` reached by ``data/*/battles.parquet`` was read before hidden files were skipped;
    then the run said "no input files match" (or "the folder holds no .parquet files") one line below the log that
    named the file it had matched, and did not say how to read it."""
    hidden = _split_hidden(pattern, glob)[1]
    if not hidden:
        return None
    return InputError(
        f"{glob}: matches only hidden files (named _… or .…, or below such a folder: a writer's leftovers, not read): "
        f"{first_few(hidden, 3)}; to read them, spell the '_' or '.' in the input (e.g. 'data/_*/battles.parquet')"
    )


def _hidden(path: str, pattern: str) -> bool:
    """Whether the part of ``path`` a wildcard of ``pattern`` matched has a file or folder named ``_…`` or ``.…``.

    Why: such names are a writer's leftovers, not data (Spark's ``_temporary/`` attempt files and ``.spark-staging``
    folders, the ``.part-….crc`` checksums beside each part file, a ``.part`` still being uploaded, ``_metadata``),
    and Spark, Hive and Arrow's datasets skip them.  ``--input logs`` read a failed job's ``_temporary/`` copy of a
    day as battles (every row dead-lettered as a duplicate: half the day "rejected"), and a hidden file still being
    written stopped the run as not Parquet.  A name the pattern spells itself (``logs/_backfill/*.parquet``, or a
    file given by its path) is read.
    """
    if not storage.is_pattern(pattern):
        return False
    fixed = re.match(r"^[^[*?]*", pattern)
    prefix = fixed.group(0).rsplit("/", 1)[0] + "/" if fixed and "/" in fixed.group(0) else ""
    if not path.startswith(prefix):
        return False
    rest = pattern[len(prefix) :]
    spelled = {c for c in "_." if rest.startswith(c) or f"/{c}" in rest}
    return any(part[:1] in "_." and part[:1] not in spelled for part in path[len(prefix) :].split("/") if part)


def import_rejections(inputs: Iterable[tuple[str, str | None]]) -> list[ImportRejections]:
    """What the imports behind the ``(option, glob)`` inputs rejected, by reason, one entry per import folder
    (:func:`resolve_input`: an input that names no import's folder adds nothing).  Reads each dead-letters file's
    ``reason`` column only: cheap whatever the rows hold."""
    out = []
    for option, glob in inputs:
        for found in resolve_input(glob, option).imports if glob else ():
            if not FileSystems.exists(found.dead_letters):
                continue
            with open_parquet(found.dead_letters) as reader:
                reasons = pl.Series("reason", reader.read(columns=["reason"]).column("reason"))
            counts = reasons.fill_null("(no reason)").value_counts().sort("reason")
            rejected = dict(zip(counts["reason"].to_list(), counts["count"].to_list(), strict=True))
            out.append(ImportRejections(option, found.dead_letters, rejected, sum(rejected.values())))
    return out


def normal_path(path: str) -> str:
    """A local path made absolute and normal (as Beam's listing may spell it either way); a bucket's as it is."""
    return path if FileSystems.get_scheme(path) not in (None, "file") else os.path.abspath(path.removeprefix("file://"))


def _is_folder(path: str) -> bool:
    """A local directory, or a bucket path spelled as a folder (``gs://b/x/``)."""
    if FileSystems.get_scheme(path) in (None, "file"):
        return os.path.isdir(path[len("file://") :] if path.startswith("file://") else path)
    return path.endswith("/")


#: The first bytes of every Parquet file.
PARQUET_MAGIC = b"PAR1"
#: How to go on from another tool's file: ``biasboard import`` converts its JSON and CSV.
_IMPORT_ADVICE = (
    "convert another tool's file first with `biasboard import --format F --in PATH --out DIR` "
    "(`biasboard import --help` lists the formats)"
)
#: An Arrow file (pandas' ``to_feather``) holds a table already: it is rewritten as Parquet, not imported.
_ARROW_ADVICE = "rewrite it as Parquet, e.g. pyarrow.parquet.write_table(pyarrow.feather.read_table(PATH), OUT)"
#: What a non-Parquet input file looks like, by its first bytes (after leading whitespace), and how to go on.
_LOOKS_LIKE: tuple[tuple[bytes, str, str], ...] = (
    (b"{", "JSON", _IMPORT_ADVICE),
    (b"[", "JSON", _IMPORT_ADVICE),
    (b"\x1f\x8b", "gzip", _IMPORT_ADVICE),
    (b"ARROW1", "Arrow IPC (Feather)", _ARROW_ADVICE),
)


def _is_text(head: bytes) -> bool:
    """Whether a file's first bytes read as UTF-8 text without control bytes (a character cut at the end is text).

    Only the first byte was looked at, so a binary file that began with an ASCII byte (random bytes half the
    time, an Arrow file's ``ARROW1``) was called "text", which sent the user looking for a CSV.
    """
    try:
        text = codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        return False
    return not any(ch < " " and ch not in "\t\n\r\f" for ch in text)


def not_parquet_error(path: str, err: BaseException) -> InputError:
    """The one-line error for a file Parquet cannot read, saying what it looks like when it is not Parquet at all.

    Why: a new user's first try is ``refresh --input clean_battle.json`` (another tool's file), and the answer was
    pyarrow's "Parquet magic bytes not found in footer. Either the file is corrupted or this is not a parquet
    file": it did not say the file is JSON, nor that ``biasboard import`` converts it.  Only the first bytes are
    read, and only once the Parquet read has failed; a file that starts as Parquet keeps pyarrow's reason.
    """
    try:
        with FileSystems.open(path, compression_type="uncompressed") as handle:
            head = handle.read(64)
    except Exception:  # the file could not be read at all: pyarrow's reason is the one to give
        head = PARQUET_MAGIC
    if head.startswith(PARQUET_MAGIC):
        return InputError(f"{path}: cannot read as Parquet: {err}")
    if not head:
        return InputError(
            f"{path}: the file is empty (0 bytes), not Parquet (an empty part file is a Parquet file of no rows, which "
            "is skipped): rewrite or remove it"
        )
    stripped = head.lstrip()
    kind, advice = ("text, not Parquet" if _is_text(head) else "not Parquet"), _IMPORT_ADVICE
    for magic, name, how in _LOOKS_LIKE:
        if stripped.startswith(magic):
            kind, advice = f"{name}, not Parquet", how
            break
    return InputError(f"{path}: the file is {kind}: battle and score logs are read as Parquet; {advice}")


class _ParquetOnHandle(pq.ParquetFile):
    """A Parquet reader that closes the file handle it reads when it is closed (``with``).

    pyarrow closes a source only when it opened it itself, so a reader on Beam's handle left the handle (a local
    file, a bucket's reader) to the garbage collector: a ResourceWarning for every input file checked.
    """

    def close(self, force: bool = False) -> None:
        super().close(force=True)


def open_parquet(path: str) -> pq.ParquetFile:
    """A Parquet reader over Beam's FileSystems, to be closed (``with``); InputError when unreadable
    (:func:`not_parquet_error`)."""
    try:
        handle = FileSystems.open(path, compression_type="uncompressed")
    except Exception as err:
        raise not_parquet_error(path, err) from err
    try:
        return _ParquetOnHandle(handle)
    except Exception as err:
        handle.close()
        raise not_parquet_error(path, err) from err


def required_columns(kind: str) -> tuple[str, ...]:
    return BATTLE_REQUIRED if kind == "battle" else SCORE_REQUIRED


def wanted_columns(names: Iterable[str], kind: str, carry: tuple[str, ...] = ()) -> list[str]:
    """The columns worth reading from a file: ours (or their FastChat aliases) and ``carry``; extras are skipped."""
    names = list(names)
    schema = BATTLE_SCHEMA if kind == "battle" else SCORE_SCHEMA
    ours = {f.name for f in schema} | set(carry)
    aliases = rules.apply_column_aliases(names)
    return [n for n in names if n in ours or n in aliases]


def check_file(path: str, kind: str = "battle") -> pq.FileMetaData:
    """Up-front check of one file: readable Parquet and, unless it has no rows, every required column present.

    A file with no rows is not an error: Spark and Beam leave empty part files
    behind.  It is read as zero batches and counted (``empty_files``).
    """
    with open_parquet(path) as reader:
        try:
            names = reader.schema_arrow.names
            meta = reader.metadata
        except Exception as err:
            raise InputError(f"{path}: cannot read the Parquet footer: {err}") from err
    if meta.num_rows == 0:
        return meta
    _check_unique_names(path, names)
    renamed = [rules.apply_column_aliases(names).get(n, n) for n in names]
    for column in required_columns(kind):
        if column not in renamed:
            raise InputError(
                f"{path}: required column '{column}' is missing (has: {', '.join(names)}){_other_kind(renamed, kind)}"
            )
    return meta


def _check_unique_names(path: str, names: list[str]) -> None:
    """Refuse a file with two columns of one name (pyarrow writes them) before any day is aggregated.

    The batch reader refuses such a file mid-ingest, and a repeated required column was said to "not exist in
    schema" ('cannot read as Parquet: Column winner does not exist'), while the file plainly has it, twice.
    """
    repeated = sorted(name for name, times in Counter(names).items() if times > 1)
    if repeated:
        raise InputError(
            f"{path}: column(s) {', '.join(repeated)} appear more than once: columns are read by name, so each name "
            "must be unique; rewrite the file keeping one column of each name"
        )


#: What to say of a file that has every column of the other kind: single grades given as battles, or the reverse.
_OTHER_KIND: dict[str, str] = {
    "battle": (
        "; it is a score file (single grades): refresh and backfill read those with --scores, the judge audit none "
        "(give it the battles alone, e.g. DIR/battles)"
    ),
    "score": "; it is a battle file: refresh and backfill read those with --input",
}


def _other_kind(columns: list[str], kind: str) -> str:
    """:data:`_OTHER_KIND`'s hint when ``columns`` hold every required column of the other kind of file, else ''.

    Why: ``biasboard import --format mtbench-single --out DIR`` writes DIR/scores, and ``refresh --input DIR`` (the
    way an import's battles are read) then said only that 'battle_id' is missing from a score file.  The audit,
    which has no --scores, was sent to that flag too over a ``simulate --scores`` folder.
    """
    other = "score" if kind == "battle" else "battle"
    return _OTHER_KIND[kind] if set(required_columns(other)) <= set(columns) else ""


#: Bytes of a file's head hashed into its content fingerprint (besides its size and Parquet footer).
CONTENT_HEAD_BYTES = 1 << 16


def content_fingerprint(path: str) -> str:
    """SHA-256 of a Parquet file's size, footer and first 64 KiB: equal for copies of one file.

    The footer holds every row group's size, row count, offsets and (usually)
    column statistics, and the head holds the first pages, so two different
    files of battles agree on all of it only by design; reading them costs two
    small reads, whatever the file's size (a bucket's MD5 is not available on
    every file system, and a local "checksum" is only the size).
    """
    try:
        with FileSystems.open(path, compression_type="uncompressed") as handle:
            head = handle.read(CONTENT_HEAD_BYTES)
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 8))
            tail = handle.read(8)
            footer_length = int.from_bytes(tail[:4], "little") if len(tail) == 8 else 0
            handle.seek(max(0, size - 8 - footer_length))
            footer = handle.read(footer_length + 8)
    except Exception as err:
        raise InputError(f"{path}: cannot read: {err}") from err
    digest = hashlib.sha256(str(size).encode("ascii"))
    digest.update(footer)
    digest.update(head)
    return digest.hexdigest()


def check_copies(days: dict[str, list[InputFile]], stored: dict[str, list[dict]]) -> None:
    """InputError when one file's content appears under two days (it would be counted twice).

    ``days``: the files about to be aggregated, by day; ``stored``: the input
    fingerprints of the other days already in the state (their manifests'
    ``inputs``).  Copies within one day are left to the day's duplicate-id rule;
    files without rows are never copies.
    """
    owner: dict[str, tuple[str, str]] = {}
    for day, entries in sorted(stored.items()):
        for entry in entries:
            if isinstance(entry, dict) and entry.get("content"):
                owner.setdefault(str(entry["content"]), (str(entry.get("path")), day))
    for day, files in sorted(days.items()):
        for f in files:
            if not f.content:
                continue
            path, other_day = owner.setdefault(f.content, (f.path, day))
            if other_day != day and path != f.path:
                raise InputError(
                    f"{f.path} (day {day}) has the same content as {path} (day {other_day}): the same file under "
                    "two days would be counted twice; remove one copy (or the stored day from the state)"
                )


def _polars_source(path: str) -> str | io.BytesIO:
    """What polars reads: a local path directly (memory-mapped), else the file's bytes through FileSystems."""
    if FileSystems.get_scheme(path) in (None, "file"):
        return path[len("file://") :] if path.startswith("file://") else path
    try:
        with FileSystems.open(path, compression_type="uncompressed") as handle:
            return io.BytesIO(handle.read())
    except Exception as err:
        raise InputError(f"{path}: cannot read: {err}") from err


#: Battle columns the ingest reads as dictionary codes (polars Categorical) when the file stores them as
#: text: the cell's text keys, a few hundred distinct values among millions of rows, which the cells then
#: group on as integers (:func:`~biasboard.transforms.cells.group_ids`) without hashing a string per row,
#: and the winner, whose few distinct values are looked up once (:func:`~biasboard.schemas.rules.winner_codes`).
DICTIONARY_COLUMNS = frozenset({"judge", "model_a", "model_b", "family_a", "family_b", "judge_family", "winner"})


def _dictionary_columns(schema: pa.Schema, columns: list[str]) -> list[str]:
    """Which of ``columns`` (names as in the file) to read as dictionary codes: text keys of the cells."""
    renamed = rules.apply_column_aliases(columns)
    return [
        c
        for c in columns
        if renamed.get(c, c) in DICTIONARY_COLUMNS
        and (pa.types.is_string(schema.field(c).type) or pa.types.is_large_string(schema.field(c).type))
    ]


@functools.cache
def _polars_zone(zone: str) -> bool:
    """Whether polars takes the time zone ``zone`` (IANA names and whole-hour offsets; not ``+05:30``)."""
    try:
        pl.Series("t", [], dtype=pl.Datetime("us", zone))
    except Exception:
        return False
    return True


def _polars_type(dtype: pa.DataType) -> pa.DataType:
    """``dtype`` with every part polars cannot take replaced by one it can, at any depth (struct fields, list items,
    map keys and values): a time in a zone polars refuses (:func:`_polars_zone`) by the same instant in UTC, a
    ``decimal256`` by ``decimal128`` of its precision (exact) or, past 38 digits, by ``float64``.

    Why: polars' Parquet reader panicked (a Rust panic, not an exception) on a file holding ``+05:30`` times, in a
    struct or list as at the top, whether or not the column was read, and refused a whole file holding one
    ``decimal256(50, 2)`` column (a length written by a tool that widens decimals) in one line.  A length is read as
    ``float64`` by the rules anyway (:func:`~biasboard.schemas.rules.length_expr`), so the ``decimal256`` values become
    what a ``decimal128`` or an integer column's do: one that is too large is dead-lettered ``absurd_length``.
    """
    if pa.types.is_timestamp(dtype):
        return pa.timestamp(dtype.unit, "UTC") if dtype.tz and not _polars_zone(str(dtype.tz)) else dtype
    if pa.types.is_decimal256(dtype):
        return pa.decimal128(dtype.precision, dtype.scale) if dtype.precision <= 38 else pa.float64()
    if pa.types.is_struct(dtype):
        return pa.struct([dtype.field(i).with_type(_polars_type(dtype.field(i).type)) for i in range(dtype.num_fields)])
    if pa.types.is_map(dtype):  # keys_sorted kept: a map rebuilt without it compares unequal, read as foreign
        item = dtype.item_field.with_type(_polars_type(dtype.item_type))
        return pa.map_(_polars_type(dtype.key_type), item, keys_sorted=dtype.keys_sorted)
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype) or pa.types.is_fixed_size_list(dtype):
        item = dtype.value_field.with_type(_polars_type(dtype.value_type))
        if pa.types.is_fixed_size_list(dtype):
            return pa.list_(item, dtype.list_size)
        return pa.large_list(item) if pa.types.is_large_list(dtype) else pa.list_(item)
    return dtype


def _foreign_columns(schema: pa.Schema) -> list[str]:
    """The columns of ``schema`` whose type polars cannot take (:func:`_polars_type`); a file with any is read through
    pyarrow (:func:`in_polars_types`), its other columns never reaching polars' reader."""
    return [f.name for f in schema if _polars_type(f.type) != f.type]


def in_polars_types(table: pa.Table) -> pa.Table:
    """``table`` with its columns of types polars cannot take cast to ones it can (:func:`_polars_type`): times put
    in UTC are the same instants (Arrow stores a zoned time as UTC; the zone only says how to show it)."""
    for name in _foreign_columns(table.schema):
        i = table.schema.get_field_index(name)
        table = table.set_column(i, name, table.column(i).cast(_polars_type(table.schema.field(i).type)))
    return table


def _arrow_slices(reader: pq.ParquetFile, columns: list[str], batch_rows: int) -> Iterator[pa.Table]:
    """``columns`` of a file as consecutive tables of ``batch_rows`` rows (the last one shorter)."""
    held: list[pa.RecordBatch] = []
    rows = 0
    for batch in reader.iter_batches(batch_size=batch_rows, columns=columns, use_threads=False):
        held.append(batch)
        rows += batch.num_rows
        while rows >= batch_rows:
            table = pa.Table.from_batches(held)
            yield table.slice(0, batch_rows)
            rest = table.slice(batch_rows)
            held, rows = rest.to_batches(), rest.num_rows
    if rows:
        yield pa.Table.from_batches(held)


def iter_batches(
    path: str,
    kind: str = "battle",
    batch_rows: int = DEFAULT_BATCH_ROWS,
    carry: tuple[str, ...] = (),
    dictionary: bool = False,
) -> Iterator[tuple[int, pl.DataFrame]]:
    """(row offset in the file, batch as a polars frame) pairs, reading only the columns we use.

    ``carry`` names extra columns a caller needs (the audit's ``gold``).
    ``dictionary``: the text keys of battle cells (:data:`DICTIONARY_COLUMNS`)
    come as Categorical columns straight from the file's dictionary pages
    (pyarrow's ``read_dictionary``: integer codes, no string per row), on
    either route: a file polars cannot take (:func:`in_polars_types`) yields
    the same frames as one it can, so the cells keep their coded path.

    Polars' Parquet reader decodes strings several times faster than
    pyarrow's here, and a sliced scan reads only the rows asked for, so a
    file is streamed in bounded batches.  Remote files (``gs://`` ...) are
    fetched whole through Beam's FileSystems first: input files are parts of
    one day, so one file bounds the memory.
    """
    source = _polars_source(path)
    try:
        arrow_file = pa.BufferReader(source.getbuffer()) if isinstance(source, io.BytesIO) else source
        schema = pq.ParquetFile(arrow_file).schema_arrow
        columns = wanted_columns(schema.names, kind, carry)
        coded = _dictionary_columns(schema, columns) if dictionary and kind == "battle" else []
        if _foreign_columns(schema):  # codes as polars' route gives them: pyarrow's dictionary, then polars'
            reader = pq.ParquetFile(arrow_file, read_dictionary=coded or None)
            offset = 0
            for table in _arrow_slices(reader, columns, batch_rows):
                frame = pl.from_arrow(in_polars_types(table))
                assert isinstance(frame, pl.DataFrame)
                yield offset, frame
                offset += frame.height
            return
        scan = pl.scan_parquet(source)
        slices: Iterator[pa.Table] = iter(())
        if coded:
            slices = _arrow_slices(pq.ParquetFile(arrow_file, read_dictionary=coded), coded, batch_rows)
        plain = [c for c in columns if c not in coded]
        total = scan.select(pl.len()).collect().item()
        for offset in range(0, total, batch_rows):
            if isinstance(source, io.BytesIO):
                source.seek(0)
            batch = scan.slice(offset, batch_rows).select(plain).collect()
            if coded:
                codes = pl.from_arrow(next(slices))
                assert isinstance(codes, pl.DataFrame) and codes.height == batch.height
                batch = batch.hstack(codes).select(columns)
            yield offset, batch
    except InputError:
        raise
    except Exception as err:
        raise not_parquet_error(path, err) from err


def _ts_days(path: str, kind: str) -> pl.Series:
    """UTC date of each row's ``ts`` in an undated file (null where unusable)."""
    with open_parquet(path) as reader:
        if reader.metadata.num_rows == 0:
            return pl.Series("ts", [], dtype=pl.String)
        names = reader.schema_arrow.names
        ts_name = rules.source_column(names, "ts")
        if ts_name is None:  # refresh lists files without the up-front check: say what backfill's check says
            raise InputError(f"{path}: required column 'ts' is missing (has: {', '.join(names)})")
        column = reader.read(columns=[ts_name]).rename_columns(["ts"])
    frame = pl.from_arrow(in_polars_types(column))
    assert isinstance(frame, pl.DataFrame)
    return rules.parse_timestamps(frame, "ts").dt.date().cast(pl.String)


def undated_days(path: str, kind: str = "battle") -> list[str]:
    """Days present in an undated file (by its rows' ``ts``), sorted; none for a file without rows.

    InputError when the file has rows but none has a parseable ``ts``.
    """
    ts_days = _ts_days(path, kind)
    if ts_days.is_empty():
        return []
    days = ts_days.drop_nulls().unique().sort().to_list()
    if not days:
        raise InputError(f"{path}: no day in the path and no parseable 'ts' in any row, so no day to file it under")
    return days


def rows_of_day(batch: pl.DataFrame, offset: int, day: str, home_day: str | None) -> pl.DataFrame:
    """Rows of an undated file's batch that belong to ``day`` (rows without a usable ts go to ``home_day``).

    The rows' positions in the file are kept in a ``_source_row`` column so
    that dead letters still point at the right row after filtering.
    """
    batch = batch.with_columns(pl.int_range(offset, offset + batch.height, dtype=pl.Int64).alias(SOURCE_ROW))
    name = rules.source_column(batch.columns, "ts")
    assert name is not None, "undated files are checked for a ts column before they are read"
    days = rules.parse_timestamps(batch, name).dt.date().cast(pl.String)
    return batch.filter((days == day).fill_null(day == home_day))


def list_input_days(
    input_glob: str,
    days: Iterable[str] | None = None,
    day_range: tuple[str | None, str | None] = (None, None),
    kind: str = "battle",
    check: bool = True,
    beside: str | None = None,
    flag: str | None = None,
) -> dict[str, list[InputFile]]:
    """Input files grouped by day (sorted), restricted to ``days`` and the inclusive ``day_range``.

    Every selected file is checked up front (see :func:`check_file`) when
    ``check`` is true; an undated file is listed under each day its rows fall on.
    ``beside``: the other input flag's glob (``--scores`` for ``--input`` and the reverse), whose files are not
    this input's when they lie within it (:func:`without_nested`).  ``flag``: the flag ``input_glob`` was given
    with, named when it matches nothing (default: the ``kind``'s, :data:`INPUT_FLAGS`; ``--anchors`` say so).
    """
    flag = flag or INPUT_FLAGS[kind]
    wanted = set(days) if days is not None else None
    low, high = day_range

    def keep(day: str) -> bool:
        return (wanted is None or day in wanted) and (low is None or day >= low) and (high is None or day <= high)

    by_day: dict[str, list[InputFile]] = {}
    for f in match_files(input_glob, beside, flag):
        day = day_of_path(f.path)
        if day is not None:
            if keep(day):
                if check and check_file(f.path, kind).num_rows:
                    f = replace(f, content=content_fingerprint(f.path))
                by_day.setdefault(day, []).append(f)
            continue
        if check and check_file(f.path, kind).num_rows:
            f = replace(f, content=content_fingerprint(f.path))
        file_days = undated_days(f.path, kind)
        if not file_days:  # an empty part file without a day in its path: no rows, nothing to file
            _LOG.info("%s: no rows and no day in the path; skipped", f.path)
            continue
        undated = replace(f, undated=True, home_day=file_days[0])
        for d in file_days:
            if keep(d):
                by_day.setdefault(d, []).append(undated)
    return {day: sorted(files, key=lambda f: f.path) for day, files in sorted(by_day.items())}


def load_family_map(path: str | None) -> FamilyMap:
    """The default family map, preceded by the rules of the user's file at ``path`` (local or gs://)."""
    if path is None:
        return FamilyMap.with_user_rules()
    try:
        with FileSystems.open(path, compression_type="uncompressed") as handle:
            text = handle.read().decode("utf-8")
    except Exception as err:
        raise InputError(f"{path}: cannot read the family map: {err}") from err
    return FamilyMap.with_user_rules(text, path)


def day_batches(
    day: str,
    files: Iterable[InputFile],
    kind: str = "battle",
    batch_rows: int = DEFAULT_BATCH_ROWS,
    carry: tuple[str, ...] = (),
    dictionary: bool = False,
) -> Iterator[tuple[InputFile, int, pl.DataFrame]]:
    """One day's rows, batch by batch: (file, row offset in that file, batch); ``dictionary``: see :func:`iter_batches`.

    The one day reader of every job (the ingest, the audit, the anchors): a
    day-partitioned file is streamed whole, an undated file only with the rows
    that fall on ``day`` (see :func:`rows_of_day`), so a row is read on one day only.
    """
    for f in files:
        for offset, batch in iter_batches(f.path, kind, batch_rows, carry, dictionary):
            if f.undated:
                batch = rows_of_day(batch, offset, day, f.home_day)
            yield f, offset, batch


def load_aliases(path: str | None) -> AliasMap | None:
    """The user's alias map at ``path`` (local or gs://), read and checked now; None without one."""
    if path is None:
        return None
    if not path.strip():
        raise InputError("--aliases is empty")
    try:
        with FileSystems.open(path, compression_type="uncompressed") as handle:
            text = handle.read().decode("utf-8")
    except Exception as err:
        raise InputError(f"{path}: cannot read the alias map: {err}") from err
    return AliasMap.parse(text, path)
