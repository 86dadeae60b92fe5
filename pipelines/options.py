"""Beam pipeline options shared by every job.

Jobs parse their own flags and pass the rest here.  Locally the runner defaults
to ``FnApiRunner``: Beam's ``DirectRunner`` first tries to download a Prism
binary, which must never happen on an offline machine.  Any runner given on the
command line (Dataflow, Flink, Spark, Portable) wins.
"""

from __future__ import annotations

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

DEFAULT_LOCAL_RUNNER = "FnApiRunner"


def beam_options(beam_args: list[str] | None) -> PipelineOptions:
    """``PipelineOptions`` from the leftover CLI args, with the local default runner."""
    options = PipelineOptions(list(beam_args or []))
    standard = options.view_as(StandardOptions)
    if not standard.runner:
        standard.runner = DEFAULT_LOCAL_RUNNER
    return options
