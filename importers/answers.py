"""Answer lengths for FastChat ``llm_judge`` and arena-hard-auto judgments, from the run's ``model_answer/`` folder.

MT-Bench judgment files carry no lengths, but the answers they judged sit beside
them (``data/mt_bench/model_answer/<model>.jsonl`` next to
``data/mt_bench/model_judgment/``).  FastChat names a model by its answer
file's *stem* (``alpaca_mt.jsonl`` is model ``alpaca_mt`` whatever its
``model_id`` says), and when a file answers a question twice the later answer
wins (FastChat loads answers into a dict).  We do the same.

Length unit: characters of what the judge saw for that turn: turn 1 → the first
answer; turn 2 (multi-turn prompts show the whole dialogue) → both answers.

arena-hard-auto keeps the same layout one folder deeper
(``data/<bench>/model_judgment/<judge>/<model>.jsonl`` beside
``data/<bench>/model_answer/<model>.jsonl``) and single-turn answers in two
shapes: v0.1 ``{question_id, model_id, choices: [{turns: [{content}]}],
conv_metadata: {token_len}}`` (older files: ``token_len`` in each turn), v2
``{uid, model, messages: [..., {role: assistant, content: {answer}}],
metadata: {token_len}}``.  Its lengths (:func:`arena_hard_answer_lengths`) are
the answers' token counts (tiktoken, as arena-hard-auto's own length control
uses) when every answer carries one, else characters of the answer text: one
unit for the whole import, never a mix.
"""

from __future__ import annotations

import gzip
import io
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl
from biasboard.importers.common import SOURCE_ROW, DType, ImportResult, name_text, nested_field, read_records
from biasboard.schemas.errors import InputError

ANSWER_PATTERNS = ("*.jsonl", "*.jsonl.gz")
LENGTH_KEYS = ("model", "question_id", "turn")


def default_answers_dir(judgment_files: Sequence[Path], depth: int = 1) -> Path | None:
    """FastChat's layout: ``<bench>/model_judgment/x.jsonl`` → ``<bench>/model_answer`` when it exists.

    ``depth``: folders between ``model_judgment`` and the files (arena-hard-auto: 2, ``<judge>/<model>.jsonl``).
    """
    for path in judgment_files:
        if len(path.parents) > depth:
            candidate = path.parents[depth] / "model_answer"
            if candidate.is_dir():
                return candidate
    return None


#: The column a judgment row and a length row join on: the folder (or sidecar file) the lengths were read from.  A
#: judgment row carries its own file (its ``read_records`` source file) until :attr:`FolderLengths.key` maps that
#: file to the folder beside it.
FILE_KEY = "__file"


#: Lengths read from one folder (or sidecar file), with the judgment files (as read) that take them.
FolderPart = tuple[Path, pl.DataFrame, Sequence[str]]


@dataclass(frozen=True)
class FolderLengths:
    """Lengths keyed once per folder they were read from, and the folder each judgment file joins.

    ``table``: every folder's lengths, each row carrying its folder in :data:`FILE_KEY`; ``folders``: the folders
    (or sidecars) read, in order; ``files``: judgment file (as read) → its folder's key.

    Why once per folder, not once per judgment file: the lengths used to be repeated for every judgment file beside
    a folder (a cross join), so that a row matched only its own run's answers.  That grew as files × answers:
    arena-hard-auto has one judgment file per model beside one ``model_answer/`` of every model's answers (150 models
    × 750 questions: 17 million rows, 7.4 GB peak against 0.6 GB), and an MT-Bench or LLMFAO folder of many judgment
    files repeated its answers or sidecar once per file.  Mapping each row's file to its folder keeps the same
    matches with one copy of each folder's lengths.
    """

    table: pl.DataFrame
    folders: tuple[Path, ...]
    files: Mapping[str, str]

    @property
    def key(self) -> pl.Expr:
        """:data:`FILE_KEY` of judgment rows (their file) → the folder whose lengths they join; null for a file beside
        no folder read (a null key joins nothing)."""
        return pl.col(FILE_KEY).replace_strict(dict(self.files), default=None, return_dtype=pl.String).alias(FILE_KEY)


