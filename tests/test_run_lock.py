"""Two refreshes on one state at once: the second says in one line that the first is running, and does nothing.

Before the lock the two raced each other's renames and the loser ended in a raw ``FileNotFoundError``
traceback (locally: ``st/audit.next -> st/audit``) or a Beam ``Rename operation failed ... 404`` (on a
bucket).  The lock is the kernel's locally (released when its holder dies, SIGKILL included: the rerun of
a killed run is never blocked, tests/test_kill_rerun.py) and a renewed object on a bucket.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from biasboard.pipelines import cli
from biasboard.schemas.errors import StateError
from biasboard.simulate import SimulationConfig, write_simulation
from biasboard.transforms import publish, run_lock, storage
from gcs_emulator import emulated_gcs

SIM = SimulationConfig(battles=3000, models=6, judges=3, days=3, seed=5)
BUCKET = "biasboard-lock-test"


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> Path:
    return write_simulation(SIM, tmp_path_factory.mktemp("sim"))


def _command(sim: Path, state: str, out: str) -> list[str]:
    glob = str(sim / "battles" / "day=*" / "*.parquet")
    return [sys.executable, "-m", "biasboard.pipelines.cli", "refresh", "--no-audit", "--input", glob,
            "--state", state, "--out", out]  # fmt: skip


def _one_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr[-3000:]
    errors = [line for line in stderr.splitlines() if line.startswith("biasboard refresh: error:")]
    assert len(errors) == 1, stderr[-3000:]
    return errors[0]


@pytest.mark.slow
def test_a_refresh_started_while_another_runs_on_the_state_says_so_and_leaves_it_alone(sim, tmp_path):
    """The first refresh is held (SIGSTOP) while aggregating; a second on the same state and output exits 2 with
    one line naming the first's pid; the first then finishes and publishes as if alone."""
    state, out = str(tmp_path / "state"), str(tmp_path / "out")
    first = subprocess.Popen(_command(sim, state, out), stderr=subprocess.PIPE, text=True)
    try:
        for line in first.stderr:
            if "ingest:" in line:  # its pipeline is writing the state
                first.send_signal(signal.SIGSTOP)
                break
        second = subprocess.run(_command(sim, state, out), capture_output=True, text=True, timeout=120)
        first.send_signal(signal.SIGCONT)
        _, rest = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
    assert second.returncode == 2
    line = _one_error_line(second.stderr)
    assert "another refresh appears to be running" in line and f"pid {first.pid} on host" in line, line
    assert "rerun once it has finished" in line
    assert first.returncode == 0, rest[-3000:]
    assert publish.latest_snapshot_id(out) is not None
    assert not [p for p in (tmp_path / "state", tmp_path / "out") if (p / run_lock.LOCK_NAME).exists()]


