"""Which store a command reads, said in one line; a read never creates one; the app found
the way Flask and Django find theirs (issue 51, items 3 and 4; issue 49: ``--url`` beside
``--app``).

Flask finds its app from ``--app``, ``FLASK_APP`` or a ``wsgi.py``/``app.py`` in the current
directory; Django from ``DJANGO_SETTINGS_MODULE``, which ``manage.py`` sets; here ``--app``,
``CONVEYOR_APP`` or ``[tool.conveyor] app`` in the project's ``pyproject.toml``. A command that
only reads must not create what it reads (``sqlite3`` would; ``psql`` to a missing database
says so and creates nothing).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conveyor import Conveyor
from conveyor.cli.main import main
from conveyor.storage.sqlite.migrate import migrations
from tests.cli.conftest import ROOT, lines_until, without_store

READERS = (["stats"], ["history"], ["jobs", "list"], ["batch", "list"], ["workflow", "list"],
           ["workers"], ["periodic", "list"], ["dead", "list"], ["metrics", "--once"])

APP = '''
from conveyor import Conveyor

app = Conveyor({url!r})

@app.job(name="shop.double")
def double(x: int) -> int:
    return 2 * x
'''


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project folder as the current directory, with no store named by the environment."""
    monkeypatch.chdir(tmp_path)
    for name in ("CONVEYOR_URL", "CONVEYOR_APP"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _cli(cwd: Path, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("CONVEYOR_URL", "CONVEYOR_APP")}
    environ["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "conveyor.cli.main", *argv], cwd=cwd,
                          env={**environ, **env}, capture_output=True, text=True, timeout=60,
                          check=False)


def test_a_command_that_only_reads_never_creates_a_store(
        here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 51: ``workflow list`` in a project whose app uses another file said "No
    workflows" and left an empty ``conveyor.db`` behind."""
    for argv in READERS:
        code, out, err = _run(capsys, *argv)
        assert (code, out) == (2, ""), (argv, err)
        [line] = err.splitlines()
        assert line.startswith(f"conveyor: error: no SQLite database at {here / 'conveyor.db'} "
                               "(nothing was created); the store from the default"), line
        assert "only reads and creates none" in line
    code, _, err = _run(capsys, "stats", "--url", "sqlite:///elsewhere.db")
    assert code == 2 and f"no SQLite database at {here / 'elsewhere.db'}" in err
    assert "from --url" in err
    assert sorted(p.name for p in here.iterdir()) == []  # not a file, not a -wal


def test_every_command_says_which_store_it_read_and_where_that_came_from(
        here: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """One line on stderr (stdout stays the command's output, ``--json`` too): the URL with
    credentials masked, a relative path made absolute and said to be relative (a worker and
    a client started in two folders use two files), and where the URL came from."""
    code, out, _ = _run(capsys, "migrate")  # migrate creates: the default file, here
    assert code == 0 and out.startswith("applied ")
    code, out, err = _run(capsys, "stats", "--json")
    assert code == 0 and out.startswith("{")
    assert err == (f"conveyor: store sqlite:///{here / 'conveyor.db'} (from the default: no "
                   "--url, no app, no CONVEYOR_URL; a path relative to the current "
                   "directory)\n")
    monkeypatch.setenv("CONVEYOR_URL", "sqlite:///conveyor.db")
    _, _, err = _run(capsys, "workflow", "list")
    assert err == (f"conveyor: store sqlite:///{here / 'conveyor.db'} (from CONVEYOR_URL; a "
                   "path relative to the current directory)\n")
    absolute = f"sqlite:///{here / 'conveyor.db'}?token=s3cret"
    _, _, err = _run(capsys, "jobs", "list", "--url", absolute)
    assert err == f"conveyor: store sqlite:///{here / 'conveyor.db'}?token=*** (from --url)\n"


def test_the_app_named_by_the_environment_or_the_project_gives_the_store(tmp_path: Path) -> None:
    """``CONVEYOR_APP`` and ``[tool.conveyor] app`` name the app as ``--app`` does; found in
    the project's ``pyproject.toml`` from any of its folders (as ruff and pytest find their
    settings). ``--url`` beside an app wins and says over what (issue 49: it was ignored)."""
    (tmp_path / "storeapp.py").write_text(APP.format(url=f"sqlite:///{tmp_path / 'jobs.db'}"))
    created = _cli(tmp_path, "migrate", "--app", "storeapp:app")
    assert created.returncode == 0, created.stderr
    db = tmp_path / "jobs.db"
    by_env = _cli(tmp_path, "stats", CONVEYOR_APP="storeapp:app")
    assert by_env.returncode == 0, by_env.stderr
    assert by_env.stderr == (f"conveyor: store sqlite:///{db} (from the app storeapp:app named "
                             "by CONVEYOR_APP, the app's own URL)\n")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "shop"\n\n[tool.conveyor]\n'
                                             'app = "storeapp:app"  # the jobs\n')
    (tmp_path / "src" / "deep").mkdir(parents=True)
    by_file = _cli(tmp_path / "src" / "deep", "workflow", "list")
    assert by_file.returncode == 0, by_file.stderr
    assert by_file.stderr == (f"conveyor: store sqlite:///{db} (from the app storeapp:app named "
                              f"by [tool.conveyor] in {tmp_path / 'pyproject.toml'}, the app's "
                              "own URL)\n")
    other = f"sqlite:///{tmp_path / 'other.db'}"
    beside = _cli(tmp_path, "enqueue", "shop.double", "--args", "[21]", "--app", "storeapp:app",
                  "--url", other)
    assert beside.returncode == 0, beside.stderr
    assert beside.stderr == (f"conveyor: store {other} (from --url, over the app "
                             f"storeapp:app's sqlite:///{db})\n")
    job_id = beside.stdout.strip()
    there, app_store = Conveyor(other), Conveyor(f"sqlite:///{db}")
    try:
        assert there.get_job(job_id) is not None  # where --url said, not the app's store
        assert app_store.get_job(job_id) is None
    finally:
        there.close()
        app_store.close()


def test_the_worker_finds_the_app_the_commands_find_and_names_its_store(tmp_path: Path) -> None:
    """``conveyor worker`` with no app runs the project's (``[tool.conveyor]``) and logs the
    store with its absolute path at start; with nothing to find it says what to do."""
    (tmp_path / "storeapp.py").write_text(APP.format(url="sqlite:///jobs.db"))
    nothing = _cli(tmp_path, "worker")
    assert nothing.returncode == 2
    assert without_store(nothing.stderr).strip() == (
        'conveyor: error: no app to run: give one (conveyor worker myapp:app), set '
        'CONVEYOR_APP=myapp:app, or add [tool.conveyor] app = "myapp:app" to pyproject.toml')
    (tmp_path / "pyproject.toml").write_text('[tool.conveyor]\napp = "storeapp:app"\n')
    environ = {k: v for k, v in os.environ.items() if k not in ("CONVEYOR_URL", "CONVEYOR_APP")}
    worker = subprocess.Popen(
        [sys.executable, "-m", "conveyor.cli.main", "worker", "--processes", "1", "-c", "1"],
        cwd=tmp_path, env={**environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True)
    try:
        assert worker.stderr is not None
        store = lines_until(worker.stderr, " store ")[-1]
        assert store.rstrip().endswith(
            f"store sqlite:///{tmp_path / 'jobs.db'} (from the app storeapp:app named by "
            f"[tool.conveyor] in {tmp_path / 'pyproject.toml'}, the app's own URL; a path "
            "relative to the current directory)")
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
    listed = _cli(tmp_path, "workers")  # the commands read the store the worker wrote
    assert listed.returncode == 0 and f"{tmp_path / 'jobs.db'}" in listed.stderr


def test_migrate_lists_the_migrations_it_applied(
        here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Django's ``migrate`` prints each migration it applies; ours said only "up to date" on a
    fresh store (issue 51)."""
    names = [name for _, name, _ in migrations()]
    code, out, _ = _run(capsys, "migrate", "--url", "sqlite:///fresh.db")
    assert code == 0
    assert out == (f"applied {len(names)} migration(s) to sqlite:///{here / 'fresh.db'}: "
                   f"{', '.join(names)}\n")
    code, out, _ = _run(capsys, "migrate", "--url", "sqlite:///fresh.db")
    assert (code, out) == (0, f"storage sqlite:///{here / 'fresh.db'} is up to date (no "
                              "migration to apply)\n")