def keyed_by_folder(parts: Iterable[FolderPart]) -> FolderLengths | None:
    """(folder, the lengths read from it, the judgment files beside it) → one :class:`FolderLengths`; None when
    no folder was read.  A folder's lengths are kept once however many files sit beside it."""
    tables, folders, files = [], [], {}
    for folder, lengths, beside in parts:
        key = str(folder)
        tables.append(lengths.with_columns(pl.lit(key, dtype=pl.String).alias(FILE_KEY)))
        folders.append(folder)
        files.update(dict.fromkeys(beside, key))
    if not tables:
        return None
    return FolderLengths(pl.concat(tables, how="vertical_relaxed"), tuple(folders), files)


def answer_folders(judgment_files: Sequence[Path], answers_dir: Path | None, depth: int = 1) -> dict[Path, list[str]]:
    """The answer folders of ``judgment_files``, each with the judgment files (as read) that take its lengths.

    With ``--answers`` (``answers_dir``) every file takes that folder's lengths.  Otherwise each file takes the
    ``model_answer/`` beside its own ``model_judgment/`` (:func:`default_answers_dir`); a file beside none is in no
    list.

    Why per file: a glob over several runs (``samples/*/mt_bench/model_judgment/gpt-4_pair.jsonl``) used to read
    the first file's folder alone, and the other runs' rows came out without lengths, silently (measured: 155 of
    302 pair battles, 1,599 of 1,759 single grades); two runs may also answer under one model name with
    different answers, so the folders are not merged into one table (:class:`FolderLengths` keys each by its folder).
    """
    if answers_dir is not None:
        return {answers_dir: [str(path) for path in judgment_files]}
    found: dict[Path, list[str]] = {}
    for path in judgment_files:
        folder = default_answers_dir([path], depth)
        if folder is not None:
            found.setdefault(folder, []).append(str(path))
    return dict(sorted(found.items()))


def read_answer_folders(
    judgment_files: Sequence[Path], answers_dir: Path | None, read: Callable[[Path], pl.DataFrame], depth: int = 1
) -> list[FolderPart]:
    """Each of the :func:`answer_folders` of ``judgment_files``, ``read`` once, with its files: the parts of
    :func:`keyed_by_folder`."""
    return [
        (folder, read(folder), files) for folder, files in answer_folders(judgment_files, answers_dir, depth).items()
    ]


def sidecars_by_file(judgment_files: Sequence[Path], name: str) -> dict[Path, list[str]]:
    """The files named ``name`` beside ``judgment_files``, each with the judgment files (as read: their
    :data:`FILE_KEY`) that sit beside it; a judgment file with none beside it is in no list.

    Why: a glob over two folders (``runs/*/gpt4-comparisons.csv``) used to take the first file's sidecar for every
    file, so the other folder's rows got that folder's lengths where the keys matched (LLMFAO's model and prompt ids
    are the same in every folder) and none elsewhere, and the note named one sidecar.
    """
    found: dict[Path, list[str]] = {}
    for path in judgment_files:
        sidecar = path.parent / name
        if sidecar.is_file():
            found.setdefault(sidecar, []).append(str(path))
    return dict(sorted(found.items()))


def missing_lengths_note(
    result: ImportResult,
    sides: Sequence[tuple[str, str]],
    noun: str,
    lacking: Sequence[str],
    absent: str = "no answer file for",
) -> str | None:
    """A note counting the rows written without a length for one answer or more, naming the models in ``lacking``
    (those without any length where their rows were judged: ``absent`` says why); None when every row has its
    lengths.

    ``sides``: (model column, length column) of the written rows.  Why: the "lengths: … from <folder>" note read as
    if every row had one, while a model without an answer file (or a question its answers lack) left its battles
    without lengths, so out of the length effect, without a word.
    """
    columns = [c for pair in sides for c in pair]
    rows = pl.DataFrame(result.rows.select(columns))
    gone = set(lacking)
    missing = rows.filter(pl.any_horizontal(pl.col(length).is_null() for _, length in sides))
    if missing.height == 0:
        return None
    unanswered = missing.filter(
        pl.any_horizontal(pl.col(length).is_null() & ~pl.col(model).is_in(list(gone)) for model, length in sides)
    ).height
    why = []
    if gone:
        shown = ", ".join(sorted(gone)[:5]) + (f" and {len(gone) - 5} more" if len(gone) > 5 else "")
        why.append(f"{absent} {shown}")
    if unanswered:
        why.append(
            f"in {unanswered:,}, an answer's model has lengths but not for that question, or its judgment file "
            "has no lengths beside it"
        )
    return (
        f"{missing.height:,} of {result.rows_converted:,} {noun} have no length for "
        f"{'one answer or both' if len(sides) > 1 else 'the answer'} (kept, without the length covariate): "
        + "; ".join(why)
    )


