"""Bounded GCS requests: storage that stops answering ends a job in half a minute (12 s if it never answered), saying
so in one line.

Measured before (the GCS emulator killed, or frozen with SIGSTOP, while a ``refresh`` ran): 97 to 121 s until
the job gave up, because google-cloud-storage retries a refused or silent request for 120 s (its
``DEFAULT_RETRY``) and lets each attempt wait 60 s for an answer; and the line it printed could read as
corrupt state (``day 2024-01-03 was not committed by the pipeline``), because a reader took the failed read
for a missing file.  Bounding the library's retries alone is not enough: its back-off grows to 60 s between
attempts, so a job noticed the end of a 30 s budget up to a minute late (measured: 79 s).

A nightly job should ride out a blip and fail on an outage, quickly and saying which.  So every GCS client
Beam makes in a biasboard process (:func:`install`: the jobs through
:func:`~biasboard.transforms.storage.configure_gcs`, a worker process when it imports the transforms) sends
its requests through :class:`BoundedAdapter`, which

* **bounds each request**: a connection within :data:`CONNECT_TIMEOUT_S`, and a byte of the answer within
  :data:`READ_TIMEOUT_S` (silence, not transfer time: a slow download of a big file is not cut), and both within
  what is left of the endpoint's budget (:data:`ATTEMPT_FLOOR_S` at least), so an attempt begun late in an outage
  does not run a whole timeout past it;
* **looks the host name up itself, bounded the same way**, while the endpoint has not answered in this process
  or is failing (:func:`resolve`): the connection's own lookup obeys no timeout, and a resolver that does not
  answer held each attempt 10 to 20 s (glibc: 5 s a server, twice);
* **retries a request that never left** (the connection was refused or not made in time, or its host name did
  not resolve: nothing reached the server, so sending it again is safe for any request) itself, after 0.5, 1,
  2, then every 4 s (jittered), until :data:`UNREACHABLE_AFTER_S` have passed without an answer; a request that
  may have reached the server (no answer in time, a connection dropped mid-way) goes back to the library, whose
  retry policy knows which requests are safe to repeat;
* **declares the endpoint unreachable** once its requests have got no answer for :data:`UNREACHABLE_AFTER_S`
  (at least two attempts): the failing request raises :class:`~biasboard.schemas.errors.StorageUnreachable`,
  which no retry loop retries, naming the endpoint, the ``gs://`` object and the reason; for the next
  :data:`UNREACHABLE_AFTER_S` every request to that endpoint fails the same way without being sent (a job's
  clean-up does not wait the outage out again; a long-lived worker tries again afterwards).  One answer, of
  any status, ends the streak.

So a job fails :data:`UNREACHABLE_AFTER_S` after its storage went away, whether connections are refused, not
accepted, accepted and never answered, or its name gets no answer from the DNS (at most :data:`ATTEMPT_FLOOR_S` later;
the error's "no answer for N s" is the time measured since the first request that got none).  Measured before
the budget bounded each attempt: 40 s for a server that accepts and never answers (two :data:`READ_TIMEOUT_S`),
and a probe of 12 s patience failed after 14 s (a frozen emulator) to 42 s (a resolver that does not answer,
two servers in resolv.conf) while its line said "no answer within 12 s".  A blip shorter than that (a restarted
proxy, seconds of refusal, a stale pooled connection) costs retries, not the run; and a server that answers,
even with 429 or 503, is reachable and keeps the library's own 120 s budget for a busy service.

Storage that cannot be reached from the start is another matter: no work has been done, so there is nothing to
ride out.  Every job that names a bucket probes it first (:func:`biasboard.pipelines.validation.reachable_bucket`,
within :func:`patience` of 12 s), so it fails in 12 s, not 30 (``plan`` had no probe: 31 to 41 s).

**A host name that does not exist is not a blip.**  When the DNS answers that the endpoint's name does not exist
(``nonexistent.invalid``: NXDOMAIN, or no address) and the endpoint has not answered in this process, the request
fails at once, ``cannot resolve host H: Name or service not known``, and the endpoint is declared unreachable
(no clean-up waits either).  That is a typo in ``STORAGE_EMULATOR_HOST`` or a wrong endpoint, and waiting does
not mend it: the answer is authoritative, and a caching resolver repeats it for the zone's negative TTL
(minutes) anyway; riding it out cost 12 s (30 s for plan) for nothing.  DNS blips exist, and they look
different: a resolver that does not answer, or answers "try again" (``Temporary failure in name resolution``);
those are ridden out like a refused connection.  So is a name that stops resolving after the endpoint has
answered: it resolved an hour ago, so it is no typo.  Why the other numbers, as an operator of a nightly job
sees them:

* 30 s of nothing getting through is an outage, not a blip: GCS's own transient errors clear in seconds,
  and the job is safe to rerun (it resumes from its committed days), so a longer outage belongs to the
  scheduler's retry (Airflow ``retries``, the next cron run), not to a job holding its slot for minutes;
* 20 s of silence on one open request is a dead connection or a frozen server (GCS answers in well under a
  second; a pooled connection dropped by a NAT fails this way once, and the retry on a fresh one works);
* 10 s to connect covers a slow DNS or TLS handshake many times over.

Beam offers no option for these, so :func:`install` wraps Beam's ``gcsio.create_storage_client`` (every
``GcsIO``, and so every ``gs://`` operation of Beam's file system, gets its client there); the bucket
probe of :mod:`biasboard.pipelines.validation` uses the same function.
"""

