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
    "w6_fanout": [("seconds", "seconds", "{:.3f}", False),
                  ("rate", "jobs/s", "{:,.0f}", True)],
    "w7_chain": [("seconds", "seconds", "{:.3f}", False),
                 ("ms_per_step", "ms/step", "{:.2f}", False)],
    "w5_cpu": [("seconds", "seconds", "{:.3f}", False),
               ("efficiency", "efficiency", "{:.3f}", True)],
    "storage": [("pending_bytes_per_job", "B/pending job", "{:,.0f}", False),
                ("finished_bytes_per_job", "B/finished job", "{:,.0f}", False)],
    "overhead": [("plain_rate", "plain jobs/s", "{:,.0f}", True),
                 ("batch_rate", "batch jobs/s", "{:,.0f}", True),
                 ("batch_vs_plain", "batch / plain", "{:.2f}", True),
                 ("plain_commands_per_job", "Redis cmds/job plain", "{:.1f}", False),
                 ("batch_commands_per_job", "Redis cmds/job batch", "{:.1f}", False),
                 ("plain_scripts_per_job", "scripts/job plain", "{:.2f}", False),
                 ("batch_scripts_per_job", "scripts/job batch", "{:.2f}", False)],
    "bigbatch": [("create_seconds", "create s", "{:.1f}", False),
                 ("client_peak_mb", "client peak MB", "{:.0f}", False),
                 ("status_read_ms", "status read ms", "{:.2f}", False)],
}
PEER_BASELINES = ("conveyor", "redis-py")
RAW = "redis-py LPUSH/BRPOP"  # the raw queue: the same body with no engine around it
PG = "conveyor (postgres)"
PG_PEERS = ("procrastinate", "pgqueuer")  # the PostgreSQL engines (suite.PG_PEERS)
CPU_METRIC = ("cpu_us_per_job", "worker CPU µs/job", "{:,.0f}", False)


def metrics_for(key: str) -> list[tuple[str, str, str, bool]]:
    """The metrics shown for a workload key (drains also show the worker's CPU per job)."""
    if key.startswith(("w0", "w1")):
        return METRICS["w1"] + ([CPU_METRIC] if "drain" in key else [])
    return METRICS["w3_io" if key == "w3_async" else key]


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
                return "n/a (" + str(r["unsupported"]) + ")"
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
            ns = {r.get("config", {}).get("n", w["n"]) for r in runs}
            shown = label if ns <= {w["n"]} else f"{label} (n = {min(ns):,})"
            out.append(f"| {shown} | " + " | ".join(cell(runs, m, f) for m, _, f, _ in ms) + " |")
        out.append("")
    return "\n".join(out)


def fastest_peer(data: dict[str, Any], key: str, metric: str, higher: bool,
                 among: tuple[str, ...] = ()) -> tuple[str, float] | None:
    """The best third-party engine (not conveyor, not the raw redis-py queue) by median;
    ``among``: only these labels (the PostgreSQL engines)."""
    best: tuple[str, float] | None = None
    for label, runs in data["results"].get(key, {}).items():
        if label.startswith(PEER_BASELINES) or (among and label not in among):
            continue
        s = summary(runs, metric)
        if s and (best is None or (s[0] > best[1] if higher else s[0] < best[1])):
            best = (label, s[0])
    return best


