"""A workflow's graph as inline SVG: its nodes in layers by depth, each coloured by its state.

Drawn on the server (no script, CSP-safe: classes, no inline style) and swapped live by the
page's refresh like any other live region. A node box links to the job's page (its event
log). Large graphs are summarised so they stay readable:

- a layer holding more than ``WIDE_LAYER`` nodes shows one box per step name, with the count
  and a bar of its members' states (a fan-out of 1,000 is one box);
- a graph of more than ``BY_NAME`` nodes shows one box per step name overall, placed at the
  first layer it appears in (a chain of 1,000 steps is a few boxes, not 1,000 columns).
"""

from __future__ import annotations

from collections import Counter, defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from conveyor.job import JobState
from conveyor.storage.records import GraphNode
from conveyor.web.render import BAR_ORDER, e

__all__ = ["BY_NAME", "WIDE_LAYER", "Box", "layout", "svg"]

WIDE_LAYER = 24  # nodes in one layer past which its nodes are shown per step name
BY_NAME = 300  # nodes past which the whole graph is shown per step name
W, H, GAP_X, GAP_Y, PAD = 190, 40, 60, 12, 10


@dataclass(slots=True)
class Box:
    """One drawn box: a node, or the nodes of one step name (``count`` > 1)."""

    key: str
    label: str
    layer: int
    counts: Counter[str] = field(default_factory=Counter)
    node_id: str | None = None  # the job a single-node box links to
    row: int = 0

    @property
    def count(self) -> int:
        """How many nodes the box stands for."""
        return sum(self.counts.values())

    @property
    def state(self) -> str:
        """The state its colour shows: its node's, or the least advanced of its members'."""
        order = [s.value for s in reversed(BAR_ORDER)]
        return next((s for s in order if self.counts.get(s)), JobState.PENDING.value)


def depths(nodes: Sequence[GraphNode]) -> dict[str, int]:
    """Each node's layer: 0 without parents (among ``nodes``), else one past its deepest
    parent (Kahn's order, so a chain of any length needs no recursion)."""
    known = {n.id for n in nodes}
    parents = {n.id: [p for p in n.parents if p in known] for n in nodes}
    children: dict[str, list[str]] = defaultdict(list)
    for node_id, ps in parents.items():
        for p in ps:
            children[p].append(node_id)
    left = {i: len(ps) for i, ps in parents.items()}
    depth = dict.fromkeys(known, 0)
    ready = deque(i for i, n in left.items() if n == 0)
    while ready:
        node_id = ready.popleft()
        for child in children[node_id]:
            depth[child] = max(depth[child], depth[node_id] + 1)
            left[child] -= 1
            if left[child] == 0:
                ready.append(child)
    return depth


def layout(nodes: Sequence[GraphNode]) -> tuple[list[Box], set[tuple[str, str]]]:
    """The boxes (with their layer and row) and the edges between boxes, by box key."""
    depth = depths(nodes)
    by_name = len(nodes) > BY_NAME
    sizes = Counter(depth.values())
    boxes: dict[str, Box] = {}
    owner: dict[str, str] = {}
    for node in sorted(nodes, key=lambda n: (depth[n.id], n.id)):
        layer = depth[node.id]
        if by_name:
            key = f"name:{node.name}"
        elif sizes[layer] > WIDE_LAYER:
            key = f"layer:{layer}:{node.name}"
        else:
            key = f"node:{node.id}"
        box = boxes.get(key)
        if box is None:
            box = boxes[key] = Box(key, node.name, layer,
                                   node_id=node.id if key.startswith("node:") else None)
        box.counts[node.state.value] += 1
        owner[node.id] = key
    rows: Counter[int] = Counter()
    for box in boxes.values():
        box.row = rows[box.layer]
        rows[box.layer] += 1
    edges = {(owner[p], owner[n.id]) for n in nodes for p in n.parents
             if p in owner and owner[p] != owner[n.id]}
    return list(boxes.values()), edges


def svg(nodes: Sequence[GraphNode]) -> str:
    """The graph as an ``<svg>`` element (empty text when there is no node)."""
    if not nodes:
        return ""
    boxes, edges = layout(nodes)
    at = {b.key: (PAD + b.layer * (W + GAP_X), PAD + b.row * (H + GAP_Y)) for b in boxes}
    width = PAD * 2 + (max(b.layer for b in boxes) + 1) * (W + GAP_X) - GAP_X
    height = PAD * 2 + (max(b.row for b in boxes) + 1) * (H + GAP_Y) - GAP_Y
    lines = []
    for src, dst in sorted(edges):
        (sx, sy), (dx, dy) = at[src], at[dst]
        x1, y1, x2, y2 = sx + W, sy + H / 2, dx, dy + H / 2
        mid = (x1 + x2) / 2
        lines.append(f'<path class="edge" d="M{x1},{y1} C{mid},{y1} {mid},{y2} {x2},{y2}"/>')
    return (f'<svg class="graph" viewBox="0 0 {width} {height}" width="{width}" '
            f'height="{height}" role="img" aria-label="workflow graph">'
            + "".join(lines) + "".join(_box(b, *at[b.key]) for b in boxes) + "</svg>")


def _box(box: Box, x: float, y: float) -> str:
    summary = ", ".join(f"{n} {s}" for s, n in sorted(box.counts.items()))
    if box.node_id is not None:
        title = f"{box.label} {box.node_id}: {box.state}"
        label = f"{box.label}"
    else:
        title = f"{box.label} ×{box.count}: {summary}"
        label = f"{box.label} ×{box.count}"
    shown = label if len(label) <= 26 else label[:25] + "…"
    body = (f'<g class="node s-{e(box.state)}" data-state="{e(box.state)}" '
            f'data-key="{e(box.key)}"><title>{e(title)}</title>'
            f'<rect class="box" x="{x}" y="{y}" width="{W}" height="{H}" rx="6"/>'
            f'<rect class="f-{e(box.state)}" x="{x}" y="{y}" width="5" height="{H}"/>'
            f'<text x="{x + 12}" y="{y + 17}">{e(shown)}</text>'
            + _bar(box, x, y) + "</g>")
    if box.node_id is None:
        return body
    return f'<a href="/jobs/{e(box.node_id)}">{body}</a>'


def _bar(box: Box, x: float, y: float) -> str:
    """Under the label: the node's state, or a bar of its members' states."""
    if box.node_id is not None:
        return (f'<text class="sub" x="{x + 12}" y="{y + 32}">{e(box.state)} · '
                f'…{e(box.node_id[-6:])}</text>')
    total, left, parts = box.count, x + 12.0, []
    for state in BAR_ORDER:
        n = box.counts.get(state.value, 0)
        if n:
            w = (W - 20) * n / total
            parts.append(f'<rect class="f-{state.value}" x="{left:.1f}" y="{y + 25}" '
                         f'width="{w:.1f}" height="8"/>')
            left += w
    return "".join(parts)
