"""The Lua transitions: assembled from ``lua/`` once, run by SHA, reloaded on NOSCRIPT.

Layout of ``lua/`` (docs/internals/redis-lua.md):

* ``<name>.lua`` is one script, one transition on one slot (``dequeue.lua``, ``ack.lua``...);
  ``_<concern>.lua`` is a library (``_record.lua`` reads and writes a state entry,
  ``_flow.lua`` flow control...). Redis runs only what this module assembles.
* A file's header says what it uses, one directive per line:

  - ``--- @include "_record"``: a library, spliced in at that line. Its own includes come
    first, and a library is included at most once per script.
  - ``--- @key pending  list``: the script's next KEYS entry, named after the field of the
    Python key holder the caller passes (``keys.QueueKeys`` for most scripts, see
    ``HOLDERS``). It is bound as ``local K_PENDING = KEYS[i]`` before anything else, so a
    script never spells ``KEYS[i]`` itself, and ``run`` builds the KEYS list from the holder.
  - ``--- @needs-keys meta parked``: in a library, the keys it reads as ``K_*`` upvalues;
    every script including it must declare them.

  ``-- ARGV:`` and ``-- Returns:`` comment lines document the rest (ARGV[1] is always the
  storage clock's "now", or '' for the server's ``TIME``: ``_clock.lua``).
* The positions of a state line's fields, ``F_<NAME>`` in ``_fields.lua``, must equal
  ``codec.STATE_FIELDS``.

Every rule above is checked when the scripts are assembled (at import): a mistake fails the
import, never a call. Each assembled line remembers the file and line it came from, so a
Redis error naming ``user_script:LINE`` is re-raised naming ``lua/<file>.lua:<line>``.
"""

from __future__ import annotations

import hashlib
import operator
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from functools import lru_cache
from importlib import resources
from typing import Any

import redis
from conveyor.storage.redis import codec
from conveyor.storage.redis.connection import Link
from conveyor.storage.redis.constants import inline_constants
from conveyor.storage.redis.keys import (
    BatchKeys,
    DoorbellKeys,
    EventKeys,
    QueueKeys,
    ScheduleKeys,
)

# Each script, and the key holder its caller passes.
HOLDERS: dict[str, type] = {
    "enqueue": QueueKeys, "dequeue": QueueKeys, "ack": QueueKeys, "log": QueueKeys,
    "extend": QueueKeys, "promote": QueueKeys, "reclaim": QueueKeys, "cancel": QueueKeys,
    "requeue": QueueKeys, "kill": QueueKeys, "delete": QueueKeys, "trim": QueueKeys,
    "repair": QueueKeys, "release": QueueKeys, "batch": BatchKeys, "ring": DoorbellKeys,
    "publish": QueueKeys, "start": QueueKeys, "bury": QueueKeys, "graph": BatchKeys,
    "node": QueueKeys, "gather": QueueKeys, "heads": QueueKeys, "schedule": ScheduleKeys,
    "enqueue_one": QueueKeys,  # one plain job: the one-by-one enqueue (enqueue_one.lua)
    "reseal": QueueKeys,  # job data sealed again with the newest key (conveyor jobs reencrypt)
    # durable jobs (docs/durable.md, redis/durable.py)
    "steps": QueueKeys, "receive": QueueKeys, "deliver": QueueKeys, "kept": EventKeys,
    "breaker": QueueKeys,  # a breaker closed by hand (redis/breakers.py)
}
SCRIPT_NAMES = tuple(HOLDERS)
# The writes a ``wait_replicas`` URL makes wait for replicas: new jobs, outcomes, and the
# batch counters an outcome moves (applied before the outcome itself).
DURABLE = frozenset({"enqueue", "enqueue_one", "ack", "batch", "graph", "node", "steps",
                     "receive", "deliver", "kept"})

INCLUDE = re.compile(r'^--- @include "(_[a-z_]+)"\s*$')
KEY = re.compile(r"^--- @key ([a-z_]+)\b")
NEEDS = re.compile(r"^--- @needs-keys((?: [a-z_]+)+)\s*$")
DIRECTIVE = re.compile(r"^--- @")
FIELD = re.compile(r"^local F_([A-Z_]+) = (\d+)\b", re.M)
NFIELDS = re.compile(r"^local NFIELDS = (\d+)\b", re.M)
ERROR_LINE = re.compile(r"user_script:(\d+)")


