# Thin aliases. Every target sets up what it needs on a fresh machine:
# a project virtualenv in .venv (pinned torch/torchaudio) and, when missing,
# the Debian packages sox (reads AN4's raw audio) and sctk (NIST sclite).
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev
SHELL  := /bin/bash

.PHONY: install install-dev sysdeps slurmdeps demo test test-unit test-multiproc test-recipe test-all bench bench-quick lint typecheck clean

install: $(STAMP)

# What the recipes need (make demo): the package and its pinned dependencies. pip runs
# without -q here so the large downloads (torch's CUDA build is about 1 GB of wheels, though
# asrkit runs on CPU) show their progress.
$(STAMP): pyproject.toml setup.py asrkit/scoring/_align.c
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	@echo "installing asrkit and its pinned dependencies into $(VENV) (torch==2.11.0 + torchaudio==2.11.0: a large download, once)"
	$(PY) -m pip install --progress-bar on -e .
	touch $@

# The test and lint tools on top (make test, make lint, make typecheck).
install-dev: $(DEV_STAMP)

$(DEV_STAMP): $(STAMP)
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

# apt-get needs root; without it, print what to install and carry on (tests that
# need sclite then skip with a reason).
sysdeps:
	@missing=""; for p in sox sctk; do command -v $$p >/dev/null || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing$$missing with apt-get"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else echo "warning: please install$$missing (e.g. sudo apt-get install$$missing)"; fi; \
	fi

demo: install sysdeps
	recipes/an4/run.sh

# Both tiers: tests/unit (in-process, about two minutes) and tests/integration (subprocesses).
# The slowest tests are listed at the end, so a log shows what to move to test-heavy when
# the tier grows past ~10 minutes.
test: install-dev sysdeps
	$(PY) -m pytest tests/unit tests/integration --durations=20

# The heavier integration tests (marked heavy): out of `make test`; CI runs both.
test-heavy: install-dev sysdeps
	$(PY) -m pytest tests/integration -m heavy --durations=10

test-unit: install-dev
	$(PY) -m pytest tests/unit

test-multiproc: install-dev sysdeps
	$(PY) -m pytest tests/integration -m multiproc

test-recipe: install-dev sysdeps
	$(PY) -m pytest tests/integration -m recipe

# The Slurm test (tests/integration/test_slurm.py) sets up a one-host cluster from Debian's packages.
slurmdeps:
	@if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing munge slurm-wlm with apt-get"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq munge slurm-wlm >/dev/null; \
	  else echo "warning: the Slurm test needs root and munge + slurm-wlm; it will be skipped"; fi; \
	fi

test-all: install-dev sysdeps slurmdeps
	$(PY) -m pytest tests/unit tests/integration -m ''

# The decoding benchmark needs the demo model: the recipe runs first unless it already did.
bench: install-dev sysdeps
	test -f recipes/an4/exp/an4_fbank_demo/lang/lm.arpa -a -f recipes/an4/exp/an4_fbank_demo/model.pt \
		|| recipes/an4/run.sh train.progress=false
	$(PY) -m asrkit bench --data-dir recipes/an4/data/test

# Smaller runs (~4 minutes once the data is prepared); the decoding benchmark is skipped
# until a model exists (make demo).
bench-quick: install-dev sysdeps
	test -f recipes/an4/data/test/feats.scp || recipes/an4/run.sh --stop-stage 3
	$(PY) -m asrkit bench --quick --data-dir recipes/an4/data/test

lint: install-dev
	$(PY) -m ruff check asrkit recipes tests
	$(PY) -m ruff format --check asrkit recipes tests

typecheck: install-dev
	$(PY) -m mypy

clean:
	rm -rf recipes/*/data recipes/*/exp recipes/*/fbank recipes/*/mfcc bench/results
