"""Read commands (stats, jobs, state lists, workers, batch) run in process via main()."""

from __future__ import annotations

import pytest

from tests.cli.conftest import Env, without_store
from tests.web.seed import XSS


def test_stats_text_and_json(env: Env) -> None:
    code, out, _ = env.run("stats")
    assert code == 0
    assert "default" in out and "exports" in out and "1/5 slots busy" in out
    view = env.json("stats")
    queues = {q["name"]: q for q in view["queues"]}
    assert queues["exports"]["pending"] == 4
    assert queues["default"]["dead"] == 1 and queues["default"]["processed"] == 1
    assert queues["default"]["failed"] == 2  # failed + dead outcomes
    assert view["workers"] == {"count": 1, "slots": 5, "busy": 1}


def test_history_text_and_json(env: Env) -> None:
    code, out, _ = env.run("history")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] in ("all queues, last 60 minute(s): 1 with outcomes",
                        "all queues, last 60 minute(s): 2 with outcomes")  # a minute may turn
    assert lines[2].split() == ["MINUTE", "(UTC)", "PROCESSED", "FAILED", "DEAD", "RETRIED"]
    day = env.json("history", "--queue", "default", "--minutes", "1440")
    assert day["minutes"] == 1440 and day["queue"] == "default"
    assert {k: sum(v) for k, v in day["series"].items()} == dict.fromkeys(
        ("processed", "failed", "dead", "retried"), 1)
    code, out, _ = env.run("history", "--queue", "exports")
    assert code == 0 and out.startswith("queue exports, last 60 minute(s): no outcomes")


def test_jobs_list_filters_and_pages(env: Env) -> None:
    dead = env.json("jobs", "list", "--state", "dead")
    assert [j["id"] for j in dead["jobs"]] == [env.seeded.ids["dead"]]
    assert dead["jobs"][0]["message"] == "gave up"
    exports = env.json("jobs", "list", "--queue", "exports", "--limit", "3")
    assert exports["total"] == 4 and len(exports["jobs"]) == 3
    rest = env.json("jobs", "list", "--queue", "exports", "--offset", "3")
    assert len(rest["jobs"]) == 1
    batch = env.json("jobs", "list", "--batch", env.seeded.batch_id)
    assert batch["total"] == 4
    code, out, _ = env.run("jobs", "list", "--state", "failed")
    assert code == 0 and "seller not qualified" in out


def test_bad_state_is_one_clear_error(env: Env) -> None:
    code, out, err = env.run("jobs", "list", "--state", "bogus")
    assert code == 2 and out == ""
    assert err.strip().startswith("conveyor: error: unknown state 'bogus'")
    assert len(err.strip().splitlines()) == 1


def test_state_shortcuts(env: Env) -> None:
    assert [j["id"] for j in env.json("retrying", "list")["jobs"]] == [env.seeded.ids["retrying"]]
    assert [j["id"] for j in env.json("scheduled", "list")["jobs"]] == [
        env.seeded.ids["scheduled"]]
    assert [j["id"] for j in env.json("dead", "list")["jobs"]] == [env.seeded.ids["dead"]]


def test_jobs_show_has_args_events_and_traceback(env: Env) -> None:
    code, out, _ = env.run("jobs", "show", env.seeded.ids["dead"])
    assert code == 0
    assert "[dead]" in out and "gave up" in out
    assert "enqueued" in out and "started" in out
    assert "ConnectionError: inventory service down" in out
    assert 'File "shop.py", line 9' in out
    view = env.json("jobs", "show", env.seeded.ids["xss"])
    assert view["args"] == [2, XSS] and view["kwargs"] == {"note": XSS}
    assert [e["kind"] for e in view["events"]] == ["enqueued"]
    assert view["options"]["max_retries"] == 25


def test_unknown_job_id_exits_2_with_one_line(env: Env) -> None:
    code, out, err = env.run("jobs", "show", "no-such-job")
    assert code == 2 and out == ""
    assert "no job with id 'no-such-job'" in err
    assert len(without_store(err).strip().splitlines()) == 1


def test_workers_list(env: Env) -> None:
    [worker] = env.json("workers")
    assert worker["id"] == env.seeded.worker_id and worker["hostname"] == "host-a"
    assert worker["busy_count"] == 1 and worker["concurrency"] == 5
    assert worker["busy"][0]["job_id"] == env.seeded.ids["xss"]
    assert worker["busy"][0]["running_for"] >= 0
    code, out, _ = env.run("workers")
    assert code == 0 and "host-a" in out and "shop.register" in out


def test_batch_list_and_show(env: Env) -> None:
    [batch] = env.json("batch", "list")
    assert batch["id"] == env.seeded.batch_id and batch["total"] == 4
    view = env.json("batch", "show", env.seeded.batch_id)
    assert view["counts"]["pending"] == 4 and view["percent"] == 0
    assert view["failures"] == []
    code, out, _ = env.run("batch", "show", env.seeded.batch_id)
    assert code == 0 and "import products.csv" in out and "0/4" in out
    code, _, err = env.run("batch", "show", "nope")
    assert code == 2 and "no batch with id 'nope'" in err


def test_jobs_show_running_job_progress(env: Env) -> None:
    st = env.app.storage
    [job] = st.dequeue(["exports"], "w-live", 1, 60.0)
    assert st.log(job.id, job.token, [], progress=(3, 8))
    code, out, _ = env.run("jobs", "show", job.id)
    assert code == 0 and "progress    3/8" in out and "[active]" in out


def test_scale_hint_text_json_and_a_bad_flag(env: Env,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """``conveyor scale-hint``: the seed's 4 ready exports on workers of 2 slots want 2."""
    view = env.json("scale-hint", "--queue", "exports", "-c", "2", "--latency-target", "0")
    assert view["total"] == 2
    assert [(q["queue"], q["workers"], q["slots"], q["ready"], q["reason"])
            for q in view["queues"].values()] == [("exports", 2, 4, 4, "backlog")]
    code, out, _ = env.run("scale-hint", "-c", "2")
    assert code == 0 and out.splitlines()[0].split() == [
        "QUEUE", "WORKERS", "SLOTS", "READY", "RUNNING", "WHY"]
    assert "workers for every queue listed:" in out
    with pytest.raises(SystemExit) as usage:  # argparse's usage error: exit 2
        env.run("scale-hint", "-c", "0")
    assert usage.value.code == 2
    assert "must be a whole number >= 1, not '0'" in capsys.readouterr().err
