"""The jobs list (by state, with bulk actions), job detail, batches list and batch pages."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlencode

from conveyor.client.explain import Explanation, explain
from conveyor.core.job import SHOWN_STATES, JobState
from conveyor.storage.base import Inspector
from conveyor.storage.graph import GraphNode
from conveyor.views.records import (
    batch_jobs_view,
    batch_state,
    batch_view,
    fmt_duration,
    job_detail,
    job_row,
    parse_state,
)
from conveyor.views.search import BUDGET, sealed_note, search_jobs
from conveyor.web.graph import BY_NAME, WIDE_LAYER, Args, relatives, svg
from conveyor.web.http import Request, Response, StorageCaller
from conveyor.web.render import (
    badge,
    button_form,
    e,
    js,
    link,
    page,
    pager,
    progress,
    short,
    table,
    when,
)
from conveyor.web.steps import steps_section, waits_field
from conveyor.web.why import reasons, why_field

PAGE = 50
GRAPH_LIMIT = 2000  # nodes read for a graph page



def _state_arg(request: Request) -> JobState | None:
    try:
        return parse_state(request.arg("state"))
    except ValueError:
        return None


def _here(path: str, query: dict[str, str]) -> str:
    query = {k: v for k, v in query.items() if v}
    return path + ("?" + urlencode(query) if query else "")


async def jobs(dash: StorageCaller, request: Request, csrf: str, fixed: JobState | None,
               path: str) -> Response:
    """Jobs filtered by state and queue, with checkboxes and bulk retry/delete/kill."""
    state = fixed or _state_arg(request)
    queue = request.arg("queue") or None
    name, text = request.arg("name").strip() or None, request.arg("q").strip()
    oldest = request.arg("order") == "oldest"
    offset = request.int_arg("offset", 0, high=10**9)

    def counts_of(insp: Inspector) -> dict[str, int]:
        return {s.value: insp.count_jobs(state=s, queue=queue) for s in SHOWN_STATES}

    def listed(insp: Inspector) -> tuple[list[dict[str, Any]], int, dict[str, int]]:
        rows = [job_row(j, dash.data) for j in insp.list_jobs(
            state=state, queue=queue, offset=offset, limit=PAGE, newest_first=not oldest)]
        reasons(insp, rows, dash.brokered)  # each row's "why"
        return rows, insp.count_jobs(state=state, queue=queue), counts_of(insp)

    note = ""
    if (name or text) and request.cross_site:  # a page elsewhere cannot make us search
        rows, total, counts = [], 0, await dash.call(counts_of)
        note = ("search not run: this address was opened from another site; "
                "press Filter to run it")
    elif name or text:  # a bounded search of the newest jobs, on a long-read thread
        counts = await dash.call(counts_of)
        found = await dash.call_long(lambda insp: search_jobs(
            insp, text, name=name, state=state, queue=queue, limit=PAGE, stop=request.gone))
        rows, total = [job_row(j, dash.data) for j in found.jobs], len(found.jobs)
        note = (f"{len(found.jobs)} found among the "
                + ("" if found.complete else "newest ")
                + f"{found.scanned:,} {state.value if state else ''} jobs"
                + (f" of {queue}" if queue else "")
                + (f" (stopped after {BUDGET:g} s: narrow it by queue, state or name)"
                   if found.cut_short else "")
                + (f"; {sealed_note(found)}" if found.sealed else ""))
    else:
        rows, total, counts = await dash.call(listed)
    query = {"state": state.value if state and not fixed else "", "queue": queue or "",
             "name": name or "", "q": text, "order": "oldest" if oldest else ""}
    here = _here(path, query)
    live = "" if fixed else _state_tabs(state, queue, counts)
    live += _filters(path, state if not fixed else None, queue, name, text, oldest)
    if note:
        live += f'<p class="sub">{e(note)}</p>'
    live += _bulk_form(rows, csrf, here, state)
    if not note:
        live += pager(path, {k: v for k, v in query.items() if v}, offset, PAGE, total)
    title = f"{state.value.capitalize()} jobs" if state else "Jobs"
    # A search runs once (a long read): the page is not re-fetched every two seconds.
    return page(title + (f" in {queue}" if queue else ""), path, live, request, csrf,
                refresh=0 if note else 2000)


def _filters(path: str, state: JobState | None, queue: str | None, name: str | None,
             text: str, oldest: bool) -> str:
    """The list's GET form: job name, queue, a search text (an id, or words of the arguments
    or the last message), and the order (newest first unless asked)."""
    keep = f'<input type="hidden" name="state" value="{e(state.value)}">' if state else ""
    order = ('<select name="order"><option value="">newest first</option>'
             f'<option value="oldest"{" selected" if oldest else ""}>oldest first</option>'
             "</select>")
    return (f'<form class="filters" method="get" action="{e(path)}">{keep}'
            f'<input name="name" placeholder="job name" value="{e(name or "")}">'
            f'<input name="queue" placeholder="queue" value="{e(queue or "")}">'
            f'<input name="q" placeholder="job id, or text in args or message" '
            f'value="{e(text)}">{order}<button>Filter</button></form>')


def _state_tabs(state: JobState | None, queue: str | None, counts: dict[str, int]) -> str:
    tabs = [link(_here("/jobs", {"queue": queue or ""}), "all",
                 "tab on" if state is None else "tab")]
    for s in SHOWN_STATES:
        href = _here("/jobs", {"state": s.value, "queue": queue or ""})
        tabs.append(f'<a class="tab{" on" if s == state else ""}" href="{e(href)}">'
                    f'{e(s.value)} <small>{counts[s.value]}</small></a>')
    return f'<nav class="tabs">{"".join(tabs)}</nav>'


# The time a list of one state shows: when a retry or a schedule runs next, when a job ended.
_WHEN = {JobState.RETRYING: ("Next run", "run_at"), JobState.SCHEDULED: ("Runs at", "run_at"),
         **{s: ("Died" if s is JobState.DEAD else "Ended", "finished_at")
            for s in (JobState.DEAD, JobState.FAILED, JobState.SUCCEEDED, JobState.CANCELLED)}}


def _bulk_form(rows: list[dict[str, Any]], csrf: str, here: str, state: JobState | None) -> str:
    title, field = _WHEN.get(state, ("Created", "created_at")) if state else ("Created",
                                                                             "created_at")
    body = table(
        ("", "Job", "State", "Queue", "Args", "Try", title, "Last message · why it waits"),
        ([f'<input type="checkbox" name="ids" value="{e(r["id"])}" aria-label="select">',
          link(f"/jobs/{r['id']}", r["name"]) + f"<br><small>{e(r['id'])}</small>",
          badge(r["state"]) + _unreadable(r), e(r["queue"]), f"<code>{e(short(r['args']))}</code>",
          e(r["attempt"]), when(r[field]), e(short(r["message"] or "", 120))
          + (f'<br><small class="why">{e(r["why"])}</small>' if r.get("why") else "")]
         for r in rows), "jobs")
    buttons = "".join(
        f'<button name="op" value="{op}" class="{cls}">{label} selected</button>'
        for op, label, cls in (("retry", "Retry", ""), ("kill", "Kill", "warn"),
                               ("delete", "Delete", "danger")))
    form = (f'<form method="post" action="/action" class="bulk">'
            f'<input type="hidden" name="csrf" value="{e(csrf)}">'
            f'<input type="hidden" name="next" value="{e(here)}">'
            f'<div class="toolbar"><label><input type="checkbox" class="select-all"> all</label>'
            f"{buttons}</div>{body}</form>")
    if state is not None and state.terminal:
        form = ('<div class="toolbar">'
                + button_form("retry-all", f"Retry all {state.value}", csrf, here,
                              state=state.value,
                              confirm=f"Retry every {state.value} job?")
                + button_form("clear", f"Delete all {state.value}", csrf, here, cls="danger",
                              state=state.value, confirm=f"Delete every {state.value} job?")
                + "</div>" + form)
    return form


async def job(dash: StorageCaller, request: Request, csrf: str, m: re.Match[str]) -> Response:
    """One job: fields, args, options, actions, event timeline and errors with tracebacks."""
    def read(insp: Inspector) -> tuple[dict[str, Any], str | None, list[GraphNode],
                                       Explanation | None]:
        view = job_detail(insp, m["id"], dash.data)
        status = insp.get_batch(view["batch_id"]) if view["batch_id"] else None
        kind = status.kind if status is not None else None
        graph = insp.workflow_graph(view["batch_id"], GRAPH_LIMIT) \
            if view["batch_id"] and kind == "workflow" else []
        found = explain(insp, view["id"], broker=dash.brokered)
        return view, kind, graph, found

    view, kind, graph, found = await dash.call(read)
    here = f"/jobs/{view['id']}"
    group: tuple[str, str] = ("Batch", "-")
    if view["batch_id"] and kind == "workflow":  # a node: its graph, one click away
        group = ("Workflow", link(f"/workflows/{view['batch_id']}", view["batch_id"])
                 + " · " + link(f"/workflows/{view['batch_id']}", "graph")
                 + " · " + link(f"/batches/{view['batch_id']}", "jobs"))
    elif view["batch_id"]:
        group = ("Batch", link(f"/batches/{view['batch_id']}", view["batch_id"]))
    fields = [("State", badge(view["state"])), why_field(found), ("Queue", e(view["queue"])),
              ("Attempt", e(f"{view['attempt']} (errors {view['errors']}, recoveries "
                            f"{view['recoveries']}, max retries {view['max_retries']})")),
              group, *_family(graph, view["id"]),
              ("Worker", e(view["worker"] or "-")), ("Created", when(view["created_at"])),
              ("Run at", when(view["run_at"])), ("Started", when(view["started_at"])),
              ("Finished", when(view["finished_at"])), ("Message", e(view["message"] or "-")),
              *waits_field(view)]
    if view["progress"]:
        done, total = view["progress"]
        bar = f'<progress max="{e(total)}" value="{e(done)}"></progress> ' if total else ""
        fields.append(("Progress", f"{bar}{e(done)}" + (f" / {e(total)}" if total else "")))
    actions = "".join(button_form(op, label, csrf, here, cls=cls, ids=view["id"])
                      for op, label, cls in (("retry", "Retry", ""), ("kill", "Kill", "warn"),
                                             ("delete", "Delete", "danger")))
    dl = "".join(f"<dt>{e(k)}</dt><dd>{v}</dd>" for k, v in fields)
    live = (f'<p class="sub">{e(view["name"])} · <code>{e(view["id"])}</code></p>'
            + (f'<p class="error">Unreadable record: {e(view["unreadable"])}. It is shown as '
               "far as it could be read; delete it, or retry it once the cause is fixed.</p>"
               if view["unreadable"] else "")
            + f'<div class="toolbar">{actions}</div><div class="cols"><dl>{dl}</dl><div>'
            f"<h3>Args</h3><pre>{js(view['args'])}</pre><h3>Kwargs</h3>"
            f"<pre>{js(view['kwargs'])}</pre><h3>Options</h3><pre>{js(view['options'])}</pre>"
            + (f"<h3>Result</h3><pre>{js(view['result'])}</pre>" if view["result"] else "")
            + f"</div></div>{steps_section(view)}<h2>Timeline</h2>"
            f"{_timeline(view['events'] or [])}"
            + _errors(view["errors_detail"]))
    return page(f"Job {view['name']}", "/jobs", live, request, csrf)


def _family(graph: list[GraphNode], node_id: str) -> list[tuple[str, str]]:
    """A workflow node's "Parents" and "Children" fields: each linked, with its state."""
    found = relatives(graph, node_id) if graph else None
    if found is None:
        return []
    return [(title, ", ".join(f'{link(f"/jobs/{n.id}", n.name)} {badge(n.state.value)}'
                              for n in nodes) or "none")
            for title, nodes in zip(("Parents", "Children"), found, strict=True)]


