"""Scenario: poison data. One bad value harms at most the one job it belongs to.

1,000 good jobs share the store and the workers with jobs that write text no encoder takes as
it is (a lone surrogate, control characters, an ANSI escape, a forged log line) into their
result, failure reason, error and log, with a payload nested 100,000 levels deep, and with
records damaged in storage after they were enqueued (truncated, not UTF-8, a field missing,
a truncated state entry), and on Redis a second batch whose run entries (a bulk join's
jobs) are damaged. Issue 49 adds: flow-control keys that break the key rule (refused at
enqueue; written by a client that does not check them: a 6 KB rate key and concurrency key, an
order key with a newline), workflow node ids that are a stored job's (refused at enqueue, and
at run time by a node that adds one), and through RabbitMQ messages conveyor never sent (a
job of a queue no worker serves, ids no job has, a pack nested 200,000 deep). Pass: every good
job finishes exactly once, the text jobs end in their own natural state with their text
visible, each damaged job ends dead with a reason that names the problem, the other queue's
job is never started, the stray messages are dropped and said so, the workers keep running,
and the CLI and the dashboard list all of them.
"""

from __future__ import annotations

import contextlib
import http.client
import io
import json
import subprocess
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest

from conveyor.app import Conveyor
from conveyor.cli.main import main as cli_main
from conveyor.core.job import ALL_STATES, JobRecord, JobState
from conveyor.errors import InvalidKeyError, WorkflowError
from tests.faults.apps.chaos import POISON_TEXT
from tests.faults.checks import assert_batch_exact, enqueue_batch, wait_batch
from tests.faults.conftest import Backend, Faults
from tests.faults.damage import (
    DEEP_PAYLOAD,
    KEYED_POISONS,
    LONG_KEY,
    POISONS,
    REDIS,
    damage_batch_runs,
    enqueue_keyed,
    enqueue_raw,
    publish_stray,
)
from tests.faults.harness import conveyor_command, report, wait_until
from tests.support.redis_server import free_port

GOOD = 1000
# where the text job writes its poison text -> the state it must end in (retry=0)
TEXT_JOBS = {"result": "succeeded", "fail": "failed", "error": "dead", "log": "succeeded"}


def _terminal(app: Conveyor, ids: list[str]) -> list[JobRecord] | None:
    records = [app.get_job(job_id) for job_id in ids]
    if all(rec is not None and rec.state.terminal for rec in records):
        return [rec for rec in records if rec is not None]
    return None


def _texts(rec: JobRecord) -> str:
    """Every text of a job's record, as one string."""
    return json.dumps(rec.as_dict(), ensure_ascii=False, default=str)


