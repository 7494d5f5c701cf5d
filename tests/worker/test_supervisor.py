"""Supervisor bookkeeping: restart backoff for children that keep dying young, and the
release of a dead child's jobs under the worker id the supervisor chose for it."""

from __future__ import annotations

import os
import signal
import time

from conveyor.worker.supervisor import Supervisor, _Child


def _status_of(signum: int) -> int:
    # the raw waitpid status of a process killed by ``signum``
    return signum


def test_children_dying_young_back_off_doubling_and_a_long_life_resets_it() -> None:
    sup = Supervisor(1, lambda _: 0)
    child = sup.children[0]
    delays = []
    for _ in range(8):
        child.pid, child.started = 1234, time.monotonic()  # died right after start
        sup._exited(child, _status_of(signal.SIGKILL))
        assert child.pid == 0 and child.restart_at is not None
        delays.append(round(child.restart_at - time.monotonic(), 1))
    assert delays[:4] == [0.5, 1.0, 2.0, 4.0]
    assert delays[-1] == 30.0  # capped
    child.pid, child.started = 1234, time.monotonic() - 60  # lived a minute
    sup._exited(child, _status_of(signal.SIGKILL))
    assert round(child.restart_at - time.monotonic(), 1) == 0.5  # type: ignore[operator]


def test_clean_exit_or_stopping_is_not_restarted() -> None:
    sup = Supervisor(2, lambda _: 0)
    first, second = sup.children
    first.pid = second.pid = 99
    sup._exited(first, 0)  # exit code 0: e.g. a remote "stop" command
    assert first.restart_at is None
    sup.stopping = True
    sup._exited(second, _status_of(signal.SIGKILL))
    assert second.restart_at is None


def test_term_is_forwarded_once_and_cancels_pending_restarts() -> None:
    sup = Supervisor(1, lambda _: 0, shutdown_timeout=1)
    sup.children = [_Child(0, pid=0, restart_at=time.monotonic() + 5)]
    sup._on_signal(signal.SIGTERM)
    assert sup.stopping and sup.children[0].restart_at is None
    assert sup._kill_at is not None


def test_supervisor_runs_and_reaps_real_children(tmp_path: os.PathLike[str]) -> None:
    marker = os.path.join(str(tmp_path), "ran")

    def body(worker_id: str) -> int:
        with open(marker, "a") as fh:
            fh.write(f"{os.getpid()}\n")
        return 0  # a clean exit: not restarted, so the supervisor ends

    assert Supervisor(2, body).run() == 0
    with open(marker) as fh:
        assert len(fh.read().split()) == 2


def test_a_child_killed_is_released_under_its_id_and_a_clean_exit_is_not(
        tmp_path: os.PathLike[str]) -> None:
    seen = os.path.join(str(tmp_path), "seen")
    released = os.path.join(str(tmp_path), "released")

    def body(worker_id: str) -> int:
        first = not os.path.exists(seen)
        with open(seen, "a") as fh:
            fh.write(f"{os.getpid()} {worker_id}\n")
        if first:
            os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer would
        return 0  # the restarted child stops cleanly: nothing to release, the supervisor ends

    def release(worker_id: str) -> int:
        with open(released, "a") as fh:
            fh.write(f"{os.getpid()} {worker_id}\n")
        return 0

    sup = Supervisor(1, body, release=release)
    assert sup.run() == 0
    assert sup.restarts == 1 and sup.releasers == {}
    with open(seen) as fh:
        (killed_pid, killed_id), (_, clean_id) = (line.split() for line in fh)
    with open(released) as fh:
        ((helper_pid, released_id),) = (line.split() for line in fh)
    # The supervisor chose the id the child ran under, and released exactly that one.
    assert released_id == killed_id != clean_id
    assert f":{killed_pid}:" in killed_id
    assert int(helper_pid) not in (int(killed_pid), os.getpid())  # a helper of its own
