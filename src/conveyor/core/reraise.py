"""A failed job's own exception, raised again where its result is read (``JobRef.result``,
a canvas's ``Run.result``), as Celery re-raises a task's exception from ``AsyncResult.get``.

A job's error is stored as text (its class path, message and traceback: ``ErrorInfo``),
never pickled. It is rebuilt only from a class **this process has already imported**
(nothing is imported because stored data names it) that is an ``Exception`` (never
``SystemExit`` or ``KeyboardInterrupt``) and accepts the message as its one argument; the
object raised is of a class deriving from both that class and ``JobFailed``, so ``except
ValueError:`` and ``except JobFailed:`` both still match, and it carries conveyor's context:
``job_id``, ``state``, ``message``, ``error_type`` and ``job_traceback`` (the traceback as
the worker saw it). Anything else raises a plain ``JobFailed`` with the same context.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, cast

from conveyor.core.job import EventKind, JobRecord
from conveyor.errors import JobFailed

__all__ = ["failure", "rebuild"]

_ENDS = frozenset({EventKind.DEAD, EventKind.FAILED, EventKind.CANCELLED})
_KINDS: dict[type[Exception], type[Exception] | None] = {}


def failure(record: JobRecord) -> JobFailed:
    """The exception to raise for a job that ended failed, dead or cancelled: its own
    exception rebuilt where that is safe, else ``JobFailed``."""
    error = last_error(record)
    base = JobFailed(record.id, record.state.value, record.message,
                     error_type=error.get("type"), job_traceback=error.get("traceback"))
    rebuilt = rebuild(error, base) if error else None
    return rebuilt if rebuilt is not None else base


def last_error(record: JobRecord) -> Mapping[str, str]:
    """``type``, ``message`` and ``traceback`` of the error that ended the job (the data of
    its final event), or an empty mapping when no error ended it (``Fail``, a cancel, a
    parent that failed in a workflow)."""
    for event in reversed(record.events or ()):
        if event.kind in _ENDS:
            data = event.data or {}
            if isinstance(data.get("type"), str) and isinstance(data.get("message"), str):
                return {k: str(v) for k, v in data.items() if k in ("type", "message",
                                                                     "traceback")}
            return {}
    return {}


def rebuild(error: Mapping[str, str], base: JobFailed) -> JobFailed | None:
    """The exception ``error`` describes, with ``base``'s context, or None when its class is
    not already imported here or cannot be built from its message alone."""
    cls = _loaded_class(error.get("type", ""))
    kind = _kind(cls) if cls is not None else None
    if kind is None or cls is None:
        return None
    message = error.get("message", "")
    try:
        exc: Any = kind.__new__(kind, message)
        cast(Any, cls).__init__(exc, message)  # the job's own class's, on the combined kind
        str(exc)  # a class whose __str__ needs what __init__ did not set is not rebuilt
    except Exception:
        return None
    for name, value in base.__dict__.items():  # the job's context, never over its own
        exc.__dict__.setdefault(name, value)
    if sys.version_info >= (3, 11):
        exc.add_note(f"raised by job {base.job_id}, which ended {base.state}")
    return exc  # type: ignore[no-any-return]


def _loaded_class(path: str) -> type | None:
    """The class named ``module.Qualname`` (or a builtin's bare name) if its module is in
    ``sys.modules`` already; never imports."""
    parts = path.split(".") if path else []
    if len(parts) == 1:
        parts = ["builtins", *parts]
    for cut in range(len(parts) - 1, 0, -1):
        module = sys.modules.get(".".join(parts[:cut]))
        if module is None:
            continue
        found: object = module
        for name in parts[cut:]:
            found = getattr(found, name, None)
        return found if isinstance(found, type) else None
    return None


def _kind(cls: type) -> type[Exception] | None:
    """The class deriving from ``cls`` and ``JobFailed`` (made once per class), or None for
    a class that is not an ``Exception`` or cannot be combined (a layout conflict)."""
    if not issubclass(cls, Exception) or issubclass(cls, JobFailed):
        return None
    if cls not in _KINDS:
        try:
            _KINDS[cls] = type(cls.__name__, (cls, JobFailed), {
                "__module__": cls.__module__, "__qualname__": cls.__qualname__,
                "__init__": cls.__init__, "__str__": cls.__str__})
        except TypeError:
            _KINDS[cls] = None
    return _KINDS[cls]
