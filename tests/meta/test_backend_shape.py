"""Every backend has the same shape (issues #16 and #52): a new engine has an obvious place for
everything, and a reader who knows one backend finds their way in the others.

The folders: each backend is a package with the files docs/internals/backends.md names. The classes:
SQLite's model for all four (issue 52) — a thin ``XStorage`` over parts that are siblings,
each made over the shared state (a connection holder, ``MemoryState``, ``RedisContext``), none
inheriting another to borrow its ``self``; every protocol member is defined on the class of
the file the design names for it, reached from the storage directly or through
``storage/delegate.py``, never inherited from a sibling mixin, never a stub. Before, Redis was
a ten-class chain whose ``release.py`` declared an ``unregister_worker`` only the last
subclass defined, and whose operator retry settled workflows only when mixed into the
storage (``graph.py`` overrode ``sync_batches``).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import FunctionType, ModuleType
from typing import Any, Protocol

import pytest

import conveyor.storage
from conveyor.storage.base import SendsBlocks, Storage
from conveyor.storage.delegate import Delegate
from conveyor.storage.inspector import Inspector
from conveyor.storage.outbox import Outbox

STORAGE = Path(conveyor.storage.__file__).parent
SHAPE = ("storage.py", "inspect.py", "batches.py", "flow.py", "schedules.py")

#: The deepest chain of conveyor's own classes a class of the storage package may sit on.
MAX_DEPTH = 1
#: conveyor classes that classes of the storage package may inherit, and why (a Protocol or a
#: library class, say ``sqlite3.Connection``, is always allowed: it lends no state of ours).
SHARED_BASES = {
    # redis-py pairs each connection class with its TLS twin (SentinelManagedSSLConnection);
    # the Sentinel primary's connection does the same, so a TLS one checks ROLE too.
    "conveyor.storage.redis.sentinel.PrimaryConnection": "its TLS twin",
}

SCHEDULES = ("schedule_ticked", "schedules", "schedule_changes")
#: The schedule members written once for every backend: ``ScheduleEdits``, a part each
#: storage makes over its schedules part (storage/schedule_edits.py).
EDITS = ("save_schedules", "schedule_pauses", "pause_schedule", "resume_schedule",
         "add_schedule", "change_schedule", "reset_schedule", "remove_schedule")
ASYNC = ("aenqueue", "aget_job", "afinished", "aclose")
UPKEEP = ("promote_due", "reclaim_expired", "release_worker", "cancel", "create_batch",
          "close_batch", "batch_finished", "trim")


def _members(protocol: type) -> set[str]:
    """The methods a protocol declares."""
    return {name for name, value in vars(protocol).items()
            if isinstance(value, FunctionType) and not name.startswith("_")}


PROTOCOL_METHODS = _members(Storage) | _members(Inspector) | _members(Outbox)


def _default_home(backend: str, member: str) -> str:
    """Where docs/internals/backends.md puts a member: its file, relative to ``storage/``."""
    if member in SCHEDULES:
        return f"{backend}/schedules.py"
    if member in EDITS:
        return "schedule_edits.py"
    if member in ("pause_queue", "resume_queue"):
        return f"{backend}/flow.py"
    if member in ("breakers", "close_breaker"):
        return f"{backend}/breakers.py"
    if member in _members(Outbox):
        return f"{backend}/outbox.py"
    if member in ASYNC:
        return f"{backend}/aio.py"
    if member in _members(Inspector) - _members(Storage):
        return f"{backend}/inspect.py"
    return f"{backend}/storage.py"


# Where a backend departs from the default, each file named in docs/internals/backends.md's table
# ("own parts"). "aio.py", "base.py" and "schedule_edits.py" alone are the parts every
# backend may share: ``ThreadedAsync`` (storage/aio.py), ``WaitsThenDequeues``
# (storage/base.py) and ``ScheduleEdits`` (storage/schedule_edits.py).
HOMES: dict[str, dict[str, str]] = {
    "memory": {"now": "memory/state.py", "wait_dequeue": "base.py",
               "gate_facts": "memory/gates.py",
               **dict.fromkeys(ASYNC, "aio.py")},
    "sqlite": {"wait_dequeue": "base.py", "gate_facts": "sqlite/gates.py",
               **dict.fromkeys(UPKEEP, "sqlite/upkeep.py"),
               **dict.fromkeys(ASYNC, "aio.py")},
    "postgres": {"now": "postgres/clock.py", "tidy": "postgres/vacuum.py",
                 "gate_facts": "postgres/gates.py",
                 "wait_dequeue": "base.py", **dict.fromkeys(UPKEEP, "postgres/upkeep.py")},
    "redis": {
        "now": "redis/context.py", "ack": "redis/acks.py", "gate_facts": "redis/gates.py",
        **dict.fromkeys(("dequeue", "wait", "wait_dequeue"), "redis/leases.py"),
        **dict.fromkeys(("enqueue", "enqueue_block", "prepare_block", "add_nodes"),
                        "redis/enqueue.py"),
        **dict.fromkeys(("create_batch", "close_batch"), "redis/batches.py"),
        **dict.fromkeys(("unregister_worker", "promote_due", "reclaim_expired",
                         "release_worker", "cancel", "trim"), "redis/upkeep.py"),
        **dict.fromkeys(("retry_jobs", "retry_refusals", "delete_jobs", "kill_jobs", "reseal"),
                        "redis/admin.py"),
        "aget_job": "aio.py",
    },
}


def backends() -> list[Path]:
    return sorted(p for p in STORAGE.iterdir() if (p / "__init__.py").is_file())


def _modules() -> Iterator[ModuleType]:
    """Every module of the storage package, backends included."""
    yield conveyor.storage
    for info in pkgutil.walk_packages(conveyor.storage.__path__, "conveyor.storage."):
        yield importlib.import_module(info.name)


def _classes() -> Iterator[type]:
    """Every class defined in the storage package."""
    for module in _modules():
        for value in vars(module).values():
            if inspect.isclass(value) and value.__module__ == module.__name__:
                yield value


CLASSES = list(_classes())


def _ours(base: type) -> bool:
    """A base that lends conveyor's own state or code (not a Protocol, not a library's)."""
    return base.__module__.startswith("conveyor.") and Protocol not in base.__bases__


def _depth(cls: type) -> int:
    return max((1 + _depth(b) for b in cls.__bases__ if _ours(b)), default=0)


def _storage_class(backend: str) -> type:
    module = importlib.import_module(f"conveyor.storage.{backend}.storage")
    (cls,) = [v for k, v in vars(module).items()
              if inspect.isclass(v) and v.__module__ == module.__name__ and k.endswith("Storage")]
    return cls


def _home(cls: type, member: str) -> tuple[str, str]:
    """Where ``cls``'s member is defined: (its file relative to storage/, the class)."""
    found = inspect.getattr_static(cls, member)
    function = found.method if isinstance(found, Delegate) else found
    if isinstance(found, Delegate):
        owner_name = function.__qualname__.split(".")[0]
        owner = vars(importlib.import_module(function.__module__))[owner_name]
    else:
        owner = next(c for c in cls.__mro__ if member in vars(c))
    if function.__name__ not in vars(owner) or not callable(function):
        return "", f"{owner.__qualname__} (inherited, or not a method)"
    path = Path(inspect.getfile(owner)).relative_to(STORAGE).as_posix()
    return path, owner.__qualname__


