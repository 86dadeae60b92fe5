"""Publish a snapshot so that readers see all of it or none of it.

Layout under the output folder ``OUT`` (local or ``gs://``)::

    OUT/LATEST                       one line: the id of the current snapshot
    OUT/snapshots/<id>/              leaderboard.{parquet,csv,json}, bias.{parquet,json},
                                     summary.json, report.html, manifest.json
    OUT/staging/<nonce>/             a snapshot being written (never read)

The protocol, whatever the storage:

1. every file is written into a private staging folder (by the fit stage, on a
   worker: :func:`stage_files`), then ``manifest.json`` last by the launcher
   (:func:`publish_staged`; it lists each file's size and SHA-256, so it doubles
   as the completeness mark);
2. the staging folder is made visible as ``snapshots/<id>`` — one atomic
   ``rename`` locally; on a bucket the objects are copied with ``manifest.json``
   copied last, because a prefix cannot be renamed;
3. ``LATEST`` is replaced atomically (temp + rename locally; one object
   upload on a bucket, written only after step 2 finished).

A reader follows ``LATEST`` and only ever sees complete snapshots; a snapshot
folder without its ``manifest.json`` (a bucket copy cut short) is ignored by
:func:`list_snapshots`.  A killed run therefore leaves at worst an orphan in
``staging/`` or such a folder (both removed by the next publish) and the previous ``LATEST`` intact.
One refresh at a time per ``OUT`` (and state): the scheduler serialises runs, and refresh holds both folders' locks
(:mod:`biasboard.transforms.run_lock`).

The snapshot id is the UTC time plus a hash of the content, so ids sort in
time order and two snapshots with the same id are byte-identical.  One content
is published once (:func:`find_published`): content equal to ``LATEST``'s is not
published again (``LATEST`` stays), and content equal to a complete snapshot
newer than ``LATEST`` — one a run killed between steps 2 and 3 made visible —
gets ``LATEST`` pointed at that snapshot instead of a copy of it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import logging
import math
import os
import signal
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import polars as pl
from biasboard.schemas.errors import StateError, raise_if_unreachable
from biasboard.transforms import storage

_LOG = logging.getLogger(__name__)

#: Set this to a checkpoint name to have the process SIGKILL itself there (crash tests; see :func:`failpoint`).
FAILPOINT_ENV = "BIASBOARD_FAILPOINT"

LATEST = "LATEST"
SNAPSHOTS = "snapshots"
STAGING = "staging"
MANIFEST = "manifest.json"
#: The stage writer's note to the launcher, kept beside the staged files and removed before publishing.
RUN_RECORD = "_run.json"

#: Files every snapshot holds (docs/running.md), besides manifest.json.
SNAPSHOT_FILES: tuple[str, ...] = (
    "leaderboard.parquet",
    "leaderboard.csv",
    "leaderboard.json",
    "bias.parquet",
    "bias.json",
    "summary.json",
    "report.html",
)


@dataclass(frozen=True)
class Published:
    """Where a snapshot went: its id and its folder."""

    snapshot_id: str
    path: str
    reused: bool = False


def table_bytes(frame: pl.DataFrame, fmt: str) -> bytes:
    """One table serialised as ``parquet``, ``csv`` or ``json`` (a list of row objects).

    The single place that decides the on-disk form of a table, so a snapshot and
    an export of it are byte-identical.  A number that is not there (NaN: no bootstrap
    interval without ``--bootstrap``, no bothbad share without ties) is null in every
    format — it was null in JSON, NaN in Parquet and the text ``NaN`` in CSV, one table
    three ways; in JSON a non-finite number is ``null`` too (JSON has none).  The CSV form
    neutralises text that a spreadsheet would run as a formula (:func:`csv_safe`).
    """
    floats = [name for name, dtype in frame.schema.items() if dtype.is_float()]
    if floats:
        frame = frame.with_columns(pl.col(floats).fill_nan(None))
    if fmt == "parquet":
        buffer = io.BytesIO()
        frame.write_parquet(buffer, compression="zstd", statistics=False)
        return buffer.getvalue()
    if fmt == "csv":
        return csv_safe(frame).write_csv().encode("utf-8")
    if fmt == "json":
        rows = [{key: _json_value(value) for key, value in row.items()} for row in frame.to_dicts()]
        return (json.dumps(rows, indent=1, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")
    raise ValueError(f"unknown table format {fmt!r} (csv, json or parquet)")


#: A text cell a spreadsheet would read as a formula (OWASP "CSV injection"): it starts with = + - @,
#: or with a control byte (tab, carriage return ...) that some spreadsheets skip before looking.
_FORMULA_START = r"^[=+\-@\x00-\x1f\x7f]"


def csv_safe(frame: pl.DataFrame) -> pl.DataFrame:
    """Text cells that could run as a spreadsheet formula, prefixed with ``'`` (OWASP's advice).

    Model and judge names come from whoever wrote the battle logs, and the CSV
    is what people open in a spreadsheet: ``=HYPERLINK(...)`` as a model name
    must stay text.  Only text columns change; numbers (negative ratings) are
    numbers, not formulas.  The Parquet and JSON forms keep the names as given.
    """
    text = [name for name, dtype in frame.schema.items() if dtype == pl.String]
    if not text:
        return frame
    return frame.with_columns(
        pl.when(pl.col(c).str.contains(_FORMULA_START)).then(pl.lit("'") + pl.col(c)).otherwise(pl.col(c)).alias(c)
        for c in text
    )


def json_bytes(document: Mapping[str, object]) -> bytes:
    """A JSON document (summary, manifest): sorted keys, NaN/inf as null, UTF-8."""
    return (
        json.dumps(_json_value(document), indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"
    ).encode("utf-8")


def snapshot_files(
    leaderboard: pl.DataFrame,
    bias: pl.DataFrame,
    summary: Mapping[str, object],
    report_html: str,
    bias_json: pl.DataFrame | None = None,
) -> dict[str, bytes]:
    """Every data file of a snapshot (all but the manifest), by name.

    ``bias_json``: the rows bias.json holds when not all of ``bias`` (the busiest judges' of a snapshot with
    many judges; bias.parquet always holds every row).
    """
    files = {f"leaderboard.{fmt}": table_bytes(leaderboard, fmt) for fmt in ("parquet", "csv", "json")}
    files["bias.parquet"] = table_bytes(bias, "parquet")
    files["bias.json"] = table_bytes(bias if bias_json is None else bias_json, "json")
    files["summary.json"] = json_bytes(summary)
    files["report.html"] = report_html.encode("utf-8")
    return files


def _json_value(value: object) -> object:
    """Plain JSON values: non-finite floats → None, containers recursively, dates and others → str."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if hasattr(value, "item"):  # numpy scalars
        return _json_value(value.item())
    if hasattr(value, "tolist"):  # numpy arrays
        return _json_value(value.tolist())
    return str(value)


