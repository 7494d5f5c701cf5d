"""Jobs the fault suite runs inside real ``conveyor worker`` processes.

Every execution appends one JSON line per step to the file named by ``CONVEYOR_FAULTS_LOG``
(``start`` before the work, ``end`` after it, both before the worker acknowledges), so a test
can count executions per job across processes that were killed half-way. Lines are written
with one ``write`` on an ``O_APPEND`` descriptor, which Linux keeps whole for short lines.

The worker loads ``tests.faults.apps.chaos:app``; its storage URL comes from the worker's
``--url`` (or ``CONVEYOR_URL``). Tests build their own client app with ``register``.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import random
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from conveyor import Aggregate, Fail, Member, current_job
from conveyor.app import Conveyor
from conveyor.client.registry import JobFunction
from conveyor.errors import WorkflowError
from tests.support.meet import meet

LOG_ENV = "CONVEYOR_FAULTS_LOG"


def record(step: str, member: Member | None = None, **extra: Any) -> None:
    """Append one execution step of the current job (or of ``member`` of the aggregated run
    it leads) to the shared log, if one is configured."""
    path = os.environ.get(LOG_ENV)
    if not path:
        return
    ctx = current_job() if member is None else member.ctx
    # "pp": the parent, the worker process whose job process ran it (--executor process)
    line = {"j": ctx.job_id, "a": ctx.attempt, "p": os.getpid(), "pp": os.getppid(), "s": step,
            "t": time.time()}
    line.update(extra)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)


def work(ms: float, processes: int = 0) -> int:
    """A short job: sleep ``ms`` milliseconds; returns the pid that ran it. With
    ``processes``, it first waits until that many worker processes have started one
    (``tests.support.meet``: the work is shared because the test says so)."""
    meet(processes)
    record("start")
    time.sleep(ms / 1000.0)
    record("end")
    return os.getpid()


def long_first(first_ms: float, later_ms: float) -> int:
    """``faults.work`` whose first attempt lasts ``first_ms`` and any later one ``later_ms``:
    a first run long enough to be killed in, a rescue that costs the test no wait."""
    record("start")
    time.sleep((first_ms if current_job().attempt == 1 else later_ms) / 1000.0)
    record("end")
    return os.getpid()


def crash(how: str) -> None:
    """A poison job that kills its own process: ``exit`` (os._exit) or ``segv`` (NULL read)."""
    record("start", how=how)
    if how == "segv":
        ctypes.string_at(0)  # reads address 0: SIGSEGV, the interpreter dies with no cleanup
    os._exit(3)


def write_then_die(path: str) -> int:
    """Do a side effect (append the attempt number to ``path``), then die before the ack
    on the first attempt. A real job would use the attempt number to dedupe."""
    ctx = current_job()
    record("start")
    with open(path, "a", encoding="utf-8") as out:
        out.write(f"{ctx.attempt} {ctx.errors}\n")
        out.flush()
        os.fsync(out.fileno())
    if ctx.attempt == 1:
        os._exit(4)
    record("end")
    return ctx.attempt


def stall() -> int:
    """On the first attempt, freeze this whole process (SIGSTOP) right before returning, so
    a test can wake it after its lease was re-granted; later attempts return at once."""
    record("start")
    if current_job().attempt == 1:
        # On SQLite the threads of one process write one at a time (the storage's writer
        # lock). Freeze holding it, so that no other thread of this process is inside a write
        # transaction when it stops: a process frozen mid-transaction keeps SQLite's write
        # lock and stops every other process's writes until it is woken, the rescuer's
        # included (seen once in ~100 runs under load: the rescuer died on "database is
        # locked"). That is SQLite's nature, not what this scenario is about.
        writer = getattr(getattr(app.storage, "_db", None), "_writer", None)
        with writer if writer is not None else contextlib.nullcontext():
            # Aim the stop at this thread, not the process: kill(getpid()) may let the kernel
            # hand the signal to another (sleeping) thread, and until that thread is scheduled
            # and starts the group stop this one runs on -- on a loaded machine long enough to
            # return and send the acknowledgement before the process freezes. tgkill stops
            # this thread before it runs another instruction of Python, and the whole process.
            signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)
    record("end")
    return os.getpid()


def ordered(account: int, seq: int, ms: float) -> int:
    """A job of an ordered key (``acct:<account>``, registered with ``order_key``): the
    ``seq``-th of its account; sleeps ``ms``. The order check reads the jobs' own records."""
    record("start", account=account, seq=seq)
    time.sleep(ms / 1000.0)
    record("end", account=account, seq=seq)
    return seq


def collect(results: list[Any], ms: float) -> int:
    """A workflow's fan-in node: gets its parents' results (``results=True``); returns how
    many it got, so the test sees that none was lost or doubled."""
    record("start", n=len(results))
    time.sleep(ms / 1000.0)
    record("end")
    return len(results)


def expand(count: int, low: int, high: int, pause: float = 0.05) -> int:
    """A workflow node that grows it while it runs: ``count`` ``faults.work`` nodes of
    ``low``-``high`` ms, added 25 at a time with ``pause`` s between (so a kill lands
    half-way),
    and a ``faults.collect`` node after all of them. Deterministic in its arguments: a run
    after a kill adds the same nodes again, which must be stored once."""
    record("start")
    wf = current_job().workflow
    work_fn = current_job().app.registry.get("faults.work")
    collect_fn = current_job().app.registry.get("faults.collect")
    rng = random.Random(count)
    parts = []
    for start in range(0, count, 25):
        chunk = range(start, min(start + 25, count))
        parts += wf.add_group([work_fn.s(rng.randint(low, high)) for _ in chunk])
        record("added", n=len(parts))
        time.sleep(pause)
    wf.add(collect_fn.s(20), after=parts, results=True)
    record("end")
    return count


