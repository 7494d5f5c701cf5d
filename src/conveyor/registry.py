"""The old home of ``make_options``, still documented (docs/api.md, "Middleware"):
``conveyor.options.make_options`` is the same function."""

from conveyor.client.options import make_options

__all__ = ["make_options"]
