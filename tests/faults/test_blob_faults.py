"""Payloads by reference under ``kill -9`` (docs/job-data.md, "Clean-up"): enqueuing
processes and workers of jobs with large arguments and results are SIGKILLed at random —
mid-enqueue (a blob written, its job maybe not), mid-run and mid-ack (a result blob written,
its ack maybe not). Afterwards: every enqueue that returned is stored and succeeds with its
own result (nothing lost), no job ends for a missing blob, and once the janitor's sweep has
run the blob directory holds exactly the blobs stored jobs reference (none leaked).

Expectation from trigger.dev's offloaded payloads and the field reports of Celery on Redis
running out of memory on large payloads: offloading must not trade memory for leaks."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conveyor import Conveyor, JobState, Offload
from conveyor.blobs import DirectoryBlobs
from conveyor.worker.blob_sweep import referenced, sweep
from tests.faults.apps import blobby
from tests.faults.conftest import Backend, Faults
from tests.faults.harness import REPO, report, wait_until

#: The full storm on SQLite (the default store, its blobs beside the file); a smaller one on
#: Redis. backend -> (storm seconds, enqueuers).
SIZES = {"sqlite": (10.0, 2), "redis": (6.0, 2)}


def _enqueuer(url: str, blobs: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "CONVEYOR_URL": url, "BLOBBY_DIR": str(blobs),
           "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "tests.faults.apps.blobby", str(log)],
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "redis"], indirect=True)
def test_kill9_during_enqueues_and_acks_leaks_no_blob_and_loses_nothing(
        backend: Backend, faults: Faults, tmp_path: Path) -> None:
    storm, enqueuers = SIZES[backend.name]
    rng = random.Random(57)
    blobs = tmp_path / "blobs"
    env = {"BLOBBY_DIR": str(blobs)}
    opts = {"concurrency": 4, "lease": 3.0, "app_ref": "tests.faults.apps.blobby:app",
            "env": env}
    workers = [faults.worker(backend.url, name=f"w{i}", **opts) for i in range(2)]
    # Each enqueuer process logs to its own file, so the storm can tell which one has stored
    # jobs: one is killed only once it has (a kill during its start-up proves nothing, and
    # under CPU load a start-up can outlast any fixed delay).
    logs = [tmp_path / f"enqueued-{n}" for n in range(enqueuers)]
    feeders = [_enqueuer(backend.url, blobs, log) for log in logs]
    kills = {"enqueuer": 0, "worker": 0}

    def stored(path: Path) -> int:
        return path.read_bytes().count(b"\n") if path.exists() else 0

    try:
        end = time.time() + storm
        # The storm lasts its seconds, and on a slow machine until enough enqueues returned
        # to prove anything (bounded: a store that stores nothing fails below).
        while time.time() < end or (sum(map(stored, logs)) < 40 and time.time() < end + 60):
            time.sleep(rng.uniform(0.3, 0.8))
            i = rng.randrange(len(feeders))
            if rng.random() < 0.5 and stored(logs[i]):
                os.killpg(feeders[i].pid, signal.SIGKILL)
                feeders[i].wait()
                logs[i] = tmp_path / f"enqueued-{len(logs) + kills['enqueuer']}"
                feeders[i] = _enqueuer(backend.url, blobs, logs[i])
                kills["enqueuer"] += 1
            else:
                i = rng.randrange(len(workers))
                workers[i].kill9()
                workers[i] = faults.worker(backend.url, name=f"w{len(faults.workers)}", **opts)
                kills["worker"] += 1
    finally:
        for proc in feeders:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert kills["enqueuer"] and kills["worker"], kills

    app = Conveyor(backend.url, offload=Offload(store=f"file://{blobs}",
                                                threshold=blobby.THRESHOLD))
    faults.apps.append(app)
    logged = dict(line.split() for log in sorted(tmp_path.glob("enqueued-*"))
                  for line in log.read_text().splitlines() if " " in line)
    assert len(logged) > 20, "the enqueuers stored too little to prove anything"

    def finished() -> bool:
        return all(app.storage.count_jobs(state=s) == 0 for s in
                   (JobState.PENDING, JobState.ACTIVE, JobState.RETRYING))

    wait_until(finished, 120, what="every job to finish")
    for w in workers:
        w.kill9()
    stored = app.storage.list_jobs(limit=100_000)
    states = {r.state for r in stored}
    assert states == {JobState.SUCCEEDED}, {r.id: r.message for r in stored
                                            if r.state is not JobState.SUCCEEDED}
    by_id = {r.id: r for r in stored}
    missing = [job_id for job_id in logged if job_id not in by_id]
    assert missing == [], "enqueues that returned but whose job is not stored"
    for job_id, seed in rng.sample(sorted(logged.items()), min(25, len(logged))):
        assert app.client.result_of(by_id[job_id]) == blobby.payload(int(seed))[::-1]

    store = DirectoryBlobs(f"file://{blobs}")
    before = set(store.listing(time.time() + 10))
    collected = sweep(app.data, app.storage.get_job, now=time.time() + 10**6)
    left = set(store.listing(time.time() + 10))
    wanted = set().union(*(referenced(app.storage.get_job(r.id) or r) for r in stored))
    assert left == wanted, "after the sweep, the blobs are exactly those jobs reference"
    assert collected == len(before - left)
    report("35 kill -9 with payloads by reference", backend.name, jobs=len(stored),
           enqueued_logged=len(logged), kills=sum(kills.values()), lost=0,
           orphans_collected=collected, blobs_left=len(left))
