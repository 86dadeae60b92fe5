"""Errors a user can act on.  The CLI prints these as one line, never a traceback."""

from __future__ import annotations

import re
from collections.abc import Iterator


class BiasboardError(Exception):
    """Base class: the message names the file, column or option at fault."""


class InputError(BiasboardError):
    """An input file is missing, unreadable, empty, or lacks a required column."""


class StateError(BiasboardError):
    """The state or output folder is not what a job expects (missing snapshot, foreign files)."""


class BucketUnreachable(StateError):
    """A job's bucket probe found no answer: refused before any work, in the probe's own line (which flag, which
    bucket), not rewritten as storage lost mid-run with what the run left."""


class StorageUnreachable(StateError):
    """Storage stopped answering: nothing is known to be wrong with what it holds, it could not be reached.

    Says where (``endpoint``, the ``path`` being read or written), why (``reason``: ``Connection refused``, ``no
    answer within 20 s``, ``cannot resolve host H: ...``) and for how long (``seconds`` since the first request that
    got no answer; None when nothing was waited out: a host name that does not exist is not retried), as
    :mod:`biasboard.transforms.gcs_requests` found;
    ``consequence``: what the job left behind (``nothing was published ...``), added by the job step that met it
    (:func:`biasboard.transforms.storage.if_unreachable`).  Every reader that would take a failed read for a
    missing or broken file lets this through (:func:`raise_if_unreachable`), so the one line a job prints says
    "unreachable", never "corrupt".
    """

    def __init__(self, endpoint: str, path: str, reason: str, seconds: float | None, consequence: str = "") -> None:
        self.endpoint, self.path, self.reason, self.seconds = endpoint, path, reason, seconds
        self.consequence = consequence
        reach = f"cannot reach storage at {endpoint} for {path} ({self.why})"
        # One argument, the message, as Beam expects of an error it re-raises with the step's name appended
        # (it then cannot rebuild this one, and hands on its text, which storage_unreachable reads back).
        super().__init__(f"{reach}: {consequence}" if consequence else reach)

    @property
    def why(self) -> str:
        """The reason, and how long nothing answered when that was waited out: ``Connection refused; no answer for
        31 s`` (the text between the message's parentheses, which :func:`storage_unreachable` reads back)."""
        plain = re.sub(r"[();\s]+", " ", self.reason).strip() or "no answer"
        return plain if self.seconds is None else f"{plain}; no answer for {self.seconds:.0f} s"

    def __reduce__(self):  # pickled (a worker's error) by its fields, not by its one message argument
        return StorageUnreachable, (self.endpoint, self.path, self.reason, self.seconds, self.consequence)

    def having(self, consequence: str) -> StorageUnreachable:
        """This error saying ``consequence``, unless it already says one (the innermost job step knows best)."""
        return self._with(consequence=self.consequence or consequence)

    def after(self, done: str) -> StorageUnreachable:
        """This error saying that ``done`` was done before the step whose consequence it says (a refresh's plan:
        the snapshot was published, then the plan's own step says what it left)."""
        return self._with(consequence=f"{done}; {self.consequence}" if self.consequence else done)

    def about(self, path: str) -> StorageUnreachable:
        """This error naming ``path``: what the caller was reading or writing (a resumable upload's requests
        name no object, a listing's only its prefix)."""
        return self._with(path=path)

    def _with(self, **changes: str) -> StorageUnreachable:
        fields = {"endpoint": self.endpoint, "path": self.path, "reason": self.reason, "consequence": self.consequence}
        fields.update(changes)
        return StorageUnreachable(seconds=self.seconds, **fields)


#: How :class:`StorageUnreachable` reads in a runner's text of a worker's traceback (or a wrapper's message).
_UNREACHABLE_TEXT = re.compile(
    r"cannot reach storage at (?P<endpoint>\S+) for (?P<path>.+?) "
    r"\((?P<reason>[^()]*?)(?:; no answer for (?P<seconds>\d+) s)?\)"
)


def storage_unreachable(err: BaseException) -> StorageUnreachable | None:
    """The :class:`StorageUnreachable` behind ``err``: in its cause chain, in a Beam I/O error's per-path
    exceptions, or only in the text of a runner's wrapper (a worker's traceback); None when storage was reached."""
    related = list(_related(err))
    for seen in related:
        if isinstance(seen, StorageUnreachable):
            return seen
    for seen in related:
        found = _UNREACHABLE_TEXT.search(str(seen))
        if found:
            parts = found.groupdict()
            seconds = None if parts["seconds"] is None else float(parts["seconds"])
            return StorageUnreachable(parts["endpoint"], parts["path"], parts["reason"], seconds)
    return None


def raise_if_unreachable(err: BaseException, path: str | None = None) -> None:
    """Raise the :class:`StorageUnreachable` behind ``err``, if any (naming ``path`` when given: what the caller
    was reading or writing, which the failed request may not name).

    For a caller about to take a failed read for "missing", "empty" or "a broken cache": storage that could
    not be reached is none of those, and guessing on would only hit the outage again under another name.
    """
    found = storage_unreachable(err)
    if found is None:
        return
    if path is None:
        raise found
    raise found.about(path) from err


def _related(err: BaseException) -> Iterator[BaseException]:
    """``err``, its causes and contexts, and the per-path errors a Beam I/O error holds, each once."""
    todo, seen = [err], set()
    while todo:
        current = todo.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        todo += [e for e in (current.__cause__, current.__context__) if e is not None]
        details = getattr(current, "exception_details", None)  # BeamIOError: {path: exception}
        if isinstance(details, dict):
            todo += [e for e in details.values() if isinstance(e, BaseException)]


def recover_user_error(err: BaseException) -> BiasboardError | None:
    """The BiasboardError behind ``err``, however a runner wrapped it (cause chain, or only its text).

    A worker's error reaches the launching process wrapped by the runner, often
    as a RuntimeError whose message is the worker's traceback; the CLI wants
    the user's one-line message back.  Unreachable storage comes first: a reader
    that met it may have wrapped it in its own "cannot read" error.
    """
    unreachable = storage_unreachable(err)
    if unreachable is not None:
        return unreachable
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, BiasboardError):
            return _without_beam_steps(seen)
        seen = seen.__cause__ or seen.__context__
    found = re.search(r"(InputError|StateError): (.+)", str(err))
    if found:
        cls = InputError if found.group(1) == "InputError" else StateError
        return cls(_BEAM_STEPS.sub("", found.group(2).strip()))
    return None


#: What Beam appends to an error raised in a step, once per enclosing step: `` [while running 'Fit/Stage']``.
_BEAM_STEPS = re.compile(r"(?: \[while running '[^\]]*'\])+$")


def _without_beam_steps(err: BiasboardError) -> BiasboardError:
    """``err`` as the job step raised it: Beam re-raises an error from a step as a new one of the same class whose
    message ends in the step's name, which the user's one line does not need (the message names the flag or
    file at fault).  StorageUnreachable never gets here (:func:`storage_unreachable` rebuilds it from its text)."""
    message = str(err)
    plain = _BEAM_STEPS.sub("", message)
    if plain == message:
        return err
    return type(err)(plain)
