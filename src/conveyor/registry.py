"""Job registration: ``@app.job`` turns a function into a ``JobFunction`` known by a stable name.

The name, not the function object, is what is stored with each job; a worker looks it up in
its ``Registry``. The default name is ``f"{func.__module__}.{func.__qualname__}"``; pass
``name=`` to keep the stored name when you move or rename the function. A function defined in
a script run as ``python myapp.py`` is named after the module a worker imports it as
(``myapp.register_product``), never ``__main__.…``, which no worker could resolve.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, overload

from conveyor.errors import ConveyorError
from conveyor.text import check_name

if TYPE_CHECKING:
    from conveyor.app import Conveyor
    from conveyor.client import JobRef

__all__ = [
    "JobFunction", "JobOptions", "Registry", "UnimportableJobError", "default_name",
    "importable_module", "make_options",
]

KeyOption = str | Callable[..., str] | None
"""A flow-control key: a fixed string, or a callable given the job's args and kwargs."""


@dataclass(frozen=True, slots=True)
class JobOptions:
    """The options a ``JobFunction`` enqueues with (see ``Conveyor.job`` for each meaning)."""

    queue: str = "default"
    max_retries: int = 25
    timeout: float | None = None
    expires_in: float | None = None
    retry_in: Callable[[int, BaseException], float] | None = None
    unique_for: float | None = None
    unique_key: KeyOption = None
    concurrency_key: KeyOption = None
    concurrency: int = 0
    rate_key: KeyOption = None
    rate_limit: int = 0
    rate_period: float = 0.0
    order_key: KeyOption = None


_OPTION_NAMES = frozenset(f.name for f in dataclasses.fields(JobOptions)) | {"retry"}


def make_options(base: JobOptions | None = None, /, **changes: Any) -> JobOptions:
    """``base`` (or the defaults) with ``changes`` applied and checked.

    Accepts the keywords of ``Conveyor.job``: ``retry`` (int, True for 25, False for 0) is
    turned into ``max_retries``. Raises ``TypeError`` for an unknown option and ``ValueError``
    for an impossible value, at decoration time rather than in the worker.
    """
    unknown = set(changes) - _OPTION_NAMES
    if unknown:
        raise TypeError(f"unknown job option(s): {', '.join(sorted(unknown))}")
    if "retry" in changes:
        changes["max_retries"] = _retries(changes.pop("retry"))
    opts = dataclasses.replace(base or JobOptions(), **changes)
    _check(opts)
    return opts


def _retries(retry: int | bool) -> int:
    if retry is True:
        return 25
    if retry is False:
        return 0
    if not isinstance(retry, int) or retry < 0:
        raise ValueError(f"retry must be True, False or a count >= 0, not {retry!r}")
    return retry


def _check(opts: JobOptions) -> None:
    if not opts.queue or not isinstance(opts.queue, str):
        raise ValueError(f"queue must be a non-empty string, not {opts.queue!r}")
    check_name("queue", opts.queue)
    if opts.max_retries < 0:
        raise ValueError("max_retries must be >= 0")
    for field in ("timeout", "expires_in", "unique_for"):
        value = getattr(opts, field)
        if value is not None and value <= 0:
            raise ValueError(f"{field} must be a positive number of seconds, not {value!r}")
    if opts.concurrency < 0 or (opts.concurrency_key is not None and opts.concurrency == 0):
        raise ValueError("concurrency_key needs concurrency=N (the most jobs running at once)")
    if opts.rate_key is not None and opts.rate_limit <= 0:
        raise ValueError("rate_key needs rate_limit=N and rate_period=seconds")
    if opts.rate_limit < 0 or (opts.rate_limit > 0 and opts.rate_period <= 0):
        raise ValueError("rate_limit=N needs rate_period > 0 (the window, in seconds)")
    if opts.unique_key is not None and opts.unique_for is None:
        raise ValueError("unique_key needs unique_for=seconds (how long the lock is held)")


