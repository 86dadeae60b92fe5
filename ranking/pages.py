"""Base pages (no transparent huge pages) for numpy's arrays inside a block of code.

numpy asks the kernel for transparent huge pages (``madvise(MADV_HUGEPAGE)``) on every array of 4 MB or
more.  That pays off for big arrays read many times; it does not for the fit's short-lived ones, written
once: with the common ``defrag=madvise`` setting the kernel zeroes a 2 MB page and compacts memory
synchronously to serve each first touch.  Two places of a fit allocate such arrays in bulk:

- coding the cells (:func:`~biasboard.ranking.data.build_dataset`): every column is made at full size as the
  Parquet batches stream in.  Measured on 647k voter cells, 5 runs interleaved: 0.44-0.51 s with huge pages
  (0.26-0.34 s of it system time), 0.31-0.46 s with base pages; on 530k pooled cells the same within noise;
- a judge-blocked Newton iteration (:mod:`~biasboard.ranking.solver`), which allocates and frees tens of MB
  of per-judge and per-entry arrays: 0.35-0.63 s of system time per fit at 2 × 25k voter-judges with huge
  pages, 0.24-0.26 s with base pages (same user time).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def base_pages() -> Iterator[None]:
    """numpy's large arrays without transparent huge pages inside the block (see the module docstring).

    numpy's own switch (also ``NUMPY_MADVISE_HUGEPAGE=0``), restored on exit; a no-op where numpy has none.
    The switch is process-wide: a thread allocating meanwhile gets base pages too (only slower or faster).
    """
    switch = None
    for name in ("numpy._core.multiarray", "numpy.core.multiarray"):  # numpy 2, numpy 1
        try:
            switch = getattr(importlib.import_module(name), "_set_madvise_hugepage", None)
        except ImportError:
            continue
        break
    if switch is None:  # pragma: no cover - numpy without the switch
        yield
        return
    previous = switch(False)
    try:
        yield
    finally:
        switch(previous)
