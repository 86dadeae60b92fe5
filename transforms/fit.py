"""FitModels: the refresh pipeline's last stage — fit every stored day's cells on a worker and stage the snapshot.

Why the fit is a pipeline stage: on Dataflow the launcher is usually a small
task (an Airflow worker, a cron host), and a fit over a long history needs
memory the launcher should not be asked for.  The stage runs once, after every
new day is committed (the element it receives is the number of days this run
wrote, possibly 0) and after the audit, if one runs (``after``: PCollections it
waits for as side inputs).  It then merges the state's cells, fits the naive and
the bias-aware model (:func:`biasboard.transforms.snapshot.fit_state`), renders
the report and writes every data file into the staging folder
(:func:`biasboard.transforms.publish.stage_files`).  The launcher only makes the
staged snapshot visible (:func:`biasboard.transforms.publish.publish_staged`).

Why one DoFn and not a chain of stages: a Newton solve needs the gradient and
Hessian of *all* cells at every iteration, and Beam has no loop across stages.
The cells are bounded by judges × ordered model pairs × length bins whatever the
number of battles (see :mod:`biasboard.schemas.cells`), so one worker holds
them; the memory it asks for is a Beam resource hint (``min_ram``), which
Dataflow uses to pick the worker and local runners ignore.

Why BLAS is limited to one thread while the stage runs (:data:`FIT_BLAS_THREADS`): the fit factorises
small dense matrices many times (the M × M model block, per-judge blocks, the (M + 6J)² core of a
dense fit) — too small for OpenBLAS's threads to pay, and on a machine shared with other work its
spinning threads make each factorisation many times slower.  Measured on this project's 2-core
machine at load 5-9, fresh processes, the same state (``bench/fit.py --profiles`` prints it in one
run): the 1M battles / 100 models / 8 judges fit stage 18-21 s wall and 10-11 CPU-s with OpenBLAS's
default threads, 10-11 s and 6.2 CPU-s with one; 400k battles / 60 models / 200 judges (the dense
path, a 1,260² core) 70-143 s vs 22-38 s; 50k battles / 20 models / 4 judges 0.34 vs 0.19 s.  The
limit is set with :func:`threadpoolctl.threadpool_limits` around the stage only (not through the
environment at import time), so the rest of a worker's process keeps its own settings.

Usage::

    committed = pipeline | "DayPartitions" >> beam.Create(tasks) | "AggregateDays" >> AggregateDays(state, families)
    staged = committed | "FitModels" >> FitModels(state, staging, FitSpec(ModelConfig(k=10)), after=[audit_written])
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.metrics.metric import Metrics
from biasboard.transforms import publish
from biasboard.transforms.snapshot import (
    ALL_DAYS_HAVE_INPUT,
    DaysWithoutInput,
    FitSpec,
    fit_state,
    read_audit_files,
    snapshot_files,
)
from threadpoolctl import threadpool_limits

METRICS_NAMESPACE = "biasboard.fit"
#: Memory the fit asks its worker for by default (a Beam resource hint); ``--fit-min-ram`` overrides it.
DEFAULT_FIT_RAM = "4GB"
#: BLAS threads while the fit stage runs (see the module docstring: one is faster for every size measured).
FIT_BLAS_THREADS = 1


class FitSnapshotFn(beam.DoFn):
    """(days committed) → fit the state's cells, stage the snapshot's files; yields the staging folder."""

    def __init__(
        self,
        state_dir: str,
        staging: str,
        spec: FitSpec,
        audit_dir: str | None,
        title: str,
        without_input: DaysWithoutInput = ALL_DAYS_HAVE_INPUT,
    ):
        self.state_dir = state_dir
        self.staging = staging
        self.spec = spec
        self.audit_dir = audit_dir
        self.title = title
        self.without_input = without_input

    def process(self, element: int, *args, **kwargs):  # element: days committed; side inputs only order the stage
        publish.failpoint("after-aggregate")
        started = time.perf_counter()
        audit_files = read_audit_files(self.audit_dir) if self.audit_dir else {}
        if audit_files:
            publish.failpoint("after-audit")  # the audit written (a re-run: to STATE/audit.next), nothing fitted
        with threadpool_limits(limits=FIT_BLAS_THREADS, user_api="blas"):
            parts = fit_state(self.state_dir, self.spec, audit_files, self.without_input)
            fitted = time.perf_counter()
            files = snapshot_files(parts, self.title)
        rendered = time.perf_counter()
        Metrics.counter(METRICS_NAMESPACE, "cells").inc(parts.n_cells)
        Metrics.counter(METRICS_NAMESPACE, "models").inc(parts.leaderboard.height)
        record = {
            "days_committed": element,
            "n_cells": parts.n_cells,
            "models": parts.leaderboard.height,
            "model_options": parts.model_options,
            "timings_s": {
                "fit": round(fitted - started, 3),
                "merge": round(parts.merge_s, 3),  # of the fit's time: merging the stored cells
                "report": round(rendered - fitted, 3),
            },
        }
        publish.stage_files(self.staging, files, record)
        publish.failpoint("after-fit")
        yield self.staging


class FitModels(beam.PTransform):
    """Committed day manifests → the fitted snapshot staged under ``staging`` (see the module docstring).

    ``after``: PCollections (the audit's written files) the fit must wait for;
    ``audit_dir``: where the audit's files are, to add to the snapshot;
    ``without_input``: stored days whose input files have gone (reported in the summary).
    """

    def __init__(
        self,
        state_dir: str,
        staging: str,
        spec: FitSpec,
        *,
        audit_dir: str | None = None,
        title: str = "biasboard report",
        after: Sequence[pvalue.PCollection] = (),
        min_ram: str = DEFAULT_FIT_RAM,
        without_input: DaysWithoutInput = ALL_DAYS_HAVE_INPUT,
        label: str | None = None,
    ):
        super().__init__(label)
        self._fn = FitSnapshotFn(state_dir, staging, spec, audit_dir, title, without_input)
        self._after = list(after)
        self._min_ram = min_ram

    def expand(self, committed: pvalue.PCollection) -> pvalue.PCollection:
        # One element (the count, 0 when nothing was new) once every day of this run is committed.
        ready = committed | "AllDaysCommitted" >> beam.combiners.Count.Globally()
        waits = {f"after_{i}": pvalue.AsList(pcoll) for i, pcoll in enumerate(self._after)}
        fit = beam.ParDo(self._fn, **waits).with_resource_hints(min_ram=self._min_ram)
        return ready | "FitAndStage" >> fit
