"""Beam pipeline options shared by every job.

Jobs parse their own flags and pass the rest here.  Locally the runner defaults
to ``FnApiRunner``: Beam's ``DirectRunner`` first tries to download a Prism
binary, which must never happen on an offline machine.  Any runner given on the
command line (Dataflow, Flink, Spark, Portable) wins.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
from collections.abc import Sequence
from dataclasses import asdict, fields
from typing import Any, TypeVar

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from biasboard.schemas.errors import InputError
from biasboard.transforms import storage

DEFAULT_LOCAL_RUNNER = "FnApiRunner"


def beam_options(beam_args: list[str] | None, validate: bool = False) -> PipelineOptions:
    """``PipelineOptions`` from the leftover CLI args, with the local default runner.

    ``validate``: a job that builds a pipeline also checks the options its runner requires (Beam's validator, run
    again by ``Pipeline()``), so that they are refused in one line before any work rather than in a traceback."""
    options = PipelineOptions(list(beam_args or []))
    standard = options.view_as(StandardOptions)
    if not standard.runner:
        standard.runner = DEFAULT_LOCAL_RUNNER
    _check_runner(standard.runner, options if validate else None)
    return options


def _check_runner(name: str, options: PipelineOptions | None = None) -> None:
    """Refuse a runner Beam does not know (or cannot load here) in one line, before any work: Beam says so from
    inside ``Pipeline()``, in a traceback (``--runner NoSuchRunner``); likewise the options that runner requires
    and lacks (``--runner DataflowRunner`` without ``--project``), which Beam's validator finds there too."""
    from apache_beam.options.pipeline_options_validator import PipelineOptionsValidator
    from apache_beam.runners.runner import create_runner

    try:
        runner = create_runner(name)
    except (ValueError, ImportError) as err:
        raise InputError(f"--runner {name}: {err}") from None
    if options is not None:
        errors = [e.strip() for e in PipelineOptionsValidator(options, runner).validate() if e.strip()]
        if errors:
            raise InputError(f"--runner {name}: {'; '.join(errors)}")


def _beam_parse(beam_args: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Beam's reading of ``beam_args``: (every option with the unknown ones kept, the known ones); a value its parser
    refuses (``--direct_running_mode=multiprocessing``) is an InputError in one line, not argparse's usage of every
    Beam option and an exit."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            options = PipelineOptions(list(beam_args))
            return options.get_all_options(retain_unknown_options=True), options.get_all_options()
    except SystemExit:
        lines = [line for line in err.getvalue().splitlines() if line.strip()]
        raise InputError(lines[-1].split("error: ", 1)[-1] if lines else "invalid Beam option") from None


Options = TypeVar("Options")


#: What an input flag given twice says: the glob that reads several folders in one input.
SEVERAL_INPUTS = (
    "one input per flag: to read several folders give one glob that matches them all (e.g. 'imp/*/battles')"
)


class GivenOnce(argparse.Action):
    """Store an input flag's value, and refuse it given twice in one line (exit 2, as every user error).

    Why: argparse keeps the last of a repeated flag, so ``--input imp/a --input imp/b`` read imp/b alone and
    published a board without imp/a's rows, without a word.  Folders side by side are one glob
    (:func:`biasboard.transforms.read.resolve_input`).  A path with one slash after its scheme (``gs:/bucket/x``) is
    refused as it is read (:func:`biasboard.transforms.storage.check_scheme_slashes`).
    """

    #: What the refusal advises.
    advice = SEVERAL_INPUTS

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        if isinstance(values, str):  # (a path: ``--input gs:/bucket/x`` was read as a local folder "gs:")
            storage.check_scheme_slashes(values, option_string)
        given: dict[str, object] = vars(namespace).setdefault("_given_once", {})
        if self.dest in given:
            twice = f"{option_string} given twice ({given[self.dest]}, then {values})"
            parser.exit(2, f"{parser.prog}: error: {twice}: {self.advice}\n")
        given[self.dest] = values
        setattr(namespace, self.dest, values)


class OneFolder(GivenOnce):
    """A folder a job writes (``--state``, ``--out``, ``--to``), refused given twice as an input flag is: argparse kept
    the last, so a command line that named two wrote to one of them without a word."""

    advice = "a job writes one folder per flag: give it once"


class OneFile(GivenOnce):
    """A rules file a job reads (``--family-map``, ``--aliases``), refused given twice: argparse kept the last, so
    ``--family-map a.json --family-map b.json`` applied b's rules alone, a's dropped without a word."""

    advice = "a job reads one rules file per flag: merge the rules into one file"


def defaults_from(parser: argparse.ArgumentParser, options: Any) -> None:
    """Every flag's default from a job's options dataclass (one place): each flag's ``dest`` is its field.

    The flags themselves give no ``default=``; help texts say ``%(default)s``, so they show these values.
    """
    parser.set_defaults(**asdict(options))


def options_from(cls: type[Options], args: argparse.Namespace) -> Options:
    """The job's options dataclass ``cls`` from the parsed flags (the fields' names are the flags' dests)."""
    return cls(**{f.name: getattr(args, f.name) for f in fields(cls)})  # type: ignore[arg-type]


def unknown_options(beam_args: list[str] | None) -> list[str]:
    """The flags in ``beam_args`` that are no Beam pipeline option either, as the user spelled them.

    Jobs hand Beam whatever they do not parse themselves, and Beam only logs and
    drops what it does not know: a misspelt job flag (``--family-map`` where the
    job says ``--families``) would silently do nothing.  The CLI refuses them.
    """
    if not beam_args:
        return []
    beam_log = logging.getLogger("apache_beam.options.pipeline_options")
    level = beam_log.level
    beam_log.setLevel(logging.ERROR)  # Beam warns "Discarding unparseable args"; we say it better below
    try:
        every, known = _beam_parse(beam_args)
        unknown = set(every) - set(known)
    finally:
        beam_log.setLevel(level)
    # Beam has no one-dash options: ``-x`` after the job's flags was dropped without a word (Beam's parser keeps it
    # as an unknown ``x`` only when no value follows it).
    return [
        f
        for f in beam_args
        if (f.startswith("--") and f[2:].split("=", 1)[0].replace("-", "_") in unknown)
        or (len(f) > 1 and f[0] == "-" and f[1].isalpha())
    ]


def stray_arguments(beam_args: list[str] | None) -> list[str]:
    """The words in ``beam_args`` that are no flag and no value of the Beam flag before them.

    Why: an unquoted glob (``--input logs/day=*/*.parquet``) is expanded by the shell, ``--input`` takes the first
    file and the others were left over, unread and unsaid (with ``--drop-missing-days`` the refresh then dropped
    every other stored day).  A word is a value when Beam reads it as the preceding flag's (``--runner
    DataflowRunner``, ``--experiments a``), not after a switch (``--save_main_session x``)."""
    if not beam_args:
        return []
    stray = []
    for i, word in enumerate(beam_args):
        if word.startswith("-"):
            continue
        flag = beam_args[i - 1] if i else ""
        if flag.startswith("--") and "=" not in flag:
            name = flag[2:].replace("-", "_")
            value = PipelineOptions([flag, word]).get_all_options(retain_unknown_options=True).get(name)
            if value == word or (isinstance(value, list) and word in value) or _typed_value(value, word):
                continue
        stray.append(word)
    return stray


def _typed_value(value: object, word: str) -> bool:
    """Whether ``value`` is ``word`` read by a typed Beam flag (``--direct_num_workers 2`` gives the int 2): a switch's
    True is never its next word's value."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return float(word) == value
    except ValueError:
        return False