def _num(value: float) -> str:
    """1,234 for big numbers, 3 significant digits for small ones."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


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
            shown = "–" if mine is None else _num(mine)
            rows.append(f"| {name} | {shown} | no peer measured | not measured |")
            return
        r = mine / best[1] if metric != "seconds" else best[1] / mine
        rows.append(f"| {name} | {_num(mine)} | {best[0]}: {_num(best[1])} (×{r:.2f}) | "
                    f"{'yes' if r >= factor else 'MISSED'} |")

    def absolute(key: str, metric: str, limit: float, name: str, higher: bool,
                 label: str = conv) -> None:
        mine = _med(data, key, label, metric)
        ok = mine is not None and (mine >= limit if higher else mine <= limit)
        rows.append(f"| {name} | {'–' if mine is None else _num(mine)} | {limit:,} | "
                    f"{'yes' if ok else 'MISSED' if mine is not None else 'not measured'} |")

    ratio("w1_drain_p1", "rate", 3, "drain ≥ 3× fastest peer")
    ratio("w1_live_p1", "rate", 2, "live end to end ≥ 2× fastest peer")
    ratio("w1_enqueue_one", "rate", 1, "enqueue one by one ≥ fastest peer")
    absolute("w1_enqueue_bulk", "rate", 200_000, "bulk enqueue ≥ 200,000/s", True)
    absolute("w2_latency", "p50_ms", 0.5, "idle latency p50 ≤ 0.5 ms", False)
    absolute("w2_latency", "p99_ms", 1.0, "idle latency p99 ≤ 1.0 ms", False)
    absolute("w3_io", "efficiency", 0.95, "W3 efficiency ≥ 0.95", True)
    ratio("w4_batch", "seconds", 3, "W4 ≥ 3× fastest peer")
    ratio("w6_fanout", "seconds", 3, "W6 fan-out + callback ≥ 3× fastest peer")
    ratio("w7_chain", "seconds", 1, "W7 chain of 1,000 steps faster than the fastest peer")
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


HEADLINE = [  # (workload key, metric, column title, format)
    ("w1_drain_p1", "rate", "drain, 1 process (jobs/s)", "{:,.0f}"),
    ("w1_live_p1", "rate", "live end to end (jobs/s)", "{:,.0f}"),
    ("w1_enqueue_one", "rate", "enqueue one by one (jobs/s)", "{:,.0f}"),
    ("w2_latency", "p99_ms", "idle latency p99 (ms)", "{:.2f}"),
    ("w4_batch", "seconds", "5,000-job batch (s)", "{:.2f}"),
]


HEADLINE_IO = [  # the I/O columns lead the table (from the I/O run)
    ("w0a_drain", "rate", "job = 1 Redis round trip: drain (jobs/s)", "{:,.0f}"),
    ("w0a_live", "rate", "job = 1 Redis round trip: live (jobs/s)", "{:,.0f}"),
]


# The README's short table (issue 51: a first page with a nine-column table before the first
# line of code): one column of jobs that do I/O, then drain, latency and a batch.
README_COLUMNS = ("w0a_live", "w1_drain_p1", "w2_latency", "w4_batch")


def headline(data: dict[str, Any], io: dict[str, Any] | None = None,
             pg: dict[str, Any] | None = None) -> str:
    """The README's table: conveyor's engines and the fastest third-party peer in each of
    ``README_COLUMNS`` (every other column, and the hand-written Redis queue as the ceiling
    of a Python client, are in docs/benchmarks.md). The column of jobs that do I/O comes
    first, from ``io`` (or ``data`` when it has it). ``pg`` (a ``--only pg`` run) adds
    conveyor on PostgreSQL and the fastest PostgreSQL engine, from that run."""
    cols = [(io or data, *h) for h in HEADLINE_IO] + [(data, *h) for h in HEADLINE]
    cols = [c for c in cols if c[1] in README_COLUMNS]
    labels: list[str] = []
    for d in (io or data, data):
        for res in d["results"].values():
            labels += [lbl for lbl in res if lbl not in labels]
    rows = ["| | " + " | ".join(c[3] for c in cols) + " |", "|---|" + "---|" * len(cols)]
    for lbl in [x for x in labels if x.startswith("conveyor") and (pg is None or x != PG)]:
        rows.append(f"| **{lbl}** | " + " | ".join(
            _fmt(_med(d, k, lbl, m), f) for d, k, m, _, f in cols) + " |")
    if pg is not None:
        rows.append(f"| **{PG}** | " + " | ".join(
            _fmt(_med(pg, k, PG, m), f) for _, k, m, _, f in cols) + " |")
    best = []
    for d, k, m, _, f in cols:
        b = fastest_peer(d, k, m, m == "rate")
        best.append("–" if b is None else f"{f.format(b[1])} ({b[0]})")
    rows.append("| fastest other engine | " + " | ".join(best) + " |")
    if pg is not None:
        best = []
        for _, k, m, _, f in cols:
            b = fastest_peer(pg, k, m, m == "rate", PG_PEERS)
            best.append("–" if b is None else f"{f.format(b[1])} ({b[0]})")
        rows.append("| fastest PostgreSQL engine | " + " | ".join(best) + " |")
    return "\n".join(rows)


def _fmt(value: float | None, fmt: str) -> str:
    return "–" if value is None else fmt.format(value)


def docs_page(data: dict[str, Any], results_file: str, analysis: str = "",
              io_section: str = "", pg_section: str = "") -> str:
    """docs/benchmarks.md: ``io_section`` (the jobs that do I/O) first, ``pg_section``
    (PostgreSQL) next, then how the suite works, the full run's setup, targets and tables,
    then ``analysis`` (``benchmarks/analysis.md``: the missed targets and their profiles)."""
    return f"""# Benchmarks

