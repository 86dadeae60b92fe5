"""Bounded GCS requests: storage that stops answering ends a job in about half a minute, saying so in one line.

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
  :data:`READ_TIMEOUT_S` (silence, not transfer time: a slow download of a big file is not cut);
* **retries a request that never left** (the connection was refused or not made in time: nothing reached
  the server, so sending it again is safe for any request) itself, after 0.5, 1, 2, then every 4 s
  (jittered), until :data:`UNREACHABLE_AFTER_S` have passed without an answer; a request that may have
  reached the server (no answer in time, a connection dropped mid-way) goes back to the library, whose
  retry policy knows which requests are safe to repeat;
* **declares the endpoint unreachable** once its requests have got no answer for :data:`UNREACHABLE_AFTER_S`
  (at least two attempts): the failing request raises :class:`~biasboard.schemas.errors.StorageUnreachable`,
  which no retry loop retries, naming the endpoint, the ``gs://`` object and the reason; for the next
  :data:`UNREACHABLE_AFTER_S` every request to that endpoint fails the same way without being sent (a job's
  clean-up does not wait the outage out again; a long-lived worker tries again afterwards).  One answer, of
  any status, ends the streak.

So a job fails about :data:`UNREACHABLE_AFTER_S` after its storage went away: 30 s when connections are
refused (or not accepted: plus at most one :data:`CONNECT_TIMEOUT_S`), about 40 s when the server accepts
and never answers (two :data:`READ_TIMEOUT_S` and the library's first back-off).  A blip shorter than that
(a restarted proxy, seconds of refusal, a stale pooled connection) costs retries, not the run; and a server
that answers, even with 429 or 503, is reachable and keeps the library's own 120 s budget for a busy
service.  Why these numbers, as an operator of a nightly job sees them:

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

import random
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import requests
from biasboard.schemas.errors import StorageUnreachable
from requests.adapters import BaseAdapter
from urllib3.exceptions import NewConnectionError

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
    and reason, and until when requests to it fail at once."""

    since: float
    failures: int = 0
    last: float = 0.0
    reason: str = ""
    down_until: float = 0.0


class Breaker:
    """Which endpoints have given no answer for :data:`UNREACHABLE_AFTER_S` (one per process, shared by its clients)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._streaks: dict[str, _Streak] = {}

    def check(self, endpoint: str, path: str) -> None:
        """Fail at once for an endpoint declared unreachable less than :data:`UNREACHABLE_AFTER_S` ago."""
        with self._lock:
            streak = self._streaks.get(endpoint)
            if streak is None or time.monotonic() >= streak.down_until:
                return
            error = StorageUnreachable(endpoint, path, streak.reason, time.monotonic() - streak.since)
        raise error

    def failed(self, endpoint: str, path: str, started: float, err: Exception, reason: str) -> None:
        """Count a request that started at ``started`` and got no answer (``reason``); raise once the endpoint is
        unreachable, with ``err`` as the cause."""
        now = time.monotonic()
        with self._lock:
            streak = self._streaks.get(endpoint)
            if streak is None or started - streak.last > unreachable_after():  # none, or an old one nobody ended
                streak = self._streaks[endpoint] = _Streak(since=started)
            streak.failures += 1
            streak.last, streak.reason = now, reason
            if streak.failures < 2 or now - streak.since < unreachable_after():
                return
            streak.down_until = now + UNREACHABLE_AFTER_S
            error = StorageUnreachable(endpoint, path, streak.reason, now - streak.since)
        raise error from err

    def time_left(self, endpoint: str) -> float:
        """Seconds until a failing endpoint would be declared unreachable (0 when due, or not failing)."""
        with self._lock:
            streak = self._streaks.get(endpoint)
            return 0.0 if streak is None else max(0.0, streak.since + unreachable_after() - time.monotonic())

    def answered(self, endpoint: str) -> None:
        """Any answer (whatever its status) ends the endpoint's streak."""
        with self._lock:
            self._streaks.pop(endpoint, None)


#: The process's breaker: every bounded client shares it, so one outage is declared once.
BREAKER = Breaker()


class BoundedAdapter(BaseAdapter):
    """A requests transport adapter around the session's own: bounded timeouts, and the :data:`BREAKER`."""

    def __init__(self, inner: BaseAdapter) -> None:
        super().__init__()
        self.inner = inner

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
        bounded, wait = bounded_timeout(timeout), FIRST_RESEND_S
        while True:
            BREAKER.check(endpoint, path)
            started = time.monotonic()
            try:
                response = self.inner.send(
                    request, stream=stream, timeout=bounded, verify=verify, cert=cert, proxies=proxies
                )
            except (requests.ConnectionError, requests.Timeout) as err:
                BREAKER.failed(endpoint, path, started, err, failure_reason(err, bounded))  # raises when unreachable
                if not never_sent(err):
                    raise  # it may have reached the server: the library's retry policy decides
                time.sleep(min(_JITTER.uniform(wait / 2, wait), BREAKER.time_left(endpoint)))
                wait = min(2 * wait, LONGEST_RESEND_S)
                continue
            BREAKER.answered(endpoint)
            return response

    def close(self) -> None:
        self.inner.close()


def never_sent(err: Exception) -> bool:
    """Did the request fail before any of it left (refused, or no connection in time)?  Then nothing reached
    the server, and sending it again is safe whatever it does."""
    if isinstance(err, requests.ConnectTimeout):
        return True
    reason = getattr(err.args[0], "reason", None) if err.args else None  # requests wraps urllib3's MaxRetryError
    return isinstance(reason, NewConnectionError)


def bounded_timeout(timeout: float | tuple[float | None, float | None] | None) -> tuple[float, float]:
    """``timeout`` (None, seconds, or (connect, read)) with each part at most :data:`CONNECT_TIMEOUT_S` and
    :data:`READ_TIMEOUT_S`."""
    connect, read = timeout if isinstance(timeout, tuple) else (timeout, timeout)
    return (_at_most(connect, CONNECT_TIMEOUT_S), _at_most(read, READ_TIMEOUT_S))


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
    pair it was sent with), or the OS reason (``Connection refused``), else the first line of the error."""
    if isinstance(err, requests.ConnectTimeout):
        return f"no connection within {timeout[0]:g} s"
    if isinstance(err, requests.ReadTimeout):
        return f"no answer within {timeout[1]:g} s"
    return first_line(err)


def first_line(err: BaseException) -> str:
    """The gist of a client error: the OS reason when there is one (``Connection refused``), else line one."""
    text = str(err).strip() or type(err).__name__
    reason = re.search(r"\[Errno -?\d+\] ([^\"')\]]+)", text)
    return reason.group(1).strip() if reason else text.splitlines()[0][:300]
