"""The checks every job runs before it does any work: options, folders, buckets, the family map.

A job that fails after reading, aggregating, fitting or publishing has wasted
the run and, worse, may have moved ``LATEST`` before refusing.  Each job
therefore calls these first, and each raises a :class:`~biasboard.schemas.errors.BiasboardError`
whose message the CLI prints as one line (exit code 2):

* **numbers in range** (:class:`NumberRule`, :func:`at_least`): ``--bootstrap -1``,
  ``--plan-budget -1`` or ``--length-clip 5`` are refused, naming the flag and what
  it accepts, not discovered after the fit;
* **folders that will be written** (:func:`writable_folder`): a probe file is
  written and removed (missing folders are created for it and removed again),
  so a read-only folder, a file in the way or a full disk fail now; on a
  bucket the bucket must exist and answer (:func:`reachable_bucket`);
* **files that will be read** (:func:`family_map`): a family map is read and
  parsed on every run, also when no day is new and the map would otherwise be
  unused, so a typo in its path is never silent.

The bucket probe is bounded (:data:`BUCKET_PROBE_DEADLINE_S`): Google's client
retries a refused connection for two minutes by default, which on a
misconfigured endpoint looks like a hang.  It is the first request of every job
that names a bucket, so storage unreachable from the start costs the probe's 12 s,
not a job's 30 s (nothing has been done, so there is nothing to ride out), and
its line says how long nothing answered, as measured.  Storage lost in the middle
of a job is bounded too, more loosely (a blip there is retried for up to 30 s):
:mod:`biasboard.transforms.gcs_requests`.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import time
import uuid
from urllib.parse import urlsplit

from apache_beam.transforms.resources import parse_resource_hints
from biasboard.schemas.errors import BucketUnreachable, InputError, StateError, StorageUnreachable
from biasboard.schemas.families import FamilyMap
from biasboard.schemas.numbers import NumberRule
from biasboard.transforms import gcs_requests, publish, storage

#: Total time the up-front bucket probe may spend retrying (seconds).
BUCKET_PROBE_DEADLINE_S = 12.0
#: Time one probe request may take (seconds).
BUCKET_PROBE_TIMEOUT_S = 4.0


def at_least(value: int | float | None, low: int | float, flag: str) -> None:
    """Refuse ``value < low`` for ``flag`` (None means "not given" and passes)."""
    NumberRule(low=low).check(value, flag)


def memory_amount(value: str, flag: str) -> None:
    """Refuse a memory amount Beam's resource hints cannot read (``4GB``, ``512MiB``: a number and its unit).

    Why: ``--fit-min-ram abc`` ended in a traceback from Beam when the fit's transform was built."""
    try:
        parse_resource_hints({"min_ram": value})
    except ValueError:
        raise InputError(
            f"{flag} must be an amount of memory with its unit (e.g. 4GB, 512MiB), got {value!r}"
        ) from None


def distinct_folders(**folders: str) -> None:
    """Refuse two flags naming the same folder (``--state`` and ``--out`` share nothing)."""
    seen: dict[str, str] = {}
    for flag, path in folders.items():
        key = storage.normalise(path)
        if key in seen:
            raise InputError(f"--{seen[key]} and --{flag} are the same folder ({path}); give each its own")
        seen[key] = flag


def _inside(path: str, folder: str) -> bool:
    """``path`` is ``folder`` or lies under it (both normalised: same spelling locally and on a bucket)."""
    path, folder = storage.normalise(path), storage.normalise(folder)
    sep = "/" if storage.is_remote(folder) else os.sep
    return path == folder or path.startswith(folder.rstrip(sep) + sep)


