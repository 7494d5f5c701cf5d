"""The dashboard end to end in headless Chromium (Debian's /usr/bin/chromium via Playwright).

Skipped, with the reason, when Playwright or Chromium is missing (``make test`` installs both).
Set ``CONVEYOR_SCREENSHOTS=docs/screenshots`` to save one PNG per main page.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conveyor.core.job import Outcome
from conveyor.storage.totals import HISTORY_MINUTES
from tests.web.conftest import TOKEN, Site, serve_site
from tests.web.seed import run_one

try:
    from playwright.sync_api import Browser, Page, sync_playwright
except ImportError:  # pragma: no cover - depends on the environment
    sync_playwright = None  # type: ignore[assignment]

CHROMIUM = os.environ.get("CONVEYOR_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run"]
MAIN_PAGES = {"overview": "/", "queues": "/queues", "jobs": "/jobs", "dead": "/dead",
              "batches": "/batches", "workers": "/workers", "retrying": "/retrying",
              "scheduled": "/scheduled", "periodic": "/periodic"}


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if sync_playwright is None:
        pytest.skip("playwright is not installed (pip install playwright; make test does)")
    if not (os.access(CHROMIUM, os.X_OK) or shutil.which(CHROMIUM)):
        pytest.skip(f"chromium not found at {CHROMIUM} (apt-get install chromium)")
    with sync_playwright() as pw:
        launched = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield launched
        launched.close()


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    """SQLite only: the browser adds nothing backend-specific, and each run costs seconds."""
    yield from serve_site(tmp_path, None)


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    tab = context.new_page()
    problems: list[str] = []
    tab.on("pageerror", lambda exc: problems.append(str(exc)))
    tab.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    tab.on("dialog", lambda dialog: dialog.accept())  # confirm() on destructive buttons
    yield tab
    context.close()
    assert problems == [], problems  # no script errors, no CSP violations, no 404 assets


def test_main_pages_load(site: Site, page: Page) -> None:
    shots = os.environ.get("CONVEYOR_SCREENSHOTS")
    if shots:  # a batch half way through makes a more telling picture
        run_one(site.app.storage, "exports", Outcome.SUCCEEDED)
        run_one(site.app.storage, "exports", Outcome.FAILED, message="row 2: SKU 'x' is bad")
    for name, path in MAIN_PAGES.items():
        page.goto(site.server.url + path)
        assert page.locator("h1").first.is_visible()
        assert page.locator("header nav a.on").count() == 1
        if shots:
            if name == "overview":
                _make_traffic(site, page)
            page.screenshot(path=str(Path(shots) / f"{name}.png"), full_page=True)
    if shots:
        for name, path in (("job", f"/jobs/{site.seeded.ids['dead']}"),
                           ("batch", f"/batches/{site.seeded.batch_id}")):
            page.goto(site.server.url + path)
            page.screenshot(path=str(Path(shots) / f"{name}.png"), full_page=True)


def _make_traffic(site: Site, page: Page) -> None:
    """Finish jobs while the overview polls, so the screenshot's charts show something."""
    for i in range(60):
        site.app.enqueue("shop.export", [100 + i], queue="reports")
    for tick in range(8):
        for _ in range(2 + tick % 3):
            run_one(site.app.storage, "reports", Outcome.SUCCEEDED)
        if tick % 3 == 1:
            run_one(site.app.storage, "reports", Outcome.FAILED, message="bad row")
        page.wait_for_timeout(700)


def test_script_content_in_args_stays_text(site: Site, page: Page) -> None:
    hits: list[Any] = []
    page.on("dialog", lambda dialog: hits.append(dialog.message))
    page.goto(f"{site.server.url}/jobs/{site.seeded.ids['xss']}")
    assert "<script>alert('pwned')</script>" in page.locator("pre").first.inner_text()
    page.goto(f"{site.server.url}/jobs")
    page.wait_for_timeout(0)
    assert hits == []


def test_retry_button_retries_a_dead_job(site: Site, page: Page) -> None:
    dead = site.seeded.ids["dead"]
    page.goto(f"{site.server.url}/dead")
    page.check(f"input[name=ids][value='{dead}']")
    with page.expect_navigation():
        page.click("button:has-text('Retry selected')")
    assert page.url == f"{site.server.url}/dead"  # the message is not in the address
    assert "retried 1 job(s)" in page.locator(".flash").inner_text()
    assert site.state("dead") == "pending"


