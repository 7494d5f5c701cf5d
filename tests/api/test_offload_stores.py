"""Where data by reference goes when the app names no blob store (docs/job-data.md,
"Payloads by reference"): beside a SQLite file, in the PostgreSQL store's own table; memory
and Redis keep none and say so at once. And the worker's janitor collects what retention left
behind, after its trim pass.

Expectation from trigger.dev's offloading (a default object store, no setup) and Oban's
pruner (what retention deletes is gone with everything that belonged to it)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from conveyor import Conveyor, Offload
from conveyor.blobs import open_blob_store
from conveyor.core.clock import FakeClock
from conveyor.errors import ConveyorError
from conveyor.storage.retention import Retention
from conveyor.testing import drain
from conveyor.worker.blob_sweep import sweep
from conveyor.worker.config import WorkerConfig
from conveyor.worker.janitor import Janitor

BIG = "b" * 5000


def _big(app: Conveyor) -> Any:
    @app.job(name="offload.big")
    def big(text: str) -> str:
        return text.upper()

    return big


def test_a_sqlite_store_keeps_blobs_in_a_directory_beside_its_file(tmp_path: Path) -> None:
    app = Conveyor(f"sqlite:///{tmp_path / 'jobs.db'}", offload=Offload(threshold=1024))
    ref = _big(app).enqueue(BIG)
    drain(app)
    assert ref.result(timeout=5) == BIG.upper()
    files = [p for p in (tmp_path / "jobs.db.blobs").rglob("*") if p.is_file()]
    assert len(files) == 2 and all(p.name.startswith(ref.id) for p in files)
    assert all(p.stat().st_mode & 0o077 == 0 for p in files)  # the owner's only
    app.close()


def test_a_postgres_store_keeps_blobs_in_its_own_table(postgres_server: Any) -> None:
    url = f"{postgres_server.url}?schema=o{uuid.uuid4().hex[:10]}"
    app = Conveyor(url, offload=Offload(threshold=1024))
    ref = _big(app).enqueue(BIG)
    drain(app)
    assert ref.result(timeout=5) == BIG.upper()
    table = open_blob_store(url)
    assert len(list(table.listing(time.time() + 60))) == 2
    table.close()
    app.close()


@pytest.mark.parametrize("url", ["memory://", "redis://127.0.0.1:1/0"])
def test_a_store_that_keeps_no_blobs_needs_one_named_at_once(url: str) -> None:
    with pytest.raises(ConveyorError, match="keeps no blobs itself"):
        Conveyor(url, offload=Offload())


def test_the_janitor_sweeps_blobs_after_its_trim_pass(tmp_path: Path) -> None:
    """Retention trims a finished job; the janitor's same pass then deletes its blobs."""
    clock = FakeClock()
    app = Conveyor(f"sqlite:///{tmp_path / 'j.db'}", clock=clock,
                   offload=Offload(threshold=1024, grace=0.0))
    ref = _big(app).enqueue(BIG)
    drain(app)
    store = app.data.blobs()
    assert len(list(store.listing(time.time() + 60))) == 2
    config = WorkerConfig(janitor_interval=10.0)
    janitor = Janitor(app.storage, clock, config, retention=Retention(succeeded_seconds=60),
                      sweep=lambda: sweep(app.data, app.storage.get_job,
                                          now=time.time() + 1))
    janitor.tick()
    assert len(list(store.listing(time.time() + 60))) == 2  # the job is still kept
    clock.advance(3600)
    janitor.tick()
    assert app.storage.get_job(ref.id) is None
    assert list(store.listing(time.time() + 60)) == []
    app.close()


def test_the_sweep_leaves_what_is_not_conveyors_and_reads_node_ids_with_dots(
        tmp_path: Path) -> None:
    """A blob directory may be shared: a file conveyor did not name is never deleted. A
    workflow node's id may hold dots (``a.b:c``): its blobs are still its own."""
    app = Conveyor(f"sqlite:///{tmp_path / 'j.db'}", offload=Offload(threshold=1024))
    big = _big(app)
    wf = app.workflow()
    node = wf.add(big.s(BIG), node_id="extract.v2:eu")
    wf.enqueue()
    foreign = tmp_path / "j.db.blobs" / "zz" / "backup.tar"
    foreign.parent.mkdir(parents=True, exist_ok=True)
    foreign.write_bytes(b"not ours")
    assert sweep(app.data, app.storage.get_job, now=time.time() + 10**6) == 0
    assert foreign.exists()
    drain(app)
    assert node.result(timeout=5) == BIG.upper()
    app.close()
