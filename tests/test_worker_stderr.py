"""Bad input under ``--direct_running_mode=multi_processing``: only the one-line error, no worker traceback.

A Beam worker subprocess prints a failed bundle's traceback to the terminal it shares with the
launcher; :mod:`biasboard.transforms.worker` drops it when the error is the user's (an
InputError), so the CLI's one line is all that is printed.  A bug's traceback still passes.
"""

from __future__ import annotations

import io
import subprocess
import sys
from datetime import datetime

import polars as pl
import pytest
from biasboard.transforms.worker import UserErrorTracebackFilter


@pytest.mark.slow  # a CLI process and a Beam worker process: ~10 s idle, 35 s on a loaded 2-core machine
def test_worker_process_prints_no_traceback_for_bad_input(tmp_path):
    day = tmp_path / "in" / "day=2024-01-01"
    day.mkdir(parents=True)
    n = 10
    pl.DataFrame(
        {
            "battle_id": [f"b{i}" for i in range(n)],
            "ts": [datetime(2024, 1, 1, 1)] * n,
            "judge": ["j"] * n,
            "model_a": ["a"] * n,
            "model_b": ["b"] * n,
            "winner": ["no such verdict"] * n,  # every row dead-lettered: the fit, on a worker, has no battle
        }
    ).write_parquet(day / "part.parquet")
    args = ["--input", str(tmp_path / "in"), "--state", str(tmp_path / "state"), "--out", str(tmp_path / "out")]
    beam = ["--direct_running_mode=multi_processing", "--direct_num_workers=1"]
    result = subprocess.run(
        [sys.executable, "-m", "biasboard.pipelines.cli", "refresh", *args, "--no-audit", *beam],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2, result.stderr
    assert "no valid battle to fit" in result.stderr.splitlines()[-1]
    assert "all 10 rows read were rejected (bad_winner 10)" in result.stderr.splitlines()[-1]
    assert "Traceback" not in result.stderr, result.stderr


def test_filter_drops_only_user_error_tracebacks():
    out = io.StringIO()
    stream = UserErrorTracebackFilter(out)
    user = 'Traceback (most recent call last):\n  File "x.py"\nbiasboard.schemas.errors.InputError: bad day\n'
    bug = 'Traceback (most recent call last):\n  File "x.py"\nZeroDivisionError: division by zero\n'
    for text in (user, "\n", "a line\n", bug, "\n"):
        stream.write(text)
    assert out.getvalue() == "a line\n" + bug + "\n"