def models_without_lengths(mapped: pl.DataFrame, lengths: pl.DataFrame, sides: Sequence[tuple[str, str]]) -> list[str]:
    """The models of ``mapped`` with no row at all in ``lengths`` for their own folder (both keyed by
    :data:`FILE_KEY`, ``mapped`` through :attr:`FolderLengths.key`; rows of a file with no lengths at all are left
    out), sorted.

    ``sides``: (column joined on the lengths' ``model``, column naming the model)."""
    named = pl.concat(
        [mapped.select(pl.col(key).alias("model"), pl.col(name).alias("__name"), FILE_KEY) for key, name in sides],
        how="vertical_relaxed",
    ).drop_nulls("model")
    # A file with no lengths beside it at all says nothing of which models have answers.
    named = named.filter(pl.col(FILE_KEY).is_in(lengths[FILE_KEY].unique().to_list()))
    named = named.join(lengths.select("model", FILE_KEY).unique(), on=["model", FILE_KEY], how="anti")
    return sorted(named["__name"].drop_nulls().unique().to_list())


def _answer_files(answers_dir: Path) -> list[Path]:
    files = sorted(p for pattern in ANSWER_PATTERNS for p in answers_dir.glob(pattern))
    if not files:
        raise InputError(f"{answers_dir}: no model answer files (*.jsonl[.gz]) in this folder")
    return files


def _stem(path: Path) -> str:
    name = path.name.removesuffix(".gz")
    return name.removesuffix(".jsonl")


def answer_lengths(answers_dir: Path) -> pl.DataFrame:
    """(model, question_id as text, turn, len) per answer turn; one row per key (the file's last answer wins)."""
    frames = []
    for path in _answer_files(answers_dir):
        frame = read_records(path)
        if "question_id" not in frame.columns or "choices" not in frame.columns:
            raise InputError(f"{path}: FastChat answer file lacks 'question_id' or 'choices'")
        turns = _first_choice_turns(frame)
        if turns is None or turns[1] != pl.String:  # (a line's choices as text, or turns that are not text)
            raise InputError(
                f"{path}: FastChat answer file: 'choices' must hold [{{\"turns\": [text, ...]}}] on every line "
                f"(read as {frame.schema['choices']})"
            )
        turn_chars = turns[0].list.eval(pl.element().str.len_chars())
        per_answer = frame.select(
            name_text(pl.lit(_stem(path))).alias("model"),  # as names are read: a macOS file name is decomposed
            pl.col("question_id").cast(pl.String),
            pl.col(SOURCE_ROW),
            turn_chars.alias("chars"),
        )
        for turn in (1, 2):
            enough = pl.col("chars").list.len() >= turn
            frames.append(
                per_answer.select(
                    "model",
                    "question_id",
                    SOURCE_ROW,
                    pl.lit(turn, dtype=pl.Int64).alias("turn"),
                    pl.when(enough).then(pl.col("chars").list.head(turn).list.sum()).cast(pl.Int64).alias("len"),
                )
            )
    lengths = pl.concat(frames).sort(SOURCE_ROW)
    return lengths.unique(subset=list(LENGTH_KEYS), keep="last", maintain_order=True).drop(SOURCE_ROW)


def _token_count(frame: pl.DataFrame) -> pl.Expr:
    """The answer's token count: ``conv_metadata.token_len`` (v0.1), ``metadata.token_len`` (v2), or the
    sum of the turns' ``token_len`` (older v0.1); null where the line has none."""
    nested = (nested_field(frame, "conv_metadata", "token_len"), nested_field(frame, "metadata", "token_len"))
    found = [f[0] for f in nested if f is not None]
    turns = _first_choice_turns(frame)
    if turns is not None and isinstance(turns[1], pl.Struct) and "token_len" in {f.name for f in turns[1].fields}:
        per_turn = turns[0].list.eval(pl.element().struct.field("token_len"))
        # A turn without a count makes the answer's count unknown (a sum would read it as 0 tokens: an empty answer).
        complete = (per_turn.list.drop_nulls().list.len() == per_turn.list.len()) & (per_turn.list.len() > 0)
        found.append(pl.when(complete).then(per_turn.list.sum()))
    counts = [e.cast(pl.Float64, strict=False) for e in found]
    return pl.coalesce(counts) if counts else pl.lit(None, dtype=pl.Float64)


