"""Beam composites and DoFns.  Imported by every SDK worker that runs one of them, so this is where a
worker process stops printing the tracebacks of user errors and bounds its GCS requests
(:mod:`biasboard.transforms.worker`)."""

from biasboard.transforms.worker import prepare_worker_process

prepare_worker_process()
