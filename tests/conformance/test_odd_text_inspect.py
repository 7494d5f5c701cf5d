"""The Inspector shows what a job wrote, whatever it wrote (issue #14, item 6): a lone
surrogate in a job's own log (``json.loads`` of valid ASCII JSON makes one) is listed and
shown on every backend, and the job can be retried, killed and deleted like any other."""

from __future__ import annotations

from conveyor.core.job import Event, EventKind, JobState, Outcome
from conveyor.core.text import storable
from conveyor.storage import Backend
from tests.conformance.helpers import ack, put, take_one

ODD = "row \ud800 and \udcff, a NUL \x00 and a bell \x07"


def test_a_job_that_logged_a_lone_surrogate_lists_and_shows(backend: Backend) -> None:
    job_id = put(backend)
    other = put(backend)
    job = take_one(backend)
    assert backend.log(job.id, job.token, [Event(ts=1.0, kind=EventKind.MESSAGE, message=ODD)])
    assert ack(backend, job, Outcome.DEAD)

    record = backend.get_job(job_id)
    assert record is not None and record.unreadable is None
    # human text is stored by the text rule: the lone surrogates became U+FFFD
    assert storable(ODD) in [e.message for e in record.events or []]
    assert record.as_dict()["events"]
    listed = backend.list_jobs(with_events=True, limit=10)
    assert {r.id for r in listed} == {job_id, other}
    assert backend.list_jobs(state=JobState.DEAD, queue="default", with_events=True)[0].id == (
        job_id)
    assert backend.retry_jobs([job_id]) == 1
    assert backend.kill_jobs([job_id]) == 1
    assert backend.delete_jobs([job_id]) == 1
    assert backend.get_job(job_id) is None
