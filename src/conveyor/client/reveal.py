"""A stored job as a reader may see it: its sealed data opened with the keys this process
holds, or shown as ``encrypted`` where it holds none that open it, and its data by
reference fetched or named (docs/job-data.md, "Who sees what").

``reveal`` serves ``JobRef`` (the job's own messages and errors, to raise its exception
again), the CLI and the dashboard (everything, through ``views.readable``). Nothing here
writes: a reader without the key changes no stored job.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from conveyor.client.payloads import JobData
from conveyor.core.envelope import ENCRYPTED, RESULT_TAG, SEALED_PREFIX, literal, parse_result
from conveyor.core.job import Event, JobRecord
from conveyor.core.steps import DurableHistory
from conveyor.errors import (
    BlobMissing,
    BlobUnavailable,
    ConveyorError,
    PayloadError,
    UnsealError,
)

__all__ = ["ENCRYPTED", "is_sealed", "reveal", "reveal_steps", "texts_opened"]

_PLAIN = JobData()


def is_sealed(record: JobRecord) -> bool:
    """True when any of the job's stored data or text is sealed (search cannot read it)."""
    return _sealed_payload(record.payload) or '"e":' in (record.result or "") \
        or "$enc$" in (record.message or "")


def _sealed_payload(payload: str) -> bool:
    if '"x":' not in payload:
        return False
    try:
        env = json.loads(payload).get("x")
    except (ValueError, AttributeError, RecursionError):
        return False
    return isinstance(env, dict) and "e" in env


def reveal(record: JobRecord, data: JobData | None = None, *, fetch: bool = False,
           texts_only: bool = False) -> JobRecord:
    """``record`` with its sealed parts opened (``data``'s keys) or ``encrypted``; with
    ``fetch`` arguments and result by reference are read from the blob store, else named
    (``{"by_reference": key, "bytes": n}``). ``texts_only``: messages and errors alone (no
    parse of arguments or result)."""
    opener = data or _PLAIN
    changes: dict[str, Any] = {}
    message = opener.open_text(record.message)
    if message is not record.message:
        changes["message"] = message
    if record.events and any(_has_token(e) for e in record.events):
        changes["events"] = [_event(e, opener) for e in record.events]
    if not texts_only:
        payload = _payload(record, opener, fetch)
        if payload is not None:
            changes["payload"] = payload
        result = _result(record, opener, fetch)
        if result is not None:
            changes["result"] = result
    return dataclasses.replace(record, **changes) if changes else record


def texts_opened(record: JobRecord | None, data: JobData) -> JobRecord | None:
    """``record``'s messages and errors opened (``reveal(texts_only=True)``); as it is when
    the app seals nothing."""
    if record is None or not data.active:
        return record
    return reveal(record, data, texts_only=True)


def _has_token(event: Event) -> bool:
    if event.message and "$enc$" in event.message:
        return True
    # sealed data is a text value of its own (a log line's, an error's): no deeper look
    return any(isinstance(v, str) and "$enc$" in v for v in (event.data or {}).values())


def _event(event: Event, opener: JobData) -> Event:
    data = event.data
    if data:
        opened: dict[str, Any] = {}
        for key, value in data.items():
            if isinstance(value, str):
                text = opener.open_text(value)
                if key == "sealed" and text != value and text is not None:
                    try:  # a log line's data, sealed as one JSON text (worker.sealing)
                        opened.update(json.loads(text))
                        continue
                    except ValueError:
                        pass
                opened[key] = text
            else:
                opened[key] = value
        data = opened
    return dataclasses.replace(event, message=opener.open_text(event.message), data=data)


def _payload(record: JobRecord, opener: JobData, fetch: bool) -> str | None:
    """The payload text to show in place of the stored one, or None to keep it."""
    text = record.payload
    if '"x":' not in text and '"i":' not in text:
        return None
    try:
        stored = json.loads(text)
    except (ValueError, RecursionError):
        return None  # views.readable shows unreadable text as it is
    if not isinstance(stored, dict) or (not isinstance(stored.get("x"), dict) \
            and "i" not in stored):
        return None
    meta = stored.get("m", {})
    env = stored.get("x")
    if isinstance(env, dict) and "r" in env and not fetch:
        named: dict[str, Any] = {"by_reference": env["r"], "bytes": env.get("z")}
        if "e" in env:
            named[ENCRYPTED] = True
        shown = [*stored.get("a", []), named]
        return json.dumps({"a": shown, "k": stored.get("k", {}), "m": meta})
    try:
        args, kwargs, meta = opener.open_payload(record.id, record.name, text)
    except UnsealError:
        return json.dumps({"a": [*stored.get("a", []), ENCRYPTED], "k": {}, "m": meta})
    except (BlobMissing, BlobUnavailable, PayloadError, ConveyorError) as exc:
        return json.dumps({"a": [f"unreadable: {exc}"], "k": {}, "m": meta})
    return json.dumps({"a": args, "k": kwargs, "m": meta}, default=str)


def _result(record: JobRecord, opener: JobData, fetch: bool) -> str | None:
    text = record.result
    if not text or not text.startswith('{"' + RESULT_TAG):
        return None
    try:
        value, env = parse_result(text)
    except (ValueError, RecursionError):
        return None
    if env is None:
        return json.dumps(value)
    if "r" in env and not fetch:
        return json.dumps({"by_reference": env["r"], "bytes": env.get("z")})
    try:
        return json.dumps(opener.result_value(record.id, text))
    except UnsealError:
        return json.dumps(ENCRYPTED)
    except (BlobMissing, BlobUnavailable, ConveyorError, ValueError) as exc:
        return json.dumps(f"unreadable: {exc}")



def reveal_steps(history: DurableHistory, data: JobData | None = None) -> DurableHistory:
    """A durable job's records as a reader sees them (docs/durable.md): a sealed step's
    result opened with ``data``'s keys (its summary says ``encrypted`` without one that
    opens it), a sealed error message opened or ``encrypted``. Data by reference stays
    named by its size, never fetched."""
    opener = data or _PLAIN
    steps = []
    for step in history.steps:
        changes: dict[str, Any] = {}
        if step.error and any("$enc$" in v for v in step.error.values()):
            changes["error"] = {k: opener.open_text(v) or "" for k, v in step.error.items()}
        if opener.keys is not None and step.result \
                and step.result.startswith(SEALED_PREFIX):
            try:
                _, env = parse_result(step.result)
                if env is not None and "r" not in env:
                    value = opener.open_value(step.result, tuple(env["a"]))
                    changes["result"] = json.dumps(literal(value))
            except (UnsealError, ValueError, KeyError, TypeError):
                pass  # a key not held here: it stays encrypted
        steps.append(dataclasses.replace(step, **changes) if changes else step)
    return dataclasses.replace(history, steps=steps)
