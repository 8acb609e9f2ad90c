# Two commands matter: `make demo` (the main job) and `make test` (the whole suite).
# Each creates .venv on first use; nothing else needs installing by hand. The editable install
# is setuptools' "compat" mode (a .pth with the checkout's path) so mypy and IDEs can follow
# it; see "Packaging" in docs/architecture.md.
# setuptools says on every such install that compat mode is transitional (a box of text, no
# removal date); the reason above still holds, so that one warning, by its text, is silenced.
COMPAT_QUIET := PYTHONWARNINGS="ignore:Compat editable installs"
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(COMPAT_QUIET) $(PY) -m pip install -q -e '.[dev]' --config-settings editable_mode=compat
	touch $@

.PHONY: demo test bench diagrams lint soak n8n-faithful load bench-million test-citus
demo: $(VENV)/.installed
	$(PY) -m machines.demo $(ARGS)

# The suite waits on subprocess workers, leases and PostgreSQL much of the time: it runs on
# one pytest-xdist worker per core and one more (at most 4; whole files per worker, see
# tests/conftest.py).
# ARGS="-n 0" runs it in this one process.
test: $(VENV)/.installed
	bash scripts/system-deps.sh
	$(PY) -m pytest -q -n auto --maxprocesses 4 --dist loadfile $(ARGS)

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

diagrams: $(VENV)/.installed
	$(VENV)/bin/statecharts diagrams

bench: $(VENV)/.installed
	$(PY) -m pip install -q -r benchmarks/requirements.txt
	$(PY) -m benchmarks.run $(ARGS)

# Opt-in soaks, each the long form of a default-suite test (STATECHARTS_SOAK=1): 1,000 runs with
# workers SIGKILLed (test_crash), 1,000 child-run trees (test_child_crash), limits under
# random SIGKILLs for SOAK_S seconds per store, SQLite then PostgreSQL (test_capacity_faults;
# 900 s each: 30 minutes; every run must finish, never more calls in flight than the limit), and
# a tenant's 10,000 queued runs beside another's 8 with a limit of 4 per tenant (test_capacity_keys;
# the small tenant's wait printed; about 15 minutes per store).
# Only the limits: make soak SOAK_TESTS=tests/persistence/test_capacity_faults.py SOAK_S=600
SOAK_S ?= 900
SOAK_TESTS ?= tests/persistence/test_crash.py tests/persistence/test_child_crash.py \
	tests/persistence/test_capacity_faults.py tests/persistence/test_capacity_keys.py
soak: $(VENV)/.installed
	STATECHARTS_SOAK=1 STATECHARTS_LIMITS_SOAK_S=$(SOAK_S) $(PY) -m pytest -q -s -n 0 \
		-o timeout=0 $(SOAK_TESTS) $(ARGS)

# Opt-in: the store on a Citus cluster (docs/citus.md), with STATECHARTS_CITUS_DSN naming its
# coordinator: the contract suite, child runs, limits and the SIGKILL crash test on the `citus`
# store kind, and tests/persistence/test_citus.py (placement, keys, claims, EXPLAIN of every
# statement of a run's life). Without the variable every Citus test skips, saying why.
test-citus: $(VENV)/.installed
	@test -n "$$STATECHARTS_CITUS_DSN" || { echo "set STATECHARTS_CITUS_DSN (docs/citus.md)"; exit 2; }
	$(PY) -m pytest -q -n 0 -k citus tests/persistence/test_store_contract.py \
		tests/persistence/test_child_runs.py tests/persistence/test_capacity.py \
		tests/persistence/test_crash.py tests/persistence/test_start_many.py \
		tests/persistence/test_citus.py $(ARGS)

# Opt-in: 100,000 runs due at one instant on PostgreSQL, 4 worker processes, with and without a
# limit of 4 in flight (benchmarks/load.py; about 15 minutes). Writes benchmarks/load_results.json,
# which `make bench` puts into docs/performance.md. Needs PostgreSQL at $STATECHARTS_TEST_DSN.
load: $(VENV)/.installed
	$(PY) -m benchmarks.load $(ARGS)

# Opt-in: 1,000,000 active runs in one PostgreSQL database (half on timers, 100,000 of them due
# at one instant and drained by 4 worker processes): bytes per run, claim latency, the plans of
# the store's statements (benchmarks/million.py; about 20 minutes, 2 GB of disk in a database
# of its own, dropped after). Writes benchmarks/million_results.json and its section of
# docs/performance.md. Needs PostgreSQL at $STATECHARTS_BENCH_DSN or $STATECHARTS_TEST_DSN.
bench-million: $(VENV)/.installed
	nice $(PY) -m benchmarks.million $(ARGS)
	$(PY) -m benchmarks.run --section million

# Opt-in: the n8n import against the n8n execution model over whole collections of exports
# kept outside the repository: make n8n-faithful DIRS="path/to/n8n-workflows ..."
DIRS ?= ../shared/n8n-corpus ../shared/n8n-corpus-more
n8n-faithful: $(VENV)/.installed
	$(PY) -m tests.io.n8n_bulk $(DIRS) $(ARGS)
