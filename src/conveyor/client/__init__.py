"""The client side: enqueueing and what a running job sees.

``options`` (what a job is enqueued with), ``draft`` (an enqueue before middleware),
``middleware``, ``registry`` (job functions by name), ``client`` (the ``Client``: drafts to
specs to the storage), ``bulk`` (millions of jobs in blocks), ``batch``, ``refs`` (a stored
job's handle), ``signature`` (a call to enqueue later), ``context`` (``current_job()``),
``builtin_jobs`` (conveyor's own jobs) and ``periodic`` (schedules).
"""

from conveyor.client.client import Client

__all__ = ["Client"]
