"""A backend for Django's tasks API (``django.tasks`` on Django 6, the ``django-tasks``
backport before it) that runs tasks on conveyor: retries, a dashboard, batches, flow control.

    TASKS = {"default": {"BACKEND": "conveyor.contrib.django_tasks.ConveyorBackend",
                         "QUEUES": ["default", "mail"],
                         "OPTIONS": {"URL": "redis://localhost:6379/0"}}}

and the worker, from the project's directory::

    DJANGO_SETTINGS_MODULE=mysite.settings conveyor worker conveyor.contrib.django_tasks:app

A task is stored as a conveyor job named after its module path (``myapp.tasks.send_report``,
what the dashboard lists and filters by), its arguments the task's; the worker runs only
tasks registered with Django's task framework (``django_runner.py``). Django's contract
holds: a task that raises ends ``FAILED`` after one attempt unless ``job_options`` ask for
retries; arguments and results are JSON as Django normalizes them (``TypeError`` otherwise);
``TaskResult`` is read from the job's record (docs/django.md).
"""

from __future__ import annotations

import asyncio
import importlib
import os
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from typing import Any

from conveyor.app import Conveyor
from conveyor.client.context import current_job
from conveyor.client.options import make_options
from conveyor.client.registry import JobFunction
from conveyor.contrib.django_runner import (
    attempt_error,
    module_path,
    normalize_json,
    record_task,
    task_runner,
    typed_return,
    verified_task,
    when,
)
from conveyor.core.job import EventKind, JobRecord, JobState
from conveyor.core.serializer import decode_payload
from conveyor.core.text import check_name
from conveyor.errors import ConveyorError, InvalidNameError, NotAJob, UnknownJobError

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
TaskContext: Any = _base.TaskContext
Status: Any = _base.TaskResultStatus
BaseTaskBackend: Any = _backend.BaseTaskBackend

__all__ = ["RUN_ASYNC_JOB", "RUN_JOB", "ConveyorBackend", "conveyor_app", "job_options"]

#: Jobs stored before tasks were named by their module path (their path is the first
#: argument); still run, under the same verification.
RUN_JOB = "conveyor.django"
RUN_ASYNC_JOB = "conveyor.django.async"
META = "django"  # the job's meta key holding the backend alias and run_after
_STATUS = {
    JobState.ACTIVE: "RUNNING", JobState.SUCCEEDED: "SUCCESSFUL", JobState.FAILED: "FAILED",
    JobState.DEAD: "FAILED", JobState.CANCELLED: "FAILED",
}
_APPS: dict[str, Conveyor] = {}


