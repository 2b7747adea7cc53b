"""LLM generation: model specs and materialization, two backends behind one interface, and the store.

Importing this package imports neither torch nor vLLM: backends load on ``load_generator``.
"""

from .models import (
    Generator,
    load_generator,
    materialize,
    normalize_spec,
    read_manifest,
    strip_thinking,
    cut_answer,
)
from .store import AttentionRequest, GenerationStore, StoreError, make_key

__all__ = [
    "AttentionRequest",
    "GenerationStore",
    "StoreError",
    "Generator",
    "load_generator",
    "make_key",
    "materialize",
    "normalize_spec",
    "read_manifest",
    "strip_thinking",
    "cut_answer",
]
