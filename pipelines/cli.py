"""The ``biasboard`` console script: one subcommand per job.

Each subcommand lives in its own module under ``biasboard.pipelines`` exposing
``add_arguments(parser)`` and ``run(args, beam_args) -> int``.  Modules are
imported only when their command runs, so ``biasboard --help`` stays fast and a
command never pays for another's imports.  Everything after the job's own flags
that it does not know (``--runner``, ``--project``, ``--setup_file`` ...) is
handed to Beam's ``PipelineOptions`` untouched.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from typing import NoReturn

from biasboard.pipelines.options import stray_arguments, unknown_options
from biasboard.schemas.errors import BiasboardError, InputError, recover_user_error, storage_unreachable
from biasboard.schemas.wording import first_few

from biasboard import hand_back_polars_memory

#: command name → (module under biasboard.pipelines, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "simulate": ("simulate", "write day-partitioned synthetic battle logs and truth.json"),
    "import": ("import_formats", "convert other tools' formats to biasboard's battle Parquet"),
    "backfill": ("backfill", "aggregate a date range of battle logs into per-day cells"),
    "refresh": ("refresh", "aggregate new days, merge cells, fit, publish a snapshot"),
    "export": ("export", "write a published snapshot's rankings elsewhere"),
    "audit": ("audit", "judge audit: order, length, self-preference, gold labels"),
    "plan": ("plan", "the next comparisons to run (top-k-aware)"),
    "demo": ("demo", "simulate + refresh in a temp folder and print the leaderboards"),
}

#: Commands whose work keeps what it frees for the next day (forked day workers), rather than handing it back
#: to the system between stages (:func:`biasboard.hand_back_polars_memory`).
KEEPS_FREED_MEMORY = frozenset({"backfill"})


def _load(command: str):
    module_name, _ = COMMANDS[command]
    return importlib.import_module(f"biasboard.pipelines.{module_name}")


class OneLineParser(argparse.ArgumentParser):
    """argparse's parser, whose errors (a missing required flag, a value not among the choices) are one line, as
    every other refusal is: argparse printed its usage block (3 to 17 lines) above the message."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The top-level parser; only ``command``'s module is imported to add its flags."""
    parser = OneLineParser(
        prog="biasboard",
        description="Bias-corrected leaderboards from LLM-judge battle logs, on Apache Beam.",
        epilog="Standard Beam pipeline options (--runner, --project, --region, ...) may follow a job's own.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug detail")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (_, help_text) in COMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        # ``biasboard refresh ... -v`` as well as ``biasboard -v refresh ...`` (it was dropped after the command)
        sub_parser.add_argument(
            "-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="log debug detail"
        )
        if name == command:
            _load(name).add_arguments(sub_parser)
    return parser


def _hide_user_error_tracebacks(record: logging.LogRecord) -> bool:
    """Drop a runner's log of a worker's traceback when the error is one the user acts on.

    Beam logs every exception raised in a DoFn with its full traceback before it
    reaches the launcher; for a :class:`BiasboardError` (bad input, an unwritable
    folder) the CLI prints the one-line message itself, so the traceback would
    only bury it.  Any other error (a bug) keeps its traceback.  ``-v`` shows all.
    Worker processes (``--direct_running_mode=multi_processing``, a portable
    runner) relay the traceback as the text of a Beam log record instead.
    """
    error = record.exc_info[1] if record.exc_info else None
    if error is None and record.name.startswith("apache_beam") and record.levelno >= logging.ERROR:
        error = RuntimeError(record.getMessage())  # a relayed worker log: the error's name is in its text
    return error is None or recover_user_error(error) is None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if a in COMMANDS), None)
    if command not in KEEPS_FREED_MEMORY:  # before the command's module imports polars
        hand_back_polars_memory()
    parser = build_parser(command)
    try:
        args, beam_args = parser.parse_known_args(argv)
    except BiasboardError as err:  # a flag's value refused as it is read (validation.NumberRule)
        return _refused(command, err)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose:  # Beam's INFO chatter (type-hint conversions, caches) drowns the job's own progress
        logging.getLogger("apache_beam").setLevel(logging.WARNING)
        for handler in logging.getLogger().handlers:
            handler.addFilter(_hide_user_error_tracebacks)
    try:
        unknown = unknown_options(beam_args)
        if unknown:
            flags = " ".join(unknown)
            raise InputError(f"unrecognised option(s) {flags}: neither a {args.command} flag nor a Beam option")
        stray = stray_arguments(beam_args)
        if stray:
            raise InputError(
                f"unexpected argument(s) {first_few(stray, 3)}: each flag takes one value (an unquoted glob is "
                "expanded by the shell into many: quote it, e.g. --input 'logs/day=*/*.parquet')"
            )
        return int(_load(args.command).run(args, beam_args) or 0)
    except BiasboardError as err:
        return _refused(args.command, err)
    except Exception as err:  # storage lost where no job step said what it left: still one line, not a traceback
        unreachable = storage_unreachable(err)
        if unreachable is None:
            raise
        return _refused(args.command, unreachable)


def _refused(command: str | None, error: object) -> int:
    """Say why ``command`` refused to run, in one line on stderr; exit code 2 (every user error)."""
    print(f"biasboard {command}: error: {error}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