def outside_input(inputs: tuple[tuple[str, str | None], ...], **folders: str) -> None:
    """Refuse a folder the job writes (``--state``, ``--out``) that is an input folder or lies inside one.

    Why: an input folder is read whole, so the job's own Parquet files (cells, dead letters, snapshots) would
    be read back as battle files by the next run: with ``--input logs --state logs/state`` the first refresh
    worked and the next failed naming a cells file's missing ``battle_id``.  A glob input is checked against
    the files it matches (:func:`files_outside`), since only those are read.
    """
    for input_flag, given in inputs:
        if not given:
            continue
        glob = storage.is_pattern(given)
        for flag, path in folders.items():
            if _glob_reaches(given, path) if glob else _inside(path, given):
                reach = f"lies where {input_flag} {given} reads" if glob else f"is inside {input_flag} {given}"
                raise InputError(
                    f"--{flag} {path} {reach}: the next run would read its own Parquet files as input; "
                    f"give --{flag} a folder outside it"
                )


def _glob_reaches(glob: str, folder: str) -> bool:
    """Whether input ``glob`` would read what a job writes below ``folder``: it holds ``**`` and the folder lies below
    its fixed part, or it names the folder or one of its parents (a glob matching folders reads each one whole).

    Why: ``--input 'gs://b/nest/**' --state gs://b/nest/state`` passed, as the state was empty on the first run;
    the second read the state's files as battles and failed on one of them."""
    parts = storage.normalise(glob).rstrip("/").split("/")
    under = storage.normalise(folder).rstrip("/").split("/")
    if "**" in glob:
        fixed = next(i for i, part in enumerate(parts) if storage.is_pattern(part))
        return under[:fixed] == parts[:fixed]
    if not all(fnmatch.fnmatchcase(u, p) for u, p in zip(under, parts, strict=False)):
        return False
    if len(under) >= len(parts):
        return True
    # The glob goes deeper than the folder: it reads the job's files if its rest matches where they lie
    # (``--input 'gl/*/*/day=*/*.parquet' --state gl/state`` matched state/cells/day=…/pair_cells.parquet once
    # the first run had written it: the first run passed, every later one failed).
    rest = parts[len(under) :]
    return any(
        len(written) == len(rest) and all(fnmatch.fnmatchcase(w, p) for w, p in zip(written, rest, strict=True))
        for written in (path.split("/") for path in WRITTEN_FILES)
    )


#: Where a state's and a site's files lie below them, one of each shape (:func:`_glob_reaches`).
WRITTEN_FILES = (
    "cells/day=2024-01-01/pair_cells.parquet",
    "cells/day=2024-01-01/battle_ids.parquet",
    "deadletters/day=2024-01-01/dead_letters.parquet",
    "audit_days/day=2024-01-01/order_pairs.parquet",
    "audit_days/merged/order_pairs-0123456789abcdef.parquet",
    "audit/audit_judges.parquet",
    "manifests/day=2024-01-01.json",
    "snapshots/20240101T000000Z-0123456789ab/leaderboard.parquet",
    "plans/20240101T000000Z-0123456789ab/plan.parquet",
)


def files_outside(input_flag: str, given: str, files: list[str], **folders: str) -> None:
    """Refuse an input glob that matches files inside a folder the job writes (read back as battles)."""
    for flag, path in folders.items():
        inside = next((f for f in files if _inside(f, path)), None)
        if inside is not None:
            raise InputError(
                f"{input_flag} {given} matches files inside --{flag} {path} ({inside}): they are the job's own "
                "files, not battles; narrow the glob or move the folder"
            )


def local_only(path: str | None, flag: str, says: str) -> None:
    """Refuse a bucket (or any ``scheme://``) ``path`` for a job that writes local files only, ``says`` saying so.

    Why: ``simulate --out gs://b/logs`` and ``demo --workdir gs://b/demo`` write through :class:`pathlib.Path`, which
    made a stray ``./gs:/b/…`` folder in the working directory and ended in a pyarrow traceback ("Missing bucket
    name in GCS URI"), simulate after a bucket probe that took 25-35 s (``import`` refuses such a path the same way).
    """
    if path and "://" in path:
        raise InputError(f"{flag} {path}: {says}")


