"""``conveyor migrate``: create or upgrade the storage's schema, and nothing else.

Every backend brings its storage up to date when it is opened (SQLite and PostgreSQL apply
their numbered migrations; Redis and memory have none), so a deploy step that runs this once,
with a role allowed to create tables, leaves workers nothing to change.
"""

from __future__ import annotations

import argparse
from typing import Any

from conveyor.cli.common import add_source_args, open_backend
from conveyor.cli.terminal import say
from conveyor.storage import redact


def register(sub: Any) -> None:
    """Add ``conveyor migrate``."""
    parser = sub.add_parser("migrate", help="create or upgrade the storage's tables")
    add_source_args(parser, json_flag=False)
    parser.set_defaults(func=cmd_migrate)


def cmd_migrate(args: argparse.Namespace) -> int:
    """Open the storage (which migrates it) and say so."""
    with open_backend(args) as backend:
        say(f"storage {redact(backend.url)} is up to date")
    return 0