_KEY_FIELDS = ("unique_key", "concurrency_key", "rate_key", "order_key")
_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def by_name_keys(opts: JobOptions, func: Callable[..., Any]) -> JobOptions:
    """``opts`` whose key callables also accept the job's arguments by parameter name.

    ``concurrency_key=lambda seller_id, **_: ...`` on ``register(seller_id, product_id)`` is
    the natural way to pick one argument, but called with the enqueue's positional arguments
    it would fail; such a key is called with the arguments bound to the job's parameter names
    instead. A key that accepts the arguments as passed is called as before.
    """
    try:
        params = [p.name for p in inspect.signature(func).parameters.values()
                  if p.kind in _POSITIONAL]
    except (TypeError, ValueError):  # no signature (some builtins): keys are called as passed
        return opts
    changes: dict[str, Any] = {f: _named(getattr(opts, f), params) for f in _KEY_FIELDS
               if callable(getattr(opts, f)) and not hasattr(getattr(opts, f), "_by_name")}
    return dataclasses.replace(opts, **changes) if changes else opts


def _named(key: Callable[..., str], params: list[str]) -> Callable[..., str]:
    try:
        sig = inspect.signature(key)
    except (TypeError, ValueError):
        return key

    def fits(*args: Any, **kwargs: Any) -> bool:
        try:
            sig.bind(*args, **kwargs)
        except TypeError:
            return False
        return True

    def call(*args: Any, **kwargs: Any) -> str:
        if fits(*args, **kwargs):
            return key(*args, **kwargs)
        named = dict(zip(params, args, strict=False)) | kwargs
        if len(args) <= len(params) and fits(**named):
            return key(**named)
        ordered = [named[p] for p in params if p in named]
        if len(ordered) == len(named) and fits(*ordered):
            return key(*ordered)
        raise TypeError(
            f"flow-control key {getattr(key, '__qualname__', key)!r} accepts neither the "
            f"job's arguments as passed nor by the job's parameter names {params}")

    call._by_name = True  # type: ignore[attr-defined]
    call.__qualname__ = getattr(key, "__qualname__", "key")
    return call


class UnimportableJobError(ConveyorError, TypeError):
    """A job function's default name points at ``__main__`` with no importable module."""


def default_name(func: Callable[..., Any]) -> str:
    """The stored name of a job function: ``module.qualname``.

    ``__main__`` is replaced by the module a worker would import the script as (see
    ``importable_module``); where there is none (an interactive session, ``python -c``) the
    name keeps ``__main__`` and enqueueing such a job raises ``UnimportableJobError``.
    """
    module = getattr(func, "__module__", None) or "__main__"
    if module == "__main__":
        module = importable_module() or module
    qualname = getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))
    return f"{module}.{qualname}"


def importable_module() -> str | None:
    """The name under which ``import`` would load the running ``__main__`` script, or None.

    ``python -m pkg.mod`` records it in ``__spec__``; ``python pkg/mod.py`` does not, so it
    is derived from the file's path relative to the first ``sys.path`` entry that holds it
    (the script's own directory comes first, as for the worker started from there).
    """
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name and spec.name != "__main__":
        return str(spec.name)  # pkg.__main__ for `python -m pkg`: importable as such
    path = getattr(main, "__file__", None)
    if not path or not str(path).endswith(".py"):
        return None
    target = os.path.realpath(path)
    for entry in sys.path:
        base = os.path.realpath(entry or os.getcwd())
        rel = os.path.relpath(target, base)
        if rel.startswith(os.pardir + os.sep) or os.path.isabs(rel):
            continue
        parts = rel[: -len(".py")].split(os.sep)
        if parts[-1] == "__init__":
            parts.pop()
        if parts and all(p.isidentifier() for p in parts):
            return ".".join(parts)
    return None


def check_importable(name: str) -> None:
    """Refuse to store a job name that only this ``__main__`` process could resolve."""
    if name.startswith("__main__."):
        raise UnimportableJobError(
            f"job {name!r} is defined in a script no worker can import; move it into a "
            "module (e.g. myapp.py, run by `conveyor worker myapp:app`) or register it "
            "with @app.job(name=...) in a module the worker imports"
        )


