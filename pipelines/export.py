"""``biasboard export``: copy a published snapshot's rankings to where dashboards read.

    biasboard export --out OUT [--snapshot ID] --to PATH|gs://bucket/prefix --format csv|json|parquet

Reads the snapshot ``LATEST`` names (or ``--snapshot ID``) from ``OUT`` — local
or ``gs://`` — and writes ``leaderboard.<fmt>`` and ``bias.<fmt>`` under ``--to`` (``--tables`` may add
``moves``: which correction moved each model, one row per model and correction, from ``summary.json``'s
``attribution``; and ``slices``: a ``refresh --slices`` snapshot's per-slice boards, column ``slice`` first),
then ``snapshot.json`` (which snapshot, when, which files) last, so a dashboard polling ``snapshot.json`` never
reads a table older than the one it announces.
Each file is replaced atomically (temp + rename locally, one object upload on
a bucket).  Tables are serialised by the same function the snapshot uses, so an
export in a snapshot's own format is byte-identical to the snapshot's file.

The folder then holds this export's tables only: files an earlier export wrote
there that this one does not (the other format's after a ``--format`` switch, a
table no longer in ``--tables``) are removed once the new ``snapshot.json`` is
written, so no dashboard reading the folder finds rankings older than the ones
announced.  Export knows what it wrote from the earlier ``snapshot.json``, which
names each file with its SHA-256: a file it did not write, or one changed since
(a hand-edited CSV), is left alone and named in a warning.  The new
``snapshot.json`` lists what it is removing (``removed``), so a run killed
before the removal is finished by the next export.  Before its first table, an
export names the files it is about to write, with their SHA-256, in
``.export-pending.json`` (removed once ``snapshot.json`` is written): a run
killed among its tables left new files no stamp named, which no later export
knew to remove (csv killed midway, then json: the half-written CSV stayed).

Export is a copy of a few small tables, so it runs no Beam pipeline; it uses
Beam's file systems for ``gs://`` all the same.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import io
import json
import logging

import polars as pl
from apache_beam.options.pipeline_options import GoogleCloudOptions
from biasboard.pipelines import validation
from biasboard.pipelines.options import OneFolder, beam_options
from biasboard.schemas.errors import InputError, StateError
from biasboard.transforms import publish, storage

_LOG = logging.getLogger(__name__)

FORMATS = ("csv", "json", "parquet")
#: The tables export writes unless ``--tables`` says otherwise.
TABLES = ("leaderboard", "bias")
#: Every table ``--tables`` may name: ``moves`` is the summary's attribution as rows (:func:`moves_table`),
#: ``slices`` the per-slice side-by-side boards of a ``refresh --slices`` snapshot (``slices.parquet``).
ALL_TABLES = (*TABLES, "moves", "slices")
#: The export's own note in the destination: which snapshot, which files (with their SHA-256), written last.
STAMP = "snapshot.json"
#: The files an export is about to write (name → SHA-256), written before its first table and removed after its
#: stamp: what a run killed among its tables wrote, for the next export to find.
PENDING = ".export-pending.json"
#: Every file name an export writes besides its stamp: the only names it ever removes.
_EXPORT_NAMES = frozenset(f"{table}.{fmt}" for table in ALL_TABLES for fmt in FORMATS)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out", action=OneFolder, required=True, help="output folder holding snapshots/ and LATEST (local or gs://)"
    )
    parser.add_argument("--snapshot", default=None, help="snapshot id to export (default: the one LATEST names)")
    parser.add_argument(
        "--to", action=OneFolder, required=True, dest="to", help="destination folder or gs://bucket/prefix"
    )
    parser.add_argument("--format", required=True, choices=FORMATS, help="file format of the exported tables")
    parser.add_argument(
        "--tables",
        default=",".join(TABLES),
        help=f"comma-separated tables to export, of {','.join(ALL_TABLES)} (default: {','.join(TABLES)})",
    )


def run(args: argparse.Namespace, beam_args: list[str]) -> int:
    tables = [name.strip() for name in args.tables.split(",") if name.strip()]
    unknown = sorted(set(tables) - set(ALL_TABLES))
    if unknown or not tables:
        raise InputError(
            f"--tables: unknown table(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(ALL_TABLES)}"
        )
    storage.configure_gcs(no_auth=beam_options(beam_args).view_as(GoogleCloudOptions).no_auth)
    validation.reachable_bucket(args.out, "--out")
    validation.writable_folder(args.to, "--to")
    validation.not_owned(args.to, "--to")
    written = export_snapshot(args.out, args.to, args.format, snapshot_id=args.snapshot, tables=tables)
    for path in written:
        print(path)
    return 0


#: What an export that lost its storage leaves (:func:`storage.if_unreachable`): ``snapshot.json`` is written last.
LEFT_BY_EXPORT = "the export's snapshot.json, written last, still names the last export that completed"


@storage.if_unreachable(LEFT_BY_EXPORT)
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
    earlier = _earlier_export(to)
    # Every table read and serialised before any is written: a table the snapshot lacks (slices of a board made
    # without them) had ended the export after the tables before it were written, a folder left half new, half stale.
    frames = {table: read_table(source, table) for table in tables}
    payloads = {f"{table}.{fmt}": publish.table_bytes(frame, fmt) for table, frame in frames.items()}
    digests = {name: _sha256(data) for name, data in payloads.items()}
    pending = storage.join(to, PENDING)
    storage.atomic_write_bytes(pending, publish.json_bytes({"files": digests}))
    written = []
    for (table, frame), (name, data) in zip(frames.items(), payloads.items(), strict=True):
        target = storage.join(to, name)
        storage.atomic_write_bytes(target, data)
        _LOG.info("export: %s (%d rows) → %s", table, frame.height, target)
        written.append(target)
    stale = _stale_files(to, {name: shas for name, shas in earlier.items() if name not in digests})
    stamp = {
        "snapshot_id": manifest["snapshot_id"],
        "source": source,
        "format": fmt,
        "files": list(digests),
        "sha256": digests,
        "removed": stale,
        "exported_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    pointer = storage.join(to, STAMP)
    storage.atomic_write_bytes(pointer, publish.json_bytes(stamp))
    written.append(pointer)
    storage.delete([storage.join(to, name) for name in stale])
    for name in stale:
        _LOG.info("export: removed %s, written by an earlier export and not part of this one", storage.join(to, name))
    storage.delete([pending])
    return written


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _earlier_export(to: str) -> dict[str, set[str | None]]:
    """The files earlier exports wrote in ``to``, each with the SHA-256s it may have as they wrote it.

    Named by the stamp (its files and those it was removing) and by a killed export's :data:`PENDING` list, whose
    tables may stand beside the stamp's: a name may so have two digests, the stamp's and the killed run's.  None
    for a digest the stamp does not hold (an export from before stamps had them: the name alone is trusted).
    Only export's own file names count, so a stamp, however written, can never name another file to remove.
    """
    named: dict[str, set[str | None]] = {}
    for note, read in ((STAMP, _stamp_files), (PENDING, _pending_files)):
        path = storage.join(to, note)
        if not storage.exists(path):
            continue
        try:
            files = read(json.loads(storage.read_text(path)))
        except (OSError, ValueError, StateError, KeyError, TypeError, AttributeError) as err:
            _LOG.warning("export: %s is not an export's own note (%s); the files it names are not removed", path, err)
            continue
        for name, sha in files.items():
            if name in _EXPORT_NAMES:
                named.setdefault(name, set()).add(sha)
    return named


def _stamp_files(stamp: dict) -> dict[str, str | None]:
    named = {name: stamp.get("sha256", {}).get(name) for name in stamp["files"]}
    named.update(stamp.get("removed", {}))
    return named


def _pending_files(pending: dict) -> dict[str, str | None]:
    return {name: str(sha) for name, sha in pending["files"].items()}


def _stale_files(to: str, candidates: dict[str, set[str | None]]) -> dict[str, str | None]:
    """Of the files earlier exports wrote and this one does not, those still there as an export wrote them.

    A file changed since (its SHA-256 none an export recorded) is not export's any more: it is left alone, with a
    warning.
    """
    stale = {}
    for name, shas in sorted(candidates.items()):
        path = storage.join(to, name)
        if not storage.exists(path):
            continue
        sha = None if None in shas else _sha256(storage.read_bytes(path))
        if sha is not None and sha not in shas:
            _LOG.warning("export: %s changed since an earlier export wrote it; left alone", path)
            continue
        stale[name] = sha
    return stale


#: The columns of the ``moves`` table, one row per model and correction of the published board.
MOVES_COLUMNS: dict[str, pl.DataType | type[pl.DataType]] = {
    "model": pl.String,
    "component": pl.Int64,
    "rank_naive": pl.Int64,
    "rank_corrected": pl.Int64,
    "rank_change": pl.Int64,
    "effect": pl.String,
    "delta_rating": pl.Float64,
    "rank_without": pl.Int64,
    "places": pl.Int64,
    "rank_without_all": pl.Int64,
    "unexplained": pl.Int64,
}


def moves_table(summary: dict, source: str) -> pl.DataFrame:
    """``summary.json``'s ``attribution`` as rows (:data:`MOVES_COLUMNS`): what a dashboard joins to the leaderboard
    by ``model`` to say why a model moved; one row per model and correction, one with no effect where none applies.
    A snapshot without one (published before it existed, or a ratings-only board) is a :class:`StateError` naming
    it: an empty table would read as "no correction moved anything"."""
    attribution = summary.get("attribution")
    if not attribution:
        raise StateError(
            f"{source}: this snapshot's summary.json has no attribution (published before biasboard wrote one, or "
            "fit without diagnostics), so there is no moves table to export"
        )
    # A board with no correction applied (every judge tied to the reference) still has models that moved (the
    # reference's own rating, ties): each is one row with an empty effect, so its rank change and the unexplained
    # part reach the dashboard (the table was a header alone).
    rows = [
        {**{k: model[k] for k in MOVES_COLUMNS if k in model}, **move}
        for model in attribution["models"]
        for move in (model["corrections"] or [{}])
    ]
    return pl.DataFrame(rows, schema=MOVES_COLUMNS, orient="row") if rows else pl.DataFrame(schema=MOVES_COLUMNS)


def read_table(snapshot_path: str, table: str) -> pl.DataFrame:
    """A snapshot's table from its Parquet file (the typed source of truth); ``moves`` from its summary.json."""
    if table == "moves":
        path = storage.join(snapshot_path, "summary.json")
        return moves_table(publish.read_snapshot_json(path), path)
    path = storage.join(snapshot_path, f"{table}.parquet")
    if table == "slices" and not storage.exists(path):  # an empty table would read as "no slice has a board"
        raise StateError(
            f"{snapshot_path}: this snapshot has no slices.parquet (published without refresh --slices), so there is "
            "no slices table to export"
        )
    try:
        return pl.read_parquet(io.BytesIO(storage.read_bytes(path)))
    except StateError:
        raise
    except Exception as err:
        raise StateError(f"{path} is not a readable Parquet table: {err}") from err