def _unreadable(row: dict[str, Any]) -> str:
    """A marker for a damaged record in a list, with the reason on hover."""
    if not row.get("unreadable"):
        return ""
    return f' <span class="badge s-dead" title="{e(row["unreadable"])}">unreadable</span>'


def _timeline(events: list[dict[str, Any]]) -> str:
    items = []
    for ev in events:
        # error data (type, message, traceback) is shown once, in the Errors section
        shown = {k: v for k, v in (ev["data"] or {}).items()
                 if k not in ("type", "message", "traceback")}
        compact = short(shown, 10_000)
        data = ("" if not shown else f"<pre>{js(shown)}</pre>" if len(compact) > 100
                else f' <code class="data">{e(compact)}</code>')
        items.append(f'<li class="ev k-{e(ev["kind"])}">{when(ev["ts"])} <b>{e(ev["kind"])}</b>'
                     + (f" {badge(ev['state'])}" if ev["state"] else "")
                     + (f" <small>attempt {e(ev['attempt'])}</small>" if ev["attempt"] else "")
                     + (f" <small>{e(ev['worker'])}</small>" if ev["worker"] else "")
                     + (f'<div class="msg">{e(ev["message"])}</div>' if ev["message"] else "")
                     + data + "</li>")
    return f'<ol class="timeline">{"".join(items)}</ol>'


