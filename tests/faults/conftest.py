"""Fixtures of the fault suite: a backend URL per parameter, and a harness that starts real
worker processes, builds client apps, and cleans up whatever a scenario left running."""

from __future__ import annotations

import uuid
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from conveyor.app import Conveyor
from conveyor.client.registry import JobFunction
from tests.faults.apps import chaos
from tests.faults.harness import FIGURES, LOG_ENV, ExecLog, WorkerProc, summary_lines
from tests.support.meet import MEET_ENV
from tests.support.postgres_server import PostgresServer
from tests.support.redis_server import RedisServer

BACKENDS = ("sqlite", "postgres", "redis", "redis_cluster")


@dataclass
class Backend:
    """Which storage a scenario runs on, and the URL that opens it (own file or own prefix)."""

    name: str
    url: str


@pytest.fixture
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """The storage named by the test's ``backend`` parameter, isolated for this test."""
    name = request.param
    prefix = f"f{uuid.uuid4().hex[:10]}"
    if name == "sqlite":
        return Backend(name, f"sqlite:///{tmp_path / 'conveyor.db'}")
    if name == "postgres":
        return Backend(name, f"{request.getfixturevalue('postgres_server').url}?schema={prefix}")
    if name == "redis":
        return Backend(name, f"{request.getfixturevalue('redis_server').url}?prefix={prefix}")
    if name == "redis_cluster":
        return Backend(name, f"{request.getfixturevalue('redis_cluster').url}?prefix={prefix}")
    if name == "redis_sentinel":
        return Backend(name, request.getfixturevalue("redis_sentinel").url(f"prefix={prefix}"))
    raise ValueError(name)


@pytest.fixture
def aof_server(request: pytest.FixtureRequest) -> Iterator[RedisServer]:
    """A private redis-server with AOF on, to crash and restart; ``appendfsync`` from the
    test parameter (default ``always``)."""
    server = RedisServer(appendonly=True, appendfsync=getattr(request, "param", "always"))
    server.start()
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture
def private_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server of the test's own that commits durably (``synchronous_commit=on``):
    an acknowledged write must survive its crash."""
    server = PostgresServer(settings={"synchronous_commit": "on"})
    server.start()
    try:
        yield server
    finally:
        server.cleanup()


@dataclass
class Faults:
    """Per-test harness: worker processes, client apps and the shared execution log."""

    dir: Path
    log: ExecLog
    workers: list[WorkerProc] = field(default_factory=list)
    apps: list[Conveyor] = field(default_factory=list)

    def client(self, url: str, **kwargs: Any) -> tuple[Conveyor, dict[str, JobFunction]]:
        """A client app on ``url`` with the chaos jobs registered."""
        app = Conveyor(url, **kwargs)
        self.apps.append(app)
        return app, chaos.register(app)

    def worker(self, url: str, **kwargs: Any) -> WorkerProc:
        """Start one ``conveyor worker`` on ``url`` (kwargs: concurrency, lease, timeout, ...)."""
        env = {LOG_ENV: str(self.log.path), MEET_ENV: str(self.dir / "meet"),
               **kwargs.pop("env", {})}
        name = kwargs.pop("name", f"worker{len(self.workers)}")
        proc = WorkerProc(url=url, log_dir=self.dir, env=env, name=name, **kwargs)
        self.workers.append(proc)
        return proc.start()

    def outputs(self) -> str:
        """The tail of every worker's output, for failure reports."""
        parts = []
        for proc in self.workers:
            tail = "\n".join(proc.output.splitlines()[-40:])
            parts.append(f"----- {proc.name} (pid {proc.popen.pid if proc.popen else '-'})\n{tail}")
        return "\n".join(parts)

    def close(self) -> None:
        """Kill leftover workers and close client apps."""
        for proc in self.workers:
            proc.cleanup()
        for app in self.apps:
            app.close()


@pytest.fixture
def faults(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Faults]:
    """The harness for one scenario; prints worker output when the scenario failed."""
    harness = Faults(dir=tmp_path, log=ExecLog(tmp_path / "executions.ndjson"))
    try:
        yield harness
    finally:
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            print("\n" + harness.outputs())
        harness.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    """Keep each phase's report on the item so the ``faults`` fixture knows about failures."""
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print the figures every scenario measured (see docs/reliability.md)."""
    if not FIGURES:
        return
    terminalreporter.section("fault suite figures")
    for line in summary_lines():
        terminalreporter.write_line(line)
