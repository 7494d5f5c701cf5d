"""A private S3-compatible server for the S3 blob store's tests: moto's S3 behind its
threaded server (pure Python, in this process) on a free port of 127.0.0.1, with test-only
credentials. Nothing here reaches AWS."""

from __future__ import annotations

import os
import socket
import uuid
from typing import Any

ACCESS_KEY = "conveyor-test-access"
SECRET_KEY = "conveyor-test-secret"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class S3Server:
    """``with S3Server() as s3: s3.bucket_url()`` — a fresh bucket's ``s3://`` URL."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._server: Any = None
        self._saved: dict[str, str | None] = {}

    def __enter__(self) -> S3Server:
        from moto.server import ThreadedMotoServer

        for name, value in (("AWS_ACCESS_KEY_ID", ACCESS_KEY),
                            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY)):
            self._saved[name] = os.environ.get(name)
            os.environ[name] = value
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port,
                                          verbose=False)
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop()
        for name, value in self._saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

    def bucket_url(self, prefix: str = "blobs") -> str:
        """A new bucket on this server, as the blob store URL of ``prefix`` in it."""
        import boto3

        name = f"b{uuid.uuid4().hex[:12]}"
        boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                     aws_access_key_id=ACCESS_KEY,
                     aws_secret_access_key=SECRET_KEY).create_bucket(Bucket=name)
        return f"s3://{name}/{prefix}?endpoint={self.endpoint}&region=us-east-1"
