"""Shared test fixtures: a disposable temp folder, offline Beam, the vendored real data."""

from __future__ import annotations

import os
import time
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pytest
from biasboard.schemas.battle import BATTLE_SCHEMA

# Beam leaves beam-temp* folders behind and, without credentials, looks for GCE
# metadata; keep both out of the way for every test process.
os.environ.setdefault("NO_GCE_CHECK", "true")

PROJECT_ROOT = Path(__file__).resolve().parents[1]
#: Stripped extracts of the public judge data in ``../shared/data`` (see each folder's SOURCE.md).
REAL_DATA = PROJECT_ROOT / "tests" / "data"


def real_data(*parts: str) -> Path:
    """Path into the vendored real-data extracts (``tests/data``); a missing file is a failure, never a skip.

    The extracts ship with the repository, so a fresh clone runs every golden
    check; ``tests/data/make_extracts.py`` regenerates them from ``../shared/data``.
    """
    path = REAL_DATA.joinpath(*parts)
    if not path.exists():
        pytest.fail(f"test data not found at {path} (regenerate with python tests/data/make_extracts.py)")
    return path


def battle_table(n: int, **columns: object) -> pa.Table:
    """``n`` battles in the contract's schema: ``columns`` as given, ids ``b0``, ``b1``, …, one day's timestamp, and
    every other column null — for tests that spell only the columns they are about."""
    unknown = set(columns) - set(BATTLE_SCHEMA.names)
    assert not unknown, f"not battle columns: {sorted(unknown)}"
    stamp = pa.array([datetime(2024, 5, 1, tzinfo=timezone.utc)] * n, pa.timestamp("us", tz="UTC"))
    given = {"battle_id": [f"b{i}" for i in range(n)], "ts": stamp, **columns}
    return pa.table({f.name: given.get(f.name, [None] * n) for f in BATTLE_SCHEMA}, schema=BATTLE_SCHEMA)


def next_second() -> None:
    """Wait for the next whole second of the clock: a snapshot published after it gets an id of its own.

    Snapshot ids are stamped to the second; identical content published within one second shares an id,
    which would hide a second snapshot of one board from a test that counts them.
    """
    time.sleep(1.0 - time.time() % 1.0 + 0.01)


@pytest.fixture(autouse=True)
def _isolated_tmpdir(tmp_path_factory, monkeypatch):
    """Point TMPDIR at a per-test folder so Beam's temp leftovers are cleaned with it."""
    tmp = tmp_path_factory.mktemp("tmpdir")
    monkeypatch.setenv("TMPDIR", str(tmp))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    yield
