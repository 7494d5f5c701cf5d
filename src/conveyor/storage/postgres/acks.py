"""Acknowledgements: a whole list applied by one call of the server-side ``ack`` function
(functions/ack.sql), fenced by lease token.

What each ack does is decided here by the rules every backend shares (``storage/rules.py``):
the outcome as given, and what it becomes if the job has a pending cancel request (which
only the locked row can tell, so the function picks between the two). The function locks the
jobs in id order, applies every ack whose token is still the job's lease in one ``UPDATE``,
records an ``ack_refused`` event for the others, and moves outcome totals and batch counters,
all in the one statement.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from conveyor.core.job import Ack, Outcome
from conveyor.storage.postgres import arrays
from conveyor.storage.postgres.text import enc_opt
from conveyor.storage.rules import CANCELS_ON_REQUEST, AckEffect, ack_effect, counts_as_error

_ACK = (
    "SELECT ack(%s::float8, %s::text[], %s::text[], %s::text[], %s::text[], %s::text[], "
    "%s::text[], %s::text[], %s::text[], %s::text[], %s::bool[], %s::text[], %s::text[], "
    "%s::text[], %s::int4[], %s::text[], %s::text[], %s::float8[], %s::text[]), wf_pending(), "
    # the callers waiting on results, woken (a scan of an empty table when nobody waits)
    "wake_waiters()"
)

# Acks of which some job never ran (unreadable, unknown: no breaker counts its error) name
# those acks' places in one more array; the usual call leaves it out (functions/ack.sql).
_ACK_UNRAN = _ACK.replace("%s::text[]), wf_pending()", "%s::text[], %s::int4[]), wf_pending()")

# The ``ack`` function's arrays after ``p_now``, in its order (``arrays.py``).
_ENCODERS: tuple[arrays.Encoder, ...] = (
    *[arrays.texts] * 9, arrays.bools, *[arrays.texts] * 3, arrays.ints, arrays.texts,
    arrays.texts, arrays.floats, arrays.texts)


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"), default=str)


def _effect(effect: AckEffect) -> tuple[str | None, str | None, str | None]:
    """(message as stored, message as JSON, data as JSON) of one effect."""
    return enc_opt(effect.message), _json(effect.message), _json(effect.data) if effect.data \
        else None


def _row(ack: Ack) -> tuple[Any, ...]:
    given = ack_effect(ack, ack.outcome)
    cancels = ack.outcome in CANCELS_ON_REQUEST
    cancelled = ack_effect(ack, Outcome.CANCELLED if cancels else ack.outcome)
    events = "".join(e.to_json() + "\n" for e in ack.events) or None
    return (
        ack.job_id, ack.token, ack.outcome.value, given.state, given.kind, *_effect(given),
        given.counted, cancels, *_effect(cancelled), 1 if counts_as_error(ack) else 0,
        ack.result, json.dumps(list(ack.progress)) if ack.progress else None,
        # a suspension's wake time travels where a retry's delay does (functions/ack.sql)
        ack.resume_at if ack.outcome is Outcome.SUSPENDED and ack.resume_at is not None
        else ack.retry_in or 0.0, events,
    )


def apply(cur: psycopg.Cursor[Any], now: float | None,
          acks: Sequence[Ack]) -> tuple[list[bool], bool]:
    """Apply the acks (``now``: the storage clock, None for the server's); returns
    applied-or-refused per ack, in order, and whether workflow nodes wait to be settled."""
    return send(cur, now, acks)()


def send(cur: psycopg.Cursor[Any], now: float | None,
         acks: Sequence[Ack]) -> Callable[[], tuple[list[bool], bool]]:
    """``apply`` in two halves: the statement is executed now (in a pipeline, only queued,
    so a statement after it travels in the same round trip), the function returned reads
    its answer."""
    if not acks:
        return lambda: ([], False)
    columns = arrays.columns([_row(a) for a in acks], _ENCODERS)
    unran = [place for place, a in enumerate(acks, 1) if not a.ran]
    if unran:  # the 20-argument ack: these acks' errors do not count for a breaker
        cur.execute(_ACK_UNRAN, (now, *columns, arrays.ints(unran)))
    else:
        cur.execute(_ACK, (now, *columns))

    def read() -> tuple[list[bool], bool]:
        row = cur.fetchone()
        if not row:
            return [False] * len(acks), False
        return [bool(ok) for ok in row[0]], len(row) > 1 and bool(row[1])

    return read
