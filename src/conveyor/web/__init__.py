"""The web dashboard: ``create_app(storage_or_app, token=None)`` returns an ASGI app."""

from conveyor.server import RunningServer
from conveyor.web.app import Dashboard, create_app

__all__ = ["Dashboard", "RunningServer", "create_app"]