def test_retry_on_the_job_page(site: Site, page: Page) -> None:
    page.goto(f"{site.server.url}/jobs/{site.seeded.ids['failed']}")
    with page.expect_navigation():
        page.click("form.inline button:has-text('Retry')")
    assert site.state("failed") == "pending"
    assert "retried" in page.locator(".timeline").inner_text()


def test_pause_button(site: Site, page: Page) -> None:
    page.goto(f"{site.server.url}/queues")
    with page.expect_navigation():
        page.locator("tr", has_text="exports").locator("button:has-text('Pause')").click()
    assert {q.name: q.paused for q in site.app.storage.queues()}["exports"]
    assert page.locator("tr", has_text="exports").locator("button:has-text('Resume')").count()


def test_a_batchs_failures_are_retried_and_downloaded_from_its_page(site: Site,
                                                                    page: Page) -> None:
    st = site.app.storage
    failed = run_one(st, "exports", Outcome.FAILED, message="row 1: bad SKU")
    dead = run_one(st, "exports", Outcome.DEAD, message="gave up")
    page.goto(f"{site.server.url}/batches/{site.seeded.batch_id}")
    with page.expect_download() as got:
        page.click("a:has-text('CSV')")
    text = Path(got.value.path()).read_text()
    assert failed in text and dead in text and "row 1: bad SKU" in text
    with page.expect_navigation():
        page.click("button:has-text('Retry 1 dead')")  # its confirm() is accepted
    assert "retried 1 dead job(s)" in page.locator(".flash").inner_text()
    assert st.get_job(dead).state.value == "pending"  # type: ignore[union-attr]
    assert st.get_job(failed).state.value == "failed"  # type: ignore[union-attr]


def test_the_dashboard_mounted_under_jobs_in_a_fastapi_app(site: Site, page: Page) -> None:
    from fastapi import FastAPI

    from conveyor.web import RunningServer, create_app

    api = FastAPI()
    api.mount("/jobs", create_app(site.app))
    server = RunningServer(api, "127.0.0.1", 0).start()
    try:
        base = f"http://127.0.0.1:{server.port}"
        page.goto(base + "/jobs/dead")  # its script and styles load from /jobs/static
        assert page.locator("header nav a.on").get_attribute("href") == "/jobs/dead"
        dead = site.seeded.ids["dead"]
        page.check(f"input[name=ids][value='{dead}']")
        with page.expect_navigation():
            page.click("button:has-text('Retry selected')")
        assert page.url == base + "/jobs/dead"
        assert "retried 1 job(s)" in page.locator(".flash").inner_text()
        assert site.state("dead") == "pending"
        cookies = {c["name"]: c["path"] for c in page.context.cookies()}
        assert cookies["conveyor_csrf"] == "/jobs"
        page.goto(base + "/jobs/")  # the charts poll /jobs/api/stats
        page.locator("#chart-queues polyline").nth(1).wait_for(state="attached",
                                                               timeout=15_000)
        page.locator("#chart-history polyline").nth(3).wait_for(state="attached",
                                                                timeout=15_000)
    finally:
        page.goto("about:blank")  # no poll of the page may reach the server once it stops
        server.stop()


def test_batch_progress_bar_advances_without_reload(site: Site, page: Page) -> None:
    page.goto(f"{site.server.url}/batches/{site.seeded.batch_id}")
    bar = "#live .progress"
    assert page.get_attribute(bar, "data-percent") == "0.0"
    page.evaluate("window.__sameDocument = true")  # gone if the page were reloaded
    st = site.app.storage
    run_one(st, "exports", Outcome.SUCCEEDED)
    run_one(st, "exports", Outcome.FAILED, message="row 3: bad SKU")
    # selector waits, not wait_for_function: the dashboard's CSP forbids eval, rightly
    page.locator(f"{bar}[data-percent='50.0']").wait_for(timeout=15_000)
    run_one(st, "exports", Outcome.SUCCEEDED)
    run_one(st, "exports", Outcome.SUCCEEDED)
    page.locator(f"{bar}[data-percent='100.0']").wait_for(timeout=15_000)
    assert page.evaluate("window.__sameDocument") is True
    page.click("a.tab:has-text('failed')")
    assert "row 3: bad SKU" in page.locator("table.jobs").inner_text()


