# fleetplan's developer entry points. `make demo` and `make test` are the README's two commands.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
export FLEETPLAN_MIRROR ?= $(abspath ../shared/upstream)

.PHONY: deps lab-bins helm-bin lint unit test test-full demo bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

deps: $(VENV)/.installed

lab-bins:
	bash lab/build.sh >/dev/null

# helm renders and lints the chart in the controller tests; the demo does not need it.
helm-bin:
	bash lab/build.sh --helm >/dev/null

lint: deps
	$(VENV)/bin/ruff check fleetplan tests benchmarks
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

unit: deps
	$(PY) -m pytest tests/unit -q

# pytest is bounded so a hang fails the run with pytest's own report well inside CI's 90 minutes
# (a cold build of the lab's binaries takes part of them). At the limit `timeout` sends SIGINT:
# pytest then runs its teardowns (the labs it started are stopped) and prints its summary; anything
# still running 2 minutes later is killed. The exit is then 124. --durations lists the slowest tests.
TEST_TIMEOUT ?= 55m
PYTEST := timeout --foreground --signal=INT --kill-after=120 $(TEST_TIMEOUT) $(PY) -m pytest -q --durations=25

# Everything CI runs: lint, then unit, integration and the CI-sized reliability sweeps on a real lab.
# Any non-zero pytest exit, including 5 ("no tests ran"), fails the recipe, so make exits 2.
test: deps lab-bins helm-bin lint
	FLEETPLAN_LAB_BIN=$$(bash lab/build.sh --print) $(PYTEST)

# The long sweeps: every kill point, 10,000 fuzz cases (not bounded: they are meant to run long).
test-full: deps lab-bins helm-bin
	FLEETPLAN_FULL=1 FLEETPLAN_LAB_BIN=$$(bash lab/build.sh --print) $(PY) -m pytest -q --durations=25

demo: deps lab-bins
	FLEETPLAN_LAB_BIN=$$(bash lab/build.sh --print) $(PY) -m fleetplan.lab.demo

bench: deps lab-bins
	FLEETPLAN_LAB_BIN=$$(bash lab/build.sh --print) $(PY) benchmarks/run.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
