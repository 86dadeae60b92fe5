"""Writing an import: day-partitioned Parquet the ingest reads, dead letters, and a manifest whose counts add up.

Layout under ``OUT``::

    battles/day=YYYY-MM-DD/part-00000.parquet   (or scores/... for single-answer grades)
    import_dead_letters.parquet                  (always written; may hold zero rows)
    import_manifest.json                         (format, inputs, options, counts by reason, rows per day)

The day comes from ``ts`` (UTC); the ingest takes it from the ``day=`` path
segment.  ``OUT`` belongs to one import: re-running the same import replaces
its own files (reimport is idempotent: same ids, same rows), while an ``OUT``
holding another import or foreign files is refused rather than mixed into.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
from biasboard.importers.common import ImportResult
from biasboard.schemas.errors import StateError

MANIFEST = "import_manifest.json"
DEAD_LETTERS = "import_dead_letters.parquet"
PART_NAME = "part-00000.parquet"
OWNED = frozenset({"battles", "scores", DEAD_LETTERS, MANIFEST})


def _check_out(out: Path, format_name: str, inputs: Sequence[str]) -> None:
    if not out.exists():
        return
    if not out.is_dir():
        raise StateError(f"{out}: --out exists and is not a folder")
    entries = {p.name for p in out.iterdir()}
    if not entries:
        return
    foreign = sorted(entries - OWNED)
    if foreign:
        raise StateError(
            f"{out}: --out holds files that are not an import's ({', '.join(foreign[:3])}); use a new folder"
        )
    manifest = out / MANIFEST
    if manifest.is_file():
        try:
            previous = json.loads(manifest.read_text())
        except json.JSONDecodeError as err:
            raise StateError(f"{manifest}: unreadable manifest ({err}); use a new --out folder") from err
        if previous.get("format") != format_name or previous.get("inputs") != list(inputs):
            earlier = list(previous.get("inputs", [])) or ["?"]
            more = f" (+{len(earlier) - 1} more)" if len(earlier) > 1 else ""
            raise StateError(
                f"{out}: --out already holds an import of {previous.get('format')} from {earlier[0]}{more}; "
                "use a new folder"
            )


def partition_by_day(rows: pa.Table) -> dict[str, pa.Table]:
    """Rows split by UTC day of ``ts`` (schema kept exactly), in day order."""
    if rows.num_rows == 0:
        return {}
    days = pl.DataFrame(rows.select(["ts"])).select(pl.col("ts").dt.date().cast(pl.String).alias("day"))["day"]
    out: dict[str, pa.Table] = {}
    for day in sorted(days.unique().to_list()):
        mask = pa.array((days == day).to_numpy())
        out[day] = rows.filter(mask)
    return out


def write_import(result: ImportResult, out: Path, format_name: str, options: dict) -> dict:
    """Write ``result`` under ``out`` and return the manifest (also written as JSON)."""
    out = Path(out)
    _check_out(out, format_name, result.sources)
    for name in ("battles", "scores"):
        if (out / name).exists():
            shutil.rmtree(out / name)
    out.mkdir(parents=True, exist_ok=True)
    rows_per_day: dict[str, int] = {}
    for day, table in partition_by_day(result.rows).items():
        folder = out / result.kind / f"day={day}"
        folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, folder / PART_NAME)
        rows_per_day[day] = table.num_rows
    pq.write_table(result.dead_letters, out / DEAD_LETTERS)
    dead = result.dead_by_reason()
    manifest: dict[str, Any] = {
        "format": format_name,
        "kind": result.kind,
        "inputs": list(result.sources),
        "options": options,
        "source_rows": result.source_rows,
        "rows_read": result.rows_read,
        "rows_converted": result.rows_converted,
        "rows_dead_lettered": sum(dead.values()),
        "dead_letters_by_reason": dead,
        "rows_per_day": rows_per_day,
        "notes": list(result.notes),
    }
    if manifest["rows_read"] != manifest["rows_converted"] + manifest["rows_dead_lettered"]:
        raise AssertionError(f"import lost rows: {manifest}")  # conversion guarantees this; never write a lie
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    return manifest


def summary_lines(manifest: dict, out: Path) -> list[str]:
    """The counts a user sees on the terminal."""
    unit = " (games)" if manifest["rows_read"] != manifest["source_rows"] else ""
    lines = [
        f"read {manifest['rows_read']} rows{unit} from {len(manifest['inputs'])} file(s)",
        f"converted {manifest['rows_converted']} {manifest['kind']} into {out / manifest['kind']} "
        f"({len(manifest['rows_per_day'])} day partition(s))",
        f"dead-lettered {manifest['rows_dead_lettered']} into {out / DEAD_LETTERS}",
    ]
    lines += [f"  {reason}: {count}" for reason, count in manifest["dead_letters_by_reason"].items()]
    lines += [f"note: {note}" for note in manifest["notes"]]
    return lines
