# gpupipe: one entry point. `make help` lists the targets.
PY ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat requirements.lock pyproject.toml | cksum | cut -d' ' -f1)
CONFIG ?= configs/penguins.yaml
# The image tag is the package version, read from its one place (pipelines/version.py).
VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"/\1/p' pipelines/version.py)
REGISTRY ?= ghcr.io/gpupipe
export TF_USE_LEGACY_KERAS := 1

.PHONY: help setup run test compile compile-check images lock clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

$(STAMP): requirements.lock pyproject.toml
	@$(PY) -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else "gpupipe needs Python 3.11 (TFDV 1.16 has no wheels for newer); set PY=/path/to/python3.11")'
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --require-hashes --no-deps -r requirements.lock
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	rm -f $(VENV)/.installed-* && touch $(STAMP)

setup: $(STAMP)  ## create .venv from requirements.lock (hash-checked) and install gpupipe

run: setup  ## run the example pipeline end to end locally (CONFIG=configs/penguins.yaml)
	$(BIN)/gpupipe run $(CONFIG)

test: setup  ## run the test suite (unit, compile, end-to-end)
	$(BIN)/python -m pytest

compile: setup  ## compile every config to pipelines/compiled/
	$(BIN)/gpupipe compile

compile-check: setup  ## fail when pipelines/compiled/ is stale
	$(BIN)/gpupipe compile --check

images:  ## build the CPU and GPU images, tagged with the package version (needs a Docker engine)
	docker build -f images/cpu/Dockerfile -t $(REGISTRY)/gpupipe-cpu:$(VERSION) .
	docker build -f images/gpu/Dockerfile -t $(REGISTRY)/gpupipe-gpu:$(VERSION) .

lock:  ## re-resolve requirements*.in into the hash-locked requirements*.lock (needs uv)
	for name in requirements requirements-gpu; do \
	  uv pip compile $$name.in --generate-hashes --python-version 3.11 \
	    --python-platform x86_64-manylinux_2_28 --index-url https://pypi.org/simple -o $$name.lock; done

clean:  ## remove local run outputs (runs/, serving/)
	rm -rf runs serving
