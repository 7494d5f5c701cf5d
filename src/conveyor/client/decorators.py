"""What ``@app.job``, ``@app.aggregate`` and ``@app.periodic`` do: a function made a
``JobFunction`` of the app's client and registered by its name, an aggregated job's
aggregator registered, a cron schedule declared with the job it ticks.

``Conveyor`` keeps the decorators (each documented there and in docs/api.md) and hands every
call to its ``JobDecorators``, which holds only what registering needs: the client the job
functions enqueue through, the registry, and the schedules the code declares.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from conveyor.client.client import Client
from conveyor.client.draft import build_flow
from conveyor.client.options import JobOptionArgs, make_options
from conveyor.client.periodic import Schedule, validate_cron, validate_tz
from conveyor.client.registry import JobFunction, Registry, default_name
from conveyor.client.schedules import Schedules
from conveyor.core.text import check_name

if TYPE_CHECKING:  # typing.Unpack is Python 3.11's; the package runs on 3.10
    from typing_extensions import Unpack

__all__ = ["JobDecorators"]


class JobDecorators:
    """``Conveyor.job``, ``Conveyor.aggregate`` and ``Conveyor.periodic`` at work, over the
    app's ``client``, ``registry`` and ``schedules``."""

    def __init__(self, client: Client, registry: Registry, schedules: Schedules) -> None:
        self.client = client
        self.registry = registry
        self.schedules = schedules

    def job(self, func: Callable[..., Any] | None = None, /, *, name: str | None = None,
            **options: Unpack[JobOptionArgs]
            ) -> JobFunction | Callable[[Callable[..., Any]], JobFunction]:
        """``Conveyor.job``: ``func`` registered as a job (options as there), or, without
        ``func``, the decorator that registers it."""
        opts = make_options(**options)

        def register(f: Callable[..., Any]) -> JobFunction:
            fn = JobFunction(self.client, f, name or default_name(f), opts)
            self.registry.add(fn)
            return fn

        return register if func is None else register(func)

    def aggregate(
        self, job: JobFunction | str
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """``Conveyor.aggregate``: the decorator registering the aggregator of ``job``."""
        name = job.name if isinstance(job, JobFunction) else job

        def register(f: Callable[..., Any]) -> Callable[..., Any]:
            self.registry.add_aggregator(name, f)
            return f

        return register

    def periodic(self, cron: str, tz: str, name: str | None, queue: str | None,
                 args: Sequence[Any], kwargs: Mapping[str, Any] | None,
                 job_options: Mapping[str, Any],
                 ) -> Callable[[Callable[..., Any] | JobFunction], JobFunction]:
        """``Conveyor.periodic`` (its keywords and their defaults are there): the decorator
        declaring the schedule, and registering the job of a plain function. Raises
        ``ValueError`` for a bad cron expression or time zone, ``TypeError`` for options
        given with a job already registered."""
        validate_cron(cron)
        validate_tz(tz)

        def register(f: Callable[..., Any] | JobFunction) -> JobFunction:
            fn = self._periodic_job(f, queue, job_options)
            given, named = fn.check_call(tuple(args), dict(kwargs or {}),
                                         what=f"periodic schedule {name or fn.name}")
            arguments, keywords = tuple(given), dict(named)
            schedule = Schedule(
                name=name or fn.name, cron=cron, job_name=fn.name,
                queue=queue or fn.opts.queue, args=arguments, kwargs=keywords, tz=tz,
                max_retries=fn.opts.max_retries, timeout=fn.opts.timeout,
                expires_in=fn.opts.expires_in, version=fn.opts.version,
                # args are fixed per schedule, so key callables can run once, here
                flow=build_flow(fn.name, fn.opts, list(arguments), keywords))
            check_name("schedule name", schedule.name)
            check_name("queue", schedule.queue)
            self.schedules.declare(schedule)
            return fn

        return register

    def _periodic_job(self, f: Callable[..., Any] | JobFunction, queue: str | None,
                      job_options: Mapping[str, Any]) -> JobFunction:
        """The job ``@app.periodic`` schedules: ``f`` itself, or ``f`` registered now."""
        if not isinstance(f, JobFunction):
            return self.job(queue=queue or "default", **job_options)(f)
        if job_options:
            # Silently dropping them would run the job without the limits the user wrote.
            raise TypeError(f"{f.name} is already a job, so @app.periodic cannot change its "
                            f"options ({', '.join(sorted(job_options))}); give them to @app.job")
        return f
