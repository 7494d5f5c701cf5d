"""Jobs for the Celery canvas expectations (``tests/integration/test_celery_canvas.py``), run by
a real ``conveyor worker`` process: the shapes of Celery's own integration tasks
(``t/integration/tasks.py``: ``identity``, ``add``, ``tsum``, ``fail``, an errback), written for
conveyor. Tests enqueue with their own app on the same URL, calling ``register``.
"""

from __future__ import annotations

import importlib
from typing import Any

from conveyor import Conveyor, Fail, current_job


class ExpectedError(Exception):
    """What ``fail`` raises (Celery's ``ExpectedException``)."""


class NeedsTwo(Exception):
    """An exception that cannot be rebuilt from its message alone."""

    def __init__(self, code: int, text: str) -> None:
        super().__init__(f"{code}: {text}")
        self.code = code


def register(app: Conveyor) -> None:
    """Register the test jobs on ``app`` under stable names."""

    @app.job(name="c.identity", retry=False)
    def identity(x: Any) -> Any:
        return x

    @app.job(name="c.add", retry=False)
    def add(x: int, y: int) -> int:
        return x + y

    @app.job(name="c.sub", retry=False)
    def sub(x: int, y: int) -> int:
        return x - y

    @app.job(name="c.tsum", retry=False)
    def tsum(values: list[int]) -> int:
        return sum(values)

    @app.job(name="c.echo", retry=False)
    def echo(*args: Any, **kwargs: Any) -> list[Any]:
        """What it was called with, and when it started (read back from its record)."""
        return [list(args), kwargs]

    @app.job(name="c.fail", retry=False)
    def fail(*args: Any) -> None:
        raise ExpectedError("Task expected to fail")

    @app.job(name="c.refuse", retry=False)
    def refuse(*args: Any) -> None:
        raise Fail("refused")

    @app.job(name="c.needs_two", retry=False)
    def needs_two() -> None:
        raise NeedsTwo(7, "two arguments")

    @app.job(name="c.foreign", retry=False)
    def foreign() -> None:
        module = importlib.import_module("tests.integration.apps.canvas_errors")
        raise module.OnlyInWorkers("raised from a module the caller never imported")

    @app.job(name="c.errback", retry=False)
    def errback(*args: Any) -> list[Any]:
        """Celery's new-style errback: ``(job id, error, traceback, *own)``; returns what it
        saw (the type of the error, the last line of the traceback)."""
        if len(args) >= 3 and isinstance(args[1], BaseException):
            job_id, error, traceback = args[:3]
            return [job_id, type(error).__name__, isinstance(error, ExpectedError),
                    str(error), traceback.strip().splitlines()[-1], list(args[3:])]
        return ["immutable", list(args), current_job().job_id]


app = Conveyor()
register(app)
