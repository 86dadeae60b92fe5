"""Regenerate the stripped real-data extracts in ``tests/data/`` from ``../shared/data``.

The test suite's golden checks run on real public judge data, but a user's clone has no
``../shared``.  So the files the tests read are vendored here, in the importers' *real* input
formats, with every free-text field removed: ids, model names, verdicts, scores, lengths and time
stamps stay; answers, questions, judge prompts and judge explanations do not.

* A judge explanation, prompt or question is replaced by :data:`PLACEHOLDER`.
* An answer whose *length* an importer measures (FastChat ``model_answer`` turns, AlpacaEval's
  ``instruction``/``output_1``/``output_2``) becomes a filler of ``x`` words with the same number of
  characters and of whitespace-separated words, so every length the importers compute is unchanged
  while no word of the original survives.
* AlpacaEval's ``raw_completion`` keeps only the judge's first-token log-probabilities (tokens and
  numbers), the part the importer recovers the shown order from.

Each source folder gets a ``SOURCE.md``: the shared folder's provenance and license, copied, then
what was kept and how it was stripped.  Output is deterministic (gzip without time stamps, sorted
keys kept in the source's order), so rerunning this script reproduces the committed bytes::

    python tests/data/make_extracts.py            # from the project root, with ../shared/data beside it
"""

from __future__ import annotations

import argparse
import csv
import gzip
import hashlib
import io
import json
import shutil
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_SOURCE = HERE.parents[2] / "shared" / "data"
PLACEHOLDER = "[stripped]"


def filler(text: str | None) -> str | None:
    """``x`` words with the same character count and whitespace-separated word count as ``text``."""
    if text is None:
        return None
    words = len(text.split())
    if words == 0:
        return " " * len(text)
    # Each word needs a letter and each gap a space, so len(text) >= 2 * words - 1 always holds.
    return "x" * (len(text) - 2 * (words - 1)) + " x" * (words - 1)


# ---------------------------------------------------------------------------------------------- file io


def _read_rows(path: Path) -> tuple[list[dict], bool]:
    """(rows, was a JSON array) of a JSON array or JSON-lines file, gzip or plain."""
    opener = gzip.open if path.read_bytes()[:2] == b"\x1f\x8b" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        text = handle.read()
    if text.lstrip().startswith("["):
        return json.loads(text), True
    return [json.loads(line) for line in text.splitlines() if line.strip()], False


def _write_bytes(path: Path, data: bytes, compress: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if compress:
        buffer = io.BytesIO()
        with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0, filename="") as handle:
            handle.write(data)
        data = buffer.getvalue()
    path.write_bytes(data)


def _write_rows(path: Path, rows: list[dict], as_array: bool) -> None:
    if as_array:
        text = json.dumps(rows, ensure_ascii=False, indent=1) + "\n"
    else:
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    _write_bytes(path, text.encode("utf-8"), compress=path.name.endswith(".gz"))


def _map_rows(src: Path, dst: Path, change: Callable[[dict], dict], gzip_out: bool = False) -> None:
    rows, as_array = _read_rows(src)
    target = dst.with_name(dst.name + ".gz") if gzip_out and not dst.name.endswith(".gz") else dst
    _write_rows(target, [change(dict(r)) for r in rows], as_array)


# ---------------------------------------------------------------------------------------------- strippers


def blank(*fields: str) -> Callable[[dict], dict]:
    """Replace the named free-text fields (when present and not null) by the placeholder."""

    def change(row: dict) -> dict:
        for name in fields:
            if row.get(name) is not None:
                row[name] = PLACEHOLDER
        return row

    return change


def answer_turns(row: dict) -> dict:
    """FastChat ``model_answer``: every turn of every choice → a same-length filler."""
    for choice in row.get("choices") or []:
        choice["turns"] = [filler(t) if isinstance(t, str) else t for t in choice.get("turns") or []]
    return row


def _first_token_logprobs(raw: object) -> object:
    """An AlpacaEval ``raw_completion`` reduced to the first token's top log-probabilities."""
    if not isinstance(raw, dict):
        return None
    content = ((raw.get("logprobs") or {}).get("content")) or []
    if not content:
        return None
    first = content[0]
    top = [{"token": t.get("token"), "logprob": t.get("logprob")} for t in first.get("top_logprobs") or []]
    entry = {"token": first.get("token"), "logprob": first.get("logprob"), "top_logprobs": top}
    return {"logprobs": {"content": [entry]}}


