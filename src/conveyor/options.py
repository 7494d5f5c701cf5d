"""The documented path of the job options (docs/api.md, "Middleware"): client middleware
replaces a draft's options with ``conveyor.options.make_options(draft.options, queue="vip")``.
They are defined in ``conveyor.client.options``."""

from conveyor.client.options import Aggregate, Debounce, JobOptions, Throttle, make_options

__all__ = ["Aggregate", "Debounce", "JobOptions", "Throttle", "make_options"]
