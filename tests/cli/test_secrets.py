"""A password given in any form of storage URL never shows: worker banner, errors, reprs."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest

import redis
from conveyor import Conveyor
from conveyor.cli.main import main
from conveyor.storage import open_storage
from conveyor.worker.config import WorkerConfig
from conveyor.worker.launcher import Launcher
from tests.support.redis_server import free_port

SECRET = "Hunter2Secret"


@pytest.fixture
def query_password_url(redis_server: Any) -> str:
    """A URL whose password is a ``?password=`` query parameter, for a real ACL user."""
    user = f"qp{uuid.uuid4().hex[:8]}"
    admin = redis.Redis.from_url(redis_server.url)
    admin.execute_command("ACL", "SETUSER", user, "on", f">{SECRET}", "~*", "&*", "+@all")
    admin.close()
    return (f"redis://{user}@127.0.0.1:{redis_server.port}/0"
            f"?password={SECRET}&prefix=t{uuid.uuid4().hex[:8]}")


def test_worker_banner_and_reprs_mask_a_query_password(
        query_password_url: str, caplog: pytest.LogCaptureFixture) -> None:
    app = Conveyor(query_password_url)
    try:
        launcher = Launcher(app, WorkerConfig(concurrency=1))
        with caplog.at_level(logging.INFO, logger="conveyor.worker"):
            launcher.start()
            launcher.stop(5)
        assert "starting: storage=redis://***@127.0.0.1:" in caplog.text
        assert "password=***" in caplog.text
        assert SECRET not in caplog.text
        assert SECRET not in repr(app) and SECRET not in repr(app.storage)
    finally:
        app.close()


@pytest.mark.parametrize("url", [
    "redis://127.0.0.1:{port}/0?password={secret}",
    "redis://u:{secret}@127.0.0.1:{port}/0",
    "redis+cluster://127.0.0.1:{port}?password={secret}",
    "rediss://127.0.0.1:{port}/0?ssl_password={secret}",
    "redis://127.0.0.1:{port}/0?sentinel_password={secret}&token={secret}",
])
def test_errors_mask_every_password_form(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    code = main(["stats", "--url", url.format(port=free_port(), secret=SECRET)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1, err
    assert SECRET not in err


def test_wrong_query_password_is_one_line_without_it(query_password_url: str) -> None:
    wrong = query_password_url.replace(SECRET, SECRET + "x")
    with pytest.raises(Exception) as info:
        open_storage(wrong)
    assert "refused the login" in str(info.value) and SECRET not in str(info.value)


def test_unknown_url_option_is_a_url_error(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0?ssl_keyfile_password={SECRET}"
    capsys.readouterr()
    assert main(["stats", "--url", url]) == 2
    err = capsys.readouterr().err
    assert "has an option the redis client does not take" in err and SECRET not in err
