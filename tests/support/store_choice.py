"""A pytest plugin: ``--stores`` runs the suite on some stores only (``make check``).

The short loop runs every test that needs no store and each chosen store's tests, and never
starts another store's server: a test parametrized by another store, or asking for its
session server by name, is deselected (reported as such, never skipped: CI refuses skips).
Loaded by tests/conftest.py; without ``--stores`` it changes nothing.
"""

from __future__ import annotations

import pytest

#: What a test's parameter may call each store (several fixtures name the server they start)
STORE_NAMES = {"memory": "memory", "sqlite": "sqlite", "postgres": "postgres",
               "redis": "redis", "redis_server": "redis", "redis_cluster": "redis_cluster",
               "cluster": "redis_cluster", "redis_sentinel": "redis_sentinel"}
#: The session servers a test may request by name, and the store each is
SERVER_FIXTURES = {"postgres_server": "postgres", "redis_server": "redis",
                   "redis_cluster": "redis_cluster", "redis_sentinel": "redis_sentinel"}


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--stores``: the short loop's choice of stores (``make check``)."""
    parser.addoption(
        "--stores", default="",
        help="comma-separated stores to run on (memory, sqlite, postgres, redis, redis_cluster, "
             "redis_sentinel): a test parametrized by, or asking for the server of, any other "
             "store is deselected. Default: every store.")


def stores_of(item: pytest.Item) -> set[str]:
    """The stores one collected test runs on: its parameters that name a store (alone or in a
    tuple such as ``("sqlite", "amqp")``) and the session servers it asks for by name."""
    found = {SERVER_FIXTURES[name] for name in getattr(item, "fixturenames", ())
             if name in SERVER_FIXTURES}
    callspec = getattr(item, "callspec", None)
    for value in (callspec.params.values() if callspec is not None else ()):
        for part in (value if isinstance(value, tuple) else (value,)):
            if isinstance(part, str) and part in STORE_NAMES:
                found.add(STORE_NAMES[part])
    return found


def chosen_stores(config: pytest.Config) -> set[str]:
    """The stores ``--stores`` names (none: every store)."""
    return {name.strip() for name in str(config.getoption("--stores")).split(",")
            if name.strip()}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``--stores``, deselect the tests that would run on another store: the short loop
    covers every store-independent test and each chosen store's, never starts another server."""
    chosen = chosen_stores(config)
    if not chosen:
        return
    unknown = chosen - set(STORE_NAMES.values())
    if unknown:
        raise pytest.UsageError(f"--stores: unknown store {', '.join(sorted(unknown))}")
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        (kept if stores_of(item) <= chosen else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.hookimpl(tryfirst=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[object],
                         request: pytest.FixtureRequest) -> None:
    """A test that reaches another store's server unseen by collection (through
    ``request.getfixturevalue``) fails, naming the store, rather than start that server."""
    store = SERVER_FIXTURES.get(fixturedef.argname)
    chosen = chosen_stores(request.config)
    if store is not None and chosen and store not in chosen:
        pytest.fail(f"this test asks for {store}'s server under "
                    f"--stores={','.join(sorted(chosen))}: name the store in a parameter "
                    "(tests/support/store_choice.py) so that --stores deselects it",
                    pytrace=False)
