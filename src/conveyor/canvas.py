"""Celery's canvas on conveyor's workflows: ``chain``, ``group``, ``chord`` and ``chunks``
(docs/workflows.md, "From Celery's canvas"; ``fn.map(items)`` and ``fn.starmap(items)`` are
one job over the items, as Celery's).

::

    chain(fetch.s(url), parse.s(), store.s()).enqueue()        # each gets the previous result
    chord([resize.s(i) for i in images], make_album.s(album_id)).enqueue()
    group(send.s(u) for u in users).enqueue()
    chain(group(fetch.s(u) for u in urls), merge.s()).enqueue()  # a group then a step: a chord

Each builds a ``Workflow`` (so every step is a job with its state, events and retries, and
the whole is one batch with counters and callbacks) and ``enqueue`` returns it; ``.result()``
of what ``enqueue`` returns waits for the last step (a list of results for a group).

Where Celery's semantics differ: a step after a group gets the group's results **in the
order the group was written**, not of completion; a failed member of a chord's header ends
the callback ``failed`` naming it, unless the callback was built with
``on_parent_failure="continue"`` (it then runs with ``None`` in that member's place), where
Celery raises ``ChordError`` in the callback's result and leaves the callback unrun.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from conveyor.errors import WorkflowError
from conveyor.refs import JobRef
from conveyor.registry import MAP_JOB, JobFunction, Signature
from conveyor.workflow import Workflow

__all__ = ["Canvas", "Chain", "Group", "Run", "chain", "chord", "chunks", "describe", "group"]

DESCRIPTION_WIDTH = 200  # characters of a default description

class Canvas:
    """Steps that can be placed in a workflow after other nodes (a chain or a group)."""

    def attach(self, wf: Workflow, after: Sequence[JobRef], results: str,
               policy: str) -> list[JobRef]:
        """Add the steps to ``wf`` after ``after``, the first ones receiving results as
        ``results`` says, every one with ``policy`` for a failed parent; returns the nodes a
        next step waits for."""
        raise NotImplementedError

    def signatures(self) -> list[Signature]:
        """Every signature inside, in order."""
        raise NotImplementedError

    def enqueue(self, *, description: str | None = None, on_parent_failure: str = "fail",
                **workflow: Any) -> Run:
        """Store the steps as one workflow (``workflow``: its callbacks and meta, as
        ``Workflow``; ``on_parent_failure`` for every step); returns it with the last
        steps' refs. Without a ``description`` the workflow is described by its shape
        (``describe``), so that lists show more than an id."""
        if not self.signatures():
            raise WorkflowError("nothing to enqueue: the canvas has no step")
        wf = Workflow(description=describe(self) if description is None else description,
                      **workflow)
        tails = self.attach(wf, [], "", on_parent_failure)
        wf.enqueue()
        return Run(wf, tails, single=isinstance(self, Chain) and not self.ends_in_group())


def _attach(step: Signature | Canvas, wf: Workflow, after: Sequence[JobRef], results: str,
            policy: str) -> list[JobRef]:
    if isinstance(step, Canvas):
        return step.attach(wf, after, results, policy)
    return [wf.add(step, after=list(after), results=results if after else False,
                   on_parent_failure=policy)]


class Chain(Canvas):
    """Steps one after the other; each gets the previous one's result as its first argument
    (the list of a group's results after a group)."""

    def __init__(self, steps: Iterable[Signature | Canvas]) -> None:
        self.steps = list(steps)
        if not self.steps:
            raise WorkflowError("a chain needs at least one step")

    def attach(self, wf: Workflow, after: Sequence[JobRef], results: str,
               policy: str) -> list[JobRef]:
        tails = list(after)
        mode = results
        for step in self.steps:
            tails = _attach(step, wf, tails, mode, policy)
            mode = "one" if len(tails) == 1 and not isinstance(step, Group) else "list"
        return tails

    def signatures(self) -> list[Signature]:
        return [s for step in self.steps for s in _signatures(step)]

    def ends_in_group(self) -> bool:
        """True when the last step is a group (its result is then a list)."""
        return isinstance(self.steps[-1], Group)


class Group(Canvas):
    """Steps side by side, all after the same nodes; a step after the group waits for all of
    them and gets their results as a list, in the order written."""

    def __init__(self, steps: Iterable[Signature | Canvas]) -> None:
        self.steps = list(steps)

    def attach(self, wf: Workflow, after: Sequence[JobRef], results: str,
               policy: str) -> list[JobRef]:
        tails: list[JobRef] = []
        for step in self.steps:
            tails += _attach(step, wf, after, results, policy)
        return tails

    def signatures(self) -> list[Signature]:
        return [s for step in self.steps for s in _signatures(step)]


def _signatures(step: Signature | Canvas) -> list[Signature]:
    return step.signatures() if isinstance(step, Canvas) else [step]


class Run:
    """An enqueued canvas: its ``workflow`` and the refs of its last steps."""

    def __init__(self, workflow: Workflow, tails: list[JobRef], single: bool) -> None:
        self.workflow = workflow
        self.tails = tails
        self._single = single and len(tails) == 1

    @property
    def id(self) -> str:
        """The workflow's id."""
        return self.workflow.id

    def result(self, timeout: float | None = None) -> Any:
        """The last step's result (a list of results when the canvas ends in a group)."""
        if self._single:
            return self.tails[0].result(timeout=timeout)
        return [ref.result(timeout=timeout) for ref in self.tails]


def chain(*steps: Signature | Canvas) -> Chain:
    """``chain(a.s(), b.s(), c.s())``: a, then b with a's result, then c with b's."""
    return Chain(steps)


def group(*steps: Signature | Canvas | Iterable[Signature | Canvas]) -> Group:
    """``group(a.s(1), a.s(2))`` or ``group(a.s(i) for i in items)``: side by side."""
    flat: list[Signature | Canvas] = []
    for step in steps:
        if isinstance(step, Signature | Canvas):
            flat.append(step)
        else:
            flat.extend(step)
    return Group(flat)


def chunks(fn: JobFunction, items: Iterable[Sequence[Any]], size: int) -> Group:
    """Celery's ``task.chunks(items, size)``: ``items`` (each the positional arguments of
    one call of ``fn``) cut into chunks of ``size``, each chunk one job calling ``fn`` on its
    items in turn (``fn.starmap``), the chunks side by side: the result is each chunk's list
    of results, in order. Fewer, larger jobs for many small calls."""
    if size < 1:
        raise WorkflowError(f"chunks need a size of at least 1, not {size}")
    calls = [list(item) for item in items]
    return Group(fn.starmap(calls[i:i + size]) for i in range(0, len(calls), size))


def chord(header: Iterable[Signature | Canvas], body: Signature | Canvas) -> Chain:
    """``chord([a.s(i) for i in items], b.s())``: the header side by side, then ``body`` with
    their results as a list, in the order written."""
    return Chain([Group(header), body])


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


def _shape(step: Signature | Canvas, top: bool = False) -> str:
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
