"""A docs page pasted as one file, run the way its reader runs it: ``conveyor worker
module:app`` imports the file for its jobs (a real worker process, which must start: a page
that enqueued and waited at import would block there), and ``python module.py`` runs its
``if __name__ == "__main__":`` parts against that worker, their asserts included."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from conveyor import Conveyor

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
_BLOCK = re.compile(r"^ *```python\n(.*?)^ *```", re.M | re.S)


def blocks(page: str) -> list[str]:
    """The page's ``python`` blocks, dedented (some sit inside list items)."""
    return [textwrap.dedent(b) for b in _BLOCK.findall((DOCS / page).read_text())]


class PastedPage:
    """``page``'s blocks saved in order as ``<directory>/<name>.py`` after ``prelude`` (what
    the page leaves to the reader's own code); its app's ``sqlite:///jobs.db`` lands there."""

    def __init__(self, page: str, directory: Path, name: str, prelude: str = "") -> None:
        self.directory, self.name = directory, name
        self.path = directory / f"{name}.py"
        self.path.write_text(prelude + "\n\n".join(blocks(page)))
        self.env = {k: v for k, v in os.environ.items() if k != "CONVEYOR_URL"}
        self.env["PYTHONPATH"] = str(ROOT)  # the prelude's stand-ins live in tests/docs
        self.log = directory / "worker.log"

    def store(self) -> Conveyor:
        """A client of the page's store (the test's own reads)."""
        return Conveyor(f"sqlite:///{self.directory / 'jobs.db'}")

    @contextmanager
    def worker(self, *queues: str, start_within: float = 30.0) -> Iterator[None]:
        """One ``conveyor worker NAME:app`` process, started (registered in the store, so
        its import of the page returned) before the block runs, stopped with SIGTERM after
        it (it must exit 0)."""
        cmd = [sys.executable, "-m", "conveyor.cli.main", "worker", f"{self.name}:app",
               "--processes", "1", "-c", "4"]
        for queue in queues:
            cmd += ["-q", queue]
        with self.log.open("wb") as out:
            proc = subprocess.Popen(cmd, cwd=self.directory, env=self.env, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        store = self.store()
        try:
            deadline = time.monotonic() + start_within
            while not store.storage.workers():
                assert proc.poll() is None, (
                    f"the worker exited importing the page:\n{self.output()}")
                assert time.monotonic() < deadline, (
                    f"the worker did not start in {start_within:.0f} s (blocked importing the "
                    f"page?):\n{self.output()}")
                time.sleep(0.05)
            yield
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0, self.output()
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
            store.close()

    def script(self, timeout: float = 120.0) -> None:
        """``python NAME.py``: its ``__main__`` parts and their asserts must pass."""
        done = subprocess.run([sys.executable, self.path.name], cwd=self.directory,
                              env=self.env, capture_output=True, text=True, timeout=timeout)
        assert done.returncode == 0, (f"python {self.path.name} failed:\n{done.stdout}"
                                      f"{done.stderr}\nworker:\n{self.output()}")

    def output(self) -> str:
        """What the worker wrote."""
        return self.log.read_text(errors="replace") if self.log.exists() else ""
