"""Fault-injection scenarios: kill -9, signals, Redis outages, clock skew (docs/reliability.md)."""