def alpaca_annotation(row: dict) -> dict:
    """AlpacaEval ``annotations.json``: outputs → fillers, the instruction → a digest, the completion → logprobs.

    The instruction identifies the prompt (the importer's ``prompt_id``), so it becomes a placeholder
    naming its SHA-1 rather than a filler that two instructions of equal length would share.
    """
    if isinstance(row.get("instruction"), str):
        row["instruction"] = f"[instruction {hashlib.sha1(row['instruction'].encode('utf-8')).hexdigest()[:16]}]"
    for name in ("output_1", "output_2"):
        if isinstance(row.get(name), str):
            row[name] = filler(row[name])
    if "raw_completion" in row:
        row["raw_completion"] = _first_token_logprobs(row["raw_completion"])
    return row


# ---------------------------------------------------------------------------------------------- plan

FASTCHAT = "fastchat-llm-judge-samples"
PBA = "mtbench-position-bias-analyzer"
PBA_JUDGES = (
    ("mtbench", "gpt-4-0613", "MTBench_gpt-4-0613_3"),
    ("mtbench", "gpt-3.5-turbo-1106", "MTBench_gpt-3.5-turbo-1106_3"),
    ("mtbench", "gemini-pro", "MTBench_gemini-pro_3"),
    ("devbench", "gpt-4-0613", "DevBench_gpt-4-0613_2"),
    ("devbench", "gpt-3.5-turbo-1106", "DevBench_gpt-3.5-turbo-1106_2"),
    ("devbench", "gpt-3.5-turbo-0125", "DevBench_gpt-3.5-turbo-0125_2"),
    ("devbench", "gemini-pro", "DevBench_gemini-pro_2"),
    ("devbench", "claude-3-haiku-20240307", "DevBench_claude-3-haiku-20240307_2"),
)
FASTCHAT_RUNS = {
    "Stefanstud_FastChat": ("gpt-4_pair.jsonl.gz",),
    "franklinlyj24_LLaMA-Adapter": ("gpt-4_pair.jsonl.gz",),
    "don-tpanic_FastChat": ("gpt-4_single.jsonl.gz",),
    "alvarobartt_FastChat": ("gpt-4_single.jsonl.gz",),
}
ALPACA_REAL = (
    "real-layout/results/alpaca-7b/alpaca_eval_gpt4/annotations.json",
    "real-layout/results/text_davinci_001/alpaca_eval_gpt4/annotations.json",
    "real-layout/results/gpt4_gamed/weighted_alpaca_eval_gpt4_turbo/annotations.json",
)


def _copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)


