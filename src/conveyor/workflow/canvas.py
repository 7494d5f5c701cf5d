"""Celery's canvas on conveyor's workflows: ``chain``, ``group``, ``chord`` and ``chunks``,
``|`` between them, ``link`` / ``link_error`` (docs/workflows.md, "From Celery's canvas";
``fn.map(items)`` and ``fn.starmap(items)`` are one job over the items, as Celery's).

::

    chain(fetch.s(url), parse.s(), store.s()).enqueue()        # each gets the previous result
    (fetch.s(url) | parse.s() | store.s()).enqueue()           # the same
    chord([resize.s(i) for i in images], make_album.s(album_id)).enqueue()
    group(send.s(u) for u in users).enqueue()
    (group(fetch.s(u) for u in urls) | merge.s()).enqueue()    # a group then a step: a chord

Each builds a ``Workflow`` (so every step is a job with its state, events and retries, and
the whole is one batch with counters and callbacks); ``enqueue`` returns a ``Run`` whose
``.result()`` (``await .aresult()``) waits for the last step: its value, or the list of a
group's, in the order written; a failure raises the exception of the job that failed first
(``conveyor.core.reraise``).

Shapes, as Celery gives them: a step after a group gets the group's results as a list; a
group inside a group is unrolled into it; a chain that ends in a group is one value (that
group's list) inside a group or a chord's header. Where conveyor differs on purpose: a
group's value is a list whatever its size (Celery unrolls a one-member group in a chain into
a bare value, and skips an empty group there), so an empty group gives ``[]`` to what
follows, after everything before it has settled; results come in the order written, not of
completion; a failed header member ends the body ``failed`` naming it (Celery raises
``ChordError``), unless ``on_parent_failure="continue"``.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Protocol, cast

from conveyor.client.builtin_jobs import COLLECT_JOB, ERRBACK_JOB, collect, run_errback
from conveyor.client.client import Client, latest_client
from conveyor.client.options import JobOptions
from conveyor.client.refs import JobRef
from conveyor.client.registry import MAP_JOB, JobFunction
from conveyor.client.signature import Signature
from conveyor.errors import WorkflowError
from conveyor.workflow.canvas_run import Run, Tails
from conveyor.workflow.graph import Workflow

__all__ = ["CANVAS", "Canvas", "Chain", "Group", "Run", "Step", "chain", "chord", "chunks",
           "describe", "group"]

DESCRIPTION_WIDTH = 200  # characters of a default description


class HasClient(Protocol):
    """An app (``Conveyor``), as ``apply_async(app=...)`` takes it: what stores the canvas."""

    @property
    def client(self) -> Client:
        """The app's client."""
        ...


@dataclass(frozen=True, slots=True)
class Placing:
    """Where steps go: the workflow, the policy for a failed parent, the client and queue of
    conveyor's own steps, errbacks inherited from enclosing canvases, a queue for every job."""

    wf: Workflow
    policy: str
    client: Client
    queue: str
    errbacks: tuple[Signature, ...] = ()
    override: str | None = None

    def inherit(self, errbacks: Sequence[Signature]) -> Placing:
        return replace(self, errbacks=(*self.errbacks, *errbacks)) if errbacks else self


