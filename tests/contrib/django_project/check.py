"""Run by ``tests/contrib/test_django_tasks.py`` beside a ``conveyor worker`` process:
enqueue the project's tasks through Django's API, wait for them, print what was seen."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from datetime import timedelta
from typing import Any

import django


def main() -> None:
    django.setup()
    from django.db import connection, transaction
    from django.utils import timezone

    from tests.contrib.django_project import tasks

    out: dict[str, Any] = {}
    added = tasks.add.enqueue(2, 3)
    later = tasks.add.using(run_after=timezone.now() + timedelta(seconds=1)).enqueue(1, 1)
    out["status_at_enqueue"] = str(added.status)
    out["async"] = asyncio.run(tasks.add_async.aenqueue(20, 22)).id
    flaky = tasks.flaky.enqueue("m")
    broken = tasks.broken.enqueue()
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE IF NOT EXISTS rows (id integer)")
    try:
        with transaction.atomic():
            transaction.on_commit(lambda: out.setdefault("rolled", tasks.add.enqueue(9, 9).id))
            raise RuntimeError("roll back")
    except RuntimeError:
        pass
    with transaction.atomic():
        transaction.on_commit(lambda: out.setdefault("committed", tasks.add.enqueue(4, 4).id))
    first, again = tasks.report.enqueue(7), tasks.report.enqueue(7)
    out["unique"] = first.id == again.id
    backend = tasks.add.get_backend()
    with backend.app.batch(description="three sums") as batch:
        summed = [tasks.add.enqueue(n, n) for n in range(3)]
    results = {"added": added, "later": later, "flaky": flaky, "broken": broken,
               "report": first, **{f"sum{n}": r for n, r in enumerate(summed)}}
    results["async"] = tasks.add_async.get_result(out["async"])
    results["committed"] = tasks.add.get_result(out["committed"])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for result in results.values():
            result.refresh()
        if all(r.is_finished for r in results.values()):
            break
        time.sleep(0.1)
    for key, result in results.items():
        out[key] = {"status": str(result.status), "attempts": result.attempts,
                    "errors": [[e.exception_class.__name__, e.traceback.splitlines()[-1]]
                               for e in result.errors],
                    "value": result.return_value if str(result.status) == "SUCCESSFUL"
                    else None,
                    "worker_ids": len(result.worker_ids),
                    "times": [result.enqueued_at is not None, result.started_at is not None,
                              result.finished_at is not None]}
    out["batch"] = backend.app.batch_status(batch.id)["counts"]["succeeded"]
    out["later_waited"] = (results["later"].started_at - results["later"].enqueued_at
                           ).total_seconds()
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
