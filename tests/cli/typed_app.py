"""An importable app with typed and sealed jobs, for ``--app tests.cli.typed_app:app``
(storage from ``CONVEYOR_URL``, keys from ``CONVEYOR_TEST_KEYS``)."""

from __future__ import annotations

import os

from conveyor import Conveyor, Keys
from tests.api.typed_models import Point, Route

app = Conveyor(encrypt=Keys.from_env("CONVEYOR_TEST_KEYS"))


@app.job(name="typed.route")
def route(start: Point, *, mode: str = "car") -> Route:
    return Route([start])


@app.job(name="sealed.note")
def note(text: str) -> str:
    return text


KEYS_SET = bool(os.environ.get("CONVEYOR_TEST_KEYS"))