def test_the_workflow_graph_follows_its_nodes_live(site: Site, page: Page) -> None:
    export = site.app.registry.get("shop.export")
    assert export is not None
    step = export.options(queue="graphs")
    wf = site.app.workflow(description="live graph")
    root = wf.add(step.s(0))
    middle = wf.add_group([step.s(i) for i in (1, 2, 3)], after=[root])
    join = wf.add(step.s(4), after=middle)
    wf.enqueue()
    page.goto(f"{site.server.url}/workflows/{wf.id}")
    nodes = page.locator("#live svg.graph g.node")
    assert nodes.count() == 5 and page.locator("#live svg.graph path.edge").count() == 6
    assert page.locator(f"a[href='/jobs/{join.id}'] g.node").get_attribute(
        "data-state") == "waiting"
    page.evaluate("window.__sameDocument = true")  # gone if the page were reloaded
    assert run_one(site.app.storage, "graphs", Outcome.SUCCEEDED) == root.id
    page.locator(f"a[href='/jobs/{root.id}'] g.node[data-state='succeeded']").wait_for(
        timeout=15_000)
    for ref in middle:  # released by the root's outcome, redrawn without a reload
        page.locator(f"a[href='/jobs/{ref.id}'] g.node[data-state='pending']").wait_for(
            timeout=15_000)
    assert page.evaluate("window.__sameDocument") is True
    with page.expect_navigation():
        page.click(f"a[href='/jobs/{middle[0].id}']")
    assert "released" in page.locator(".timeline").inner_text()  # the node's event log
    with page.expect_navigation():
        page.click("dd a:has-text('graph')")  # and back from the node to its graph
    assert page.url == f"{site.server.url}/workflows/{wf.id}"
    page.goto(f"{site.server.url}/batches/{wf.id}")
    with page.expect_navigation():
        page.click("a.tab:has-text('graph')")
    assert page.locator("#live svg.graph g.node").count() == 5


def test_overview_chart_draws(site: Site, page: Page) -> None:
    page.goto(site.server.url + "/")
    page.locator("#chart-queues polyline").nth(1).wait_for(state="attached", timeout=15_000)
    assert page.locator("#chart-queues-legend .key").all_inner_texts() == ["default", "exports"]


def test_the_last_day_chart_draws_and_follows_the_queue_picked(site: Site, page: Page) -> None:
    page.goto(site.server.url + "/")
    lines = page.locator("#chart-history polyline")
    lines.nth(3).wait_for(state="attached", timeout=15_000)  # processed, failed, dead, retried
    assert lines.count() == 4
    assert page.locator("#chart-history").get_attribute("data-queue") == ""
    # Hover the chart's last three pixels: each tip names a minute and its numbers, which are
    # the stored history's for that minute, and one of them is the seed's minute.
    day = json.loads(site.client().get("/api/history").body)
    stored = {time.strftime("%H:%M", time.gmtime(day["start"] + 60 * i)):
              ", ".join(f"{day['series'][k][i]} {k}" for k in ("processed", "failed", "dead",
                                                               "retried"))
              for i in range(HISTORY_MINUTES - 5, HISTORY_MINUTES)}
    box = page.locator("#chart-history").bounding_box()
    assert box is not None
    tips = []
    for back in (1, 2, 3):
        page.mouse.move(box["x"] + box["width"] - back, box["y"] + box["height"] / 2)
        tips.append(page.locator("#chart-history text.tip").text_content() or "")
    named = dict(tip.split(" UTC — ") for tip in tips)
    assert len(named) == 3 and all(stored[at] == numbers for at, numbers in named.items()), tips
    assert "1 processed, 1 failed, 1 dead, 1 retried" in named.values(), tips
    page.select_option("#history-queue", "exports")
    page.wait_for_selector("#chart-history[data-queue=exports]", timeout=15_000)
    page.wait_for_function("document.querySelector('#chart-history text.tip') && document"
                           ".querySelector('#chart-history text.tip').textContent.endsWith("
                           "'0 processed, 0 failed, 0 dead, 0 retried')", timeout=15_000)
    page.mouse.move(box["x"] - 20, box["y"] - 20)
    assert page.locator("#chart-history text.tip").count() == 0
    assert page.locator("table.recent").inner_text().count("default") == 1


