"""A real PostgreSQL server for tests: Debian's binaries, a throwaway cluster in a temp dir.

A plain module (no pytest import) so fixtures, benchmarks and scripts can all use it. The
cluster listens on 127.0.0.1 on a free port (and on a unix socket in its own dir), trusts
local connections, and never touches a PostgreSQL service the machine may run. PostgreSQL
refuses to run as root, so when this process is root (CI containers are) ``initdb`` and
``postgres`` run as ``nobody`` in a data dir handed over to it.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time

from conveyor.dev.process import ManagedServer, demote, free_port

__all__ = ["PostgresServer", "demote", "free_port", "postgres_bin_dir"]

_START_TIMEOUT = 30.0
# Commits do not wait for the disk (a crash of the test server loses nothing anyone needs);
# fsync stays on, as the storage warns about a server without it (``check_server``).
_SETTINGS = {
    "synchronous_commit": "off",
    "max_connections": "300",
    "shared_buffers": "64MB",
    "listen_addresses": "'127.0.0.1'",
    "log_min_messages": "warning",
}


def postgres_bin_dir() -> str | None:
    """The newest ``/usr/lib/postgresql/<version>/bin`` holding ``initdb`` and ``postgres``
    (Debian's layout; ``$CONVEYOR_PG_BIN`` names another), or None when none is installed."""
    explicit = os.environ.get("CONVEYOR_PG_BIN")
    candidates = [explicit] if explicit else sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda p: int(p.split("/")[-2]) if p.split("/")[-2].isdigit() else 0,
        reverse=True)
    for folder in candidates:
        if folder and all(os.access(os.path.join(folder, b), os.X_OK)
                          for b in ("initdb", "postgres")):
            return folder
    return None


class PostgresServer(ManagedServer):
    """A real PostgreSQL on 127.0.0.1:<free port>, its cluster in a temp dir.

    ``url`` connects as the superuser ``postgres`` (trust auth) to database ``postgres``;
    tests add ``?schema=NAME`` to get a namespace of their own.
    """

    def __init__(self, port: int | None = None, settings: dict[str, str] | None = None) -> None:
        bin_dir = postgres_bin_dir()
        if bin_dir is None:
            raise RuntimeError("PostgreSQL is not installed (apt-get install postgresql)")
        self.bin_dir = bin_dir
        self.version = bin_dir.rstrip("/").split("/")[-2]
        self.port = port or free_port()
        # postgresql.conf lines over the defaults, e.g. {"synchronous_commit": "on"} for a
        # scenario that crashes the server and counts the commits it acknowledged.
        self.settings = {**_SETTINGS, **(settings or {})}
        self.dir = tempfile.mkdtemp(prefix=f"conveyor-pg-{self.port}-")
        self.data = os.path.join(self.dir, "data")
        self.socket_dir = os.path.join(self.dir, "run")
        self.log_path = os.path.join(self.dir, "postgres.log")
        self.process: subprocess.Popen[bytes] | None = None
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self._preexec, uid, gid = demote()
        os.makedirs(self.socket_dir)
        if uid is not None and gid is not None:
            os.chmod(self.dir, 0o755)
            for path in (self.dir, self.socket_dir):
                os.chown(path, uid, gid)

    def _run(self, *args: str) -> None:
        done = subprocess.run(args, preexec_fn=self._preexec, capture_output=True,
                              timeout=120, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{args[0]} failed: {done.stderr.decode(errors='replace')}")

    def _init(self) -> None:
        if os.path.exists(os.path.join(self.data, "PG_VERSION")):
            return
        self._run(os.path.join(self.bin_dir, "initdb"), "-D", self.data, "-U", "postgres",
                  "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync")
        with open(os.path.join(self.data, "postgresql.conf"), "a", encoding="utf-8") as conf:
            for name, value in self.settings.items():
                conf.write(f"{name} = {value}\n")

    def start(self) -> PostgresServer:
        """initdb (first time), start the server, and wait until it accepts connections."""
        self._init()
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        try:
            self.process = subprocess.Popen(
                [os.path.join(self.bin_dir, "postgres"), "-D", self.data,
                 "-p", str(self.port), "-k", self.socket_dir],
                stdout=log, stderr=subprocess.STDOUT, preexec_fn=self._preexec,
                start_new_session=True)
        finally:
            log.close()
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + _START_TIMEOUT
        isready = os.path.join(self.bin_dir, "pg_isready")
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"postgres exited at start; see {self.log_path}")
            done = subprocess.run([isready, "-q", "-h", "127.0.0.1", "-p", str(self.port),
                                   "-U", "postgres"], check=False, timeout=10)
            if done.returncode == 0:
                return
            time.sleep(0.05)
        raise RuntimeError(f"postgres on port {self.port} did not accept connections in time")

    def stop(self) -> None:
        """Fast shutdown (SIGINT); kills the process if it does not exit."""
        self._shut_down(signal.SIGINT)

    def _shut_down(self, how: signal.Signals) -> None:
        """Send ``how`` to the postmaster and wait for it (SIGKILL after 30 s)."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(how)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def kill(self) -> None:
        """SIGKILL the postmaster, as a crash would."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
        self.process = None

    def cleanup(self) -> None:
        """Stop at once and remove the temp dir. An immediate shutdown (SIGQUIT), not the fast
        one ``stop`` makes: the cluster is thrown away, and a fast shutdown first writes a
        checkpoint of every dirty buffer (8 s at the end of a session that made hundreds of
        schemas; ``stop`` keeps it for the scenarios that restart the server on its data)."""
        self._shut_down(signal.SIGQUIT)
        with contextlib.suppress(OSError):
            shutil.rmtree(self.dir, ignore_errors=True)
