"""conveyor: a background-job engine with batches and workflows, on SQLite, Redis (Cluster,
Sentinel) and PostgreSQL, with RabbitMQ or Kafka as an optional broker."""

from conveyor.aggregation.member import Member
from conveyor.app import Conveyor
from conveyor.client.context import JobContext, current_job
from conveyor.client.options import Aggregate, Debounce, Throttle
from conveyor.client.payloads import Offload
from conveyor.client.refs import JobRef
from conveyor.core.breaker import Breaker
from conveyor.core.clock import FakeClock
from conveyor.core.encryption import Keys
from conveyor.core.job import Event, JobRecord, JobState
from conveyor.core.retry_after import raise_for_retry_after
from conveyor.errors import Fail, Retry, RetryAfter, StepFailed
from conveyor.workflow.canvas import chain, chord, chunks, group
from conveyor.workflow.graph import Workflow
from conveyor.workflow.running import RunningWorkflow

__all__ = [
    "Aggregate",
    "Breaker",
    "Conveyor",
    "Debounce",
    "Event",
    "Fail",
    "FakeClock",
    "JobContext",
    "JobRecord",
    "JobRef",
    "JobState",
    "Keys",
    "Member",
    "Offload",
    "Retry",
    "RetryAfter",
    "RunningWorkflow",
    "StepFailed",
    "Throttle",
    "Workflow",
    "chain",
    "chord",
    "chunks",
    "current_job",
    "group",
    "raise_for_retry_after",
]
__version__ = "0.1.0"
