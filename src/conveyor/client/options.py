"""Job options: what ``@app.job(...)`` and ``JobFunction.options(...)`` accept, checked once.

``JobOptions`` is frozen; ``make_options`` is the one way to build or change it, so an
impossible combination fails at decoration time rather than in the worker. Client middleware
uses it to change a draft's options (``make_options(draft.options, queue="vip")``).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypedDict

from conveyor.core.breaker import Breaker
from conveyor.core.flow_control import PRIORITY_MAX, PRIORITY_MIN
from conveyor.core.text import check_name
from conveyor.core.versions import accepted

__all__ = ["EXECUTORS", "Accepts", "Aggregate", "Debounce", "JobOptions", "KeyOption", "Throttle",
           "by_name_keys", "make_options"]

KeyOption = str | Callable[..., str] | None
"""A flow-control key: a fixed string, or a callable given the job's args and kwargs."""


@dataclass(frozen=True, slots=True)
class Debounce:
    """A burst becomes one run: the job runs ``wait`` seconds after the **last** call with
    its key; every call meanwhile moves the run time and (``keep="last"``) its arguments.
    ``key``: a string or a callable given the job's arguments (default: the job's name)."""

    key: KeyOption = None
    wait: float = 1.0
    keep: str = "last"

    @property
    def mode(self) -> str:
        """How the storage folds a call into the job waiting for its key."""
        return "debounce" if self.keep == "last" else "debounce-first"

    @property
    def seconds(self) -> float:
        """The delay of the run after a call."""
        return self.wait


@dataclass(frozen=True, slots=True)
class Throttle:
    """At most one run per window: the first call schedules the run ``every`` seconds later
    and the calls until it starts join it (``keep="first"``: the first call's arguments,
    ``"last"``: the newest). ``key`` as ``Debounce``'s."""

    key: KeyOption = None
    every: float = 1.0
    keep: str = "first"

    @property
    def mode(self) -> str:
        """How the storage folds a call into the job waiting for its key."""
        return "throttle" if self.keep == "first" else "throttle-last"

    @property
    def seconds(self) -> float:
        """The delay of the run after the first call of a window."""
        return self.every


@dataclass(frozen=True, slots=True)
class Aggregate:
    """Many jobs become one call: a job waits ``aggregating`` in the aggregation of its
    ``key`` until the aggregation is due, then the job's aggregator (``@app.aggregate``) runs
    once with every member. Due ``grace`` seconds after the newest member arrived, at most
    ``max_delay`` seconds after the oldest, or at once with ``max_size`` members (the most
    one run takes). ``key``: a string or a callable given the job's arguments (default: the
    job's name). An aggregation is per (queue, job name, key); each member brings its
    settings and the newest member's decide (docs/aggregation.md)."""

    key: KeyOption = None
    grace: float = 5.0
    max_delay: float = 60.0
    max_size: int = 1000


#: ``accepts=`` of a job type: a version, a range or any iterable of them, or None.
Accepts = int | Iterable[int] | None


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
    fold: Debounce | Throttle | None = None  # debounce or throttle
    aggregate: Aggregate | None = None
    #: Where a ``def`` job runs (docs/worker.md, "Executors"): ``"thread"``, ``"process"`` (a
    #: job process the worker kills at the timeout), or None: the worker's ``--executor``.
    executor: str | None = None
    #: Scheduling within the queue (docs/scheduling.md): higher ``priority`` first (-100..100),
    #: ``aging`` seconds per priority point a waiting job gains, ``fair_by`` the key the queue
    #: is shared between round robin, ``cost`` the worker slots a run takes.
    priority: int = 0
    aging: float | None = None
    fair_by: KeyOption = None
    cost: int = 1
    #: A durable job's ``wait_for``: events sent up to this many seconds before the wait
    #: began still count (docs/durable.md, "Events"); 0: only events sent after.
    event_window: float = 0.0
    #: The version of this code (docs/durable.md, "Safe deploys"); None: unversioned, runs
    #: every job as before versions existed.
    version: int | None = None
    #: The versions of stored jobs this code runs (its own among them; ``accepts=`` given as
    #: an int, a range or any iterable of ints).
    accepts: frozenset[int] | None = None
    #: A circuit breaker over the job's key (docs/operations.md, "Breakers").
    breaker: Breaker | None = None

    @property
    def has_flow(self) -> bool:
        """True when jobs of these options carry flow control for the storage to enforce."""
        return bool(self.unique_for or self.concurrency or self.rate_limit or self.order_key
                    or self.fold or self.aggregate or self.priority or self.aging
                    or self.fair_by is not None or self.cost != 1 or self.breaker is not None)


