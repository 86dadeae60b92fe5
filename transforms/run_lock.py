"""One job at a time per state (and output) folder: a lock that a killed run cannot leave stuck.

Two refreshes started at once on one state used to race each other's renames; the loser ended in a raw
``FileNotFoundError`` (locally) or a Beam ``Rename operation failed ... 404`` (on a bucket), and the state
and ``staging/`` each run cleans were not safe from the other.  The docs asked the scheduler to serialise
runs (``flock`` in cron); this makes the job itself refuse, in one line, to start beside another.  A backfill
writes the same state (cells, manifests, the repeated-id cache) and takes the same lock, so a backfill and a refresh
on one state refuse each other too; the line names the holder's job.

Locally: ``fcntl.flock`` on ``FOLDER/.refresh.lock``.  The kernel drops the lock when its holder dies,
SIGKILL included, so a killed run never blocks its rerun (a process it forked closes its copy of the lock's
descriptor at once, so a child left running cannot keep it).  The file holds the holder's host, pid and
start time (for the refusal's line) and is removed on release; a run that opens it just before removal
checks, once locked, that the path still names the file it locked (else it starts again on the new one).

On a bucket (no kernel to notice a death): an object ``FOLDER/.refresh.lock`` created with
``if_generation_match=0`` (GCS creates it only if absent, atomically), holding the same fields.  While
the job runs a thread renews it every :data:`RENEW_EVERY_S`; a lock not renewed for :data:`STALE_AFTER_S`
is a dead holder's and is taken over, and so at once is a lock whose holder is a process of this host
that no longer exists (a killed cron run's rerun on the same host waits for nothing).  The holder is named by
its pid and, from ``/proc``, the host's boot id and the process's start time: a pid reused by another process
(or a host rebooted since) does not make a dead holder look alive (:meth:`Holder.dead_here`).  Its pid namespace
is recorded too: containers that share a host name (host networking) but not a pid namespace cannot see each
other's processes, so a live holder in another one is judged by its renewals alone, never by a pid.  A holder
that died on another host (or in another container) blocks for at most :data:`STALE_AFTER_S`; an operator sure no
job runs may delete the object.  Other remote schemes are not locked (the scheduler must serialise runs there).
"""

from __future__ import annotations

import datetime as dt
import errno
import fcntl
import json
import logging
import os
import socket
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass

from biasboard.schemas.errors import StateError
from biasboard.transforms import storage

_LOG = logging.getLogger(__name__)

LOCK_NAME = ".refresh.lock"
#: How often a bucket lock's holder renews it, and after how long without renewal it is taken for a dead
#: holder's: 10 renewals missed, so a slow request or a paused VM is not mistaken for a death.
RENEW_EVERY_S = 60.0
STALE_AFTER_S = 600.0
#: How the refusal says what to do (docs/running.md, "One refresh at a time").
SERIALISE = "runs on one state are meant to be serialised (flock in cron, Airflow max_active_runs=1)"


