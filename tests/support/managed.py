"""What every test server shares: the same as the development servers' (``conveyor.dev``)."""

from conveyor.dev.process import ManagedServer, wait_ready

__all__ = ["ManagedServer", "wait_ready"]
