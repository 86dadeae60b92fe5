"""What every importer shares: finding and reading input files, and turning a mapped frame into battles + dead letters.

An importer's only job is the *mapping* from a foreign format onto our columns
(who was shown first, what the verdict means).  Everything else is here, once:

* :func:`resolve_inputs` / :func:`read_records` find and read the files (JSON
  array, JSON lines or CSV, optionally gzip-compressed) as whole columns, and
  raise :class:`~biasboard.schemas.errors.InputError` naming the file when one
  is missing, empty or garbled.
* :func:`finalize_battles` / :func:`finalize_scores` apply the *same* validation
  rules as the ingest (:mod:`biasboard.schemas.rules`) to the mapped rows, so a
  converted file never holds a row the ingest would reject, and split the rows
  into valid ones (cast to :data:`~biasboard.schemas.battle.BATTLE_SCHEMA` /
  ``SCORE_SCHEMA``) and dead letters that keep the original fields as text.
  Each input row ends up in exactly one of the two, so
  ``rows_read = rows_converted + rows_dead`` holds by construction.

Identifiers: a source's own id when it has one, else a readable composite of
the row's identifying fields (format, judge, prompt, models, source time stamp),
never a row number, so re-importing the same file, or the same judgment found
in two files, yields the same ``battle_id`` and the ingest's dedupe catches it.

Undated sources (AlpacaEval, LLMFAO, PBA, most Arena-Bench grades) are stamped
with one fixed, documented day (:data:`DEFAULT_DATE`, overridable with
``--date``) at 00:00 UTC; the manifest says so.
"""

from __future__ import annotations

import datetime as dt
import glob
import gzip
import json
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json
from biasboard.importers.json_kinds import (
    FieldPath,
    mixed_paths,
    refused_kinds,
    struct_column,
    texted_column,
    typed_array,
    typed_or_none,
)
from biasboard.importers.json_kinds import as_text as as_json_text
from biasboard.schemas.battle import BATTLE_SCHEMA, SCORE_SCHEMA, SLICE_COLUMNS, STYLE_COUNT_COLUMNS
from biasboard.schemas.coerce import FLAG_PREFIX, REASON_BAD_TYPE_PREFIX, coerce_types, flag_reasons
from biasboard.schemas.deadletter import REASON_DUPLICATE_ID, dead_letter_schema
from biasboard.schemas.errors import InputError
from biasboard.schemas.names import AS_WRITTEN_PREFIX, NAME_FORM, as_written, canonical_names
from biasboard.schemas.numbers import NumberRule
from biasboard.schemas.rules import (
    REASON_DUPLICATE_SCORE_ID,
    battle_reason_expr,
    is_text,
    length_expr,
    score_reason_expr,
    score_value_expr,
    style_count_expr,
    timestamp_expr,
    winner_expr,
)
from biasboard.schemas.summary import GLOBAL_JUDGE
from biasboard.schemas.wording import first_few
from polars.datatypes import DataTypeClass

#: The judge gave no usable verdict (FastChat ``error``, a null PBA verdict, a null AlpacaEval preference, score -1).
REASON_NO_VERDICT = "no_verdict"

#: The day stamped on rows whose source carries no time: clearly artificial, inside the rules' plausible window.
DEFAULT_DATE = dt.date(2000, 1, 1)

#: Provenance columns carried through a conversion (dropped from the dead letters' original fields).
SOURCE_FILE = "__source_file"
SOURCE_ROW = "__source_row"
REASON = "__reason"
#: What a duplicate id's row must share with the row kept under that id to count as a repeat of it (the verdict
#: and what it was about: not the source file, row or time stamp).
BATTLE_CONTENT = ("judge", "model_a", "model_b", "winner", "prompt_id")
SCORE_CONTENT = ("judge", "model", "prompt_id", "score")
#: Prefix of the per-row marks "this mixed-type field held a list or object here" (see :func:`read_all`).
NESTED_PREFIX = "__nested:"
#: Per-row mark (added by :func:`in_names_form` or :func:`mark_names_changed` only when some row has one): a name of
#: the row was changed, counted over the rows read, converted and dead-lettered, in a note by
#: :func:`finalize_battles` / :func:`finalize_scores`.
NAMES_CHANGED = "__names_changed"

#: Prefixes of the per-row marks and copies the import adds beside the input's fields (never a dead letter's field;
#: an input field so named is renamed ``input<name>``: :func:`_rename_reserved`).
_MARK_PREFIXES = (FLAG_PREFIX, NESTED_PREFIX, AS_WRITTEN_PREFIX)

#: Dead-letter meta fields: an input field of that name is dropped from the dead letters (the contract's meta wins).
META_FIELDS = ("reason", "source_file", "source_row")

#: The columns a format's mapping must produce for battles (``ts`` raw: epoch seconds, datetime, or text).
BATTLE_MAPPED = ("battle_id", "ts", "judge", "model_a", "model_b", "winner", "prompt_id", "len_a", "len_b")

#: JSON reader block size: large enough that type inference sees a whole fixture file at once.
_JSON_BLOCK_SIZE = 64 << 20


#: ``--tie-band``: how far from 1.5 an AlpacaEval preference is still a tie (0.5 would make every verdict one).
TIE_BAND = NumberRule(low=0.0, below=0.5)


@dataclass(frozen=True)
class ImportOptions:
    """Choices a user can make on the command line; defaults are documented in the CLI help."""

    default_date: dt.date = DEFAULT_DATE
    judge: str | None = None  # overrides (or supplies) the judge name
    length_unit: str = "chars"  # chars | words, where the source offers both
    tie_band: float = 0.0  # AlpacaEval: |preference - 1.5| <= band is a tie
    answers_dir: Path | None = None  # model_answer folder for MT-Bench and arena-hard-auto lengths
    baseline: str | None = None  # arena-hard-auto v0.1: the baseline model the files do not name
    voters: bool = False  # each vote's judge named <judge>/<voter> where the source records the voter
    anony_only: bool = False  # FastChat: only the arena's anonymous battles (its leaderboard's), the rest dead letters
    sampled_only: bool = False  # FastChat: only battles the arena's prompt de-duplication sampled (dedup_tag)


