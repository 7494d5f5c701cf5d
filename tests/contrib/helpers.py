"""What the contrib and docs tests share: the application's own databases, and what they read
back from the job storage."""

from __future__ import annotations

from pathlib import Path

import django
from django.conf import settings
from django.db import connection
from sqlalchemy import String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from conveyor import Conveyor, JobState


class Base(DeclarativeBase):
    """The application's SQLAlchemy models."""


class User(Base):
    """A row a deferred job is about."""

    __tablename__ = "users"
    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str] = mapped_column(String(100))


def configure_django(directory: Path) -> None:
    """Django on a SQLite file with a ``users`` and an ``orders`` table.

    Django is configured once per process: a later call only makes sure the tables exist in
    the database the first call chose.
    """
    if not settings.configured:
        settings.configure(
            DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3",
                                   "NAME": str(directory / "django.db")}},
            INSTALLED_APPS=[], USE_TZ=True,
        )
        django.setup()
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE IF NOT EXISTS users (id INTEGER PRIMARY KEY, email TEXT)")
        cursor.execute("CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, total INT)")


def stored(app: Conveyor) -> list[tuple[str, list[object], dict[str, object]]]:
    """(queue, args, kwargs) of every stored pending job, oldest first."""
    return [(r.queue, r.args, r.kwargs)
            for r in app.storage.list_jobs(state=JobState.PENDING, limit=100)]
