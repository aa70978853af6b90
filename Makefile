# triton-pipeline developer entry points. Every target installs what it needs on first use.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha256sum | cut -c1-12)

.PHONY: help venv demo test test-unit test-integration lint bench bench-dataplane clean

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@echo ">> creating $(VENV) and installing tritonpipeline (first run takes a minute)"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	@$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@rm -f $(VENV)/.installed-*
	@touch $(STAMP)
	@echo ">> $(VENV) ready"

venv: $(STAMP) ## create .venv and install the package with dev tools

demo: $(STAMP) ## serve the fan-out example on a local tritonserver and query it
	$(PY) examples/demo.py

test: $(STAMP) ## lint, unit and integration tests (real tritonserver)
	$(VENV)/bin/ruff check operator tests bench
	$(VENV)/bin/pytest

test-unit: $(STAMP) ## tests that need no server
	$(VENV)/bin/pytest -m "not integration"

lint: $(STAMP) ## ruff
	$(VENV)/bin/ruff check operator tests bench
	$(VENV)/bin/ruff format --check operator tests bench

bench: bench-dataplane ## all benchmarks

bench-dataplane: $(STAMP) ## router vs shared vs BLS vs per-step round trips on a real tritonserver
	$(PY) bench/dataplane.py

clean: ## remove the venv and caches
	rm -rf $(VENV) .pytest_cache .ruff_cache
