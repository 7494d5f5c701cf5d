"""Run by ``tests/contrib/test_django_fidelity.py`` beside a ``conveyor worker`` process
(queues ``default`` and ``mail``; nobody serves ``idle``): Django's tasks contract as the
django-tasks backport's own tests state it, and issue 50's and 49's silent cases. Prints one
JSON object of what was seen; the test asserts on it."""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import timedelta
from typing import Any

import django


def main() -> None:
    django.setup()
    from django.utils import timezone

    from conveyor import Conveyor
    from conveyor.contrib.django_tasks import _tasks
    from tests.contrib.django_project import tasks

    out: dict[str, Any] = {}
    default = _tasks.task_backends["default"]

    def raises(call: Any) -> list[str]:
        try:
            call()
        except Exception as exc:  # what the caller sees, in one line
            return [type(exc).__name__, str(exc).splitlines()[0]]
        return []

    # -- enqueue and get_result, without a worker (queue "idle") -----------------------------
    idle = tasks.noop_task.using(queue_name="idle")
    ready = idle.enqueue(1, two=3)
    fetched = default.get_result(ready.id)
    out["enqueue"] = {"status": str(ready.status), "attempts": ready.attempts,
                      "args": ready.args, "kwargs": ready.kwargs,
                      "return_value": raises(lambda: ready.return_value),
                      "fetched_equal": fetched == ready,
                      "task_equal": fetched.task == idle,
                      "stored_name": default.app.get_job(ready.id).name}
    later = timezone.now() + timedelta(days=1)
    deferred = tasks.add.using(queue_name="idle", run_after=later).enqueue(1, 2)
    got = tasks.add.get_result(deferred.id)
    out["deferred"] = {"queue": got.task.queue_name, "run_after": got.task.run_after == later,
                       "backend": got.task.backend}
    if "other" in _tasks.task_backends:
        elsewhere = tasks.noop_task.using(backend="other", queue_name="idle").enqueue()
        other = _tasks.task_backends["other"].get_result(elsewhere.id)
        out["other"] = {"backend": other.task.backend, "refresh": raises(other.refresh),
                        "on_default": raises(lambda: default.get_result(elsewhere.id))}
    out["mismatch"] = raises(lambda: tasks.calculate_meaning_of_life.get_result(ready.id))
    out["missing"] = [raises(lambda i=i: default.get_result(i)) for i in
                      ("0" * 24, "123", "\ud800", "a\nb")]

    # -- what Django refuses at enqueue: nothing is stored ------------------------------------
    before = len(default.app.storage.list_jobs(limit=1000))
    out["refused"] = {
        "set": raises(lambda: tasks.add.enqueue({1, 2}, 3)),
        "object": raises(lambda: tasks.echo.enqueue(object())),
        "bad_bytes": raises(lambda: tasks.echo.enqueue(b"\xff")),
        "arity": raises(lambda: tasks.add.enqueue(1, 2, 3)),
        "keyword": raises(lambda: tasks.add.enqueue(1, 2, c=3)),
        "priority": raises(lambda: tasks.noop_task.using(priority=101).enqueue()),
        "queue": raises(lambda: tasks.noop_task.using(queue_name="nowhere").enqueue()),
    }
    out["stored_after_refusals"] = len(default.app.storage.list_jobs(limit=1000)) - before

    # -- priority: Django's reaches the queue's lineup (docs/scheduling.md) --------------------
    low = tasks.noop_task.using(queue_name="idle", priority=-5).enqueue()
    high = tasks.noop_task.using(queue_name="idle", priority=50).enqueue()
    out["priority"] = {
        "task": [default.get_result(r.id).task.priority for r in (low, high)],
        "low_gates": [r.gate for r in default.app.explain(low.id).reasons],
        "high_gates": [r.gate for r in default.app.explain(high.id).reasons],
    }

    # -- run by the worker ---------------------------------------------------------------------
    runs = {
        "meaning": tasks.calculate_meaning_of_life.enqueue(),
        "value_error": tasks.failing_task_value_error.enqueue(),
        "system_exit": tasks.failing_task_system_exit.enqueue(),
        "complex_exception": tasks.complex_exception.enqueue(),
        "complex_return": tasks.complex_return_value.enqueue(),
        "task_id": tasks.get_task_id.enqueue(),
        "context": tasks.test_context.enqueue(1),
        "bytes": tasks.echo.enqueue(b"caf\xc3\xa9"),
        "tuple": tasks.echo.enqueue((1, 2)),
    }
    # Jobs no task framework made: a module outside the project with a side effect at
    # import, a stdlib function, a project module's attribute that is not a task, and the
    # same through the runner name jobs had before issue 50.
    raw = Conveyor(os.environ["CONVEYOR_URL"])
    forged = {
        "outside": raw.enqueue("sideeffect_mod.x", []),
        "stdlib": raw.enqueue("subprocess.check_output", [["true"]]),
        "not_a_task": raw.enqueue("tests.contrib.django_project.tasks.on_finished", [1]),
        "legacy": raw.enqueue("conveyor.django",
                              ["sideeffect_mod.x", [], {}, False, "default"]),
    }
    # A job stored before tasks were named by their path (issue 50) still runs and reads.
    old_style = raw.enqueue("conveyor.django", ["tests.contrib.django_project.tasks.add",
                                                [2, 3], {}, False, "default"])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for result in runs.values():
            result.refresh()
        records = {k: raw.get_job(r.id) for k, r in forged.items() if r is not None}
        old = raw.get_job(old_style.id) if old_style is not None else None
        if all(r.is_finished for r in runs.values()) and all(
                r is not None and r.state.terminal for r in records.values()) and (
                old is not None and old.state.terminal):
            break
        time.sleep(0.1)
    for key, result in runs.items():
        out[key] = {"status": str(result.status), "attempts": result.attempts,
                    "errors": [e.exception_class_path for e in result.errors],
                    "traceback_lines": [len(e.traceback.splitlines()) for e in result.errors],
                    "traceback_end": [e.traceback.splitlines()[-1] for e in result.errors],
                    "state": default.app.get_job(result.id).state.value,
                    "value": result.return_value if str(result.status) == "SUCCESSFUL"
                    else None,
                    "task_id": result.id}
    out["forged"] = {k: [records[k].state.value, records[k].message,
                         raises(lambda k=k: default.get_result(forged[k].id))]
                     for k in forged}
    legacy = tasks.add.get_result(old_style.id) if old_style is not None else None
    out["legacy_ok"] = None if legacy is None else [str(legacy.status), legacy.return_value,
                                                    legacy.args, legacy.task.backend]
    out["imported_here"] = "sideeffect_mod" in sys.modules
    raw.close()
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
