"""Operational settings: where the store and the GPU locks live, and which Python runs an LLM's
jobs. A job reads them from the config itself (they are not rule params), so changing them never
invalidates a result."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

# Settings that change where files go, never what a result is (left out of results/config.yaml).
OPERATIONAL_KEYS = ("store_dir", "gpu_lock_dir")


def store_root(config: Mapping[str, Any], llm: str) -> Path:
    """The generation store directory of one model."""
    return Path(config["store_dir"]) / llm


def gpu_lock_dir(config: Mapping[str, Any]) -> Path | None:
    """The GPU lock folder; None: a node-local default (``llm_utility.gpu.default_lock_dir``)."""
    return Path(config["gpu_lock_dir"]) if config.get("gpu_lock_dir") else None


# Per-LLM settings of the same kind, kept out of each job's `spec` param and of results/config.yaml.
LLM_OPERATIONAL_KEYS = ("python",)
# Set in a job that re-executed itself under llms.<llm>.python, so that it does so once.
REEXEC_ENV = "LLM_UTILITY_JOB_PYTHON"
# Where the re-executing interpreter finds snakemake: a script run by hand builds its job again there
# (``mock_snakemake``), in an environment that has no snakemake of its own.
SNAKEMAKE_PATH_ENV = "LLM_UTILITY_SNAKEMAKE_PATH"


def results_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The validated config without the operational settings, which change no result (the config
    the report shows)."""
    out = {k: v for k, v in config.items() if k not in OPERATIONAL_KEYS}
    out["llms"] = {
        llm: {k: v for k, v in spec.items() if k not in LLM_OPERATIONAL_KEYS} for llm, spec in config["llms"].items()
    }
    return out


def run_in_llm_python(config: Mapping[str, Any], llm: str) -> None:
    """Re-execute this job's script under ``llms.<llm>.python`` when that is set and the job does not
    run there yet; return otherwise.

    Snakemake runs a script with its own interpreter unless it deploys the rule's conda environment
    (``--sdm conda``), and vLLM cannot share an environment with the transformers backend (it pins an
    older transformers). So on a machine without conda an LLM's model jobs can run in a virtualenv
    of their own (``.venv-vllm``, built by the Makefile): the script replaces its process
    (``os.execv``, same process id, so Snakemake waits for it as before) with that interpreter
    running the same file and arguments. For a job Snakemake ran, the file is Snakemake's copy of
    the script with its preamble, which unpickles the job again and appends Snakemake's own
    site-packages to ``sys.path`` (after the environment's own packages), as it does in a conda
    environment. A script run by hand (``mock_snakemake``) builds its job again there, from this
    interpreter's snakemake, which it appends to ``sys.path`` the same way (``SNAKEMAKE_PATH_ENV``).
    Call it first, before the log is opened.
    """
    import importlib.util
    import os
    import sys

    python = (config["llms"][llm] or {}).get("python")
    if not python or os.environ.get(REEXEC_ENV) == python:
        return
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        raise FileNotFoundError(
            f"llms.{llm}.python is {python!r}, which is not an executable file here (relative paths are "
            f"to the workflow's directory; `make install-vllm` builds .venv-vllm/bin/python)"
        )
    os.environ[REEXEC_ENV] = python
    found = importlib.util.find_spec("snakemake")
    if found is not None and found.submodule_search_locations:
        os.environ[SNAKEMAKE_PATH_ENV] = os.path.dirname(next(iter(found.submodule_search_locations)))
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(python, [python, *sys.argv])