@dataclass(frozen=True)
class Holder:
    """Who holds a lock: what the refusal names, so the operator can find the other run, and what tells its death.

    ``boot`` and ``ticks`` (this host's boot id and the holder's start time in clock ticks since boot, both from
    ``/proc``) name the process instance, not only its pid: a pid the kernel reused for another process made a dead
    holder look alive, so its bucket lock blocked runs for up to :data:`STALE_AFTER_S`.  ``pidns`` names the pid
    namespace its pid counts in (:func:`pid_namespace`): a container on the same host, seeing other pids, took a
    live holder's pid for a dead or reused one and ran beside it.  None where ``/proc`` is absent (and in locks
    written before they were recorded): then the pid alone is checked, as before.
    """

    host: str
    pid: int
    started: str
    job: str = "refresh"
    boot: str | None = None
    ticks: int | None = None
    pidns: str | None = None

    @classmethod
    def me(cls, job: str = "refresh") -> Holder:
        now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        pid = os.getpid()
        return cls(socket.gethostname(), pid, now, job, boot_id(), start_ticks(pid), pid_namespace())

    def to_bytes(self, renewed: float | None = None) -> bytes:
        fields: dict[str, object] = {"host": self.host, "pid": self.pid, "started": self.started, "job": self.job}
        known = (("boot", self.boot), ("ticks", self.ticks), ("pidns", self.pidns))
        fields.update({k: v for k, v in known if v is not None})
        return json.dumps(fields if renewed is None else {**fields, "renewed": renewed}).encode()

    @classmethod
    def parse(cls, data: bytes) -> Holder | None:
        try:
            fields = json.loads(data.decode())
            boot, ticks, pidns = fields.get("boot"), fields.get("ticks"), fields.get("pidns")
            return cls(
                str(fields["host"]),
                int(fields["pid"]),
                str(fields["started"]),
                str(fields.get("job", "refresh")),  # locks written before the job was recorded: only refresh locked
                None if boot is None else str(boot),
                None if ticks is None else int(ticks),
                None if pidns is None else str(pidns),
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            return None  # being written, or not ours: the refusal says less

    def describe(self) -> str:
        """Who holds it, as the refusal names it; a pid of another pid namespace says so (it is not this host's pid
        of that number: another container's, found with e.g. ``docker top``)."""
        elsewhere = self.host == socket.gethostname() and not self.seen_here()
        return (
            f"pid {self.pid}{f' of pid namespace {self.pidns}' if elsewhere else ''} on host {self.host}, "
            f"started {self.started}"
        )

    def seen_here(self) -> bool:
        """Whether this process sees the holder's pid as the holder did: the same host name, and the same pid
        namespace where both are known."""
        if self.host != socket.gethostname():
            return False
        here = pid_namespace()
        return self.pidns is None or here is None or self.pidns == here

    def dead_here(self) -> bool:
        """A process of this host that no longer exists: its pid is free, this host booted since (another boot id),
        or the process now under its pid started at another time (the pid was reused).  Without ``/proc`` (or a
        lock that recorded neither) only the pid is checked, and a reused pid still makes a dead holder look alive.
        A holder in another pid namespace (another container of this host) is never judged dead by a pid here."""
        if self.host != socket.gethostname():
            return False
        here = boot_id()
        if self.boot is not None and here is not None and self.boot != here:
            return True  # one host name is one machine: rebooted since, every process of the holder's boot is gone
        if not self.seen_here():
            return False  # its pid means another process here, or none: only its renewals tell its death
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except OSError:
            pass  # EPERM: someone else's live process, which may still be a reuse of the holder's pid
        if self.ticks is None or self.boot is None or here is None:
            return False
        now = start_ticks(self.pid)
        return now is not None and now != self.ticks


#: Where the kernel's process table is read (Linux); elsewhere the files are absent and only pids are checked.
PROC = "/proc"


def boot_id() -> str | None:
    """This boot's id (``/proc/sys/kernel/random/boot_id``), or None without ``/proc``: start ticks count from boot,
    so they identify a process only together with it."""
    try:
        with open(os.path.join(PROC, "sys", "kernel", "random", "boot_id")) as handle:
            return handle.read().strip() or None
    except OSError:
        return None


def pid_namespace() -> str | None:
    """This process's pid namespace (``/proc/self/ns/pid``, e.g. ``pid:[4026531836]``), or None without ``/proc``:
    pids, and the start ticks read under them, mean the same process only within one namespace."""
    try:
        return os.readlink(os.path.join(PROC, "self", "ns", "pid"))
    except OSError:
        return None


def start_ticks(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since boot (``/proc/<pid>/stat`` field 22), or None (no such
    process, or no ``/proc``): a reused pid has a later start."""
    try:
        with open(os.path.join(PROC, str(pid), "stat"), "rb") as handle:
            stat = handle.read().decode(errors="replace")
        # field 2 (the command name, in parentheses) may hold spaces and ')': count fields after its last ')'
        return int(stat.rsplit(")", 1)[1].split()[22 - 3])
    except (OSError, IndexError, ValueError):
        return None


def busy(job: str, folder: str, lock: str, holder: Holder | None, extra: str = "") -> StateError:
    """The one line a job that finds ``folder`` locked ends with (naming the holder's job: a backfill refused by a
    refresh says so)."""
    who = "another job" if holder is None else f"another {job}" if holder.job == job else f"a {holder.job}"
    return StateError(
        f"{folder}: {who} appears to be running on this folder"
        f"{f' ({holder.describe()})' if holder else ''}, holding {lock}: nothing was done; "
        f"rerun once it has finished; {SERIALISE}{extra}"
    )


@contextmanager
def folder_lock(folder: str, job: str = "refresh") -> Iterator[None]:
    """Hold ``folder``'s job lock for the block, or raise :func:`busy`'s :class:`StateError` at once."""
    if not storage.is_remote(folder):
        with _local_lock(folder, job):
            yield
    elif folder.startswith("gs://"):
        with _bucket_lock(folder, job):
            yield
    else:
        yield


@contextmanager
def folders_lock(folders: list[str], job: str = "refresh") -> Iterator[None]:
    """Every one of ``folders``' locks (a folder named twice is locked once), in the order given."""
    with ExitStack() as stack:
        for folder in dict.fromkeys(storage.normalise(f) for f in folders):
            stack.enter_context(folder_lock(folder, job))
        yield


#: Descriptors of the local locks this process holds: a forked child (bootstrap workers, a pool) closes its
#: copies at once, so that a child the job's death leaves running cannot keep the lock (flock's lock belongs to
#: the open file, shared by every copy of the descriptor; the parent's copy keeps it held).
_HELD: set[int] = set()


def _close_held_in_child() -> None:
    for fd in _HELD:
        with suppress(OSError):
            os.close(fd)
    _HELD.clear()


os.register_at_fork(after_in_child=_close_held_in_child)


@contextmanager
def _local_lock(folder: str, job: str) -> Iterator[None]:
    storage.ensure_dir(folder)
    path = os.path.join(folder, LOCK_NAME)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            os.close(fd)
            if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise StateError(f"cannot lock {path}: {err}") from err
            raise busy(job, folder, path, _read_local(path)) from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # its holder removed it as we opened it: lock the file now there
    _HELD.add(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, Holder.me(job).to_bytes())
        yield
    finally:
        with suppress(FileNotFoundError):  # removed while still locked: an opener then finds the path gone, retries
            os.remove(path)
        _HELD.discard(fd)
        os.close(fd)


def _read_local(path: str) -> Holder | None:
    try:
        with open(path, "rb") as handle:
            return Holder.parse(handle.read())
    except OSError:
        return None


#: The bucket locks this process holds (a lock naming this process that is not among them is a job of this process
#: that ended without removing it).
_HELD_BUCKET: set[str] = set()


@contextmanager
def _bucket_lock(folder: str, job: str) -> Iterator[None]:
    from google.api_core import exceptions

    path = storage.join(folder, LOCK_NAME)
    blob = _blob(path)
    me = Holder.me(job)
    for _ in range(3):  # again only after a stale lock was taken away or the lock changed as it was read
        found = blob.bucket.get_blob(blob.name)
        if found is not None:
            try:
                holder = Holder.parse(found.download_as_bytes(if_generation_match=found.generation))
            except (exceptions.PreconditionFailed, exceptions.NotFound):
                continue  # renewed or removed as it was read: look again
            stale = _stale_because(found, holder, path)
            if stale is None:
                raise busy(job, folder, path, holder, _BUCKET_ESCAPE.format(path=path))
            _LOG.warning("%s: taking over the lock of a run that %s", path, stale)
            with suppress(exceptions.PreconditionFailed, exceptions.NotFound):  # renewed or taken meanwhile
                found.delete(if_generation_match=found.generation)
            continue  # look again
        try:
            blob.upload_from_string(me.to_bytes(_now()), if_generation_match=0)
        except exceptions.PreconditionFailed:
            continue  # another run created it first: look at it again
        break
    else:
        raise busy(job, folder, path, None, _BUCKET_ESCAPE.format(path=path))
    renewer = _Renewer(blob, me)
    renewer.start()
    _HELD_BUCKET.add(path)
    try:
        yield
    finally:
        _HELD_BUCKET.discard(path)
        renewer.stop()
        try:
            blob.delete(if_generation_match=renewer.generation)
        except (exceptions.PreconditionFailed, exceptions.NotFound):
            _LOG.warning("%s: the lock was no longer this run's when it ended (taken as stale?)", path)
        except Exception as err:  # storage lost: the job's own error says so; its rerun takes this lock as stale
            _LOG.warning("%s: lock not removed (%s)", path, str(err).splitlines()[0] if str(err) else type(err))


_BUCKET_ESCAPE = (
    f"; a lock not renewed for {STALE_AFTER_S / 60:.0f} min is a dead run's and is taken over, and one whose run "
    "died on this host at once; if you are sure no job is running on it, delete {path}"
)


def _now() -> float:
    return dt.datetime.now(dt.timezone.utc).timestamp()


def _stale_because(found, holder: Holder | None, path: str) -> str | None:
    """Why a found bucket lock is a dead run's (its holder died on this host, is this process and holds no lock
    there, or has not renewed it for :data:`STALE_AFTER_S`), or None."""
    if holder is not None and holder.dead_here():
        return f"died on this host ({holder.describe()})"
    mine = holder is not None and holder.seen_here() and holder.pid == os.getpid()
    if mine and path not in _HELD_BUCKET:
        return "ran in this process and could not remove it (storage was lost)"
    updated = found.updated.timestamp() if found.updated is not None else _now()
    idle = _now() - updated
    if idle > STALE_AFTER_S:
        return f"has not renewed it for {idle:.0f} s"
    return None


def _blob(path: str):
    from apache_beam.io.gcp.gcsio import create_storage_client
    from apache_beam.options.pipeline_options import PipelineOptions

    bucket, _, name = path[len("gs://") :].partition("/")
    return create_storage_client(PipelineOptions([])).bucket(bucket).blob(name)


class _Renewer:
    """Rewrites the bucket lock every :data:`RENEW_EVERY_S` (its ``updated`` time is the heartbeat), each time only
    if it is still the generation this run wrote."""

    def __init__(self, blob, me: Holder) -> None:
        self.blob, self.me = blob, me
        self.generation = blob.generation
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="refresh-lock-renewer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(RENEW_EVERY_S):
            try:
                self.blob.upload_from_string(self.me.to_bytes(_now()), if_generation_match=self.generation)
                self.generation = self.blob.generation
            except Exception as err:  # a missed renewal is survivable: ten in a row make the lock stale
                _LOG.warning("%s: lock not renewed (%s)", self.blob.name, str(err).splitlines()[0])
