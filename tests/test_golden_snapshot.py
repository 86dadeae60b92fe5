"""Golden snapshot: the demo's published tables, byte for byte, pinned to a committed file.

The demo data (the ``biasboard demo`` configuration, scaled down so the test runs
in seconds) is simulated with a fixed seed and refreshed with the local
FnApiRunner into temporary folders.  The sha256 of every file of the snapshot is
compared with ``tests/data/golden/demo_snapshot.json``:

- the tables (``leaderboard.*``, ``bias.*``) and the plan inputs and audit files
  the snapshot carries, as written;
- ``summary.json`` after removing the keys that legitimately vary between runs
  (wall times and local paths; see :data:`VOLATILE_KEYS`);
- ``manifest.json`` (times, versions, paths) and the HTML files (presentation,
  not data) are not pinned.

A refactor must leave every hash unchanged.  A change that alters the published
numbers *on purpose* regenerates the golden file and says why in its commit::

    BIASBOARD_REGEN_GOLDEN=1 .venv/bin/python -m pytest tests/test_golden_snapshot.py

(the test then rewrites the file and passes; review its diff before committing).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from biasboard.pipelines.demo import DEMO
from biasboard.pipelines.refresh import RefreshOptions, refresh
from biasboard.simulate import SimulationConfig, write_simulation

GOLDEN = Path(__file__).parent / "data" / "golden" / "demo_snapshot.json"
REGENERATE = os.environ.get("BIASBOARD_REGEN_GOLDEN", "") not in ("", "0")

#: The demo's configuration (judge biases, bad rows, both orders), a tenth of its size.
CONFIG = SimulationConfig(**{**DEMO.__dict__, "battles": 6_000, "days": 3})
#: The demo's refresh options.
OPTIONS = RefreshOptions(k=3)
#: Files of a snapshot that are not pinned besides the HTML: run metadata.
UNPINNED = ("manifest.json",)
#: summary.json keys (at any depth) whose values depend on when or where the run happened.
VOLATILE_KEYS = frozenset({"timings", "timings_s", "started_at", "path", "paths", "state", "glob", "input_glob"})


def _stable(value: object) -> object:
    """``value`` without :data:`VOLATILE_KEYS`, recursively."""
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in VOLATILE_KEYS}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


def snapshot_hashes(snapshot: Path) -> dict[str, str]:
    """sha256 of every pinned file of a snapshot folder, by file name."""
    hashes = {}
    for path in sorted(snapshot.iterdir()):
        if path.name in UNPINNED or path.suffix == ".html" or not path.is_file():
            continue
        data = path.read_bytes()
        if path.name == "summary.json":
            data = json.dumps(_stable(json.loads(data)), sort_keys=True).encode("utf-8")
        hashes[path.name] = hashlib.sha256(data).hexdigest()
    return hashes


@pytest.fixture(scope="module")
def demo_snapshot(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("golden")
    logs = write_simulation(CONFIG, root / "logs")
    outcome = refresh(
        str(logs / "battles" / "day=*" / "*.parquet"), str(root / "state"), str(root / "out"), [], OPTIONS
    )
    assert outcome.published is not None
    return Path(outcome.published.path)


def test_demo_snapshot_matches_the_golden_file(demo_snapshot):
    hashes = snapshot_hashes(demo_snapshot)
    assert {"leaderboard.parquet", "leaderboard.csv", "leaderboard.json", "bias.parquet", "summary.json"} <= set(hashes)
    if REGENERATE:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(json.dumps(hashes, indent=2, sort_keys=True) + "\n")
    golden = json.loads(GOLDEN.read_text())
    changed = sorted(name for name in golden.keys() | hashes.keys() if golden.get(name) != hashes.get(name))
    assert not changed, f"snapshot files differ from {GOLDEN.name}: {changed} (regenerate only on purpose)"