def test_sign_in_at_an_off_site_looking_path_stays_here(tmp_path: Path,
                                                         browser: Browser) -> None:
    # Not the page fixture: the sign-in page is a 401, which Chromium logs as an error.
    context = browser.new_context()
    page = context.new_page()
    for locked in serve_site(tmp_path, TOKEN):
        page.goto(locked.server.url + "//evil.example/steal")
        page.fill("input[name=token]", TOKEN)
        with page.expect_navigation():
            page.click("button:has-text('Sign in')")
        assert page.url.startswith(locked.server.url + "/")
        assert page.locator("h1").first.inner_text() == "Overview"
    context.close()


def test_the_dashboard_behind_a_fastapi_apps_own_sign_in(site: Site, browser: Browser) -> None:
    """Issue 49: mounted in a FastAPI app that has its own sign-in, the dashboard asks the
    host's check for every request (``authorize=``), sends a stranger to the host's sign-in
    page and back (``login_url=``), and still demands its CSRF token for an action, as
    Sidekiq's web UI does behind a Rails route constraint."""
    from urllib.parse import parse_qs

    from fastapi import FastAPI, Request
    from fastapi.responses import HTMLResponse, RedirectResponse

    from conveyor.web import RunningServer, create_app

    api = FastAPI()
    sessions: dict[str, str] = {}

    @api.get("/login", response_class=HTMLResponse)
    def login_form(next: str = "/") -> str:
        return ('<form method="post" action="/login"><input name="user">'
                '<input name="password" type="password">'
                f'<input type="hidden" name="next" value="{next}"><button>Log in</button></form>')

    async def login(request: Request) -> RedirectResponse:  # a plain Starlette endpoint
        form = {k: v[0] for k, v in parse_qs((await request.body()).decode()).items()}
        back = RedirectResponse(form.get("next", "/"), status_code=303)
        if (form.get("user"), form.get("password")) == ("ada", "pw-ada"):
            sessions["s-ada"] = "ada"
            back.set_cookie("shop_session", "s-ada", httponly=True, samesite="lax")
        return back

    api.add_route("/login", login, methods=["POST"])

    def signed_in(scope: Any) -> bool:
        return Request(scope).cookies.get("shop_session", "") in sessions

    api.mount("/ops", create_app(site.app, authorize=signed_in, login_url="/login"))
    server = RunningServer(api, "127.0.0.1", 0).start()
    context = browser.new_context()  # not the page fixture: the refused fetch logs an error
    page = context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    page.on("dialog", lambda dialog: dialog.accept())
    try:
        base = f"http://127.0.0.1:{server.port}"
        page.goto(base + "/ops/queues")
        assert page.url == base + "/login?next=%2Fops%2Fqueues"
        page.fill("input[name=user]", "ada")
        page.fill("input[name=password]", "pw-ada")
        with page.expect_navigation():
            page.click("button:has-text('Log in')")
        assert page.url == base + "/ops/queues"
        with page.expect_navigation():
            page.locator("tr", has_text="exports").locator("button:has-text('Pause')").click()
        assert {q.name: q.paused for q in site.app.storage.queues()}["exports"]
        forged = page.evaluate(
            """() => fetch('/ops/action', {method: 'POST', body: 'op=pause&queue=default',
                  headers: {'content-type': 'application/x-www-form-urlencoded'}})
                  .then(r => r.status)""")
        assert forged == 403  # signed in, but no CSRF token: refused
        assert not {q.name: q.paused for q in site.app.storage.queues()}["default"]
        stranger = browser.new_context().new_page()
        stranger.goto(base + "/ops/dead")
        assert stranger.url == base + "/login?next=%2Fops%2Fdead"
        stranger.context.close()
    finally:
        page.goto("about:blank")
        context.close()
        server.stop()
    assert problems == []
