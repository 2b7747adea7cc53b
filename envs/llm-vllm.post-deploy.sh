#!/usr/bin/env bash
# Snakemake runs this after creating envs/llm-vllm.yaml (--sdm conda). vLLM's attention kernels
# (FlashInfer's precompiled cubins and JIT cache) are otherwise downloaded or compiled when an engine
# starts: minutes per GPU job, and a failure on compute nodes without network. This installs them
# once, now, on the machine that creates the environment (it needs network; no GPU).
#
# It is `vllm download-kernels` (vLLM 0.33). That CLI builds every subcommand's parser first, which
# needs a GPU to infer the device, and environments are usually created on a login node without
# one; so the subcommand's own function is called, and the CLI only if a later vLLM renamed it
# (`make vllm-contract` checks the function is there).
set -euo pipefail
python - <<'PY'
import subprocess
import sys

try:
    from vllm.entrypoints.cli.download_kernels import _download_flashinfer_kernels
except ImportError:
    sys.exit(subprocess.run(["vllm", "download-kernels"], check=False).returncode)
sys.exit(_download_flashinfer_kernels(dry_run=False))
PY
