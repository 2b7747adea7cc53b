"""Operational settings: where the store and the GPU locks live. A job reads them from the config
itself (they are not rule params), so moving them never invalidates a result."""

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
