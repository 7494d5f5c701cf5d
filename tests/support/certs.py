"""A throwaway CA and a server certificate for 127.0.0.1, made with openssl (TLS tests of
every server: Redis, RabbitMQ)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

__all__ = ["make_certs", "openssl_installed"]


def openssl_installed() -> bool:
    """Whether the ``openssl`` command is on the PATH."""
    return shutil.which("openssl") is not None


def make_certs(directory: Path) -> tuple[str, str, str]:
    """(server certificate, its key, the CA certificate), written under ``directory``."""

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=test-ca",
        "-keyout", "ca.key", "-out", "ca.crt")
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
        "-keyout", "server.key", "-out", "server.csr")
    (directory / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "1", "-extfile", "ext.cnf", "-out", "server.crt")
    return (str(directory / "server.crt"), str(directory / "server.key"),
            str(directory / "ca.crt"))