from __future__ import annotations

import ipaddress
import math
import random
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import requests
from biasboard.schemas.errors import StorageUnreachable
from requests.adapters import BaseAdapter
from urllib3.exceptions import NameResolutionError, NewConnectionError

#: The resend waits' jitter: a generator of its own, so a retry never moves the global ``random`` state a user (or
#: a test's example generator) may have seeded.
_JITTER = random.Random()

#: Time to open a connection to storage (seconds).
CONNECT_TIMEOUT_S = 10.0
#: Time a request may wait for the next byte of its answer (seconds): silence, not the length of a transfer.
READ_TIMEOUT_S = 20.0
#: Time without any answer from an endpoint after which it is declared unreachable (seconds); also how long
#: requests to it then fail at once before one is tried again.
UNREACHABLE_AFTER_S = 30.0
#: The adapter's first and longest wait before sending again a request that never left (seconds).
FIRST_RESEND_S, LONGEST_RESEND_S = 0.5, 4.0
#: The least time an attempt gets when less of the budget is left (seconds): enough for a live server to connect and
#: answer, and all an attempt may run past the budget (an endpoint is declared after at least two attempts).
ATTEMPT_FLOOR_S = 0.5
#: What ``getaddrinfo`` says of a name the DNS answered does not exist (or has no address): not a blip.
_NO_SUCH_NAME = frozenset({socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)})
#: A shorter :data:`UNREACHABLE_AFTER_S` for the requests made within :func:`patience` (None: the constant).
_PATIENCE: ContextVar[float | None] = ContextVar("gcs_patience", default=None)

#: A GCS JSON API path's bucket and object (``/storage/v1/b/B``, ``.../b/B/o``, ``.../b/B/o/O``, the same under
#: ``/download`` and ``/upload``; a copy's source before ``/copyTo/``).  An object's ``/`` may come encoded or not.
_OBJECT_PATH = re.compile(r"/b/(?P<bucket>[^/]+)(?:/o(?:/(?P<object>.+?))?)?(?:/(?:copyTo|rewriteTo)/.*)?$")


@contextmanager
def patience(seconds: float) -> Iterator[None]:
    """Declare storage unreachable after ``seconds`` (not :data:`UNREACHABLE_AFTER_S`) for the requests made in
    the block: a quick check before any work (the bucket probe) should not wait as long as a job in its middle."""
    token = _PATIENCE.set(seconds)
    try:
        yield
    finally:
        _PATIENCE.reset(token)


def unreachable_after() -> float:
    """Seconds without an answer after which an endpoint is declared unreachable, here and now."""
    shorter = _PATIENCE.get()
    return UNREACHABLE_AFTER_S if shorter is None else min(shorter, UNREACHABLE_AFTER_S)


