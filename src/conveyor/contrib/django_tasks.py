"""A backend for Django's tasks API (``django.tasks`` on Django 6, the ``django-tasks``
backport before it) that runs tasks on conveyor: retries, a dashboard, batches, flow control.

    TASKS = {"default": {"BACKEND": "conveyor.contrib.django_tasks.ConveyorBackend",
                         "QUEUES": ["default", "mail"],
                         "OPTIONS": {"URL": "redis://localhost:6379/0"}}}

and the worker, from the project's directory::

    DJANGO_SETTINGS_MODULE=mysite.settings conveyor worker conveyor.contrib.django_tasks:app

A task is stored as a conveyor job named ``conveyor.django`` (``conveyor.django.async`` for an
``async def`` task) whose arguments are the task's module path and its arguments: workers
need no registry of Django tasks, they import the task as Django does. ``TaskResult`` is read
from the job's record (docs/django.md).
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import json
import os
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from inspect import iscoroutinefunction
from typing import Any

from django.utils.module_loading import import_string

from conveyor.app import Conveyor
from conveyor.context import current_job
from conveyor.job import EventKind, JobRecord, JobState
from conveyor.options import by_name_keys, make_options

try:  # Django 6: the framework itself
    _tasks = importlib.import_module("django.tasks")
    _base = importlib.import_module("django.tasks.base")
    _backend = importlib.import_module("django.tasks.backends.base")
    _signals = importlib.import_module("django.tasks.signals")
    _errors = importlib.import_module("django.tasks.exceptions")
except ImportError:  # Django 4.2 - 5.x: the backport (django-tasks)
    _tasks = importlib.import_module("django_tasks")
    _base = importlib.import_module("django_tasks.base")
    _backend = importlib.import_module("django_tasks.backends.base")
    _signals = importlib.import_module("django_tasks.signals")
    _errors = importlib.import_module("django_tasks.exceptions")

Task: Any = _base.Task
TaskResult: Any = _base.TaskResult
TaskError: Any = _base.TaskError
TaskContext: Any = _base.TaskContext
Status: Any = _base.TaskResultStatus
BaseTaskBackend: Any = _backend.BaseTaskBackend

__all__ = ["RUN_ASYNC_JOB", "RUN_JOB", "ConveyorBackend", "conveyor_app", "job_options"]

RUN_JOB = "conveyor.django"
RUN_ASYNC_JOB = "conveyor.django.async"
_STATUS = {
    JobState.ACTIVE: "RUNNING", JobState.SUCCEEDED: "SUCCESSFUL", JobState.FAILED: "FAILED",
    JobState.DEAD: "FAILED", JobState.CANCELLED: "FAILED",
}
_APPS: dict[str, Conveyor] = {}


def job_options(**options: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """conveyor's own options for a Django task (those of ``@app.job``: ``retry``,
    ``timeout``, ``unique_for``, ``concurrency_key``, ``rate_limit``, ...), put under
    ``@task``::

        @task()
        @job_options(retry=5, concurrency_key=lambda user_id: f"user:{user_id}", concurrency=1)
        def send_report(user_id: int) -> None: ...
    """
    if "retry_in" in options:
        # It is read where the job runs, from the registered job: the task's runner here.
        raise ValueError("retry_in cannot be given per Django task; raise "
                         "conveyor.Retry(in_seconds=...) from the task instead")
    make_options(**{k: v for k, v in options.items() if k != "queue"})  # checked now

    def mark(func: Callable[..., Any]) -> Callable[..., Any]:
        func.conveyor_options = options  # type: ignore[attr-defined]
        return func

    return mark


def conveyor_app(url: str | None) -> Conveyor:
    """The conveyor app of a storage URL in this process, with the two runner jobs."""
    key = url or ""
    found = _APPS.get(key)
    if found is None:
        found = _APPS[key] = Conveyor(url)
        found.job(name=RUN_JOB)(run_task)
        found.job(name=RUN_ASYNC_JOB)(arun_task)
    return found


class ConveyorBackend(BaseTaskBackend):  # type: ignore[misc]
    """Django's task backend on conveyor. ``OPTIONS``: ``URL``, the storage (default
    ``$CONVEYOR_URL`` or conveyor's default SQLite file)."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    # Django's priority orders every task of a queue strictly; conveyor orders a queue by
    # arrival and shares workers between queues by weight. Refusing priority says so at
    # enqueue (InvalidTask) instead of ignoring it: put urgent tasks on their own queue.
    supports_priority = False

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.app = conveyor_app(self.options.get("URL"))

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        """Store the task as a conveyor job; its ``TaskResult`` is ``READY``."""
        self.validate_task(task)
        name = RUN_ASYNC_JOB if iscoroutinefunction(task.func) else RUN_JOB
        options = _resolved(getattr(task.func, "conveyor_options", {}), task.func, args, kwargs)
        options.setdefault("queue", task.queue_name)
        ref = self.app.enqueue(name, [task.module_path, list(args), dict(kwargs),
                                      task.takes_context, self.alias],
                               at=task.run_after, **options)
        if ref is None:
            raise _errors.InvalidTaskError("a conveyor client middleware stopped the enqueue")
        record = self.app.get_job(ref.id)
        if ref.created or record is None:
            # What was enqueued, even if a worker has started it since (an idle worker leases
            # a job one round trip after it is stored); ``refresh()`` reads the news.
            result = _new_result(task, ref.id, args, kwargs, self.alias,
                                 enqueued_at=_when(record.created_at) if record else None)
        else:  # a unique job that already existed: it is what the caller got
            result = _result(task, record, self.alias)
        _signals.task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> Any:
        """The ``TaskResult`` of a stored job, or ``TaskResultDoesNotExist``."""
        record = self.app.get_job(result_id)
        if record is None or record.name not in (RUN_JOB, RUN_ASYNC_JOB):
            raise _errors.TaskResultDoesNotExist(result_id)
        return _result(import_string(record.args[0]), record, record.args[4])