class Canvas(ABC):
    """Steps placed in a workflow together: a ``Chain`` or a ``Group``, which say how."""

    def __init__(self) -> None:
        self.links: list[Step] = []
        self.errbacks: list[Signature] = []

    @abstractmethod
    def place(self, at: Placing, after: Tails) -> Tails:
        """Add the steps to ``at.wf`` after ``after``; returns what a next step waits for."""

    @abstractmethod
    def signatures(self) -> list[Signature]:
        """Every signature inside, in order."""

    def __or__(self, other: Any) -> Chain:
        return compose(self, other)

    def link(self, callback: Step) -> Step:
        """Run ``callback`` once the whole canvas succeeded, given its value (a group's
        list); returns ``callback``. (Celery links a group's callback to its first task.)"""
        self.links.append(callback)
        return callback

    def link_error(self, errback: Signature) -> Signature:
        """Give every job of the canvas this error callback (``Signature.link_error``), as
        Celery does: it runs once per job that fails."""
        self.errbacks.append(errback)
        return errback

    def on_error(self, errback: Signature) -> Canvas:
        """``link_error(errback)``, returning the canvas (Celery's ``on_error``)."""
        self.link_error(errback)
        return self

    def attach(self, wf: Workflow, after: Sequence[JobRef], results: str,
               policy: str) -> list[JobRef]:
        """Place the steps in ``wf`` after ``after`` (``Workflow.add_workflow``), the first
        ones receiving results as ``results`` says; returns the nodes to wait for."""
        client = _client(wf.client, self.signatures())
        at = Placing(wf, policy, client, _queue(self.signatures()))
        return self.place(at, Tails(list(after), results if after else "")).refs

    def enqueue(self, *, description: str | None = None, on_parent_failure: str = "fail",
                app: HasClient | None = None, **workflow: Any) -> Run:
        """Store the steps as one workflow (``workflow``: its callbacks and meta, as
        ``Workflow``'s; ``on_parent_failure`` for every step; ``app`` where a canvas with
        no job at all is stored, else the app created last); returns the ``Run``. Without a
        ``description`` the workflow is described by its shape (``describe``)."""
        return self._enqueue((), {}, None, None, None, description, on_parent_failure, app,
                             workflow)

    async def aenqueue(self, **options: Any) -> Run:
        """``enqueue`` for asyncio code (its storage calls in a thread)."""
        return await asyncio.to_thread(lambda: self.enqueue(**options))

    def apply_async(self, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None, *,
                    countdown: float | None = None, eta: datetime | None = None,
                    queue: str | None = None, description: str | None = None,
                    on_parent_failure: str = "fail", app: HasClient | None = None,
                    **workflow: Any) -> Run:
        """Celery's ``apply_async``: ``args``/``kwargs`` go to the first steps (every member
        of a group first), ``countdown`` / ``eta`` delay the first steps, ``queue`` is every
        job's queue."""
        return self._enqueue(args, kwargs or {}, countdown, eta, queue, description,
                             on_parent_failure, app, workflow)

    def _enqueue(self, args: Sequence[Any], kwargs: dict[str, Any],
                 delay: float | timedelta | None, at: datetime | float | None,
                 queue: str | None, description: str | None, policy: str,
                 app: HasClient | None, workflow: dict[str, Any]) -> Run:
        sigs = self.signatures()
        client = _client(app.client if app is not None else None, sigs)
        wf = Workflow(client, description=describe(self) if description is None else description,
                      **workflow)
        placing = Placing(wf, policy, client, queue or _queue(sigs), override=queue)
        tails = self.place(placing, Tails([], "", (args, kwargs) if args or kwargs else None))
        wf.enqueue(delay=delay, at=at)
        return Run(wf, tails)


Step = Signature | Canvas
"""A step of a canvas: a signature, or a chain or group."""


def place(step: Step, at: Placing, after: Tails) -> Tails:
    """Place a signature or a canvas after ``after``."""
    if isinstance(step, Canvas):
        return step.place(at, after)
    sig = step.clone(*after.partial) if after.partial else step.clone()
    if at.override is not None:
        sig.fn = sig.fn.options(queue=at.override)
    mode = "" if sig.immutable or not after.refs else after.mode
    results: bool | str = True if mode == "list" else mode or False
    ref = at.wf.add(Signature(sig.fn, sig.args, sig.kwargs), after=after.refs,
                    results=results, on_parent_failure=at.policy)
    for errback in (*sig.errbacks, *at.errbacks):
        errback.fn.check_call(errback.args, errback.kwargs, 0 if errback.immutable else 3)
        trampoline = errback.fn.builtin(ERRBACK_JOB, run_errback, (
            errback.name, errback.args, errback.kwargs, ref.id, errback.immutable))
        at.wf.add(trampoline, after=[ref], on_parent_failure="continue")
    tails = Tails([ref], "one")
    _links(sig.links, at, tails)
    return tails


