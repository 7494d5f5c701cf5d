"""What a search reads of a Redis job (``Inspector.job_heads``), decoded from the cut entries
``lua/heads.lua`` returns: the start of the payload (a JSON string inside the static JSON,
escaped to ASCII), the state line without its event log, and the start of the message.

The script keeps ``WIDTH`` bytes of the escaped payload per character asked for: an escape
is at most 6 bytes per UTF-16 unit, so the bytes hold every character asked for, except in
text mostly outside the Basic Multilingual Plane (two units per character), where they hold at
least half of them.
"""

from __future__ import annotations

import json
import re

from conveyor.core.job import JobState
from conveyor.storage.job_heads import JobHead
from conveyor.storage.redis.codec import STATE_FIELDS

__all__ = ["WIDTH", "head_of"]

WIDTH = 6
# The longest run of whole JSON string characters at the start of a cut string: plain
# characters and complete escapes, up to the closing quote or the cut.
_WHOLE = re.compile(r'(?:[^"\\]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*')
_STATE = STATE_FIELDS.index("state")
_CREATED = STATE_FIELDS.index("created_at")
_NAME = STATE_FIELDS.index("name")


def head_of(job_id: str, queue: str, payload: str, state_line: str, message: str,
            chars: int) -> JobHead:
    """A ``JobHead`` from one reply of ``heads.lua``; never raises on stored data."""
    whole = _WHOLE.match(payload)
    try:
        text = json.loads(f'"{whole.group() if whole else ""}"')
    except ValueError:
        text = ""
    fields = state_line.split("\t")

    def field(i: int) -> str:
        return fields[i] if i < len(fields) else ""

    try:
        created = float(field(_CREATED) or 0)
    except ValueError:
        created = 0.0
    state = next((s for s in JobState if s.value == field(_STATE)), None)
    # The cut may split a UTF-8 sequence: the connection hands its bytes back as lone
    # surrogates (surrogateescape), dropped here.
    cut = message[:chars]
    return JobHead(id=job_id, name=field(_NAME), queue=queue, state=state,
                   created_at=created, payload=text[:chars],
                   message=cut.encode("utf-8", "surrogateescape").decode("utf-8", "ignore"))
