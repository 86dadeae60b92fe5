"""Errors a user can act on.  The CLI prints these as one line, never a traceback."""


class BiasboardError(Exception):
    """Base class: the message names the file, column or option at fault."""


class InputError(BiasboardError):
    """An input file is missing, unreadable, empty, or lacks a required column."""


class StateError(BiasboardError):
    """The state or output folder is not what a job expects (missing snapshot, foreign files)."""
