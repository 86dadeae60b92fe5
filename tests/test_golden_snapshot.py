"""Golden snapshot: the demo's published tables, value for value, pinned to a committed file.

The demo data (the ``biasboard demo`` configuration, scaled down so the test runs
in seconds) is simulated with a fixed seed and refreshed with the local
FnApiRunner into temporary folders.  Every pinned file of the snapshot is read
back into plain values and compared with ``tests/golden/demo_snapshot.json.gz``:

- the tables (``leaderboard.*``, ``bias.*``), the plan inputs and the audit
  files the snapshot carries: the schema and every cell;
- ``summary.json`` after removing the keys that legitimately vary between runs
  (wall times and local paths; see :data:`VOLATILE_KEYS`);
- ``manifest.json`` (times, versions, paths) and the HTML files (presentation,
  not data) are not pinned.

Why values with a tolerance and not the files' bytes: the fit's last bits depend
on the CPU.  numpy and OpenBLAS pick their SIMD kernels at run time (AVX2,
AVX-512, …), which changes the order of floating-point sums, so the same code on
another machine publishes numbers that differ in the 12th digit — and a byte
hash of them differs entirely.  Strings, integers, booleans, the schema and the
shape of every table must match exactly; a float must match to
:data:`REL_TOL` (relative) or :data:`ABS_TOL` (absolute), far below any change
a statistician could see and far above the round-off measured between kernel
paths: the demo run with AVX-512, with Haswell's and with Sandy Bridge's kernels
(``NPY_DISABLE_CPU_FEATURES`` + ``OPENBLAS_CORETYPE``) differed in 308 of 16,287
floats, by at most 2e-12 relative or 1e-12 absolute.

A refactor must leave every value unchanged.  A change that alters the published
numbers *on purpose* regenerates the golden file and says why in its commit::

    BIASBOARD_REGEN_GOLDEN=1 .venv/bin/python -m pytest tests/test_golden_snapshot.py

(the test then rewrites the file and passes; review what changed before committing:
``python tests/test_golden_snapshot.py OLD.json.gz NEW.json.gz`` prints the differences).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import os
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

GOLDEN = Path(__file__).parent / "golden" / "demo_snapshot.json.gz"
REGENERATE = os.environ.get("BIASBOARD_REGEN_GOLDEN", "") not in ("", "0")

#: Files of a snapshot that are not pinned besides the HTML: run metadata.
UNPINNED = ("manifest.json",)
#: summary.json keys (at any depth) whose values depend on when or where the run happened.
VOLATILE_KEYS = frozenset({"timings", "timings_s", "started_at", "path", "paths", "state", "glob", "input_glob"})
#: Float tolerances (see the module docstring for why floats are not compared bit for bit).
REL_TOL = 1e-8
ABS_TOL = 1e-10
#: Significant digits a float keeps in the golden file (well inside REL_TOL).
DIGITS = 12


def _stable(value: object) -> object:
    """``value`` without :data:`VOLATILE_KEYS`, recursively."""
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in VOLATILE_KEYS}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


def _cell(text: str) -> object:
    """A CSV field as the number it spells, else the text (so a float's last digits do not count)."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def _plain(value: object) -> object:
    """JSON-ready: floats rounded to :data:`DIGITS` significant digits, NaN/inf spelled as strings."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float):
        return float(f"{value:.{DIGITS}g}") if math.isfinite(value) else repr(value)
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def read_values(path: Path) -> object:
    """A pinned snapshot file as plain values: tables as schema + columns, JSON parsed, arrays as lists."""
    if path.suffix == ".parquet":
        table = pq.read_table(path)
        schema = [f"{field.name}: {field.type}" for field in table.schema]
        return {"schema": schema, "columns": {name: table.column(name).to_pylist() for name in table.column_names}}
    if path.suffix == ".csv":
        return [[_cell(text) for text in row] for row in csv.reader(io.StringIO(path.read_text(encoding="utf-8")))]
    if path.suffix == ".npz":
        with np.load(path) as arrays:
            return {
                key: {"dtype": str(a.dtype), "shape": list(a.shape), "data": a.ravel().tolist()}
                for key, a in arrays.items()
            }
    if path.suffix == ".json":
        values = json.loads(path.read_text(encoding="utf-8"))
        return _stable(values) if path.name == "summary.json" else values
    return {"bytes": path.read_bytes().hex()}


def snapshot_values(snapshot: Path) -> dict[str, object]:
    """Every pinned file of a snapshot folder as plain values, by file name."""
    return {
        path.name: _plain(read_values(path))
        for path in sorted(snapshot.iterdir())
        if path.is_file() and path.name not in UNPINNED and path.suffix != ".html"
    }


def differences(expected: object, actual: object, where: str = "") -> list[str]:
    """Where ``actual`` departs from ``expected``: exact for everything but floats, which get the tolerance."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        found = [
            f"{where}/{k}: only in {'golden' if k in expected else 'run'}"
            for k in sorted(expected.keys() ^ actual.keys())
        ]
        for key in sorted(expected.keys() & actual.keys()):
            found += differences(expected[key], actual[key], f"{where}/{key}")
        return found
    if isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            return [f"{where}: {len(expected)} items in the golden file, {len(actual)} in the run"]
        return [
            d for i, (e, a) in enumerate(zip(expected, actual, strict=True)) for d in differences(e, a, f"{where}[{i}]")
        ]
    numbers = (int, float)
    if isinstance(expected, float) or isinstance(actual, float):
        both_numbers = all(isinstance(v, numbers) and not isinstance(v, bool) for v in (expected, actual))
        if both_numbers and math.isclose(expected, actual, rel_tol=REL_TOL, abs_tol=ABS_TOL):  # type: ignore[arg-type]
            return []
    elif type(expected) is type(actual) and expected == actual:
        return []
    return [f"{where}: golden {expected!r}, run {actual!r}"]


