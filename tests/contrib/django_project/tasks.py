"""The project's tasks, and receivers of Django's task signals that log to ``SIGNAL_LOG``."""

from __future__ import annotations

import json
import os
from typing import Any

from django.dispatch import receiver

from conveyor import Retry
from conveyor.contrib.django_tasks import job_options
from tests.api.typed_models import Point, Route

try:
    from django.tasks import task
    from django.tasks.signals import task_enqueued, task_finished, task_started
except ImportError:
    from django_tasks import task
    from django_tasks.signals import task_enqueued, task_finished, task_started


def _log(kind: str, task_result: Any, **_: Any) -> None:
    path = os.environ.get("SIGNAL_LOG")
    if path:
        errors = [e.exception_class_path for e in task_result.errors]
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps([kind, task_result.id, str(task_result.status), errors]) + "\n")


@receiver(task_enqueued)
def on_enqueued(sender: Any, task_result: Any, **kwargs: Any) -> None:
    _log("enqueued", task_result)


@receiver(task_started)
def on_started(sender: Any, task_result: Any, **kwargs: Any) -> None:
    _log("started", task_result)


@receiver(task_finished)
def on_finished(sender: Any, task_result: Any, **kwargs: Any) -> None:
    _log("finished", task_result)


@task()
def add(a: int, b: int) -> int:
    return a + b


@task()
async def add_async(a: int, b: int) -> int:
    return a + b


@task(queue_name="mail", takes_context=True)
@job_options(retry=3)
def flaky(context: Any, marker: str) -> int:
    """Asks for a retry on its first attempt; returns the attempt it succeeded on."""
    if context.attempt == 1:
        raise Retry("not yet", in_seconds=0.1)
    return int(context.attempt)


@task()
def broken() -> None:
    raise ValueError("bad template")


@task()
@job_options(unique_for=60, unique_key=lambda report_id: f"report:{report_id}")
def report(report_id: int) -> int:
    return report_id


# -- the django-tasks backport's test tasks (its tests/tasks.py), for tests/contrib/
#    django_project/fidelity.py ------------------------------------------------------------


@task()
def noop_task(*args: Any, **kwargs: Any) -> None:
    return None


@task()
def calculate_meaning_of_life() -> int:
    return 42


@task()
def failing_task_value_error() -> None:
    raise ValueError("This task failed due to ValueError")


@task()
def failing_task_system_exit() -> None:
    raise SystemExit("This task failed due to SystemExit")


@task()
def complex_exception() -> None:
    raise ValueError(ValueError("This task failed"))


@task()
def complex_return_value() -> Any:
    return lambda: True  # neither JSON nor picklable


@task(takes_context=True)
def get_task_id(context: Any) -> str:
    return str(context.task_result.id)


@task(takes_context=True)
def test_context(context: Any, attempt: int) -> None:
    assert context.attempt == attempt


@task()
def echo(value: Any) -> Any:
    """Its argument back, as the task received it."""
    return [type(value).__name__, value]


@task()
def route(start: Point, mode: str = "car") -> Route:
    """Typed arguments and result (docs/job-data.md): ``start`` arrives a ``Point``."""
    if not isinstance(start, Point):
        raise TypeError(f"start arrived as {type(start).__name__}")
    return Route([start], "bike" if mode == "bike" else "car")
