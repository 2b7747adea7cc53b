"""What identifies a model call: its key (sha256 over the kind, the model, the rendered prompt, the
target and the parameters that change the result), and the checksum a stored row must match before
it is served. Every function here is part of the on-disk format: a change makes old rows unreachable."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

KINDS = ("generate", "score", "attention")

# Version of the stop-string rule, part of every generation key: outputs cut under an older rule
# (version 1 cut Gemma's answers that began with a newline to nothing) are never served again.
STOP_RULE = 2
# Version of the scoring rule, part of every score key: version 1 read the transformers backend's
# logits one position off after an empty prompt without a BOS token (SmolLM2's and Qwen3's passage
# perplexities were in the tens of thousands), so its scores are never served again.
SCORE_RULE = 2


@dataclass(frozen=True)
class AttentionRequest:
    """One attention call: a rendered prompt, the character spans of its passages, and the answer
    whose tokens attend to them (the answer the model generated for that prompt)."""

    prompt: str
    spans: tuple[tuple[int, int], ...]
    answer: str


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def make_key(kind: str, fingerprint: str, backend: str, prompt: str, target: str, params: dict[str, Any]) -> str:
    """sha256 hex key of one call."""
    payload = canonical_json([kind, fingerprint, backend, prompt, target, params])
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def row_checksum(key: str, value: str) -> str:
    """sha256 hex of a row's key and stored value: what is checked before a row is served."""
    return hashlib.sha256(f"{key}\n{value}".encode()).hexdigest()


def generation_params(generator: Any, max_new_tokens: int, stop: Iterable[str]) -> dict[str, Any]:
    """The parameters that are part of a generation's key. The dtype changes outputs, so it is one,
    and so is whatever the backend adds (``store_key_extras``: e.g. the vLLM version)."""
    return {
        "decoding": "greedy",
        "max_new_tokens": int(max_new_tokens),
        "stop": sorted(set(stop)),  # a set of strings: order and repeats do not change outputs
        "stop_rule": STOP_RULE,
        "dtype": getattr(generator, "dtype", None),
        **_extras(generator),
    }


def scoring_params(generator: Any, **options: Any) -> dict[str, Any]:
    """The parameters of a score or attention call's key."""
    return {"dtype": getattr(generator, "dtype", None), **options, **_extras(generator)}


def _extras(generator: Any) -> dict[str, Any]:
    extras = getattr(generator, "store_key_extras", None)
    return dict(extras()) if callable(extras) else {}


def job_name(rule: str, wildcards: dict[str, str] | None = None) -> str:
    """The job part of a shard's name for the job of ``rule`` with ``wildcards``."""
    parts = [rule] + [f"{k}={v}" for k, v in sorted((wildcards or {}).items())]
    return "+".join(parts).replace("/", "-")