def job_options(**options: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """conveyor's own options for a Django task (those of ``@app.job``: ``retry``,
    ``timeout``, ``retry_in``, ``unique_for``, ``concurrency_key``, ...), put under
    ``@task``; without ``retry`` a task that raises fails at once, as Django specifies::

        @task()
        @job_options(retry=5, concurrency_key=lambda user_id: f"user:{user_id}", concurrency=1)
        def send_report(user_id: int) -> None: ...
    """
    make_options(**{k: v for k, v in options.items() if k != "queue"})  # checked now

    def mark(func: Callable[..., Any]) -> Callable[..., Any]:
        func.conveyor_options = options  # type: ignore[attr-defined]
        return func

    return mark


def conveyor_app(url: str | None) -> Conveyor:
    """The conveyor app of a storage URL in this process: the project's tasks are its jobs
    (found by module path, ``django_runner.verified_task``)."""
    key = url or ""
    found = _APPS.get(key)
    if found is None:
        found = _APPS[key] = Conveyor(url)
        found.job(name=RUN_JOB, retry=False)(run_task)
        found.job(name=RUN_ASYNC_JOB, retry=False)(arun_task)
        app = found
        found.registry.set_resolver(lambda name: _resolve(app, name))
    return found


def _resolve(app: Conveyor, name: str) -> JobFunction | None:
    task = verified_task(name)
    return None if task is None else _job_of(app, task)


def _job_of(app: Conveyor, task: Any) -> JobFunction:
    """The conveyor job of ``task``: its runner, with the task's ``job_options`` and
    Django's default of no retries."""
    options = dict(getattr(task.func, "conveyor_options", {}))
    options.pop("queue", None)  # a task's queue is its queue_name, given at each enqueue
    options.setdefault("retry", False)
    return JobFunction(app.client, task_runner(task, _run, _arun), module_path(task.func),
                       make_options(**options))


class ConveyorBackend(BaseTaskBackend):  # type: ignore[misc]
    """Django's task backend on conveyor. ``OPTIONS``: ``URL``, the storage (default
    ``$CONVEYOR_URL`` or conveyor's default SQLite file)."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    # Django's priority (-100..100, higher first) is conveyor's, applied by the store's
    # fetch within the task's queue (docs/scheduling.md); 0 is a plain job.
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.app = conveyor_app(self.options.get("URL"))

    def validate_task(self, task: Any) -> None:
        """Django's checks, then the task is one of the project's (every ``Task`` Django
        builds for this backend passes here): a worker may run it."""
        super().validate_task(task)
        record_task(task)

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        """Store the task as a conveyor job; its ``TaskResult`` is ``READY``. Arguments are
        normalized as Django does (``bytes`` read as UTF-8 text, tuples as lists) and
        anything else that is not JSON raises ``TypeError``; a call that cannot bind to
        the task's function raises ``TypeError``: nothing is stored."""
        self.validate_task(task)
        fn = self.app.registry.get(module_path(task.func))
        if fn is None:  # pragma: no cover - validate_task recorded it
            raise UnknownJobError(module_path(task.func))
        # typed parameters validated and made JSON first (docs/job-data.md), then Django's own
        args, kwargs = fn.check_call(list(args), dict(kwargs))
        args, kwargs = normalize_json(list(args)), normalize_json(dict(kwargs))
        after = task.run_after.isoformat() if task.run_after is not None else None
        # 0, the default priority, stays a plain job (get_result reads it from its flow)
        options: dict[str, Any] = {"priority": task.priority} if task.priority else {}
        ref = self.app.enqueue(fn.name, args, kwargs, at=task.run_after,
                               meta={META: {"backend": self.alias, "run_after": after}},
                               queue=task.queue_name, **options)
        if ref is None:
            raise _errors.InvalidTaskError("a conveyor client middleware stopped the enqueue")
        record = self.app.get_job(ref.id)
        if ref.created or record is None:
            # What was enqueued, even if a worker has started it since (an idle worker leases
            # a job one round trip after it is stored); ``refresh()`` reads the news.
            result = _new_result(task, ref.id, args, kwargs, self.alias,
                                 enqueued_at=when(record.created_at) if record else None)
        else:  # a unique job that already existed: it is what the caller got
            result = _result(task, record, self.alias, self.app)
        _signals.task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> Any:
        """The ``TaskResult`` of a stored task, its ``task`` with the options it was
        enqueued with (queue, ``run_after``, backend alias: ``refresh()`` asks the right
        backend); ``TaskResultDoesNotExist`` for anything else, including an id no store
        could hold and a job that is not one of the project's tasks (never imported)."""
        try:
            check_name("task result id", result_id)
        except InvalidNameError:
            raise _errors.TaskResultDoesNotExist(f"no task result {result_id!r}") from None
        record = self.app.get_job(result_id)
        stored = _stored(record) if record is not None else None
        try:
            task = verified_task(stored[0]) if stored is not None else None
        except NotAJob:
            task = None
        if record is None or stored is None or task is None:
            raise _errors.TaskResultDoesNotExist(result_id)
        _, alias, run_after = stored
        priority = record.flow.priority if record.flow is not None else 0
        return _result(_as_enqueued(task, record.queue, alias, run_after, priority), record,
                       alias, self.app)


def _stored(record: JobRecord) -> tuple[str, str, str | None] | None:
    """(task path, backend alias, run_after) of a job that is a Django task, else None."""
    try:
        args, _, meta = decode_payload(record.payload)
    except ValueError:
        return None
    if record.name in (RUN_JOB, RUN_ASYNC_JOB):
        return (str(args[0]), str(args[4]), None) if len(args) == 5 else None
    django = meta.get(META)
    if not isinstance(django, dict) or not isinstance(django.get("backend"), str):
        return None
    after = django.get("run_after")
    return record.name, django["backend"], after if isinstance(after, str) else None


def _as_enqueued(task: Any, queue: str, alias: str, run_after: str | None,
                 priority: int = 0) -> Any:
    """``task`` with the options a job was enqueued with (as it was when enqueued)."""
    try:
        return task.using(queue_name=queue, backend=alias, priority=priority,
                          run_after=datetime.fromisoformat(run_after) if run_after else None)
    except Exception:  # settings changed since (a queue or alias gone): the task as it is
        return task


def _new_result(task: Any, job_id: str, args: Any, kwargs: Any, alias: str,
                enqueued_at: datetime | None = None) -> Any:
    return TaskResult(task=task, id=job_id, status=Status.READY, enqueued_at=enqueued_at,
                      started_at=None, finished_at=None, last_attempted_at=None,
                      args=list(args), kwargs=dict(kwargs), backend=alias, errors=[],
                      worker_ids=[])


def _class_path(name: str) -> str:
    """The import path Django's ``TaskError`` wants: conveyor stores builtins bare."""
    return name if "." in name else f"builtins.{name or 'Exception'}"


def _result(task: Any, record: JobRecord, alias: str, app: Conveyor) -> Any:
    """A ``TaskResult`` from a job's record: status, times, errors with their tracebacks,
    the workers that ran it, the return value (opened and typed by ``app``: sealed or by
    reference, docs/job-data.md)."""
    events = record.events or []
    started = [e for e in events if e.kind == EventKind.STARTED]
    errors = [_base.TaskError(exception_class_path=_class_path(str(e.data.get("type", ""))),
                              traceback=str(e.data.get("traceback", "")))
              for e in events if e.data and "traceback" in e.data]
    status = getattr(Status, _STATUS.get(record.state, "READY"))
    try:
        stored, named, _ = app.data.open_payload(record.id, record.name, record.payload)
    except ConveyorError:  # sealed with a key not held here, a blob gone: as stored
        stored, named = record.args, record.kwargs
    args, kwargs = ((stored[1], stored[2]) if record.name in (RUN_JOB, RUN_ASYNC_JOB)
                    else (stored, named))
    result = TaskResult(
        task=task, id=record.id, status=status, enqueued_at=when(record.created_at),
        started_at=when(started[0].ts if started else None),
        finished_at=when(record.finished_at),
        last_attempted_at=when(started[-1].ts if started else None),
        args=list(args), kwargs=dict(kwargs), backend=alias,
        errors=errors, worker_ids=[e.worker or "" for e in started])
    if record.state is JobState.SUCCEEDED and record.result is not None:
        object.__setattr__(result, "_return_value", app.client.result_of(record))
    return result


def _running(task: Any, args: Any, kwargs: Any, alias: str | None) -> tuple[Any, Any, Any]:
    """The task as enqueued, its ``TaskResult`` as of now (``RUNNING``), and the signal's
    sender; ``task_started`` sent."""
    ctx = current_job()
    found = ctx.meta.get(META)
    django: dict[str, Any] = found if isinstance(found, dict) else {}
    alias = alias or str(django.get("backend") or task.backend)
    backend = _tasks.task_backends[alias]
    record = backend.app.get_job(ctx.job_id)
    task = _as_enqueued(task, ctx.queue, alias, django.get("run_after"))
    result = (_result(task, record, alias, backend.app) if record is not None else
              _new_result(task, ctx.job_id, args, kwargs, alias))
    _signals.task_started.send(type(backend), task_result=result)
    return task, result, type(backend)


def _finished(sender: Any, result: Any, error: BaseException | None, value: Any) -> None:
    status = Status.FAILED if error is not None else Status.SUCCESSFUL
    object.__setattr__(result, "status", status)
    object.__setattr__(result, "finished_at", datetime.now(tz=timezone.utc))
    if error is not None:
        object.__setattr__(result, "errors", [*result.errors, attempt_error(error)])
    else:
        object.__setattr__(result, "_return_value", value)
    _signals.task_finished.send(sender, task_result=result)


def _run(task: Any, args: Any, kwargs: Any, alias: str | None = None) -> Any:
    """Run a Django task in this worker: ``task_started``, the call, the result normalized
    as Django does (a value that is not JSON raises ``TypeError`` here, with its traceback),
    ``task_finished`` after every attempt with its ``TaskError``."""
    task, result, sender = _running(task, args, kwargs, alias)
    extra = (_base.TaskContext(task_result=result),) if task.takes_context else ()
    try:
        value = normalize_json(typed_return(task, task.func(*extra, *args, **kwargs)))
    except BaseException as exc:
        _finished(sender, result, exc, None)
        raise
    _finished(sender, result, None, value)
    return value


async def _arun(task: Any, args: Any, kwargs: Any, alias: str | None = None) -> Any:
    """``_run`` for an ``async def`` task, awaited on the worker's event loop."""
    task, result, sender = await asyncio.to_thread(_running, task, args, kwargs, alias)
    extra = (_base.TaskContext(task_result=result),) if task.takes_context else ()
    try:
        value = normalize_json(typed_return(task, await task.func(*extra, *args, **kwargs)))
    except BaseException as exc:
        _finished(sender, result, exc, None)
        raise
    _finished(sender, result, None, value)
    return value


def _legacy(path: str) -> Any:
    task = verified_task(path)
    if task is None:
        raise UnknownJobError(f"task {path!r} cannot be imported in this worker")
    return task


def run_task(module_path: str, args: list[Any], kwargs: dict[str, Any], takes_context: bool,
             alias: str) -> Any:
    """A job stored as ``conveyor.django`` (before tasks were named by their path): its
    path verified as every task's, then run as one."""
    return _run(_legacy(module_path), args, kwargs, alias)


async def arun_task(module_path: str, args: list[Any], kwargs: dict[str, Any],
                    takes_context: bool, alias: str) -> Any:
    """``run_task`` for an ``async def`` task."""
    return await _arun(_legacy(module_path), args, kwargs, alias)


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