def _links(links: Sequence[Step], at: Placing, tails: Tails) -> None:
    """Callbacks after ``tails``, given their value; skipped if it did not succeed."""
    for callback in links:
        place(callback, replace(at, policy="skip", errbacks=()), replace(tails, partial=None))


def _collector(at: Placing, after: Tails, listed: bool) -> Tails:
    """A ``conveyor.collect`` node: the list of ``after``'s results (``listed``), or ``[]``
    once ``after`` settled (an empty group)."""
    fn = JobFunction(at.client, collect, COLLECT_JOB, JobOptions(queue=at.queue))
    ref = at.wf.add(fn.s(), after=after.refs, results=listed and bool(after.refs),
                    on_parent_failure=at.policy)
    return Tails([ref], "one")


class Chain(Canvas):
    """Steps one after the other; each gets the previous one's value in front of its
    arguments (a group's list after a group), unless immutable (``si``)."""

    def __init__(self, steps: Iterable[Step]) -> None:
        super().__init__()
        self.steps = list(steps)
        if not self.steps:
            raise WorkflowError("a chain needs at least one step")

    def place(self, at: Placing, after: Tails) -> Tails:
        inner = at.inherit(self.errbacks)
        tails = after
        for step in self.steps:
            tails = place(step, inner, tails)
        _links(self.links, at, tails)
        return tails

    def signatures(self) -> list[Signature]:
        return [s for step in self.steps for s in _signatures(step)]


class Group(Canvas):
    """Steps side by side, all after the same nodes; a step after the group waits for all
    of them and gets their values as a list, in the order written (``[]`` when empty)."""

    def __init__(self, steps: Iterable[Step]) -> None:
        super().__init__()
        self.steps = list(steps)

    def place(self, at: Placing, after: Tails) -> Tails:
        inner = at.inherit(self.errbacks)
        refs: list[JobRef] = []
        for step in self.steps:
            if isinstance(step, Group) and not step.signatures() and not step.links:
                continue  # an empty group inside a group adds no value (Celery unrolls it)
            got = place(step, inner, after)
            # A group inside is unrolled (its values join this list); a chain ending in a
            # group is one value: its list, collected by a node of its own.
            nested = got.mode == "list" and not isinstance(step, Group)
            refs += _collector(inner, got, True).refs if nested else got.refs
        tails = Tails(refs, "list") if refs else _collector(at, after, False)
        _links(self.links, at, tails)
        return tails

    def signatures(self) -> list[Signature]:
        return [s for step in self.steps for s in _signatures(step)]


def _signatures(step: Step) -> list[Signature]:
    return step.signatures() if isinstance(step, Canvas) else [step]


def _client(given: Client | None, sigs: Sequence[Signature]) -> Client:
    """Where the workflow is stored: the given client, the first job's, else the app created
    last (a canvas of empty groups only)."""
    for candidate in (given, *(s.fn.enqueuer for s in sigs), latest_client()):
        if isinstance(candidate, Client):
            return candidate
    raise WorkflowError("this canvas has no job of any app to store it with: pass app=")


def _queue(sigs: Sequence[Signature]) -> str:
    """The queue of conveyor's own steps (an empty group's): the first job's."""
    return sigs[0].fn.opts.queue if sigs else "default"


def compose(left: Step, right: Any) -> Chain:
    """``left | right``: one chain of both (a chain's steps spliced in, as Celery does)."""
    if not isinstance(right, Signature | Canvas):
        raise TypeError(f"cannot chain a {type(right).__name__} after a signature or canvas")
    return Chain([*_spliced(left), *_spliced(right)])


def _spliced(step: Step) -> list[Step]:
    if isinstance(step, Chain) and not step.links and not step.errbacks:
        return list(step.steps)
    return [step]


def chain(*steps: Step | Iterable[Step]) -> Chain:
    """``chain(a.s(), b.s(), c.s())`` (or a list of them): a, then b with a's result, then c
    with b's."""
    return Chain(_flat(steps))


