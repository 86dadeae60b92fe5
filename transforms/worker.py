"""A Beam worker subprocess: what it prints of a user's error (nothing but what the launcher says), and
its GCS requests bounded as the launcher's are (:func:`prepare_worker_process`).

With ``--direct_running_mode=multi_processing`` (and other runners whose SDK workers are child
processes sharing the launcher's terminal) the worker prints every failed bundle's traceback
straight to its stderr (``sdk_worker._execute``: ``print(traceback, file=sys.stderr)``) before
returning the error to the runner.  For a :class:`~biasboard.schemas.errors.BiasboardError` (bad
input, a folder that is not what the job expects) the launcher prints the one-line message
itself (``pipelines/cli.py``), so that traceback only buries it.  :func:`quiet_user_error_tracebacks`
wraps a worker process's ``sys.stderr`` so such a traceback is dropped; every other write,
including the traceback of a bug, passes through.  The same traceback still reaches the runner
(as the bundle's error and as a relayed log record), so nothing is lost where logs are kept.
"""

from __future__ import annotations

import os
import sys
from typing import Any, TextIO

from biasboard.schemas.errors import recover_user_error

#: Set by Beam for an SDK worker process it starts (subprocess, process and docker environments).
WORKER_ENV = "CONTROL_API_SERVICE_DESCRIPTOR"
_TRACEBACK = "Traceback (most recent call last)"


class UserErrorTracebackFilter:
    """A text stream that drops a write holding a whole traceback of a user error (and the newline after it)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._dropped = False

    def write(self, text: str) -> int:
        if text.startswith(_TRACEBACK) and recover_user_error(RuntimeError(text)) is not None:
            self._dropped = True
            return len(text)
        if self._dropped and text == "\n":  # print()'s end after the dropped traceback
            self._dropped = False
            return len(text)
        self._dropped = False
        return self.stream.write(text)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, encoding ...: the wrapped stream's
        return getattr(self.stream, name)


def prepare_worker_process() -> None:
    """In a Beam SDK worker process: quiet user errors' tracebacks, and bound its GCS requests as every job
    bounds the launcher's (:mod:`biasboard.transforms.gcs_requests`; the worker's reads and writes of the state
    would otherwise wait out Google's two-minute retries).  Nothing in any other process."""
    if os.environ.get(WORKER_ENV):
        from biasboard.transforms import gcs_requests

        quiet_user_error_tracebacks()
        gcs_requests.install()


def quiet_user_error_tracebacks() -> None:
    """In a Beam SDK worker process, wrap ``sys.stderr`` (once) in :class:`UserErrorTracebackFilter`."""
    if os.environ.get(WORKER_ENV) and not isinstance(sys.stderr, UserErrorTracebackFilter):
        sys.stderr = UserErrorTracebackFilter(sys.stderr)
