"""Numeric constants of an assembled script written as their values where they are read.

Redis runs a script's whole chunk on every call (``EVALSHA``): each ``local function`` of
every spliced library is a new closure per call, and a closure pays for each local of the
chunk it captures as an upvalue (~25 ns in Redis 7's Lua 5.1, measured with
``benchmarks/server_cpu.py``'s hypotheses in the notes of issue 53). The state-line positions
``F_<NAME>`` of ``_fields.lua`` alone were hundreds of captures per call of ``dequeue.lua``
and ``ack.lua``. A constant read as a literal is captured by nothing.

Only what is certainly a constant is written so: a line ``local NAME = <digits>`` at the top
level of the chunk (NAME in upper case, the value a non-negative number and nothing else on
the line but a comment), NAME bound nowhere else (no other ``local``, parameter or loop
variable of that name) and never assigned. Its declaration stays, so the source still reads
as written; string literals and comments are left as they are, and a script with a long
bracket (``[[``) is left whole. Lines are neither added nor removed, so an error's line
still names the file and line it comes from.
"""

from __future__ import annotations

import re

__all__ = ["inline_constants"]

DECLARED = re.compile(r"^local ([A-Z][A-Z0-9_]*) = (\d+(?:\.\d+)?)\s*(?:--.*)?$", re.M)
STRING_OR_COMMENT = re.compile(r"""--[^\n]*|'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*\"""")


def _binds(name: str) -> re.Pattern[str]:
    """Where ``name`` is bound or assigned: a ``local`` list, a parameter list, a ``for``
    variable, or the left side of an assignment (a multiple one too)."""
    word = rf"(?<![\w.:]){name}\b"
    return re.compile(
        rf"\blocal\s+(?:function\s+)?(?:[\w\s,]*,\s*)?{name}\b"
        rf"|\bfunction\b[^(\n]*\([^)\n]*{word}"
        rf"|\bfor\s+(?:[\w\s,]*,\s*)?{name}\b"
        rf"|{word}\s*(?:,[^=\n]*)?=(?!=)")


def inline_constants(source: str) -> str:
    """``source`` with each certain numeric constant written as its value where it is read."""
    if "[[" in source or "[=" in source:
        return source
    code = STRING_OR_COMMENT.sub(lambda m: " " * len(m[0]), source)  # what is code, in place
    values: dict[str, str] = {}
    for match in DECLARED.finditer(code):
        name = match[1]
        if len(_binds(name).findall(code)) == 1:  # its own ``local`` alone
            values[name] = match[2]
    if not values:
        return source
    # not before a dot: ``21..x`` would read as a malformed number
    names = re.compile(r"(?<![\w.:])(" + "|".join(sorted(values, key=len, reverse=True))
                       + r")\b(?!\.)")
    out: list[str] = []
    for line, plain in zip(source.split("\n"), code.split("\n"), strict=True):
        if DECLARED.match(plain) or not names.search(plain):
            out.append(line)
            continue
        # replace in the code only: rebuild the line from the code with the strings and
        # comments of the original put back where the blanked copy has them
        pieces, pos = [], 0
        for lit in STRING_OR_COMMENT.finditer(line):
            pieces.append(names.sub(lambda m: values[m[1]], line[pos:lit.start()]))
            pieces.append(lit[0])
            pos = lit.end()
        pieces.append(names.sub(lambda m: values[m[1]], line[pos:]))
        out.append("".join(pieces))
    return "\n".join(out)
