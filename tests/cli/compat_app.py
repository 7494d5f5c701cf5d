"""The new code of ``test_check_compat.py``: two deploys of a shop's jobs at version 2.

``app`` accepts version 2 only (with an upcaster from 1 for ``shop.bill``); ``both`` also
accepts version 1 and defines every job the old code enqueued.
"""

from __future__ import annotations

from typing import Any

from conveyor import Conveyor, current_job


def fulfil(order: int) -> None:
    """Charge, sleep, ship (durable)."""
    ctx = current_job()
    ctx.step("charge", lambda: order)
    ctx.sleep(3600)


def bill(order_id: int, currency: str) -> None:
    """Version 2 takes a currency."""


def to_v2(args: list[Any], kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """Version 1 billed in euros."""
    return args, {**kwargs, "currency": "EUR"}


app = Conveyor("memory://")
app.job(name="shop.fulfil", version=2)(fulfil)
app.job(name="shop.bill", version=2)(bill).upcaster(from_version=1)(to_v2)

both = Conveyor("memory://")
both.job(name="shop.fulfil", version=2, accepts=(1, 2))(fulfil)
both.job(name="shop.bill", version=2)(bill).upcaster(from_version=1)(to_v2)
both.job(name="shop.gone")(lambda: None)