def writable_folder(path: str, flag: str) -> None:
    """``path`` can be written: probed locally (and left as found); on a bucket, the bucket exists.

    The probe is a real write (a uniquely named empty file, removed at once):
    permission bits lie to root and to network file systems, a write does not.
    """
    if not path:
        raise InputError(f"{flag} is empty")
    if storage.holds_glob_characters(path):
        # Beam's file system lists and deletes by pattern: a folder named "site[1]" matched nothing, so a run wrote
        # its state and then found no day in it, or failed deleting its own staging (a traceback).
        raise InputError(
            f"{flag} {path}: a folder written to may not hold the glob characters {' '.join(storage.GLOB_CHARACTERS)} "
            "(its files are listed by pattern); rename it"
        )
    if storage.is_remote(path):
        reachable_bucket(path, flag, write=True)
        return
    if os.path.exists(path) and not os.path.isdir(path):
        raise InputError(f"{flag} {path}: exists and is a file, not a folder")
    created = _first_missing(os.path.abspath(path))
    storage.ensure_dir(path)
    probe = os.path.join(path, f".biasboard-write-check-{uuid.uuid4().hex}")
    try:
        with open(probe, "wb"):
            pass
        os.remove(probe)
    except OSError as err:
        raise StateError(f"{flag} {path}: cannot write there ({err.strerror or err})") from err
    finally:
        if created is not None:  # a checked run leaves no trace; the job creates the folder when it writes
            shutil.rmtree(created, ignore_errors=True)


#: What a refresh owns, by the mark each leaves: a published site (its ``LATEST``) and a state (its day manifests).
SITE, STATE = "the published site", "the refresh state"
#: The parts of a site its jobs write: a folder given to another job there had its files replaced or removed.
SITE_PARTS = (publish.SNAPSHOTS, publish.STAGING, "plans")


def not_owned(path: str, flag: str, *, site: bool = True, state: bool = True, allow: tuple[str, ...] = ()) -> None:
    """Refuse a folder a job writes that is (or lies inside) a site's or a state's own files (``site``/``state``: which
    owners to look for, up to :data:`OWNER_LEVELS` folders up; ``allow``: a site part the job itself writes).

    Why: ``export --to site/snapshots/<id>`` was accepted, and exporting there again in another format removed the
    snapshot's own leaderboard.parquet and bias.parquet; ``audit --out state/audit`` replaced the audit a refresh
    reuses (a new snapshot then published another input's audit); ``refresh`` with ``--state`` and ``--out``
    swapped published the state's cells and raw dead letters in the site."""
    levels = [path]
    for _ in range(OWNER_LEVELS):
        parent = storage.parent(levels[-1])
        if parent == levels[-1]:
            break
        levels.append(parent)
    for depth, folder in enumerate(levels):
        inside = levels[depth - 1].rstrip("/").rsplit("/", 1)[-1] if depth else ""
        if site and storage.exists(storage.join(folder, publish.LATEST)) and (not depth or inside in SITE_PARTS):
            if inside in allow:
                return
            where = "is" if not depth else "is inside"
            raise InputError(
                f"{flag} {path} {where} {SITE} {folder} (its snapshots are never rewritten): give {flag} a folder "
                "of its own"
            )
        if state and storage.list_files(storage.join(folder, "manifests", "")):
            where = "is" if not depth else "is inside"
            raise InputError(f"{flag} {path} {where} {STATE} {folder}: give {flag} a folder of its own")


#: How many folders up :func:`not_owned` looks for a site or a state (a snapshot is two below its site).
OWNER_LEVELS = 3


def _first_missing(path: str) -> str | None:
    """The outermost folder of ``path`` that does not exist yet (None when ``path`` exists)."""
    missing = None
    while not os.path.exists(path):
        missing, parent = path, os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return missing


def input_buckets(*inputs: tuple[str, str | None]) -> None:
    """Each given input's ``gs://`` bucket exists and answers (``inputs``: (flag, path or glob) pairs): a missing
    one was a 369-character dump of Beam's listing error instead of "bucket X does not exist".  Also for a job's
    folders that :func:`writable_folder` does not check (plan's ``--out`` and ``--to``)."""
    for flag, path in inputs:
        if path:
            reachable_bucket(path, flag)


