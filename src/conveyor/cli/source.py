"""Which store a command uses, where that choice came from, and the one line saying so.

In order (docs/operations.md, "Choosing the storage"):

1. ``--url URL``: it wins, also over an app named beside it (the line says so);
2. the app (``--app``, ``$CONVEYOR_APP`` or ``[tool.conveyor] app`` in ``pyproject.toml``,
   ``conveyor.cli.apps``): its URL, which is its ``Conveyor(url)``, else ``$CONVEYOR_URL``,
   else the default;
3. ``$CONVEYOR_URL``;
4. the default, ``sqlite:///conveyor.db`` in the current directory.

The worker (``conveyor worker``) takes the same order, so a worker and the commands of one
project read one store without a flag. Every command prints ``conveyor: store URL (from
…)`` on stderr — credentials masked, a relative file path made absolute — so two processes
started in different directories cannot use two stores without a word.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass

from conveyor.app import Conveyor
from conveyor.cli.apps import AppSpec, find_app, load_app
from conveyor.cli.terminal import safe
from conveyor.storage import DEFAULT_URL, redact, shown_url

__all__ = ["Source", "announce", "app_source", "resolve"]


@dataclass(frozen=True)
class Source:
    """The store a command uses: its URL, where the URL came from, and the app if one was
    loaded (``enqueue`` needs its registered jobs)."""

    url: str
    origin: str
    app: Conveyor | None = None

    def line(self) -> str:
        """``store sqlite:////srv/app/conveyor.db (the default: ...; relative to ...)``."""
        shown, relative = shown_url(self.url)
        note = "; a path relative to the current directory" if relative else ""
        return f"store {shown} (from {self.origin}{note})"


def resolve(url: str | None, app: str | None, *, need_app: bool = False) -> Source:
    """The store named by ``--url`` / ``--app`` (None when not given), the environment and
    the project; ``need_app`` loads the app even beside ``--url``."""
    if url and not app and not need_app:  # the project's app is not even looked for
        return Source(url, "--url")
    spec = find_app(app)
    if url and spec is None:
        return Source(url, "--url")
    if spec is not None:
        return app_source(spec, load_app(spec.spec, spec.root), url)
    env = os.environ.get("CONVEYOR_URL")
    if env:
        return Source(env, "CONVEYOR_URL")
    return Source(DEFAULT_URL, "the default: no --url, no app, no CONVEYOR_URL")


def app_source(spec: AppSpec, app: Conveyor, url: str | None) -> Source:
    """The store of a loaded app: ``url`` (``--url``) when given, which wins and says over
    what; else the app's URL, saying where the app's URL came from."""
    if url:
        over = f", over the app {spec.spec}'s {redact(app.url)}" if app.url != url else ""
        return Source(url, f"--url{over}", app)
    return Source(app.url, f"{_named(spec)}, {_url_from(app)}", app)


def _named(spec: AppSpec) -> str:
    if spec.origin == "--app":
        return f"--app {spec.spec}"
    if spec.origin == "the command line":
        return f"the app {spec.spec} named on the command line"
    return f"the app {spec.spec} named by {spec.origin}"


def _url_from(app: Conveyor) -> str:
    return {"the app": "the app's own URL", "CONVEYOR_URL": "the app's URL from CONVEYOR_URL"
            }.get(app.url_from, "the app's default URL")


def announce(source: Source, args: argparse.Namespace | None = None) -> None:
    """Print the store line on stderr (stdout stays the command's output), and keep the
    source on ``args`` for error messages."""
    if args is not None:
        args.source = source
    print(f"conveyor: {safe(source.line())}", file=sys.stderr, flush=True)
