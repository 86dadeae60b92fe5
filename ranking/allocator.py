"""What a stage frees: kept by the allocators for reuse, or handed back to the system between stages.

Two opposite needs, one place for both.  A day worker allocates and frees the same few hundred MB for
every day, and a streamed bootstrap replicate's worker the same arrays for every shard it reads, so they
should keep them (:func:`keep_freed_memory`, in processes of their own); a refresh's stages run one after
the other in one process, so each should hand back what it freed before the next starts
(:func:`release_freed_memory`).
glibc's malloc is reached through ctypes; where the C library is not glibc both are left to the defaults.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import pyarrow as pa

#: glibc ``mallopt`` parameters (malloc.h) and what a day worker sets them to (:func:`keep_freed_memory`).
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
_KEEP_FREED = ((_M_MMAP_THRESHOLD, 32 << 20), (_M_TRIM_THRESHOLD, 1 << 30), (_M_TOP_PAD, 64 << 20))


def _glibc(name: str) -> Callable[..., int] | None:
    """The C library's function ``name`` (the library this interpreter runs on), or None where it has none."""
    try:
        return getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None


def keep_freed_memory() -> bool:
    """Have glibc's malloc keep freed memory for reuse instead of handing it back to the kernel; True if set.

    A day worker allocates and frees the same few hundred MB for every day (numpy arrays of a batch's
    rows: a few MB each).  By default glibc serves such blocks with fresh ``mmap`` calls, unmaps them
    when freed and trims its heap, so every day pays page faults to get the memory back (system time).
    Blocks up to 32 MB from the heap, trimmed only past 1 GB of free space, cut a 1%-bad day's system
    time from ~61 to ~42 ms (~5% of the day's CPU); the worker's peak memory is what its biggest day
    needs either way.  Not glibc (or no ``mallopt``): left as it is.
    """
    mallopt = _glibc("mallopt")
    return mallopt is not None and all(mallopt(param, value) == 1 for param, value in _KEEP_FREED)


def release_freed_memory() -> None:
    """Hand the memory a stage freed back to the system, so the next stage does not start on top of it.

    Freed is not returned: Arrow's pool keeps freed pages for reuse (``release_unused`` returns them) and
    glibc's malloc keeps freed blocks inside its heap, which numpy's arrays of a fold's bucket leave
    fragmented (``malloc_trim(0)`` returns every free page of it).  Measured at bench/scale.py ``--scale 0.2``
    (2N state): the audit's sum left ~100 MB of freed memory to the merge after it, the merge ~30 MB to the
    fit.  Not glibc: Arrow's pool only.
    """
    pa.default_memory_pool().release_unused()
    trim = _glibc("malloc_trim")
    if trim is not None:
        trim(0)
