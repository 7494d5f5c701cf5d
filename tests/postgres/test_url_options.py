"""libpq options in a storage URL reach the server as written (issue 49: ``?options=-c%20
statement_timeout%3D1ms`` was re-encoded with ``+`` and the server got another setting)."""

from __future__ import annotations

from typing import Any

import psycopg

from conveyor.storage.postgres.connection import parse_postgres_url


def test_a_server_setting_in_options_is_applied(postgres_server: Any) -> None:
    url = (f"{postgres_server.url}?options=-c%20statement_timeout%3D1234ms%20-c%20"
           "lock_timeout%3D77ms&application_name=conveyor%20ops")
    with psycopg.connect(parse_postgres_url(url).conninfo) as conn:
        shown = [conn.execute(f"SHOW {name}").fetchone() for name in
                 ("statement_timeout", "lock_timeout", "application_name")]
    assert shown == [("1234ms",), ("77ms",), ("conveyor ops",)]
