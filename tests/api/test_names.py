"""Job and queue names: one client-side check, the same clear error on every backend."""

from __future__ import annotations

import pytest

from conveyor import Conveyor, JobState
from conveyor.core.text import MAX_NAME_LENGTH
from conveyor.errors import InvalidNameError

BAD_NAMES = ["two\nlines", "tab\there", "cr\rreturn", "nul\x00", "esc\x1b[2J", "\ud800",
             "x" * (MAX_NAME_LENGTH + 1), ""]


def _stored(app: Conveyor) -> int:
    return sum(app.storage.count_jobs(state=s) for s in JobState)


@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_bad_job_name_is_refused_at_enqueue_by_name(app: Conveyor, name: str) -> None:
    with pytest.raises(InvalidNameError, match="job name"):
        app.enqueue(name)
    assert _stored(app) == 0


@pytest.mark.parametrize("name", BAD_NAMES[:3])
def test_a_bad_job_name_is_refused_when_registered(app: Conveyor, name: str) -> None:
    with pytest.raises(InvalidNameError, match="job name"):
        app.job(name=name)(lambda: None)
    assert name not in app.registry


def test_a_bad_queue_name_is_refused(app: Conveyor) -> None:
    with pytest.raises(InvalidNameError, match="queue"):
        app.enqueue("ok.name", queue="q\nforged")
    with pytest.raises(InvalidNameError, match="queue"):
        app.job(name="ok.name", queue="q\x00")(lambda: None)
    assert _stored(app) == 0


def test_a_name_changed_by_client_middleware_is_checked_too(app: Conveyor) -> None:
    @app.job(name="fine")
    def fine() -> None:
        """Never runs."""

    def rename(draft: object, call: object) -> object:
        draft.name = "forged\nINFO line"  # type: ignore[attr-defined]
        return call()  # type: ignore[operator]

    app.client_middleware.add(rename)  # type: ignore[arg-type]
    with pytest.raises(InvalidNameError):
        fine.enqueue()
    assert _stored(app) == 0


def test_ordinary_names_with_unicode_and_spaces_are_stored_as_given(app: Conveyor) -> None:
    ref = app.enqueue("café import · v2", queue="reports")
    assert ref is not None
    record = app.get_job(ref.id)
    assert record is not None and record.name == "café import · v2" and record.queue == "reports"