def group(*steps: Step | Iterable[Step]) -> Group:
    """``group(a.s(1), a.s(2))`` or ``group(a.s(i) for i in items)``: side by side."""
    return Group(_flat(steps))


def _flat(steps: Sequence[Step | Iterable[Step]]) -> list[Step]:
    flat: list[Step] = []
    for step in steps:
        if isinstance(step, Signature | Canvas):
            flat.append(step)
        else:
            flat.extend(step)
    return flat


def chunks(fn: JobFunction, items: Iterable[Sequence[Any]], size: int) -> Group:
    """Celery's ``task.chunks(items, size)`` (also ``fn.chunks(items, size)``): ``items``
    (each the positional arguments of one call of ``fn``) cut into chunks of ``size``, each
    chunk one job calling ``fn`` on its items in turn (``fn.starmap``), the chunks side by
    side: the result is each chunk's list of results, in order."""
    return cast(Group, fn.chunks(items, size))


def chord(header: Group | Iterable[Step], body: Step) -> Chain:
    """``chord([a.s(i) for i in items], b.s())`` or ``chord(group(...), b.s())``: the
    header side by side, then ``body`` with their values as a list, in the order written."""
    return Chain([header if isinstance(header, Group) else Group(header), body])


def describe(canvas: Canvas) -> str:
    """A canvas's shape in words, its workflow's default description: ``chain: extract →
    double → double``, ``group: fetch ×20``, ``chord: fetch ×20 → merge`` (job names without
    their module), cut to ``DESCRIPTION_WIDTH`` characters."""
    kind = "group" if isinstance(canvas, Group) else "chain"
    if isinstance(canvas, Chain) and len(canvas.steps) == 2 and isinstance(canvas.steps[0],
                                                                           Group):
        kind = "chord"
    text = f"{kind}: {_shape(canvas, top=True)}"
    return text if len(text) <= DESCRIPTION_WIDTH else text[: DESCRIPTION_WIDTH - 1] + "…"


def _shape(step: Step, top: bool = False) -> str:
    if isinstance(step, Chain):
        inner = " → ".join(_shape(s) for s in step.steps)
        return inner if top or len(step.steps) == 1 else f"({inner})"
    if isinstance(step, Group):
        runs: list[list[Any]] = []  # [shape, count] of each run of equal steps
        for part in (_shape(s) for s in step.steps):
            if runs and runs[-1][0] == part:
                runs[-1][1] += 1
            else:
                runs.append([part, 1])
        inner = ", ".join(p if n == 1 else f"{p} ×{n}" for p, n in runs)
        return inner if top or len(runs) == 1 else f"[{inner}]"
    if isinstance(step, Signature):
        if step.name == MAP_JOB and step.args:  # (name, items, star): fn.map / fn.starmap
            return f"{'starmap' if step.args[2:3] == [True] else 'map'}({_short(step.args[0])})"
        return _short(step.name)
    return type(step).__name__


def _short(name: Any) -> str:
    """A job's name without its module: ``myapp.tasks.double`` → ``double``."""
    return str(name).rpartition(".")[2] or str(name)


class _Ops:
    """What signatures ask of this layer (``conveyor.client.signature.CanvasOps``): the app
    hands ``CANVAS`` to its client, and every job function reaches it there."""

    def compose(self, left: Any, right: Any) -> Any:
        """``left | right``."""
        return compose(left, right)

    def group(self, steps: Sequence[Signature]) -> Any:
        """The steps side by side."""
        return Group(steps)

    def send_linked(self, sig: Signature, delay: float | timedelta | None,
                    at: datetime | float | None) -> JobRef:
        """``sig`` and its links stored as a workflow; the ref of ``sig``'s own job."""
        client = _client(None, [sig])
        wf = Workflow(client)
        tails = place(sig, Placing(wf, "fail", client, sig.fn.opts.queue), Tails([], ""))
        wf.enqueue(delay=delay, at=at)
        return tails.refs[0]


CANVAS = _Ops()