def content_hash(files: Mapping[str, bytes]) -> str:
    """SHA-256 over the files' names and bytes, in name order (the manifest is not content)."""
    digest = hashlib.sha256()
    for name in sorted(files):
        data = files[name]
        digest.update(name.encode("utf-8") + b"\0" + len(data).to_bytes(8, "big") + data)
    return digest.hexdigest()


def make_snapshot_id(files: Mapping[str, bytes], now: dt.datetime | None = None) -> str:
    """``YYYYMMDDTHHMMSSZ-<12 hex of the content hash>``: sorts by time, names the content."""
    return _snapshot_id(content_hash(files), now)


def _snapshot_id(digest: str, now: dt.datetime | None) -> str:
    now = now or dt.datetime.now(dt.timezone.utc)
    return f"{now.astimezone(dt.timezone.utc):%Y%m%dT%H%M%SZ}-{digest[:12]}"


def snapshot_dir(out_dir: str, snapshot_id: str) -> str:
    return storage.join(out_dir, SNAPSHOTS, snapshot_id)


def new_staging(out_dir: str) -> str:
    """A fresh private staging folder for one snapshot under ``out_dir`` (only its path; nothing is created)."""
    return storage.join(out_dir, STAGING, uuid.uuid4().hex)


def stage_files(staging: str, files: Mapping[str, bytes], record: Mapping[str, object] | None = None) -> None:
    """Write a snapshot's data files into ``staging`` (the fit stage does this, on a worker).

    ``record``: what the writer wants the launcher to put in the manifest (the
    fit's cell count, model options, stage times); it is kept in
    :data:`RUN_RECORD` beside the files and removed again by :func:`publish_staged`.
    """
    missing = [name for name in SNAPSHOT_FILES if name not in files]
    if missing:
        raise StateError(f"snapshot staged in {staging} lacks {', '.join(missing)}")
    storage.ensure_dir(staging)
    for name in sorted(files):  # on disk before the rename that makes them visible (a power cut)
        storage.write_synced_bytes(storage.join(staging, name), files[name])
    if record is not None:
        storage.write_bytes(storage.join(staging, RUN_RECORD), json_bytes(record))
    _LOG.info("publish: wrote %d files (%d bytes) to staging", len(files), sum(map(len, files.values())))


