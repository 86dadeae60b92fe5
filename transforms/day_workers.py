"""Forked worker processes that run a local ingest's days: every core busy, no GIL shared between days.

A big local backfill runs its days in Beam worker threads (:func:`~biasboard.transforms.ingest.use_worker_threads`).
A day's work is Arrow, polars and numpy kernels with Python between them, and that Python holds the
GIL: two days in two threads kept ~1.65 of 2 cores busy.  Beam's own worker processes
(``--direct_running_mode=multi_processing``) are fresh interpreters that cost ~2.5 CPU-s each to start
(imports).  Here, before the pipeline runs, the launching process forks a pool of workers that share its
imported modules copy-on-write (milliseconds to start); each Beam worker thread hands its day to the pool
and waits (a waiting thread holds no GIL), so the days' Python runs in separate processes.

The pipeline is unchanged: the DoFn still receives every day task from Beam, gets the day's counts and
manifest back from the worker and reports them as Beam counters and output (:func:`run_in_worker`).  Only
the local runners in this process find the pool (it is registered under a token the DoFn carries); any
other runner, or a DoFn unpickled in another process, runs the day itself.

Forking is safe only while polars' thread pool has not started in this process: a forked child has
none of the parent's threads, and a polars pool inherited half-alive deadlocks its first parallel call.
:func:`fork_safe` checks for those threads; when they run (e.g. a test process that used polars
already), no pool is made and the days run in threads as before.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.pool
import os
import re
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from biasboard.ranking.allocator import keep_freed_memory

_LOG = logging.getLogger(__name__)

R = TypeVar("R")

#: Names of the threads a forked child would inherit half-alive: polars' compute pool (``polars-0`` ...) and its
#: async runtime (``tokio-rt-worker``).  Not ``polars-ooc-clea…``, which polars starts on import and never joins.
UNSAFE_THREADS = re.compile(r"polars-\d|tokio-")

_POOLS: dict[str, multiprocessing.pool.Pool] = {}


def fork_safe() -> bool:
    """True when no thread of :data:`UNSAFE_THREADS` runs in this process (Linux; False where it cannot tell)."""
    try:
        tasks = os.listdir("/proc/self/task")
        names = []
        for task in tasks:
            try:
                with open(f"/proc/self/task/{task}/comm") as handle:
                    names.append(handle.read())
            except FileNotFoundError:  # the thread ended while we looked
                continue
    except OSError:
        return False
    return not any(UNSAFE_THREADS.match(name) for name in names)


@contextmanager
def day_workers(processes: int) -> Iterator[str | None]:
    """A pool of ``processes`` forked workers for the duration; yields its token (None: no pool, run in place)."""
    if processes < 2 or not fork_safe():
        yield None
        return
    try:
        pool = multiprocessing.get_context("fork").Pool(processes, initializer=keep_freed_memory)
    except OSError:  # no processes to be had: the days run in the Beam worker threads
        yield None
        return
    token = uuid.uuid4().hex
    _POOLS[token] = pool
    _LOG.info("ingest: days run in %d forked worker processes", processes)
    clean = False
    try:
        yield token
        clean = True
    finally:
        del _POOLS[token]
        if clean:
            pool.close()
        else:
            pool.terminate()
        pool.join()


def run_in_worker(token: str | None, function: Callable[..., R], *args: Any) -> R:
    """``function(*args)`` in a worker of the pool registered as ``token``, or here when there is none.

    ``function`` and ``args`` are pickled to the worker and the result back; an exception raised there
    (an InputError naming a file) is raised here as itself.
    """
    pool = _POOLS.get(token) if token else None
    if pool is None:
        return function(*args)
    return pool.apply(function, args)
