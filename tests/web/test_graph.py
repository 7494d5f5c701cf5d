"""The workflow graph's layout (``web/graph.py``): layers by depth, summaries past the limits."""

from __future__ import annotations

from conveyor.core.job import JobState
from conveyor.storage.graph import GraphNode
from conveyor.web.graph import BY_NAME, WIDE_LAYER, depths, layout, svg


def _n(node_id: str, *parents: str, name: str = "step",
       state: JobState = JobState.PENDING) -> GraphNode:
    return GraphNode(node_id, name, state, parents)


def test_layers_follow_the_longest_path_from_a_root() -> None:
    nodes = [_n("d", "b", "c"), _n("c", "a"), _n("b", "c"), _n("a")]
    assert depths(nodes) == {"a": 0, "c": 1, "b": 2, "d": 3}


def test_a_parent_outside_the_nodes_read_is_ignored() -> None:
    assert depths([_n("b", "gone")]) == {"b": 0}


def test_a_wide_layer_is_one_box_per_step_name() -> None:
    fan = [_n(f"m{i:03d}", "root", name="resize",
              state=JobState.SUCCEEDED if i % 2 else JobState.ACTIVE)
           for i in range(WIDE_LAYER + 1)]
    boxes, edges = layout([_n("root"), *fan, _n("z", *(n.id for n in fan), name="album")])
    by_label = {b.label: b for b in boxes}
    assert by_label["resize"].count == WIDE_LAYER + 1 and by_label["resize"].node_id is None
    assert by_label["resize"].state == "active"  # the least advanced member's colour
    assert len(edges) == 2  # root -> resize ×25 -> album


def test_a_long_chain_is_summarised_by_step_name() -> None:
    chain = [_n("s0000", name="fetch")]
    for i in range(1, BY_NAME + 10):
        chain.append(_n(f"s{i:04d}", chain[-1].id, name="parse" if i % 2 else "store"))
    boxes, edges = layout(chain)
    assert sorted(b.label for b in boxes) == ["fetch", "parse", "store"]
    assert sum(b.count for b in boxes) == len(chain)
    assert ("name:parse", "name:store") in edges and ("name:store", "name:parse") in edges
    drawn = svg(chain)
    assert drawn.count("<g class=") == 3 and "parse ×" in drawn


def test_names_and_ids_are_escaped() -> None:
    drawn = svg([_n('x"><script>', name="<b>bold</b>")])
    assert "<script>" not in drawn and "<b>" not in drawn
    assert "&lt;b&gt;bold&lt;/b&gt;" in drawn
