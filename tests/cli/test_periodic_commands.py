"""``conveyor periodic add|change|remove|reset|history`` on a seeded store: schedules edited at
run time, each change recorded with who made it, and one-line errors for what cannot be
stored. (The store's side is proven on every backend in tests/conformance.)

Expectations from the peers: Oban Pro's DynamicCron and BullMQ's job schedulers let an
operator add, change, pause and delete a schedule while workers run; our CLI is that surface.
"""

from __future__ import annotations

from tests.cli.conftest import Env, without_store


def test_add_change_pause_remove_and_the_history_that_names_who(env: Env) -> None:
    code, out, _ = env.run("periodic", "add", "digest", "*/15 * * * *", "shop.register",
                           "--args", '["ada@example.com"]', "--kwargs", '{"kind": "daily"}',
                           "--tz", "Europe/Berlin")
    assert code == 0 and "added digest: */15 * * * * (Europe/Berlin) -> shop.register" in out
    rows = {r["name"]: r for r in env.json("periodic", "list")}
    digest = rows["digest"]
    assert (digest["source"], digest["args"], digest["kwargs"], digest["queue"]) == (
        "runtime", '["ada@example.com"]', '{"kind":"daily"}', "default")
    code, out, _ = env.run("periodic", "change", "digest", "--cron", "0 * * * *")
    assert code == 0 and "changed digest: 0 * * * *" in out
    assert env.run("periodic", "pause", "digest")[0] == 0
    code, out, _ = env.run("periodic", "remove", "digest")
    assert code == 0 and out.strip() == "removed digest"
    history = env.json("periodic", "history", "digest")
    assert [c["action"] for c in history] == ["removed", "paused", "changed", "added"]
    assert all(c["by"].startswith("cli ") and "@" in c["by"] for c in history)
    assert history[2]["detail"] == "cron '*/15 * * * *' -> '0 * * * *'"
    code, out, _ = env.run("periodic", "history")
    assert code == 0 and "SCHEDULE" in out and "removed" in out and "declared" in out


def test_an_edit_of_a_declared_schedule_is_shown_and_reset(env: Env) -> None:
    code, out, _ = env.run("periodic", "change", "nightly-export", "--cron", "30 4 * * *")
    assert code == 0 and "stands over the code's definition until reset" in out
    code, out, _ = env.run("periodic", "list")
    assert "code, edited" in out
    assert "nightly-export: edited at run time; the code declares cron '0 3 * * *'" in out
    row = {r["name"]: r for r in env.json("periodic", "list")}["nightly-export"]
    assert (row["cron"], row["edited"], row["code"]["cron"]) == ("30 4 * * *", True,
                                                                 "0 3 * * *")
    code, out, _ = env.run("periodic", "reset", "nightly-export")
    assert code == 0 and "reset nightly-export: 0 3 * * *" in out
    code, _, err = env.run("periodic", "reset", "nightly-export")
    assert code == 2 and "has no edit to reset" in without_store(err)
    code, out, _ = env.run("periodic", "remove", "nightly-export")
    assert code == 0 and "the next worker to start adds it again" in out


def test_what_cannot_be_stored_is_one_line_and_exit_2(env: Env) -> None:
    for argv, words in (
            (("add", "x", "every minute", "shop.register"), "invalid cron expression"),
            (("add", "x", "* * * * *", "shop.register", "--tz", "Mars/Base"),
             "unknown time zone 'Mars/Base'"),
            (("add", "x", "* * * * *", "shop.register", "--args", "{}"),
             "--args must be a JSON array"),
            (("add", "x", "* * * * *", "shop.register", "--kwargs", "[1"), "not valid JSON"),
            (("add", "bad\nname", "* * * * *", "shop.register"), "schedule name"),
            (("add", "nightly-export", "* * * * *", "shop.register"), "exists already"),
            (("change", "nope", "--cron", "* * * * *"), "no periodic schedule named 'nope'"),
            (("change", "nightly-export"), "nothing to change"),
            (("remove", "nope"), "no periodic schedule named 'nope'")):
        code, _, err = env.run("periodic", *argv)
        lines = without_store(err).strip().splitlines()
        assert code == 2 and len(lines) == 1 and words in lines[0], (argv, err)
        assert "Traceback" not in err
    assert {r["name"] for r in env.json("periodic", "list")} == {"nightly-export",
                                                                  "restock-check"}