def read_run_record(staging: str) -> dict:
    """The :data:`RUN_RECORD` the writer of ``staging`` left (empty when it left none)."""
    path = storage.join(staging, RUN_RECORD)
    return json.loads(storage.read_text(path)) if storage.exists(path) else {}


def publish_snapshot(
    out_dir: str,
    files: Mapping[str, bytes],
    manifest: Mapping[str, object],
    now: dt.datetime | None = None,
) -> Published:
    """Write ``files`` as a new snapshot under ``out_dir`` and point ``LATEST`` at it (stage, then publish)."""
    clean_staging(out_dir)
    staging = new_staging(out_dir)
    stage_files(staging, files)
    return publish_staged(out_dir, staging, manifest, now)


#: Whether a published snapshot's manifest describes the board being published (beyond equal files).
SameBoard = Callable[[Mapping[str, object]], bool]


def publish_staged(
    out_dir: str,
    staging: str,
    manifest: Mapping[str, object],
    now: dt.datetime | None = None,
    same_board: SameBoard | None = None,
) -> Published:
    """Make the snapshot staged in ``staging`` visible under ``out_dir`` and point ``LATEST`` at it.

    The launcher's whole part of publishing: ``manifest`` is completed with the
    snapshot id, the content hash and each file's size and SHA-256, and written
    last into the staging folder, which one rename (a copy on a bucket) makes
    ``snapshots/<id>``.  Returns where it went.

    When a complete snapshot already holds this content (:func:`find_published`;
    ``same_board`` also asks its manifest, e.g. for the options it records),
    nothing new is made: the staging folder goes and ``LATEST`` names that
    snapshot (it already does when it is ``LATEST``'s own content); the result
    is ``reused``.
    """
    started = time.monotonic()
    storage.delete([storage.join(staging, RUN_RECORD)])
    prefix = staging.rstrip("/") + "/"
    files = {info.path[len(prefix) :]: storage.read_bytes(info.path) for info in storage.list_files(staging)}
    missing = [name for name in SNAPSHOT_FILES if name not in files]
    if missing:
        raise StateError(f"snapshot for {out_dir} lacks {', '.join(missing)}")
    digest = content_hash(files)
    existing = find_published(out_dir, digest, same_board)
    if existing is not None:
        storage.delete_tree(staging)
        return _reuse(out_dir, existing)
    snapshot_id = _snapshot_id(digest, now)
    final = snapshot_dir(out_dir, snapshot_id)

    if _is_complete(final):
        # Same content, same second: that snapshot already is this one.
        storage.delete_tree(staging)
        _point_latest(out_dir, snapshot_id)
        _LOG.info("publish: snapshot %s already exists with identical content; LATEST points to it", snapshot_id)
        return Published(snapshot_id, final, reused=True)

    full_manifest = dict(manifest)
    full_manifest["snapshot_id"] = snapshot_id
    full_manifest["content_sha256"] = digest
    full_manifest["files"] = {
        name: {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()} for name, data in sorted(files.items())
    }
    storage.write_synced_bytes(storage.join(staging, MANIFEST), json_bytes(full_manifest))
    storage.sync_folder(staging)  # its entries on disk before the rename that makes it visible
    failpoint("publish-staged")

    _make_visible(out_dir, staging, final)
    failpoint("publish-visible")
    _point_latest(out_dir, snapshot_id)
    _LOG.info("publish: snapshot %s is LATEST (%.2f s)", snapshot_id, time.monotonic() - started)
    return Published(snapshot_id, final)


