"""Scripts are assembled when first run, not all at import: assembling the 31 scripts took
0.86 s of every process that opened a Redis store (each CLI command, web process, client),
and a client that only enqueues runs one. Expectation: redis-py's ``register_script`` and
Sidekiq's and BullMQ's script loaders prepare a script when it is first called, so a short
process pays for what it runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

CHILD = """
import json, sys
from conveyor import Conveyor
from conveyor.storage.redis.scripts import SCRIPTS
app = Conveyor(sys.argv[1])
@app.job(name="assembly.noop")
def noop() -> None: ...
before = sorted(SCRIPTS._done)
noop.enqueue()
print(json.dumps({"before": before, "after": sorted(SCRIPTS._done), "all": len(SCRIPTS)}))
app.close()
"""


def test_a_client_that_enqueues_assembles_only_the_script_it_runs(redis_server: Any) -> None:
    out = subprocess.run([sys.executable, "-c", CHILD, redis_server.url], cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO / "src")},
                         capture_output=True, text=True, check=True, timeout=60)
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["before"] == []  # opening the store assembled nothing
    assert seen["after"] == ["enqueue_one"]  # a plain job alone: one script
    assert seen["all"] > 20  # and every script is still there to be asked for


def test_every_script_assembles_the_same_lazily_as_all_at_once() -> None:
    from conveyor.storage.redis.scripts import SCRIPTS, load_all
    eager = load_all()
    assert list(SCRIPTS) == list(eager)
    assert {name: SCRIPTS[name].sha for name in SCRIPTS} == {
        name: script.sha for name, script in eager.items()}
