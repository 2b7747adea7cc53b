"""The backend a model spec names, loaded in this process: vLLM is imported only when asked for."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .generator import Generator
from .specs import BACKENDS


def load_backend(manifest: Mapping[str, Any], spec: Mapping[str, Any], threads: int | None = None) -> Generator:
    """The generator of the backend ``spec`` names, in this process (``models.load_generator``'s,
    when no model host serves it, and a model host's own)."""
    # The config decides which backend runs (attention always needs transformers' eager attention);
    # the manifest records how the weights were materialized (manifests before 2026-12 named a backend).
    backend = spec.get("backend") or manifest.get("backend")
    if backend == "transformers":
        from .hf_backend import HFGenerator

        return HFGenerator(manifest, spec, threads=threads)
    if backend == "vllm":
        from .vllm_backend import VLLMGenerator

        return VLLMGenerator(manifest, spec, threads=threads)
    raise ValueError(f"unknown backend {backend!r}; expected one of {BACKENDS}")
