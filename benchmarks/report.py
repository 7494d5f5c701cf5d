"""Tables, the SVG chart and docs/benchmarks.md from a results JSON file."""

from __future__ import annotations

import statistics
from typing import Any

# workload key -> (metric, header, format, higher is better)
METRICS: dict[str, list[tuple[str, str, str, bool]]] = {
    "w1": [("rate", "jobs/s", "{:,.0f}", True)],
    "w2_latency": [("p50_ms", "p50 ms", "{:.2f}", False), ("p95_ms", "p95 ms", "{:.2f}", False),
                   ("p99_ms", "p99 ms", "{:.2f}", False)],
    "w3_io": [("efficiency", "efficiency", "{:.3f}", True),
              ("seconds", "seconds", "{:.3f}", False)],
    "w4_batch": [("seconds", "seconds", "{:.3f}", False), ("rate", "jobs/s", "{:,.0f}", True)],
    "w5_cpu": [("seconds", "seconds", "{:.3f}", False),
               ("efficiency", "efficiency", "{:.3f}", True)],
    "storage": [("pending_bytes_per_job", "B/pending job", "{:,.0f}", False),
                ("finished_bytes_per_job", "B/finished job", "{:,.0f}", False)],
    "bigbatch": [("create_seconds", "create s", "{:.1f}", False),
                 ("client_peak_mb", "client peak MB", "{:.0f}", False),
                 ("status_read_ms", "status read ms", "{:.2f}", False)],
}
PEER_BASELINES = ("conveyor", "redis-py")


def metrics_for(key: str) -> list[tuple[str, str, str, bool]]:
    """The metrics shown for a workload key."""
    return METRICS["w1" if key.startswith("w1") else key]


def summary(runs: list[dict[str, Any]], metric: str) -> tuple[float, float, float] | None:
    """Median, min, max of ``metric`` over the runs that produced it."""
    vals = [float(r[metric]) for r in runs if metric in r]
    if not vals:
        return None
    return statistics.median(vals), min(vals), max(vals)


def cell(runs: list[dict[str, Any]], metric: str, fmt: str) -> str:
    """``median (min–max)``, or why there is no number."""
    s = summary(runs, metric)
    if s is None:
        for r in runs:
            if "unsupported" in r:
                return "n/a (" + r["unsupported"] + ")"
            if "error" in r:
                return "error: " + str(r["error"])[:80].replace("|", "/")
        return "–"
    med, lo, hi = s
    if len(runs) == 1 or lo == hi:
        return fmt.format(med)
    return f"{fmt.format(med)} ({fmt.format(lo)}–{fmt.format(hi)})"


def tables(data: dict[str, Any]) -> str:
    """One markdown table per workload."""
    out: list[str] = []
    for w in data["workloads"]:
        res = data["results"].get(w["key"], {})
        if not res:
            continue
        ms = metrics_for(w["key"])
        out.append(f"### {w['title']}\n")
        out.append(f"n = {w['n']:,}; processes × concurrency = {w['processes']} × "
                   f"{w['concurrency']} (per-process-model peers: see settings). "
                   f"Rounds: {max(len(r) for r in res.values())}.\n")
        out.append("| peer | " + " | ".join(m[1] for m in ms) + " |")
        out.append("|---|" + "---|" * len(ms))
        for label, runs in res.items():
            out.append(f"| {label} | " + " | ".join(cell(runs, m, f) for m, _, f, _ in ms) + " |")
        out.append("")
    return "\n".join(out)


def fastest_peer(data: dict[str, Any], key: str, metric: str, higher: bool
                 ) -> tuple[str, float] | None:
    """The best third-party engine (not conveyor, not the raw redis-py queue) by median."""
    best: tuple[str, float] | None = None
    for label, runs in data["results"].get(key, {}).items():
        if label.startswith(PEER_BASELINES):
            continue
        s = summary(runs, metric)
        if s and (best is None or (s[0] > best[1] if higher else s[0] < best[1])):
            best = (label, s[0])
    return best


def _med(data: dict[str, Any], key: str, label: str, metric: str) -> float | None:
    s = summary(data["results"].get(key, {}).get(label, []), metric)
    return s[0] if s else None


