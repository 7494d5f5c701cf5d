"""``conveyor`` entry point: each sub-command lives in its own module with a ``register``.

A module in ``COMMANDS`` exposes ``register(subparsers)``, which adds its parser and sets
``func`` (taking the parsed args, returning the exit code) with ``parser.set_defaults``.

Errors never print a traceback: ``error_line`` is the one place that turns an exception into
the one line ``conveyor: error: …`` (exit 2), and anything it does not know becomes one line
naming the exception type (exit 1). ``--debug`` or ``CONVEYOR_DEBUG=1`` adds the traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import select
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn

from conveyor import __version__
from conveyor.cli.apps import UserCodeError
from conveyor.cli.source import Source
from conveyor.cli.terminal import safe
from conveyor.errors import ConveyorError
from conveyor.storage import DEFAULT_URL, redact, url_secrets, without_secrets

COMMANDS = (
    "conveyor.cli.worker",
    "conveyor.cli.stats",
    "conveyor.cli.scaling",
    "conveyor.cli.jobs",
    "conveyor.cli.workers",
    "conveyor.cli.breakers",
    "conveyor.cli.batches",
    "conveyor.cli.workflows",
    "conveyor.cli.periodic",
    "conveyor.cli.enqueue",
    "conveyor.cli.serve",
    "conveyor.cli.migrate",
    "conveyor.cli.dev",
    "conveyor.cli.compat",
)

EXIT_ERROR = 2  # an error conveyor understands: bad input, storage unreachable, unknown id
EXIT_INTERNAL = 1  # an exception nobody expected (a bug): what Python itself would exit with
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # as if killed by SIGPIPE, what `| head` expects of a command


class Parser(argparse.ArgumentParser):
    """argparse, whose usage errors never show a credential from the command line: a URL
    given where none was expected (``conveyor stats postgresql://u:pw@h/db``) is quoted back
    in "unrecognized arguments". Sub-command parsers are of this class too."""

    #: The credentials of every URL on the command line being parsed (set by ``main``).
    secrets: tuple[str, ...] = ()

    def error(self, message: str) -> NoReturn:
        """Print the usage and the message, masked, and exit 2."""
        message = without_secrets(_URL.sub(lambda m: redact(m.group()), message), "",
                                  Parser.secrets)
        super().error(message)


_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"]+")


def build_parser() -> argparse.ArgumentParser:
    """The full parser with every sub-command registered."""
    parser = Parser(prog="conveyor", description="conveyor background jobs")
    parser.add_argument("--version", action="version", version=f"conveyor {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="print the traceback of an error (also CONVEYOR_DEBUG=1)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(name).register(sub)
    _add_debug_everywhere(parser)
    return parser


def _add_debug_everywhere(parser: argparse.ArgumentParser) -> None:
    """Accept ``--debug`` after the sub-command too; SUPPRESS keeps a top-level one."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in set(action.choices.values()):
                child.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                                   help=argparse.SUPPRESS)
                _add_debug_everywhere(child)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; every error ends as one line on stderr and a non-zero exit code."""
    words = sys.argv[1:] if argv is None else list(argv)
    Parser.secrets = tuple(s for word in words if "://" in word for s in url_secrets(word))
    args = build_parser().parse_args(argv)
    debug = bool(getattr(args, "debug", False)) or os.environ.get("CONVEYOR_DEBUG") == "1"
    try:
        code: int = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, not in Python's flush at exit
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError as exc:
        if _stdout_is_broken():
            return _reader_went_away()
        return _report(exc, args, debug)  # a pipe of the storage's, not ours
    except Exception as exc:
        return _report(exc, args, debug)
    return code


def _report(exc: Exception, args: argparse.Namespace, debug: bool) -> int:
    if debug:
        traceback.print_exception(exc)
    elif isinstance(exc, UserCodeError):  # the user's own code: its traceback is theirs
        print("\n".join(safe(line) for line in exc.trace.rstrip("\n").split("\n")),
              file=sys.stderr)
    code, line = error_line(exc, where(args))
    print(f"conveyor: {safe(line)}", file=sys.stderr)
    return code


def _stdout_is_broken() -> bool:
    """Whether stdout's reader is gone: poll reports an error on a pipe without readers.

    A ``BrokenPipeError`` may also come from a storage connection; only ours is silenced.
    """
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError):  # closed, or not a real file (a test's capture)
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def where(args: argparse.Namespace) -> str:
    """The storage the command used, password masked, for error messages: the one it
    announced, else the one its flags name."""
    source = getattr(args, "source", None)
    if isinstance(source, Source):
        return redact(source.url)
    url = getattr(args, "url", None) or os.environ.get("CONVEYOR_URL")
    app = getattr(args, "app", None)
    if app and not url:
        return f"the storage of {app}"
    return redact(str(url or DEFAULT_URL))


def error_line(exc: BaseException, source: str) -> tuple[int, str]:
    """The exit code and the one line (after ``conveyor: ``) that an exception is shown as.

    ``source`` names the storage (password masked) for an ``OSError`` met on the way to it.
    Every backend reports its own failures as ``StorageError``/``StorageUnavailable`` (a
    ``ConveyorError``) whose message names the storage, so no backend is known here.
    """
    text = str(exc) or type(exc).__name__
    if isinstance(exc, ConveyorError):
        return EXIT_ERROR, f"error: {text}"
    if isinstance(exc, RecursionError):
        return EXIT_ERROR, f"error: a value is nested too deeply: {text}"
    if isinstance(exc, UnicodeError):
        return EXIT_ERROR, f"error: text that cannot be stored as UTF-8: {text}"
    if isinstance(exc, OSError):
        return EXIT_ERROR, f"error: cannot use {source}: {text}"
    return EXIT_INTERNAL, (f"internal error: {type(exc).__name__}: {text} "
                           "(run with --debug or CONVEYOR_DEBUG=1 for the traceback)")


def _reader_went_away() -> int:
    """stdout's reader closed the pipe (``| head``): stop quietly, as ``cat`` would.

    Python would also report the failed flush of stdout at exit; pointing stdout at
    /dev/null first makes that flush succeed.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a real file (a test's capture)
        pass
    return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