def test_a_local_lock_refuses_a_second_holder_and_a_killed_holder_leaves_none(tmp_path):
    folder = str(tmp_path / "state")
    held_here = pytest.raises(StateError, match=f"pid {os.getpid()} on host")
    with run_lock.folder_lock(folder), held_here, run_lock.folder_lock(folder):
        pass
    assert not (tmp_path / "state" / run_lock.LOCK_NAME).exists()  # released and removed
    # the holder forks a child (as bootstrap workers are) that outlives it, then is killed
    hold_fork_and_die = (
        "import os, signal, sys, time; from biasboard.transforms import run_lock\n"
        "with run_lock.folder_lock(sys.argv[1]):\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(60); os._exit(0)\n"
        "    print(flush=True); os.kill(os.getpid(), signal.SIGKILL)"
    )
    proc = subprocess.Popen([sys.executable, "-c", hold_fork_and_die, folder], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip
    try:
        proc.stdout.readline()
        assert proc.wait(timeout=60) == -signal.SIGKILL
        assert (tmp_path / "state" / run_lock.LOCK_NAME).exists()  # left by the dead run, but no longer locked
        with run_lock.folder_lock(folder):  # while its child still runs
            pass
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the orphaned child
        proc.stdout.close()


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    with emulated_gcs(BUCKET, tmp_path_factory.mktemp("gcs") / "emulator.log") as root:
        yield root


def test_a_refresh_on_a_locked_bucket_state_says_so_in_one_line(emulator, sim, capsys):
    state, out = f"{emulator}/locked/state", f"{emulator}/locked/site"
    with run_lock.folder_lock(state):
        assert storage.exists(f"{state}/{run_lock.LOCK_NAME}")
        assert cli.main(_command(sim, state, out)[3:]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert f"pid {os.getpid()} on host" in line and f"delete {state}/{run_lock.LOCK_NAME}" in line, line
    assert not storage.exists(f"{state}/{run_lock.LOCK_NAME}")  # released
    assert storage.list_files(f"{state}/manifests") == []  # the refused run wrote nothing


def test_a_bucket_lock_of_a_run_that_died_on_this_host_is_taken_over_at_once(emulator):
    folder = f"{emulator}/dead/state"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    holder = run_lock.Holder(run_lock.socket.gethostname(), int(dead.stdout), "2026-01-01T00:00:00+00:00")
    storage.write_bytes(f"{folder}/{run_lock.LOCK_NAME}", holder.to_bytes())
    with run_lock.folder_lock(folder):
        mine = json.loads(storage.read_text(f"{folder}/{run_lock.LOCK_NAME}"))
        assert mine["pid"] == os.getpid()
    alive_elsewhere = run_lock.Holder("another-host", os.getpid(), "2026-01-01T00:00:00+00:00")
    storage.write_bytes(f"{folder}/{run_lock.LOCK_NAME}", alive_elsewhere.to_bytes())
    with pytest.raises(StateError, match=r"pid \d+ on host another-host"), run_lock.folder_lock(folder):
        pass


def test_a_bucket_lock_is_renewed_while_held_and_taken_over_once_not_renewed(emulator, monkeypatch):
    folder, lock = f"{emulator}/renewed/state", f"{emulator}/renewed/state/{run_lock.LOCK_NAME}"
    monkeypatch.setattr(run_lock, "RENEW_EVERY_S", 0.2)
    with run_lock.folder_lock(folder):
        first = json.loads(storage.read_text(lock))["renewed"]
        time.sleep(1.0)
        assert json.loads(storage.read_text(lock))["renewed"] > first
    elsewhere = run_lock.Holder("another-host", 1, "2026-01-01T00:00:00+00:00")
    storage.write_bytes(lock, elsewhere.to_bytes())
    monkeypatch.setattr(run_lock, "STALE_AFTER_S", 0.5)  # instead of waiting 10 minutes
    time.sleep(1.0)
    with run_lock.folder_lock(folder):
        assert json.loads(storage.read_text(lock))["pid"] == os.getpid()
    assert not storage.exists(lock)


def test_a_bucket_lock_naming_a_reused_pid_is_taken_over_at_once_and_a_live_holders_is_not(emulator):
    """A holder that died and whose pid now names another process (the record is the dead process's own, its pid
    set to a live process's: the reuse) looked alive for up to 10 minutes; its start time tells them apart."""
    folder, lock = f"{emulator}/reused/state", f"{emulator}/reused/state/{run_lock.LOCK_NAME}"
    record = "from biasboard.transforms import run_lock; print(run_lock.Holder.me().to_bytes().decode(), flush=True)"
    dead = json.loads(subprocess.run([sys.executable, "-c", record], capture_output=True, text=True).stdout)
    live = subprocess.Popen([sys.executable, "-c", record + "; import time; time.sleep(60)"],
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        alive = json.loads(live.stdout.readline())
        storage.write_bytes(lock, json.dumps(alive).encode())  # the live holder's own lock: refused
        with pytest.raises(StateError, match=f"pid {live.pid} on host"), run_lock.folder_lock(folder):
            pass
        storage.write_bytes(lock, json.dumps({**dead, "pid": live.pid}).encode())  # its pid reused by the live one
        with run_lock.folder_lock(folder):
            assert json.loads(storage.read_text(lock))["pid"] == os.getpid()
        storage.write_bytes(lock, json.dumps({**alive, "boot": "a boot before"}).encode())  # the host rebooted since
        with run_lock.folder_lock(folder):
            assert json.loads(storage.read_text(lock))["pid"] == os.getpid()
    finally:
        live.kill()
        live.wait()
        live.stdout.close()
    assert not storage.exists(lock)


def test_without_proc_the_pid_alone_tells_a_dead_holder(emulator, monkeypatch):
    """Where /proc is absent nothing but the pid is recorded or checked: a freed pid is still taken over at once, a
    live one refused (a reused pid then blocks for up to 10 minutes, as before)."""
    folder, lock = f"{emulator}/no-proc/state", f"{emulator}/no-proc/state/{run_lock.LOCK_NAME}"
    monkeypatch.setattr(run_lock, "PROC", "/nonexistent-proc")
    me = run_lock.Holder.me()
    assert (me.boot, me.ticks) == (None, None)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    storage.write_bytes(lock, run_lock.Holder(me.host, int(dead.stdout), me.started).to_bytes())
    with run_lock.folder_lock(folder):
        assert json.loads(storage.read_text(lock))["pid"] == os.getpid()
    storage.write_bytes(lock, run_lock.Holder(me.host, os.getppid(), me.started, boot="b", ticks=1).to_bytes())
    with pytest.raises(StateError, match=f"pid {os.getppid()} on host"), run_lock.folder_lock(folder):
        pass


#: A refresh's hold on a folder's lock, alone: it configures GCS as every job does first (on the emulator, no
#: ~20 s credential lookup before it takes the lock), then holds the lock until killed.
HOLD = (
    "import sys, time; from biasboard.transforms import run_lock, storage\n"
    "storage.configure_gcs()\n"
    "with run_lock.folder_lock(sys.argv[1], 'refresh'):\n"
    "    print(flush=True); time.sleep(120)"
)


def test_a_bucket_lock_held_in_another_pid_namespace_of_this_host_is_refused(emulator):
    """Containers that share a host name (host networking) but not a pid namespace: the holder's pid is its own
    namespace's (1 here), which names another process in ours, so its live lock was taken for a reused pid's and
    taken over, and two jobs ran at once.  A real holder in a new pid namespace (``unshare``), then records: a pid
    free here refuses too when its namespace differs, and is taken over when it is ours."""
    folder, lock = f"{emulator}/pidns/state", f"{emulator}/pidns/state/{run_lock.LOCK_NAME}"
    if shutil.which("unshare") is None:
        pytest.skip("no unshare (util-linux) on this machine")
    command = ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", HOLD, folder]
    holder = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if holder.stdout.readline() != "\n":  # no new namespace to be had here (unprivileged): said, not hidden
            pytest.skip(f"unshare --pid could not run: {holder.communicate()[1].strip()[-300:]}")
        recorded = json.loads(storage.read_text(lock))
        assert recorded["pid"] == 1 and recorded["pidns"] != run_lock.pid_namespace(), recorded
        namespace = re.escape(f"pid 1 of pid namespace {recorded['pidns']} on host")
        with pytest.raises(StateError, match=namespace), run_lock.folder_lock(folder):
            pass
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
        holder.stderr.close()
    me = run_lock.Holder.me()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    elsewhere = run_lock.Holder(me.host, int(dead.stdout), me.started, boot=me.boot, pidns="pid:[1]")
    storage.write_bytes(lock, elsewhere.to_bytes())
    with (
        pytest.raises(StateError, match=rf"pid {dead.stdout.strip()} of pid namespace pid:\[1\] on host"),
        run_lock.folder_lock(folder),
    ):
        pass
    storage.write_bytes(lock, run_lock.Holder(me.host, int(dead.stdout), me.started, pidns=me.pidns).to_bytes())
    with run_lock.folder_lock(folder):
        assert json.loads(storage.read_text(lock))["pid"] == os.getpid()
    assert not storage.exists(lock)


@pytest.mark.parametrize("where", ["local", "bucket"])
def test_a_backfill_into_a_state_a_refresh_holds_says_so_in_one_line_and_changes_nothing(
    where, emulator, sim, tmp_path, capsys
):
    """A backfill took no lock: beside a running refresh it rewrote the days and manifests the refresh was reading."""
    state = str(tmp_path / "state") if where == "local" else f"{emulator}/backfill-{where}/state"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, state], stdout=subprocess.PIPE, text=True)
    try:
        holder.stdout.readline()  # it holds the lock
        before = sorted((f.path, f.size) for f in storage.list_files(state))
        glob = str(sim / "battles" / "day=*" / "*.parquet")
        assert cli.main(["backfill", "--input", glob, "--state", state]) == 2
        after = sorted((f.path, f.size) for f in storage.list_files(state))
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
    err = capsys.readouterr().err
    line = err.strip()
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err[-3000:]
    assert line.startswith(f"biasboard backfill: error: {state}: a refresh appears to be running on this folder "
                           f"(pid {holder.pid} on host {run_lock.socket.gethostname()}"), line  # fmt: skip
    assert "rerun once it has finished" in line, line
    assert before == after and [p for p, _ in after] == [storage.join(state, run_lock.LOCK_NAME)]  # nothing written


def test_a_refresh_beside_a_backfill_names_the_backfill(tmp_path):
    folder = str(tmp_path / "state")
    with run_lock.folder_lock(folder, "backfill"), pytest.raises(StateError) as refused, run_lock.folder_lock(folder):
        pass
    assert f"{folder}: a backfill appears to be running on this folder (pid {os.getpid()} on host" in str(refused.value)
