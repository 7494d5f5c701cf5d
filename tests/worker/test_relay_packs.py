"""How many job ids the relay lets one broker message carry: what this process starts within
``reserve_window`` at its recent pace, so a message is never more work than a worker like this
one should hold ahead of its slots (docs/brokers.md, "Packs")."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path

from conveyor import Conveyor
from conveyor.broker.memory import MemoryBroker, open_memory_broker
from conveyor.worker.config import WorkerConfig
from conveyor.worker.launcher import Launcher
from conveyor.worker.relay import Relay


class Recording(MemoryBroker):
    """The in-process broker, noting the pack size each publish was asked for."""

    packs: list[int]

    def publish(self, queue: str, job_ids: Sequence[str],
                keys: Sequence[str | None] | None = None, pack: int = 0) -> list[bool]:
        self.packs.append(pack)
        return super().publish(queue, job_ids, keys, pack)


def _relay(tmp_path: Path, config: WorkerConfig, pace: float) -> tuple[Conveyor, Relay,
                                                                        Recording]:
    tmp_path.mkdir(exist_ok=True)
    app = Conveyor(f"sqlite:///{tmp_path}/r.db", broker=f"memory://{uuid.uuid4().hex}")

    @app.job
    def noop() -> None: ...

    noop.enqueue_many([] for _ in range(20))
    real = open_memory_broker(app.broker_url or "")
    broker = Recording(real.url, real._hub)
    broker.packs = []
    return app, Relay(app.storage, app.clock, config, broker=broker, pace=lambda: pace), broker


def _asked(tmp_path: Path, config: WorkerConfig, pace: float) -> list[int]:
    """The pack bounds one relay round asked the broker for, at ``pace`` jobs a second."""
    app, relay, broker = _relay(tmp_path, config, pace)
    try:
        relay.tick()
        assert relay.published == 20
        return broker.packs
    finally:
        relay.stop(5)
        app.close()


def test_short_jobs_go_in_big_packs_long_ones_one_per_message(tmp_path: Path) -> None:
    """At 10,000 jobs a second a worker starts 500 in the 50 ms reserve window: a message may
    carry that many; at 4 a second (jobs of two seconds on 8 slots) it carries one."""
    for pace, expected in ((10_000.0, 500), (4.0, 1), (100.0, 5)):
        assert _asked(tmp_path / str(pace), WorkerConfig(concurrency=8), pace) == [expected]


def test_a_worker_with_no_reserve_window_sends_one_job_per_message(tmp_path: Path) -> None:
    assert _asked(tmp_path, WorkerConfig(concurrency=8, reserve_window=0.0), 50_000.0) == [1]


def test_before_the_pace_is_known_a_message_carries_a_worker_s_slots(tmp_path: Path) -> None:
    """A worker's first window goes out before any job ran here: a message then carries no
    more than one worker of this size runs at once."""
    assert _asked(tmp_path, WorkerConfig(concurrency=3), 0.0) == [3]


def test_the_launcher_s_relay_follows_its_reserve_s_pace(tmp_path: Path) -> None:
    app = Conveyor(f"sqlite:///{tmp_path}/l.db", broker=f"memory://{uuid.uuid4().hex}")
    launcher = Launcher(app, WorkerConfig(concurrency=2, reserve_window=0.1))
    try:
        assert launcher.relay is not None
        assert launcher.relay.pack_size() == 2  # nothing ran yet
        launcher.reserve._pace = 3_000.0  # as if it had started 3,000 jobs a second
        assert launcher.relay.pack_size() == 300
    finally:
        launcher.relay.stop(5)
        app.close()