def find_published(out_dir: str, digest: str, same_board: SameBoard | None = None) -> str | None:
    """The id of a complete snapshot that already holds content ``digest``: ``LATEST``'s, or one newer than it.

    A snapshot newer than ``LATEST`` is one a run made visible and was killed
    before it moved ``LATEST`` (failpoint ``publish-visible``); publishing its
    content again would leave two snapshots of one board.  Older snapshots are
    history and are not reused (``LATEST`` never moves back in time).  With
    ``same_board``, the snapshot's manifest must satisfy it too.  None when no
    such snapshot exists (or its manifest cannot be read: then a new one is made).
    """
    latest = latest_snapshot_id(out_dir)
    root = storage.join(out_dir, SNAPSHOTS)
    newer = [sid for sid in reversed(storage.list_children(root)) if latest is None or sid > latest]
    for snapshot_id in ([latest] if latest else []) + newer:
        path = snapshot_dir(out_dir, snapshot_id)
        if not _is_complete(path):
            continue
        try:
            manifest = read_snapshot_manifest(path)
        except (OSError, ValueError, StateError) as err:
            raise_if_unreachable(err)  # out of reach is not unreadable: no copy is published beside it
            _LOG.warning("publish: snapshot %s has an unreadable manifest (%s); not reused", snapshot_id, err)
            continue
        if manifest.get("content_sha256") == digest and (same_board is None or same_board(manifest)):
            return snapshot_id
    return None


def _reuse(out_dir: str, snapshot_id: str) -> Published:
    """``snapshot_id`` (complete, holding the content being published) made ``LATEST`` if it is not already."""
    if latest_snapshot_id(out_dir) == snapshot_id:
        _LOG.info("publish: snapshot %s (LATEST) already holds this content; nothing new is published", snapshot_id)
    else:
        _point_latest(out_dir, snapshot_id)
        _LOG.info(
            "publish: snapshot %s, made visible by a run stopped before it moved LATEST, holds this content; "
            "LATEST points to it",
            snapshot_id,
        )
    return Published(snapshot_id, snapshot_dir(out_dir, snapshot_id), reused=True)


def failpoint(name: str) -> None:
    """Crash-test hook: SIGKILL this process here when ``BIASBOARD_FAILPOINT`` names this point.

    A SIGKILL cannot be caught or cleaned up after, so it is the honest stand-in
    for a machine dying at this exact place; the crash tests use it to hit the
    points between stages deterministically.  Unset (always, in production) it
    costs one dictionary lookup.
    """
    if os.environ.get(FAILPOINT_ENV) == name:
        _LOG.warning("failpoint %s: killing this process", name)
        logging.shutdown()
        os.kill(os.getpid(), signal.SIGKILL)


#: What to do about a damaged snapshot file (:func:`read_snapshot_json`): its snapshots are never rewritten.
_DAMAGED_ADVICE = "pick another snapshot with --snapshot, or run `biasboard refresh` to publish a new one"


def latest_snapshot_id(out_dir: str) -> str | None:
    """The id ``LATEST`` names, or None when nothing was published yet."""
    pointer = storage.join(out_dir, LATEST)
    if not storage.exists(pointer):
        return None
    snapshot_id = storage.read_text(pointer).strip()
    return snapshot_id or None


