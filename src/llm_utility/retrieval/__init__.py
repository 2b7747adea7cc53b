"""Dense retrieval: encoders (sentence-transformers or FlagEmbedding), sharded corpus encoding,
FAISS indexes, search and the run table.

Heavy libraries (torch, sentence-transformers, FlagEmbedding, FAISS) are imported only when used, so
this package imports in every environment of the workflow, including FlagEmbedding's own; the index
functions (which need polars and pyarrow) load on first use, so the encoders also load where only
torch and sentence-transformers are installed (benchmarks/gpu_check.py on a bare GPU image).
"""

from typing import Any

from llm_utility.retrieval.encoders import (
    EncoderSpec,
    encode_corpus_shard,
    load_encoder,
    materialize_retriever,
    materialized_spec,
    resolve_model,
    shard_bounds,
)

_INDEX_NAMES = ("build_index", "run_frame", "search")


def __getattr__(name: str) -> Any:
    if name in _INDEX_NAMES:
        from llm_utility.retrieval import index

        return getattr(index, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "EncoderSpec",
    "build_index",
    "encode_corpus_shard",
    "load_encoder",
    "materialize_retriever",
    "materialized_spec",
    "resolve_model",
    "run_frame",
    "search",
    "shard_bounds",
]
