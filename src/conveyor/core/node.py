"""A job's place in a workflow's graph (``JobSpec.node``; docs/workflows.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: What a workflow node does when a parent ends failed, dead or cancelled (docs/workflows.md).
PARENT_FAILURE_POLICIES = ("fail", "continue", "ignore", "skip")
#: How a node receives its parents' results (``Node.results``): not at all, as a list in the
#: order of its parents, or the one parent's result itself (a chain's step, Celery's way).
RESULT_MODES = ("", "list", "one")


@dataclass(frozen=True, slots=True)
class Node:
    """A job's place in its workflow's graph (``JobSpec.node``): the jobs it waits for, the
    jobs waiting for it, what a failed parent does to it (``policy``, one of
    ``PARENT_FAILURE_POLICIES``) and how its parents' results are passed to it as its first
    argument (``results``, one of ``RESULT_MODES``). The workflow is the job's batch.

    ``limit`` is the largest payload, in bytes, its parents' results may make of its
    arguments: the enqueuing client's ``max_payload`` (0: no limit), so a fan-in node is held
    to the size rule every enqueued job is (docs/workflows.md)."""

    parents: tuple[str, ...] = ()
    children: tuple[str, ...] = ()
    policy: str = "fail"
    results: str = ""
    limit: int = 0

    def to_wire(self) -> dict[str, Any]:
        """Compact dict form stored by backends."""
        wire: dict[str, Any] = {"p": list(self.parents), "c": list(self.children),
                                "f": self.policy, "r": self.results}
        if self.limit:
            wire["m"] = self.limit
        return wire

    @classmethod
    def from_wire(cls, raw: Mapping[str, Any]) -> Node:
        """Inverse of ``to_wire``."""
        mode = raw.get("r", "")
        results = "list" if mode is True else mode if mode in RESULT_MODES else ""
        limit = raw.get("m", 0)
        return cls(tuple(raw.get("p", ())), tuple(raw.get("c", ())), str(raw.get("f", "fail")),
                   results, limit if isinstance(limit, int) and limit > 0 else 0)