def reachable_bucket(path: str, flag: str, write: bool = False) -> None:
    """The ``gs://`` bucket of ``path`` exists and answers within :data:`BUCKET_PROBE_DEADLINE_S`; to ``write`` there,
    Google Cloud credentials were found (:func:`~biasboard.transforms.storage.gcs_credentials_missing`).

    Uses the same client (and credentials, or the anonymous emulator client)
    Beam's GCS file system uses.  Other remote schemes are left to Beam.  A read may be anonymous (a public
    bucket); a write never is, so without credentials it is refused at once, saying how to give them.
    """
    if not path.startswith("gs://"):
        return
    bucket = path[len("gs://") :].split("/", 1)[0]
    if not bucket:
        raise InputError(f"{flag} {path}: no bucket name")
    emulator_url()
    missing = storage.gcs_credentials_missing()
    if missing and write:
        raise InputError(
            f"{flag} {path}: no Google Cloud credentials to write with ({missing}): {storage.CREDENTIALS_HOW}"
        )
    from apache_beam.io.gcp.gcsio import create_storage_client
    from apache_beam.options.pipeline_options import PipelineOptions
    from google.api_core import exceptions
    from google.cloud.storage.retry import DEFAULT_RETRY

    bounded = DEFAULT_RETRY.with_timeout(BUCKET_PROBE_DEADLINE_S)
    started = time.monotonic()
    try:
        client = create_storage_client(PipelineOptions([]))
        with gcs_requests.patience(BUCKET_PROBE_DEADLINE_S):
            found = client.lookup_bucket(bucket, retry=bounded, timeout=BUCKET_PROBE_TIMEOUT_S)
    except (StorageUnreachable, exceptions.RetryError) as err:
        raise BucketUnreachable(f"{flag} {path}: cannot reach bucket {bucket} ({_unanswered(err, started)})") from err
    except (exceptions.Forbidden, exceptions.Unauthorized) as err:
        anonymous = (
            f"; anonymous, as no Google Cloud credentials were found: {storage.CREDENTIALS_HOW}" if missing else ""
        )
        raise StateError(
            f"{flag} {path}: no access to bucket {bucket} ({gcs_requests.first_line(err)}{anonymous})"
        ) from err
    except exceptions.GoogleAPIError as err:
        raise StateError(f"{flag} {path}: bucket {bucket} cannot be checked ({gcs_requests.first_line(err)})") from err
    except Exception as err:  # a transport error that is not retried (an endpoint URL without http://)
        raise StateError(f"{flag} {path}: cannot reach bucket {bucket} ({gcs_requests.first_line(err)})") from err
    if found is None:
        raise StateError(f"{flag} {path}: bucket {bucket} does not exist")


def emulator_url() -> None:
    """Refuse a ``STORAGE_EMULATOR_HOST`` without ``http://`` or ``https://``: google-cloud-storage sends requests to it
    as given, so ``127.0.0.1:4443`` ended every job in requests' "No connection adapters were found for
    '127.0.0.1:4443/storage/v1/b/...'", which names neither the variable nor the fix."""
    value = os.environ.get(storage.EMULATOR_ENV)
    if value and urlsplit(value).scheme not in ("http", "https"):
        raise InputError(
            f"{storage.EMULATOR_ENV}={value}: not a URL; name the scheme, e.g. http://{value.split('://')[-1]}"
        )


def _unanswered(err: Exception, started: float) -> str:
    """Why the probe begun at ``started`` got no answer, and for how long as measured (not the deadline it had: the
    line is read as the time the job waited): the bounded adapter's account (which says no time for a host name
    that does not exist: that is not waited out), else the library's last error when its retries gave up first."""
    if isinstance(err, StorageUnreachable):
        return err.why
    cause = getattr(err, "cause", None) or err
    return f"{gcs_requests.first_line(cause)}; no answer for {time.monotonic() - started:.0f} s"


def family_map(path: str | None, flag: str = "--family-map") -> FamilyMap:
    """The family map the run will use (defaults, preceded by the user's rules): read and parsed now."""
    from biasboard.transforms.read import load_family_map

    if path is not None and not path.strip():
        raise InputError(f"{flag} is empty")
    return load_family_map(path)