def _csv_drop(src: Path, dst: Path, drop: Iterable[str]) -> None:
    """A CSV without the named columns (none of the kept ones holds free text)."""
    with open(src, newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    keep = [i for i, name in enumerate(rows[0]) if name not in set(drop)]
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows([[r[i] for i in keep] for r in rows])
    _write_bytes(dst, buffer.getvalue().encode("utf-8"), compress=False)


def plan() -> dict[str, list[tuple[str, Callable[[Path, Path], None], str]]]:
    """Per source folder: (relative path, how to write it, what was stripped)."""
    copy_note = "copied unchanged (no free-text field)"
    sources: dict[str, list[tuple[str, Callable[[Path, Path], None], str]]] = {}
    sources["arena-clean-battle-samples"] = [
        ("mteb-arena/clean_battle_clustering.json", _copy, copy_note),
        ("genai-arena/clean_battle_20240220.json.gz", _copy, copy_note),
    ]
    fastchat = []
    for run, judgments in FASTCHAT_RUNS.items():
        for name in judgments:
            fields = ("g1_user_prompt", "g1_judgment", "g2_user_prompt", "g2_judgment", "user_prompt", "judgment")
            fastchat.append(
                (
                    f"{run}/mt_bench/model_judgment/{name}",
                    lambda s, d, f=fields: _map_rows(s, d, blank(*f)),
                    "judge prompts and judgments → placeholder",
                )
            )
        fastchat.append(
            (
                f"{run}/mt_bench/model_answer/*.jsonl.gz",
                lambda s, d: _map_rows(s, d, answer_turns),
                "answer turns → same-length x-word fillers",
            )
        )
    sources[FASTCHAT] = fastchat
    sources["arena-bench-v1-single"] = [
        (
            "judgments.jsonl.gz",
            lambda s, d: _map_rows(s, d, blank("judgment", "prompt")),
            "judgment and prompt → placeholder",
        ),
        (
            "scores.csv",
            lambda s, d: _csv_drop(s, d, ("answer_words", "ref_answer_chars", "ref_answer_words")),
            "only question_id, model, score, answer_chars, source_file kept (the columns the importer reads)",
        ),
    ]
    sources["alpacaeval"] = [
        ("annotations_weighted_alpaca_eval_gpt4_turbo.jsonl.gz", _copy, "copied unchanged (texts already dropped)"),
        ("annotations_alpaca_eval_gpt4.jsonl.gz", _copy, "copied unchanged (texts already dropped)"),
        *(
            (
                path,
                lambda s, d: _map_rows(s, d, alpaca_annotation, gzip_out=True),
                "gzip-compressed; output_1/output_2 → same-length x-word fillers; instruction → `[instruction "
                "<SHA-1 prefix>]`; raw_completion → the first token's top log-probabilities only",
            )
            for path in ALPACA_REAL
        ),
    ]
    sources["llmfao"] = [
        *(
            (f"{name}-comparisons.csv", _copy, copy_note)
            for name in ("crowd", "gpt4", "gpt3", "gpt4-crowd", "gpt3-crowd")
        ),
        ("response_lengths.csv", _copy, copy_note),
        ("evalica_llmfao-golden.csv", _copy, copy_note),
    ]
    pba = []
    for bench, judge, folder in PBA_JUDGES:
        pba.append(
            (
                f"{bench}_judgments_{judge}.jsonl.gz",
                lambda s, d: _map_rows(s, d, blank("judgment")),
                "judgment → placeholder",
            )
        )
        pba.append((f"published/{folder}.log.txt", _copy, "copied unchanged (PBA's tables of counts and rates)"))
        pba.append((f"published/{folder}.win+halfdraw.csv", _copy, copy_note))
    sources[PBA] = pba
    return sources


def _source_md(folder: str, shared: Path, written: list[tuple[str, str]]) -> str:
    original = (shared / folder / "SOURCE.md").read_text(encoding="utf-8").rstrip()
    lines = [
        f"# Test extract of `../shared/data/{folder}`",
        "",
        "Stripped by `tests/data/make_extracts.py` (rerun it to regenerate these files): ids, model names,",
        "verdicts, scores, lengths and time stamps are kept; every free-text field is removed (judge prompts and",
        f"explanations become `{PLACEHOLDER}`; answers whose length an importer measures become fillers of `x`",
        "words with the same character and word counts).  Provenance and license are those of the original",
        "folder, whose SOURCE.md is copied below unchanged; counts quoted there hold for these files.",
        "",
        "| file | how it was stripped |",
        "|---|---|",
        *(f"| `{path}` | {note} |" for path, note in written),
        "",
        "---",
        "",
        original,
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="the shared data folder")
    parser.add_argument("--out", type=Path, default=HERE, help="where the extracts go")
    args = parser.parse_args(argv)
    if not args.source.is_dir():
        print(f"shared data not found at {args.source}", file=sys.stderr)
        return 2
    for folder, entries in plan().items():
        target = args.out / folder
        if target.exists():
            shutil.rmtree(target)
        written = []
        for pattern, write, note in entries:
            matches = sorted((args.source / folder).glob(pattern))
            if not matches:
                print(f"{folder}/{pattern}: not found in {args.source}", file=sys.stderr)
                return 2
            for src in matches:
                rel = src.relative_to(args.source / folder)
                write(src, target / rel)
                out_name = str(rel) + (".gz" if "real-layout" in str(rel) else "")
                written.append((out_name, note))
        (target / "SOURCE.md").write_text(_source_md(folder, args.source, written), encoding="utf-8")
    total = sum(p.stat().st_size for p in args.out.rglob("*") if p.is_file())
    print(f"wrote {args.out} ({total / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