@dataclass(frozen=True)
class ImportResult:
    """One conversion: valid rows in our schema, dead letters, and the counts that must add up."""

    kind: str  # "battles" | "scores"
    rows: pa.Table
    dead_letters: pa.Table
    rows_read: int  # conversion units (an MT-Bench pair line is two games)
    source_rows: int  # lines / records in the input files
    sources: tuple[str, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def rows_converted(self) -> int:
        return self.rows.num_rows

    def dead_by_reason(self) -> dict[str, int]:
        if self.dead_letters.num_rows == 0:
            return {}
        counts = pl.DataFrame(self.dead_letters.select(["reason"])).group_by("reason").len().sort("reason")
        return dict(zip(counts["reason"].to_list(), counts["len"].to_list(), strict=True))


# ---------------------------------------------------------------------------------------------- input files


def resolve_inputs(spec: str | Path, patterns: Sequence[str]) -> list[Path]:
    """The files named by ``spec``: a file, a folder (files matching ``patterns``) or a glob; sorted, never empty."""
    text = str(spec)
    if not text.strip():  # Path("") is the current folder: an unset shell variable imported whatever lay there
        raise InputError("the input path is empty (an unset shell variable?): give a file, a folder or a glob")
    path = Path(text)
    if path.is_file():
        return [path]
    if path.is_dir():
        found = sorted({p for pattern in patterns for p in path.glob(pattern) if p.is_file()})
        if not found:
            raise InputError(f"{path}: folder holds no input files matching {', '.join(patterns)}")
        return found
    if any(ch in text for ch in "*?["):
        found = sorted(Path(p) for p in glob.glob(text) if Path(p).is_file())
        if not found:
            raise InputError(f"{text}: no file matches this pattern")
        return found
    raise InputError(f"{text}: input file not found")


def _is_gzip(path: Path) -> bool:
    with open(path, "rb") as handle:
        return handle.read(2) == b"\x1f\x8b"


def _is_parquet(path: Path) -> bool:
    with open(path, "rb") as handle:
        return handle.read(4) == b"PAR1"


#: The byte-order mark some Windows tools write at the start of UTF-8 text (JSON forbids it; readers skip it).
UTF8_BOM = b"\xef\xbb\xbf"


def _first_byte(path: Path) -> bytes:
    """The first non-blank byte of the (decompressed) file, or b'' when it is empty."""
    opener = gzip.open if _is_gzip(path) else open
    with opener(path, "rb") as handle:
        while chunk := handle.read(4096):
            stripped = chunk.removeprefix(UTF8_BOM).lstrip()  # a BOM only ever opens the file: its first chunk
            if stripped:
                return stripped[:1]
    return b""


def read_records(path: Path) -> pl.DataFrame:
    """One input file as a DataFrame with provenance columns; JSON array, JSON lines or CSV, gzip or plain.

    JSON lines and CSV go through pyarrow's columnar readers; a JSON *array*
    (FastChat's pretty-printed ``clean_battle*.json``) is parsed whole and
    converted in one step.  JSON whose field types vary from record to record is
    read by :func:`_frame_from_records` (those fields as text).  Input fields
    named like the provenance columns are renamed ``input<name>``.  Any other
    failure becomes an InputError naming the file.
    """
    marks: dict[str, list[bool]] = {}
    try:
        first = _first_byte(path)
        if not first:
            raise InputError(f"{path}: input file is empty")
        name = path.name.lower().removesuffix(".gz")
        if name.endswith(".csv"):
            stream = pa.input_stream(str(path), compression="gzip" if _is_gzip(path) else None)
            table = pa_csv.read_csv(stream)
            frame = pl.from_arrow(table)
        elif first == b"[":
            opener = gzip.open if _is_gzip(path) else open
            with opener(path, "rt", encoding="utf-8-sig") as handle:  # -sig: a byte-order mark skipped
                records = json.load(handle)
            if not records:
                raise InputError(f"{path}: input file holds an empty JSON array")
            frame, marks = _frame_from_records(path, records)
        elif first == b"{":
            stream = pa.input_stream(str(path), compression="gzip" if _is_gzip(path) else None)
            try:
                table = pa_json.read_json(stream, read_options=pa_json.ReadOptions(block_size=_JSON_BLOCK_SIZE))
                frame = pl.from_arrow(table)
            except pa.ArrowInvalid:  # a field whose type changes between lines: read them one by one instead
                frame, marks = _frame_from_records(path, _json_lines(path))
        elif _is_parquet(path):  # a battle (or score) file already: the usual slip is import for refresh
            raise InputError(
                f"{path}: the file is Parquet, which needs no import: give it to refresh --input (battles) or "
                "--scores (grades); import converts other tools' JSON and CSV"
            )
        else:
            raise InputError(f"{path}: not JSON (array or lines) or CSV: starts with {first!r}")
    except InputError:
        raise
    except (pa.ArrowInvalid, json.JSONDecodeError, UnicodeDecodeError, OSError, EOFError, zlib.error) as err:
        raise InputError(f"{path}: cannot be parsed ({type(err).__name__}: {str(err).splitlines()[0]})") from err
    if not isinstance(frame, pl.DataFrame) or frame.height == 0:
        raise InputError(f"{path}: input file holds no rows")
    frame = _rename_reserved(frame).with_columns(pl.Series(mark, values) for mark, values in marks.items())
    return frame.with_columns(
        pl.lit(str(path)).alias(SOURCE_FILE), pl.int_range(pl.len(), dtype=pl.Int64).alias(SOURCE_ROW)
    )


def _json_lines(path: Path) -> list[object]:
    """The records of a JSON-lines file parsed one by one (the fallback when the columnar reader refuses it)."""
    opener = gzip.open if _is_gzip(path) else open
    records = []
    with opener(path, "rt", encoding="utf-8-sig") as handle:  # -sig: a byte-order mark skipped
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as err:  # its own "line 1" is within the record: name the file's line
                raise InputError(f"{path}: line {number} is not JSON ({err.msg}, column {err.colno})") from err
    return records


def json_number(frame: pl.DataFrame, column: str) -> pl.Expr:
    """``column`` as Float64: numbers, and numbers as text, as they are; other text and a JSON boolean NaN (a value
    that is no number: the format's range check rejects it), null as null.  Why: polars casts ``true`` to 1.0."""
    if frame.schema[column] == pl.Boolean:
        return pl.when(pl.col(column).is_not_null()).then(float("nan")).otherwise(None).cast(pl.Float64)
    return pl.col(column).cast(pl.Float64, strict=False)


def _frame_from_records(path: Path, records: object) -> tuple[pl.DataFrame, dict[str, list[bool]]]:
    """Parsed JSON records as a frame; a field whose JSON type varies (or cannot be typed) becomes text.

    The typed frame is tried first (the common case, one step, by pyarrow: it
    refuses a field whose values differ in kind, where polars' ``from_dicts``
    kept the values of one kind and made the others null, inside nested objects
    too: :mod:`biasboard.importers.json_kinds`; measured faster as well: 1-1.5x on flat
    records, 2.6-5.7x on nested ones, 200k-500k records).  When it
    refuses the records, each field is typed alone, and only in the fields it
    refuses are the kinds compared, each value of more than one kind kept as text
    at its place (strings as they are, anything else as JSON), so the format's
    mapping and the ingest's rules judge the values.  A text holding a lone UTF-16
    surrogate (``"\\ud800"``, which JSON allows and UTF-8 cannot hold) marks its
    row ``bad_text:<field>`` (:func:`_good_text`).
    """
    if not isinstance(records, list) or not records:
        raise InputError(f"{path}: input file holds no JSON records")
    if not all(isinstance(r, dict) for r in records):
        raise InputError(f"{path}: JSON records must be objects (one per row)")
    try:  # pyarrow refuses a value of another kind than its field's, at any depth (polars made it null)
        whole = typed_array(records)
        if whole is not None:
            return pl.from_arrow(whole).struct.unnest(), {}  # type: ignore[union-attr]
    except (UnicodeEncodeError, pl.exceptions.PolarsError):
        pass
    columns = list(dict.fromkeys(key for record in records for key in record))
    raw = {key: [r.get(key) for r in records] for key in columns}
    kinds: dict[FieldPath, set[str]] = {}
    typed: dict[FieldPath, pa.Array] = {}  # each field pyarrow typed while looking for the varying ones
    for key in columns:
        if (array := typed_or_none(raw[key])) is None:
            kinds.update(refused_kinds((key,), raw[key], typed))
        else:
            typed[(key,)] = array
    varying = mixed_paths(kinds)
    mixed = {path[0] for path in varying if len(path) == 1}
    inner = {path[0]: [p for p in varying if p[0] == path[0]] for path in varying if len(path) > 1}
    nested = {key for key in mixed if kinds[(key,)] & {"list", "dict"}}
    marks = {NESTED_PREFIX + key: [isinstance(v, (list, dict)) for v in raw[key]] for key in nested}

    def column(key: str) -> pl.Series:
        """Why the typed arrays are reused: typing the fields again cost ~1 s of 200k nested records (measured)."""
        array = typed.get((key,))
        if array is None and key in inner:
            array = struct_column(raw[key], (key,), set(inner[key]), typed)
        if array is not None:
            try:
                return pl.Series(key, array)
            except pl.exceptions.PolarsError:
                pass  # made below as before (:func:`_typed_column`: polars types the values itself)
        if key in mixed:
            return _good_text(key, [as_json_text(v) for v in raw[key]], marks)
        return _good_text(key, texted_column(records, key, inner[key]) if key in inner else raw[key], marks)

    try:
        frame = pl.DataFrame([column(key) for key in columns])
    except (pl.exceptions.PolarsError, TypeError, OverflowError, ValueError):
        # Values polars still cannot hold together: every non-text field is kept as JSON text.
        marks = {NESTED_PREFIX + key: [isinstance(v, (list, dict)) for v in raw[key]] for key in columns}
        frame = pl.DataFrame([_good_text(key, [as_json_text(v) for v in raw[key]], marks) for key in columns])
    return frame, marks


#: A text that holds a lone UTF-16 surrogate, which no UTF-8 column can hold (see :func:`_good_text`).
REASON_BAD_TEXT_PREFIX = "bad_text:"


def _good_text(name: str, values: list[object], marks: dict[str, list[bool]]) -> pl.Series:
    """One field's values as a column (:func:`_typed_column`); where a value holds a lone UTF-16 surrogate
    (``"\\ud800"``: Python's JSON parser accepts it, UTF-8 cannot encode it) its texts are shown escaped
    (``\\ud800``) and its row flagged ``bad_text:<name>`` in ``marks``.

    Why: such a value crashed the import with a raw UnicodeEncodeError, or, inside an object, made polars keep
    the whole field as Python objects that no mapping reads.  The check runs only when the column cannot be built.
    """
    try:
        return _typed_column(name, values)
    except UnicodeEncodeError:
        pass
    bad = [_holds_surrogate(v) for v in values]
    marks[FLAG_PREFIX + REASON_BAD_TEXT_PREFIX + name] = bad
    return _typed_column(name, [_escaped(v) if b else v for v, b in zip(values, bad, strict=True)])


def _holds_surrogate(value: object) -> bool:
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _escaped(value: object) -> object:
    """``value`` with every text (keys too) UTF-8 can hold, a lone surrogate written as its escape ``\\udxxx``."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {_escaped(k): _escaped(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_escaped(v) for v in value]
    return value


def _typed_column(name: str, values: list[object]) -> pl.Series:
    """One field's values as a column: by pyarrow when they agree in kind (faster than polars), else by polars.

    A lone surrogate raises UnicodeEncodeError (:func:`_good_text`); polars would keep such objects as Python objects.
    """
    try:
        return pl.Series(name, pa.array(values))
    except UnicodeEncodeError:
        raise
    except (pa.ArrowException, pl.exceptions.PolarsError, TypeError, OverflowError, ValueError):
        return pl.Series(name, values, strict=False)


def _rename_reserved(frame: pl.DataFrame) -> pl.DataFrame:
    """Input fields named like the provenance or flag columns renamed ``input<name>``, so no input shadows them."""
    taken = set(frame.columns)
    renames = {}
    for name in frame.columns:
        if name in (SOURCE_FILE, SOURCE_ROW, REASON, NAMES_CHANGED) or name.startswith(_MARK_PREFIXES):
            new = "input" + name
            while new in taken:
                new = "input" + new
            taken.add(new)
            renames[name] = new
    return frame.rename(renames) if renames else frame


#: The source fields that hold judge or model names in any format (FastChat's ``judge`` may be ``[model, prompt]``):
#: put in the form the ingest reads names in as they are read (:func:`in_names_form`).
NAME_FIELDS = (
    "judge", "annotator", "worker", "model", "model_a", "model_b", "model_1", "model_2", "generator_1", "generator_2",
    "baseline", "left", "right", "model_x", "model_y",
)  # fmt: skip


def name_text(names: pl.Expr) -> pl.Expr:
    """Names as text as the ingest keys them (:func:`~biasboard.schemas.names.canonical_names`: trimmed, in NFC),
    for the ids built of them and the keys a sidecar's lengths are joined on; a name that is blank once trimmed
    stays as written (the rules reject it as missing, and its dead letter shows what was there, as the ingest's
    :func:`~biasboard.schemas.names.clean_names` leaves it)."""
    text = names.cast(pl.String)
    clean = canonical_names(text)
    return pl.when(clean == "").then(text).otherwise(clean)


def in_names_form(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with its :data:`NAME_FIELDS` as the ingest reads names (:func:`name_text`; text, Categorical or
    Enum as text, or the first item of a list of text), and the :data:`NAMES_CHANGED` mark where a row's changed.

    Why here, before any id is built: importers write names as the source spells them, and the ids made of them
    (``arena-hard:<judge>:<prompt>:<model>:<baseline>:g<game>``) differed between ``" gpt-4"`` and ``gpt-4``, or a
    composed and a decomposed spelling, which the ingest then reads as one name: a battle repeated so was two
    battles, not a duplicate.  Why counted: the ingest counts the rows whose names it changed (``trimmed``), and
    sees none of these, which arrive changed.  A list's later items (FastChat's prompt template) are only put in
    NFC: no name.  ASCII names without edges are unchanged.  A column whose names changed keeps them as written
    beside it (``__as_written:<column>``): a dead letter holds the row's original fields, for the user to find it
    at its source (:func:`~biasboard.schemas.names.as_written`)."""
    fixed: list[pl.Series] = []
    changed: list[pl.Series] = []
    for column in NAME_FIELDS:
        dtype = frame.schema.get(column)
        if dtype is not None and is_text(dtype):
            named = _names_in_form(frame.get_column(column))
        elif isinstance(dtype, pl.List) and is_text(dtype.inner):
            named = _listed_names_in_form(frame, column)
        else:
            named = None
        if named is not None:  # the names as written kept beside, for the dead letters (:func:`_original_text`)
            fixed.extend((named[0], frame.get_column(column).alias(AS_WRITTEN_PREFIX + column)))
            changed.append(named[1])
    frame = frame.with_columns(fixed) if fixed else frame
    if changed and (mark := pl.select(pl.any_horizontal(changed).fill_null(False)).to_series()).any():
        return frame.with_columns(mark.alias(NAMES_CHANGED))
    return frame


def _listed_names_in_form(frame: pl.DataFrame, column: str) -> tuple[pl.Series, pl.Series] | None:
    """(a list column with its first item as :func:`name_text` reads it and the others in NFC, the mask of the rows
    it changed), or None when it changes none: FastChat's ``judge``, ``[model, prompt template]``."""
    first = pl.int_range(pl.len()) == 0
    items = pl.element().cast(pl.String)
    listed = frame.select(
        pl.col(column).list.eval(pl.when(first).then(name_text(items)).otherwise(items.str.normalize(NAME_FORM)))
    ).to_series()
    differs = frame.get_column(column).cast(pl.List(pl.String)).ne_missing(listed)
    return (listed, differs) if differs.any() else None


def _names_in_form(names: pl.Series) -> tuple[pl.Series, pl.Series] | None:
    """(``names`` as :func:`name_text` reads them, the mask of the rows it changed), or None when it changes none.

    Why by distinct name: names repeat across rows, and the trim's two regular expressions per row cost 1.5 s over
    a million rows of three name columns; a column without anything to change is left as it is (its type too)."""
    text = names.cast(pl.String)
    distinct = text.drop_nulls().unique()
    clean = distinct.to_frame("name").select(name_text(pl.col("name"))).to_series()
    differs = distinct != clean
    if not differs.any():
        return None
    old, new = distinct.filter(differs), clean.filter(differs)
    return text.replace(old, new).alias(names.name), text.is_in(old.implode()).fill_null(False)


def mark_names_changed(frame: pl.DataFrame, changed: pl.Series) -> pl.DataFrame:
    """``frame`` with the rows of ``changed`` (a mask over them) added to its :data:`NAMES_CHANGED` mark.

    Why: a name an importer takes from elsewhere than a field (LLMFAO's judge, the prefix of the file name) is put
    in the names' form too, and its rows must be counted in the same note as the fields' (:func:`names_changed_note`)
    — the ingest, which sees it changed, no longer counts it."""
    if not changed.any():
        return frame
    if NAMES_CHANGED in frame.columns:
        changed = changed | frame.get_column(NAMES_CHANGED)
    return frame.with_columns(changed.alias(NAMES_CHANGED))


def names_changed_note(raw: pl.DataFrame, kept: pl.Series) -> list[str]:
    """The note counting the rows read whose names :func:`in_names_form` changed, split into those converted
    (``kept``: a mask over ``raw``) and those dead-lettered, in the words of the ingest's ``trimmed`` count, which
    these rows no longer reach.

    Why every row read, not only the converted ones: a rejected row's names are changed as well (for its battle id
    and the duplicate check; its dead letter keeps them as written), and counted nowhere it was a change the user
    could not learn of; the two parts add up to the whole, as the rows read add up to converted + dead letters."""
    if NAMES_CHANGED not in raw.columns:
        return []
    changed = raw.get_column(NAMES_CHANGED)
    n = int(changed.sum())
    if not n:
        return []
    converted = int(changed.filter(kept).sum())
    return [
        f"names: {n:,} of the {raw.height:,} rows read ({converted:,} converted, {n - converted:,} dead-lettered) "
        "had a judge or model name with whitespace or invisible characters at an end, or not in Unicode NFC: "
        "written trimmed and in NFC, as the ingest reads names (so its 'trimmed' count does not see them); dead "
        "letters keep them as written"
    ]


def read_all(
    paths: Sequence[Path], scalar: Iterable[str] = (), required: Iterable[str] = (), what: str = ""
) -> pl.DataFrame:
    """Several input files as one frame (columns unioned; types relaxed to a common supertype).

    ``scalar`` names the fields the format reads as single values: a list or
    object there is kept as JSON text and its row is flagged ``bad_type:<field>``
    (:func:`biasboard.schemas.coerce.coerce_types`, as the ingest does; in a
    field whose JSON type varies, read as text, the rows that held one), which
    :func:`finalize_battles` / :func:`finalize_scores` turn into the row's reason.

    ``required`` (the format's columns, ``what`` its name in the error) is checked in each file before the union,
    by :func:`require_columns`.  Why each file: the union has a column if any file has it, so a glob of a FastChat
    run's ``model_judgment/*.jsonl.gz`` (``gpt-4_single`` beside ``gpt-4_pair``) as ``--format mtbench-single``
    dead-lettered the 75 pair rows as ``no_verdict`` (as ``mtbench-pair``, 320 grade games as ``missing:model_a``)
    where either file alone is refused naming the format its columns fit.
    """
    required = tuple(required)
    frames = [read_records(p) for p in paths]
    for path, frame in zip(paths, frames, strict=True):
        require_columns(frame, required, [path], what)
    try:
        frame = pl.concat(frames, how="diagonal_relaxed") if len(frames) > 1 else frames[0]
    except pl.exceptions.PolarsError as err:  # a field typed (say) as a list in one file and a number in another
        names = ", ".join(str(p) for p in paths)
        raise InputError(f"{names}: a field has incompatible types across files ({str(err).splitlines()[0]})") from err
    scalar = tuple(scalar)
    marked = [c for c in frame.columns if c.startswith(NESTED_PREFIX)]
    flags = [
        pl.col(c).fill_null(False).alias(FLAG_PREFIX + REASON_BAD_TYPE_PREFIX + c.removeprefix(NESTED_PREFIX))
        for c in marked
        if c.removeprefix(NESTED_PREFIX) in scalar
    ]
    # A slice label that is a list or object on some rows (text on others): those rows get no label, not the JSON
    # text as one (a board named '["coding","math"]'); the mark stays for :func:`non_text_slice_notes` to count.
    labels = [
        c
        for c in marked
        if c.removeprefix(NESTED_PREFIX) in SLICE_COLUMNS and c.removeprefix(NESTED_PREFIX) not in scalar
    ]
    unlabel = [
        pl.when(pl.col(c).fill_null(False))
        .then(None)
        .otherwise(pl.col(c.removeprefix(NESTED_PREFIX)))
        .alias(c.removeprefix(NESTED_PREFIX))
        for c in labels
    ]
    dropped = [c for c in marked if c not in labels]
    return in_names_form(coerce_types(frame.with_columns(flags).with_columns(unlabel).drop(dropped), scalar))


def _flag_reason(raw: pl.DataFrame) -> pl.Expr:
    """The first ``__flag:<reason>`` set on a row (from :func:`read_all`'s ``scalar`` fields), else null."""
    reasons = [pl.when(pl.col(column)).then(pl.lit(reason)) for column, reason in flag_reasons(raw.columns)]
    return pl.coalesce(reasons) if reasons else pl.lit(None, dtype=pl.String)


class MissingColumn(InputError):
    """The input lacks a column its format needs; ``present`` holds the columns it has, so the CLI can name the
    formats they do fit (:func:`biasboard.importers.registry.convert`)."""

    def __init__(self, message: str, present: Sequence[str]) -> None:
        super().__init__(message)
        self.present = tuple(present)


def require_columns(frame: pl.DataFrame, columns: Iterable[str], paths: Sequence[Path], what: str) -> None:
    """:class:`MissingColumn` naming the file(s) and the first absent column the format needs."""
    for column in columns:
        if column not in frame.columns:
            names = ", ".join(str(p) for p in paths)
            raise MissingColumn(f"{names}: {what} input lacks required column '{column}'", frame.columns)


def column_or_null(frame: pl.DataFrame, column: str, dtype: pl.DataType | type[pl.DataType] = pl.String) -> pl.Expr:
    """The column when present, else a typed null (optional fields)."""
    return pl.col(column) if column in frame.columns else pl.lit(None, dtype=dtype)


#: A column's polars type as the schema gives it (an instance, or a class for the parameterless types).
DType = pl.DataType | DataTypeClass


def nested_field(frame: pl.DataFrame, column: str, *names: str) -> tuple[pl.Expr, DType] | None:
    """Struct field ``column.name.name…`` and its type, or None when the file lacks it (optional nested fields)."""
    dtype: DType | None = frame.schema.get(column)
    expr = pl.col(column)
    for name in names:
        inner = {f.name: f.dtype for f in dtype.fields} if isinstance(dtype, pl.Struct) else {}
        if name not in inner:
            return None
        expr, dtype = expr.struct.field(name), inner[name]
    return (expr, dtype) if dtype is not None else None


def json_truth(value: pl.Expr) -> pl.Expr:
    """A JSON flag as Python's truth test in the arena's code reads it: ``true``, or a number other than 0 (also
    written as text: a field whose JSON type varies is read as text, ``1.0`` as ``"1.0"``); anything else false.

    Why one reading: a boolean, a number and the same number as text must give one answer, whichever type the
    reader gave the field (it depends on the file's other rows).
    """
    text = value.cast(pl.String).str.strip_chars().str.to_lowercase()
    number = text.cast(pl.Float64, strict=False)
    return ((text == "true") | (number.is_not_null() & (number != 0.0))).fill_null(False)


def as_text(frame: pl.DataFrame, column: str) -> pl.Expr:
    """A column as text for ids and keys (lists are joined with '/'), nulls as ''."""
    dtype = frame.schema[column]
    if isinstance(dtype, pl.List):
        return pl.col(column).list.eval(pl.element().cast(pl.String)).list.join("/").fill_null("")
    return pl.col(column).cast(pl.String).fill_null("")


def integer_field(frame: pl.DataFrame, column: str, default: int) -> tuple[pl.Expr, pl.Expr]:
    """(``column`` as Int64, ``default`` where absent or null; ``bad_type:<column>`` where a value is no integer).

    A mixed-type field arrives as text (:func:`read_records`), so a value like
    ``"gpt-4"`` must reject its row rather than silently become the default.
    """
    if column not in frame.columns:
        return pl.lit(default, dtype=pl.Int64), pl.lit(None, dtype=pl.String)
    value = pl.col(column).cast(pl.Int64, strict=False)
    bad = pl.col(column).is_not_null() & value.is_null()
    return value.fill_null(default), pl.when(bad).then(pl.lit(REASON_BAD_TYPE_PREFIX + column)).otherwise(None)


def stable_id(prefix: str, *parts: pl.Expr) -> pl.Expr:
    """A deterministic id from a row's identifying fields (``prefix:part:part…``, nulls as ''): reimports match."""
    return pl.concat_str([pl.lit(prefix), *(part.fill_null("") for part in parts)], separator=":")


def judge_expr(
    frame: pl.DataFrame, options: ImportOptions, paths: Sequence[Path], column: str = "judge"
) -> tuple[pl.Expr, str | None]:
    """(each row's judge, the note saying which judge ``--judge`` replaced): ``--judge`` when given, else the file's
    ``column``; a file with neither needs ``--judge``.

    ``--judge`` renames a file's one judge, but is refused over a file that names several
    (:func:`one_judge_or_refuse`)."""
    if options.judge:
        return pl.lit(options.judge), one_judge_or_refuse(frame, column, options.judge, paths)
    if column not in frame.columns:
        names = ", ".join(str(p) for p in paths)
        raise InputError(f"{names}: no '{column}' field in the file; name the judge with --judge")
    return pl.col(column).cast(pl.String), None


def one_judge_or_refuse(frame: pl.DataFrame, column: str, judge: str, paths: Sequence[Path]) -> str | None:
    """InputError when ``--judge`` would give one name to the verdicts of several judges the file names; else the
    note saying which judge it replaced on how many rows (None when the file names none, or names ``judge``).

    Why refused: ``import --format pba --in 'mtbench_judgments_*' --judge gpt4`` made gemini-pro's, gpt-3.5's and
    gpt-4's verdicts one judge's, so two thirds of them became duplicate ids (9,568 dead letters) and the rest
    carried the wrong judge, with exit 0.  Why the note: over one judge it renamed MT-Bench's ``gpt-4`` (or a FastChat
    log's one voter) without a word, where the help and README spoke of naming the judge of a file that names none."""
    if column not in frame.columns:
        return None
    names = frame[column]
    if isinstance(names.dtype, pl.List):  # FastChat's [model, prompt]
        names = names.list.get(0, null_on_oob=True)
    # as the ingest will read them: one judge spelt " gpt-4" and "gpt-4" (or composed and decomposed) is one judge
    names = canonical_names(names.cast(pl.String))
    named = names.drop_nulls().unique().sort()
    if named.len() > 1:
        shown = first_few(named.to_list(), 3)
        files = ", ".join(str(p) for p in paths[:2]) + (" …" if len(paths) > 2 else "")
        raise InputError(
            f"{files}: --judge {judge} would name every row's judge, but the input names {named.len()} judges "
            f"({shown}): their verdicts would become one judge's. Leave --judge out (refresh --aliases renames "
            "judges)"
        )
    if named.len() == 0 or named[0] == judge:
        return None
    replaced = names.is_not_null().sum()
    return (
        f"--judge {judge} replaced the judge the input names, {named[0]}, on {replaced:,} of its {frame.height:,} rows"
    )


def judge_parts(
    frame: pl.DataFrame, options: ImportOptions, paths: Sequence[Path]
) -> tuple[pl.Expr, pl.Expr, str | None]:
    """(judge name, prompt template name, the note of :func:`judge_expr`) from FastChat's ``judge`` field,
    ``[model, prompt]`` or a plain string.

    ``--judge`` wins over the file (with a note when it names another); a file without any judge field needs
    ``--judge``.
    """
    prompt = pl.lit(None, dtype=pl.String)
    if "judge" in frame.columns and isinstance(frame.schema["judge"], pl.List):
        prompt = pl.col("judge").list.get(1, null_on_oob=True).cast(pl.String)
        if not options.judge:
            return pl.col("judge").list.get(0, null_on_oob=True).cast(pl.String), prompt, None
    judge, note = judge_expr(frame, options, paths)
    return judge, prompt, note


def fixed_day(options: ImportOptions) -> pl.Expr:
    """00:00 UTC of the documented default day, for sources without time stamps."""
    moment = dt.datetime.combine(options.default_date, dt.time(), tzinfo=dt.timezone.utc)
    return pl.lit(moment, dtype=pl.Datetime("us", "UTC"))


def unused_date_note(rows: pa.Table, day: dt.date) -> str | None:
    """The note for a ``--date`` that dated none of the converted ``rows`` (each carries its source's time stamp).

    Why: ``--date`` dates only rows whose source has no time stamp, and over a file whose every row is dated it did
    nothing, without a word.  A row counts as dated by it when its ``ts`` is that day's 00:00 UTC, as
    :func:`fixed_day` writes it: a source stamp at that very instant would hide the note, never give a false one."""
    moment = dt.datetime.combine(day, dt.time(), tzinfo=dt.timezone.utc)
    stamps = pl.DataFrame(rows.select(["ts"])).get_column("ts")
    if rows.num_rows == 0 or (stamps == moment).any():
        return None
    return f"--date {day.isoformat()} dated no row: every row converted carries its own time stamp"


def fixed_epoch_seconds(options: ImportOptions) -> float:
    """The default day as epoch seconds, for columns that otherwise hold FastChat's ``tstamp``."""
    return dt.datetime.combine(options.default_date, dt.time(), tzinfo=dt.timezone.utc).timestamp()


def epoch_seconds(stamp: pl.Expr) -> pl.Expr:
    """FastChat's ``tstamp`` (epoch seconds, a number or a number as text) as Float64, per row.

    A field whose JSON type varies from line to line arrives as text for *every*
    line (:func:`read_records`), so the numbers must be parsed here rather than
    left to the rules, which read text as ISO dates and would reject the whole
    file.  A value that is no number becomes NaN, which the rules reject as
    ``bad_timestamp`` for that row alone; null stays null.
    """
    seconds = stamp.cast(pl.Float64, strict=False)
    return pl.when(stamp.is_not_null() & seconds.is_null()).then(float("nan")).otherwise(seconds)


def tstamp_or_default_day(
    frame: pl.DataFrame, options: ImportOptions, unit: str = "rows", column: str = "tstamp"
) -> tuple[pl.Expr, str | None]:
    """(epoch seconds from ``column``, the default day where it is absent or null; the note counting those rows).

    The FastChat ``llm_judge`` formats (MT-Bench pair and single) share this
    rule, so the two halves of one run date their rows alike: a stamp that is
    missing is not an error (older runs and Arena-Bench-v1 write none), so the
    row gets the documented default day and the manifest counts it; a stamp
    that is present but unreadable rejects only its own row (:func:`epoch_seconds`).
    ``unit`` names what the rows are in the note (``games`` for pair lines).
    """
    stamp = column_or_null(frame, column, pl.Float64)
    undated = frame.height if column not in frame.columns else frame[column].null_count()
    note = f"{undated} {unit} without {column} dated {options.default_date.isoformat()} 00:00 UTC" if undated else None
    seconds = pl.when(stamp.is_null()).then(pl.lit(fixed_epoch_seconds(options))).otherwise(epoch_seconds(stamp))
    return seconds, note


def pick_length_unit(options: ImportOptions) -> str:
    if options.length_unit not in ("chars", "words"):
        raise InputError(f"--length-unit must be 'chars' or 'words', not {options.length_unit!r}")
    return options.length_unit


# ---------------------------------------------------------------------------------------------- finalizing


def _original_text(raw: pl.DataFrame, column: str) -> pl.Expr:
    """A field of ``raw`` as its dead letters' text, as the input wrote it: names before :func:`in_names_form`
    (:func:`~biasboard.schemas.names.as_written`), lists joined with ', ', objects as JSON."""
    value = as_written(column, raw.columns)
    dtype = raw.schema[column]  # (a name's copy as written has its column's kind: text, categories or a list)
    if isinstance(dtype, (pl.List, pl.Array)):
        return value.list.eval(pl.element().cast(pl.String)).list.join(", ").alias(column)
    if isinstance(dtype, pl.Struct):
        return value.struct.json_encode().alias(column)
    return value.cast(pl.String).alias(column)


def _dead_letters(raw: pl.DataFrame, reasons: pl.Series, mask: pl.Series) -> pa.Table:
    """Rejected rows: every original field as text, then reason, source file and row (the dead-letter contract)."""
    original = [c for c in raw.columns if c not in (SOURCE_FILE, SOURCE_ROW) and c not in META_FIELDS]
    original = [c for c in original if not c.startswith(_MARK_PREFIXES) and c != NAMES_CHANGED]
    texts = [_original_text(raw, column) for column in original]
    dead = (
        raw.with_columns(reasons.alias(REASON))
        .filter(mask)
        .select(
            *texts,
            pl.col(REASON).alias("reason"),
            pl.col(SOURCE_FILE).alias("source_file"),
            pl.col(SOURCE_ROW).cast(pl.Int64).alias("source_row"),
        )
    )
    # An original column named like a meta field is left out above: the contract's meta wins.
    schema = dead_letter_schema(pa.schema([pa.field(c, pa.string()) for c in original]))
    return dead.select(schema.names).to_arrow().cast(schema)


def text_slice_labels(raw: pl.DataFrame) -> list[pl.Expr]:
    """The source's text ``category``/``language`` columns, kept as the battles' slice labels.

    Why here: every importer whose source labels its prompts (FastChat's language, Position-Bias-Analyzer's
    question category, arena-hard-auto v2's category) must carry the label the same way, or ``refresh --slices``
    finds no label in a file that has one.  A non-text column (FastChat's tags) is the importer's to read.
    """
    return [pl.col(c) for c in SLICE_COLUMNS if raw.schema.get(c) == pl.String]


def non_text_slice_notes(raw: pl.DataFrame, columns: Sequence[str] = SLICE_COLUMNS) -> list[str]:
    """A note for each of ``columns`` the source has that holds no text (numbers, lists): it is not kept as a slice
    label, and saying so here is the only place the user can learn why ``refresh --slices`` then finds no label (a
    FastChat file whose ``category`` was 7 on every row imported with no word, every category null)."""
    notes = []
    for column in columns:
        kind = raw.schema.get(column)
        if kind is not None and kind not in (pl.String, pl.Null):
            notes.append(
                f"{column}: the source's {column} column holds {kind} values, not text labels, so it is not kept "
                f"(refresh --slices {column} finds no label in this import)"
            )
        elif NESTED_PREFIX + column in raw.columns and (nested := int(raw[NESTED_PREFIX + column].sum())):
            notes.append(
                f"{column}: {nested} row(s) hold a list or object, not a text label, so they have no {column} "
                f"(refresh --slices {column} leaves them off every {column} board)"
            )
    return notes


def _optional_text(mapped: pl.DataFrame, column: str) -> pl.Expr:
    """A family column the mapping chose to fill (the source names it), else null for the ingest's family map."""
    return (pl.col(column).cast(pl.String) if column in mapped.columns else pl.lit(None, dtype=pl.String)).alias(column)


def _split(raw: pl.DataFrame, checked: pl.DataFrame, id_column: str, dup_reason: str) -> tuple[pl.Series, pl.Series]:
    """(reason per row, mask of rejected rows), adding duplicates among otherwise valid rows."""
    valid_id = pl.when(pl.col(REASON).is_null()).then(pl.col(id_column))
    reasons = checked.select(
        pl.when(pl.col(REASON).is_null() & ~valid_id.is_first_distinct())
        .then(pl.lit(dup_reason))
        .otherwise(pl.col(REASON))
        .alias(REASON)
    ).to_series()
    if raw.height != checked.height:  # a join gone wrong would misalign dead letters with their rows
        raise AssertionError(f"mapped rows ({checked.height}) do not align with source rows ({raw.height})")
    return reasons, reasons.is_not_null()


def _duplicate_note(
    checked: pl.DataFrame, reasons: pl.Series, id_column: str, dup_reason: str, content: Sequence[str]
) -> str | None:
    """How many of the ``dup_reason`` rows repeat their kept row exactly (the same ``content``) and how many differ.

    Why: a repeat is harmless (LLMFAO's ``gpt4-crowd-comparisons.csv`` repeats 2,139 rows of
    ``gpt4-comparisons.csv``: importing the folder dead-letters them all), a duplicate id with another verdict or
    other models is a data problem the user should look at; the reason alone cannot tell the two apart."""
    duplicate = reasons == dup_reason
    if not duplicate.any():
        return None
    fields = checked.select(pl.col(id_column), *(pl.col(c).cast(pl.String) for c in content))
    kept = fields.filter(checked[REASON].is_null()).unique(id_column, keep="first")
    dups = fields.filter(duplicate).join(kept, on=id_column, how="left", suffix="_kept", maintain_order="left")
    differs = dups.select(pl.col(c).ne_missing(pl.col(f"{c}_kept")).alias(c) for c in content)
    different = int(differs.select(pl.any_horizontal(pl.all())).to_series().sum())
    same = dups.height - different
    what = ", ".join(content)
    if not different:
        return f"{dup_reason}: all {same} repeat the row kept under their id exactly ({what})"
    # Only the fields that do differ: "differ from it in judge, model_a, model_b, winner, prompt_id" when only the
    # winner did read as if everything had.
    changed = ", ".join(f"{c} {n}" for c, n in zip(content, differs.sum().row(0), strict=True) if n)
    return (
        f"{dup_reason}: {same} repeat the row kept under their id exactly ({what}); {different} differ from it "
        f"(rows by field: {changed}; see the dead letters)"
    )


def finalize_battles(
    raw: pl.DataFrame, mapped: pl.DataFrame, *, sources: Sequence[Path], source_rows: int, notes: Sequence[str] = ()
) -> ImportResult:
    """Validate ``mapped`` (row-aligned with ``raw``) with the ingest's rules; valid rows → BATTLE_SCHEMA.

    ``mapped`` holds :data:`BATTLE_MAPPED` plus ``__reason`` (a format-specific
    rejection such as ``no_verdict``, null when the mapping succeeded), and
    optionally ``family_a`` / ``family_b`` / ``judge_family`` when the source
    names them (left null otherwise: the ingest's family map assigns them) and
    ``order_known`` (false where the source does not record the shown order;
    null = known) and ``strength`` (an ordinal verdict strength, when the source has one) and the
    style counts ``header_count_a`` ... ``bold_count_b`` (when the source has them).  The
    format's reason takes precedence over the generic rules.
    """
    styles = [c for c in STYLE_COUNT_COLUMNS if c in mapped.columns]
    checked = mapped.with_columns(
        timestamp_expr(mapped.schema["ts"], "ts").alias("__ts"),
        length_expr("len_a", mapped.schema["len_a"]).alias("__len_a"),
        length_expr("len_b", mapped.schema["len_b"]).alias("__len_b"),
        *(style_count_expr(c, mapped.schema[c]).alias(f"__{c}") for c in styles),
    )
    rule = battle_reason_expr(checked.schema, "__ts", ("__len_a", "__len_b"), tuple(f"__{c}" for c in styles))
    flagged = raw.select(_flag_reason(raw).alias("__flag")).to_series()
    checked = checked.with_columns(pl.coalesce(flagged, pl.col(REASON), rule).alias(REASON))
    reasons, rejected = _split(raw, checked, "battle_id", REASON_DUPLICATE_ID)
    repeated = _duplicate_note(checked, reasons, "battle_id", REASON_DUPLICATE_ID, BATTLE_CONTENT)
    valid = checked.filter(~rejected).select(
        pl.col("battle_id").cast(pl.String),
        pl.col("__ts").alias("ts"),
        pl.col("judge").cast(pl.String),
        pl.col("model_a").cast(pl.String),
        pl.col("model_b").cast(pl.String),
        winner_expr("winner").alias("winner"),
        pl.col("prompt_id").cast(pl.String),
        pl.col("__len_a").round().cast(pl.Int64).alias("len_a"),
        pl.col("__len_b").round().cast(pl.Int64).alias("len_b"),
        *(_optional_text(mapped, c) for c in ("family_a", "family_b", "judge_family")),
        (pl.col("order_known") if "order_known" in mapped.columns else pl.lit(None))
        .cast(pl.Boolean)
        .alias("order_known"),
        (pl.col("strength") if "strength" in mapped.columns else pl.lit(None)).cast(pl.Int8).alias("strength"),
        *(_optional_text(mapped, c) for c in ("category", "language")),  # slice labels, when the source has them
        *(
            (pl.col(f"__{c}").round() if c in styles else pl.lit(None)).cast(pl.Int64).alias(c)
            for c in STYLE_COUNT_COLUMNS
        ),
    )
    return ImportResult(
        kind="battles",
        rows=valid.to_arrow().cast(BATTLE_SCHEMA),
        dead_letters=_dead_letters(raw, reasons, rejected),
        rows_read=raw.height,
        source_rows=source_rows,
        sources=tuple(str(p) for p in sources),
        notes=(
            *notes,
            *([repeated] if repeated else []),
            *_global_judge_note(valid),
            *_partial_style_note(styles),
            *names_changed_note(raw, ~rejected),
        ),
    )


def _partial_style_note(styles: Sequence[str]) -> list[str]:
    """A note when the source carries some of the six style counts but not all: a battle has style information only
    with all six (``schemas.rules``), so none of these counts is used — which nothing said (a log of header counts
    alone imported with a null ``summary.style`` and no word)."""
    if not styles or len(styles) == len(STYLE_COUNT_COLUMNS):
        return []
    missing = [c for c in STYLE_COUNT_COLUMNS if c not in styles]
    return [
        f"style counts: the source has {', '.join(styles)} but not {', '.join(missing)}; a battle carries style only "
        "with all six, so no battle has style information and no style correction is possible"
    ]


def _global_judge_note(valid: pl.DataFrame) -> list[str]:
    """A note when converted rows name their judge ``*``, which refresh refuses (the name of the global effects,
    :class:`~biasboard.ranking.data.Dataset`): said here, where the judge's name came from, not first at the fit."""
    n = int((valid["judge"] == GLOBAL_JUDGE).sum())
    if not n:
        return []
    return [
        f"{n} battle(s) name their judge {GLOBAL_JUDGE!r}, the name of the global effects, which refresh refuses: "
        'rename it with refresh --aliases FILE (a JSON map such as {"*": "crowd"})'
    ]


def finalize_scores(
    raw: pl.DataFrame, mapped: pl.DataFrame, *, sources: Sequence[Path], source_rows: int, notes: Sequence[str] = ()
) -> ImportResult:
    """Score rows (ordinal single-answer grades) → SCORE_SCHEMA, with the ingest's score rules."""
    checked = mapped.with_columns(
        timestamp_expr(mapped.schema["ts"], "ts").alias("__ts"),
        score_value_expr(mapped.schema["score"], "score").alias("__score"),
        length_expr("len", mapped.schema["len"]).alias("__len"),
    )
    rule = score_reason_expr(checked.schema, "__ts", "__score", "__len")
    flagged = raw.select(_flag_reason(raw).alias("__flag")).to_series()
    checked = checked.with_columns(pl.coalesce(flagged, pl.col(REASON), rule).alias(REASON))
    reasons, rejected = _split(raw, checked, "score_id", REASON_DUPLICATE_SCORE_ID)
    repeated = _duplicate_note(checked, reasons, "score_id", REASON_DUPLICATE_SCORE_ID, SCORE_CONTENT)
    valid = checked.filter(~rejected).select(
        pl.col("score_id").cast(pl.String),
        pl.col("__ts").alias("ts"),
        pl.col("judge").cast(pl.String),
        pl.col("model").cast(pl.String),
        pl.col("prompt_id").cast(pl.String),
        pl.col("__score").alias("score"),
        pl.col("__len").round().cast(pl.Int64).alias("len"),
        pl.lit(None, dtype=pl.String).alias("family"),
        pl.lit(None, dtype=pl.String).alias("judge_family"),
    )
    return ImportResult(
        kind="scores",
        rows=valid.to_arrow().cast(SCORE_SCHEMA),
        dead_letters=_dead_letters(raw, reasons, rejected),
        rows_read=raw.height,
        source_rows=source_rows,
        sources=tuple(str(p) for p in sources),
        notes=(*notes, *([repeated] if repeated else []), *names_changed_note(raw, ~rejected)),
    )
