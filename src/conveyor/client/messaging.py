"""Messages and events to durable jobs, sent from anywhere: ``app.send`` and
``app.send_event`` (docs/durable.md, "Events and messages").

``send(job_id, topic, data)`` is DBOS's ``send``: the message waits in the job's inbox until
the job receives it (``current_job().receive(topic)``), in order, each once.
``send_event(name, key, data)`` is Inngest's event: every job waiting for that name and key
(``wait_for``) gets it, each once, woken in the same step as its delivery; a job that begins
to wait later gets it only when its job type keeps events for a window (``event_window=``),
and ``keep`` is how long the store keeps it for them (default: the longest window of the
app's job types).
"""

from __future__ import annotations

from typing import Any

from conveyor.client.registry import Registry
from conveyor.core.ids import new_id
from conveyor.core.serializer import dumps
from conveyor.core.steps import EVENT, MESSAGE, Message
from conveyor.core.text import check_name, key_fault
from conveyor.errors import InvalidKeyError, JobNotFound
from conveyor.storage.base import Storage

__all__ = ["Messaging"]


class Messaging:
    """``send`` and ``send_event`` of the ``Conveyor`` app (a mixin over its storage and
    registry)."""

    registry: Registry

    @property
    def storage(self) -> Storage:
        """The app's storage (``Conveyor.storage`` stands in its place)."""
        raise NotImplementedError

    def send(self, job_id: str, topic: str = "", data: Any = None, *,
             message_id: str | None = None) -> bool:
        """Send ``data`` (JSON) to the job ``job_id`` under ``topic``: kept in its inbox until
        it receives it (``current_job().receive(topic)``); a job waiting for it is woken.
        ``message_id``: sending the same id again stores nothing more (a retried send).
        False when the job has finished (nothing is kept); ``JobNotFound`` when there is no
        such job."""
        if topic:
            check_name("topic", topic)
        message = Message(message_id or new_id(), MESSAGE, topic, "", dumps(data), 0.0)
        sent = self.storage.durable.send(job_id, message)
        if sent is None:
            raise JobNotFound(f"no job {job_id!r}")
        return sent

    def send_event(self, name: str, key: str = "", data: Any = None, *,
                   keep: float | None = None, event_id: str | None = None) -> int:
        """Deliver the event ``name`` / ``key`` (``data``: JSON) to every job waiting for it
        (``wait_for(name, key)``), each once; returns how many it reached. ``keep``: seconds
        the store keeps it for waits that begin later (default: the longest
        ``event_window`` of this app's job types; 0 keeps nothing)."""
        check_name("event name", name)
        if key and (fault := key_fault(key)) is not None:
            raise InvalidKeyError(f"event key {fault}")
        if keep is None:
            keep = max((fn.opts.event_window for fn in self.registry), default=0.0)
        if keep < 0:
            raise ValueError(f"keep must be seconds >= 0, not {keep!r}")
        message = Message(event_id or new_id(), EVENT, name, key, dumps(data), 0.0)
        return self.storage.durable.send_event(message, float(keep))
