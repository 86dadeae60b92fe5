"""Errors a user can act on.  The CLI prints these as one line, never a traceback."""


class BiasboardError(Exception):
    """Base class: the message names the file, column or option at fault."""


class InputError(BiasboardError):
    """An input file is missing, unreadable, empty, or lacks a required column."""


class StateError(BiasboardError):
    """The state or output folder is not what a job expects (missing snapshot, foreign files)."""


def recover_user_error(err: BaseException) -> BiasboardError | None:
    """The BiasboardError behind ``err``, however a runner wrapped it (cause chain, or only its text).

    A worker's error reaches the launching process wrapped by the runner, often
    as a RuntimeError whose message is the worker's traceback; the CLI wants
    the user's one-line message back.
    """
    import re

    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, BiasboardError):
            return seen
        seen = seen.__cause__ or seen.__context__
    found = re.search(r"(InputError|StateError): (.+)", str(err))
    if found:
        cls = InputError if found.group(1) == "InputError" else StateError
        return cls(found.group(2).strip())
    return None
