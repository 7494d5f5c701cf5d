"""The Django tasks a conveyor worker may run, and how it runs them (``django_tasks.py`` is
the backend).

A task is stored as a job named after its module path (``myapp.tasks.send_report``), its
arguments the task's, Django's own fields (the backend alias, ``run_after``) in the job's
meta. A worker runs a stored name only if it is a **task registered with Django's task
framework for a conveyor backend**: every ``Task`` Django builds passes through
``ConveyorBackend.validate_task``, which records it here. A name not recorded yet is looked
up only inside the project (an installed app's package, or the settings module's), by
importing that module and finding the task recorded; anything else is never imported and
ends ``dead`` (``NotAJob``) with the reason. ``get_result`` reads tasks the same way.
"""

from __future__ import annotations

import importlib
import threading
import traceback
import typing
from collections.abc import Callable
from datetime import datetime, timezone
from inspect import Parameter, iscoroutinefunction, signature
from typing import Any

from conveyor.core.typed import adapter_for
from conveyor.errors import NotAJob

try:  # Django 6: the framework itself
    _base = importlib.import_module("django.tasks.base")
except ImportError:  # Django 4.2 - 5.x: the backport (django-tasks)
    _base = importlib.import_module("django_tasks.base")
try:
    normalize_json: Callable[[Any], Any] = importlib.import_module(
        "django.utils.json").normalize_json
except (ImportError, AttributeError):
    normalize_json = importlib.import_module("django_tasks.utils").normalize_json

TaskError: Any = _base.TaskError

__all__ = ["attempt_error", "module_path", "normalize_json", "record_task", "task_runner",
           "verified_task"]

_TASKS: dict[str, Any] = {}  # module path -> a Task a conveyor backend validated
_LOCK = threading.Lock()


def module_path(func: Callable[..., Any]) -> str:
    """The path Django names a task by (``Task.module_path``)."""
    return f"{func.__module__}.{func.__qualname__}"


def record_task(task: Any) -> None:
    """Remember ``task`` as one of the project's tasks (``validate_task`` calls it)."""
    with _LOCK:
        _TASKS.setdefault(module_path(task.func), task)


def verified_task(path: str) -> Any:
    """The task stored under ``path``: one recorded already, or recorded by importing its
    module when that module is part of the project; ``NotAJob`` otherwise (nothing outside
    the project is imported), ``None`` when the module is the project's but cannot be
    imported (new code not deployed here yet)."""
    found = _TASKS.get(path)
    if found is not None:
        return found
    module, _, _ = path.rpartition(".")
    if not module or not _in_project(module):
        raise NotAJob(f"{path!r} is not a Django task of this project: module {module!r} "
                      "is in no installed app (not imported)")
    try:
        importlib.import_module(module)
    except ImportError:
        return None
    found = _TASKS.get(path)
    if found is None:
        raise NotAJob(f"{path!r} is not a Django task: {module} defines no @task of a "
                      "conveyor backend by that name")
    return found


def _in_project(module: str) -> bool:
    """True for a module of an installed app or of the settings module's package."""
    from django.apps import apps
    from django.conf import settings

    roots = [config.name for config in apps.get_app_configs()]
    project = str(getattr(settings, "SETTINGS_MODULE", "") or "").rpartition(".")[0]
    if project:
        roots.append(project)
    return any(module == root or module.startswith(root + ".") for root in roots)


def task_runner(task: Any, run: Callable[..., Any],
                arun: Callable[..., Any]) -> Callable[..., Any]:
    """The function a worker calls for ``task``: ``run(task, args, kwargs)`` (``arun`` for
    an ``async def`` task), with the task's signature (its ``context`` left out), so that
    conveyor checks a call at enqueue and key callables see the task's parameters."""
    if iscoroutinefunction(task.func):
        async def call_async(*args: Any, **kwargs: Any) -> Any:
            return await arun(task, args, kwargs)
        runner: Callable[..., Any] = call_async
    else:
        def call(*args: Any, **kwargs: Any) -> Any:
            return run(task, args, kwargs)
        runner = call
    try:
        sig = signature(task.func)
        params = list(sig.parameters.values())
        if task.takes_context and params and params[0].kind is not Parameter.VAR_POSITIONAL:
            params = params[1:]
        runner.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        # The task's annotations, resolved in its own module: typed parameters and return
        # values (a pydantic model, a dataclass: docs/job-data.md) are the task's.
        hints = _hints(task.func)
        runner.__annotations__ = {k: v for k, v in hints.items()
                                  if k == "return" or k in {p.name for p in params}}
    except (TypeError, ValueError):
        pass  # no signature: calls are not checked
    runner.__qualname__ = runner.__name__ = task.func.__name__
    runner.__module__ = task.func.__module__
    return runner


def _hints(func: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(func)
    except Exception:  # an annotation naming what the task's module cannot see: untyped
        return {}


def typed_return(task: Any, value: Any) -> Any:
    """A task's return value made JSON when its return annotation is typed (a model, a
    dataclass: ``conveyor.core.typed``), as conveyor stores it; else the value as it is."""
    adapter = adapter_for(_hints(task.func).get("return", None)) if value is not None else None
    return value if adapter is None else adapter.dump(value)


def attempt_error(exc: BaseException) -> Any:
    """The ``TaskError`` of one attempt, as Django's own backends build it."""
    return TaskError(exception_class_path=module_path(type(exc)),
                     traceback="".join(traceback.format_exception(exc)))


def when(ts: float | None) -> datetime | None:
    """An epoch time as Django's aware datetime."""
    return None if ts is None else datetime.fromtimestamp(ts, tz=timezone.utc)
