"""The client side: enqueueing and what a running job sees.

``options`` (what a job is enqueued with), ``draft`` (an enqueue before middleware),
``middleware``, ``job_function`` (what ``@app.job`` returns), ``registry`` (job functions by
name), ``decorators`` (what ``@app.job``, ``@app.aggregate`` and ``@app.periodic`` do),
``client`` (the ``Client``: drafts to specs to the storage), ``spec_buffer`` (specs stored a
chunk at a time), ``bulk`` (millions of jobs in blocks), ``batch``, ``refs`` (a stored
job's handle), ``signature`` (a call to enqueue later), ``context`` (``current_job()``),
``builtin_jobs`` (conveyor's own jobs), ``periodic`` (schedules), ``payloads`` (``JobData``:
job data sealed, offloaded and opened), ``reveal`` (stored job data as readers see it), and
durable jobs (docs/durable.md): ``durable`` (a running job's steps, sleeps and waits),
``iteration`` (its resumable loops) and ``messaging`` (messages and events sent to jobs).
"""

from conveyor.client.client import Client

__all__ = ["Client"]
