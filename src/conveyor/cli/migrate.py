"""``conveyor migrate``: create or upgrade the storage's schema, and nothing else.

Every backend brings its storage up to date when it is opened (SQLite and PostgreSQL apply
their numbered migrations; Redis and memory have none), so a deploy step that runs this once,
with a role allowed to create tables, leaves workers nothing to change.
"""

from __future__ import annotations

import argparse
from typing import Any

from conveyor.cli.common import add_source_args, source_of
from conveyor.cli.source import announce
from conveyor.cli.terminal import say
from conveyor.storage import open_storage, shown_url


def register(sub: Any) -> None:
    """Add ``conveyor migrate``."""
    parser = sub.add_parser("migrate", help="create or upgrade the storage's tables")
    add_source_args(parser, json_flag=False)
    parser.set_defaults(func=cmd_migrate)


def cmd_migrate(args: argparse.Namespace) -> int:
    """Open the storage (which creates and migrates it) and list what that applied: numbered
    migrations, then the function files (``functions/<name>.sql``) of a store that keeps its
    functions apart and applies them when their checksum changes.

    The command opens the store itself, never the app's already open one, so that what the
    open applied is what it lists."""
    source = source_of(args)
    applied: list[str] = []
    backend = open_storage(source.url, applied=applied)
    backend.close()
    announce(source, args)
    where = shown_url(source.url)[0]
    if applied:
        say(f"applied {_counted(applied)} to {where}: {', '.join(applied)}")
    else:
        say(f"storage {where} is up to date (no migration to apply)")
    return 0


def _counted(applied: list[str]) -> str:
    """``"18 migration(s) and 30 function file(s)"``, naming only the kinds applied."""
    functions = sum(name.startswith("functions/") for name in applied)
    kinds = [f"{len(applied) - functions} migration(s)"] if functions < len(applied) else []
    if functions:
        kinds.append(f"{functions} function file(s)")
    return " and ".join(kinds)