def _cli_ids(url: str) -> set[str]:
    """Every job id ``conveyor jobs list --json`` shows: all states in one real process (its
    exit code and stderr as a user sees them), then state by state through the same ``main``
    in this process (a process per state cost ~1 s each, 12 s of each store's run)."""
    limit = str(GOOD * 2)
    done = subprocess.run(
        [*conveyor_command(), "jobs", "list", "--url", url, "--json", "--limit", limit],
        capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    seen = {row["id"] for row in json.loads(done.stdout)["jobs"]}
    for state in ALL_STATES:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli_main(["jobs", "list", "--url", url, "--state", state.value, "--json",
                             "--limit", limit])
        assert code == 0, (state, err.getvalue())
        assert "Traceback" not in err.getvalue()
        listed = {row["id"] for row in json.loads(out.getvalue())["jobs"]}
        assert listed <= seen, (state, listed - seen)
        seen |= listed
    return seen


def _get(port: int, path: str) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read().decode("utf-8", "replace")
    finally:
        conn.close()


def _dashboard_pages(url: str, tmp: Path, bad_ids: list[str], batches: list[str]) -> list[str]:
    """Serve the dashboard on ``url``; the pages that did not answer 200."""
    port = free_port()
    out = (tmp / "web.out").open("wb")
    web = subprocess.Popen([*conveyor_command(), "web", "--url", url, "--port", str(port)],
                           stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: _answers(port), 30, what="the dashboard to answer")
        paths = ["/", "/queues", "/dead", "/retrying", "/batches"]
        paths += [f"/jobs?state={state.value}&limit=2000" for state in ALL_STATES]
        paths += [f"/jobs/{quote(job_id)}" for job_id in bad_ids]
        paths += [f"/batches/{b}{tab}" for b in batches for tab in ("", "?state=pending")]
        return [f"{path}: {status}" for path in paths
                if (status := _get(port, path)[0]) != 200]
    finally:
        web.terminate()
        web.wait(10)
        out.close()


def _answers(port: int) -> bool:
    try:
        return _get(port, "/")[0] == 200
    except OSError:
        return False


# Each store on its own, then through RabbitMQ (issue 20: the relay publishes damaged and
# poisoned jobs like any other, and ``start`` meets the damage instead of ``dequeue``):
# SQLite + RabbitMQ with every good job, Redis and PostgreSQL + RabbitMQ as a smoke run.
SMOKE = 200
CASES = [
    *[pytest.param(name, None, GOOD, id=name)
      for name in ("sqlite", "postgres", "redis", "redis_cluster", "redis_sentinel")],
    pytest.param("sqlite", "amqp", GOOD, id="sqlite+amqp", marks=pytest.mark.rabbitmq),
    pytest.param("redis", "amqp", SMOKE, id="redis+amqp", marks=pytest.mark.rabbitmq),
    pytest.param("postgres", "amqp", SMOKE, id="postgres+amqp", marks=pytest.mark.rabbitmq),
]


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "broker", "good"), CASES, indirect=["backend"])
def test_poison_data_harms_only_its_own_job(backend: Backend, broker: str | None, good: int,
                                            faults: Faults, request: pytest.FixtureRequest,
                                            tmp_path: Path) -> None:
    env: dict[str, str] = {}
    if broker is not None:
        rabbit = request.getfixturevalue("rabbitmq_server")
        env["CONVEYOR_BROKER"] = f"{rabbit.url}?prefix=p{uuid.uuid4().hex[:10]}"
    app, jobs = faults.client(backend.url)
    batch_id, good_ids = enqueue_batch(app, jobs["faults.work"], [(0,)] * good, "good jobs")

    text_refs = {}
    for where in TEXT_JOBS:
        ref = jobs["faults.poison_text"].options(retry=0).enqueue(where)
        assert ref is not None
        text_refs[where] = ref
    text_ids = {where: ref.id for where, ref in text_refs.items()}

    damaged = {"payload nested 100,000 deep": (enqueue_raw(app, DEEP_PAYLOAD), "nest")}
    for poison in POISONS:
        if backend.name in poison.backends:
            ref = jobs["faults.work"].options(retry=0).enqueue(0)
            assert ref is not None
            poison.damage(app, ref.id)
            damaged[poison.label] = (ref.id, poison.reason)

    # Keys: refused at enqueue in one line, nothing stored; written by a client that does not
    # check them, each ends its own job dead (on PostgreSQL such a rate or concurrency key
    # failed every fetch of the queue, for good).
    with pytest.raises(InvalidKeyError, match="rate key"):
        jobs["faults.work"].options(rate_limit=100, rate_period=1,
                                    rate_key=lambda ms: LONG_KEY).enqueue(0)
    for label, flow in KEYED_POISONS.items():
        damaged[label] = (enqueue_keyed(app, flow), "key rule")

    # Node ids: a good job's id as a node id is refused at enqueue (nothing of that workflow
    # stored); a node that adds one while it runs is told so, and its workflow ends.
    taken = good_ids[0]
    refused = app.workflow(description="a taken node id")
    refused.add(jobs["faults.work"].s(0), node_id=taken)
    with pytest.raises(WorkflowError, match="a node id must be new"):
        refused.enqueue()
    assert app.storage.get_batch(refused.id) is None
    grower = app.workflow(description="adds a taken node id")
    grow_ref = grower.add(jobs["faults.grow"].s(taken))
    grower.enqueue()

    # Messages conveyor never sent (RabbitMQ): another queue's job (no worker serves it),
    # ids no job has, a pack nested 200,000 deep; none may start or come back.
    foreign = ""
    if broker is not None:
        elsewhere = jobs["faults.work"].options(queue="elsewhere").enqueue(0)
        assert elsewhere is not None
        foreign = elsewhere.id
        publish_stray(env["CONVEYOR_BROKER"], "default", [foreign, "no-such-job", "nul\x00"])

    # A bulk join's run entries damaged (Redis): that batch loses its bookkeeping, its
    # jobs run as any other, and each worker says why in one line.
    runs_batch, runs_ids = "", []
    if backend.name in REDIS:
        runs_batch, runs_ids = enqueue_batch(app, jobs["faults.work"], [(0,)] * 50, "runs")
        damage_batch_runs(app, runs_batch)

    workers = [faults.worker(backend.url, concurrency=4, processes=1, env=env)
               for _ in range(2)]
    wait_batch(app, batch_id, timeout=180)
    bad_ids = [job_id for job_id, _ in damaged.values()] + list(text_ids.values())
    records = wait_until(lambda: _terminal(app, bad_ids), 120, what="the bad jobs to end")
    by_id = {rec.id: rec for rec in records}

    # the good jobs: all succeeded, each ran exactly once, counters exact
    assert_batch_exact(app, batch_id, {"succeeded": good})
    runs = faults.log.executions()
    assert sorted(len(runs.get(job_id, [])) for job_id in good_ids) == [1] * good

    # the text jobs end as their code says, and their text is stored and readable
    for where, state in TEXT_JOBS.items():
        rec = by_id[text_ids[where]]
        assert rec.state.value == state, (where, rec.state, rec.message)
        assert rec.unreadable is None, where
        assert "forged line" in _texts(rec), (where, _texts(rec))
    assert text_refs["result"].result(timeout=10) == {"text": POISON_TEXT}

    # each damaged job: dead, alone, with a reason that names the problem
    for label, (job_id, word) in damaged.items():
        rec = by_id[job_id]
        reason = (rec.message or "") + (rec.unreadable or "")
        assert rec.state is JobState.DEAD, (label, rec.state, reason)
        assert word in reason.lower(), (label, reason)

    if runs_batch:
        done = wait_until(lambda: _terminal(app, runs_ids), 120, what="the runs' jobs to end")
        assert {rec.state for rec in done} == {JobState.SUCCEEDED}
        ran = faults.log.executions()
        assert sorted(len(ran.get(job_id, [])) for job_id in runs_ids) == [1] * len(runs_ids)
        said = [line for worker in workers for line in worker.output.splitlines()
                if runs_batch in line and "unreadable" in line]
        assert said, faults.outputs()

    # the node that added a taken id was told so in one line; its workflow ended
    said = grow_ref.result(timeout=60)
    assert "a node id must be new" in said and taken in said and "\n" not in said
    grown = wait_batch(app, grower.id, timeout=60)[0]
    assert grown["total"] == 1 and grown["counts"]["succeeded"] == 1

    if foreign:  # the other queue's job was never started; the strays were dropped, said so
        rec = app.get_job(foreign)
        assert rec is not None and (rec.state, rec.attempt) == (JobState.PENDING, 0)
        for what in ("foreign delivery", "malformed message"):
            wait_until(lambda what=what: what in "".join(w.output for w in workers), 30,
                       what=f"a worker to say it dropped a {what}")

    assert all(worker.alive() for worker in workers), faults.outputs()
    listed = _cli_ids(backend.url)
    assert set(good_ids) | set(bad_ids) <= listed
    batches = [batch_id, runs_batch] if runs_batch else [batch_id]
    assert _dashboard_pages(backend.url, tmp_path, bad_ids, batches) == []
    where = backend.name if broker is None else f"{backend.name}+rabbitmq"
    report("poison data", where, good_jobs=good, good_run_once=good,
           damaged_dead=len(damaged), text_jobs_natural=len(TEXT_JOBS), listed=len(listed),
           foreign_never_started=int(bool(foreign)))