conveyor side by side with Celery, RQ, Dramatiq, arq, SAQ, Huey and taskiq, on the same
machine, in runs of the suite in [`benchmarks/`](../benchmarks/README.md). This page is
written by the suite itself (`make bench`, `make bench-io`); the full suite's numbers are
from `{results_file}`. Rerun it on your own machine before you trust any of them.

{io_section}
{pg_section}
## The full suite: no-op jobs and the rest

![median jobs/s per engine](benchmarks.svg)

## How it measures

- The suite starts its own `redis-server` (no persistence, nothing else on it) and a local
  3-master Redis Cluster, and installs every peer from PyPI into its own virtual environment
  (their redis-py pins conflict).
- **Same job, same completion signal.** Every engine runs the same body
  (`benchmarks/peers/body.py`). Each worker process counts finished jobs in memory and adds
  them to one Redis counter every 2 ms; the driver polls that counter every millisecond. (A
  synchronous `INCR` per job would cost each engine one Redis round trip per job, ~130 µs here,
  and measure the counter instead of the engine.) RQ's forking worker, whose work horse ends
  with `os._exit`, counts each job at once.
- **Same resources.** The same number of worker processes and the same total concurrency where
  the engine's model allows; engines that run one job at a time per process (Celery prefork,
  RQ) get as many processes as the others get slots in W3.
- **Interleaved rounds.** Every (workload, engine) pair runs in a fresh subprocess; rounds go
  A B C … A B C …, and cells are the median with min–max over the rounds.
- **Documented fast settings** for each peer (table below): prefetching, no gossip or
  heartbeats where the engine allows turning them off, results stored only where a workload
  needs per-job status.
- conveyor always tracks every job (record, event log, lease, acknowledgement); it gets no
  lighter mode for the benchmark.

Workloads: **W1** no-op jobs — enqueue one by one, enqueue in bulk, drain a preloaded queue,
and live end to end (idle workers, jobs enqueued one by one, time to the last completion);
**W2** idle latency, jobs enqueued one at a time at 100/s, enqueue-to-start percentiles;
**W3** 2,000 jobs sleeping 20 ms at total concurrency 50, efficiency against the ideal;
**W4** a 5,000-job batch or group, timed until the engine's own API reports it complete;
**W5** 200 jobs of ~20 ms pure-Python work on 2 processes; **storage** Redis bytes per pending
and per finished job (SQLite: file bytes); **1,000,000-job batch** creation time, client peak
memory, status-read time.

{markdown(data)}
{analysis}"""


README_START = "<!-- bench:start -->"
README_END = "<!-- bench:end -->"


def readme_block(data: dict[str, Any], io: dict[str, Any] | None = None,
                 pg: dict[str, Any] | None = None) -> str:
    """The README's short headline table with a line saying where it comes from."""
    m = data["machine"]
    runs = [f"`make bench` ({data['started']})"]
    if io is not None and io is not data:
        runs.append(f"`make bench-io` ({io['started']}, the Redis round-trip column)")
    if pg is not None:
        runs.append(f"`make bench-pg` ({pg['started']}, the PostgreSQL rows)")
    return (f"{README_START}\n{headline(data, io, pg)}\n\nMedians of interleaved "
            f"rounds on {m['cores']} cores ({m['cpu']}), 1 worker process: "
            f"{', '.join(runs)}. Compare within a column; how each run was loaded, the other "
            f"columns and every setting are in [docs/benchmarks.md](docs/benchmarks.md)."
            f"\n{README_END}")