def test_there_are_backends_to_check() -> None:
    assert {p.name for p in backends()} >= {"memory", "sqlite", "redis", "postgres"}


def test_every_backend_has_the_same_folder_shape() -> None:
    missing = {p.name: [f for f in SHAPE if not (p / f).is_file()] for p in backends()}
    assert {name: files for name, files in missing.items() if files} == {}


def test_the_storage_package_has_classes_to_check() -> None:
    names = {c.__qualname__ for c in CLASSES}
    assert {"RedisStorage", "RedisGraph", "SqliteInspector", "MemoryState",
            "PostgresUpkeep"} <= names


def test_no_class_sits_on_a_chain_of_our_own_classes() -> None:
    """Depth: a part is a sibling made over shared state, not a subclass of another part."""
    deep = {f"{c.__module__}.{c.__qualname__}": _depth(c) for c in CLASSES
            if _depth(c) > MAX_DEPTH}
    assert deep == {}


def test_a_class_inherits_only_a_listed_shared_base() -> None:
    """Inheriting one of our classes borrows its ``self``: only the listed ones may be."""
    borrowed = {f"{c.__module__}.{c.__qualname__}": f"{b.__module__}.{b.__qualname__}"
                for c in CLASSES for b in c.__bases__
                if _ours(b) and f"{b.__module__}.{b.__qualname__}" not in SHARED_BASES}
    assert borrowed == {}


