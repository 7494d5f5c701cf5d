"""How a backend's storage hands a protocol member to the part that holds its code.

Every backend is a thin ``XStorage`` over parts that are siblings, not bases: the inspector,
the schedules, the outbox, each given the shared state (a connection holder, the Redis
context) when it is made. ``XStorage`` names each member it does not write itself with
``delegate``::

    class SqliteStorage:
        queues = delegate("_inspector", SqliteInspector.queues)

        def __init__(self, ...) -> None:
            self._inspector = SqliteInspector(db, clock, wakeup)

``store.queues`` is then ``store._inspector.queues``, the part's own bound method: its
signature, as the type checker sees it, is the part's (a storage whose part drifts from the
protocol fails ``mypy``), and the first look-up keeps the bound method in the instance, so a
call costs what a call of the storage's own method costs. ``tests/meta/test_backend_shape.py``
reads these to check that each member's code is in the file docs/internals/backends.md names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

__all__ = ["Delegate", "delegate"]

P = ParamSpec("P")
R = TypeVar("R")
D = TypeVar("D", bound="Delegate[Any, Any]")


class Delegate(Generic[P, R]):
    """A storage's member whose code is ``method`` of the part held in attribute ``part``."""

    def __init__(self, part: str, method: Callable[Concatenate[Any, P], R]) -> None:
        self.part = part
        self.method = method
        self.name = method.__name__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self: D, obj: None, owner: type | None = None) -> D: ...

    @overload
    def __get__(self, obj: object, owner: type | None = None) -> Callable[P, R]: ...

    def __get__(self, obj: object | None, owner: type | None = None) -> Any:
        if obj is None:
            return self
        bound = getattr(getattr(obj, self.part), self.method.__name__)
        # Kept in the instance, which a non-data descriptor never shadows: every later
        # look-up is a dict hit, as for any method.
        vars(obj)[self.name] = bound
        return bound


def delegate(part: str, method: Callable[Concatenate[Any, P], R]) -> Delegate[P, R]:
    """The member of a storage that calls ``method`` on its part ``part`` (an attribute
    name): see the module docstring."""
    return Delegate(part, method)
