"""bench/scale.py's reading of a process's memory by kind (its RSS timeline, ``out-N.rss.tsv``).

The timeline is what tells a peak made of live data from one made of memory kept after a phase, so its
columns must be the kinds they say: a block this process touches shows in its anonymous memory, and
transparent huge pages are read only when asked for (a walk of the page tables).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
from conftest import PROJECT_ROOT

sys.path.insert(0, str(PROJECT_ROOT / "bench"))
from scale import process_memory_mb


def test_a_block_this_process_touches_shows_in_its_anonymous_memory():
    before = process_memory_mb(os.getpid(), huge=False)
    block = np.ones(96 << 20, dtype=np.uint8)  # 96 MB, every page written
    after = process_memory_mb(os.getpid(), huge=True)
    assert after["anon"] - before["anon"] >= 90
    assert after["rss"] >= after["anon"] and after["file"] > 0
    assert 0 <= after["anon_huge"] <= after["anon"]
    assert math.isnan(before["anon_huge"])  # not asked for: not read
    del block


def test_an_ended_process_reads_as_nothing():
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = process_memory_mb(int(done.stdout), huge=True)
    assert (gone["rss"], gone["anon"], gone["file"]) == (0.0, 0.0, 0.0)
