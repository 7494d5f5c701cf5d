"""The dashboard inside a Django project, open to the users Django says may see it.

Django's login middleware and ``staff_member_required`` never see the requests of an ASGI app
mounted beside Django's own, so the dashboard asks Django itself, for every request: it reads
the session cookie, loads the session and the user as Django would, and applies ``test``::

    # asgi.py
    from django.conf import settings
    from django.core.asgi import get_asgi_application
    from conveyor.contrib.django_dashboard import user_passes
    from conveyor.web import create_app, mount_at
    from myproject.jobs import app as jobs

    dashboard = create_app(jobs, authorize=user_passes(), login_url="/admin/login/",
                           allowed_hosts=settings.ALLOWED_HOSTS)
    application = mount_at("/ops", dashboard, get_asgi_application())

``user_passes()`` admits active staff, as the admin does; ``user_passes(lambda u:
u.has_perm("ops.view_jobs"))`` any rule of yours. The session lookup is a database query: it
runs on Django's thread for synchronous code (``sync_to_async``), never on the event loop.
Needs ``django.contrib.auth`` and ``django.contrib.sessions`` in ``INSTALLED_APPS``.
"""

from __future__ import annotations

import io
from collections.abc import Awaitable, Callable
from importlib import import_module
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth import get_user
from django.core.handlers.asgi import ASGIRequest
from django.db import close_old_connections

from conveyor.http.asgi import Scope

__all__ = ["is_staff", "user_passes"]


def is_staff(user: Any) -> bool:
    """An active member of staff (who may use Django's admin)."""
    return bool(user.is_active and user.is_staff)


def user_passes(test: Callable[[Any], bool] = is_staff
                ) -> Callable[[Scope], Awaitable[bool]]:
    """An ``authorize=`` check for ``conveyor.web.create_app``: True when the request's
    session belongs to a signed-in user for whom ``test(user)`` is true."""

    def passes(scope: Scope) -> bool:
        close_old_connections()  # what Django does around each of its own requests
        try:
            request = ASGIRequest(scope, io.BytesIO())
            engine = import_module(settings.SESSION_ENGINE)
            request.session = engine.SessionStore(
                request.COOKIES.get(settings.SESSION_COOKIE_NAME))
            user = get_user(request)
            return bool(user.is_authenticated and test(user))
        finally:
            close_old_connections()

    checked = sync_to_async(passes, thread_sensitive=True)

    async def authorize(scope: Scope) -> bool:
        return await checked(scope)

    return authorize
