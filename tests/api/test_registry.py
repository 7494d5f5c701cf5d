"""Job registration: names, options, sync and async functions, the registry."""

from __future__ import annotations

import pytest

from conveyor import Conveyor
from conveyor.client.registry import JobFunction, JobOptions, Registry, make_options
from conveyor.core.retry import backoff


def test_default_name_is_module_and_qualname(app: Conveyor) -> None:
    @app.job
    def resize(path: str) -> str:
        return path.upper()

    assert resize.name == f"{__name__}.test_default_name_is_module_and_qualname.<locals>.resize"
    assert app.registry.get(resize.name) is resize
    assert resize("a.png") == "A.PNG"  # calling it runs the function here
    assert not resize.is_async


def test_name_option_and_async_function(app: Conveyor) -> None:
    @app.job(name="mail.send", queue="mail", retry=False, timeout=30)
    async def send(to: str) -> None:
        return None

    assert isinstance(send, JobFunction)
    assert send.name == "mail.send"
    assert send.is_async
    assert send.opts == JobOptions(queue="mail", max_retries=0, timeout=30)
    assert app.registry.names() == ["mail.send"]


@pytest.mark.parametrize(("retry", "expected"), [(True, 25), (False, 0), (0, 0), (3, 3)])
def test_retry_option_becomes_max_retries(retry: int | bool, expected: int) -> None:
    assert make_options(retry=retry).max_retries == expected


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"retry": -1}, "retry must be"),
        ({"timeout": 0}, "timeout must be a positive"),
        ({"queue": ""}, "queue must be"),
        ({"concurrency_key": "k"}, "concurrency_key needs concurrency"),
        ({"rate_limit": 5}, "rate_period"),
        ({"unique_key": "k"}, "unique_key needs unique_for"),
    ],
)
def test_impossible_options_are_refused_at_decoration(
    app: Conveyor, options: dict[str, object], words: str
) -> None:
    with pytest.raises(ValueError, match=words):
        app.job(**options)  # type: ignore[call-overload]


def test_unknown_option_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="unknown job option"):
        make_options(queues="x")


def test_options_returns_an_unregistered_copy(app: Conveyor) -> None:
    @app.job(queue="a", retry=2)
    def work() -> None: ...

    low = work.options(queue="low", retry=False)
    assert (low.name, low.opts.queue, low.opts.max_retries) == (work.name, "low", 0)
    assert work.opts.queue == "a"
    assert app.registry.get(work.name) is work


def test_two_functions_under_one_name_are_refused(app: Conveyor) -> None:
    @app.job(name="same")
    def one() -> None: ...

    with pytest.raises(ValueError, match="already registered"):
        @app.job(name="same")
        def two() -> None: ...


def test_registering_the_same_function_again_replaces_it() -> None:
    registry = Registry()
    app = Conveyor("memory://")

    def job() -> None: ...

    first = JobFunction(app, job, "j", JobOptions())
    second = JobFunction(app, job, "j", JobOptions(queue="q"))
    registry.add(first)
    registry.add(second)
    assert registry.get("j") is second
    assert len(registry) == 1 and "j" in registry and list(registry) == [second]


@pytest.mark.parametrize("attempt", [1, 2, 5, 10, 25])
def test_backoff_is_attempt_to_the_fourth_plus_15_plus_jitter(attempt: int) -> None:
    for _ in range(50):
        seconds = backoff(attempt)
        assert attempt**4 + 15 <= seconds <= attempt**4 + 15 + 10 * (attempt + 1)


def test_retry_in_hook_is_kept_for_the_worker(app: Conveyor) -> None:
    def every_minute(attempt: int, exc: BaseException) -> float:
        return 60.0 * attempt

    @app.job(retry_in=every_minute)
    def flaky() -> None: ...

    hook = flaky.opts.retry_in
    assert hook is not None and hook(3, ValueError()) == 180.0
