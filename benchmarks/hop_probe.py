"""Hand-offs into the event loop per ``async def`` job, and the worker's CPU per job (issue 53,
W0b: a drain of jobs whose body is one pipelined redis.asyncio round trip).

``python -m benchmarks.hop_probe [--jobs 3000] [--concurrency 8] [--rounds 1]
[--before OTHER/src]``

One private redis-server. Each run, in a fresh interpreter (``--before``: another checkout's
``src`` first on its path, run beside this one, rounds alternating): ``--jobs`` async jobs
enqueued in bulk, then one in-process worker (``Launcher``) of ``--concurrency`` slots drains
them. Counted over the drain: ``call_soon_threadsafe`` calls on any event loop (each one a
write to the loop's wake-up pipe and a read of it: a hand-off from another thread), the
fetcher's wake-ups (``set`` of ``InFlight``'s slot event, each a thread switch), and the
process's CPU time (``time.process_time``: the worker's threads, the job bodies included).

The hand-offs are counts and hold on a loaded machine; CPU per job mostly does; the wall rate
printed beside them is for a quiet one (the coordinator's ``make bench-io``).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import threading
import time
from typing import Any

import redis
from benchmarks.server_cpu import run_child


def child(url: str, jobs: int, concurrency: int) -> dict[str, Any]:
    """One drain in this interpreter, by whichever ``conveyor`` is first on the path."""
    import redis.asyncio as aredis

    from conveyor import Conveyor
    from conveyor.worker.config import WorkerConfig
    from conveyor.worker.launcher import Launcher

    crossings = [0]
    original = asyncio.BaseEventLoop.call_soon_threadsafe

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        crossings[0] += 1
        return original(self, *args, **kwargs)

    asyncio.BaseEventLoop.call_soon_threadsafe = counting  # type: ignore[method-assign,assignment]
    app = Conveyor(url)
    clients: dict[int, Any] = {}
    ran = [0]
    all_ran = threading.Event()

    @app.job(name="probe.aredis")
    async def body(n: int) -> None:  # W0b's body: one pipelined round trip
        loop_id = id(asyncio.get_running_loop())
        r = clients.get(loop_id)
        if r is None:
            r = clients[loop_id] = aredis.Redis.from_url(url)
        async with r.pipeline(transaction=False) as pipe:
            pipe.set(f"probe:io:{n % 64}", n)
            pipe.expire(f"probe:io:{n % 64}", 60)
            await pipe.execute()
        ran[0] += 1  # on the one loop thread
        if ran[0] >= jobs:
            all_ran.set()

    body.enqueue_many([(i,) for i in range(jobs)], return_refs=False)
    launcher = Launcher(app, WorkerConfig(concurrency=concurrency, worker_id="hop-probe"))
    wakes = [0]

    class Counted(threading.Event):
        def set(self) -> None:
            wakes[0] += 1
            super().set()

    launcher.inflight._slot_freed = Counted()  # the fetcher's wake-up (worker/inflight.py)
    crossings[0] = 0
    cpu, start = time.process_time(), time.perf_counter()
    launcher.start()
    try:
        if not all_ran.wait(300):
            raise RuntimeError(f"{ran[0]}/{jobs} jobs ran in 300 s")
        wall = time.perf_counter() - start
        cpu = time.process_time() - cpu
        hops, woken = crossings[0], wakes[0]
    finally:
        launcher.stop(5.0)
        app.close()
    return {"hops": hops / jobs, "wakes": woken / jobs, "cpu_us": cpu / jobs * 1e6,
            "rate": jobs / wall}


def main(argv: list[str] | None = None) -> int:
    """Run the drains and print one line per run and the medians."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.hop_probe")
    p.add_argument("--jobs", type=int, default=3000)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--before", default="", help="another checkout's src, run beside this one")
    p.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        import json

        url, jobs, concurrency = args.child
        print("RESULT " + json.dumps(child(url, int(jobs), int(concurrency))), flush=True)
        return 0
    from benchmarks.servers import RedisServer

    server = RedisServer()
    variants = {"this": None, **({"before": args.before} if args.before else {})}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    try:
        for round_ in range(args.rounds):
            names = list(variants) if round_ % 2 == 0 else list(reversed(variants))
            for name in names:
                redis.Redis.from_url(server.url).flushall()
                got = run_child("benchmarks.hop_probe", [server.url, str(args.jobs),
                                                          str(args.concurrency)],
                                variants[name], f"hop probe ({name})")
                runs[name].append(got)
                print(f"round {round_ + 1} {name:7s} hand-offs/job {got['hops']:.3f}  "
                      f"fetcher wake-ups/job {got['wakes']:.3f}  "
                      f"CPU {got['cpu_us']:6.1f} µs/job  {got['rate']:7,.0f} jobs/s", flush=True)
    finally:
        server.stop()
    print(f"\n{args.jobs:,} async jobs (one pipelined redis.asyncio round trip each), one worker "
          f"-c {args.concurrency}; medians over {args.rounds} round(s)\n")
    print("| source | loop hand-offs/job | fetcher wake-ups/job | CPU µs/job | jobs/s |\n"
          "|---|---|---|---|---|")
    for name, rounds in runs.items():
        med = {k: statistics.median(r[k] for r in rounds)
               for k in ("hops", "wakes", "cpu_us", "rate")}
        print(f"| {name} | {med['hops']:.3f} | {med['wakes']:.3f} | {med['cpu_us']:.1f} "
              f"| {med['rate']:,.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
