"""A job defined in a script run as ``python myapp.py`` runs in ``conveyor worker myapp:app``.

The README's quickstart is exactly that; a name stored as ``__main__.register_product`` is one
no worker can resolve, so every job of the quickstart went dead.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conveyor import Conveyor
from conveyor.core.job import JobState

pytestmark = pytest.mark.slow

SCRIPT = '''
import os
from conveyor import Conveyor

app = Conveyor(os.environ["CONVEYOR_URL"])

@app.job(retry=0)
def register_product(seller_id: int, product_id: int) -> int:
    return seller_id * 100 + product_id

if __name__ == "__main__":
    ref = register_product.enqueue(7, 42)
    print(ref.id, register_product.name)
'''


def _run(argv: list[str], cwd: Path, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env={**os.environ, "CONVEYOR_URL": url},
                          capture_output=True, text=True, timeout=60, check=False)


def test_job_enqueued_by_a_script_runs_in_a_worker_importing_it(tmp_path: Path) -> None:
    (tmp_path / "myapp.py").write_text(SCRIPT)
    url = f"sqlite:///{tmp_path / 'q.db'}"
    enqueued = _run([sys.executable, "myapp.py"], tmp_path, url)
    assert enqueued.returncode == 0, enqueued.stderr
    job_id, name = enqueued.stdout.split()
    assert name == "myapp.register_product"
    worker = subprocess.Popen(
        [sys.executable, "-m", "conveyor.cli.main", "worker", "myapp:app", "-c", "1",
         "--processes", "1"],
        cwd=tmp_path, env={**os.environ, "CONVEYOR_URL": url},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    app = Conveyor(url)
    try:
        deadline = time.monotonic() + 60
        while (record := app.get_job(job_id)) is None or not record.state.terminal:
            assert worker.poll() is None, worker.stderr.read() if worker.stderr else ""
            assert time.monotonic() < deadline, f"job still {record and record.state}"
            time.sleep(0.05)
        assert record.state is JobState.SUCCEEDED, (record.state, record.message)
        assert record.name == "myapp.register_product" and record.result == "742"
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
        app.close()


def test_job_in_an_unimportable_main_is_refused_at_enqueue(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    code = SCRIPT.replace('if __name__ == "__main__":', "if True:")
    proc = _run([sys.executable, "-c", code], tmp_path, url)
    assert proc.returncode != 0
    assert "UnimportableJobError" in proc.stderr and "no worker can import" in proc.stderr
    app = Conveyor(url)
    try:
        assert app.storage.count_jobs() == 0  # nothing stored that no worker could run
    finally:
        app.close()
