"""``ClientFacade``: the settings the app's ``Client`` owns, as attributes of ``Conveyor``
under the names they had before the client held them (``app.clock``, ``app.max_payload``,
``app.client_middleware``), and the app's job data (``app.data``); a mixin of ``Conveyor``.
"""

from __future__ import annotations

from conveyor.client.client import Client
from conveyor.client.middleware import ClientChain
from conveyor.core.clock import Clock
from conveyor.payloads import JobData

__all__ = ["ClientFacade"]


class ClientFacade:
    """The client's settings read and written through the app."""

    client: Client

    @property
    def clock(self) -> Clock:
        """The clock this process stamps schedules and events with (the storage's own decides
        leases)."""
        return self.client.clock

    @clock.setter
    def clock(self, clock: Clock) -> None:
        self.client.clock = clock

    @property
    def max_payload(self) -> int:
        """The largest payload an enqueue may store, in bytes."""
        return self.client.max_payload

    @max_payload.setter
    def max_payload(self, limit: int) -> None:
        self.client.max_payload = limit

    @property
    def client_middleware(self) -> ClientChain:
        """The client middleware chain every enqueue passes through (``app.client.middleware``)."""
        return self.client.middleware

    @client_middleware.setter
    def client_middleware(self, chain: ClientChain) -> None:
        self.client.middleware = chain

    @property
    def data(self) -> JobData:
        """What this app does to job data: its keys and offload (``conveyor.payloads``)."""
        return self.client.data
