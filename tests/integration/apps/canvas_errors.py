"""An exception only worker processes import (``c.foreign`` imports it as it runs): a reader
of the job's result must get ``JobFailed``, and must never import this module to rebuild it."""


class OnlyInWorkers(Exception):
    """Raised by ``c.foreign``."""
