"""``Signature``: a job with its arguments, to be enqueued later or placed in a canvas, as
Celery's signatures are (docs/workflows.md, "From Celery's canvas").

::

    add.s(2).enqueue(4)                      # add(4, 2): arguments given now go in front
    add.si(2, 2)                             # immutable: never given another step's result
    (add.s(1, 2) | add.s(10)).enqueue()      # a chain; ``group | sig`` is a chord
    sig.link(done.s()); sig.link_error(alert.s())
    sig.apply_async(args=(4,), countdown=10, queue="low")

A signature with links is enqueued as a small workflow (the job, then its callbacks), and
``enqueue`` still returns the job's own ref. Composing (``|``) and enqueueing with links
need the canvas (``conveyor.workflow.canvas``, a layer above): the job function's client
carries it (``CanvasOps``), given by the app that built both.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from conveyor.client.options import JobOptionArgs, JobOptions
from conveyor.client.refs import JobRef

if TYPE_CHECKING:  # typing.Unpack is Python 3.11's; the package runs on 3.10
    from typing_extensions import Unpack

__all__ = ["CanvasOps", "Signature", "Target"]


class Target(Protocol):
    """The job a signature calls (a ``JobFunction``)."""

    name: str
    opts: JobOptions
    enqueuer: Any  # what stores it (the app's client)

    def send(self, args: Sequence[Any], kwargs: Mapping[str, Any], *,
             delay: float | timedelta | None = None,
             at: datetime | float | None = None) -> JobRef | None:
        """Enqueue one job with exactly these arguments."""
        ...

    async def asend(self, args: Sequence[Any], kwargs: Mapping[str, Any], *,
                    delay: float | timedelta | None = None,
                    at: datetime | float | None = None) -> JobRef | None:
        """``send`` for asyncio code."""
        ...

    def check_call(self, args: Sequence[Any], kwargs: Mapping[str, Any], leading: int = 0,
                   what: str = "") -> tuple[Sequence[Any], Mapping[str, Any]]:
        """``TypeError`` unless the arguments bind to the function (``conveyor.core.calls``);
        the arguments to store (typed ones made JSON)."""
        ...

    def options(self, **overrides: Unpack[JobOptionArgs]) -> Target:
        """A copy with other options (``queue=...``)."""
        ...

    def builtin(self, name: str, func: Callable[..., Any], args: Sequence[Any]) -> Signature:
        """A step of conveyor's own job ``name`` on this job's queue (an errback's)."""
        ...

    @property
    def canvas(self) -> CanvasOps:
        """The canvas its signatures are composed and enqueued with links by."""
        ...


class CanvasOps(Protocol):
    """What signatures ask of the canvas layer."""

    def compose(self, left: Any, right: Any) -> Any:
        """``left | right``: a chain (a chord after a group)."""
        ...

    def send_linked(self, sig: Signature, delay: float | timedelta | None,
                    at: datetime | float | None) -> JobRef:
        """Enqueue ``sig`` with its links as a workflow; the ref of ``sig``'s own job."""
        ...

    def group(self, steps: Sequence[Signature]) -> Any:
        """The steps side by side (``JobFunction.chunks``)."""
        ...


class Signature:
    """A job function with its arguments, to be enqueued later (``JobFunction.s``).

    ``immutable`` (``JobFunction.si``): arguments given at enqueue, and a previous step's
    result in a canvas, are not added to its own. ``links`` run after the job succeeded,
    given its result; ``errbacks`` after it failed, given ``(job_id, error, traceback)``
    in front of their own arguments (Celery's error callbacks): both unless immutable.
    """

    __slots__ = ("args", "errbacks", "fn", "immutable", "kwargs", "links")

    def __init__(self, fn: Target, args: Sequence[Any] = (),
                 kwargs: Mapping[str, Any] | None = None, *, immutable: bool = False) -> None:
        self.fn = fn
        self.args = list(args)
        self.kwargs = dict(kwargs or {})
        self.immutable = immutable
        self.links: list[Any] = []  # signatures or canvases
        self.errbacks: list[Signature] = []

    def __repr__(self) -> str:
        mark = " immutable" if self.immutable else ""
        return f"<Signature {self.fn.name} args={self.args!r} kwargs={self.kwargs!r}{mark}>"

    def __or__(self, other: Any) -> Any:
        return self.fn.canvas.compose(self, other)

    @property
    def name(self) -> str:
        """The job's stored name."""
        return self.fn.name

    def merged(self, args: Sequence[Any] = (),
               kwargs: Mapping[str, Any] | None = None) -> tuple[list[Any], dict[str, Any]]:
        """The arguments of a call given ``args``/``kwargs`` now: in front of its own and
        over its own keywords (Celery's partial arguments); its own alone when immutable."""
        if self.immutable or (not args and not kwargs):
            return list(self.args), dict(self.kwargs)
        return [*args, *self.args], {**self.kwargs, **(kwargs or {})}

    def clone(self, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None, *,
              immutable: bool | None = None) -> Signature:
        """A copy with ``args``/``kwargs`` merged in (as ``merged``) and the same links."""
        merged_args, merged_kwargs = self.merged(args, kwargs)
        copy = Signature(self.fn, merged_args, merged_kwargs,
                         immutable=self.immutable if immutable is None else immutable)
        copy.links, copy.errbacks = list(self.links), list(self.errbacks)
        return copy

    def checked(self, leading: int = 0) -> Signature:
        """This signature checked against its function (``Target.check_call``, after
        ``leading`` results in front); a copy holding the stored form of its typed
        arguments when it has any (this one stays as the caller made it)."""
        args, kwargs = self.fn.check_call(self.args, self.kwargs, leading=leading)
        if args is self.args and kwargs is self.kwargs:
            return self
        copy = Signature(self.fn, args, kwargs, immutable=self.immutable)
        copy.links, copy.errbacks = list(self.links), list(self.errbacks)
        return copy

    def link(self, callback: Any) -> Any:
        """Run ``callback`` (a signature or canvas) after this job succeeded, given its
        result (unless immutable); returns ``callback``, as Celery's ``link``."""
        if not any(callback is known for known in self.links):
            self.links.append(callback)
        return callback

    def link_error(self, errback: Signature) -> Signature:
        """Run ``errback`` after this job failed (an error or ``Fail`` ended it), given
        ``(job_id, error, traceback)`` in front of its own arguments (unless immutable):
        ``error`` the job's exception rebuilt as ``JobRef.result`` raises it. Returns
        ``errback``."""
        if not any(errback is known for known in self.errbacks):
            self.errbacks.append(errback)
        return errback

    def enqueue(self, *args: Any, **kwargs: Any) -> JobRef | None:
        """Enqueue this job (Celery's ``sig.delay(*args)``): ``args`` go in front of its
        own, ``kwargs`` over its own (not when immutable). With links it is stored as a
        workflow with them; the ref is this job's. None if a client middleware stopped it."""
        return self._send(args, kwargs, None, None, None)

    async def aenqueue(self, *args: Any, **kwargs: Any) -> JobRef | None:
        """``enqueue`` for asyncio code."""
        if self.links or self.errbacks:  # a workflow: its storage calls run in a thread
            return await asyncio.to_thread(self._send, args, kwargs, None, None, None)
        merged_args, merged_kwargs = self.merged(args, kwargs)
        return await self.fn.asend(merged_args, merged_kwargs)

    def apply_async(self, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None,
                    *, countdown: float | None = None, eta: datetime | None = None,
                    queue: str | None = None, link: Any = None,
                    link_error: Signature | None = None) -> JobRef | None:
        """Celery's ``apply_async``: ``args``/``kwargs`` as ``enqueue``'s, ``countdown``
        seconds or an aware ``eta`` before it may run, another ``queue``, a ``link`` and a
        ``link_error`` for this call only."""
        sig = self.clone()
        if link is not None:
            sig.link(link)
        if link_error is not None:
            sig.link_error(link_error)
        return sig._send(args, kwargs or {}, countdown, eta, queue)

    def _send(self, args: Sequence[Any], kwargs: Mapping[str, Any],
              delay: float | timedelta | None, at: datetime | float | None,
              queue: str | None) -> JobRef | None:
        sig = self.clone(args, kwargs)
        if queue is not None:
            sig.fn = self.fn.options(queue=queue)
        if sig.links or sig.errbacks:
            return sig.fn.canvas.send_linked(sig, delay, at)
        return sig.fn.send(sig.args, sig.kwargs, delay=delay, at=at)

