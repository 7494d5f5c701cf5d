"""Text made safe for an operator's terminal.

Job data (names, args, messages, tracebacks, worker ids) is written by whoever can enqueue or
by job code. Printed raw, an ANSI escape could rewrite the screen or the window title, a
carriage return could hide the rest of a line, a newline could forge a line of output, and a
lone surrogate would make ``print`` itself fail. Every character a terminal would act on, or
that cannot be encoded, is shown as a visible Python-style escape instead (``\\x1b``,
``\\r``, ``\\ud800``, ``\\u202e``); everything else, including non-ASCII letters, is kept.
"""

from __future__ import annotations

import sys
from typing import TextIO

from conveyor.core.text import printable

#: Escape one value for the terminal (``conveyor.core.text.printable``: the same rule as log lines).
safe = printable


def say(text: str = "", *, file: TextIO | None = None, end: str = "\n",
        flush: bool = False) -> None:
    """Print multi-line ``text`` with everything but its newlines escaped (stdout default)."""
    print(safe(text, keep_newlines=True), file=file or sys.stdout, end=end, flush=flush)
