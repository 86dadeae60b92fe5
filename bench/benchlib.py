"""What several benchmarks share: a fresh process per measured step, its peak memory, BLAS pinned (or not).

Every measured step runs in its own subprocess (``python BENCH --child …``), so its peak RSS is its
own and one step's caches do not warm the next; the child prints one JSON line, its last.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

#: Every measured process gets the same thread settings.  On a small machine shared with other work,
#: OpenBLAS's spinning threads make a 1,300² Cholesky 10-20× slower than one thread does (measured here:
#: 1-3 s vs 0.07-0.12 s), so BLAS is pinned to one thread.  A user's ``biasboard refresh`` has no such
#: variables: its fit stage limits BLAS itself (transforms/fit.py); a step that measures what the CLI gets
#: runs with ``pin_blas=False`` (:data:`BLAS_VARS` taken out of the environment).
BLAS_VARS = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
CHILD_ENV = {"NO_GCE_CHECK": "true", **BLAS_VARS}


def peak_rss_mb() -> float:
    """Peak resident set of this process (VmHWM) or of any worker process it waited for, whichever is larger.

    This process's own peak is VmHWM, not ru_maxrss: on Linux ru_maxrss survives exec, so a child started
    by a big parent would report the parent's peak.  Beam's worker processes (``--direct_running_mode=
    multi_processing``) are counted through RUSAGE_CHILDREN (which can only over-state them, by the same
    survival through exec)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            own = int(line.split()[1])
    return max(own, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024  # KiB on Linux


def child_env(pin_blas: bool = True) -> dict[str, str]:
    """This process's environment with :data:`CHILD_ENV`; without ``pin_blas``, with no BLAS thread variable at
    all (neither ours nor one this process inherited): the threads a user's process starts with."""
    if pin_blas:
        return {**os.environ, **CHILD_ENV}
    return {k: v for k, v in {**os.environ, **CHILD_ENV}.items() if k not in BLAS_VARS}


def run_child(cmd: list[str], pin_blas: bool = True) -> dict:
    """Run ``cmd`` in a fresh process with :func:`child_env`; its last stdout line, parsed as JSON."""
    done = subprocess.run(cmd, capture_output=True, text=True, env=child_env(pin_blas), check=False)
    if done.returncode != 0:
        raise SystemExit(f"benchmark step failed: {' '.join(cmd[:4])}…\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def child_command(script: str, *args: str) -> list[str]:
    """The command that runs ``script`` (a bench file) as a child with ``args``."""
    return [sys.executable, script, *args]
