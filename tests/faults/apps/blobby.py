"""The app of the payloads-by-reference fault scenario (tests/faults/test_blob_faults.py):
jobs whose arguments and results are large enough to go to a blob directory.

``conveyor worker tests.faults.apps.blobby:app`` runs its jobs; ``python -m
tests.faults.apps.blobby ENQUEUED_LOG`` enqueues jobs one by one until it is killed, appending
each job's id to ``ENQUEUED_LOG`` once its enqueue returned. The store is ``CONVEYOR_URL``, the
blob directory ``BLOBBY_DIR``.
"""

from __future__ import annotations

import hashlib
import os
import sys

from conveyor import Conveyor, Offload

THRESHOLD = 4096
SIZE = 60_000  # each argument and each result: well over the threshold

app = Conveyor(offload=Offload(store=f"file://{os.environ.get('BLOBBY_DIR', '/nonexistent')}",
                               threshold=THRESHOLD))


def payload(seed: int) -> str:
    """A large argument that says which seed made it (the result is checked against it)."""
    block = hashlib.sha256(str(seed).encode()).hexdigest()
    return (block * (SIZE // len(block) + 1))[:SIZE]


@app.job(name="blobby.echo")
def echo(seed: int, data: str) -> str:
    """Returns its argument reversed: a large result, checked by the scenario."""
    if data != payload(seed):
        raise ValueError(f"seed {seed}: the argument came back different")
    return data[::-1]


def main(log: str) -> None:
    seed = int.from_bytes(os.urandom(4), "big")
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    while True:
        ref = echo.enqueue(seed, payload(seed))
        assert ref is not None
        os.write(fd, f"{ref.id} {seed}\n".encode())
        seed += 1


if __name__ == "__main__":
    main(sys.argv[1])
