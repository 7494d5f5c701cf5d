"""The job options are typed once (``client/options.JobOptionArgs``) for ``@app.job``,
``JobFunction.options`` and a signature's target: a misspelt option is a type error where it
is written (as pydantic's ``Unpack[TypedDict]`` keyword arguments and Celery's typed
``Task.apply_async`` stubs give their users), and every option the runtime takes is typed.
"""

from __future__ import annotations

import inspect
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import get_type_hints

import pytest

from conveyor import Conveyor
from conveyor.client import options as options_module
from conveyor.client.options import JobOptionArgs, JobOptions

# Accepted at run time but not documented options: the stored forms of retry= and of
# debounce=/throttle=, which make_options derives from them.
DERIVED = {"max_retries", "fold"}


def test_every_option_the_runtime_takes_is_typed_and_nothing_else() -> None:
    typed = set(get_type_hints(JobOptionArgs, globalns=vars(options_module)))
    assert typed == set(options_module._OPTION_NAMES) - DERIVED


def test_every_typed_option_but_retry_and_the_folds_is_a_job_options_field() -> None:
    fields = {name for name in inspect.signature(JobOptions).parameters}
    assert set(JobOptionArgs.__annotations__) - fields == {"retry", "debounce", "throttle"}


def test_an_unknown_option_still_raises_at_decoration() -> None:
    app = Conveyor("memory://")
    with pytest.raises(TypeError, match="unknown job option"):
        app.job(retires=3)(lambda: None)  # type: ignore[call-arg]


def test_mypy_flags_a_misspelt_option_where_it_is_written(tmp_path: Path) -> None:
    """The point of typing them: the user's own checker says so, naming the option."""
    source = tmp_path / "user_app.py"
    source.write_text(textwrap.dedent("""
        from conveyor import Conveyor
        app = Conveyor("memory://")

        @app.job(queue="low", retires=3)
        def one() -> None: ...

        @app.job(timeout="soon")
        def two() -> None: ...

        @app.job(queue="low", retry=3, breaker=None, priority=5)
        def fine() -> None: ...

        fine.options(concurrency=2, rate_limt=5)
    """))
    done = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental",
                           "--cache-dir", str(tmp_path / "cache"), str(source)],
                          capture_output=True, text=True, check=False)
    out = done.stdout
    assert done.returncode == 1, out
    errors = {int(line.split(":")[1]) for line in out.splitlines() if ": error:" in line}
    assert errors == {5, 8, 14}, out  # the misspelt option, the wrong type, the misspelt copy
    assert 'Unexpected keyword argument "retires"' in out, out
    assert 'did you mean "rate_limit"' in out, out
