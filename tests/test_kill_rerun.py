"""A refresh killed with SIGKILL mid-run: the last snapshot stays intact, the rerun publishes the same numbers.

The killed refresh is a separate process.  Two kinds of kill: at named points
(``BIASBOARD_FAILPOINT``: the process SIGKILLs itself between aggregation and
fit, and between writing the staging folder and making it visible), and from
outside while the aggregation pipeline is running.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from biasboard.pipelines.refresh import RefreshOptions, refresh
from biasboard.simulate import SimulationConfig, write_simulation
from biasboard.transforms import publish

from tests.conftest import next_second

SIM = SimulationConfig(battles=3000, models=6, judges=3, days=3, bad_rows=0.01, seed=5)
OPTIONS = RefreshOptions(audit=False)
NUMBERS = ("leaderboard.parquet", "bias.parquet", "summary.json")


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> Path:
    return write_simulation(SIM, tmp_path_factory.mktemp("sim"))


@pytest.fixture(scope="module")
def uninterrupted(sim, tmp_path_factory) -> dict[str, bytes]:
    """The numbers of one refresh over all days, never interrupted."""
    root = tmp_path_factory.mktemp("baseline")
    refresh(_glob(sim), str(root / "state"), str(root / "out"), [], OPTIONS)
    snap = Path(publish.resolve_snapshot(str(root / "out")))
    return {name: (snap / name).read_bytes() for name in NUMBERS}


def _glob(root: Path) -> str:
    return str(root / "battles" / "day=*" / "*.parquet")


def _first_two_days_published(sim: Path, tmp_path: Path) -> tuple[Path, str]:
    """Logs with days 1-2 refreshed into a snapshot, then day 3 arriving: the state a nightly run meets."""
    logs = tmp_path / "logs"
    shutil.copytree(sim / "battles", logs / "battles", ignore=shutil.ignore_patterns("day=2024-01-03"))
    first = refresh(_glob(logs), str(tmp_path / "state"), str(tmp_path / "out"), [], OPTIONS)
    shutil.copytree(sim / "battles" / "day=2024-01-03", logs / "battles" / "day=2024-01-03")
    return logs, first.published.snapshot_id


def _command(logs: Path, tmp_path: Path) -> list[str]:
    return [
        sys.executable, "-m", "biasboard.pipelines.cli", "refresh", "--no-audit",
        "--input", _glob(logs), "--state", str(tmp_path / "state"), "--out", str(tmp_path / "out"),
    ]  # fmt: skip


def _assert_intact(out: Path, snapshot_id: str) -> None:
    """LATEST still names the old snapshot, whose every file matches its manifest; nothing else is visible."""
    assert publish.latest_snapshot_id(str(out)) == snapshot_id
    assert publish.list_snapshots(str(out)) == [snapshot_id]
    snap = out / "snapshots" / snapshot_id
    manifest = json.loads((snap / "manifest.json").read_text())
    for name, meta in manifest["files"].items():
        assert hashlib.sha256((snap / name).read_bytes()).hexdigest() == meta["sha256"], name


def _rerun_matches(logs: Path, tmp_path: Path, old_id: str, uninterrupted: dict[str, bytes]) -> None:
    again = refresh(_glob(logs), str(tmp_path / "state"), str(tmp_path / "out"), [], OPTIONS)
    assert again.published.snapshot_id != old_id
    snap = Path(again.published.path)
    for name in NUMBERS:
        assert (snap / name).read_bytes() == uninterrupted[name], f"{name} differs from the uninterrupted run"
    assert not list((tmp_path / "out" / "staging").glob("*")), "the rerun cleans what the killed run left"


@pytest.mark.slow
@pytest.mark.parametrize("point", ["after-aggregate", "publish-staged"])
def test_killed_at_a_failpoint(sim, tmp_path, uninterrupted, point):
    logs, old_id = _first_two_days_published(sim, tmp_path)
    env = {**os.environ, publish.FAILPOINT_ENV: point}
    proc = subprocess.run(_command(logs, tmp_path), env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert f"failpoint {point}" in proc.stderr
    if point == "publish-staged":  # the complete new snapshot sat in staging, invisible
        assert len(list((tmp_path / "out" / "staging").iterdir())) == 1
    _assert_intact(tmp_path / "out", old_id)
    _rerun_matches(logs, tmp_path, old_id, uninterrupted)


@pytest.mark.slow
def test_killed_once_the_snapshot_is_visible_the_rerun_points_latest_at_it(sim, tmp_path, uninterrupted):
    """Killed after the new snapshot became visible and before LATEST moved: the rerun published a second snapshot
    of the same content beside it.  Now it finds the complete one and points LATEST at it: one snapshot per board."""
    logs, old_id = _first_two_days_published(sim, tmp_path)
    env = {**os.environ, publish.FAILPOINT_ENV: "publish-visible"}
    proc = subprocess.run(_command(logs, tmp_path), env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL and "failpoint publish-visible" in proc.stderr, proc.stderr[-2000:]
    out = str(tmp_path / "out")
    assert publish.latest_snapshot_id(out) == old_id  # LATEST still names the complete previous snapshot
    visible = [sid for sid in publish.list_snapshots(out) if sid != old_id]
    assert len(visible) == 1
    next_second()  # a second snapshot of the same content would get an id of its own
    again = refresh(_glob(logs), str(tmp_path / "state"), out, [], OPTIONS)
    assert again.published.snapshot_id == visible[0] == publish.latest_snapshot_id(out)
    assert publish.list_snapshots(out) == [old_id, visible[0]]
    for name in NUMBERS:
        assert (Path(again.published.path) / name).read_bytes() == uninterrupted[name], name


@pytest.mark.slow
def test_killed_from_outside_while_aggregating(sim, tmp_path, uninterrupted):
    logs, old_id = _first_two_days_published(sim, tmp_path)
    proc = subprocess.Popen(_command(logs, tmp_path), stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stderr:  # the ingest logs "ingest: N day(s)" as its pipeline starts
            if "ingest:" in line:
                proc.send_signal(signal.SIGKILL)
                break
        assert proc.wait(timeout=120) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stderr.close()
    _assert_intact(tmp_path / "out", old_id)
    _rerun_matches(logs, tmp_path, old_id, uninterrupted)


@pytest.mark.slow
def test_killed_after_the_audit_keeps_the_stored_audit_and_the_rerun_replaces_it(sim, tmp_path):
    """The documented ``after-audit`` failpoint did not exist.  Killed there, the re-run audit sits in
    STATE/audit.next while STATE/audit is the last run's, stamp and all; the rerun writes the full audit."""
    logs = tmp_path / "logs"
    shutil.copytree(sim / "battles", logs / "battles", ignore=shutil.ignore_patterns("day=2024-01-03"))
    first = refresh(_glob(logs), str(tmp_path / "state"), str(tmp_path / "out"), [])
    stored = {p.name: p.read_bytes() for p in (tmp_path / "state" / "audit").iterdir()}
    shutil.copytree(sim / "battles" / "day=2024-01-03", logs / "battles" / "day=2024-01-03")
    command = [c for c in _command(logs, tmp_path) if c != "--no-audit"]
    env = {**os.environ, publish.FAILPOINT_ENV: "after-audit"}
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL and "failpoint after-audit" in proc.stderr, proc.stderr[-2000:]
    assert {p.name: p.read_bytes() for p in (tmp_path / "state" / "audit").iterdir()} == stored
    assert (tmp_path / "state" / "audit.next" / "audit.json").exists()
    _assert_intact(tmp_path / "out", first.published.snapshot_id)
    again = refresh(_glob(logs), str(tmp_path / "state"), str(tmp_path / "out"), [])
    fresh = refresh(_glob(sim), str(tmp_path / "state2"), str(tmp_path / "out2"), [])
    for name in ("audit.json", "audit_judges.parquet"):
        assert (Path(again.published.path) / name).read_bytes() == (Path(fresh.published.path) / name).read_bytes()
    assert not (tmp_path / "state" / "audit.next").exists()


