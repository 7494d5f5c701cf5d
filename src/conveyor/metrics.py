"""The documented path of ``MetricsMiddleware`` (docs/operations.md, "Metrics"): job
durations as a Prometheus histogram. Defined in ``conveyor.http.metrics``."""

from conveyor.http.metrics import MetricsMiddleware

__all__ = ["MetricsMiddleware"]
