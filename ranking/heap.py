"""glibc's heap kept mapped through a judge-blocked solve and trimmed at its end (:func:`kept_heap`).

A judge-blocked Newton iteration at 50k voter-judges makes and frees tens of MB of per-entry and per-judge
arrays each time (the Hessian's sums, its assembled blocks, the factorisation's inverses, the Gram's
batches, the kept Davidson terms).  glibc serves a block above its mmap threshold with fresh pages and
unmaps it on free, and gives the heap's free top back to the kernel above its trim threshold, so each
iteration's arrays fault in freshly zeroed pages again: ~130k minor faults and 0.4-0.8 s of system time a
fit at 2 × 25k voter-judges (bench/fit.py --voters), against ~27k for the pooled fit of as many cells.
With the thresholds raised inside the solve, freed blocks stay in the heap and the next iteration reuses
them (measured: ~100k faults, 0.2-0.3 s of system time, same user time, peak RSS within a few %).

Reusing numpy buffers across iterations by hand was tried instead and did not help: glibc already hands
freed heap memory to the next array, and pinned buffers only moved the faults to the temporaries.

Process-wide, as malloc's settings are: entered once however deeply nested; on the outermost exit the
thresholds are left where glibc's own dynamic rule takes them once a process has freed a large block (mmap
32 MiB, trim twice that), so the next free gives the heap's top back.  (Not ``malloc_trim``: it also drops
every free page inside the heap, and the leaderboard's covariance and tables right after the solve fault
them in again — measured 25k more faults than without it.)  A no-op where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from contextlib import contextmanager

#: mallopt parameters (glibc's malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
#: glibc's largest dynamic mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX): blocks below it come from
#: the heap — every per-judge and per-entry array of a 50k-judge fit — larger ones stay mmapped.
MMAP_THRESHOLD = 32 << 20
#: Free heap top kept inside the solve (a few iterations' worth of arrays).
TRIM_INSIDE = 256 << 20
#: glibc's trim threshold once it has raised the mmap threshold to MMAP_THRESHOLD (twice it).
TRIM_AFTER = 2 * MMAP_THRESHOLD

_depth = 0


def _glibc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 - only glibc has it (musl, macOS: no-op)
        return libc
    except (OSError, AttributeError):  # pragma: no cover - not glibc
        return None


@contextmanager
def kept_heap() -> Iterator[None]:
    """Freed blocks below :data:`MMAP_THRESHOLD` stay in the heap inside the block (see the module docstring)."""
    global _depth
    libc = _glibc()
    if libc is None:  # pragma: no cover - not glibc
        yield
        return
    if _depth == 0:
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        libc.mallopt(M_TRIM_THRESHOLD, TRIM_INSIDE)
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0:
            libc.mallopt(M_TRIM_THRESHOLD, TRIM_AFTER)
