# The README's first commands are a contract with a new user on a fresh machine:
#   make demo   installs conveyor alone (no extra, no dev toolchain) and runs the
#               spreadsheet-import batch on embedded SQLite, saying what it does
#   make test   installs what the tests need (a real redis-server included) and runs them all
# and a contributor's:
#   make check  the short loop (under 3 minutes on 2 cores): lint, then every in-process test
#               and the conformance suite on memory, SQLite and one real redis-server
#   make lint   ruff and mypy --strict, installing only the lint extra (no browser driver)
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo
LINT_STAMP := $(VENV)/.installed-lint

.PHONY: install constraints audit system-deps demo test check lint typecheck unit bench bench-smoke bench-io bench-pg clean

# Everything make test and make check need: the dev extra is the lint and test extras, which
# hold every user extra (pyproject.toml). It has what make lint needs, so its stamp too.
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]' -c constraints.txt
	touch $(STAMP) $(LINT_STAMP)

# Only what ruff and mypy read: no test runner, browser driver or test broker.
$(LINT_STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[lint]' -c constraints.txt
	touch $(LINT_STAMP)

install: $(STAMP)

# constraints.txt again from the newest versions pyproject.toml allows, in a throwaway venv
# (run make test after it: the pins are what CI then installs).
constraints:
	rm -rf .venv-constraints
	$(PYTHON) -m venv .venv-constraints
	.venv-constraints/bin/python -m pip install -q --upgrade pip
	.venv-constraints/bin/python -m pip install -q -e '.[dev]'
	{ sed -n '/^#/p' constraints.txt; \
	  .venv-constraints/bin/python -m pip freeze --exclude-editable; } > constraints.txt.new
	mv constraints.txt.new constraints.txt
	rm -rf .venv-constraints

# Known vulnerabilities in constraints.txt's versions (pip-audit, PyPI's advisory data, in a
# venv of its own). It needs the internet, so it is not part of make test; --strict fails on a
# package it could not look up instead of passing it silently.
audit:
	test -x .venv-audit/bin/pip-audit || { $(PYTHON) -m venv .venv-audit && \
	  .venv-audit/bin/python -m pip install -q 'pip-audit>=2.7'; }
	.venv-audit/bin/pip-audit --strict --no-deps --disable-pip -r constraints.txt

# Debian packages the suite runs against for real: redis-server (single server and a local
# Cluster), postgresql (its binaries only: the tests start their own cluster in a temp dir,
# never the package's service), rabbitmq-server (the broker tests start their own node, never the
# package's service: it is stopped and disabled if the package started one) and chromium (web UI end to end). Not faketime: libfaketime 0.9.10 cannot run a
# Python worker, so the clock-skew scenario skews time.time in the worker processes instead
# (docs/reliability.md, scenario 8).
system-deps:
	@missing=""; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	command -v redis-cli >/dev/null || missing="$$missing redis-tools"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	ls /usr/lib/rabbitmq/bin/rabbitmq-server >/dev/null 2>&1 || missing="$$missing rabbitmq-server"; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	  case "$$missing" in *rabbitmq-server*) \
	    $$SUDO systemctl disable --now rabbitmq-server >/dev/null 2>&1 || true; \
	    $$SUDO service rabbitmq-server stop >/dev/null 2>&1 || true;; esac; \
	fi

# Only conveyor itself: the demo needs no extra (a venv made by `make install` has it already).
$(DEMO_STAMP): pyproject.toml
	@echo "make demo: creating the virtual environment $(VENV) and installing conveyor alone (pip install -e .; no extra, no dev toolchain)"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e .
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	@echo "make demo: running examples/import_products/demo.py"
	$(PY) examples/import_products/demo.py

lint: $(LINT_STAMP) typecheck
	$(VENV)/bin/ruff check src tests examples benchmarks

typecheck: $(LINT_STAMP)
	$(VENV)/bin/mypy

# The whole suite, every store, broker and scenario (under 25 minutes on 2 cores).
test: system-deps install lint
	$(PY) -m pytest -q --durations=20

# The short loop (under 3 minutes on 2 cores): lint, then the tests below, then the benchmark
# smoke; install first, so that one pip run serves all. The smoke comes last, after unit: a red
# test says more than a slow number.
check: install lint unit bench-smoke

# make check's tests: every folder but those below (so a new folder of in-process tests joins
# it by itself), each test on memory, SQLite or the session's redis-server only (--stores,
# tests/support/store_choice.py: a test of another store is deselected, so no PostgreSQL,
# Cluster or Sentinel is started), the conformance suite included. Left to make test: the
# fault scenarios, the real-process runs, the lifecycle model, the brokers and the
# broker-fed worker, the folders of the server stores (their Cluster, Sentinel and outage
# tests), the web UI, the docs pages, and every `slow` (multi-process) test.
CHECK_SKIPS := tests/faults tests/integration tests/model tests/kafka tests/rabbitmq \
	tests/postgres tests/redis tests/web tests/docs tests/worker/test_broker_worker.py
unit: system-deps install
	$(PY) -m pytest -q -p no:cacheprovider --stores=memory,sqlite,redis \
	  -m "not slow and not rabbitmq and not kafka" \
	  $(addprefix --ignore=,$(CHECK_SKIPS)) tests

bench: install system-deps
	$(PY) -m benchmarks

# make check's benchmark smoke (~10 s): benchmarks.server_cpu at a few hundred jobs, one round,
# on a private redis-server. It asserts no figure: it proves the probe still runs (its cases'
# interpreters start, talk to the server and report), so that a change that breaks it is seen
# before a quiet run is booked for numbers. (``python -m benchmarks`` has no --smoke; its short
# form, --quick, takes minutes.)
bench-smoke: install system-deps
	$(PY) -m benchmarks.server_cpu --smoke

# Only the jobs that do I/O (W0a-c, W3 async) and the runs their targets compare against:
# ~15 minutes, then republishes the leading section of docs/benchmarks.md and the README table.
bench-io: install system-deps
	$(PY) -m benchmarks --only io --rounds 2 --docs

# conveyor on PostgreSQL beside procrastinate and PgQueuer (and conveyor on Redis and SQLite):
# W0d (one PostgreSQL write), W1-W4 and storage on a private PostgreSQL, 2 rounds (~30 min);
# then rewrites the PostgreSQL section of docs/benchmarks.md and the README table's rows.
bench-pg: install system-deps
	$(PY) -m benchmarks --only pg --rounds 2 --docs

clean:
	rm -rf $(VENV) .venv-audit .mypy_cache .ruff_cache .pytest_cache