def resolve_snapshot(out_dir: str, snapshot_id: str | None = None) -> str:
    """Folder of ``snapshot_id`` (default: ``LATEST``), checked complete; a clear error otherwise."""
    chosen = snapshot_id or latest_snapshot_id(out_dir)
    if chosen is None:
        pointer = f"its {LATEST} is empty" if storage.exists(storage.join(out_dir, LATEST)) else f"no {LATEST}"
        raise StateError(f"no snapshot published under {out_dir} ({pointer}); run `biasboard refresh` first")
    path = snapshot_dir(out_dir, chosen)
    if not _is_complete(path):
        known = ", ".join(list_snapshots(out_dir)[-5:]) or "none"
        raise StateError(f"snapshot {chosen!r} not found (or incomplete) under {out_dir}; recent: {known}")
    return path


def list_snapshots(out_dir: str) -> list[str]:
    """Ids of complete snapshots (those with a manifest), oldest first."""
    root = storage.join(out_dir, SNAPSHOTS)
    return [sid for sid in storage.list_children(root) if _is_complete(storage.join(root, sid))]


def read_snapshot_manifest(snapshot_path: str) -> dict:
    return read_snapshot_json(storage.join(snapshot_path, MANIFEST))


def read_snapshot_json(path: str) -> dict:
    """A snapshot's JSON file (manifest.json, summary.json) as an object; StateError when it is not one.

    A file cut short or emptied (a copy of the site interrupted, a disk filled) raised json's traceback from
    export and plan; this says which file and how to go on in one line.
    """
    try:
        document = json.loads(storage.read_text(path))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise StateError(f"{path}: damaged snapshot file, not JSON ({err}); {_DAMAGED_ADVICE}") from err
    if not isinstance(document, dict):
        raise StateError(
            f"{path}: damaged snapshot file, a JSON {type(document).__name__}, not an object; {_DAMAGED_ADVICE}"
        )
    return document


def _is_complete(path: str) -> bool:
    return storage.exists(storage.join(path, MANIFEST))


def _make_visible(out_dir: str, staging: str, final: str) -> None:
    if not storage.is_remote(final):
        storage.ensure_dir(storage.join(out_dir, SNAPSHOTS))
        storage.rename_dir(staging, final)
        return
    # A bucket cannot rename a prefix: copy data files first, the manifest (the completeness mark) last.
    names = [info.path for info in storage.list_files(staging)]
    manifest = [p for p in names if p.endswith("/" + MANIFEST)]
    for path in [p for p in names if p not in manifest] + manifest:
        rel = path[len(staging.rstrip("/")) + 1 :]
        storage.write_bytes(storage.join(final, rel), storage.read_bytes(path))
    storage.delete_tree(staging)


def _point_latest(out_dir: str, snapshot_id: str) -> None:
    """Replace ``LATEST`` with ``snapshot_id`` (complete by now): cut short, it names this snapshot or the previous."""
    left = f"snapshot {snapshot_id} is complete, and LATEST names it or the previous one (its write was cut short)"
    with storage.if_unreachable(left):
        storage.atomic_write_text(storage.join(out_dir, LATEST), snapshot_id + "\n")


def clean_staging(out_dir: str) -> None:
    """Remove what killed runs left in staging, and a snapshot folder a bucket copy cut short (no manifest: never
    listed, never read); call before staging anew.  The cut-short copies stayed under ``snapshots/`` for good."""
    root = storage.join(out_dir, STAGING)
    leftovers = storage.list_children(root)
    for name in leftovers:
        storage.delete_tree(storage.join(root, name))
    if leftovers:
        _LOG.info("publish: removed %d unfinished staging folder(s) left by an interrupted run", len(leftovers))
    snapshots = storage.join(out_dir, SNAPSHOTS)
    cut_short = [sid for sid in storage.list_children(snapshots) if not _is_complete(storage.join(snapshots, sid))]
    for sid in cut_short:
        storage.delete_tree(storage.join(snapshots, sid))
    if cut_short:
        _LOG.info("publish: removed %d snapshot folder(s) whose copy an interrupted run cut short", len(cut_short))
