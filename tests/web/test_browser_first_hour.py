"""What a new operator reads in the dashboard, in headless Chromium (issue 51, items 3, 5, 6):
the store each page reads, totals named for what they count, a workflow graph whose edges do
not cross, boxes that say what each node works on, and a node page linking its parents and
children. SQLite only, like ``test_browser.py``: the browser adds nothing backend-specific.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest

from conveyor import Conveyor
from conveyor.core.job import JobState
from conveyor.views.records import stats_view
from tests.web.conftest import Site, serve_site
from tests.web.test_browser import browser, page  # noqa: F401 - the shared Chromium fixtures

try:
    from playwright.sync_api import Page
except ImportError:  # pragma: no cover - test_browser's fixture skips then
    Page = Any  # type: ignore[misc,assignment]

PAIRS = 20


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    yield from serve_site(tmp_path, None)


def _etl(app: Conveyor) -> tuple[str, list[str], list[str], str]:
    """The ETL shape of the issue: 20 fetch → parse pairs, then a load of every parse. The
    parses are added in the reverse order of their fetches (as a job adding nodes at run time
    may), so ordering a layer by id makes every pair's edge cross the others."""

    @app.job(name="etl.fetch")
    def fetch(url: str) -> str:
        return url

    @app.job(name="etl.parse")
    def parse(text: str) -> int:
        return len(text)

    @app.job(name="etl.load")
    def load(sizes: list[int]) -> int:
        return sum(sizes)

    wf = app.workflow(description="nightly ETL")
    fetches = [wf.add(fetch.s(f"https://files.example.com/2026/exports/report-{i:02d}.csv"))
               for i in range(PAIRS)]
    parses = [wf.add(parse.s(), after=[f], results="one") for f in reversed(fetches)]
    done = wf.add(load.s(), after=parses, results="list")
    wf.enqueue()
    return wf.id, [f.id for f in fetches], [p.id for p in parses], done.id


def _crossings(edges: list[list[float]]) -> int:
    """Pairs of drawn edges that cross. Every edge is the same cubic shape between its ends
    (control points at mid-x), so two edges over the same x range cross exactly when their
    ends swap order; edges over different ranges are compared as straight segments."""
    count = 0
    for (ax1, ay1, ax2, ay2), (bx1, by1, bx2, by2) in combinations(edges, 2):
        if (ax1, ax2) == (bx1, bx2):
            count += (ay1 - by1) * (ay2 - by2) < 0
            continue
        lo, hi = max(ax1, bx1), min(ax2, bx2)
        if lo >= hi:
            continue

        def at(x: float, x1: float, y1: float, x2: float, y2: float) -> float:
            return y1 + (y2 - y1) * (x - x1) / (x2 - x1)

        start = at(lo, ax1, ay1, ax2, ay2) - at(lo, bx1, by1, bx2, by2)
        end = at(hi, ax1, ay1, ax2, ay2) - at(hi, bx1, by1, bx2, by2)
        count += start * end < 0
    return count


def test_an_etl_graph_is_drawn_without_a_crossing(site: Site, page: Page) -> None:  # noqa: F811
    """Graphviz's ``dot`` and dagre order each rank to keep edges short (barycenter sweeps);
    ordered by id, the issue's 20 pairs crossed every other pair."""
    wf, fetches, parses, _ = _etl(site.app)
    page.goto(f"{site.server.url}/workflows/{wf}")
    assert page.locator("#live svg.graph g.node").count() == 2 * PAIRS + 1
    edges = page.evaluate("""() => [...document.querySelectorAll('#live svg.graph path.edge')]
        .map(p => { const a = p.getPointAtLength(0), b = p.getPointAtLength(p.getTotalLength());
                    return [a.x, a.y, b.x, b.y]; })""")
    assert len(edges) == 2 * PAIRS
    assert _crossings(edges) == 0
    # The checker sees crossings where there are some: the same pairs with their parse ends
    # in id order, as the page drew them before.
    ends = sorted(e[3] for e in edges if e[2] == edges[0][2])
    swapped = [[x1, y1, x2, ends[-1 - i]] for i, (x1, y1, x2, _) in
               enumerate(sorted((e for e in edges if e[2] == edges[0][2]),
                                key=lambda e: e[1]))]
    assert _crossings(swapped) == PAIRS * (PAIRS - 1) // 2
    # Each box says what its node works on: the first argument, trimmed; all of it on hover.
    box = page.locator(f"a[href='/jobs/{fetches[7]}'] g.node")
    assert box.locator("text.arg").text_content() == "https://files.example.com…"
    assert "https://files.example.com/2026/exports/report-07.csv" in (
        box.locator("title").text_content() or "")
    assert page.locator(f"a[href='/jobs/{parses[0]}'] g.node text.arg").count() == 0  # no args yet