def _errors(errors: list[dict[str, Any]]) -> str:
    if not errors:
        return ""
    parts = [f"<details{' open' if i == len(errors) - 1 else ''}><summary>attempt "
             f"{e(err['attempt'])}: {e(err['type'])}: {e(err['message'])}</summary>"
             f"<pre>{e(err['traceback'])}</pre></details>" for i, err in enumerate(errors)]
    return "<h2>Errors</h2>" + "".join(parts)


async def batches(dash: StorageCaller, request: Request, csrf: str,
                  m: re.Match[str]) -> Response:
    """Batches, newest first, each with its progress bar."""
    return await _batch_list(dash, request, csrf, "batch")


async def workflows(dash: StorageCaller, request: Request, csrf: str,
                    m: re.Match[str]) -> Response:
    """Workflows, newest first: batches of kind ``workflow`` (docs/workflows.md)."""
    return await _batch_list(dash, request, csrf, "workflow")


async def _batch_list(dash: StorageCaller, request: Request, csrf: str,
                      kind: str) -> Response:
    offset = request.int_arg("offset", 0, high=10**9)
    base = "/workflows" if kind == "workflow" else "/batches"

    def read(insp: Inspector) -> list[dict[str, Any]]:
        now = insp.now()
        return [b.as_dict(now) for b in insp.list_batches(offset, PAGE, kind=kind)]

    rows = [[link(f"/batches/{b['id']}", b["description"] or b["id"])
             + f"<br><small>{e(b['id'])}</small>",
             progress(b["counts"], b["total"], b["percent"]),
             e(f"{b['done']}/{b['total']}"), e(b["counts"]["failed"] + b["counts"]["dead"]),
             badge(batch_state(b)), when(b["created_at"]), e(fmt_duration(b["elapsed"]))]
            for b in await dash.call(read)]
    noun = "Workflow" if kind == "workflow" else "Batch"
    live = table((noun, "Progress", "Done", "Failed", "State", "Created", "Elapsed"), rows,
                 "batches")
    if offset or len(rows) == PAGE:
        live += (f'<div class="pager">{link(f"{base}?offset={offset + PAGE}", "older →")}'
                 "</div>")
    return page(f"{noun}s", base, live, request, csrf)



