"""Dense retrieval: encoders (sentence-transformers or FlagEmbedding), sharded corpus encoding,
FAISS indexes, search and the run table.

Heavy libraries (torch, sentence-transformers, FlagEmbedding, FAISS) are imported only when used, so
this package imports in every environment of the workflow, including FlagEmbedding's own.
"""

from llm_utility.retrieval.encoders import (
    EncoderSpec,
    encode_corpus_shard,
    load_encoder,
    materialize_retriever,
    materialized_spec,
    resolve_model,
    shard_bounds,
)
from llm_utility.retrieval.index import build_index, run_frame, search

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