def load_golden(path: Path = GOLDEN) -> dict[str, object]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def write_golden(values: dict[str, object], path: Path = GOLDEN) -> None:
    """Deterministic gzip (no name, no time stamp) so the same values give the same bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(values, sort_keys=True, separators=(",", ":")).encode("utf-8")
    with path.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", filename="", mtime=0) as f:
        f.write(text)


@pytest.fixture(scope="module")
def demo_snapshot(tmp_path_factory) -> Path:
    from biasboard.pipelines.demo import DEMO
    from biasboard.pipelines.refresh import RefreshOptions, refresh
    from biasboard.simulate import SimulationConfig, write_simulation

    # The demo's configuration (judge biases, bad rows, both orders), a tenth of its size, and its options.
    config = SimulationConfig(**{**DEMO.__dict__, "battles": 6_000, "days": 3})
    root = tmp_path_factory.mktemp("golden")
    logs = write_simulation(config, root / "logs")
    outcome = refresh(
        str(logs / "battles" / "day=*" / "*.parquet"), str(root / "state"), str(root / "out"), [], RefreshOptions(k=3)
    )
    assert outcome.published is not None
    return Path(outcome.published.path)


def test_demo_snapshot_matches_the_golden_file(demo_snapshot):
    values = snapshot_values(demo_snapshot)
    assert {"leaderboard.parquet", "leaderboard.csv", "leaderboard.json", "bias.parquet", "summary.json"} <= set(values)
    if REGENERATE:
        write_golden(values)
    found = differences(load_golden(), values)
    assert not found, (
        f"{len(found)} snapshot values differ from {GOLDEN.name} (regenerate only on purpose): {found[:10]}"
    )


def test_the_comparison_fails_on_a_real_change():
    """The tolerance is for round-off only: a changed digit, count, name or column fails."""
    golden = {"t": {"schema": ["theta: double"], "columns": {"theta": [0.123456789, 1.5], "n": [3, 4]}}}
    assert differences(golden, json.loads(json.dumps(golden))) == []
    roundoff = {"t": {"schema": ["theta: double"], "columns": {"theta": [0.123456789 * (1 + 1e-10), 1.5], "n": [3, 4]}}}
    assert differences(golden, roundoff) == []
    for changed in (
        {"t": {"schema": ["theta: double"], "columns": {"theta": [0.1234577, 1.5], "n": [3, 4]}}},
        {"t": {"schema": ["theta: double"], "columns": {"theta": [0.123456789, 1.5], "n": [3, 5]}}},
        {"t": {"schema": ["theta: float"], "columns": {"theta": [0.123456789, 1.5], "n": [3, 4]}}},
        {"t": {"schema": ["theta: double"], "columns": {"theta": [0.123456789], "n": [3, 4]}}},
        {"t": {"schema": ["theta: double"], "columns": {"theta": [0.123456789, 1.5]}}},
    ):
        assert differences(golden, changed), changed


if __name__ == "__main__":  # diff two golden files: python tests/test_golden_snapshot.py OLD NEW
    for line in differences(load_golden(Path(sys.argv[1])), load_golden(Path(sys.argv[2]))):
        print(line)
