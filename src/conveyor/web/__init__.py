"""The web dashboard: ``create_app(storage_or_app, token=None)`` returns an ASGI app;
``mount_at(prefix, dashboard, host_app)`` serves it under a prefix of an ASGI host with no
router of its own (Django's ASGI application)."""

from conveyor.http.asgi import mount_at
from conveyor.http.server import RunningServer
from conveyor.web.app import Dashboard, create_app

__all__ = ["Dashboard", "RunningServer", "create_app", "mount_at"]
