"""Beam composites and DoFns.  Imported by every SDK worker that runs one of them, so this is where a
worker process stops printing the tracebacks of user errors (:mod:`biasboard.transforms.worker`)."""

from biasboard.transforms.worker import quiet_user_error_tracebacks

quiet_user_error_tracebacks()
