"""Every backend has the same folder shape (issue #16): a new engine has an obvious place for
everything, and a reader who knows one backend finds their way in the others."""

from __future__ import annotations

from pathlib import Path

import conveyor.storage

STORAGE = Path(conveyor.storage.__file__).parent
SHAPE = ("storage.py", "inspect.py", "batches.py", "flow.py", "schedules.py")


def backends() -> list[Path]:
    return sorted(p for p in STORAGE.iterdir() if (p / "__init__.py").is_file())


def test_there_are_backends_to_check() -> None:
    assert {p.name for p in backends()} >= {"memory", "sqlite", "redis", "postgres"}


def test_every_backend_has_the_same_folder_shape() -> None:
    missing = {p.name: [f for f in SHAPE if not (p / f).is_file()] for p in backends()}
    assert {name: files for name, files in missing.items() if files} == {}