@pytest.mark.parametrize("backend", [
    "memory", "sqlite",
    "postgres",
    "redis",
])
def test_every_protocol_member_is_defined_where_the_design_says(backend: str) -> None:
    """Each member of ``Storage``, ``Inspector`` and ``Outbox`` (and ``SendsBlocks`` where a
    backend has it) is defined on a class of the file docs/internals/backends.md names for it: the
    storage's own method, or a part's reached through ``delegate`` — never inherited."""
    cls = _storage_class(backend)
    members = PROTOCOL_METHODS | (_members(SendsBlocks) & set(dir(cls)))
    homes = {m: HOMES[backend].get(m, _default_home(backend, m)) for m in members}
    found = {m: _home(cls, m)[0] for m in members}
    wrong = {m: (found[m], homes[m]) for m in sorted(members) if found[m] != homes[m]}
    assert wrong == {}, "member: (where it is, where the design puts it)"


@pytest.mark.parametrize("backend", ["memory", "sqlite", "postgres", "redis"])
def test_the_storage_delegates_to_its_own_parts(backend: str) -> None:
    """A ``delegate`` names an attribute the storage sets in ``__init__`` (a misspelt one
    would fail at the first call only) — read from the source, no server needed."""
    cls = _storage_class(backend)
    init = ast.parse(textwrap.dedent(inspect.getsource(cls.__init__)))
    assigned = {t.attr for node in ast.walk(init) if isinstance(node, ast.Assign)
                for t in node.targets if isinstance(t, ast.Attribute)}
    assigned |= {e.attr for node in ast.walk(init) if isinstance(node, ast.Assign)
                 for t in node.targets if isinstance(t, ast.Tuple)
                 for e in t.elts if isinstance(e, ast.Attribute)}
    parts = {d.part for d in vars(cls).values() if isinstance(d, Delegate)}
    assert parts and parts <= assigned


@pytest.mark.parametrize("backend", ["memory", "sqlite", "postgres", "redis"])
def test_the_durable_member_is_a_part_of_the_backends_durable_file(backend: str) -> None:
    """``Storage.durable`` / ``Inspector.durable`` (a ``DurableStore``, not a method) is a part
    like the others: the storage's ``__init__`` makes it, from the class of the backend's
    ``durable.py`` (docs/internals/backends.md), over the shared state."""
    cls = _storage_class(backend)
    init = ast.parse(textwrap.dedent(inspect.getsource(cls.__init__)))
    made = [node.value for node in ast.walk(init) if isinstance(node, ast.Assign)
            for t in node.targets if isinstance(t, ast.Attribute) and t.attr == "durable"
            and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name)]
    assert len(made) == 1, "self.durable = XDurable(...) once in __init__"
    (call,) = made
    # handed the storage itself, a part would borrow its ``self`` (what a mixin does)
    assert not [a for a in call.args if isinstance(a, ast.Name) and a.id == "self"]
    assert isinstance(call.func, ast.Name)
    part = vars(importlib.import_module(cls.__module__))[call.func.id]
    path = Path(inspect.getfile(part)).relative_to(STORAGE).as_posix()
    assert path == f"{backend}/durable.py"


def _annotated(cls: type) -> set[str]:
    return set(getattr(cls, "__annotations__", {}))


def test_no_class_declares_a_protocol_method_it_does_not_define() -> None:
    """"Declared, not defined" (``unregister_worker: Callable`` in a mixin that another class
    defines) is how a part borrowed its composer's ``self``."""
    protocols = {Storage, Inspector, Outbox, SendsBlocks}
    declared = {f"{c.__module__}.{c.__qualname__}": sorted(
                    (_annotated(c) & PROTOCOL_METHODS) - set(vars(c)))
                for c in CLASSES if c not in protocols and Protocol not in c.__bases__}
    assert {k: v for k, v in declared.items() if v} == {}


def _stubs(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Raise) and node.exc is not None:
            exc: Any = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(exc, ast.Name) and exc.id == "NotImplementedError":
                yield f"{path.relative_to(STORAGE)}:{node.lineno}"


def test_no_not_implemented_stub_in_storage() -> None:
    """A stub that raises ``NotImplementedError`` is a member a mixin waits for another
    class to define (PostgreSQL's schedules had one for ``now``)."""
    assert [s for path in sorted(STORAGE.rglob("*.py")) for s in _stubs(path)] == []
