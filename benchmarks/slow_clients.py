"""Slow clients against ``conveyor web``: are they cut off, and what do they cost in memory?

Starts ``conveyor web`` (a subprocess on 127.0.0.1, over a fresh SQLite file), then opens
``--clients`` connections at once; each sends the head of a ``POST /action`` announcing a
1 MiB form body and then trickles the body at ``--rate`` KiB per second, as a slowloris
client would. Reports, per scenario, how the server answered, when it closed the connections,
how many body bytes the clients got out, and the server's resident memory (VmRSS) before and
at its peak. Loopback only, bounded in clients (≤ 200, ≤ 4 runs) and time (each client gives
up after ``--limit`` seconds, which counts as "still open").

    python -m benchmarks.slow_clients              # 100 then 60 clients, 16 KiB/s, 60 s cap
    python -m benchmarks.slow_clients --clients 50 --rate 64

Scenarios: ``open`` (no token, as on 127.0.0.1 by default: bodies are read, up to the 10 s
body deadline), ``locked`` (a token; the clients have none, so no body is read at all), and
``oversize`` (a 2 MiB ``Content-Length``: refused before the body).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

MIB = 1024 * 1024
TOKEN = "slow-clients-benchmark-token"


@dataclass
class Outcome:
    """What one client saw."""

    status: int | None = None  # the status line's code, if any response came
    closed_after: float | None = None  # seconds from connect until the server closed
    sent: int = 0  # body bytes written before the close
    refused: bool = False  # the connection itself failed (listen backlog full)


@dataclass
class Memory:
    """VmRSS samples of a process, in KiB."""

    pid: int
    samples: list[int] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def rss(self) -> int:
        """The current resident set size in KiB."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def sample(self) -> None:
        """Sample every 50 ms until ``stop``."""
        while not self._stop.wait(0.05):
            self.samples.append(self.rss())

    def stop(self) -> None:
        """End sampling."""
        self._stop.set()


async def _client(port: int, length: int, rate: int, limit: float, out: Outcome) -> None:
    start = time.monotonic()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        out.refused = True
        return
    head = (f"POST /action HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            "Content-Type: application/x-www-form-urlencoded\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()

    async def trickle() -> None:
        writer.write(head)
        piece = b"x" * (rate * 1024)
        while out.sent < length:
            writer.write(piece[: length - out.sent])
            await writer.drain()
            out.sent += min(len(piece), length - out.sent)
            await asyncio.sleep(1.0)

    sender = asyncio.create_task(trickle())
    try:
        reply = await asyncio.wait_for(reader.read(), limit)  # until the server closes
        if reply.startswith(b"HTTP/1.1 "):
            out.status = int(reply.split(b" ", 2)[1])
        out.closed_after = time.monotonic() - start
    except ConnectionError:  # reset: closed with our bytes unread, the answer lost with it
        out.closed_after = time.monotonic() - start
    except asyncio.TimeoutError:
        pass  # still open after --limit seconds: not cut off
    finally:
        sender.cancel()
        writer.close()


async def _run_clients(port: int, clients: int, length: int, rate: int,
                       limit: float) -> list[Outcome]:
    outcomes = [Outcome() for _ in range(clients)]
    await asyncio.gather(*(_client(port, length, rate, limit, o) for o in outcomes))
    return outcomes


def _start_web(db: Path, token: str | None) -> tuple[subprocess.Popen[str], int]:
    env = dict(os.environ, CONVEYOR_WEB_TOKEN=token or "")
    proc = subprocess.Popen(
        [sys.executable, "-m", "conveyor.cli.main", "web", "--port", "0", "--url",
         f"sqlite:///{db}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline()  # "conveyor web on http://127.0.0.1:PORT (…)"
    if " on http://" not in line:
        proc.kill()
        raise SystemExit(f"conveyor web did not start: {line}")
    port = int(line.split(" on http://", 1)[1].split()[0].rsplit(":", 1)[1])
    return proc, port


def scenario(name: str, db: Path, token: str | None, clients: int, length: int, rate: int,
             limit: float) -> None:
    """Run one scenario against a fresh ``conveyor web`` and print its line."""
    proc, port = _start_web(db, token)
    try:
        time.sleep(0.5)
        memory = Memory(proc.pid)
        before = memory.rss()
        sampler = threading.Thread(target=memory.sample, daemon=True)
        sampler.start()
        outcomes = asyncio.run(_run_clients(port, clients, length, rate, limit))
        memory.stop()
        sampler.join()
        after = memory.rss()
    finally:
        proc.terminate()
        proc.wait(10)
    closed = [o.closed_after for o in outcomes if o.closed_after is not None]
    statuses: dict[str, int] = {}
    for o in outcomes:
        key = (str(o.status) if o.status else "refused" if o.refused
               else "reset" if o.closed_after is not None else "still open")
        statuses[key] = statuses.get(key, 0) + 1
    peak = max(memory.samples or [before])
    print(f"{name:9} {clients} clients, Content-Length {length // 1024} KiB at {rate} KiB/s: "
          f"answers {dict(sorted(statuses.items()))}; cut off {len(closed)}/{clients}, "
          f"after median {statistics.median(closed) if closed else float('nan'):.1f} s, "
          f"max {max(closed) if closed else float('nan'):.1f} s; body sent per client "
          f"max {max(o.sent for o in outcomes) // 1024} KiB; RSS {before / 1024:.1f} MB before, "
          f"peak +{(peak - before) / 1024:.1f} MB, after +{(after - before) / 1024:.1f} MB",
          flush=True)


def main() -> None:
    """Parse the bounds and run the three scenarios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", default="100,60",
                        help="comma-separated client counts, one run of each scenario per count "
                             "(the server answers 503 past 64 open connections)")
    parser.add_argument("--rate", type=int, default=16, help="KiB per second per client")
    parser.add_argument("--limit", type=float, default=60.0,
                        help="seconds a client waits to be cut off before giving up")
    args = parser.parse_args()
    counts = [max(1, min(int(n), 200)) for n in args.clients.split(",")][:4]
    limit = max(1.0, min(args.limit, 120.0))
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "slow.db"
        for clients in counts:
            scenario("open", db, None, clients, MIB, args.rate, limit)
            scenario("locked", db, TOKEN, clients, MIB, args.rate, limit)
            scenario("oversize", db, None, clients, 2 * MIB, args.rate, limit)


if __name__ == "__main__":
    main()
