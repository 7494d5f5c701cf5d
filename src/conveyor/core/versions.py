"""Job versions (docs/durable.md, "Safe deploys"): which stored jobs the code of a job type
can run, and how their stored arguments are migrated. Plain rules, no I/O: the worker
applies them at lease time, ``conveyor check-compat`` before a deploy.

A job type that declares ``version=V`` stamps every job it enqueues with ``V`` (its meta,
``VERSION_META``); a durable job also records the version of the worker that made its first
durable call (the reserved step ``VERSION_STEP``), since its recorded steps were made by that
code and a replay runs against them. A job stored with no stamp counts as ``UNVERSIONED``
(version 1): the code before anyone numbered it.

A worker of version ``V`` accepting ``A`` (``accepts=``, always holding ``V``) runs a job when

- it has no recorded start, and the version that enqueued it is in ``A`` or has a chain of
  upcasters to ``V`` (its arguments are migrated on the way in), or
- it was started (durably) by a version in ``A``: upcasters migrate arguments, never a
  recorded history, so only a declared acceptance lets a worker replay another version's steps.

A type that declares no version runs every job, as before versions existed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

__all__ = ["UNVERSIONED", "VERSION_META", "VERSION_STEP", "Upcaster", "accepted", "chain",
           "enqueued_version", "stamped", "started_version", "verdict"]

#: The meta entry of a job's enqueuing version.
VERSION_META = "conveyor.version"
#: The reserved step record of a durable job's starting version (``@`` is no step name's).
VERSION_STEP = "@version"
#: The version of a job stored with no stamp.
UNVERSIONED = 1

#: Migrates a job's stored ``(args, kwargs)`` from one version to the next.
Upcaster = Callable[[list[Any], dict[str, Any]], tuple[Sequence[Any], Mapping[str, Any]]]


def accepted(version: int | None, accepts: int | Iterable[int] | None) -> frozenset[int] | None:
    """The versions a type runs (its own always among them), checked at declaration:
    ``ValueError`` for a version that is not an int >= 1 or ``accepts`` without a version."""
    if version is None:
        if accepts is not None:
            raise ValueError("accepts= needs version= (the version of this code)")
        return None
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"version must be an int >= 1, not {version!r}")
    given = [accepts] if isinstance(accepts, int) else list(accepts or ())
    for v in given:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"accepts= holds versions (ints >= 1), not {v!r}")
    return frozenset((version, *given))


def stamped(meta: Mapping[str, Any] | None, version: int | None) -> dict[str, Any]:
    """``meta`` with the enqueuing ``version`` (as it is when None)."""
    out = dict(meta or {})
    if version is not None:
        out[VERSION_META] = version
    return out


def enqueued_version(meta: Mapping[str, Any] | None) -> int:
    """The version that enqueued a job (``UNVERSIONED`` without a readable stamp)."""
    value = (meta or {}).get(VERSION_META)
    return value if isinstance(value, int) and not isinstance(value, bool) else UNVERSIONED


def started_version(result: str | None) -> int | None:
    """The version a ``VERSION_STEP`` record holds (its JSON text), None when unreadable."""
    try:
        value = int(result) if result is not None else None
    except ValueError:
        return None
    return value


def chain(upcasters: Mapping[int, Upcaster], start: int, target: int) -> list[Upcaster] | None:
    """The upcasters taking arguments of version ``start`` to ``target`` in order (empty when
    equal), None when a link is missing or ``start`` is newer."""
    if start > target:
        return None
    links = [upcasters.get(v) for v in range(start, target)]
    return None if any(f is None for f in links) else [f for f in links if f is not None]


def verdict(version: int, accepts: frozenset[int], upcasters: Mapping[int, Upcaster],
            enqueued: int, started: int | None) -> str | None:
    """Why code of ``version`` accepting ``accepts`` cannot run a job enqueued by version
    ``enqueued`` and durably started by ``started`` (None: never started); None when it can."""
    if started is not None:
        if started in accepts:
            return None
        return (f"started at version {started}: its recorded steps are that code's, and this "
                f"code (version {version}) accepts {_shown(accepts)}")
    if enqueued in accepts or chain(upcasters, enqueued, version) is not None:
        return None
    return (f"enqueued at version {enqueued}: this code (version {version}) accepts "
            f"{_shown(accepts)} and has no upcaster chain from it")


def _shown(accepts: frozenset[int]) -> str:
    return ", ".join(str(v) for v in sorted(accepts))