def replace_block(text: str, block: str) -> str:
    """``text`` with the marked README block replaced (or appended when absent)."""
    start, end = text.find(README_START), text.find(README_END)
    if start < 0 or end < 0:
        return text.rstrip("\n") + "\n\n" + block + "\n"
    return text[:start] + block + text[end + len(README_END):]


# --- jobs that do I/O (issue #17) ------------------------------------------------------------

IO_SLOTS = 8
IO_BODIES = [("w0a", "W0a: one Redis round trip, sync"),
             ("w0b", "W0b: one Redis round trip, asyncio"),
             ("w0c", "W0c: one SQLite write")]


def io_targets(d: dict[str, Any]) -> str:
    """Every #17 target: conveyor's number, the reference, the ratio, met or missed."""
    conv = "conveyor (redis)"
    rows = ["| target | conveyor | reference | ratio | met? |", "|---|---|---|---|---|"]

    def row(name: str, mine: float | None, ref: tuple[str, float] | None, factor: float,
            higher: bool = True) -> None:
        if mine is None or ref is None:
            rows.append(f"| {name} | {'–' if mine is None else _num(mine)} | "
                        f"{'–' if ref is None else ref[0]} | – | not measured |")
            return
        r = mine / ref[1]
        ok = r >= factor if higher else r <= factor
        rows.append(f"| {name} | {_num(mine)} | {ref[0]}: {_num(ref[1])} | ×{r:.2f} | "
                    f"{'met' if ok else '**missed**'} |")

    def labelled(key: str, label: str, metric: str) -> tuple[str, float] | None:
        v = _med(d, key, label, metric)
        return None if v is None else (label, v)

    for code, title in IO_BODIES:
        for form in ("drain", "live"):
            key = f"{code}_{form}"
            mine = _med(d, key, conv, "rate")
            row(f"{title}, {form} ≥ 0.9× raw queue", mine, labelled(key, RAW, "rate"), 0.9)
            row(f"{title}, {form} ≥ 2× fastest peer", mine, fastest_peer(d, key, "rate", True),
                2.0)
    row("enqueue one by one ≥ 0.9× raw `LPUSH`", _med(d, "w1_enqueue_one", conv, "rate"),
        labelled("w1_enqueue_one", RAW, "rate"), 0.9)
    eff = _med(d, "w3_async", conv, "efficiency")
    rows.append(f"| W3 async (20 ms `asyncio.sleep`) efficiency ≥ 0.80 | "
                f"{'–' if eff is None else f'{eff:.3f}'} | 0.80 (raw asyncio queue: "
                f"{_fmt(_med(d, 'w3_async', RAW, 'efficiency'), '{:.3f}')}) | – | "
                f"{'not measured' if eff is None else 'met' if eff >= 0.8 else '**missed**'} |")
    row("idle latency p50 ≤ 1.10× raw `BRPOP` (Redis)", _med(d, "w2_latency", conv, "p50_ms"),
        labelled("w2_latency", RAW, "p50_ms"), 1.10, higher=False)
    row("idle latency p99 ≤ 1.25× raw `BRPOP` (Redis)", _med(d, "w2_latency", conv, "p99_ms"),
        labelled("w2_latency", RAW, "p99_ms"), 1.25, higher=False)
    sq = _med(d, "w2_latency", "conveyor (sqlite)", "p50_ms")
    verdict = "not measured" if sq is None else "met" if sq <= 1 else "**missed**"
    rows.append(f"| idle latency p50 ≤ 1 ms (SQLite) | {'–' if sq is None else f'{sq:.2f}'} | "
                f"1 ms | – | {verdict} |")
    cl = "conveyor (cluster)"
    row("Cluster: enqueue one by one ≥ 0.8× single Redis", _med(d, "w1_enqueue_one", cl, "rate"),
        labelled("w1_enqueue_one", conv, "rate"), 0.8)
    row("Cluster: W0a live end to end ≥ 0.8× single Redis", _med(d, "w0a_live", cl, "rate"),
        labelled("w0a_live", conv, "rate"), 0.8)
    return "\n".join(rows)