def test_a_node_page_links_its_parents_and_children(site: Site, page: Page) -> None:  # noqa: F811
    _, fetches, parses, load = _etl(site.app)
    parse = parses[PAIRS - 1 - 3]  # the parse of fetch 3 (parses were added in reverse)
    page.goto(f"{site.server.url}/jobs/{parse}")
    fields = dict(zip(page.locator("dl dt").all_inner_texts(),
                      page.locator("dl dd").all_inner_texts(), strict=True))
    assert fields["Parents"] == "etl.fetch pending"
    assert fields["Children"] == "etl.load waiting"
    with page.expect_navigation():
        page.click("dd a:has-text('etl.fetch')")
    assert page.url == f"{site.server.url}/jobs/{fetches[3]}"
    assert page.locator("dl dd").all_inner_texts()[
        page.locator("dl dt").all_inner_texts().index("Parents")] == "none"
    page.goto(f"{site.server.url}/jobs/{load}")
    children = page.locator("dd").filter(has=page.locator("a[href^='/jobs/']")).first
    assert children.locator("a").count() == PAIRS  # the load's parents: every parse
    page.goto(f"{site.server.url}/jobs/{site.seeded.ids['dead']}")  # no workflow: no fields
    assert "Parents" not in page.locator("dl dt").all_inner_texts()


def test_every_page_names_its_store_and_its_totals(site: Site, page: Page) -> None:  # noqa: F811
    """The header names the store the dashboard reads (issue 51: nothing said which);
    the overview's cards name what they count: the jobs failed now beside the jobs dead now,
    and the all-time counter of failed or dead outcomes as such (it read "failed" beside
    "dead"); a workflow page of an unknown id says "no workflow", not "no batch"."""
    store = site.app.storage
    for path in ("/", "/jobs", f"/workflows/{_etl(site.app)[0]}"):
        page.goto(site.server.url + path)
        assert page.locator("header .store").inner_text() == (
            f"store sqlite:///{Path(store.url.removeprefix('sqlite:///'))}")
    page.goto(site.server.url + "/")
    cards = dict(zip(page.locator(".card span").all_text_contents(),
                     page.locator(".card b").all_text_contents(), strict=True))
    totals = stats_view(store)["totals"]
    failed_now, dead_now = (store.count_jobs(state=s) for s in (JobState.FAILED, JobState.DEAD))
    assert failed_now != totals["failed"]  # the seed tells the two apart
    assert cards["failed"] == str(failed_now) and cards["dead"] == str(dead_now)
    assert cards["failed or dead ever"] == str(totals["failed"])
    assert cards["succeeded ever"] == str(totals["processed"])
    page.goto(f"{site.server.url}/queues")
    assert "Failed or dead ever" in (page.locator("table.queues thead").text_content() or "")
    reply = site.client().get("/workflows/nosuchid")  # (a 404 is an error in the console)
    assert reply.status == 404
    assert '<p class="error">no workflow with id &#x27;nosuchid&#x27;</p>' in reply.body
