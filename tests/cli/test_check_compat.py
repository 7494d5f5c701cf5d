"""``conveyor check-compat APP`` (docs/durable.md, "Safe deploys"; issue 55 item 5): before
a deploy, the stored jobs the new code cannot run, one line per problem, exit 1; exit 0 when
every unfinished job can run. Temporal's worker versioning and DBOS's application version
keep a started workflow on code that can replay it; this is the check that says so before
the deploy rather than after (Sidekiq and Oban have no job versions)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conveyor import Conveyor, FakeClock
from conveyor.cli.main import main
from conveyor.testing import drain
from tests.cli.compat_app import fulfil


def _old_code(url: str) -> tuple[Conveyor, dict[str, str]]:
    """Version 1 enqueued a bill, started a fulfilment (asleep) and a job since removed."""
    old = Conveyor(url, clock=FakeClock())
    started = old.job(name="shop.fulfil", version=1)(fulfil).enqueue(7)
    drain(old)
    bill = old.job(name="shop.bill", version=1)(lambda order_id: None).enqueue(7)
    gone = old.enqueue("shop.gone")
    assert started is not None and bill is not None and gone is not None
    return old, {"fulfil": started.id, "bill": bill.id, "gone": gone.id}


def test_check_compat_lists_what_the_code_cannot_run_and_exits_1(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    old, ids = _old_code(url)
    try:
        capsys.readouterr()
        assert main(["check-compat", "tests.cli.compat_app:app", "--url", url]) == 1
        captured = capsys.readouterr()
        lines = captured.out.splitlines()
        assert "Traceback" not in captured.err
        fulfil_line = next(line for line in lines if line.startswith("shop.fulfil"))
        assert "version 1: 1 job(s) (1 scheduled)" in fulfil_line
        assert ids["fulfil"] in fulfil_line and "started at version 1" in fulfil_line
        gone = next(line for line in lines if line.startswith("shop.gone"))
        assert ids["gone"] in gone and "no job of this name" in gone
        assert not any(line.startswith("shop.bill") for line in lines)  # an upcaster reaches
        assert lines[-1] == "2 of 3 unfinished job(s) cannot run on this code"

        assert main(["check-compat", "--app", "tests.cli.compat_app:app", "--url", url,
                     "--json"]) == 1
        view = json.loads(capsys.readouterr().out)
        assert view["checked"] == 3
        assert {(p["name"], p["version"], p["count"]) for p in view["problems"]} == {
            ("shop.fulfil", 1, 1), ("shop.gone", None, 1)}

        assert main(["check-compat", "tests.cli.compat_app:both", "--url", url]) == 0
        assert "every stored job can run on this code (3 unfinished checked)" in \
            capsys.readouterr().out
    finally:
        old.close()


def test_check_compat_without_an_app_is_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CONVEYOR_APP", raising=False)
    url = f"sqlite:///{tmp_path / 'c.db'}"
    assert main(["check-compat", "--url", url]) == 2
    err = capsys.readouterr().err
    assert "check-compat needs the code to check" in err and "Traceback" not in err
