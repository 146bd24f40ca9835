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

# Everything CI runs: lint, then unit, integration and the CI-sized reliability sweeps on a real lab.
test: deps lab-bins helm-bin lint
	FLEETPLAN_LAB_BIN=$$(bash lab/build.sh --print) $(PY) -m pytest -q

# The long sweeps: every kill point, 10,000 fuzz cases.
test-full: deps lab-bins helm-bin
	FLEETPLAN_FULL=1 FLEETPLAN_LAB_BIN=$$(bash lab/build.sh --print) $(PY) -m pytest -q

demo: deps lab-bins
	FLEETPLAN_LAB_BIN=$$(bash lab/build.sh --print) $(PY) -m fleetplan.lab.demo

bench: deps lab-bins
	FLEETPLAN_LAB_BIN=$$(bash lab/build.sh --print) $(PY) benchmarks/run.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
