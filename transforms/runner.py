"""Running a built pipeline from a launcher: wait for it, hand back the user's error, read its counters.

Every job that runs a pipeline and waits for it does the same three things; they
live here once.  A worker's :class:`~biasboard.schemas.errors.InputError` comes
back to the launching process wrapped by the runner (often as a RuntimeError
holding the worker's traceback); the CLI wants the one-line message back.
"""

from __future__ import annotations

import logging

import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.runners.runner import PipelineResult
from biasboard.schemas.errors import recover_user_error

_LOG = logging.getLogger(__name__)


def run_to_completion(pipeline: beam.Pipeline) -> PipelineResult:
    """Run ``pipeline`` and wait for it; a worker's user error is re-raised as itself."""
    try:
        outcome = pipeline.run()
        outcome.wait_until_finish()
    except Exception as err:
        user = recover_user_error(err)
        if user is not None:
            raise user from err
        raise
    return outcome


def counters(outcome: PipelineResult, namespace: str) -> dict[str, int]:
    """The committed Beam counters of ``namespace`` by name (empty when the runner reports none)."""
    found: dict[str, int] = {}
    try:
        for counter in outcome.metrics().query(MetricsFilter().with_namespace(namespace))["counters"]:
            found[counter.key.metric.name] = found.get(counter.key.metric.name, 0) + int(counter.committed or 0)
    except Exception:  # some runners do not report metrics; the manifests hold the same counts
        _LOG.debug("no metrics from the runner", exc_info=True)
    return found
