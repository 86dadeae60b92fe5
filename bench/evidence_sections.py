"""Marked sections of ``docs/evidence.md``: each bench script owns and rewrites its own sections.

Why: the evidence page is generated, not typed.  Two scripts (the simulation study and the real-data
validation) write into one page, each replacing only the sections it owns, so re-running one never
erases the other's numbers, and a short hand-written commentary between its own markers survives both.

A section is the text between ``<!-- BEGIN name -->`` and ``<!-- END name -->``; a section not yet in
the file is appended at the end.  Markdown tables are built here too, so both scripts format numbers
the same way.
"""

from __future__ import annotations

import math
import re
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

TITLE = "# Evidence: does the bias correction help?\n"
INTRO = (
    "Every table and figure below is written by a script in `bench/` (the section markers say which);\n"
    "re-run the script to refresh its sections. Only the commentary section is written by hand.\n"
)


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"


def replace_section(path: Path, name: str, body: str) -> None:
    """Write ``body`` between the markers of section ``name`` in ``path`` (created when absent)."""
    begin, end = _markers(name)
    text = path.read_text(encoding="utf-8") if path.exists() else TITLE + "\n" + INTRO
    block = f"{begin}\n{body.rstrip()}\n{end}"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text, count=1)
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")


def read_section(path: Path, name: str) -> str | None:
    """The body of section ``name`` (None when the file or the section is missing)."""
    if not path.exists():
        return None
    begin, end = _markers(name)
    match = re.search(re.escape(begin) + r"\n(.*?)\n" + re.escape(end), path.read_text(encoding="utf-8"), re.DOTALL)
    return match.group(1) if match else None


def fmt(value: object, digits: int = 3) -> str:
    """A table cell: floats rounded, NaN as an em dash."""
    if value is None:
        return "—"
    if isinstance(value, float):
        if math.isnan(value):
            return "—"
        return f"{value:.{digits}f}"
    return str(value)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]], digits: int = 3) -> str:
    """A GitHub-flavoured Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(fmt(v, digits) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def study_outputs(root: Path, smoke: bool, out_dir: Path | None, evidence: Path | None, name: str) -> tuple[Path, Path]:
    """The folder a study writes its tables and figures to, and the page whose sections it rewrites.

    Unless told otherwise, the committed ones (``docs/evidence/``, ``docs/evidence.md``) — except in a smoke run,
    whose numbers check that the script runs and are not evidence: it writes into a new temporary folder, said on
    stdout, so that running the smoke mode never replaces the page's numbers with its own (it did, for the
    simulation study and the real-data validation; the reference and acquisition studies already kept off it).
    """
    if smoke:
        scratch = Path(tempfile.mkdtemp(prefix=f"{name}-smoke-"))
        out_dir = out_dir or scratch / "evidence"
        evidence = evidence or scratch / "evidence.md"
        print(f"smoke run: page {evidence}, files under {out_dir}")
    return out_dir or root / "docs" / "evidence", evidence or root / "docs" / "evidence.md"


def revision(root: Path) -> str:
    """The commit the numbers came from, flagged when the core or the ingest had uncommitted changes."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "ranking", "transforms", "importers", "schemas"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return head + (" with uncommitted changes in ranking/transforms/importers/schemas" if dirty else "")