#: The values of ``JobOptions.executor`` (None: the worker's own choice).
EXECUTORS = (None, "thread", "process")

class JobOptionArgs(TypedDict, total=False):
    """The keywords of ``Conveyor.job``, ``Conveyor.periodic`` and ``JobFunction.options``
    (each in docs/api.md, "Options"), typed once: a misspelt option or a value of the wrong
    type is an error where it is written, under mypy or pyright, not at import."""

    queue: str
    retry: int | bool
    timeout: float | None
    expires_in: float | None
    retry_in: Callable[[int, BaseException], float] | None
    unique_for: float | None
    unique_key: KeyOption
    concurrency_key: KeyOption
    concurrency: int
    rate_key: KeyOption
    rate_limit: int
    rate_period: float
    order_key: KeyOption
    debounce: Debounce | None
    throttle: Throttle | None
    aggregate: Aggregate | None
    executor: str | None
    priority: int
    aging: float | None
    fair_by: KeyOption
    cost: int
    event_window: float
    version: int | None
    accepts: Accepts
    breaker: Breaker | None


_OPTION_NAMES = frozenset(f.name for f in dataclasses.fields(JobOptions)) | {
    "retry", "debounce", "throttle"}


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
    debounce, throttle = changes.pop("debounce", None), changes.pop("throttle", None)
    if debounce is not None and throttle is not None:
        raise ValueError("give a job debounce= or throttle=, not both")
    if debounce is not None or throttle is not None:
        changes["fold"] = debounce if debounce is not None else throttle
    opts = dataclasses.replace(base or JobOptions(), **changes)
    if opts.version is not None or opts.accepts is not None:
        opts = dataclasses.replace(opts, accepts=accepted(opts.version, opts.accepts))
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
    if not (isinstance(opts.event_window, int | float) and opts.event_window >= 0):
        raise ValueError(f"event_window must be seconds >= 0, not {opts.event_window!r}")
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
    fold = opts.fold
    if opts.executor not in EXECUTORS:
        raise ValueError(f"executor must be 'thread' or 'process', not {opts.executor!r}")
    _check_scheduling(opts)
    if opts.breaker is not None and not isinstance(opts.breaker, Breaker):
        raise ValueError(f"breaker must be a Breaker, not {opts.breaker!r}")
    if opts.aggregate is not None:
        _check_aggregate(opts)
    if fold is not None:
        if not isinstance(fold, Debounce | Throttle):
            raise ValueError(f"debounce/throttle must be a Debounce or Throttle, not {fold!r}")
        if not fold.seconds > 0:
            raise ValueError(f"{type(fold).__name__} needs a window of seconds > 0, "
                             f"not {fold.seconds!r}")
        if fold.keep not in ("first", "last"):
            raise ValueError(f"keep must be 'first' or 'last', not {fold.keep!r}")
        if opts.unique_for is not None:
            raise ValueError("a debounced or throttled job is already one per key: drop "
                             "unique_for")