def cpu_table(d: dict[str, Any]) -> str:
    """Worker CPU µs per job over each drain, per engine, and conveyor's minus the raw
    queue's (the engine's own CPU per job)."""
    keys = [(f"{c}_drain", t.split(":")[0]) for c, t in IO_BODIES] + [("w1_drain_p1", "W1 no-op")]
    keys = [(k, t) for k, t in keys if k in d["results"]]
    labels: list[str] = []
    for k, _ in keys:
        labels += [lbl for lbl in d["results"][k] if lbl not in labels]
    rows = ["| worker CPU µs per job (drain) | " + " | ".join(t for _, t in keys) + " |",
            "|---|" + "---|" * len(keys)]
    for lbl in labels:
        rows.append(f"| {lbl} | " + " | ".join(
            _fmt(_med(d, k, lbl, "cpu_us_per_job"), "{:,.0f}") for k, _ in keys) + " |")
    diff = []
    for k, _ in keys:
        mine, raw = (_med(d, k, x, "cpu_us_per_job") for x in ("conveyor (redis)", RAW))
        diff.append("–" if mine is None or raw is None else f"**{mine - raw:,.0f}**")
    rows.append("| **conveyor engine CPU per job** (conveyor − raw queue) | "
                + " | ".join(diff) + " |")
    return "\n".join(rows)


def _sharing(m: dict[str, Any]) -> str:
    """What else the machine did: the 1-minute load average as the run started (a run saved
    before it was recorded says the machine was shared, as those runs were)."""
    load = m.get("load_before")
    if load is None:
        return "**shared with other users' work while it ran**"
    if load < 0.5:
        return f"with nothing else running (load average {load:.2f} as it started)"
    return f"**shared with other work** (load average {load:.2f} as it started)"


def io_page(d: dict[str, Any], results_file: str, analysis: str = "") -> str:
    """The leading section of docs/benchmarks.md: jobs that do I/O, their targets, the
    engine's CPU per job, and ``analysis`` (``benchmarks/analysis_io.md``, by hand)."""
    m = d["machine"]
    io_keys = {w["key"] for w in d["workloads"]}
    shown = dict(d, workloads=[w for w in d["workloads"] if w["key"] in io_keys])
    return f"""## Jobs that do I/O

Real jobs wait on something. Every engine here runs the same three bodies with **1 worker
process and concurrency 8** (8 threads, or 8 asyncio slots for the asyncio engines and bodies),
and each is set beside the **raw queue**: a hand-written redis-py `LPUSH`/`BRPOP` queue whose
worker has the same 8 slots (threads for the sync bodies, asyncio tasks for the async one) and
counts completions the same way — the same body with nothing of an engine around it.

- **W0a** one pipelined Redis round trip of two commands (`INCR` + `EXPIRE` on a key of the
  job's own), redis-py, sync: conveyor (thread pool), the raw queue (threads), Huey, Dramatiq,
  Celery (threads).
- **W0b** the same with `redis.asyncio` in an `async def` job: conveyor (its event loop), the raw
  queue (asyncio), arq, SAQ, taskiq.
- **W0c** one `INSERT` + `COMMIT` into a SQLite file of the worker process's own (WAL,
  `synchronous=NORMAL`, one connection per process): the W0a engines.

Each as **drain** (5,000 jobs preloaded, the worker started after; first to last completion)
and **live end to end** (idle worker, 5,000 jobs enqueued one by one; start of enqueue to last
completion). **Engine CPU per job**: each worker process reads its own CPU time
(`getrusage(RUSAGE_SELF)`, user + system, all threads) at its first completion and at its last
report; the difference over the jobs in between is its CPU per job; conveyor's minus the raw
queue's with the same body is what the engine itself costs per job. The I/O run also measures
the runs the targets compare against: enqueue one by one, W2 idle latency, W1 no-op drain and
live (conveyor and the raw queue only), and W3 with an `async def` 20 ms `asyncio.sleep` body at
concurrency 50.

Run `{results_file}`: `{d['command']}`, {d['rounds']} interleaved rounds, cells median
(min–max). {m['cpu']}, {m['cores']} cores {_sharing(m)} — the spread within a row is the
machine, so read ratios between engines of the same round rather than absolute numbers.
Python {m['python']}, redis-server {m['redis']}.
Rerun: `make bench-io` (`python -m benchmarks --only io --rounds 2`).

### Targets (issue #17)

{io_targets(d)}

### Engine CPU per job

{cpu_table(d)}

The flush of the completion counter (one pipelined `INCRBY` + `RPUSH` every 2 ms while jobs
finish) is in every row alike and cancels out of the difference.

{tables(shown)}
{analysis}
"""


