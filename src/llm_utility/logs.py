"""Logging for workflow scripts: everything a job prints to stderr (progress bars, warnings,
tracebacks) goes to the rule's ``log:`` file, as in the snakemake-workflows style."""

from __future__ import annotations

import logging
import sys


def log_to(path: str) -> logging.Logger:
    """Send stderr and the ``llm_utility`` logger to ``path``; return the logger."""
    sys.stderr = open(path, "w", buffering=1, encoding="utf-8")  # noqa: SIM115 (lives as long as the job)
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        force=True,
    )
    return logging.getLogger("llm_utility")
