"""Run by ``tests/contrib/test_django_tasks.py``: a worker that starts a task between its
enqueue and the enqueue's return (an idle worker on Redis leases a job one round trip after
it is stored) must not change what ``enqueue`` returns. Prints the status ``enqueue``
returned, the one the ``task_enqueued`` signal carried, and the job's state in the store."""

from __future__ import annotations

import json
from typing import Any

import django


def main() -> None:
    django.setup()
    from conveyor.contrib.django_tasks import _signals, _tasks  # django.tasks or its backport
    from tests.contrib.django_project import tasks

    backend: Any = _tasks.task_backends["default"]
    app = backend.app
    enqueue = app.enqueue

    def enqueue_then_start(*args: Any, **kwargs: Any) -> Any:
        ref = enqueue(*args, **kwargs)
        app.storage.dequeue([kwargs.get("queue") or "default"], "racer", 1, 60.0)
        return ref

    app.enqueue = enqueue_then_start
    seen: list[str] = []
    _signals.task_enqueued.connect(lambda sender, task_result, **_: seen.append(
        str(task_result.status)), weak=False)
    result = tasks.add.enqueue(2, 3)
    print(json.dumps({"returned": str(result.status), "signal": seen,
                      "stored": str(app.get_job(result.id).state.value)}))


if __name__ == "__main__":
    main()
