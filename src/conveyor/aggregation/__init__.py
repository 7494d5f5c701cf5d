"""Aggregation: many jobs, one call (docs/aggregation.md). ``member`` is a job of an
aggregation as its aggregator sees it; the storage gathers them (``conveyor.storage.aggregation``),
the worker runs the aggregator (``conveyor.worker.aggregation``)."""