def targets(data: dict[str, Any]) -> str:
    """The lead's targets for conveyor on Redis (1 process), each met or missed."""
    conv = "conveyor (redis)"
    rows = ["| target | conveyor | reference | met? |", "|---|---|---|---|"]

    def ratio(key: str, metric: str, factor: float, name: str, label: str = conv) -> None:
        mine = _med(data, key, label, metric)
        best = fastest_peer(data, key, metric, metric != "seconds")
        if mine is None or best is None:
            rows.append(f"| {name} | {mine} | {best} | not measured |")
            return
        r = mine / best[1] if metric != "seconds" else best[1] / mine
        rows.append(f"| {name} | {mine:,.3g} | {best[0]}: {best[1]:,.3g} (×{r:.2f}) | "
                    f"{'yes' if r >= factor else 'MISSED'} |")

    def absolute(key: str, metric: str, limit: float, name: str, higher: bool,
                 label: str = conv) -> None:
        mine = _med(data, key, label, metric)
        ok = mine is not None and (mine >= limit if higher else mine <= limit)
        rows.append(f"| {name} | {mine if mine is None else f'{mine:,.3g}'} | {limit:,} | "
                    f"{'yes' if ok else 'MISSED' if mine is not None else 'not measured'} |")

    ratio("w1_drain_p1", "rate", 3, "drain ≥ 3× fastest peer")
    ratio("w1_live_p1", "rate", 2, "live end to end ≥ 2× fastest peer")
    ratio("w1_enqueue_one", "rate", 1, "enqueue one by one ≥ fastest peer")
    absolute("w1_enqueue_bulk", "rate", 200_000, "bulk enqueue ≥ 200,000/s", True)
    absolute("w2_latency", "p50_ms", 0.5, "idle latency p50 ≤ 0.5 ms", False)
    absolute("w2_latency", "p99_ms", 1.0, "idle latency p99 ≤ 1.0 ms", False)
    absolute("w3_io", "efficiency", 0.95, "W3 efficiency ≥ 0.95", True)
    ratio("w4_batch", "seconds", 3, "W4 ≥ 3× fastest peer")
    ratio("w1_drain_p1", "rate", 1, "SQLite drain ≥ fastest peer on Redis", "conveyor (sqlite)")
    absolute("storage", "pending_bytes_per_job", 400, "≤ 400 B per pending job", False)
    absolute("storage", "finished_bytes_per_job", 1536, "≤ 1.5 KiB per finished job", False)
    return "\n".join(rows)


def svg_chart(data: dict[str, Any]) -> str:
    """Horizontal bar panels (median jobs/s) for the headline throughput workloads."""
    panels = [("w1_enqueue_one", "rate"), ("w1_drain_p1", "rate"), ("w1_live_p1", "rate"),
              ("w4_batch", "rate")]
    titles = {w["key"]: w["title"] for w in data["workloads"]}
    width, bar_h, label_w, pad = 760, 16, 190, 28
    parts: list[str] = []
    y = 10
    for key, metric in panels:
        res = data["results"].get(key, {})
        vals = [(lbl, s[0]) for lbl, runs in res.items() if (s := summary(runs, metric))]
        if not vals:
            continue
        top = max(v for _, v in vals) or 1.0
        parts.append(f'<text x="0" y="{y + 14}" font-weight="bold">{titles.get(key, key)}'
                     f' — median jobs/s</text>')
        y += pad - 6
        for lbl, v in sorted(vals, key=lambda x: -x[1]):
            w = max(1.0, (width - label_w - 90) * v / top)
            color = "#2b7bba" if lbl.startswith("conveyor") else (
                "#999999" if lbl.startswith("redis-py") else "#e07b39")
            parts.append(f'<text x="{label_w - 6}" y="{y + 12}" text-anchor="end">{lbl}</text>')
            parts.append(f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="{bar_h - 3}" '
                         f'fill="{color}"/>')
            parts.append(f'<text x="{label_w + w + 4:.1f}" y="{y + 12}">{v:,.0f}</text>')
            y += bar_h
        y += pad
    body = "\n".join(parts)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{y}" '
            f'font-family="sans-serif" font-size="12">\n'
            f'<rect width="100%" height="100%" fill="white"/>\n{body}\n</svg>\n')


def markdown(data: dict[str, Any]) -> str:
    """The per-run markdown: setup, targets, tables."""
    m = data["machine"]
    versions = "\n".join(f"| {k} | {v} |" for k, v in sorted(data["versions"].items()))
    settings = "\n".join(f"| {k} | {v} |" for k, v in data["settings"].items())
    return f"""## Run {data['started']} ({data['mode']})

Command: `{data['command']}` — {data['rounds']} round(s), peers interleaved round by round;
cells are median (min–max) over the rounds.

Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gb']} GiB RAM, {m['kernel']},
Python {m['python']}, redis-server {m['redis']}. Elapsed: {data.get('elapsed_min', 0):.1f} min.

| engine | version |
|---|---|
{versions}

| peer | settings (P = worker processes, C = concurrency per process) |
|---|---|
{settings}

### conveyor targets (Redis, 1 worker process)

{targets(data)}

{tables(data)}
"""