@dataclass
class _Streak:
    """An endpoint's run of failed requests: since when (the start of the first), how many, the last one's end
    and reason, until when requests to it fail at once, and whether that was waited out (False: a name that does
    not exist, declared at once)."""

    since: float
    failures: int = 0
    last: float = 0.0
    reason: str = ""
    down_until: float = 0.0
    waited: bool = True

    def seconds(self, now: float) -> float | None:
        """How long the endpoint has not answered, as its error says it (None: nothing was waited out)."""
        return now - self.since if self.waited else None


class Breaker:
    """Which endpoints have given no answer for :data:`UNREACHABLE_AFTER_S` (one per process, shared by its clients),
    and which have ever answered."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._streaks: dict[str, _Streak] = {}
        self._answered: set[str] = set()

    def check(self, endpoint: str, path: str) -> None:
        """Fail at once for an endpoint declared unreachable less than :data:`UNREACHABLE_AFTER_S` ago."""
        with self._lock:
            now, streak = time.monotonic(), self._streaks.get(endpoint)
            if streak is None or now >= streak.down_until:
                return
            error = StorageUnreachable(endpoint, path, streak.reason, streak.seconds(now))
        raise error

    def failed(self, endpoint: str, path: str, started: float, err: Exception, reason: str) -> None:
        """Count a request that started at ``started`` and got no answer (``reason``); raise once the endpoint is
        unreachable, with ``err`` as the cause."""
        now = time.monotonic()
        with self._lock:
            streak = self._streak_at(endpoint, started)
            streak.failures += 1
            streak.last, streak.reason = now, reason
            if streak.failures < 2 or now - streak.since < unreachable_after():
                return
            error = self._declare(endpoint, path, streak, now)
        raise error from err

    def failed_for_good(self, endpoint: str, path: str, started: float, err: Exception, reason: str) -> None:
        """Declare the endpoint unreachable at once: a request that started at ``started`` failed in a way waiting
        cannot mend (its host name does not exist); raise, with ``err`` as the cause."""
        with self._lock:
            streak = self._streak_at(endpoint, started)
            streak.waited = streak.failures > 0  # earlier failures of the streak were waited out: say how long
            streak.failures, streak.reason = streak.failures + 1, reason
            error = self._declare(endpoint, path, streak, time.monotonic())
        raise error from err

    def _streak_at(self, endpoint: str, started: float) -> _Streak:
        """The endpoint's streak a request that started at ``started`` and failed belongs to (a new one when there is
        none, or only an old one nobody ended).  Under the lock."""
        streak = self._streaks.get(endpoint)
        if streak is None or started - streak.last > unreachable_after():
            streak = self._streaks[endpoint] = _Streak(since=started)
        return streak

    def _declare(self, endpoint: str, path: str, streak: _Streak, now: float) -> StorageUnreachable:
        """Mark the endpoint unreachable for :data:`UNREACHABLE_AFTER_S`; the error saying so.  Under the lock."""
        streak.down_until = now + UNREACHABLE_AFTER_S
        return StorageUnreachable(endpoint, path, streak.reason, streak.seconds(now))

    def time_left(self, endpoint: str) -> float:
        """Seconds until the endpoint would be declared unreachable: what is left of a failing one's budget (0 when
        due), all of it for one that is not failing."""
        with self._lock:
            now, streak = time.monotonic(), self._streaks.get(endpoint)
            if streak is None or (now - streak.last > unreachable_after() and now >= streak.down_until):
                return unreachable_after()
            return max(0.0, streak.since + unreachable_after() - now)

    def unproven(self, endpoint: str) -> bool:
        """Has the endpoint never answered in this process, or is it failing now?  Then its host name may be what
        fails, and is looked up within the attempt's bound first (:func:`resolve`)."""
        with self._lock:
            return endpoint not in self._answered or endpoint in self._streaks

    def has_answered(self, endpoint: str) -> bool:
        """Has the endpoint ever answered in this process?"""
        with self._lock:
            return endpoint in self._answered

    def answered(self, endpoint: str) -> None:
        """Any answer (whatever its status) ends the endpoint's streak."""
        with self._lock:
            self._streaks.pop(endpoint, None)
            self._answered.add(endpoint)


