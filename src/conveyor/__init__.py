"""conveyor: a background-job engine with batch tracking, on SQLite, Redis and Redis Cluster."""

from conveyor.errors import Fail, Retry

__all__ = ["Fail", "Retry"]
__version__ = "0.1.0"