_KEYS = ("unique_key", "concurrency_key", "rate_key", "order_key")


def _resolved(options: dict[str, Any], func: Callable[..., Any], args: Any,
              kwargs: Any) -> dict[str, Any]:
    """``options`` with every key callable called on the task's own arguments (the stored
    job's arguments are the runner's: the task's path, then its arguments)."""
    if not options:
        return {}
    opts = by_name_keys(make_options(**{k: v for k, v in options.items() if k != "queue"}),
                        func)
    out = dict(options)
    for name in _KEYS:
        key = getattr(opts, name)
        if callable(key):
            out[name] = key(*args, **kwargs)
    for name, keyed in (("debounce" if opts.fold and opts.fold.mode.startswith("debounce")
                         else "throttle", opts.fold), ("aggregate", opts.aggregate)):
        if keyed is not None and name in out and callable(keyed.key):
            out[name] = dataclasses.replace(keyed, key=keyed.key(*args, **kwargs))
    return out


def _new_result(task: Any, job_id: str, args: Any, kwargs: Any, alias: str,
                enqueued_at: datetime | None = None) -> Any:
    return TaskResult(task=task, id=job_id, status=Status.READY, enqueued_at=enqueued_at,
                      started_at=None, finished_at=None, last_attempted_at=None,
                      args=list(args), kwargs=dict(kwargs), backend=alias, errors=[],
                      worker_ids=[])


def _when(ts: float | None) -> datetime | None:
    return None if ts is None else datetime.fromtimestamp(ts, tz=timezone.utc)


def _class_path(name: str) -> str:
    """The import path Django's ``TaskError`` wants: conveyor stores builtins bare."""
    return name if "." in name else f"builtins.{name or 'Exception'}"


