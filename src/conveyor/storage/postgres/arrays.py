"""Array arguments of the server-side functions, written as PostgreSQL array literals.

psycopg's list dumpers look for each list's element type in Python, element by element, and
dump every element on its own: for the 18 arrays of an enqueue or an ack that was more client
CPU than everything else the call does. The literal is one ``str`` the server reads with its
array parser, since each placeholder is cast (``%s::text[]``).

Text elements are always quoted, so no value is mistaken for ``NULL`` or split on a comma;
inside the quotes only ``\\`` and ``"`` need a backslash. Text holding U+0000 is refused by
psycopg as before (conveyor escapes such text first: ``text.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

Encoder = Callable[[Iterable[Any]], str]


def texts(values: Iterable[str | None]) -> str:
    """A ``text[]`` literal."""
    return "{" + ",".join(
        "NULL" if v is None else '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        for v in values) + "}"


def floats(values: Iterable[float | None]) -> str:
    """A ``float8[]`` literal (``repr`` reads back as the same double)."""
    return "{" + ",".join("NULL" if v is None else repr(float(v)) for v in values) + "}"


def ints(values: Iterable[int | None]) -> str:
    """An ``int4[]`` literal."""
    return "{" + ",".join("NULL" if v is None else str(int(v)) for v in values) + "}"


def bools(values: Iterable[bool | None]) -> str:
    """A ``bool[]`` literal."""
    return "{" + ",".join("NULL" if v is None else "t" if v else "f" for v in values) + "}"


def columns(rows: Sequence[Sequence[Any]], encoders: Sequence[Encoder]) -> list[str]:
    """One literal per column of ``rows`` (all of one length), each by its encoder."""
    return [encode(column) for encode, column in
            zip(encoders, zip(*rows, strict=True) if rows else [()] * len(encoders),
                strict=True)]