#: The process's breaker: every bounded client shares it, so one outage is declared once.
BREAKER = Breaker()


class BoundedAdapter(BaseAdapter):
    """A requests transport adapter around the session's own: bounded timeouts, and the :data:`BREAKER`.

    ``lookup`` is how :func:`resolve` looks a host name up (``socket.getaddrinfo``): a stand-in transport brings
    its own, as the name lookup is part of the network it stands in for.
    """

    def __init__(self, inner: BaseAdapter) -> None:
        super().__init__()
        self.inner = inner
        self.lookup: Callable[..., object] = socket.getaddrinfo

    def send(
        self,
        request: requests.PreparedRequest,
        stream: bool = False,
        timeout: float | tuple[float | None, float | None] | None = None,
        verify: bool | str = True,
        cert: str | tuple[str, str] | None = None,
        proxies: dict[str, str] | None = None,
    ) -> requests.Response:
        endpoint, path = where(request.url or "")
        wait = FIRST_RESEND_S
        while True:
            BREAKER.check(endpoint, path)
            left, started = BREAKER.time_left(endpoint), time.monotonic()
            bounded = bounded_timeout(timeout, within=left)
            try:
                if BREAKER.unproven(endpoint):
                    resolve(urlsplit(request.url or "").hostname or "", within=bounded[0], lookup=self.lookup)
                    bounded = bounded_timeout(timeout, within=left - (time.monotonic() - started))
                response = self.inner.send(
                    request, stream=stream, timeout=bounded, verify=verify, cert=cert, proxies=proxies
                )
            except (requests.ConnectionError, requests.Timeout) as err:
                reason = failure_reason(err, bounded)
                if isinstance(err, Unresolved) and err.no_such_name and not BREAKER.has_answered(endpoint):
                    BREAKER.failed_for_good(endpoint, path, started, err, reason)  # a typo is not a blip: raises
                BREAKER.failed(endpoint, path, started, err, reason)  # raises when unreachable
                if not never_sent(err):
                    raise  # it may have reached the server: the library's retry policy decides
                time.sleep(min(_JITTER.uniform(wait / 2, wait), BREAKER.time_left(endpoint)))
                wait = min(2 * wait, LONGEST_RESEND_S)
                continue
            BREAKER.answered(endpoint)
            return response

    def close(self) -> None:
        self.inner.close()


class Unresolved(requests.ConnectionError):
    """The endpoint's host name did not resolve: ``no_such_name`` when the DNS answered that it does not exist,
    else it gave no answer (in time, or said to try again)."""

    def __init__(self, host: str, why: str, no_such_name: bool) -> None:
        super().__init__(f"cannot resolve host {host}: {why}")
        self.host, self.no_such_name = host, no_such_name


def resolve(host: str, within: float, lookup: Callable[..., object] = socket.getaddrinfo) -> None:
    """Look ``host`` up, waiting at most ``within`` seconds; raise :class:`Unresolved` when it does not resolve.

    The connection's own lookup is not bounded by any timeout: a resolver that does not answer holds it for its own
    retries (glibc: 5 s per server, twice), longer than a probe's whole patience.  So the adapter looks an unproven
    endpoint's host up here first, in a thread it leaves behind when the lookup outlasts ``within`` (a daemon: it
    never holds the process's exit).  An address (``127.0.0.1``) needs no lookup.
    """
    if not host or _is_address(host):
        return
    outcome: list[OSError | None] = []
    done = threading.Event()

    def look_up() -> None:
        try:
            lookup(host, None, type=socket.SOCK_STREAM)
            outcome.append(None)
        except OSError as err:
            outcome.append(err)
        done.set()

    threading.Thread(target=look_up, name=f"resolve {host}", daemon=True).start()
    if not done.wait(within):
        raise Unresolved(host, f"no answer from DNS within {within:.3g} s", no_such_name=False)
    err = outcome[0]
    if err is not None:
        missing = isinstance(err, socket.gaierror) and err.errno in _NO_SUCH_NAME
        raise Unresolved(host, err.strerror or str(err), no_such_name=missing) from err


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def never_sent(err: Exception) -> bool:
    """Did the request fail before any of it left (refused, no connection in time, its host not resolved)?  Then
    nothing reached the server, and sending it again is safe whatever it does."""
    if isinstance(err, (requests.ConnectTimeout, Unresolved)):
        return True
    reason = getattr(err.args[0], "reason", None) if err.args else None  # requests wraps urllib3's MaxRetryError
    return isinstance(reason, NewConnectionError)


