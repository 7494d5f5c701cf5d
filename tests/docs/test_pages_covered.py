"""Every docs page whose python blocks define an app is either run as pasted (a real worker
imports it, a script uses it: tests/docs/pasted.py) or named here as a page of fragments, with
why it cannot run whole. A new page that defines an app fails this test until it is one or the
other, so no page quietly stops working when pasted (issue 51)."""

from __future__ import annotations

import re

from tests.docs.pasted import DOCS, blocks

RUN_AS_PASTED = {
    "aggregation.md": "tests/docs/test_aggregation_doc.py",
    "flow-control.md": "tests/docs/test_flow_control_doc.py",
    "workflows.md": "tests/docs/test_workflows_doc.py",
}
FRAGMENTS = {
    "api.md": "a reference: each block shows calls on names it does not define (conn, rid)",
    "brokers.md": "needs a RabbitMQ node or a Kafka broker, and names no job it runs",
    "durable.md": "the payment, mail, warehouse and database calls are the reader's, and two "
                  "blocks are a job's body shown alone (tests/api/test_durable*.py run the same "
                  "calls)",
    "job-data.md": "needs a PostgreSQL server, keys in the environment and the reader's "
                   "models (each part is run by tests/api/test_typed_jobs.py and "
                   "tests/conformance/test_job_data.py)",
    "postgres.md": "needs a PostgreSQL server and the reader's DSN, connection and models",
    "worker.md": "a Sentry project to report to, and a test body for the reader's own tests",
}
_DEFINES_APP = re.compile(r"^app = Conveyor\(", re.M)


def test_every_page_that_defines_an_app_runs_as_pasted_or_says_why_not() -> None:
    defining = {page.name for page in DOCS.glob("*.md")
                if any(_DEFINES_APP.search(block) for block in blocks(page.name))}
    assert defining == set(RUN_AS_PASTED) | set(FRAGMENTS)
    assert not set(RUN_AS_PASTED) & set(FRAGMENTS)
    root = DOCS.parent
    assert all((root / test).is_file() for test in RUN_AS_PASTED.values())
