"""Run by ``tests/contrib/test_django_typed.py``: a Django task with typed parameters and a
typed return (docs/job-data.md) enqueued through ``Task.enqueue``, run through conveyor's
worker path in this process (``conveyor.testing.drain``), read back through
``get_result``; a call with a wrong field refused at enqueue. Prints what it saw (JSON)."""

from __future__ import annotations

import json
from typing import Any

import django


def main() -> None:
    django.setup()
    from conveyor.contrib.django_tasks import _tasks
    from conveyor.testing import drain
    from tests.api.typed_models import Point
    from tests.contrib.django_project import tasks

    backend: Any = _tasks.task_backends["default"]
    result = tasks.route.enqueue(Point(1, 2, "home"), mode="bike")
    stored = backend.app.storage.get_job(result.id)
    drain(backend.app)
    done = tasks.route.get_result(result.id)
    try:
        tasks.route.enqueue({"x": "far", "y": 1})
        refused = ""
    except TypeError as exc:
        refused = str(exc)
    print(json.dumps({"stored_args": stored.args, "status": str(done.status),
                      "value": repr(done.return_value), "refused": refused,
                      "errors": [e.traceback[-300:] for e in done.errors]}))


if __name__ == "__main__":
    main()
