"""biasboard: leaderboards corrected for LLM-judge biases, next to the naive ones they replace.

Each top-level folder of the repository is installed under this namespace:
``biasboard.schemas`` (data contracts), ``biasboard.ranking`` (the numpy/scipy
model core, no Beam), ``biasboard.simulate``, ``biasboard.audit`` and
``biasboard.plan`` (the simulator, the judge audit and the planner, beside the
core), ``biasboard.transforms`` (Beam composites and DoFns that move Arrow
batches and call the core), ``biasboard.report`` and ``biasboard.importers``,
and ``biasboard.pipelines`` (the jobs and the CLI).  docs/design-notes.md draws
the layers.
"""

import os
import sys

__version__ = "0.1.0"

#: polars' allocator (its own jemalloc) reads its settings from this variable once, when polars is first imported;
#: polars puts its own first ("dirty_decay_ms:500,muzzy_decay_ms:1000" in polars 2.1) and a value found here after it.
POLARS_ALLOCATOR_ENV = "_RJEM_MALLOC_CONF"
#: Freed pages handed back at once.  polars' own delays do not hand them back in time: jemalloc (no background
#: thread) purges only when it is called again, so a stage's freed frames stayed resident (pola-rs/polars#23128).
HAND_BACK = "dirty_decay_ms:0,muzzy_decay_ms:0"
#: What polars' import writes into :data:`POLARS_ALLOCATOR_ENV` ahead of any value found there (polars/__init__.py).
POLARS_DEFAULT = "dirty_decay_ms:500,muzzy_decay_ms:1000"


def hand_back_polars_memory() -> bool:
    """Have polars' allocator hand back the pages it frees at once; False when it is too late (polars imported).

    Why: a refresh's stages free hundreds of MB of polars frames per day of history and polars kept them
    resident, so the refresh's memory grew with the history — the audit's sum of bench/scale.py's 60 stored days
    ended holding 833 MB, 251 MB with this (its peak 1,258 → 882 MB, +14% time, one run each).  The price is
    page faults where frames are freed and made again: ~15% more CPU in a backfill's day workers
    (bench/ingest.py), which keep what they free on purpose (:mod:`biasboard.ranking.allocator`), so the
    ``biasboard`` command sets it for every job but ``backfill``.  A user's decay settings are kept.

    polars' own defaults in the variable are not a user's: a parent process that imported polars (a scheduler's
    Python task, bench/scale.py after its first refresh) passes them on to the ``biasboard`` it starts, and taken
    for a user's they turned the hand-back off — bench/scale.py's 2N refresh held ~300 MB more through the audit
    than a 2N refresh started on its own (docs/performance.md, Scale).
    """
    if "polars" in sys.modules:
        return False
    given = os.environ.get(POLARS_ALLOCATOR_ENV, "")
    if "decay_ms" not in given.replace(POLARS_DEFAULT, ""):
        os.environ[POLARS_ALLOCATOR_ENV] = f"{given},{HAND_BACK}" if given else HAND_BACK
    return True


#: The top-level folders installed as ``biasboard.<name>``: setup.py reads this tuple (without importing
#: the package), and :mod:`biasboard.pipelines.code_fingerprint` hashes their sources.
SUBPACKAGES = ("pipelines", "transforms", "schemas", "ranking", "simulate", "audit", "plan", "importers", "report")
