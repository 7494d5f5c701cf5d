"""What docs/flow-control.md leaves to "your code", imported first by the page pasted as one
module: a ledger (each entry it applies is one line of ``ledger.txt``, so the test reads what
the worker process did), rows to read, and the application's SQLAlchemy and Django models on
SQLite files in the working directory."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.db import connection
from sqlalchemy import create_engine

from tests.contrib.helpers import Base, User, configure_django

__all__ = ["Order", "User", "close_browser", "engine", "fetch_next_page", "ledger",
           "read_rows", "save"]

configure_django(Path.cwd())
engine = create_engine("sqlite:///app.db")
Base.metadata.create_all(engine)


class Ledger:
    """``ledger`` of the ordered-keys example."""

    path = Path("ledger.txt")

    def apply(self, account_id: int, amount: int) -> None:
        # one write on an O_APPEND descriptor: whole lines, whichever thread writes
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{account_id} {amount}\n".encode())
        finally:
            os.close(fd)


ledger = Ledger()


class _Orders:
    """``Order.objects`` of the Django example: a real INSERT in the current transaction."""

    def create(self, total: int) -> Any:
        with connection.cursor() as cursor:
            cursor.execute("INSERT INTO orders (total) VALUES (%s)", [total])
            return type("Order", (), {"pk": cursor.lastrowid})()


class Order:
    """The Django model of the example."""

    objects = _Orders()


def read_rows(path: str) -> Any:
    """The rows of the cancel example's file."""
    return iter(range(3))


def save(row: int) -> None:
    """Where the cancel example puts each row."""


async def fetch_next_page(site: str) -> None:
    """What the async cancel example awaits."""


async def close_browser(site: str) -> None:
    """Its clean-up."""