def bounded_timeout(
    timeout: float | tuple[float | None, float | None] | None, within: float = math.inf
) -> tuple[float, float]:
    """``timeout`` (None, seconds, or (connect, read)) with each part at most :data:`CONNECT_TIMEOUT_S` and
    :data:`READ_TIMEOUT_S`, and at most ``within`` (what is left of the budget; :data:`ATTEMPT_FLOOR_S` at least):
    an attempt begun late in an outage does not run a full timeout past the budget, and the error's time with it."""
    connect, read = timeout if isinstance(timeout, tuple) else (timeout, timeout)
    left = max(within, ATTEMPT_FLOOR_S)
    return (min(_at_most(connect, CONNECT_TIMEOUT_S), left), min(_at_most(read, READ_TIMEOUT_S), left))


def _at_most(given: float | None, cap: float) -> float:
    return cap if given is None else min(float(given), cap)


def bound_session(session: requests.Session) -> None:
    """Put :class:`BoundedAdapter` around each transport adapter of ``session`` (once)."""
    for prefix, adapter in list(session.adapters.items()):
        if not isinstance(adapter, BoundedAdapter):
            session.mount(prefix, BoundedAdapter(adapter))


_install_lock = threading.Lock()
_installed = False


def install() -> None:
    """Bound every GCS client Beam makes in this process from now on (idempotent).

    Wraps ``apache_beam.io.gcp.gcsio.create_storage_client``, which each ``GcsIO`` calls for its client:
    the client it returns is the same, its HTTP session's adapters wrapped by :func:`bound_session`.
    """
    global _installed
    from apache_beam.io.gcp import gcsio

    with _install_lock:
        if _installed:
            return
        original = gcsio.create_storage_client

        def create_bounded_client(*args: Any, **kwargs: Any):
            client = original(*args, **kwargs)
            bound_session(client._http)  # google-cloud-core's session of the client (an AuthorizedSession)
            return client

        gcsio.create_storage_client = create_bounded_client
        _installed = True


def where(url: str) -> tuple[str, str]:
    """A request URL's endpoint (``scheme://host:port``) and the ``gs://`` path it is about (else the URL path)."""
    parts = urlsplit(url)
    endpoint = f"{parts.scheme}://{parts.netloc}"
    found = _OBJECT_PATH.search(parts.path)
    if found is None:
        return endpoint, parts.path or "/"
    query = parse_qs(parts.query)
    name = found.group("object") or next(iter(query.get("name") or query.get("prefix") or []), "")
    return endpoint, f"gs://{unquote(found.group('bucket'))}/{unquote(name)}"


def failure_reason(err: BaseException, timeout: tuple[float, float]) -> str:
    """Why a request got no answer, in a few words: the timeout that passed (``timeout``: the (connect, read)
    pair it was sent with), the host name that did not resolve (``cannot resolve host H: ...``), or the OS reason
    (``Connection refused``), else the first line of the error."""
    if isinstance(err, requests.ConnectTimeout):
        return f"no connection within {timeout[0]:.3g} s"
    if isinstance(err, requests.ReadTimeout):
        return f"no answer within {timeout[1]:.3g} s"
    if isinstance(err, Unresolved):
        return str(err)
    unresolved = getattr(err.args[0], "reason", None) if err.args else None  # the connection's own lookup failed
    if isinstance(unresolved, NameResolutionError):
        return f"cannot resolve host {unresolved._host}: {first_line(unresolved._reason)}"
    return first_line(err)


def first_line(err: BaseException) -> str:
    """The gist of a client error: the OS reason when there is one (``Connection refused``), else line one."""
    text = str(err).strip() or type(err).__name__
    reason = re.search(r"\[Errno -?\d+\] ([^\"')\]]+)", text)
    return reason.group(1).strip() if reason else text.splitlines()[0][:300]