async def batch(dash: StorageCaller, request: Request, csrf: str, m: re.Match[str]) -> Response:
    """A batch: live progress bar, counts, timings, ETA, failures and its jobs by state."""
    state = _state_arg(request)
    offset = request.int_arg("offset", 0, high=10**9)

    def read(insp: Inspector) -> tuple[dict[str, Any], list[dict[str, Any]], int]:
        view = batch_view(insp, m["id"])
        rows = batch_jobs_view(insp, m["id"], state, offset, PAGE)
        return view, rows, insp.count_jobs(state=state, batch_id=m["id"])

    view, rows, total = await dash.call(read)
    here = _here(f"/batches/{view['id']}", {"state": state.value if state else ""})
    tabs = [link(f"/batches/{view['id']}", f"all {view['total']}",
                 "tab on" if state is None else "tab")]
    tabs += [f'<a class="tab{" on" if s == state else ""}" '
             f'href="/batches/{e(view["id"])}?state={s.value}">{s.value} '
             f'<small>{view["counts"][s.value]}</small></a>' for s in SHOWN_STATES]
    facts = (f'<p class="sub">{e(view["done"])}/{e(view["total"])} done · '
             f'{badge(batch_state(view))} · elapsed {e(fmt_duration(view["elapsed"]))} · '
             f'ETA {e(fmt_duration(view["eta"]))} · created {when(view["created_at"])}</p>')
    cancel = "" if view["complete"] or view["cancelled"] else button_form(
        "cancel-batch", "Cancel batch", csrf, here, cls="danger", batch=view["id"],
        confirm="Cancel every unfinished job of this batch?")
    cancel += _failure_tools(view, csrf, here)
    jobs_table = table(("Job", "State", "Args", "Try", "Last message"), (
        [link(f"/jobs/{r['id']}", r["name"]) + f"<br><small>{e(r['id'])}</small>",
         badge(r["state"]) + _unreadable(r), f"<code>{e(short(r['args']))}</code>",
         e(r["attempt"]),
         e(short(r["message"] or "", 160))] for r in rows), "jobs")
    live = (progress(view["counts"], view["total"], view["percent"]) + facts
            + f'<div class="toolbar">{cancel}</div><nav class="tabs">{"".join(tabs)}</nav>'
            + jobs_table + pager(f"/batches/{view['id']}",
                                 {"state": state.value} if state else {}, offset, PAGE, total))
    workflow = view.get("kind") == "workflow"
    title = f"{'Workflow' if workflow else 'Batch'} {view['description'] or view['id']}"
    return page(title, "/workflows" if workflow else "/batches", live, request, csrf,
                before=_views(view["id"], "jobs") if workflow else "")


