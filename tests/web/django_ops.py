"""A Django project with the dashboard mounted at ``/ops`` (``conveyor.contrib.django_dashboard``),
driven through its ASGI application; prints what each request got, as JSON.

Run in its own process by ``test_mounted.py``: Django is configured once per process, and the
rest of the suite configures it without ``auth`` and ``sessions``.
``python -m tests.web.django_ops DIRECTORY``
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import django
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.urls import path

urlpatterns: list[object] = []


def main(directory: Path) -> dict[str, object]:
    """Build the project in ``directory`` and report the status of each request."""
    settings.configure(
        SECRET_KEY="a-test-project-key", USE_TZ=True, ROOT_URLCONF=__name__,
        ALLOWED_HOSTS=["shop.example.com"], LOGIN_URL="/admin/login/",
        INSTALLED_APPS=["django.contrib.auth", "django.contrib.contenttypes",
                        "django.contrib.sessions"],
        MIDDLEWARE=["django.contrib.sessions.middleware.SessionMiddleware",
                    "django.contrib.auth.middleware.AuthenticationMiddleware"],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3",
                               "NAME": str(directory / "site.db")}})
    django.setup()
    from django.contrib.auth.decorators import login_required
    from django.contrib.auth.models import User
    from django.core.asgi import get_asgi_application
    from django.core.management import call_command
    from django.test import Client
    from starlette.testclient import TestClient

    from conveyor import Conveyor
    from conveyor.contrib.django_dashboard import user_passes
    from conveyor.web import create_app, mount_at

    def orders(request: HttpRequest) -> HttpResponse:
        return HttpResponse("orders")

    urlpatterns.append(path("orders", login_required(orders)))
    call_command("migrate", verbosity=0)
    User.objects.create_user("ada", password="pw-ada", is_staff=True)
    User.objects.create_user("bob", password="pw-bob")
    sessions = {}
    for name in ("ada", "bob"):
        browser = Client()
        assert browser.login(username=name, password=f"pw-{name}")
        sessions[name] = browser.cookies[settings.SESSION_COOKIE_NAME].value

    jobs = Conveyor(f"sqlite:///{directory / 'jobs.db'}")
    jobs.enqueue("shop.export", [1], queue="exports")
    dashboard = create_app(jobs, authorize=user_passes(), login_url=settings.LOGIN_URL,
                           allowed_hosts=settings.ALLOWED_HOSTS)
    application = mount_at("/ops", dashboard, get_asgi_application())
    seen: dict[str, object] = {}

    def client(who: str | None, host: str = "shop.example.com") -> TestClient:
        cookies = {settings.SESSION_COOKIE_NAME: sessions[who]} if who else {}
        return TestClient(application, base_url=f"http://{host}", follow_redirects=False,
                          cookies=cookies)

    anonymous = client(None)
    seen["anonymous /orders"] = anonymous.get("/orders").status_code
    page = anonymous.get("/ops/queues")
    seen["anonymous /ops/queues"] = [page.status_code, page.headers.get("location")]
    seen["anonymous /ops/api/stats"] = anonymous.get("/ops/api/stats").status_code
    seen["anonymous POST"] = anonymous.post(
        "/ops/action", data={"op": "pause", "queue": "exports"}).status_code
    seen["bob /ops/queues"] = client("bob").get("/ops/queues").status_code
    ada = client("ada")
    page = ada.get("/ops/queues")
    seen["ada /ops/queues"] = page.status_code
    seen["ada /orders"] = ada.get("/orders").status_code
    seen["ada POST forged"] = ada.post(
        "/ops/action", data={"op": "pause", "queue": "exports", "csrf": "f" * 32}).status_code
    seen["paused after forged"] = [q.name for q in jobs.storage.queues() if q.paused]
    token = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert token is not None
    done = ada.post("/ops/action", data={"op": "pause", "queue": "exports", "next": "/queues",
                                         "csrf": token.group(1)})
    seen["ada POST"] = [done.status_code, done.headers.get("location")]
    seen["paused"] = [q.name for q in jobs.storage.queues() if q.paused]
    seen["ada at another host"] = client("ada", "evil.test").get("/ops/queues").status_code
    jobs.close()
    return seen


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]))))
