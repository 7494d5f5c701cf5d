"""The CLI and job data (docs/job-data.md): ``conveyor enqueue`` takes JSON in and validates
it against the job's typed parameters (one line naming the field, exit 2, nothing stored);
``jobs show`` and ``jobs list`` show sealed data as ``encrypted`` unless they hold a key (the
app's, or ``$CONVEYOR_KEYS``), and a search says how many jobs it could not read.

Expectations: Oban Pro's encrypted args are unreadable in Oban Web without the key; Sidekiq
Enterprise's encrypted jobs show their arguments as "[encrypted data]" in its Web UI.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from conveyor import Keys
from conveyor.cli.main import main

KEY = Keys.generate()


@pytest.fixture
def typed_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> object:
    monkeypatch.setenv("CONVEYOR_URL", f"sqlite:///{tmp_path / 'jd.db'}")
    monkeypatch.setenv("CONVEYOR_TEST_KEYS", f"k1:{KEY}")
    monkeypatch.delenv("CONVEYOR_KEYS", raising=False)
    module = importlib.import_module("tests.cli.typed_app")
    module = importlib.reload(module)
    yield module.app
    module.app.close()


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_enqueue_validates_json_against_typed_parameters(
        typed_app: object, capsys: pytest.CaptureFixture[str]) -> None:
    app = "tests.cli.typed_app:app"
    code, out, err = run(capsys, "enqueue", "typed.route", "--args", '[{"x": 1, "y": 2}]',
                         "--app", app, "--json")
    assert code == 0, err
    job_id = json.loads(out)["id"]
    code, out, err = run(capsys, "enqueue", "typed.route", "--args", '[{"x": "far"}]',
                         "--app", app)
    assert code == 2
    [line] = [ln for ln in err.splitlines() if "error:" in ln]
    assert "argument 'start': field x" in line
    code, out, _ = run(capsys, "jobs", "list", "--app", app, "--json")
    assert [j["id"] for j in json.loads(out)["jobs"]] == [job_id]  # the bad one not stored


def test_sealed_jobs_read_encrypted_without_a_key_and_clear_with_one(
        typed_app: object, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    ref = typed_app.registry.get("sealed.note").enqueue("the secret plan")  # type: ignore[attr-defined]
    url = typed_app.url  # type: ignore[attr-defined]
    code, out, err = run(capsys, "jobs", "show", ref.id, "--url", url, "--json")
    assert code == 0, err
    assert "the secret plan" not in out and json.loads(out)["args"] == ["encrypted"]
    code, out, err = run(capsys, "jobs", "list", "--url", url, "--search", "secret")
    assert code == 0 and "1 of the jobs read are encrypted" in out + err
    monkeypatch.setenv("CONVEYOR_KEYS", f"k1:{KEY}")
    code, out, err = run(capsys, "jobs", "show", ref.id, "--url", url, "--json")
    assert code == 0, err
    assert json.loads(out)["args"] == ["the secret plan"]


def test_reencrypt_seals_stored_jobs_with_the_newest_key(
        typed_app: object, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """After a rotation, ``conveyor jobs reencrypt`` re-seals what the old key sealed."""
    ref = typed_app.registry.get("sealed.note").enqueue("rotate me")  # type: ignore[attr-defined]
    url = typed_app.url  # type: ignore[attr-defined]
    code, _, err = run(capsys, "jobs", "reencrypt", "--url", url)
    assert code == 2 and "needs the keys" in err
    monkeypatch.setenv("CONVEYOR_KEYS", f"k1:{KEY},k2:{Keys.generate()}")
    code, out, err = run(capsys, "jobs", "reencrypt", "--url", url, "--json")
    assert code == 0, err
    assert json.loads(out) == {"read": 1, "resealed": 1, "changed": 0, "failed": 0, "key": "k2"}
    stored = typed_app.storage.get_job(ref.id)  # type: ignore[attr-defined]
    assert json.loads(stored.payload)["x"]["e"] == "k2"
