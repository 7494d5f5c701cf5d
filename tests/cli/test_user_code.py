"""An exception raised by the user's own module is the user's: its traceback, trimmed to the
user's frames, and a line saying it came from their module (issue 51, item 4).

Flask reports an app module that raises while imported with the traceback ("While importing
'app', an ImportError was raised: …"); Celery's worker lets the user's traceback through.
Only conveyor's own failures are "internal error".
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor.cli.main import main

CASES = {
    "raises": ("def load():\n    raise RuntimeError('settings missing')\n\n\nload()\n",
               "RuntimeError", ['line 3, in load', "raise RuntimeError('settings missing')",
                                "RuntimeError: settings missing", "line 6, in <module>"]),
    "syntax": ("x = (\n", "SyntaxError", ["line 2", "SyntaxError: '(' was never closed"]),
    "imports": ("import surely_not_installed_zz\n", "ModuleNotFoundError",
                ["line 2, in <module>", "import surely_not_installed_zz",
                 "No module named 'surely_not_installed_zz'"]),
}


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the command puts the folder on it
    monkeypatch.delenv("CONVEYOR_APP", raising=False)
    root = logging.getLogger()  # ``worker`` configures logging: put it back afterwards
    handlers, level = list(root.handlers), root.level
    yield tmp_path
    for handler in root.handlers:
        if handler not in handlers:
            handler.close()
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("command", [["stats"], ["worker", "--processes", "1"]],
                         ids=["stats", "worker"])
def test_an_exception_from_the_users_module_is_shown_as_theirs(
        case: str, command: list[str], project: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    source, kind, shown = CASES[case]  # line numbers count the import put first
    module = f"userapp_{case}"
    (project / f"{module}.py").write_text("from conveyor import Conveyor\n" + source)
    app = [f"{module}:app"] if command[0] == "worker" else ["--app", f"{module}:app"]
    assert main([command[0], *app, *command[1:]]) == 2
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert lines[-1] == (f"conveyor: error: your module '{module}' raised {kind} while it was "
                         f"imported (the app {module}:app): the traceback above is from your "
                         "code")
    assert f'File "{project / module}.py"' in err
    for words in shown:
        assert words in err, (words, err)
    assert "internal error" not in err
    # Only the user's frames: none of conveyor's, none of the import machinery's.
    assert "conveyor/cli" not in err and "importlib" not in err, err


def test_a_module_that_is_not_there_is_one_line(project: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stats", "--app", "no_such_module_zz:app"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("conveyor: error: cannot import 'no_such_module_zz': No module "
                           f"named 'no_such_module_zz' (looked in {project}")