def grow(node_id: str) -> str:
    """A workflow node that adds a child under ``node_id`` (a stored job's id, in the poison
    scenario): the store refuses it in one line, returned as this node's result."""
    record("start")
    ctx = current_job()
    try:
        ctx.workflow.add(ctx.app.registry.get("faults.work").s(0), node_id=node_id,
                         after=[ctx.workflow.node])
    except WorkflowError as exc:
        record("end")
        return str(exc)
    record("end")
    return "added"


def finished(workflow_id: str) -> str:
    """A workflow's ``on_complete`` callback: the log counts how often it ran."""
    record("start", workflow=workflow_id)
    record("end")
    return workflow_id


def member(n: int) -> None:
    """A member of an aggregation group (``faults.digest`` runs it with its group)."""
    raise AssertionError(f"member {n} ran alone: a member runs through its aggregator")


def digest(members: list[Member]) -> int:
    """The aggregator of ``faults.member``: logs a start per member, works 200 ms (so a kill
    lands in the middle of a run), then fails the multiples of seven and succeeds the rest."""
    lead = members[0].id
    for m in members:
        record("start", m, lead=lead)
    time.sleep(0.2)
    for m in members:
        if m.args[0] % 7 == 0:
            m.fail("a multiple of seven")
        record("end", m)
    return len(members)


# Text no encoder accepts as it is: a lone surrogate (what ``json.loads`` of the valid ASCII
# JSON ``"\\ud800"`` gives), a bell, an ANSI escape and a newline that would forge a log line.
POISON_TEXT = json.loads('"bad \\ud800 text \\u0007 \\u001b[31mred\\n2026-01-01 forged line"')


def poison_text(where: str) -> Any:
    """Put ``POISON_TEXT`` where a job can write text: its ``result``, a ``fail`` reason, an
    ``error`` message, or a ``log`` message and its data."""
    record("start")
    if where == "fail":
        raise Fail(POISON_TEXT)
    if where == "error":
        raise RuntimeError(POISON_TEXT)
    if where == "log":
        current_job().log(POISON_TEXT, note=POISON_TEXT)
    record("end")
    return {"text": POISON_TEXT} if where == "result" else None


def steps(count: int, low: int, high: int) -> int:
    """A durable job of ``count`` steps of ``low``-``high`` ms (docs/durable.md). Each run of a
    step logs ``step`` before its work and ``stepped`` after it, with its index, so a test
    counts every step's runs across workers killed half-way."""
    ctx = current_job()
    rng = random.Random(ctx.job_id)
    for i in range(count):
        ctx.step(f"s{i}", _step, i, rng.randint(low, high))
    return count


def _step(i: int, ms: int) -> int:
    record("step", i=i, sid=current_job().step_id)
    time.sleep(ms / 1000.0)
    record("stepped", i=i)
    return i


def waiter(key: str) -> Any:
    """A durable job that waits for the event ``faults.event`` of ``key`` (its job type keeps
    events ten minutes, so one sent before the wait began still reaches it), then records
    what it got in a step."""
    ctx = current_job()
    got = ctx.wait_for("faults.event", key=key, timeout=600)
    ctx.step("after", _after, got)
    return got


def _after(got: Any) -> Any:
    record("after", got=got)
    return got


def sleeper(seconds: float) -> str:
    """A durable job: a step, a sleep of ``seconds``, a step."""
    ctx = current_job()
    ctx.step("before", _after, "before")
    ctx.sleep(seconds)
    ctx.step("after", _after, "after")
    return "woke"


JOBS: dict[str, Callable[..., Any]] = {
    "faults.work": work,
    "faults.long_first": long_first,
    "faults.crash": crash,
    "faults.write_then_die": write_then_die,
    "faults.stall": stall,
    "faults.poison_text": poison_text,
    "faults.ordered": ordered,
    "faults.collect": collect,
    "faults.finished": finished,
    "faults.expand": expand,
    "faults.grow": grow,
    "faults.member": member,
    "faults.steps": steps,
    "faults.waiter": waiter,
    "faults.sleeper": sleeper,
}


def _account_key(account: int, *_: Any) -> str:
    return f"acct:{account}"


#: Job options beyond the name, by job.
def _group_key(n: int, *_: Any) -> str:
    return f"g{n % 20}"


OPTIONS: dict[str, dict[str, Any]] = {
    "faults.ordered": {"order_key": _account_key},
    "faults.member": {"aggregate": Aggregate(_group_key, grace=0.1, max_delay=0.5,
                                             max_size=25)},
    "faults.waiter": {"event_window": 600.0},
}


def register(target: Conveyor) -> dict[str, JobFunction]:
    """Register every fault job on ``target`` under its stable name (and the aggregator of
    ``faults.member``); returns them by name."""
    jobs = {name: target.job(name=name, **OPTIONS.get(name, {}))(func)
            for name, func in JOBS.items()}
    target.aggregate(jobs["faults.member"])(digest)
    return jobs


app = Conveyor()
register(app)