# --- PostgreSQL (issue #18) -------------------------------------------------------------------

PG_START = "<!-- bench-pg:start -->"
PG_END = "<!-- bench-pg:end -->"
PROBE = "measured in `benchmarks/pg_probe.py`"


def pg_targets(d: dict[str, Any]) -> str:
    """Every #18 target: conveyor on PostgreSQL, the reference, the ratio, met or missed."""
    rows = ["| target | conveyor (postgres) | reference | ratio | met? |", "|---|---|---|---|---|"]

    def row(name: str, key: str, metric: str, ref: tuple[str, float] | None,
            factor: float) -> None:
        mine = _med(d, key, PG, metric)
        if mine is None or ref is None:
            rows.append(f"| {name} | {'–' if mine is None else _num(mine)} | "
                        f"{'not measured' if ref is None else ref[0]} | – | "
                        f"not measured |")
            return
        r = mine / ref[1] if metric != "seconds" else ref[1] / mine  # ×: how many times faster
        rows.append(f"| {name} | {_num(mine)} | {ref[0]}: {_num(ref[1])} | ×{r:.2f} | "
                    f"{'met' if r >= factor else '**missed**'} |")

    row("W1 drain ≥ 3× fastest PostgreSQL engine", "w1_drain_p1", "rate",
        fastest_peer(d, "w1_drain_p1", "rate", True, PG_PEERS), 3)
    row("W4 5,000-job batch ≥ 3× fastest PostgreSQL engine (s)", "w4_batch", "seconds",
        fastest_peer(d, "w4_batch", "seconds", False, PG_PEERS), 3)
    redis = _med(d, "w1_drain_p1", "conveyor (redis)", "rate")
    row("W1 drain within 2× of conveyor on Redis (≥ 0.5×)", "w1_drain_p1", "rate",
        None if redis is None else ("conveyor (redis)", redis), 0.5)
    rows.append(f"| enqueue inside an existing transaction adds < 0.3 ms | – | – | – | {PROBE} |")
    rows.append(f"| drain with 1,000,000 finished jobs ≥ 90% of drain on empty tables | – | – | "
                f"– | {PROBE} |")
    return "\n".join(rows)


PG_SUMMARY = [  # (workload key, metric, column title, format)
    ("w0d_drain", "rate", "W0d drain (jobs/s)", "{:,.0f}"),
    ("w0d_live", "rate", "W0d live (jobs/s)", "{:,.0f}"),
    ("w1_enqueue_one", "rate", "W1 enqueue one by one (jobs/s)", "{:,.0f}"),
    ("w1_enqueue_bulk", "rate", "W1 bulk enqueue (jobs/s)", "{:,.0f}"),
    ("w1_drain_p1", "rate", "W1 drain (jobs/s)", "{:,.0f}"),
    ("w1_live_p1", "rate", "W1 live (jobs/s)", "{:,.0f}"),
    ("w2_latency", "p50_ms", "W2 p50 (ms)", "{:.2f}"),
    ("w2_latency", "p99_ms", "W2 p99 (ms)", "{:.2f}"),
    ("w3_io", "efficiency", "W3 efficiency", "{:.3f}"),
    ("w4_batch", "seconds", "W4 5,000-job batch (s)", "{:.2f}"),
    ("storage", "pending_bytes_per_job", "B / pending job", "{:,.0f}"),
    ("storage", "finished_bytes_per_job", "B / finished job", "{:,.0f}"),
]


