"""Text made safe for an operator's terminal.

Job data (names, args, messages, tracebacks, worker ids) is written by whoever can enqueue or
by job code. Printed raw, an ANSI escape could rewrite the screen or the window title, a
carriage return could hide the rest of a line, a newline could forge a line of output, and a
lone surrogate would make ``print`` itself fail. Every character a terminal would act on, or
that cannot be encoded, is shown as a visible Python-style escape instead (``\\x1b``,
``\\r``, ``\\ud800``, ``\\u202e``); everything else, including non-ASCII letters, is kept.
"""

from __future__ import annotations

import re
import sys
from typing import TextIO

# C0 and C1 controls (ESC starts every ANSI sequence), DEL, lone surrogates, and the Unicode
# format characters that reorder or hide text (bidi overrides and isolates, zero-width marks,
# line and paragraph separators, BOM).
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\ud800-\udfff\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]"
)
_UNSAFE_KEEP_NEWLINES = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\ud800-\udfff\u061c\u200b-\u200f\u2028-\u202e"
    "\u2060-\u2069\ufeff]"
)
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def safe(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` with every control, format or unencodable character escaped visibly.

    One-line values (a name, a message in a table) escape newlines too, so they can never
    start a line of their own; ``keep_newlines`` is for text that is multi-line by design
    (a traceback, a whole table) and only keeps ``\\n``.
    """
    pattern = _UNSAFE_KEEP_NEWLINES if keep_newlines else _UNSAFE
    return pattern.sub(_escape, text)


def say(text: str = "", *, file: TextIO | None = None, end: str = "\n",
        flush: bool = False) -> None:
    """Print multi-line ``text`` with everything but its newlines escaped (stdout default)."""
    print(safe(text, keep_newlines=True), file=file or sys.stdout, end=end, flush=flush)
