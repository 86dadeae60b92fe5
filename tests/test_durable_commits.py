"""Every file a rename commits is on disk (fsync) before that rename, and the folder after it.

Only ``LATEST`` and the folders were synced: a snapshot's staged files and a state day's files were
renamed into place unsynced, so after a power cut a visible snapshot or a committed day (its manifest
there) could hold empty files.  ``os.fsync`` is recorded (the syscall, which no test can observe
otherwise) by the path of the descriptor it is given, and whether the commit had happened by then.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest
from biasboard.transforms import publish, state


@pytest.fixture
def synced(monkeypatch) -> list[str]:
    """The paths ``os.fsync`` is called on, in order."""
    calls: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        calls.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return calls


def test_a_state_day_is_on_disk_before_its_manifest_commits_it(tmp_path, synced):
    root = str(tmp_path / "state")
    tables = {state.PAIR_CELLS_FILE: pa.table({"x": [1, 2]}), state.DEAD_LETTERS_FILE: pa.table({"y": ["a"]})}
    state.write_day(root, "2024-01-01", {"counts": {}}, tables)
    manifest = Path(state.manifest_path(root, "2024-01-01"))
    cells, dead = Path(state.cells_dir(root, "2024-01-01")), Path(state.deadletters_dir(root, "2024-01-01"))
    for folder, name in ((cells, state.PAIR_CELLS_FILE), (dead, state.DEAD_LETTERS_FILE)):
        # written under a temporary name, synced, then renamed: the sync names the temporary file
        assert any(Path(p).parent == folder and Path(p).name.endswith(f"-{name}") for p in synced), (name, synced)
        assert synced.index(str(folder)) < synced.index(str(manifest.parent)), "the renames are synced first"
    assert any(Path(p).parent == manifest.parent and p.endswith(f"-{manifest.name}") for p in synced), synced
    assert synced[-1] == str(manifest.parent)  # the manifest's rename, the commit, is synced last
    assert manifest.exists()


def test_a_snapshot_is_on_disk_before_it_becomes_visible(tmp_path, synced):
    out = str(tmp_path / "out")
    leaderboard = pl.DataFrame({"model": ["a", "b"], "rating_corrected": [1.0, -1.0]})
    bias = pl.DataFrame({"judge": ["j"], "effect": ["position"], "estimate": [0.2]})
    files = publish.snapshot_files(leaderboard, bias, {"kendall_tau": 1.0}, "<html></html>")
    published = publish.publish_snapshot(out, files, {}, now=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc))
    staging = [Path(p) for p in synced if Path(p).parent.parent == tmp_path / "out" / publish.STAGING]
    assert {p.name for p in staging} == {*files, publish.MANIFEST}, synced  # every file, while staged
    folder = str(staging[0].parent)
    assert folder in synced and synced.index(folder) > max(synced.index(str(p)) for p in staging)
    assert str(tmp_path / "out" / publish.SNAPSHOTS) in synced  # the rename that makes it visible
    assert Path(published.path, "leaderboard.csv").read_bytes() == files["leaderboard.csv"]
