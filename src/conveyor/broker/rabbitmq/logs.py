"""What the AMQP client says when something goes wrong, told in one line.

aiormq and aio-pika log a traceback per reconnect attempt while a node is away; a worker's
log should say once, in a line, what happened. ``reason`` turns any of their exceptions into
that line (never with a password in it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator

__all__ = ["OneLine", "quiet_client_logs", "reason"]


class OneLine(logging.Filter):
    """The client's own log records in one line: a lost connection makes aiormq and aio-pika
    log a traceback per reconnect attempt; the exception's name and text say as much."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            record.msg = f"{record.getMessage()} ({reason(exc)})"
            record.args = None
            record.exc_info = record.exc_text = None
        return True


# Filters of a logger see only records logged on it, not its children's: name each one.
for _name in ("aiormq.connection", "aiormq.channel", "aio_pika.connection",
              "aio_pika.robust_connection", "aio_pika.channel", "aio_pika.robust_channel",
              "aio_pika.tools", "aio_pika.queue", "aio_pika.robust_queue", "aio_pika.exchange",
              "aio_pika.robust_exchange", "aio_pika.message"):
    logging.getLogger(_name).addFilter(OneLine())


@contextlib.contextmanager
def quiet_client_logs() -> Iterator[None]:
    loggers = [logging.getLogger(name) for name in ("aiormq", "aio_pika")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def reason(exc: BaseException) -> str:
    """One line for what went wrong, never a password."""
    name = type(exc).__name__
    text = " ".join(str(exc).split()) or name
    if "ACCESS_REFUSED" in text or "ProbableAuthentication" in name or "Authentication" in name:
        return "access refused: wrong user or password"
    # RabbitMQ refuses Connection.Open for a vhost that does not exist or that the user has no
    # permission on: aiormq reports the Connection.Close it got instead of an OpenOk.
    if "NOT_ALLOWED" in text or name == "ConnectionNotAllowed" or (
            "Connection.OpenOk" in text and "Connection.Close" in text):
        return "the user may not use this virtual host (missing or no permission)"
    if isinstance(exc, ConnectionError | OSError | asyncio.TimeoutError | TimeoutError):
        return f"cannot connect ({text})"
    return f"{name}: {text}"[:300]