def _result(task: Any, record: JobRecord, alias: str) -> Any:
    """A ``TaskResult`` from a job's record: status, times, errors with their tracebacks,
    the workers that ran it, the return value."""
    events = record.events or []
    started = [e for e in events if e.kind == EventKind.STARTED]
    errors = [TaskError(exception_class_path=_class_path(str(e.data.get("type", ""))),
                        traceback=str(e.data.get("traceback", "")))
              for e in events if e.data and "traceback" in e.data]
    status = getattr(Status, _STATUS.get(record.state, "READY"))
    result = TaskResult(
        task=task, id=record.id, status=status, enqueued_at=_when(record.created_at),
        started_at=_when(started[0].ts if started else None),
        finished_at=_when(record.finished_at),
        last_attempted_at=_when(started[-1].ts if started else None),
        args=list(record.args[1]), kwargs=dict(record.args[2]), backend=alias,
        errors=errors, worker_ids=[e.worker or "" for e in started])
    if record.state is JobState.SUCCEEDED and record.result is not None:
        object.__setattr__(result, "_return_value", json.loads(record.result))
    return result


def _running(module_path: str, args: list[Any], kwargs: dict[str, Any], alias: str) -> Any:
    """The task being run, its ``TaskResult`` as of now (``RUNNING``), and the signal's
    sender; ``task_started`` sent."""
    task = import_string(module_path)
    backend = _tasks.task_backends[alias]
    ctx = current_job()
    record = backend.app.get_job(ctx.job_id)
    result = (_result(task, record, alias) if record is not None else
              _new_result(task, ctx.job_id, args, kwargs, alias))
    _signals.task_started.send(type(backend), task_result=result)
    return task, result, type(backend)


def _finished(sender: Any, result: Any, error: BaseException | None, value: Any) -> None:
    status = Status.FAILED if error is not None else Status.SUCCESSFUL
    object.__setattr__(result, "status", status)
    object.__setattr__(result, "finished_at", datetime.now(tz=timezone.utc))
    if error is None:
        object.__setattr__(result, "_return_value", value)
    _signals.task_finished.send(sender, task_result=result)


def run_task(module_path: str, args: list[Any], kwargs: dict[str, Any], takes_context: bool,
             alias: str) -> Any:
    """The conveyor job that runs a Django task (``task_started``, then ``task_finished``
    after every attempt, as Django's own backends send them)."""
    task, result, sender = _running(module_path, args, kwargs, alias)
    extra = (TaskContext(task_result=result),) if takes_context else ()
    try:
        value = task.func(*extra, *args, **kwargs)
    except BaseException as exc:
        _finished(sender, result, exc, None)
        raise
    _finished(sender, result, None, value)
    return value


async def arun_task(module_path: str, args: list[Any], kwargs: dict[str, Any],
                    takes_context: bool, alias: str) -> Any:
    """``run_task`` for an ``async def`` task, awaited on the worker's event loop."""
    task, result, sender = await asyncio.to_thread(_running, module_path, args, kwargs, alias)
    extra = (TaskContext(task_result=result),) if takes_context else ()
    try:
        value = await task.func(*extra, *args, **kwargs)
    except BaseException as exc:
        _finished(sender, result, exc, None)
        raise
    _finished(sender, result, None, value)
    return value


def _worker_app() -> Conveyor:
    """The app a worker runs (``conveyor worker conveyor.contrib.django_tasks:app``): Django
    set up from ``DJANGO_SETTINGS_MODULE``, the app of the first conveyor backend in
    ``TASKS``."""
    import django
    from django.conf import settings

    if not settings.configured and not os.environ.get("DJANGO_SETTINGS_MODULE"):
        raise RuntimeError("set DJANGO_SETTINGS_MODULE to your project's settings module")
    django.setup()
    aliases: Iterable[str] = getattr(settings, "TASKS", {}).keys()
    for alias in aliases:
        backend = _tasks.task_backends[alias]
        if isinstance(backend, ConveyorBackend):
            return backend.app
    raise RuntimeError("no TASKS backend is conveyor.contrib.django_tasks.ConveyorBackend")


def __getattr__(name: str) -> Any:
    # ``app`` is built on first use, so that importing this module (Django's settings
    # loading it as a backend) does not set Django up from inside its own setup.
    if name == "app":
        return _worker_app()
    raise AttributeError(name)
