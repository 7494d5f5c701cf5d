"""Messages and events to durable jobs, sent from anywhere: ``app.send`` and
``app.send_event`` (docs/durable.md, "Events and messages").

``send(job_id, topic, data)`` is DBOS's ``send``: the message waits in the job's inbox until
the job receives it (``current_job().receive(topic)``), in order, each once.
``send_event(name, key, data)`` is Inngest's event: every job waiting for that name and key
(``wait_for``) gets it, each once, woken in the same step as its delivery; a job that begins
to wait later gets it only when its job type keeps events for a window (``event_window=``),
and ``keep`` is how long the store keeps it for them (default: the longest window of the
app's job types).

Their data is the job's data (docs/job-data.md): with the app's keys it is sealed, bound to
the receiving job (a message) or to the event's name and key (an event), whatever the keys'
``jobs=`` (the sender does not know which job type receives it). It is never kept by
reference: an event has no job to own its blob, so both stay inline, within ``max_payload``.
"""

from __future__ import annotations

from typing import Any

from conveyor.client.client import Client
from conveyor.client.durable import bound_of, stored_value, value_json
from conveyor.core.ids import new_id
from conveyor.core.steps import EVENT, MESSAGE, Message
from conveyor.core.text import check_name, key_fault
from conveyor.errors import InvalidKeyError, JobNotFound

__all__ = ["Messaging"]


class Messaging:
    """``send`` and ``send_event`` over an app's ``Client``: its storage, its registry (the
    job types' event windows) and its job data (keys)."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def _stored(self, data: Any, bound: tuple[str, ...], what: str) -> str:
        job_data = self.client.data
        return stored_value(job_data, value_json(data, what), bound,
                            seal=job_data.keys is not None, offload=False,
                            max_payload=self.client.max_payload, what=what)

    def send(self, job_id: str, topic: str = "", data: Any = None, *,
             message_id: str | None = None) -> bool:
        """Send ``data`` (JSON) to the job ``job_id`` under ``topic``: kept in its inbox until
        it receives it (``current_job().receive(topic)``); a job waiting for it is woken.
        ``message_id``: sending the same id again stores nothing more (a retried send).
        False when the job has finished (nothing is kept); ``JobNotFound`` when there is no
        such job."""
        if topic:
            check_name("topic", topic)
        text = self._stored(data, bound_of(MESSAGE, job_id), f"message {topic!r}'s data")
        message = Message(message_id or new_id(), MESSAGE, topic, "", text, 0.0)
        sent = self.client.storage.durable.send(job_id, message)
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
            keep = max((fn.opts.event_window for fn in self.client.registry), default=0.0)
        if keep < 0:
            raise ValueError(f"keep must be seconds >= 0, not {keep!r}")
        text = self._stored(data, bound_of(EVENT, name, key), f"event {name!r}'s data")
        message = Message(event_id or new_id(), EVENT, name, key, text, 0.0)
        return self.client.storage.durable.send_event(message, float(keep))
