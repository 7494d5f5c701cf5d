"""Text PostgreSQL cannot hold as it is: U+0000, which ``text`` columns refuse.

Human text a job writes (messages, batch descriptions, worker ids, flow-control keys) is
kept exactly as given on every backend (``conveyor.core.text``); here it is stored escaped and read
back unescaped, so records are the same as elsewhere. The escape is U+FFFE (a noncharacter):
U+0000 is stored as U+FFFE "0" and U+FFFE itself as U+FFFE U+FFFE, so any text round-trips
and text without either character (nearly all) is stored unchanged. JSON columns need
nothing: JSON writes U+0000 as ``\\u0000``.
"""

from __future__ import annotations

import re

_ESC = "\ufffe"
_ESCAPED = re.compile("\ufffe(.)", re.DOTALL)


def enc(text: str) -> str:
    """``text`` as stored."""
    if "\x00" not in text and _ESC not in text:
        return text
    return text.replace(_ESC, _ESC + _ESC).replace("\x00", _ESC + "0")


def enc_opt(text: str | None) -> str | None:
    """``enc`` that passes None through."""
    return None if text is None else enc(text)


def dec(text: str | None) -> str | None:
    """Inverse of ``enc`` (None passes through)."""
    if text is None or _ESC not in text:
        return text
    return _ESCAPED.sub(lambda m: "\x00" if m.group(1) == "0" else m.group(1), text)
