"""``biasboard export``: copy a published snapshot's rankings to where dashboards read.

    biasboard export --out OUT [--snapshot ID] --to PATH|gs://bucket/prefix --format csv|json|parquet

Reads the snapshot ``LATEST`` names (or ``--snapshot ID``) from ``OUT`` — local
or ``gs://`` — and writes ``leaderboard.<fmt>`` and ``bias.<fmt>`` under ``--to``,
then ``snapshot.json`` (which snapshot, when, which files) last, so a dashboard
polling ``snapshot.json`` never reads a table older than the one it announces.
Each file is replaced atomically (temp + rename locally, one object upload on
a bucket).  Tables are serialised by the same function the snapshot uses, so an
export in a snapshot's own format is byte-identical to the snapshot's file.

Export is a copy of a few small tables, so it runs no Beam pipeline; it uses
Beam's file systems for ``gs://`` all the same.
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import logging

import polars as pl
from apache_beam.options.pipeline_options import GoogleCloudOptions
from biasboard.pipelines import validation
from biasboard.pipelines.options import beam_options
from biasboard.schemas.errors import InputError, StateError
from biasboard.transforms import publish, storage

_LOG = logging.getLogger(__name__)

FORMATS = ("csv", "json", "parquet")
TABLES = ("leaderboard", "bias")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="output folder holding snapshots/ and LATEST (local or gs://)")
    parser.add_argument("--snapshot", default=None, help="snapshot id to export (default: the one LATEST names)")
    parser.add_argument("--to", required=True, dest="to", help="destination folder or gs://bucket/prefix")
    parser.add_argument("--format", required=True, choices=FORMATS, help="file format of the exported tables")
    parser.add_argument(
        "--tables",
        default=",".join(TABLES),
        help=f"comma-separated tables to export (default: {','.join(TABLES)})",
    )


def run(args: argparse.Namespace, beam_args: list[str]) -> int:
    tables = [name.strip() for name in args.tables.split(",") if name.strip()]
    unknown = sorted(set(tables) - set(TABLES))
    if unknown or not tables:
        raise InputError(f"--tables: unknown table(s) {', '.join(unknown) or '(none given)'}; choose from {TABLES}")
    storage.configure_gcs_auth(no_auth=beam_options(beam_args).view_as(GoogleCloudOptions).no_auth)
    validation.reachable_bucket(args.out, "--out")
    validation.writable_folder(args.to, "--to")
    written = export_snapshot(args.out, args.to, args.format, snapshot_id=args.snapshot, tables=tables)
    for path in written:
        print(path)
    return 0


def export_snapshot(
    out_dir: str,
    to: str,
    fmt: str,
    snapshot_id: str | None = None,
    tables: tuple[str, ...] | list[str] = TABLES,
) -> list[str]:
    """Write the snapshot's tables as ``<to>/<table>.<fmt>`` and then ``<to>/snapshot.json``; returns the paths."""
    if fmt not in FORMATS:
        raise InputError(f"--format {fmt!r}: choose csv, json or parquet")
    source = publish.resolve_snapshot(out_dir, snapshot_id)
    manifest = publish.read_snapshot_manifest(source)
    chosen_id = manifest["snapshot_id"]
    written = []
    for table in tables:
        frame = read_table(source, table)
        target = storage.join(to, f"{table}.{fmt}")
        storage.atomic_write_bytes(target, publish.table_bytes(frame, fmt))
        _LOG.info("export: %s (%d rows) → %s", table, frame.height, target)
        written.append(target)
    stamp = {
        "snapshot_id": chosen_id,
        "source": source,
        "format": fmt,
        "files": [path.rsplit("/", 1)[-1] for path in written],
        "exported_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    pointer = storage.join(to, "snapshot.json")
    storage.atomic_write_bytes(pointer, publish.json_bytes(stamp))
    written.append(pointer)
    return written


def read_table(snapshot_path: str, table: str) -> pl.DataFrame:
    """A snapshot's table from its Parquet file (the typed source of truth)."""
    path = storage.join(snapshot_path, f"{table}.parquet")
    try:
        return pl.read_parquet(io.BytesIO(storage.read_bytes(path)))
    except StateError:
        raise
    except Exception as err:
        raise StateError(f"{path} is not a readable Parquet table: {err}") from err
