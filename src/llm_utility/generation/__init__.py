"""LLM generation: model specs (``specs``), the interface both backends share (``generator``), the
transformers and vLLM backends, materialization and loading (``models``), and the store.

Importing this package imports neither torch nor vLLM: backends load on ``load_generator``.
"""

from .generator import Generator, PromptTooLongError, cut_answer, strip_thinking
from .models import load_generator, materialize, read_manifest
from .specs import normalize_spec
from .store import AttentionRequest, GenerationStore, StoreError, make_key

__all__ = [
    "AttentionRequest",
    "GenerationStore",
    "Generator",
    "PromptTooLongError",
    "StoreError",
    "cut_answer",
    "load_generator",
    "make_key",
    "materialize",
    "normalize_spec",
    "read_manifest",
    "strip_thinking",
]
