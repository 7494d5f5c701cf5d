"""``conveyor jobs show`` of a durable job (docs/durable.md): its steps (name, status, ended,
duration, result summary) and what it waits for while it sleeps. Issue 55, item 1: "each step
shows in the job's event log, the CLI and the job page"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conveyor import Conveyor, FakeClock, current_job
from conveyor.cli.main import main
from conveyor.testing import drain


def _sleeper(url: str, clock: FakeClock) -> tuple[Conveyor, str]:
    app = Conveyor(url, clock=clock)

    @app.job(name="shop.fulfil")
    def fulfil(order: int) -> None:
        ctx = current_job()
        ctx.step("charge", lambda: {"id": f"ch_{order}"})
        ctx.sleep(3600)

    ref = fulfil.enqueue(42)
    drain(app)
    return app, ref.id


def test_jobs_show_lists_steps_and_the_sleep(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    app, job_id = _sleeper(url, FakeClock())
    try:
        capsys.readouterr()
        assert main(["jobs", "show", job_id, "--url", url]) == 0
        out = capsys.readouterr().out
        lines = out.splitlines()
        assert any(line.split()[:2] == ["waits", "for"] and "sleep until" in line
                   for line in lines), out
        charge = next(line for line in lines if " charge " in line)
        assert charge.split()[2:4] == ["charge", "ok"] and '{"id":"ch_42"}' in charge
        assert main(["jobs", "show", job_id, "--url", url, "--json"]) == 0
        view = json.loads(capsys.readouterr().out)
        durable = view["durable"]
        assert [s["name"] for s in durable["steps"]] == ["charge", "sleep"]
        assert durable["waiting_for"]["kind"] == "sleep"
        assert durable["waiting_for"]["until"] == view["run_at"]
    finally:
        app.close()
