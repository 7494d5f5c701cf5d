"""A workflow's graph as inline SVG: its nodes in layers by depth, each coloured by its state.

Drawn on the server (no script, CSP-safe: classes, no inline style) and swapped live by the
page's refresh like any other live region. A node box links to the job's page (its event
log) and shows what the node works on: its first argument, trimmed (every argument on hover).

Within a layer the boxes are ordered to keep edges short and uncrossed: the barycenter
heuristic of Sugiyama's layered drawing (each box placed at the mean row of its neighbours in
the layers before it, then after it, a few sweeps down and up, the order with the fewest
crossings kept), as Graphviz's ``dot`` and dagre order their ranks. Layers are centred on
one another, so a fan-out opens around its root.

Large graphs are summarised so they stay readable:

- a layer holding more than ``WIDE_LAYER`` nodes shows one box per step name, with the count
  and a bar of its members' states (a fan-out of 1,000 is one box);
- a graph of more than ``BY_NAME`` nodes shows one box per step name overall, placed at the
  first layer it appears in (a chain of 1,000 steps is a few boxes, not 1,000 columns).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from conveyor.core.job import JobState
from conveyor.storage.graph import GraphNode
from conveyor.web.render import BAR_ORDER, e

__all__ = ["BY_NAME", "WIDE_LAYER", "Box", "crossings", "layout", "relatives", "summary", "svg"]

WIDE_LAYER = 24  # nodes in one layer past which its nodes are shown per step name
BY_NAME = 300  # nodes past which the whole graph is shown per step name
W, H, GAP_X, GAP_Y, PAD = 190, 52, 60, 12, 10
SWEEPS = 4  # down-and-up barycenter sweeps; the ETL and fan-in shapes settle in one
# Edges past which crossings are not counted (pairs grow with the square): the sweeps run
# and the last order is kept. Past ``BY_NAME`` nodes there are only a few boxes anyway.
COUNTED_EDGES = 400
#: What a node works on, by node id: its positional and keyword arguments.
Args = Mapping[str, tuple[Sequence[Any], Mapping[str, Any]]]


@dataclass(slots=True)
class Box:
    """One drawn box: a node, or the nodes of one step name (``count`` > 1)."""

    key: str
    label: str
    layer: int
    counts: Counter[str] = field(default_factory=Counter)
    node_id: str | None = None  # the job a single-node box links to
    row: float = 0  # from the top, in box heights: layers are centred on one another
    summary: str = ""  # what a single node works on: its first argument, trimmed
    args: str = ""  # all its arguments, for the hover text

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


def relatives(nodes: Sequence[GraphNode], node_id: str,
              ) -> tuple[list[GraphNode], list[GraphNode]] | None:
    """A node's parents and children among ``nodes``, in id order; None when the node is not
    among them (a node past the nodes read)."""
    by_id = {n.id: n for n in nodes}
    node = by_id.get(node_id)
    if node is None:
        return None
    parents = sorted((by_id[p] for p in node.parents if p in by_id), key=lambda n: n.id)
    children = sorted((n for n in nodes if node_id in n.parents), key=lambda n: n.id)
    return parents, children


def summary(args: Sequence[Any], kwargs: Mapping[str, Any], width: int = 26) -> str:
    """What a node works on, in one short line: its first argument (a string as it is,
    anything else as compact JSON), else its first keyword argument, trimmed to ``width``."""
    if args:
        text = _text(args[0])
    elif kwargs:
        name, value = next(iter(kwargs.items()))
        text = f"{name}={_text(value)}"
    else:
        return ""
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _arguments(args: Sequence[Any], kwargs: Mapping[str, Any], width: int = 600) -> str:
    text = ", ".join([*(_text(a) for a in args), *(f"{k}={_text(v)}" for k, v in
                                                   kwargs.items())])
    return text if len(text) <= width else text[: width - 1] + "…"


def layout(nodes: Sequence[GraphNode], args: Args | None = None,
           ) -> tuple[list[Box], set[tuple[str, str]]]:
    """The boxes (with their layer and row, ordered within each layer by the barycenter
    heuristic) and the edges between boxes, by box key. ``args`` gives what each node works
    on, shown on single-node boxes."""
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
            if box.node_id is not None and args and node.id in args:
                box.summary = summary(*args[node.id])
                box.args = _arguments(*args[node.id])
        box.counts[node.state.value] += 1
        owner[node.id] = key
    edges = {(owner[p], owner[n.id]) for n in nodes for p in n.parents
             if p in owner and owner[p] != owner[n.id]}
    _order(boxes, edges)
    return list(boxes.values()), edges


def _order(boxes: dict[str, Box], edges: set[tuple[str, str]]) -> None:
    """Set each box's row: layers in id order first, then barycenter sweeps down (by the
    rows of a box's parents) and up (of its children), keeping the order with the fewest
    crossings. A box with no neighbour on the side swept keeps its place."""
    layers: dict[int, list[Box]] = defaultdict(list)
    for box in boxes.values():  # in (layer, id) order
        layers[box.layer].append(box)
    parents: dict[str, list[str]] = defaultdict(list)
    children: dict[str, list[str]] = defaultdict(list)
    for src, dst in edges:
        parents[dst].append(src)
        children[src].append(dst)
    tallest = max((len(layer) for layer in layers.values()), default=0)

    def place() -> None:
        for layer in layers.values():  # centred: a layer of 2 sits beside rows 9-10 of 20
            offset = (tallest - len(layer)) / 2
            for i, box in enumerate(layer):
                box.row = i + offset

    def sweep(order: list[int], neighbours: dict[str, list[str]]) -> None:
        for number in order:
            layer = layers[number]
            at = {b.key: b.row for b in layer}
            wanted = {b.key: _mean([boxes[n].row for n in neighbours[b.key]], at[b.key])
                      for b in layer}
            layer.sort(key=lambda b: wanted[b.key])  # stable: ties keep their order
            place()

    def count() -> int:
        return crossings(list(boxes.values()), edges) if len(edges) <= COUNTED_EDGES else -1

    place()
    best = (count(), {k: b.row for k, b in boxes.items()})
    numbers = sorted(layers)
    for _ in range(SWEEPS):
        if best[0] == 0:
            break
        sweep(numbers[1:], parents)
        sweep(numbers[-2::-1], children)
        found = count()
        if found < best[0] or found < 0:
            best = (found, {k: b.row for k, b in boxes.items()})
    for key, row in best[1].items():
        boxes[key].row = row


def _mean(values: list[float], default: float) -> float:
    return sum(values) / len(values) if values else default


def crossings(boxes: Sequence[Box], edges: set[tuple[str, str]]) -> int:
    """How many pairs of edges cross, drawn as ``svg`` draws them: two edges spanning the
    same layers cross when their ends swap order; others when their straight segments
    intersect (a close bound for the drawn curves)."""
    at = {b.key: (b.layer, b.row) for b in boxes}
    lines = sorted((at[s], at[d]) for s, d in edges if s in at and d in at)
    count = 0
    for i, ((l1, r1), (l2, r2)) in enumerate(lines):
        for (m1, q1), (m2, q2) in lines[i + 1:]:
            if (l1, l2) == (m1, m2):
                count += (r1 - q1) * (r2 - q2) < 0
            elif max(l1, m1) < min(l2, m2) and _cross((l1, r1, l2, r2), (m1, q1, m2, q2)):
                count += 1
    return count


def _cross(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    """Whether two segments (x1, y1, x2, y2) cross strictly inside both x ranges."""
    lo, hi = max(a[0], b[0]), min(a[2], b[2])

    def y(seg: tuple[float, float, float, float], x: float) -> float:
        return seg[1] + (seg[3] - seg[1]) * (x - seg[0]) / (seg[2] - seg[0])

    start, end = y(a, lo) - y(b, lo), y(a, hi) - y(b, hi)
    return start * end < 0


def svg(nodes: Sequence[GraphNode], args: Args | None = None) -> str:
    """The graph as an ``<svg>`` element (empty text when there is no node); ``args`` gives
    what each node works on (its box shows the first argument)."""
    if not nodes:
        return ""
    boxes, edges = layout(nodes, args)
    at = {b.key: (PAD + b.layer * (W + GAP_X), PAD + b.row * (H + GAP_Y)) for b in boxes}
    width = PAD * 2 + (max(b.layer for b in boxes) + 1) * (W + GAP_X) - GAP_X
    height = PAD * 2 + (max(b.row for b in boxes) + 1) * (H + GAP_Y) - GAP_Y
    lines = []
    for src, dst in sorted(edges):
        (sx, sy), (dx, dy) = at[src], at[dst]
        x1, y1, x2, y2 = sx + W, sy + H / 2, dx, dy + H / 2
        mid = (x1 + x2) / 2
        lines.append(f'<path class="edge" d="M{x1:g},{y1:g} C{mid:g},{y1:g} {mid:g},{y2:g} '
                     f'{x2:g},{y2:g}" data-from="{e(src)}" data-to="{e(dst)}"/>')
    return (f'<svg class="graph" viewBox="0 0 {width:g} {height:g}" width="{width:g}" '
            f'height="{height:g}" role="img" aria-label="workflow graph">'
            + "".join(lines) + "".join(_box(b, *at[b.key]) for b in boxes) + "</svg>")


def _box(box: Box, x: float, y: float) -> str:
    counted = ", ".join(f"{n} {s}" for s, n in sorted(box.counts.items()))
    if box.node_id is not None:
        title = f"{box.label} {box.node_id}: {box.state}"
        if box.args:
            title += f"\n({box.args})"
        label = f"{box.label}"
    else:
        title = f"{box.label} ×{box.count}: {counted}"
        label = f"{box.label} ×{box.count}"
    shown = label if len(label) <= 26 else label[:25] + "…"
    works_on = (f'<text class="arg" x="{x + 12:g}" y="{y + 31:g}">{e(box.summary)}</text>'
                if box.summary else "")
    body = (f'<g class="node s-{e(box.state)}" data-state="{e(box.state)}" '
            f'data-key="{e(box.key)}"><title>{e(title)}</title>'
            f'<rect class="box" x="{x:g}" y="{y:g}" width="{W}" height="{H}" rx="6"/>'
            f'<rect class="f-{e(box.state)}" x="{x:g}" y="{y:g}" width="5" height="{H}"/>'
            f'<text x="{x + 12:g}" y="{y + 16:g}">{e(shown)}</text>{works_on}'
            + _bar(box, x, y) + "</g>")
    if box.node_id is None:
        return body
    return f'<a href="/jobs/{e(box.node_id)}">{body}</a>'


def _bar(box: Box, x: float, y: float) -> str:
    """At the bottom: the node's state, or a bar of its members' states."""
    if box.node_id is not None:
        return (f'<text class="sub" x="{x + 12:g}" y="{y + 45:g}">{e(box.state)} · '
                f'…{e(box.node_id[-6:])}</text>')
    total, left, parts = box.count, x + 12.0, []
    for state in BAR_ORDER:
        n = box.counts.get(state.value, 0)
        if n:
            w = (W - 20) * n / total
            parts.append(f'<rect class="f-{state.value}" x="{left:.1f}" y="{y + 34:g}" '
                         f'width="{w:.1f}" height="8"/>')
            left += w
    return "".join(parts)
