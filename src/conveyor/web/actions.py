"""The dashboard's state changes, each reached only by a CSRF-checked POST to ``/action``."""

from __future__ import annotations

from collections.abc import Callable

from conveyor.core.job import JobState
from conveyor.errors import ConveyorError
from conveyor.storage.base import Inspector
from conveyor.views.breakers import close_breaker
from conveyor.views.failures import failure_states, retry_failures
from conveyor.views.records import parse_state
from conveyor.web import schedule_actions

Form = dict[str, list[str]]


def _one(form: Form, name: str) -> str:
    value = form.get(name, [""])[0].strip()
    if not value:
        raise ConveyorError(f"the form is missing {name!r}")
    return value


def _ids(form: Form) -> list[str]:
    ids = [i for i in form.get("ids", []) if i.strip()]
    if not ids:
        raise ConveyorError("select at least one job")
    return ids


def _state(form: Form) -> JobState:
    try:
        state = parse_state(form.get("state", ["dead"])[0])
    except ValueError as exc:
        raise ConveyorError(str(exc)) from None
    return state or JobState.DEAD


def _queue(form: Form) -> str | None:
    return form.get("queue", [""])[0].strip() or None


def _retry(insp: Inspector, form: Form) -> str:
    ids = _ids(form)
    done = insp.retry_jobs(ids)
    refused = insp.retry_refusals(ids) if done < len(ids) else {}
    return "; ".join([f"retried {done} job(s)", *refused.values()])


def _delete(insp: Inspector, form: Form) -> str:
    return f"deleted {insp.delete_jobs(_ids(form))} job(s)"


def _kill(insp: Inspector, form: Form) -> str:
    return f"killed {insp.kill_jobs(_ids(form))} job(s)"


def _retry_all(insp: Inspector, form: Form) -> str:
    state = _state(form)
    return f"retried {insp.retry_all(state, queue=_queue(form))} {state.value} job(s)"


def _clear(insp: Inspector, form: Form) -> str:
    state = _state(form)
    if not state.terminal:
        raise ConveyorError(f"only finished jobs can be cleared, not {state.value} ones")
    return f"deleted {insp.clear(state, queue=_queue(form))} {state.value} job(s)"


def _pause(insp: Inspector, form: Form) -> str:
    queue = _one(form, "queue")
    insp.pause_queue(queue)
    return f"paused {queue}"


def _resume(insp: Inspector, form: Form) -> str:
    queue = _one(form, "queue")
    insp.resume_queue(queue)
    return f"resumed {queue}"


def _command(command: str) -> Callable[[Inspector, Form], str]:
    def run(insp: Inspector, form: Form) -> str:
        worker = _one(form, "worker")
        if not insp.command_worker(worker, command):
            raise ConveyorError(f"no live worker {worker!r}")
        return f"sent {command} to {worker}"

    return run


def _retry_batch(insp: Inspector, form: Form) -> str:
    batch = _one(form, "batch")
    which = form.get("state", ["all"])[0]
    try:
        states = failure_states(which)
    except ValueError as exc:
        raise ConveyorError(str(exc)) from None
    what = "failed and dead" if which == "all" else which
    return retry_failures(insp, batch, states).summary(what, batch)


def _cancel_batch(insp: Inspector, form: Form) -> str:
    batch = _one(form, "batch")
    return f"cancelled batch {batch}: {insp.cancel_batch(batch)} job(s)"


def _close_breaker(insp: Inspector, form: Form) -> str:
    closed, message = close_breaker(insp, _one(form, "key"))
    if not closed:
        raise ConveyorError(message)
    return message


OPERATIONS: dict[str, Callable[[Inspector, Form], str]] = {
    "retry": _retry, "delete": _delete, "kill": _kill, "retry-all": _retry_all,
    "clear": _clear, "pause": _pause, "resume": _resume, "quiet": _command("quiet"),
    "stop": _command("stop"), "cancel-batch": _cancel_batch, "retry-batch": _retry_batch,
    "close-breaker": _close_breaker,
}


def perform(insp: Inspector, path: str, form: Form, by: str = "dashboard") -> str:
    """Apply the operation named by the form's ``op``; returns a message for the operator.
    ``by`` names who asked, in the audit trail of the changes that keep one (schedules)."""
    if path != "/action":
        raise ConveyorError(f"nothing to POST to at {path}")
    op = form.get("op", [""])[0]
    scheduling = schedule_actions.OPERATIONS.get(op)
    if scheduling is not None:
        return scheduling(insp, form, by)
    handler = OPERATIONS.get(op)
    if handler is None:
        raise ConveyorError(f"unknown operation {op!r}")
    return handler(insp, form)
