"""Commands that change state: retry/delete/kill, dead set, pause/resume, workers, batches."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

from conveyor.cli.periodic import format_list as format_periodic
from conveyor.client.periodic import Schedule
from conveyor.core.job import JobState, Outcome
from conveyor.worker.config import QueueWeight, WorkerConfig
from conveyor.worker.launcher import Launcher
from tests.cli.conftest import Env, conveyor
from tests.web.seed import run_one


def test_retry_delete_kill(env: Env) -> None:
    ids = env.seeded.ids
    code, out, _ = env.run("jobs", "retry", ids["dead"], ids["failed"])
    assert code == 0 and "retried 2 of 2" in out
    assert env.state("dead") == "pending" and env.state("failed") == "pending"
    code, out, _ = env.run("jobs", "kill", ids["scheduled"])
    assert code == 0 and env.state("scheduled") == "dead"
    code, out, _ = env.run("jobs", "delete", ids["succeeded"], "missing-id")
    assert code == 0 and "deleted 1 of 2" in out and "not found: missing-id" in out
    assert env.state("succeeded") == "gone"


def test_action_on_unknown_ids_only_is_an_error(env: Env) -> None:
    code, _, err = env.run("jobs", "retry", "nope-1", "nope-2")
    assert code == 2 and "no job with id nope-1, nope-2" in err


def test_action_that_changes_nothing_exits_1(env: Env) -> None:
    code, out, _ = env.run("jobs", "kill", env.seeded.ids["succeeded"])  # finished: not killable
    assert code == 1 and "killed 0 of 1" in out
    assert env.state("succeeded") == "succeeded"


def test_dead_retry_all_and_clear(env: Env) -> None:
    code, out, _ = env.run("dead", "retry-all")
    assert code == 0 and "retried 1 dead" in out and env.state("dead") == "pending"
    env.run("jobs", "kill", env.seeded.ids["scheduled"])
    code, out, _ = env.run("dead", "clear")
    assert code == 0 and "deleted 1 dead" in out and env.state("scheduled") == "gone"


def test_pause_and_resume(env: Env) -> None:
    assert env.run("pause", "exports")[0] == 0
    queues = {q["name"]: q for q in env.json("stats")["queues"]}
    assert queues["exports"]["paused"] and not queues["default"]["paused"]
    assert env.app.storage.dequeue(["exports"], "w", 1, 30.0) == []
    assert env.run("resume", "exports")[0] == 0
    assert not {q["name"]: q for q in env.json("stats")["queues"]}["exports"]["paused"]
    assert len(env.app.storage.dequeue(["exports"], "w", 1, 30.0)) == 1


def test_workers_quiet_and_stop_reach_a_real_worker(env: Env) -> None:
    # A worker running in this process on the seeded store; the commands are sent by the
    # real `conveyor` CLI in a subprocess, through the storage, as an operator would.
    config = WorkerConfig(concurrency=1, heartbeat_interval=0.05, poll_interval=(0.02, 0.05),
                          worker_id="w-cli-remote", queues=(QueueWeight("exports"),))
    launcher = Launcher(env.app, config)
    seen: dict[str, object] = {}

    def until(check: Callable[[], bool]) -> bool:
        deadline = time.monotonic() + 30
        while not check() and time.monotonic() < deadline:
            time.sleep(0.02)
        return check()

    def operator() -> None:
        try:
            until(lambda: any(w.id == config.worker_id for w in env.app.storage.workers()))
            quiet = conveyor("workers", "quiet", config.worker_id, url=env.url)
            seen["quiet"] = (quiet.returncode, "sent quiet" in quiet.stdout)
            seen["quieted"] = until(lambda: launcher.fetcher.quieted)
            ref = env.app.enqueue("shop.export", [99])
            assert ref is not None
            time.sleep(0.3)  # several heartbeats and polls
            record = env.app.get_job(ref.id)
            seen["not taken"] = record is not None and record.state is JobState.PENDING
        finally:
            stop = conveyor("workers", "stop", config.worker_id, url=env.url)
            seen["stop"] = stop.returncode

    sender = threading.Thread(target=operator, daemon=True)
    sender.start()
    assert launcher.run() == 0  # returns only once the stop command arrived
    sender.join(60)
    assert seen == {"quiet": (0, True), "quieted": True, "not taken": True, "stop": 0}
    assert all(w.id != config.worker_id for w in env.app.storage.workers())


def test_workers_unknown_id_and_missing_id(env: Env) -> None:
    code, _, err = env.run("workers", "quiet", "ghost")
    assert code == 2 and "no live worker with id ghost" in err
    code, _, err = env.run("workers", "stop")
    assert code == 2 and "needs at least one worker id" in err


def test_batch_cancel(env: Env) -> None:
    code, out, _ = env.run("batch", "cancel", env.seeded.batch_id)
    assert code == 0 and "4 job(s)" in out
    view = env.json("batch", "show", env.seeded.batch_id)
    assert view["counts"]["cancelled"] == 4 and view["complete"]


def test_batch_watch_of_a_complete_batch_prints_summary_and_exits_0(env: Env) -> None:
    st = env.app.storage
    run_one(st, "exports", Outcome.SUCCEEDED)
    run_one(st, "exports", Outcome.FAILED, message="row 2: price is not a number")
    run_one(st, "exports", Outcome.SUCCEEDED)
    run_one(st, "exports", Outcome.SUCCEEDED)
    code, out, _ = env.run("batch", "watch", env.seeded.batch_id, "--interval", "0.01")
    assert code == 0
    assert "100.0%" in out and "4/4" in out and "succeeded 3" in out and "failed 1" in out
    assert "row 2: price is not a number" in out  # the summary lists failures
    view = env.json("batch", "show", env.seeded.batch_id)
    assert view["failures"][0]["message"] == "row 2: price is not a number"


def test_batch_watch_shows_the_end_at_once_not_at_the_next_redraw(env: Env) -> None:
    """Between redraws the watch waits on the store's batch waiter: with redraws 10 minutes
    apart it still ends as soon as the last job finishes."""
    done: list[tuple[int, str, str]] = []
    watcher = threading.Thread(target=lambda: done.append(
        env.run("batch", "watch", env.seeded.batch_id, "--interval", "600")))
    watcher.start()
    st = env.app.storage
    for _ in range(4):
        run_one(st, "exports", Outcome.SUCCEEDED)
    watcher.join(120)
    assert not watcher.is_alive(), "the watch slept through the end of the batch"
    code, out, _ = done[0]
    assert code == 0 and "4/4" in out


def test_batch_watch_gives_up_after_timeout(env: Env) -> None:
    code, out, _ = env.run("batch", "watch", env.seeded.batch_id, "--interval", "0.01",
                           "--timeout", "0")
    assert code == 1 and "timed out" in out and "0/4" in out


def test_enqueue_by_url_needs_force(env: Env) -> None:
    code, _, err = env.run("enqueue", "shop.register", "--args", "[1, 2]")
    assert code == 2 and "--force" in err
    code, out, _ = env.run("enqueue", "shop.anything", "--args", '[1, "x"]', "--kwargs",
                           '{"k": true}', "--queue", "ops", "--force", "--json")
    assert code == 0
    record = env.app.storage.get_job(json.loads(out)["id"])
    assert record is not None and record.queue == "ops" and record.name == "shop.anything"
    assert record.args == [1, "x"] and record.kwargs == {"k": True}


def test_enqueue_bad_json_is_one_clear_error(env: Env) -> None:
    for argv, needle in ((("--args", "[1,"), "--args is not valid JSON"),
                         (("--args", '{"a": 1}'), "--args must be a JSON array"),
                         (("--kwargs", "[1]"), "--kwargs must be a JSON object")):
        code, out, err = env.run("enqueue", "shop.register", *argv, "--force")
        assert code == 2 and out == "" and needle in err
        assert len(err.strip().splitlines()) == 1


def test_jobs_cancel(env: Env) -> None:
    ids = env.seeded.ids
    code, out, _ = env.run("jobs", "cancel", ids["scheduled"], ids["retrying"], "nope")
    assert code == 0
    assert f"{ids['scheduled']}: cancelled" in out and f"{ids['retrying']}: cancelled" in out
    assert "nope: no such job" in out
    assert env.state("scheduled") == "cancelled" and env.state("retrying") == "cancelled"
    code, out, _ = env.run("jobs", "cancel", ids["succeeded"])  # finished: stays as it was
    assert code == 0 and f"{ids['succeeded']}: succeeded" in out
    assert env.state("succeeded") == "succeeded"
    code, out, _ = env.run("jobs", "cancel", "nope-1")
    assert code == 1 and "nope-1: no such job" in out


def test_periodic_list_pause_resume(env: Env) -> None:
    assert "no periodic schedules yet" in format_periodic([])
    # the seed stored two schedules, as workers do at start; one has enqueued a tick
    env.app.storage.save_schedules([
        Schedule("every-minute", "* * * * *", "shop.register").info()])
    env.app.storage.schedule_ticked("every-minute", env.app.storage.now() - 30)
    rows = {r["name"]: r for r in env.json("periodic", "list")}
    assert set(rows) == {"nightly-export", "restock-check", "every-minute"}
    assert rows["nightly-export"]["tz"] == "Europe/Berlin" and not rows["nightly-export"]["paused"]
    assert rows["every-minute"]["last_tick"] is not None
    assert 0 < rows["every-minute"]["next_tick"] - env.app.storage.now() <= 60
    code, out, _ = env.run("periodic", "pause", "nightly-export")
    assert code == 0 and "paused nightly-export" in out
    assert env.app.storage.schedule_pauses() == {"nightly-export": None}
    code, out, _ = env.run("periodic", "list")
    row = next(line for line in out.splitlines() if line.startswith("nightly-export"))
    assert "PAUSED" in out and " yes " in row and "0 3 * * *" in row
    paused = {r["name"]: r for r in env.json("periodic", "list")}["nightly-export"]
    assert paused["next_tick"] is None  # paused: nothing is due
    code, out, _ = env.run("periodic", "resume", "nightly-export")
    assert code == 0 and not any(s.paused for s in env.app.storage.schedules())
    code, _, err = env.run("periodic", "pause", "no-such")
    assert code == 2 and "no periodic schedule named 'no-such'" in err


def test_periodic_list_flags_queues_no_worker_listens_to(env: Env) -> None:
    code, out, _ = env.run("periodic", "list")
    assert code == 0 and "(!)" not in out  # the seeded worker listens to both queues
    env.app.storage.unregister_worker(env.seeded.worker_id)
    code, out, _ = env.run("periodic", "list")
    assert code == 0
    assert "exports (!)" in out and "default (!)" in out
    assert "no running worker listens to default, exports" in out and "-q default -q exports" in out
    rows = {r["name"]: r for r in env.json("periodic", "list")}
    assert not rows["nightly-export"]["queue_listened"]