def _check_scheduling(opts: JobOptions) -> None:
    if not _whole(opts.priority) or not PRIORITY_MIN <= opts.priority <= PRIORITY_MAX:
        raise ValueError(f"priority must be a whole number from {PRIORITY_MIN} to "
                         f"{PRIORITY_MAX}, not {opts.priority!r}")
    if opts.aging is not None and not (isinstance(opts.aging, int | float)
                                       and not isinstance(opts.aging, bool) and opts.aging > 0):
        raise ValueError(f"aging must be a positive number of seconds, not {opts.aging!r}")
    if not _whole(opts.cost) or opts.cost < 1:
        raise ValueError(f"cost must be a whole number of slots >= 1, not {opts.cost!r}")
    if opts.concurrency and opts.cost > opts.concurrency:
        raise ValueError(f"cost {opts.cost} is more than concurrency={opts.concurrency}: "
                         "the job could never start")
    if opts.fair_by is not None and not (isinstance(opts.fair_by, str) or callable(opts.fair_by)):
        raise ValueError(f"fair_by must be a string or a callable, not {opts.fair_by!r}")
    if opts.aggregate is not None and (opts.priority or opts.aging or opts.fair_by is not None
                                       or opts.cost != 1):
        raise ValueError("an aggregated job runs with its aggregation: priority, aging, "
                         "fair_by and cost do not apply to it")


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_aggregate(opts: JobOptions) -> None:
    agg = opts.aggregate
    if not isinstance(agg, Aggregate):
        raise ValueError(f"aggregate must be an Aggregate, not {agg!r}")
    if not (isinstance(agg.grace, int | float) and agg.grace >= 0):
        raise ValueError(f"Aggregate needs grace >= 0 seconds, not {agg.grace!r}")
    if not (isinstance(agg.max_delay, int | float) and agg.max_delay > 0):
        raise ValueError(f"Aggregate needs max_delay > 0 seconds, not {agg.max_delay!r}")
    if not (isinstance(agg.max_size, int) and not isinstance(agg.max_size, bool)
            and agg.max_size >= 1):
        raise ValueError(f"Aggregate needs max_size >= 1 members, not {agg.max_size!r}")
    if opts.executor == "process":
        raise ValueError("an aggregated job runs in the worker's threads, beside the leases "
                         "of its members: executor='process' does not apply to it")
    # A member runs with its aggregation, never alone: limits on single runs cannot hold for it.
    if (opts.fold is not None or opts.concurrency or opts.rate_limit or opts.order_key
            or opts.breaker is not None):
        raise ValueError("an aggregated job runs with its aggregation: debounce, throttle, "
                         "concurrency, rate_limit, order_key and breaker do not apply to it")


_KEY_FIELDS = ("unique_key", "concurrency_key", "rate_key", "order_key", "fair_by")
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
    fold = opts.fold
    if fold is not None and callable(fold.key) and not hasattr(fold.key, "_by_name"):
        changes["fold"] = dataclasses.replace(fold, key=_named(fold.key, params))
    agg = opts.aggregate
    if agg is not None and callable(agg.key) and not hasattr(agg.key, "_by_name"):
        changes["aggregate"] = dataclasses.replace(agg, key=_named(agg.key, params))
    brk = opts.breaker
    if brk is not None and callable(brk.key) and not hasattr(brk.key, "_by_name"):
        changes["breaker"] = dataclasses.replace(brk, key=_named(brk.key, params))
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

    # How a call binds depends only on its shape (how many positional arguments, which
    # keywords): decided once per shape, not per call (a bulk enqueue calls the key per job).
    shapes: dict[tuple[int, frozenset[str]], str] = {}

    def how(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        if fits(*args, **kwargs):
            return "passed"
        named = dict(zip(params, args, strict=False)) | kwargs
        if len(args) <= len(params) and fits(**named):
            return "named"
        ordered = [named[p] for p in params if p in named]
        if len(ordered) == len(named) and fits(*ordered):
            return "ordered"
        return "none"

    def call(*args: Any, **kwargs: Any) -> str:
        shape = (len(args), frozenset(kwargs))
        way = shapes.get(shape)
        if way is None:
            way = how(args, kwargs)
            if len(shapes) < 64:
                shapes[shape] = way
        if way == "passed":
            return key(*args, **kwargs)
        named = dict(zip(params, args, strict=False)) | kwargs
        if way == "named":
            return key(**named)
        if way == "ordered":
            return key(*[named[p] for p in params if p in named])
        raise TypeError(
            f"flow-control key {getattr(key, '__qualname__', key)!r} accepts neither the "
            f"job's arguments as passed nor by the job's parameter names {params}")

    call._by_name = True  # type: ignore[attr-defined]
    call.__qualname__ = getattr(key, "__qualname__", "key")
    return call
