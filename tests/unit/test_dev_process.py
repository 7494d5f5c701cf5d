"""The private servers' start (conveyor.dev.process): a failed start must be readable from the
error alone, since cleaning up after it removes the server's folder and its log. (CI went red
once with "RabbitMQ node … exited at start; see …/node.log", a file gone by then.)"""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from conveyor.dev.process import free_port, listening, wait_ready


def test_a_server_that_exits_at_start_is_told_with_the_end_of_its_log(tmp_path: Path) -> None:
    log = tmp_path / "node.log"
    log.write_text("".join(f"line {i}\n" for i in range(40)) + "ERROR: eaddrinuse\n")
    process = subprocess.Popen(["true"])
    process.wait()
    with pytest.raises(RuntimeError) as raised:
        wait_ready(process, lambda: False, 5.0, "node n1", str(log))
    message = str(raised.value)
    assert message.startswith("node n1 exited at start; the end of ")
    assert "ERROR: eaddrinuse" in message and "line 39" in message
    assert "line 10\n" not in message  # the end, not the whole log


def test_a_missing_log_is_said_so(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="did not answer in 0s; no log at"):
        wait_ready(None, lambda: False, 0.0, "node n2", str(tmp_path / "none.log"))


def test_listening_tells_a_free_port_from_a_bound_one() -> None:
    port = free_port()
    assert not listening(port)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert listening(server.getsockname()[1])
