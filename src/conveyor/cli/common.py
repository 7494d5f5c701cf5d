"""What every operations command shares: where the storage comes from, and output.

The storage is resolved by ``conveyor.cli.source`` (``--url``, the app from ``--app`` /
``CONVEYOR_APP`` / ``pyproject.toml``, ``CONVEYOR_URL``, the default) and named on stderr in
one line; only ``Inspector`` methods (plus ``now()``) are used on it, so every command works
the same on every store. A command that only reads never creates a store. Text output goes
through ``conveyor.cli.terminal`` so job data cannot drive the terminal; errors are turned
into one line by ``conveyor.cli.main``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from conveyor.cli.source import Source, announce, resolve
from conveyor.cli.terminal import safe, say
from conveyor.client.payloads import JobData
from conveyor.core.encryption import Keys
from conveyor.errors import ConveyorError, StorageMissing
from conveyor.storage import DEFAULT_URL, Backend, open_storage

Handler = Callable[[argparse.Namespace], int]


def add_source_args(parser: argparse.ArgumentParser, *, json_flag: bool = True) -> None:
    """``--url``, ``--app`` and (for read commands) ``--json``."""
    parser.add_argument("--url", default=None,
                        help="storage URL; wins over the app's (default: the app's URL, "
                             f"else $CONVEYOR_URL, else {DEFAULT_URL})")
    parser.add_argument("--app", default=None, metavar="MODULE:ATTR",
                        help="take the storage from this conveyor app, e.g. myapp:app "
                             "(default: $CONVEYOR_APP, else [tool.conveyor] app in "
                             "pyproject.toml)")
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


def source_of(args: argparse.Namespace, *, need_app: bool = False) -> Source:
    """The store the command line, the environment and the project name (not opened)."""
    return resolve(args.url, args.app, need_app=need_app)


@contextmanager
def open_backend(args: argparse.Namespace, *, create: bool = False,
                 need_app: bool = False) -> Iterator[Backend]:
    """The storage the command line names, announced on stderr; closed on exit when this
    command opened it. Only with ``create`` (``enqueue``, ``migrate``) may a store that does
    not exist be created: otherwise it is one error line naming where the URL came from."""
    source = source_of(args, need_app=need_app)
    held = source.app.opened_storage() \
        if source.app is not None and source.app.url == source.url else None
    backend = held or open_source(source, create=create)
    announce(source, args)
    try:
        yield backend
    finally:
        if held is None:
            backend.close()


def job_data(args: argparse.Namespace) -> JobData | None:
    """The keys (and blob store) a reading command opens job data with: its app's, else
    ``$CONVEYOR_KEYS``'s; None shows sealed data as ``encrypted`` (docs/job-data.md)."""
    source = source_of(args)
    if source.app is not None and source.app.data.active:
        return source.app.data
    keys = Keys.from_env()
    return JobData(keys) if keys is not None else None


def brokered(args: argparse.Namespace) -> bool:
    """Whether a broker delivers the jobs: the app's ``broker``, else ``$CONVEYOR_BROKER``."""
    source = source_of(args)
    if source.app is not None:
        return source.app.broker_url is not None
    return bool(os.environ.get("CONVEYOR_BROKER"))


def open_source(source: Source, *, create: bool = False) -> Backend:
    """Open the store of ``source``; a missing one (when not ``create``) is one line saying
    where its URL came from and what creates it."""
    try:
        return open_storage(source.url, create=create)
    except StorageMissing as exc:
        raise StorageMissing(f"{exc}; the store from {source.origin}. This command only "
                             "reads and creates none (a worker, an enqueue or `conveyor "
                             "migrate` does)") from None


def print_json(data: Any) -> None:
    """Pretty JSON on stdout."""
    print(json.dumps(data, indent=2, sort_keys=False, default=str))


def emit(args: argparse.Namespace, view: Any, as_text: Callable[[Any], str]) -> int:
    """Print a view as JSON (``--json``) or as terminal-safe text; returns exit code 0."""
    if args.json:
        print_json(view)
    else:
        say(as_text(view))
    return 0


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain left-aligned text table; every cell escaped onto one line (``terminal.safe``)."""
    cells = [[str(h) for h in headers]] + [["" if c is None else safe(str(c)) for c in r]
                                           for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
             for row in cells]
    return "\n".join(lines)


def short(value: Any, width: int = 60) -> str:
    """A one-line, length-limited, terminal-safe rendering of any value, for tables."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    text = safe(" ".join(text.split()))
    return text if len(text) <= width else text[: width - 1] + "…"


def parse_json_arg(text: str, flag: str, kind: type) -> Any:
    """Parse a JSON command-line value and check its type, or raise one clear error.

    JSON escapes can spell text no storage can hold (``"\\ud800"``, a lone surrogate), and
    brackets can nest deeper than any decoder recurses; both are refused here, at the door.
    """
    try:
        value = json.loads(text)
    except RecursionError:
        raise ConveyorError(f"{flag} is nested too deeply to be a job argument") from None
    except ValueError as exc:
        raise ConveyorError(f"{flag} is not valid JSON ({exc}): {short(text, 80)}") from None
    if not isinstance(value, kind):
        raise ConveyorError(f"{flag} must be a JSON {'array' if kind is list else 'object'}, "
                            f"got {type(value).__name__}")
    bad = lone_surrogate_path(value, flag)
    if bad:
        raise ConveyorError(f"{bad} holds a lone surrogate, which is not text any storage "
                            "can hold (UTF-8); fix the \\uD800-\\uDFFF escape")
    return value


def lone_surrogate_path(value: Any, path: str) -> str | None:
    """Where (``--args[0]['k']``) the first string holding a lone surrogate is, or None.

    Walks with a stack, not recursion: ``value`` may nest as deep as the decoder allowed.
    """
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return where
        elif isinstance(item, list):
            stack.extend((v, f"{where}[{i}]") for i, v in reversed(list(enumerate(item))))
        elif isinstance(item, dict):
            for key, v in reversed(list(item.items())):
                if _SURROGATE.search(key):
                    return f"{where} key '{safe(key)}'"
                stack.append((v, f"{where}['{safe(key)}']"))
    return None


_SURROGATE = re.compile("[\ud800-\udfff]")
