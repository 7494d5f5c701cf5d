"""What the CLI tells an operator must be true: counts named for what they count, an ETA
that waits for retries, the failures that need a hand first, no phantom queues, quiet pipes."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conveyor.cli.main import main
from conveyor.core.job import ErrorInfo, Outcome
from tests.cli.conftest import ROOT, Env, conveyor, without_store
from tests.web.seed import run_one


def test_stats_shows_failed_and_dead_apart(env: Env) -> None:
    # The seed has, on queue default, one job failed (Fail) and one dead.
    queues = {q["name"]: q for q in env.json("stats")["queues"]}
    default = queues["default"]
    assert (default["failed_jobs"], default["dead"], default["failed"]) == (1, 1, 2)
    code, out, _ = env.run("stats")
    assert code == 0
    header = out.splitlines()[0]
    row = next(line for line in out.splitlines() if line.startswith("default "))

    def cell(name: str) -> str:
        start = header.index(f" {name} ") + 1
        return row[start:].split()[0]

    assert (cell("FAILED"), cell("DEAD"), cell("NOT OK EVER")) == ("1", "1", "2")
    assert "1 failed, 1 dead (2 failed or dead ever)" in out
    assert "FAILED: jobs that ended by Fail" in out and "DEAD: jobs out of retries" in out


def test_batch_eta_waits_for_retries_and_failures_list_dead_first(env: Env) -> None:
    app, st = env.app, env.app.storage
    with app.batch(description="retries") as batch:
        for part in range(5):
            app.enqueue("shop.register", [9, part], queue="retries")
    run_one(st, "retries", Outcome.SUCCEEDED)
    failed = run_one(st, "retries", Outcome.FAILED, message="seller not qualified")
    dead = run_one(st, "retries", Outcome.DEAD, message="gave up",
                   error=ErrorInfo("ValueError", "gave up", ""))
    for _ in range(2):
        run_one(st, "retries", Outcome.RETRY, message="down",
                error=ErrorInfo("ConnectionError", "down", ""), retry_in=3600.0)
    view = env.json("batch", "show", batch.id)
    assert view["counts"]["retrying"] == 2
    assert view["eta"] >= 3500  # not the few milliseconds the done jobs took
    assert view["retries_until"] >= st.now() + 3500
    assert [f["id"] for f in view["failures"]] == [dead, failed]
    code, out, _ = env.run("batch", "show", batch.id)
    assert code == 0 and "(waiting for 2 retries until" in out


def test_pause_refuses_a_queue_nothing_uses_unless_forced(env: Env) -> None:
    code, out, err = env.run("pause", "nosuchqueue")
    assert code == 2 and out == ""
    [line] = without_store(err).strip().splitlines()
    assert "no queue named 'nosuchqueue' (known: default, exports)" in line
    assert "--force" in line
    assert "nosuchqueue" not in {q.name for q in env.app.storage.queues()}  # no phantom
    code, out, _ = env.run("pause", "nosuchqueue", "--force")
    assert code == 0 and "paused nosuchqueue" in out
    assert env.run("resume", "nosuchqueue")[0] == 0


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from conveyor import __version__

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"conveyor {__version__}"


def test_a_closed_pipe_ends_the_command_quietly(env: Env) -> None:
    register = env.app.registry.get("shop.register")
    assert register is not None
    register.enqueue_many([(1, n) for n in range(3000)], return_refs=False)
    # The listing (~300 KB) is larger than a pipe's buffer, so the command is still writing
    # when its reader goes away after the first line, like `conveyor jobs list | head -1`.
    proc = subprocess.Popen(
        [sys.executable, "-m", "conveyor.cli.main", "jobs", "list", "--limit", "3000",
         "--url", env.url], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141, err
    assert without_store(err) == ""
    assert conveyor("stats", url=env.url).returncode == 0
