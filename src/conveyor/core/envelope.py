"""The stored forms of sealed and referenced job data (docs/job-data.md, "What is stored").

Stores keep a job's payload and result as opaque text; these are the shapes that text takes
when the data is encrypted (``e``: the key id) or kept in a blob store (``r``: the blob's
key), decided once here for the client, the worker and every reader:

- a **payload** stays a payload object: ``{"a": [], "k": {}, "m": meta, "x": ENV}``. The
  arguments are in ``ENV``; those in ``a`` (a workflow node's parents' results, put in
  front by the store when it releases the node) come before them, so the store's injection
  needs no key and no blob. ``"i"`` says the first argument holds injected results that may
  be envelopes themselves (``"one"`` or ``"list"``, the node's ``results`` mode).
- a **result** is ``{"$conveyor": ENV}``. A job's own result that is a dict holding the
  key ``"$conveyor"`` is stored as ``{"$conveyor": {"v": result}}``, so a stored dict whose
  only key is ``"$conveyor"`` is always an envelope.
- ``ENV``: ``d`` (base64 of the bytes) or ``r``/``z``/``h`` (a blob's key, size and
  SHA-256 prefix); ``e`` and ``b`` when sealed (key id; ``"i"``: bound to the job id,
  ``"n"``: to the job name only, for a debounced or throttled job whose payload the store
  moves between jobs); ``j``: the job a result is bound to.
- **text** (messages, errors, log lines) sealed is ``$enc$<key id>$<job id>$<base64url>$``
  inside the text, so a store's own prefix ("cancelled: …") and quotes of it in another
  job's message (a workflow's "parent … ended failed: …") still read.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

__all__ = ["ENCRYPTED", "INJECTED", "RESULT_TAG", "SEALED_PREFIX", "TEXT_TOKEN", "aad", "b64",
           "is_envelope", "literal", "parse_result", "unb64"]

RESULT_TAG = "$conveyor"
_PREFIX = '{"$conveyor":'
#: How the stored text of a sealed durable value begins (a step's result, a message's or an
#: event's data: the key id first). A store that summarises one in the job's event log (Redis'
#: receive.lua, PostgreSQL's durable_receive) writes ``encrypted`` instead.
SEALED_PREFIX = '{"$conveyor":{"e":'
#: What a reader that holds no key to open a value shows in its place.
ENCRYPTED = "encrypted"
#: The key of a payload object that says its first argument holds injected results.
INJECTED = "i"
TEXT_TOKEN = re.compile(
    r"\$enc\$([A-Za-z0-9_.-]{1,64})\$([A-Za-z0-9_.:-]{1,128})\$([A-Za-z0-9_-]*={0,2})\$")


def aad(kind: str, *parts: str) -> bytes:
    """What a ciphertext is bound to: the kind of field and the job (id or name)."""
    return "\0".join(("conveyor", kind, *parts)).encode("utf-8", "surrogatepass")


def b64(data: bytes) -> str:
    """URL-safe base64 text (fits a JSON string and a sealed text token unescaped)."""
    return base64.urlsafe_b64encode(data).decode()


def unb64(text: str) -> bytes:
    """Inverse of ``b64``."""
    return base64.urlsafe_b64decode(text.encode())


def is_envelope(value: Any) -> bool:
    """True for a parsed stored result value that is an envelope (sealed, by reference or
    an escaped literal)."""
    return isinstance(value, dict) and len(value) == 1 and RESULT_TAG in value \
        and isinstance(value[RESULT_TAG], dict)


def literal(value: Any) -> Any:
    """A job's own result as stored: a dict holding ``"$conveyor"`` wrapped, so it never
    reads as an envelope; anything else as it is."""
    if isinstance(value, dict) and RESULT_TAG in value:
        return {RESULT_TAG: {"v": value}}
    return value


def parse_result(text: str) -> tuple[Any, dict[str, Any] | None]:
    """``(value, None)`` for stored result text holding its value, ``(None, envelope)``
    for one whose value is sealed or by reference. Raises ``ValueError`` for text that is
    not JSON."""
    if not text.startswith(_PREFIX):
        return json.loads(text), None
    value = json.loads(text)
    if not is_envelope(value):
        return value, None
    env: dict[str, Any] = value[RESULT_TAG]
    if "v" in env:
        return env["v"], None
    return None, env
