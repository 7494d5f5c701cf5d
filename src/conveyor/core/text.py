"""What conveyor does with text: the one rule for what it stores, prints and accepts as a name.

- **Data** (arguments, results, event data) is JSON and round-trips exactly; see
  ``serializer`` (a lone surrogate is written as the JSON escape ``\\ud800``).
- **Human text** (``Fail`` messages, error messages and tracebacks, log messages, batch
  descriptions) is made storable by ``storable``: a lone surrogate, which no backend can encode
  as UTF-8, becomes U+FFFD; everything else, control characters included, is kept as given.
- **Printing** such text to a log line goes through ``printable``: control characters, line
  breaks and lone surrogates are escaped, so a job cannot forge log lines or garble a terminal.
- **Names** of jobs and queues are checked once, client side, by ``check_name``: 1 to
  ``MAX_NAME_LENGTH`` printable characters, the same answer on every backend.
- **Keys** of flow control (unique, concurrency, rate, order, debounce/throttle, aggregation:
  every ``FlowControl`` field named ``*_key``) are checked at enqueue by ``key_fault``: 1 to
  ``MAX_KEY_BYTES`` bytes of UTF-8 with no control character (C0, DEL, C1), line or paragraph
  separator, or lone surrogate. Keys are often built from user data (``f"partner:{p}"``), so
  any other character is taken, emoji and characters newer than this Python included; the
  bound is in bytes because that is what a store's index holds (PostgreSQL's B-tree takes
  about 2,700 bytes per entry, queue and job name included).
- **Ids** a caller chooses (a workflow node's ``node_id``, a ``workflow_id``) are checked by
  ``id_fault``: 1 to ``MAX_ID_LENGTH`` ASCII letters, digits, ``-``, ``_``, ``.`` and ``:``,
  so that an id is safe in a URL path, a log line, a Redis key and a hash tag alike.
"""

from __future__ import annotations

import re

from conveyor.errors import InvalidNameError

__all__ = ["MAX_ID_LENGTH", "MAX_KEY_BYTES", "MAX_NAME_LENGTH", "check_name", "id_fault",
           "key_fault", "printable", "shown", "storable"]

MAX_NAME_LENGTH = 200
MAX_KEY_BYTES = 512
MAX_ID_LENGTH = 128

# C0 and C1 controls (ESC starts every ANSI sequence), DEL, lone surrogates, and the Unicode
# format characters that end, reorder or hide text (line and paragraph separators, which
# str.splitlines splits on; bidi overrides and isolates; zero-width marks; BOM).
_UNPRINTABLE = re.compile(
    "[\x00-\x1f\x7f-\x9f\ud800-\udfff\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]"
)
_UNPRINTABLE_KEEP_NEWLINES = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\ud800-\udfff\u061c\u200b-\u200f\u2028-\u202e"
    "\u2060-\u2069\ufeff]"
)
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def storable(text: str) -> str:
    """``text`` with lone surrogates replaced by U+FFFD (a split pair is joined back).

    Every backend stores UTF-8, which cannot hold a lone surrogate; anything else passes
    unchanged. Costs one ``isascii`` check for ordinary text.
    """
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return _SHORT.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def printable(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` safe for a log line or a terminal: every control, format or unencodable
    character escaped visibly (``\\n``, ``\\x1b``, ``\\ud800``, ``\\u202e``); all other
    characters, non-ASCII letters included, kept.

    One-line values escape newlines too, so they can never start a line of their own;
    ``keep_newlines`` is for text that is multi-line by design (a traceback, a table).
    """
    pattern = _UNPRINTABLE_KEEP_NEWLINES if keep_newlines else _UNPRINTABLE
    return pattern.sub(_escape, text)


def check_name(what: str, value: object) -> None:
    """Raise ``InvalidNameError`` unless ``value`` is a string of 1 to ``MAX_NAME_LENGTH``
    printable characters (``str.isprintable``, plus the ASCII space)."""
    if not isinstance(value, str):
        raise InvalidNameError(f"{what} must be a string, not {type(value).__name__}")
    if not value:
        raise InvalidNameError(f"{what} must not be empty")
    if len(value) > MAX_NAME_LENGTH:
        raise InvalidNameError(f"{what} '{printable(value[:40])}...' is {len(value)} characters "
                               f"long; the limit is {MAX_NAME_LENGTH}")
    if not value.isprintable():
        raise InvalidNameError(f"{what} '{printable(value)}' must hold printable characters "
                               "only: no control characters, line breaks or lone surrogates")


# What a key may not hold: C0 and C1 controls and DEL (newlines and tabs among them), the
# line and paragraph separators, lone surrogates. The stores spell the same class: Lua
# (storage/redis/lua/_admit.lua) and PL/pgSQL (storage/postgres/functions/key_rule.sql).
_KEY_FORBIDDEN = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def key_fault(value: object) -> str | None:
    """Why ``value`` is not a flow-control key (the words after "the key ..."), or None when
    it is one: a string of 1 to ``MAX_KEY_BYTES`` bytes of UTF-8 holding no control
    character, line or paragraph separator, or lone surrogate."""
    if isinstance(value, str) and value.isascii() and value.isprintable():
        # the common key, checked at C speed: ASCII, so its length is its size in bytes
        return None if 0 < len(value) <= MAX_KEY_BYTES else _size_fault(value)
    if not isinstance(value, str):
        return f"is {type(value).__name__}, not a string"
    bad = _KEY_FORBIDDEN.search(value)
    if bad is not None:
        return (f"holds {printable(bad.group())} at position {bad.start()}: no control "
                "characters, line breaks or lone surrogates")
    return _size_fault(value)


def _size_fault(value: str) -> str | None:
    if not value:
        return "is empty"
    size = len(value.encode("utf-8"))
    if size > MAX_KEY_BYTES:
        return f"is {size:,} bytes long in UTF-8; the limit is {MAX_KEY_BYTES}"
    return None


_ID = re.compile("[A-Za-z0-9_.:-]+")


def id_fault(value: object) -> str | None:
    """Why ``value`` is not an id a caller may choose, or None when it is one."""
    if not isinstance(value, str):
        return f"must be a string, not {type(value).__name__}"
    if not 0 < len(value) <= MAX_ID_LENGTH:
        return f"is {len(value):,} characters long; an id is 1 to {MAX_ID_LENGTH}"
    if _ID.fullmatch(value) is None:
        return "may hold only ASCII letters, digits, '-', '_', '.' and ':'"
    return None


def shown(value: object) -> str:
    """``value`` quoted for a one-line message: escaped, and cut after 40 characters."""
    if not isinstance(value, str):
        return repr(value)[:40]
    cut = printable(value[:40])
    return f"'{cut}...'" if len(value) > 40 else f"'{cut}'"
