"""``conveyor`` entry point: each sub-command lives in its own module with a ``register``.

A module in ``COMMANDS`` exposes ``register(subparsers)``, which adds its parser and sets
``func`` (taking the parsed args, returning the exit code) with ``parser.set_defaults``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from conveyor import __version__
from conveyor.errors import ConveyorError

COMMANDS = (
    "conveyor.cli.worker",
    "conveyor.cli.stats",
    "conveyor.cli.jobs",
    "conveyor.cli.workers",
    "conveyor.cli.batches",
    "conveyor.cli.periodic",
    "conveyor.cli.enqueue",
    "conveyor.cli.serve",
)


def build_parser() -> argparse.ArgumentParser:
    """The full parser with every sub-command registered."""
    parser = argparse.ArgumentParser(prog="conveyor", description="conveyor background jobs")
    parser.add_argument("--version", action="version", version=f"conveyor {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; errors conveyor understands print one line and exit 2."""
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except ConveyorError as exc:
        print(f"conveyor: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
