"""Worker logging: text or JSON lines, to stderr or a file that USR2 reopens (logrotate)."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

__all__ = ["JsonFormatter", "configure_logging", "logging_settings", "reopen_logs"]

_settings: dict[str, Any] = {}  # the last configure_logging call's, for job processes

_JOB_FIELDS = ("job_id", "job_name", "attempt", "outcome", "reason")
_TEXT = "%(asctime)s %(levelname)s pid=%(process)d %(threadName)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, pid, thread, msg (and exc).

    A job outcome's line also has ``job_id``, ``job_name``, ``attempt``, ``outcome`` and
    ``reason`` fields, so a log pipeline can filter on them without parsing ``msg``.
    """

    def format(self, record: logging.LogRecord) -> str:
        """The record as a JSON line."""
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "pid": record.process,
            "thread": record.threadName,
            "msg": record.getMessage(),
        }
        for key in _JOB_FIELDS:  # set by worker.reporting for job outcomes
            if hasattr(record, key):
                out[key] = getattr(record, key)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class _ReopenableFileHandler(logging.FileHandler):
    """A file handler whose file can be closed and opened again by path."""

    def reopen(self) -> None:
        self.acquire()
        try:
            if self.stream is not None:
                self.stream.close()
            self.stream = self._open()
        finally:
            self.release()


def configure_logging(
    fmt: str = "text", path: str | None = None, level: int = logging.INFO
) -> None:
    """Send the ``conveyor`` loggers to stderr or ``path`` in ``text`` or ``json`` format."""
    handler: logging.Handler = (
        _ReopenableFileHandler(path, delay=False) if path else logging.StreamHandler(sys.stderr)
    )
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(_TEXT))
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, "_conveyor", False):
            root.removeHandler(old)
    handler._conveyor = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level)
    _settings.clear()
    _settings.update(fmt=fmt, path=path, level=level)


def logging_settings() -> dict[str, Any]:
    """How this process configured its logging (``configure_logging``'s arguments, empty if
    it never did): a job process logs the same way, to the same place."""
    return dict(_settings)


def reopen_logs() -> None:
    """Reopen every log file (USR2), so a rotated file is released and a new one started."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, _ReopenableFileHandler):
            handler.reopen()
    logging.getLogger("conveyor.worker").info("log files reopened")
