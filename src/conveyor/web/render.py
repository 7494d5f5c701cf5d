"""HTML building blocks. Every value from storage passes through ``e()`` (HTML-escaping)."""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import urlencode

from conveyor.core.job import JobState
from conveyor.views.records import fmt_time
from conveyor.web.http import Request, Response

# Finished work fills the bar from the left, waiting work stays on the right.
BAR_ORDER = (JobState.SUCCEEDED, JobState.FAILED, JobState.DEAD, JobState.CANCELLED,
             JobState.ACTIVE, JobState.RETRYING, JobState.PENDING, JobState.AGGREGATING,
             JobState.SCHEDULED, JobState.WAITING)
NAV = (("/", "Overview"), ("/queues", "Queues"), ("/jobs", "Jobs"), ("/batches", "Batches"),
       ("/workflows", "Workflows"), ("/workers", "Workers"), ("/periodic", "Periodic"),
       ("/scheduled", "Scheduled"), ("/retrying", "Retrying"), ("/dead", "Dead"))


def e(value: Any) -> str:
    """HTML-escaped text of any value (``None`` → empty)."""
    return "" if value is None else html.escape(str(value), quote=True)


def js(value: Any) -> str:
    """A value as indented JSON text, escaped for a ``<pre>``."""
    return e(json.dumps(value, indent=2, ensure_ascii=False, default=str))


def layout(title: str, active: str, live: str, csrf: str, *, before: str = "",
           flash: str = "", refresh: int = 2000, store: str = "") -> str:
    """A full page; ``live`` is the region the script re-fetches with ``?partial=1``;
    ``store`` names the store the dashboard reads, in the header."""
    nav = "".join(f'<a href="{href}"{" class=on" if href == active else ""}>{e(label)}</a>'
                  for href, label in NAV)
    note = f'<div class="flash" role="status">{e(flash)}</div>' if flash else ""
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(title)} · conveyor</title>"
        '<link rel="stylesheet" href="/static/style.css">'
        '<link rel="icon" href="/static/favicon.svg">'
        '<script src="/static/app.js" defer></script></head>'
        f'<body data-api="/api/stats"><header><a class="brand" href="/">conveyor</a>'
        f"<nav>{nav}</nav>"
        + (f'<span class="store" title="{e(store)}">{e(store)}</span>' if store else "")
        + f"</header><div class=page><h1>{e(title)}</h1>{note}{before}"
        f'<main id="live" data-refresh="{refresh}">{live}</main></div></body></html>'
    )


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], cls: str = "") -> str:
    """A table; cells are already-rendered HTML (escape values with ``e``)."""
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    if not body:
        body = f'<tr><td colspan="{len(headers)}" class="empty">nothing here</td></tr>'
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def button_form(op: str, label: str, csrf: str, next_url: str, *, cls: str = "",
                confirm: str = "", **fields: str) -> str:
    """A one-button POST form for ``/action``."""
    hidden = "".join(f'<input type="hidden" name="{e(k)}" value="{e(v)}">'
                     for k, v in fields.items())
    ask = f' data-confirm="{e(confirm)}"' if confirm else ""
    return (f'<form class="inline" method="post" action="/action"{ask}>'
            f'<input type="hidden" name="csrf" value="{e(csrf)}">'
            f'<input type="hidden" name="next" value="{e(next_url)}">{hidden}'
            f'<button class="{cls}" name="op" value="{e(op)}">{e(label)}</button></form>')


def badge(state: str) -> str:
    """A coloured state label."""
    return f'<span class="badge s-{e(state)}">{e(state)}</span>'


def paused(flag: bool) -> str:
    """Whether a queue or a schedule is paused, as the CLI says it: yes or no ("running" is a
    job's word, its state ``active``)."""
    return '<span class="badge s-paused">yes</span>' if flag else "no"


def progress(counts: dict[str, int], total: int, percent: float) -> str:
    """A stacked bar of per-state shares as inline SVG (no inline style, CSP-safe)."""
    x = 0.0
    rects = []
    for state in BAR_ORDER:
        n = counts.get(state.value, 0)
        if not n or not total:
            continue
        w = 1000.0 * n / total
        rects.append(f'<rect class="f-{state.value}" x="{x:.2f}" y="0" width="{w:.2f}" '
                     f'height="20"><title>{state.value}: {n}</title></rect>')
        x += w
    return (f'<div class="progress" data-percent="{percent}" role="progressbar" '
            f'aria-valuenow="{percent}" aria-valuemin="0" aria-valuemax="100">'
            f'<svg viewBox="0 0 1000 20" preserveAspectRatio="none">'
            f'<rect class="track" x="0" y="0" width="1000" height="20"></rect>{"".join(rects)}'
            f'</svg><span class="pct">{percent:.1f}%</span></div>')


def link(href: str, text: Any, cls: str = "") -> str:
    """An anchor with escaped text and address."""
    return f'<a href="{e(href)}"{f" class={cls!r}" if cls else ""}>{e(text)}</a>'


def when(ts: float | None) -> str:
    """A UTC time in a ``<time>`` element the script turns into "3 s ago"."""
    if not ts:
        return "-"
    return f'<time data-ts="{ts}">{e(fmt_time(ts))}</time>'


def pager(path: str, query: dict[str, str], offset: int, limit: int, total: int) -> str:
    """Previous / next links for a paged list."""
    parts = [f"<span>{offset + 1 if total else 0}-{min(offset + limit, total)} of {total}</span>"]
    if offset > 0:
        q = urlencode({**query, "offset": max(0, offset - limit)})
        parts.insert(0, link(f"{path}?{q}", "← previous"))
    if offset + limit < total:
        parts.append(link(f"{path}?{urlencode({**query, 'offset': offset + limit})}", "next →"))
    return f'<div class="pager">{" ".join(parts)}</div>'


def short(value: Any, width: int = 80) -> str:
    """Compact one-line JSON of a value, cut to ``width`` (escape the result with ``e``)."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= width else text[: width - 1] + "…"


def page(title: str, active: str, live: str, request: Request, csrf: str,
         before: str = "", refresh: int = 2000) -> Response:
    """A full page, or only its live region when the script asks with ``?partial=1``;
    ``refresh``: milliseconds between those re-fetches (0: none)."""
    if request.arg("partial") == "1":
        return Response(live)
    return Response(layout(title, active, live, csrf, before=before,
                           flash=request.flash, refresh=refresh, store=request.store))
