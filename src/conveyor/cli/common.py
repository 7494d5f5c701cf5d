"""What every operations command shares: where the storage comes from, output, errors.

The storage comes from ``--url`` / ``CONVEYOR_URL`` (default ``sqlite:///conveyor.db``) or from
an application object named by ``--app module:attribute``; only ``Inspector`` methods (plus
``now()``) are used on it, so every command works the same on SQLite, Redis and memory.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import sqlite3
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from conveyor.cli.worker import load_app
from conveyor.errors import ConveyorError, StorageUnavailable
from conveyor.storage import DEFAULT_URL, Backend, open_storage, redact

Handler = Callable[[argparse.Namespace], int]


def add_source_args(parser: argparse.ArgumentParser, *, json_flag: bool = True) -> None:
    """``--url``, ``--app`` and (for read commands) ``--json``."""
    parser.add_argument("--url", default=None,
                        help=f"storage URL (default: $CONVEYOR_URL or {DEFAULT_URL})")
    parser.add_argument("--app", default=None, metavar="MODULE:ATTR",
                        help="take the storage from this conveyor app, e.g. myapp:app")
    if json_flag:
        parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def add_pause_resume(sub: Any, helps: tuple[str, str], func: Handler, *, dest: str,
                     metavar: str, force_help: str | None = None) -> None:
    """Add ``pause`` and ``resume`` subcommands taking one or more names into ``dest``.

    ``helps`` is the pause help then the resume help; ``func`` sees ``args.action``. With
    ``force_help``, both take ``--force`` (``args.force``) with that help.
    """
    for action, helptext in zip(("pause", "resume"), helps, strict=True):
        parser = sub.add_parser(action, help=helptext)
        parser.add_argument(dest, nargs="+", metavar=metavar, help=f"one or more {metavar} names")
        if force_help is not None:
            parser.add_argument("--force", action="store_true", help=force_help)
        add_source_args(parser, json_flag=False)
        parser.set_defaults(func=func, action=action)


def storage_url(args: argparse.Namespace) -> str:
    """The URL from ``--url``, else ``CONVEYOR_URL``, else the SQLite default."""
    return str(args.url or os.environ.get("CONVEYOR_URL") or DEFAULT_URL)



@contextmanager
def open_backend(args: argparse.Namespace) -> Iterator[Backend]:
    """The storage the command line names; closed on exit when this command opened it."""
    if args.app:
        yield load_app(args.app).storage
        return
    backend = open_storage(storage_url(args))
    try:
        yield backend
    finally:
        backend.close()


def guarded(func: Handler) -> Handler:
    """Turn low-level connection errors into one clear ``StorageUnavailable`` line."""

    @functools.wraps(func)
    def wrapper(args: argparse.Namespace) -> int:
        try:
            code = func(args)
            sys.stdout.flush()  # a closed pipe shows here, not at exit
            return code
        except BrokenPipeError:
            return quiet_broken_pipe()
        except ConveyorError:
            raise
        except (OSError, sqlite3.Error) as exc:
            where = redact(storage_url(args)) if not args.app else f"the storage of {args.app}"
            raise StorageUnavailable(f"cannot use {where}: {exc}") from exc
        except Exception as exc:
            # redis-py's ConnectionError/TimeoutError are not OSError subclasses; naming them
            # here keeps redis an optional import.
            if type(exc).__name__ in ("ConnectionError", "TimeoutError", "AuthenticationError"):
                where = redact(storage_url(args))
                raise StorageUnavailable(f"cannot reach {where}: {exc}") from exc
            raise

    return wrapper


def quiet_broken_pipe() -> int:
    """The reader of stdout went away (``conveyor … | head``): exit quietly, as Unix tools do.

    stdout is pointed at /dev/null so the interpreter's last flush cannot complain; the
    exit code is the shell's for a death by SIGPIPE.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + signal.SIGPIPE


def print_json(data: Any) -> None:
    """Pretty JSON on stdout."""
    print(json.dumps(data, indent=2, sort_keys=False, default=str))


def emit(args: argparse.Namespace, view: Any, as_text: Callable[[Any], str]) -> int:
    """Print a view as JSON (``--json``) or as text; returns exit code 0."""
    if args.json:
        print_json(view)
    else:
        print(as_text(view))
    return 0


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain left-aligned text table."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
             for row in cells]
    return "\n".join(lines)


def short(value: Any, width: int = 60) -> str:
    """A one-line, length-limited rendering of any value, for tables."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def parse_json_arg(text: str, flag: str, kind: type) -> Any:
    """Parse a JSON command-line value and check its type, or raise one clear error."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ConveyorError(f"{flag} is not valid JSON ({exc}): {text!r}") from None
    if not isinstance(value, kind):
        raise ConveyorError(f"{flag} must be a JSON {'array' if kind is list else 'object'}, "
                            f"got {type(value).__name__}")
    return value
