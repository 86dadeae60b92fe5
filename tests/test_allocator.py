"""polars' allocator hands freed pages back in multi-stage jobs (:func:`biasboard.hand_back_polars_memory`)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from biasboard import HAND_BACK, POLARS_ALLOCATOR_ENV, POLARS_DEFAULT

#: Builds and frees ~0.5 GB of polars frames three times and prints the resident anonymous memory it kept (MB).
FREED_FRAMES = """
import sys
if sys.argv[1] == "hand-back":
    import biasboard
    assert biasboard.hand_back_polars_memory()
import numpy as np
import polars as pl

def resident_anon_mb():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) >> 10 for line in status if line.startswith("RssAnon"))

frames = [pl.DataFrame({"x": np.arange(500_000)}) for _ in range(4)]
before = resident_anon_mb()
for _ in range(3):
    big = pl.concat([f.with_columns(y=pl.col("x") * 2, z=pl.col("x").cast(pl.String)) for f in frames * 10])
    del big
print(resident_anon_mb() - before)
"""

#: Runs the console script's main on ``--help`` of a command and prints the allocator setting it left.
COMMAND_SETTING = """
import os, sys
from biasboard.pipelines import cli
try:
    cli.main([sys.argv[1], "--help"])
except SystemExit:
    pass
print("setting:", os.environ.get(sys.argv[2], "unset"))
"""


def _python(code: str, *args: str, allocator: str | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k != POLARS_ALLOCATOR_ENV}
    if allocator is not None:
        env[POLARS_ALLOCATOR_ENV] = allocator
    return subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, check=True
    ).stdout


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads /proc (Linux)")
def test_freed_polars_frames_are_handed_back_once_asked_before_polars_starts():
    kept_default, kept_handed_back = int(_python(FREED_FRAMES, "default")), int(_python(FREED_FRAMES, "hand-back"))
    assert kept_default > 200, "polars kept less than expected by default: the test no longer shows the difference"
    assert kept_handed_back < 50


def test_every_command_but_backfill_hands_freed_memory_back():
    refresh = _python(COMMAND_SETTING, "refresh", POLARS_ALLOCATOR_ENV).splitlines()[-1]
    backfill = _python(COMMAND_SETTING, "backfill", POLARS_ALLOCATOR_ENV).splitlines()[-1]
    assert refresh.endswith(HAND_BACK)  # (polars puts its own defaults first: the last value of a key wins)
    assert backfill.startswith("setting: ") and HAND_BACK not in backfill


def test_too_late_once_polars_is_imported():
    code = "import polars, biasboard; print(biasboard.hand_back_polars_memory())"
    assert _python(code).strip() == "False"


def test_polars_defaults_passed_on_by_a_parent_do_not_turn_the_hand_back_off():
    """A process that imported polars passes polars' own setting to what it starts (bench/scale.py's second
    refresh ran without the hand-back); a user's own decay setting is still kept."""
    import polars  # noqa: F401  (this process's polars wrote its defaults into the variable)

    inherited = os.environ[POLARS_ALLOCATOR_ENV]
    assert inherited.startswith(POLARS_DEFAULT)
    refresh = _python(COMMAND_SETTING, "refresh", POLARS_ALLOCATOR_ENV, allocator=inherited).splitlines()[-1]
    assert refresh.endswith(HAND_BACK)
    own = "dirty_decay_ms:250"
    refresh = _python(COMMAND_SETTING, "refresh", POLARS_ALLOCATOR_ENV, allocator=own).splitlines()[-1]
    assert refresh.endswith(own) and HAND_BACK not in refresh
    handed_back = int(_python(FREED_FRAMES, "hand-back", allocator=inherited))
    assert handed_back < 50
