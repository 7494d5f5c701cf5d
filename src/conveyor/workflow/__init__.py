"""Workflows: jobs that wait for other jobs (docs/workflows.md).

``graph`` (``Workflow``: a graph built and stored at once), ``running`` (``RunningWorkflow``:
a workflow its running job grows), ``canvas`` and ``canvas_run`` (Celery's chain, group and
chord placed on a workflow). The storage settles the graph (``conveyor.storage.graph``).
"""