@pytest.mark.slow
@pytest.mark.parametrize("rerun_drops", [True, False])
def test_killed_after_dropping_days_the_rerun_still_says_they_were_dropped(sim, tmp_path, rerun_drops):
    """A ``--drop-missing-days`` run killed after removing a day and before publishing: the rerun found nothing to
    drop and published a board without the day whose summary and manifest said nothing was dropped (an
    uninterrupted run says ``dropped: [day]``)."""
    logs = tmp_path / "logs"
    shutil.copytree(sim / "battles", logs / "battles")
    first = refresh(_glob(logs), str(tmp_path / "state"), str(tmp_path / "out"), [], OPTIONS)
    shutil.rmtree(logs / "battles" / "day=2024-01-02")
    env = {**os.environ, publish.FAILPOINT_ENV: "after-aggregate"}
    proc = subprocess.run(
        [*_command(logs, tmp_path), "--drop-missing-days"], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    _assert_intact(tmp_path / "out", first.published.snapshot_id)
    assert not (tmp_path / "state" / "manifests" / "day=2024-01-02.json").exists()  # the day is gone already
    options = RefreshOptions(audit=False, drop_missing_days=rerun_drops)
    again = refresh(_glob(logs), str(tmp_path / "state"), str(tmp_path / "out"), [], options)
    assert again.summary.days.dropped == ["2024-01-02"] and again.summary.days.without_input == []
    manifest = json.loads((Path(again.published.path) / "manifest.json").read_text())
    assert manifest["days_without_input"] == {"kept": [], "dropped": ["2024-01-02"]}
    later = refresh(_glob(logs), str(tmp_path / "state"), str(tmp_path / "out"), [], options)
    assert later.published.snapshot_id == again.published.snapshot_id  # noted once: nothing new after that
