"""A real GCS emulator on loopback for the tests (the ``gcp-storage-emulator`` package).

Started as a separate process on a free port, in memory, and stopped afterwards.
Clients find it through ``STORAGE_EMULATOR_HOST``, the variable every Google
storage client library honours; Beam's ``gs://`` file system goes through the
same google-cloud-storage client, so real Beam I/O runs against it unchanged.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

VENV_BIN = Path(sys.executable).parent


def free_port() -> int:
    """A TCP port nobody listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen | None = None, timeout: float = 30.0) -> None:
    """Block until something accepts connections on ``port`` (or fail with the process's output)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited early with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listening on port {port} after {timeout} s")


class EmulatorProcess:
    """The emulator as a process a test can kill and start again, or freeze and thaw, on one port.

    ``folder``: keep the objects on disk there (``STORAGE_BASE``), so they outlive a kill and a test can
    check what a job left; None keeps them in memory.  :meth:`kill` is storage gone (connections refused),
    :meth:`freeze` (SIGSTOP) a server that accepts connections and never answers.
    """

    def __init__(self, bucket: str, log_path: Path, folder: Path | None = None) -> None:
        self.bucket, self.log_path, self.folder = bucket, log_path, folder
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def host(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        cmd = [str(VENV_BIN / "gcp-storage-emulator"), "start", "--host", "127.0.0.1", "--port", str(self.port)]
        cmd += ["--default-bucket", self.bucket] + (["--in-memory"] if self.folder is None else [])
        env = dict(os.environ, STORAGE_BASE=str(self.folder)) if self.folder is not None else None
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        wait_for_port(self.port, self.proc)

    def kill(self) -> None:
        """Gone at once (SIGKILL): its port refuses connections until :meth:`start`."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def freeze(self) -> None:
        """SIGSTOP: connections are still accepted (by the kernel) and never answered, until :meth:`thaw`."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is None:
            return
        self.thaw()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


@contextlib.contextmanager
def gcs_emulator(bucket: str, log_path: Path) -> Iterator[str]:
    """Run the emulator (in memory) with ``bucket`` created; yields its ``http://host:port``."""
    emulator = EmulatorProcess(bucket, log_path)
    emulator.start()
    try:
        yield emulator.host
    finally:
        emulator.stop()


@contextlib.contextmanager
def emulated_gcs(bucket: str, log_path: Path) -> Iterator[str]:
    """The emulator with ``STORAGE_EMULATOR_HOST`` set in this process; yields ``gs://bucket``."""
    with gcs_emulator(bucket, log_path) as host, using_emulator(host, bucket) as root:
        yield root


@contextlib.contextmanager
def using_emulator(host: str, bucket: str) -> Iterator[str]:
    """``STORAGE_EMULATOR_HOST`` set to ``host`` in this process; yields ``gs://bucket``.

    Beam's credential cache is seeded anonymous through the project's own
    :func:`~biasboard.transforms.storage.configure_gcs` (what every job
    does at start) and restored afterwards, so nothing leaks into other tests.
    """
    from apache_beam.internal.gcp import auth
    from biasboard.transforms import storage

    saved_env = os.environ.get(storage.EMULATOR_ENV)
    saved_cache = (auth._Credentials._credentials_init, auth._Credentials._credentials)
    os.environ[storage.EMULATOR_ENV] = host
    try:
        assert storage.configure_gcs()  # anonymous at once: no 20 s credential lookup
        yield f"gs://{bucket}"
    finally:
        auth._Credentials._credentials_init, auth._Credentials._credentials = saved_cache
        if saved_env is None:
            os.environ.pop(storage.EMULATOR_ENV, None)
        else:
            os.environ[storage.EMULATOR_ENV] = saved_env


def emulator_env(host: str) -> dict[str, str]:
    """Environment for child processes that must talk to the emulator."""
    env = dict(os.environ)
    env.update({"STORAGE_EMULATOR_HOST": host, "NO_GCE_CHECK": "true", "GOOGLE_CLOUD_PROJECT": "test-project"})
    return env