class JobFunction:
    """A registered job: call it to run the function here, ``enqueue`` it to run it in a worker.

    ``enqueue*`` return ``None`` instead of a ``JobRef`` when a client middleware stopped the
    enqueue (see ``conveyor.middleware``).
    """

    def __init__(
        self, app: Conveyor, func: Callable[..., Any], name: str, opts: JobOptions
    ) -> None:
        self.app = app
        self.func = func
        self.name = name
        self.opts = by_name_keys(opts, func)
        self.is_async = inspect.iscoroutinefunction(func)
        self.__doc__ = func.__doc__
        self.__wrapped__ = func

    def __repr__(self) -> str:
        return f"<JobFunction {self.name} queue={self.opts.queue}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the function directly, in this process (no storage involved)."""
        return self.func(*args, **kwargs)

    def enqueue(self, *args: Any, **kwargs: Any) -> JobRef | None:
        """Store the job to run as soon as a worker is free."""
        return self.app.enqueue_function(self, args, kwargs)

    def enqueue_in(self, delay: float | timedelta, *args: Any, **kwargs: Any) -> JobRef | None:
        """Store the job to run ``delay`` seconds (or a ``timedelta``) from now."""
        return self.app.enqueue_function(self, args, kwargs, delay=delay)

    def enqueue_at(self, when: datetime, *args: Any, **kwargs: Any) -> JobRef | None:
        """Store the job to run at ``when``, a timezone-aware datetime."""
        return self.app.enqueue_function(self, args, kwargs, at=when)

    @overload
    def enqueue_many(
        self, items: Iterable[Any], *, return_refs: Literal[True] = True
    ) -> list[JobRef]: ...

    @overload
    def enqueue_many(self, items: Iterable[Any], *, return_refs: Literal[False]) -> int: ...

    def enqueue_many(self, items: Iterable[Any], *, return_refs: bool = True) -> list[JobRef] | int:
        """Store one job per item, streamed to the storage in chunks of 1,000.

        Each item is the job's arguments: a list or tuple of positional arguments, a mapping of
        keyword arguments, or a 2-tuple ``(args, kwargs)``. Returns one ``JobRef`` per job
        stored; with ``return_refs=False`` it returns only how many were stored, so a call
        with millions of items (e.g. from a generator) runs in bounded memory.
        """
        if return_refs:
            return self.app.enqueue_many_function(self, items, return_refs=True)
        return self.app.enqueue_many_function(self, items, return_refs=False)

    def options(self, **overrides: Any) -> JobFunction:
        """A copy with other options for the next enqueues, e.g. ``.options(queue="low")``.

        Takes the keywords of ``Conveyor.job`` (not ``name``); the copy is not registered,
        the worker runs it under the same name.
        """
        return JobFunction(self.app, self.func, self.name, make_options(self.opts, **overrides))


def split_item(item: Any, index: int) -> tuple[Sequence[Any], Mapping[str, Any]]:
    """(args, kwargs) of one ``enqueue_many`` item; ``TypeError`` naming the item otherwise."""
    if isinstance(item, Mapping):
        return (), item
    if (
        isinstance(item, tuple) and len(item) == 2
        and isinstance(item[0], (list, tuple)) and isinstance(item[1], Mapping)
    ):
        return item[0], item[1]
    if isinstance(item, (list, tuple)):
        return item, {}
    raise TypeError(
        f"enqueue_many item {index} is a {type(item).__name__}; give a list/tuple of args, "
        "a dict of kwargs, or an (args, kwargs) tuple"
    )


class Registry:
    """Job functions by name, as the worker looks them up."""

    def __init__(self) -> None:
        self._jobs: dict[str, JobFunction] = {}

    def add(self, fn: JobFunction) -> None:
        """Register ``fn`` under ``fn.name``.

        Registering the same function again (e.g. a module reloaded) replaces it; another
        function under a name already taken raises ``ValueError``, since the worker could not
        tell which one a stored job means.
        """
        check_name("job name", fn.name)
        existing = self._jobs.get(fn.name)
        if existing is not None and default_name(existing.func) != default_name(fn.func):
            raise ValueError(
                f"job name {fn.name!r} is already registered for {default_name(existing.func)}; "
                "pass name= to tell them apart"
            )
        self._jobs[fn.name] = fn

    def get(self, name: str) -> JobFunction | None:
        """The job registered under ``name``, or None."""
        return self._jobs.get(name)

    def names(self) -> list[str]:
        """Every registered name, sorted."""
        return sorted(self._jobs)

    def __contains__(self, name: object) -> bool:
        return name in self._jobs

    def __len__(self) -> int:
        return len(self._jobs)

    def __iter__(self) -> Iterator[JobFunction]:
        return iter(list(self._jobs.values()))