def _first_choice_turns(frame: pl.DataFrame) -> tuple[pl.Expr, DType] | None:
    """``choices[0].turns`` and the type of one turn (text in llm_judge, ``{content, …}`` in arena-hard v0.1)."""
    dtype = frame.schema.get("choices")
    if not isinstance(dtype, pl.List) or not isinstance(dtype.inner, pl.Struct):
        return None
    turns = next((f.dtype for f in dtype.inner.fields if f.name == "turns"), None)
    if not isinstance(turns, pl.List):
        return None
    return pl.col("choices").list.first().struct.field("turns"), turns.inner


def _answer_chars(frame: pl.DataFrame) -> pl.Expr:
    """Characters of the answer: its turns' text (v0.1) or the last message's answer (v2); null if neither."""
    turns = _first_choice_turns(frame)
    if turns is not None and turns[1] == pl.String:
        return turns[0].list.eval(pl.element().str.len_chars()).list.sum()
    if turns is not None and isinstance(turns[1], pl.Struct) and "content" in {f.name for f in turns[1].fields}:
        return turns[0].list.eval(pl.element().struct.field("content").str.len_chars()).list.sum()
    messages = frame.schema.get("messages")
    if isinstance(messages, pl.List) and isinstance(messages.inner, pl.Struct):
        content = next((f.dtype for f in messages.inner.fields if f.name == "content"), None)
        last = pl.col("messages").list.last().struct.field("content")
        if content == pl.String:  # text, or an {"answer": …} object kept as its JSON (the user turns are text)
            return pl.coalesce(last.str.json_path_match("$.answer"), last).str.len_chars()
        if isinstance(content, pl.Struct) and "answer" in {f.name for f in content.fields}:
            return last.struct.field("answer").str.len_chars()
    return pl.lit(None, dtype=pl.UInt32)


def _read_answers(path: Path) -> pl.DataFrame:
    """One arena-hard-auto answer file (JSON lines, gzip or plain) with its row numbers.

    Why not :func:`~biasboard.importers.common.read_records`: a v2 file's messages hold text (the prompt)
    and objects (the answer) in one field; pyarrow's reader flattens such an object into lossy text,
    polars keeps its JSON, from which the answer is read.
    """
    try:
        data = gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes()
        frame = pl.read_ndjson(io.BytesIO(data), infer_schema_length=None) if data.strip() else pl.DataFrame()
    except (pl.exceptions.PolarsError, OSError, EOFError, zlib.error) as err:
        raise InputError(f"{path}: cannot be parsed ({type(err).__name__}: {str(err).splitlines()[0]})") from err
    if frame.height == 0:
        raise InputError(f"{path}: answer file holds no rows")
    return frame.with_columns(pl.int_range(pl.len(), dtype=pl.Int64).alias(SOURCE_ROW))


def arena_hard_answer_lengths(answers_dir: Path) -> tuple[pl.DataFrame, str]:
    """(model, question_id as text, turn = 1, len) per arena-hard-auto answer, and the unit ("tokens"/"chars").

    The model is the file's stem and the question its ``question_id`` (v0.1) or ``uid`` (v2); a question
    answered twice in a file keeps the later answer, as arena-hard-auto's loader does.
    """
    frames = []
    for path in _answer_files(answers_dir):
        frame = _read_answers(path)
        qid = next((c for c in ("uid", "question_id") if c in frame.columns), None)
        if qid is None or not ({"choices", "messages"} & set(frame.columns)):
            raise InputError(f"{path}: arena-hard-auto answer file lacks 'uid'/'question_id' or 'choices'/'messages'")
        frames.append(
            frame.select(
                name_text(pl.lit(_stem(path))).alias("model"),  # as names are read: a macOS file name is decomposed
                pl.col(qid).cast(pl.String).alias("question_id"),
                pl.col(SOURCE_ROW),
                _token_count(frame).alias("tokens"),
                _answer_chars(frame).cast(pl.Float64).alias("chars"),
            )
        )
    answers = pl.concat(frames, how="vertical_relaxed").sort(SOURCE_ROW)
    answers = answers.unique(subset=["model", "question_id"], keep="last", maintain_order=True)
    unit = "tokens" if answers["tokens"].null_count() == 0 else "chars"
    return answers.select(
        "model",
        "question_id",
        pl.lit(1, dtype=pl.Int64).alias("turn"),
        pl.col(unit).round().cast(pl.Int64).alias("len"),
    ), unit
