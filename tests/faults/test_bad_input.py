"""Scenario 6: bad input gets a clear error and disturbs nothing else.

Unknown job names and damaged payloads reach a worker (written straight into storage, as a
client of another version could); arguments that are not JSON or too large are refused at
enqueue; a wrong URL or password stops with a message that names the problem.
"""

from __future__ import annotations

import subprocess
import time
from datetime import datetime, timezone
from functools import partial

import pytest

from conveyor.app import Conveyor
from conveyor.core.ids import new_id
from conveyor.core.job import EventKind, JobRecord, JobSpec, JobState
from conveyor.core.serializer import encode_payload
from conveyor.errors import PayloadError, StorageURLError
from tests.faults.checks import assert_batch_exact, enqueue_batch, wait_batch
from tests.faults.conftest import Backend, Faults
from tests.faults.harness import APP_REF, REPO, conveyor_command, report, wait_until
from tests.support.redis_server import RedisServer, free_port, redis_server_binary

needs_redis = pytest.mark.skipif(redis_server_binary() is None, reason="needs redis-server")

BAD_JOBS = {
    "unknown name": ("faults.no_such_job", encode_payload([], {}), "faults.no_such_job"),
    "payload not JSON": ("faults.work", "{not json", "payload"),
    "payload not an object": ("faults.work", '["a"]', "payload"),
    "arguments do not fit": ("faults.work", encode_payload([], {"nope": 1}), "nope"),
}


def _reported(app: Conveyor, job_id: str) -> JobRecord | None:
    """The job once its worker has recorded an error, failure or death for it."""
    rec = app.get_job(job_id)
    kinds = {EventKind.ERROR, EventKind.FAILED, EventKind.DEAD}
    if rec is not None and any(e.kind in kinds for e in rec.events or ()):
        return rec
    return None


def _error_text(rec: JobRecord) -> str:
    parts = [rec.message or ""]
    for event in rec.events or ():
        parts.append(event.message or "")
        parts.append(str((event.data or {}).get("message", "")))
    return "\n".join(parts)


@pytest.mark.parametrize("backend", ["sqlite", "redis"], indirect=True)
def test_unknown_names_and_damaged_payloads_fail_clearly(backend: Backend, faults: Faults) -> None:
    """Each bad job ends with an error that names the problem; 100 good jobs all finish and
    the worker keeps running."""
    app, jobs = faults.client(backend.url)
    bad_ids = {}
    for label, (name, payload, _) in BAD_JOBS.items():
        spec = JobSpec(id=new_id(), name=name, queue="default", payload=payload, max_retries=0)
        app.storage.enqueue([spec])
        bad_ids[label] = spec.id
    batch_id, _ = enqueue_batch(app, jobs["faults.work"], [(5,)] * 100, "good neighbours")
    worker = faults.worker(backend.url, name="w", lease=3)

    wait_batch(app, batch_id, timeout=40)
    assert_batch_exact(app, batch_id, {"succeeded": 100})
    for label, job_id in bad_ids.items():
        rec = wait_until(partial(_reported, app, job_id), 20, what=f"{label} to be reported")
        assert rec.state in (JobState.FAILED, JobState.DEAD, JobState.RETRYING), label
        assert BAD_JOBS[label][2] in _error_text(rec), (label, _error_text(rec))
        assert job_id not in faults.log.executions()
    assert worker.alive()
    report("6 unknown name / bad payload", backend.name, bad_jobs=len(bad_ids), good_lost=0)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_arguments_that_cannot_be_stored_are_refused_at_enqueue(
    backend: Backend, faults: Faults
) -> None:
    """Not-JSON arguments name the bad value's path; an oversized payload gives both sizes.
    Nothing is stored either way."""
    app, jobs = faults.client(backend.url, max_payload=4096)
    with pytest.raises(PayloadError, match=r"args\[0\].*datetime"):
        jobs["faults.work"].enqueue(datetime.now(timezone.utc))
    with pytest.raises(PayloadError, match=r"4096"):
        jobs["faults.work"].enqueue("x" * 10_000)
    assert sum(app.storage.count_jobs(state=s) for s in JobState) == 0


def _noop() -> None:
    """A job that is never run: these tests fail before anything is stored."""


def _run_cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*conveyor_command(), *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, check=False)


def test_wrong_url_is_a_one_line_error() -> None:
    """An unknown scheme stops the worker at once with exit code 2 and the reason."""
    done = _run_cli("worker", APP_REF, "--url", "bogus://somewhere/x")
    assert done.returncode == 2, done
    assert "unknown storage scheme" in done.stderr and "Traceback" not in done.stderr
    with pytest.raises(StorageURLError, match="no scheme"):
        Conveyor("just-a-path.db").storage  # noqa: B018 - opening is the point


@needs_redis
def test_unreachable_redis_is_a_clear_error() -> None:
    """Nothing listens on the port: enqueue fails with an error naming the connection."""
    port = free_port()
    app = Conveyor(f"redis://127.0.0.1:{port}/0?prefix=x")
    fn = app.job(name="x.y")(_noop)
    started = time.monotonic()
    with pytest.raises(Exception) as info:
        fn.enqueue()
    text = str(info.value).lower()
    assert str(port) in text or "connect" in text or "unavailable" in text, info.value
    assert time.monotonic() - started < 30
    app.close()


@needs_redis
def test_wrong_password_is_reported_and_not_leaked(faults: Faults) -> None:
    """A client and a worker with the wrong password say it is an authentication problem,
    never print the password, and a correctly configured worker on the same server works."""
    with RedisServer(password="right-secret") as server:
        bad_url = f"redis://:wrong-secret@127.0.0.1:{server.port}/0?prefix=pw"
        good_url = f"{server.url}?prefix=pw"
        bad_app = Conveyor(bad_url)
        fn = bad_app.job(name="x.y")(_noop)
        with pytest.raises(Exception) as info:
            fn.enqueue()
        assert "wrong-secret" not in str(info.value)
        assert any(w in str(info.value).lower() for w in ("auth", "password", "wrongpass"))
        bad_app.close()

        bad = faults.worker(bad_url, name="bad-password")
        app, jobs = faults.client(good_url)
        batch_id, _ = enqueue_batch(app, jobs["faults.work"], [(5,)] * 50, "next door")
        good = faults.worker(good_url, name="good-password")
        wait_batch(app, batch_id, timeout=30)
        assert_batch_exact(app, batch_id, {"succeeded": 50})
        wait_until(lambda: not bad.alive() or "auth" in bad.output.lower(), 15,
                   what="the bad worker to report the authentication error")
        assert "auth" in bad.output.lower() or "password" in bad.output.lower(), bad.output
        assert "wrong-secret" not in bad.output
        assert good.alive()
        if not bad.alive():
            assert bad.wait(1) != 0