class ScriptLayoutError(ValueError):
    """A Lua file breaks a rule of the layout (an include, a key, the field table)."""


@lru_cache(maxsize=64)  # each library is read once, not once per script including it
def script_text(name: str) -> str:
    """The raw text of ``lua/<name>.lua`` as shipped."""
    return resources.files("conveyor.storage.redis").joinpath(f"lua/{name}.lua").read_text()


@dataclass(frozen=True, slots=True)
class Script:
    """One script as sent to Redis, with where each of its lines came from."""

    name: str
    source: str
    sha: str
    holder: type
    keys: tuple[str, ...]  # KEYS names, in order
    origins: tuple[tuple[str, int], ...]  # (file, line) of each line of ``source``
    # attrgetter reads the fields in C: a third of a list comprehension's cost per call
    pick: Callable[[object], tuple[str, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        pick: Callable[[object], tuple[str, ...]] = operator.attrgetter(*self.keys)
        if len(self.keys) < 2:  # attrgetter of one name returns the value, of none fails
            pick = lambda holder: tuple(getattr(holder, key) for key in self.keys)  # noqa: E731
        object.__setattr__(self, "pick", pick)

    def key_list(self, holder: object) -> tuple[str, ...]:
        """KEYS for a call: the declared fields of ``holder``, in order."""
        if not isinstance(holder, self.holder):
            raise TypeError(f"{self.name}.lua takes its keys from a {self.holder.__name__}, "
                            f"not {type(holder).__name__}")
        return self.pick(holder)

    def where(self, line: int) -> str:
        """``lua/<file>.lua:<line>`` for a line number of the assembled source."""
        if not 1 <= line <= len(self.origins):
            return f"{self.name}.lua (assembled line {line})"
        file, number = self.origins[line - 1]
        return f"lua/{file}.lua:{number}"

    def located(self, exc: redis.ResponseError) -> redis.ResponseError:
        """``exc`` with each ``user_script:LINE`` replaced by the file and line it names."""
        text = str(exc)
        if not ERROR_LINE.search(text):
            return exc
        text = ERROR_LINE.sub(lambda m: self.where(int(m[1])), text)
        return type(exc)(f"{text} [running {self.name}.lua]")


def assemble(name: str, read: Any = script_text, holder: type | None = None) -> Script:
    """Resolve a script's includes and keys into the source Redis runs; raises
    ``ScriptLayoutError`` for a missing or misplaced directive or an unknown key."""
    holder = holder or HOLDERS[name]
    text = read(name)
    keys: list[str] = []
    key_lines: list[int] = []
    for number, line in enumerate(text.split("\n"), 1):
        match = KEY.match(line)
        if match:
            keys.append(match[1])
            key_lines.append(number)
    known = {f.name for f in fields(holder)}
    for key in keys:
        if key not in known:
            raise ScriptLayoutError(f"{name}.lua declares key {key!r}, which "
                                    f"{holder.__name__} does not have")
    if len(set(keys)) != len(keys):
        raise ScriptLayoutError(f"{name}.lua declares a key twice: {keys}")
    out: list[str] = [f"local K_{key.upper()} = KEYS[{i}]" for i, key in enumerate(keys, 1)]
    origins: list[tuple[str, int]] = [(name, number) for number in key_lines]
    included: set[str] = set()

    def splice(file: str, body: str, chain: tuple[str, ...]) -> None:
        for number, line in enumerate(body.split("\n"), 1):
            out.append(line)
            origins.append((file, number))
            include, needs = INCLUDE.match(line), NEEDS.match(line)
            if include:
                lib = include[1]
                if lib in chain:
                    raise ScriptLayoutError(f"{file}.lua includes {lib} in a cycle: {chain}")
                if lib not in included:
                    included.add(lib)
                    try:
                        body = read(lib)
                    except (OSError, KeyError):
                        raise ScriptLayoutError(f"{file}.lua:{number} includes {lib}, which "
                                                "does not exist") from None
                    splice(lib, body, (*chain, lib))
            elif needs:
                missing = [k for k in needs[1].split() if k not in keys]
                if missing:
                    raise ScriptLayoutError(f"{name}.lua includes {file}.lua, which needs "
                                            f"the keys {missing} it does not declare")
            elif KEY.match(line) and file != name:
                raise ScriptLayoutError(f"{file}.lua is a library: it cannot declare keys")
            elif DIRECTIVE.match(line) and not KEY.match(line):
                raise ScriptLayoutError(f"{file}.lua:{number}: unknown directive {line!r}")

    splice(name, text, (name,))
    source = inline_constants("\n".join(out))
    return Script(name=name, source=source, sha=hashlib.sha1(source.encode()).hexdigest(),
                  holder=holder, keys=tuple(keys), origins=tuple(origins))


def check_fields(text: str) -> None:
    """``_fields.lua`` must spell ``codec.STATE_FIELDS``: F_<NAME> = its position."""
    found = [(name, int(pos)) for name, pos in FIELD.findall(text)]
    want = [(name.upper(), i) for i, name in enumerate(codec.STATE_FIELDS, 1)]
    if found != want:
        raise ScriptLayoutError(f"_fields.lua does not match codec.STATE_FIELDS: {found} "
                                f"!= {want}")
    count = NFIELDS.search(text)
    if count is None or int(count[1]) != len(want):
        raise ScriptLayoutError(f"_fields.lua's NFIELDS is not {len(want)}")


def load_all() -> dict[str, Script]:
    """Every script, assembled and checked."""
    check_fields(script_text("_fields"))
    return {name: assemble(name) for name in SCRIPT_NAMES}


class Assembled(Mapping[str, Script]):
    """Every script by name, each assembled when first asked for.

    Assembling all of them (splicing, then ``inline_constants``' scans of each whole chunk)
    took 0.86 s of every process that opened a Redis store — each CLI command, web process
    and client — where a client that only enqueues runs one or two scripts. The layout of
    ``_fields.lua`` is checked before the first script is assembled."""

    def __init__(self) -> None:
        self._done: dict[str, Script] = {}
        self._lock = threading.Lock()

    def __getitem__(self, name: str) -> Script:
        script = self._done.get(name)
        if script is not None:
            return script
        if name not in HOLDERS:
            raise KeyError(name)
        with self._lock:
            if not self._done:
                check_fields(script_text("_fields"))
            script = self._done.get(name) or assemble(name)
            self._done[name] = script
        return script

    def __iter__(self) -> Iterator[str]:
        return iter(SCRIPT_NAMES)

    def __len__(self) -> int:
        return len(SCRIPT_NAMES)


SCRIPTS = Assembled()


class Scripts:
    """Runs scripts by SHA; a server that lost its script cache (restart, ``SCRIPT FLUSH``)
    answers NOSCRIPT, and the script is sent again with EVAL, which caches it anew."""

    def __init__(self, link: Link) -> None:
        self.link = link
        self.scripts: Mapping[str, Script] = SCRIPTS

    def keys(self, name: str, holder: object) -> list[str]:
        """The KEYS of a call of script ``name``, taken from ``holder`` by the names its
        header declares."""
        return list(self.scripts[name].key_list(holder))

    def command(self, name: str, holder: object, args: list[Any]) -> tuple[Any, ...]:
        """The ``EVALSHA`` command of a call of script ``name``, for sending it by hand."""
        script = self.scripts[name]
        keys = script.key_list(holder)
        return ("EVALSHA", script.sha, len(keys), *keys, *args)

    def once(self, name: str, holder: object, args: list[Any]) -> Any:
        """Run a script with one attempt (the caller decides whether a retry is safe)."""
        script = self.scripts[name]
        keys = script.key_list(holder)
        send = self.link.raw
        if self.link.settings.wait_replicas and name in DURABLE:
            send = self.link.raw_durable
        try:
            try:
                return send("EVALSHA", script.sha, len(keys), *keys, *args)
            except redis.exceptions.NoScriptError:
                # A server that lost its script cache: a restart, SCRIPT FLUSH, or a replica
                # promoted by a failover (a replica never caches the primary's scripts).
                return send("EVAL", script.source, len(keys), *keys, *args)
        except redis.ResponseError as exc:
            located = script.located(exc)
            if located is exc:
                raise
            raise located from None

    def run(self, name: str, holder: object, args: list[Any], patience: float = 5.0) -> Any:
        """Run a script, retrying through short outages (every script is safe to re-run:
        enqueue by id, acks by token, batch updates by job state)."""
        return self.link.retrying(lambda: self.once(name, holder, args), patience)