def _failure_tools(view: dict[str, Any], csrf: str, here: str) -> str:
    """Retry the batch's failed / dead jobs, and download its failures (CSV, JSON)."""
    counts = view["counts"]
    failed, dead = counts.get("failed", 0), counts.get("dead", 0)
    if not failed and not dead:
        return ""
    out = ""
    for state, count in (("failed", failed), ("dead", dead)):
        if count:
            out += button_form("retry-batch", f"Retry {count} {state}", csrf, here,
                               batch=view["id"], state=state,
                               confirm=f"Retry the {count} {state} job(s) of this batch?")
    base = f"/batches/{view['id']}/failures"
    return out + (f' <span class="downloads">failures: {link(base + ".csv", "CSV")} · '
                  f'{link(base + ".json", "JSON")}</span>')


async def workflow_graph(dash: StorageCaller, request: Request, csrf: str,
                         m: re.Match[str]) -> Response:
    """A workflow's graph, live: every node in its layer, coloured by state, linked to its
    job's page (large graphs summarised by step name: ``web/graph.py``)."""

    def read(insp: Inspector) -> tuple[dict[str, Any], list[GraphNode], Args]:
        view = batch_view(insp, m["id"], kind="workflow")
        nodes = insp.workflow_graph(m["id"], GRAPH_LIMIT)
        return view, nodes, node_args(insp, m["id"], len(nodes))

    view, nodes, args = await dash.call(read)
    facts = (f'<p class="sub">{e(view["done"])}/{e(view["total"])} settled · '
             f'{badge(batch_state(view))} · elapsed {e(fmt_duration(view["elapsed"]))} · '
             f'created {when(view["created_at"])}</p>')
    shown = f"the first {GRAPH_LIMIT:,} of {view['total']:,} nodes · " \
        if len(nodes) >= GRAPH_LIMIT else ""
    note = (f'<p class="sub">{shown}a box per step name where a layer holds more than '
            f"{WIDE_LAYER} nodes, or the graph more than {BY_NAME}</p>"
            if len(nodes) > WIDE_LAYER else "")
    drawing = (f'<div class="graph-wrap">{svg(nodes, args)}</div>' if nodes
               else '<p class="empty">no node to draw (its nodes were trimmed)</p>')
    live = progress(view["counts"], view["total"], view["percent"]) + facts + note + drawing
    title = f"Workflow {view['description'] or view['id']}"
    return page(title, "/workflows", live, request, csrf, before=_views(view["id"], "graph"))


def node_args(insp: Inspector, workflow_id: str, count: int) -> Args:
    """What each node of a workflow small enough to be drawn node by node works on (its
    arguments, from its job record); nothing for a larger one, drawn by step name."""
    if count > BY_NAME:
        return {}
    return {r.id: (r.args, r.kwargs)
            for r in insp.list_jobs(batch_id=workflow_id, limit=count, with_events=False)}


def _views(workflow_id: str, on: str) -> str:
    """The two views of a workflow: its graph and its jobs (the batch page)."""
    tabs = [link(href, name, "tab on" if name == on else "tab") for name, href in
            (("graph", f"/workflows/{workflow_id}"), ("jobs", f"/batches/{workflow_id}"))]
    return f'<nav class="tabs">{"".join(tabs)}</nav>'
