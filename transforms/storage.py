"""Storage helpers that make a local folder and a ``gs://`` prefix behave alike.

Every job reads inputs, keeps state and publishes snapshots through these few
functions, which are thin wrappers over Beam's :class:`FileSystems`: the same
code then works on a laptop, on the GCS emulator in the tests and on a real
bucket on Dataflow, with no ``if gs:`` branches scattered through the jobs.

What differs between the two, and is handled here once:

* **Atomic replace.**  Locally a file is written to a temporary name in the
  same folder, flushed, ``fsync``-ed and ``os.replace``-d, so a reader sees the
  old file or the new one, never half of one.  A GCS object upload is already
  atomic (an object appears whole, or not at all), so on a bucket the object
  is written directly; "directories" there are only prefixes, so callers that
  need a group of files to appear together write a *pointer object last*
  (see :mod:`biasboard.transforms.publish`).
* **Folders.**  Local folders are created on demand; a bucket has none.
* **Credentials.**  See :func:`configure_gcs_auth`.
* **Outages.**  Every GCS request is bounded and storage that stops answering is declared unreachable
  after about 30 s (:mod:`biasboard.transforms.gcs_requests`); the jobs say so in one line, with what
  they left behind (:func:`if_unreachable`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import posixpath
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import BinaryIO, overload

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from biasboard.schemas.errors import (
    BucketUnreachable,
    InputError,
    StateError,
    StorageUnreachable,
    raise_if_unreachable,
    storage_unreachable,
)

_LOG = logging.getLogger(__name__)

#: Environment variable that google-cloud-storage (and every Google client
#: library) reads to talk to a storage emulator instead of the real service.
EMULATOR_ENV = "STORAGE_EMULATOR_HOST"


@dataclass(frozen=True)
class FileInfo:
    """One file found under a prefix: its full path, size in bytes, modification time (epoch s)."""

    path: str
    size: int
    mtime: float


def is_remote(path: str) -> bool:
    """True for a URL with a scheme other than ``file`` (``gs://``, ``s3://`` ...)."""
    scheme = FileSystems.get_scheme(path)
    return scheme is not None and scheme != "file"


#: Characters Beam's file systems and polars read as a pattern in a path (``FileSystems.match``, ``delete``, scans);
#: the first three make a path a glob.
GLOB_CHARACTERS = "*?[]"


def is_pattern(path: str) -> bool:
    """Whether ``path`` is a glob (holds ``*``, ``?`` or ``[``) rather than one file or folder."""
    return any(c in path for c in GLOB_CHARACTERS[:3])


def holds_glob_characters(path: str) -> bool:
    """Whether ``path`` holds any character a reader takes as a pattern (``]`` too): such a file or folder, named
    literally, is matched as a pattern and not found."""
    return any(c in path for c in GLOB_CHARACTERS)


#: The schemes of Beam's remote file systems, whose URLs take two slashes (``gs://bucket/x``).
REMOTE_SCHEMES = ("gs", "s3", "hdfs", "azfs")


def check_scheme_slashes(path: str | None, flag: str | None = None) -> None:
    """Refuse ``gs:/bucket/x`` (one slash) in one line, naming ``flag`` when given, with the URL probably meant.

    Why: Beam reads it as a local path (a folder ``gs:`` in the working directory), so an input matched nothing
    ("no input files match", a path that looked right) and an output would have been written on this machine.
    """
    scheme, slash, rest = (path or "").partition(":/")
    if slash and scheme in REMOTE_SCHEMES and not rest.startswith("/"):
        where = f"{flag} {path}" if flag else path
        raise InputError(
            f"{where}: one slash after '{scheme}:' is read as a local path; {scheme}://{rest} is probably meant"
        )


@overload
def launcher_path(path: str) -> str: ...


@overload
def launcher_path(path: None) -> None: ...


def launcher_path(path: str | None) -> str | None:
    """``path`` as the launching process means it (absolute locally; None stays None): a path a worker opens or
    writes must not depend on that worker's working directory.  A remote or empty path is left as given (an empty
    one is refused by name where it is checked, not read as this folder; ``gs:/x`` is refused:
    :func:`check_scheme_slashes`)."""
    check_scheme_slashes(path)
    return path if path is None or not path.strip() or is_remote(path) else os.path.abspath(path)


def normalise(path: str) -> str:
    """A path in one spelling (absolute locally, no trailing slash), to tell whether two name the same folder."""
    return path.rstrip("/") if is_remote(path) else os.path.abspath(path)


def parent(path: str) -> str:
    """The folder holding ``path`` (normalised); a bucket's root, or ``/``, is its own parent."""
    path = normalise(path)
    if is_remote(path):
        scheme, _, rest = path.partition("://")
        return f"{scheme}://{rest.rsplit('/', 1)[0]}" if "/" in rest else path
    return os.path.dirname(path)


def join(base: str, *parts: str) -> str:
    """Join path parts with ``/`` for URLs and the OS separator for local paths."""
    if is_remote(base):
        return posixpath.join(base.rstrip("/"), *parts)
    return os.path.join(base, *parts)


@contextmanager
def _writing(path: str):
    """Turn a failed write (permissions, a file where a folder should be, a bucket that refuses) into one line."""
    try:
        yield
    except Exception as err:  # OSError locally; google.api_core / Beam wrappers on a bucket
        raise_if_unreachable(err, path)
        if isinstance(err, StateError):
            raise
        raise StateError(f"cannot write {path}: {err}") from err


def ensure_dir(path: str) -> None:
    """Create a local folder (and parents); a no-op on a bucket, which has no folders."""
    if not is_remote(path):
        with _writing(path):
            os.makedirs(path, exist_ok=True)


def exists(path: str) -> bool:
    """Does the file exist (locally: file or folder)?"""
    return FileSystems.exists(path)


def read_bytes(path: str) -> bytes:
    """The whole content of one file."""
    try:
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
            return handle.read()
    except Exception as err:  # Beam wraps every backend's error differently
        raise_if_unreachable(err, path)
        raise StateError(f"cannot read {path}: {err}") from err


def read_text(path: str) -> str:
    """The whole content of one UTF-8 text file."""
    return read_bytes(path).decode("utf-8")


def write_bytes(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` (not atomic locally; use :func:`atomic_write_bytes` for that).

    On a bucket a write that failed is given up (:func:`abandon_upload`), never left for a retry at exit."""
    with _writing(path):
        remote = is_remote(path)
        if not remote:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        upload = FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED)
        if not remote:
            with upload:
                upload.write(data)
            return
        try:
            upload.write(data)
            upload.close()
        except BaseException:
            abandon_upload(upload)
            raise


def abandon_upload(upload: BinaryIO) -> None:
    """Give up a bucket upload that failed or is no longer wanted, so that nothing finishes it later.

    Why: google-cloud-storage's writer uploads what it holds when it is closed, and a close that fails (storage
    gone) leaves it open — so the garbage collector or the interpreter's exit closed it again: a file the job
    had said was not written could appear once storage was back (a partial one, for a stream cut short), or
    the exit spent the requests' retries against storage that was gone (~30 s).  Its ``terminate`` cancels a
    started upload (what its own ``with`` block does on an error); it cannot fail here (storage may be gone:
    the upload session then expires unfinished) and the writer is closed even when its cancel request failed.
    A writer without ``terminate`` (another file system's) is left as it is: closing it would finish the file.
    """
    terminate = getattr(upload, "terminate", None)
    if terminate is None:
        return
    with contextlib.suppress(Exception):
        terminate()
    buffer = getattr(upload, "_buffer", None)  # what terminate closes last, not reached when its request failed
    if buffer is not None:
        with contextlib.suppress(Exception):
            buffer.close()


def write_synced_bytes(path: str, data: bytes) -> None:
    """:func:`write_bytes`, and locally on disk (fsync) before it returns: for a file a rename commits next.

    A rename is durable once its folder is synced, but the file's blocks are not unless the file itself
    was: after a power cut a committed day or a visible snapshot could then hold empty or short files
    (ext4 and XFS order a rename over an existing file, not a rename into a fresh folder).  On a bucket an
    upload is durable once it returns, so this is :func:`write_bytes`.
    """
    if is_remote(path):
        write_bytes(path, data)
        return
    with _writing(path):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        _write_synced(path, data)


def _write_synced(path: str, data: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def sync_folder(path: str) -> None:
    """Flush a local folder's entries (the renames into it) to disk; a no-op on a bucket, which has no folders."""
    if not is_remote(path):
        _fsync_dir(path)


def atomic_write_bytes(path: str, data: bytes) -> None:
    """Replace ``path`` with ``data`` so a reader never sees a partial file.

    Locally: temp file in the same folder, fsync, ``os.replace`` (atomic on
    POSIX within one file system), then fsync the folder so the rename
    survives a crash.  On a bucket: one object upload, which GCS makes visible
    only once complete.
    """
    if is_remote(path):
        write_bytes(path, data)
        return
    folder = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(folder, f".{os.path.basename(path)}.tmp-{uuid.uuid4().hex}")
    with _writing(path):
        os.makedirs(folder, exist_ok=True)
        try:
            _write_synced(tmp, data)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
    _fsync_dir(folder)


def atomic_write_text(path: str, text: str) -> None:
    """:func:`atomic_write_bytes` for UTF-8 text."""
    atomic_write_bytes(path, text.encode("utf-8"))


def list_files(prefix: str) -> list[FileInfo]:
    """Every file below ``prefix`` (a folder or an object prefix), recursively, sorted by path."""
    if not is_remote(prefix):
        if not os.path.isdir(prefix):
            return []
        found = []
        for root, _, names in os.walk(prefix):
            for name in names:
                full = os.path.join(root, name)
                stat = os.stat(full)
                found.append(FileInfo(full, stat.st_size, stat.st_mtime))
        return sorted(found, key=lambda info: info.path)
    base = prefix.rstrip("/") + "/"
    return [FileInfo(m.path, m.size_in_bytes, m.last_updated_in_seconds) for m in _match(base + "**")]


def list_children(prefix: str) -> list[str]:
    """Names of the immediate entries (files and sub-folders) under ``prefix``, sorted."""
    if not is_remote(prefix):
        return sorted(os.listdir(prefix)) if os.path.isdir(prefix) else []
    base = prefix.rstrip("/") + "/"
    names = {info.path[len(base) :].split("/", 1)[0] for info in list_files(prefix)}
    return sorted(name for name in names if name)


def delete(paths: Iterable[str]) -> None:
    """Delete files (missing ones are ignored)."""
    present = [p for p in paths if FileSystems.exists(p)]
    if present:
        FileSystems.delete(present)


def delete_tree(prefix: str) -> None:
    """Delete a folder / every object under a prefix (missing is fine)."""
    if not is_remote(prefix):
        if os.path.isdir(prefix):
            FileSystems.delete([prefix])
        return
    delete([info.path for info in list_files(prefix)])


def copy_tree(src: str, dst: str) -> list[str]:
    """Copy every file under ``src`` to the same relative path under ``dst``; returns the new paths.

    Works across schemes (local → bucket and back) by reading and writing bytes,
    which is what export needs; within one bucket Beam's server-side copy is used.
    """
    sources = list_files(src)
    base = src.rstrip("/").rstrip(os.sep)
    written = []
    for info in sources:
        rel = info.path[len(base) :].lstrip("/").lstrip(os.sep).replace(os.sep, "/")
        target = join(dst, *rel.split("/"))
        if is_remote(src) and is_remote(dst) and FileSystems.get_scheme(src) == FileSystems.get_scheme(dst):
            FileSystems.copy([info.path], [target])
        else:
            write_bytes(target, read_bytes(info.path))
        written.append(target)
    return written


def rename_dir(src: str, dst: str) -> None:
    """Make folder ``src`` appear as ``dst``.

    Locally one ``os.rename``: atomic, and refuses to overwrite an existing
    ``dst``.  On a bucket there is no rename of a prefix: objects are copied
    then the originals deleted, so the caller must not treat ``dst`` as
    visible until it has written its pointer object afterwards.
    """
    if not is_remote(src):
        if os.path.exists(dst):
            raise StateError(f"cannot publish {src} as {dst}: {dst} already exists")
        os.rename(src, dst)
        _fsync_dir(os.path.dirname(os.path.abspath(dst)))
        return
    copy_tree(src, dst)
    delete_tree(src)


def configure_gcs(no_auth: bool = False) -> bool:
    """What every job does first about GCS: bound its requests (:func:`gcs_requests.install
    <biasboard.transforms.gcs_requests.install>`), then :func:`configure_gcs_auth`; returns the latter's answer."""
    from biasboard.transforms import gcs_requests

    gcs_requests.install()
    return configure_gcs_auth(no_auth)


@contextmanager
def if_unreachable(consequence: str) -> Iterator[None]:
    """Let storage that could not be reached in the block leave as one :class:`StorageUnreachable` saying
    ``consequence`` (what the job left behind: ``nothing was published ...``).

    However deep it was met and however it was wrapped on the way (a reader's "cannot read", a Beam I/O
    error, a runner's text of a worker's traceback), the job ends with the one line that names the storage
    and the state it left; a step inside that knows better (the ``LATEST`` write) says its own.  Usable as a
    decorator of a job's function.
    """
    with _unreachable_as(lambda found: found.having(consequence)):
        yield


@contextmanager
def if_unreachable_after(done: str) -> Iterator[None]:
    """Like :func:`if_unreachable`, for a block that says what it leaves itself (:func:`if_unreachable` inside):
    ``done``, what the job had finished before the block, goes before it (:meth:`StorageUnreachable.after`)."""
    with _unreachable_as(lambda found: found.after(done)):
        yield


@contextmanager
def _unreachable_as(say: Callable[[StorageUnreachable], StorageUnreachable]) -> Iterator[None]:
    """Re-raise storage not reached in the block, however wrapped, as ``say`` of it; other errors as they are."""
    try:
        yield
    except BucketUnreachable:
        raise  # the probe's refusal, before any work: its own line names the flag and the bucket
    except Exception as err:
        found = storage_unreachable(err)
        if found is None:
            raise
        raise say(found) from err


def configure_gcs_auth(no_auth: bool = False) -> bool:
    """Skip Beam's credential lookup when it can only end anonymous; returns whether it did.

    Beam's GCS file system asks ``google.auth.default()`` for credentials and,
    when there are none, retries with exponential back-off for about 20 s per
    process before going on anonymously.  Two documented situations mean "no
    credentials wanted", and only in those do we go straight to anonymous:

    * ``STORAGE_EMULATOR_HOST`` is set: the google-cloud-storage library itself
      then bypasses authentication (its ``Client`` uses ``AnonymousCredentials``
      for an emulator), and the emulator ignores credentials;
    * Beam's own ``--no_auth`` option ("skips authorizing credentials with
      Google Cloud"), which Beam's Dataflow client honours but its GCS file
      system does not.

    Otherwise nothing changes: real credentials (ADC, service accounts,
    ``--impersonate_service_account``) are looked up exactly as Beam does.
    Beam offers no public switch for this, so we seed its per-process
    credential cache with "none" (Beam's result after the retries, minus the wait).
    """
    emulator = os.environ.get(EMULATOR_ENV)
    _GCS_AUTH.on_purpose = bool(emulator or no_auth)  # this job's answer (every job calls this first)
    if not _GCS_AUTH.on_purpose:
        return False
    from apache_beam.internal.gcp import auth

    with auth._Credentials._credentials_lock:
        if auth._Credentials._credentials_init and auth._Credentials._credentials is None:
            return True  # anonymous already (a job's second call: its library function after its CLI's checks)
        auth._Credentials._credentials = None
        auth._Credentials._credentials_init = True
    reason = f"{EMULATOR_ENV}={emulator}" if emulator else "--no_auth"
    _LOG.info("GCS access is anonymous (%s): skipping the credential lookup", reason)
    return True


@dataclass
class _GcsAuth:
    """What this process knows of its GCS credentials beyond Beam's cache: anonymous on purpose
    (:func:`configure_gcs_auth`), or why none were found (:func:`gcs_credentials_missing`)."""

    on_purpose: bool = False
    missing: str | None = None


_GCS_AUTH = _GcsAuth()

#: How to give a job Google Cloud credentials, for the line that says none were found.
CREDENTIALS_HOW = (
    "set GOOGLE_APPLICATION_CREDENTIALS to a service-account key file or run "
    f"'gcloud auth application-default login' (an emulator: set {EMULATOR_ENV}=http://HOST:PORT)"
)


def gcs_credentials_missing() -> str | None:
    """Why no Google Cloud credentials were found (google-auth's first sentence), or None when they were or GCS
    is anonymous on purpose (an emulator, ``--no_auth``).  When none are found, Beam's lookup is answered
    "anonymous" at once.

    Why: Beam asks ``google.auth.default()`` up to 5 times with exponential back-off before connecting
    anonymously (measured: waits of 1.6, 2.3, 7.1 and 10.9 s), so ``export --to gs://…`` on a machine without
    credentials took 28 s to fail.  One call of ``google.auth.default()`` looks where every later call would (the
    variable, gcloud's file, the GCE metadata server, which google-auth itself pings with retries), so the retries
    only help a metadata server that comes back within those 20 s.  Found credentials are left for Beam to look
    up as before (impersonation, scopes).
    """
    if os.environ.get(EMULATOR_ENV) or _GCS_AUTH.on_purpose:
        return None
    from apache_beam.internal.gcp import auth

    with auth._Credentials._credentials_lock:
        if auth._Credentials._credentials_init:  # Beam (or this function) has looked already
            if auth._Credentials._credentials is not None:
                return None
            return _GCS_AUTH.missing or "Beam found none"
        import google.auth
        from google.auth.exceptions import DefaultCredentialsError

        try:
            google.auth.default()
        except DefaultCredentialsError as err:
            _GCS_AUTH.missing = str(err).split(". ")[0].strip().rstrip(".")
            auth._Credentials._credentials, auth._Credentials._credentials_init = None, True
            _LOG.info("GCS access is anonymous: no Google Cloud credentials (%s)", _GCS_AUTH.missing)
            return _GCS_AUTH.missing
    return None


def _match(pattern: str):
    try:
        result = FileSystems.match([pattern])[0]
    except Exception as err:
        raise_if_unreachable(err)
        # Beam raises when a pattern matches nothing on some backends; an empty listing is the honest answer.
        if "No files found" in str(err) or "not found" in str(err).lower():
            return []
        raise StateError(f"cannot list {pattern}: {err}") from err
    return sorted(result.metadata_list, key=lambda m: m.path)


def _fsync_dir(folder: str) -> None:
    """Flush a folder's entry table so a completed rename survives power loss (POSIX only)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
