"""conveyor: a background-job engine with batches and workflows, on SQLite, Redis (Cluster,
Sentinel) and PostgreSQL, with RabbitMQ or Kafka as an optional broker."""

from conveyor.app import Conveyor
from conveyor.canvas import chain, chord, chunks, group
from conveyor.clock import FakeClock
from conveyor.context import JobContext, current_job
from conveyor.errors import Fail, Retry, StepFailed
from conveyor.job import Event, JobRecord, JobState
from conveyor.member import Member
from conveyor.options import Aggregate, Debounce, Throttle
from conveyor.refs import JobRef
from conveyor.running_workflow import RunningWorkflow
from conveyor.workflow import Workflow

__all__ = [
    "Aggregate",
    "Conveyor",
    "Debounce",
    "Event",
    "Fail",
    "FakeClock",
    "JobContext",
    "JobRecord",
    "JobRef",
    "JobState",
    "Member",
    "Retry",
    "RunningWorkflow",
    "StepFailed",
    "Throttle",
    "Workflow",
    "chain",
    "chord",
    "chunks",
    "current_job",
    "group",
]
__version__ = "0.1.0"
