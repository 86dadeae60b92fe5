"""Independent pieces of a fit in forked processes: bootstrap replicates, the effects' profile likelihoods.

Why fork: the pieces read the same large problem (cells, the MAP, its factorisation), which a forked
child shares copy-on-write, so nothing big is pickled; only each piece's argument and result cross the
pipe.  The results come back in the order of the items, and every piece is a function of its item alone,
so the answer does not depend on the number of processes — bit for bit.  Where no process can be had
(limits, memory) the same pieces run in this process.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from biasboard.schemas.errors import InputError

T = TypeVar("T")
R = TypeVar("R")

_ACTIVE: Callable[[Any], Any] | None = None  # the function a forked worker calls (set just before the fork)


def _call(item: Any) -> Any:
    assert _ACTIVE is not None
    return _ACTIVE(item)


def fork_map(function: Callable[[T], R], items: Sequence[T], workers: int) -> list[R]:
    """``[function(item) for item in items]``, in up to ``workers`` forked processes, in the items' order."""
    global _ACTIVE
    if workers <= 1 or len(items) < 2:
        return [function(item) for item in items]
    _ACTIVE = function
    try:
        pool = multiprocessing.get_context("fork").Pool(min(workers, len(items)))
    except OSError:  # no processes to be had: the same pieces, in this process
        _ACTIVE = None
        return [function(item) for item in items]
    try:
        with pool:
            return pool.map(_call, items, chunksize=1)
    finally:
        _ACTIVE = None


def default_workers(variable: str, pieces: int, work: int, min_work: int) -> int:
    """Processes for ``pieces`` independent pieces: the environment ``variable`` if set, else one per
    available CPU (at most one per piece) when the ``work`` (cells × pieces) repays a fork, else 1."""
    env = os.environ.get(variable, "").strip()
    if env:
        if not env.isdigit() or int(env) < 1:
            raise InputError(f"{variable} must be a whole number of processes >= 1, got {env!r}")
        return int(env)
    if work < min_work:
        return 1
    return max(1, min(len(os.sched_getaffinity(0)), pieces))