def pg_summary(d: dict[str, Any]) -> str:
    """One row per engine of a ``--only pg`` run, one column per workload (medians)."""
    labels: list[str] = []
    for res in d["results"].values():
        labels += [lbl for lbl in res if lbl not in labels]
    order = [PG, *PG_PEERS, "conveyor (redis)", "conveyor (sqlite)", RAW]
    labels = [x for x in order if x in labels] + [x for x in labels if x not in order]
    rows = ["| | " + " | ".join(c[2] for c in PG_SUMMARY) + " |",
            "|---|" + "---|" * len(PG_SUMMARY)]
    for lbl in labels:
        shown = f"**{lbl}**" if lbl == PG else lbl
        rows.append(f"| {shown} | " + " | ".join(
            _fmt(_med(d, k, lbl, m), f) for k, m, _, f in PG_SUMMARY) + " |")
    return "\n".join(rows)


def pg_page(d: dict[str, Any], results_file: str, analysis: str = "") -> str:
    """The PostgreSQL section of docs/benchmarks.md (between its markers): the setup, the #18
    targets, every table of the run, and ``analysis`` (``benchmarks/analysis_pg.md``)."""
    m = d["machine"]
    versions = ", ".join(f"{k} {v}" for k, v in sorted(d["versions"].items()))
    settings = "\n".join(f"| {k} | {v} |" for k, v in d["settings"].items())
    return f"""{PG_START}
## PostgreSQL

conveyor on PostgreSQL beside the two PostgreSQL engines of the field that run on these
machines' Python 3.11, **procrastinate** and **PgQueuer** (oban's Python port needs Python
3.12), and beside conveyor on Redis and on SQLite, all in the same run. The suite starts its
own PostgreSQL {m.get('postgres', '?')} (Debian's binaries, the test suite's throwaway cluster
in a temp dir: `synchronous_commit=off`, `shared_buffers=64MB`, everything else default) with a
database per engine (conveyor: schema `bench`), emptied before every run.

- **W0d** one `INSERT` + `COMMIT` into a table of its own database through psycopg 3: a
  connection per thread for the thread-pool engines (conveyor on every backend, the raw
  redis-py queue), a pool of `AsyncConnection`s per event loop for the asyncio engines
  (procrastinate, PgQueuer); 5,000 jobs, 1 worker process × 8 slots, drained and live.
- **W1–W4** and **storage** as in the full suite (10,000 no-op jobs; W4 a 5,000-job batch).
  Neither PostgreSQL engine has a group API: their W4 enqueues the 5,000 jobs in one bulk call
  and polls the engine's own status API (procrastinate `list_queues`, PgQueuer `job_status`).
- **Storage** for the PostgreSQL engines is `pg_total_relation_size` (heap, TOAST, every
  index) summed over the engine's tables, per pending and per finished job, measured 1 s
  after the last completion (dead rows not yet vacuumed count: that is the table's size).

Run `{results_file}`: `{d['command']}`, {d['rounds']} interleaved rounds, cells median
(min–max), {m['cpu']}, {m['cores']} cores **shared with other people's work while it ran**:
the spread within a row is the machine; read ratios within a round more than absolute
numbers. Versions: {versions}. Rerun: `make bench-pg`.

{pg_summary(d)}

The raw redis-py queue runs only W0d (the same body with no engine around it); "–": not run
(the per-workload tables below say why where an engine has no API for it).

### Targets (issue #18)

{pg_targets(d)}

| peer | settings (P = worker processes, C = concurrency per process) |
|---|---|
{settings}

{tables(d)}
{analysis}
{PG_END}"""


def replace_pg_section(text: str, section: str) -> str:
    """docs/benchmarks.md with its PostgreSQL section replaced; inserted before the full
    suite's section when the page has none yet."""
    start, end = text.find(PG_START), text.find(PG_END)
    if start >= 0 and end >= 0:
        return text[:start] + section + text[end + len(PG_END):]
    anchor = text.find("## The full suite")
    if anchor < 0:
        return text.rstrip("\n") + "\n\n" + section + "\n"
    return text[:anchor] + section + "\n\n" + text[anchor:]
