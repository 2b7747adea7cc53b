"""FAISS inner-product indexes over embedding shards, search, and the run table.

Embeddings are unit vectors, so inner product is cosine similarity. FAISS is imported inside the
functions: the FlagEmbedding test environment imports this package without it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from llm_utility.io import RUN_SCHEMA, atomic_path, conform

if TYPE_CHECKING:
    import faiss

log = logging.getLogger(__name__)

ADD_CHUNK = 65_536  # rows copied out of the memory map per add(): bounded memory at any corpus size


def _gpu_wanted(use_gpu: bool | None) -> bool:
    import faiss

    n_gpus = faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0
    if use_gpu and n_gpus == 0:
        raise RuntimeError("use_gpu=True but FAISS sees no GPU (faiss-cpu installed, or no device visible)")
    return use_gpu is not False and n_gpus > 0


def _to_gpu(index: faiss.Index, use_gpu: bool | None) -> tuple[faiss.Index, bool]:
    """Clone ``index`` onto all visible GPUs when wanted; with ``use_gpu=None`` fall back to CPU."""
    import faiss

    if not _gpu_wanted(use_gpu):
        return index, False
    options = faiss.GpuMultipleClonerOptions()
    options.shard = True  # split the vectors across GPUs rather than replicate them: bigger indexes fit
    try:
        return faiss.index_cpu_to_all_gpus(index, co=options), True
    except RuntimeError as err:  # an index type without a GPU version, or out of GPU memory
        if use_gpu:
            raise
        log.warning("FAISS GPU clone failed (%s); using the CPU", err)
        return index, False


def _open_shards(shard_paths: Sequence[str | os.PathLike]) -> list[np.ndarray]:
    if not shard_paths:
        raise ValueError("build_index needs at least one embedding shard")
    shards = [np.load(p, mmap_mode="r") for p in shard_paths]
    dims = {s.shape[1] if s.ndim == 2 else None for s in shards}
    if len(dims) != 1 or None in dims:
        raise ValueError(f"embedding shards must be 2-D with one dimension; got shapes {[s.shape for s in shards]}")
    return shards


def _sample_rows(shards: list[np.ndarray], size: int, seed: int) -> np.ndarray:
    """A uniform sample of ``size`` rows across the shards, reading only those rows."""
    n = sum(len(s) for s in shards)
    picked = np.sort(np.random.default_rng(seed).choice(n, size=size, replace=False))
    parts, offset = [], 0
    for shard in shards:
        local = picked[(picked >= offset) & (picked < offset + len(shard))] - offset
        parts.append(np.asarray(shard[local], dtype=np.float32))
        offset += len(shard)
    return np.ascontiguousarray(np.concatenate(parts))


def build_index(
    shard_paths: Sequence[str | os.PathLike],
    out_path: str | os.PathLike,
    index_factory: str = "Flat",
    train_sample: int = 100_000,
    use_gpu: bool | None = None,
    seed: int = 0,
) -> int:
    """Build a FAISS inner-product index over the shards, in order; return the number of vectors.

    Each shard is memory-mapped and added in chunks, so the embeddings never sit in memory twice.
    Factories that need training (IVF, PQ) are trained first on ``train_sample`` rows drawn
    uniformly across shards. With ``use_gpu=None`` a GPU is used when FAISS sees one and the
    factory needs training. The index file appears only once complete.
    """
    import faiss

    shards = _open_shards(shard_paths)
    dim, n = shards[0].shape[1], sum(len(s) for s in shards)
    index = faiss.index_factory(dim, index_factory, faiss.METRIC_INNER_PRODUCT)
    # Left to auto, a GPU is used only to train (k-means is where it pays); adding to a flat index is a copy.
    work, on_gpu = _to_gpu(index, False if use_gpu is None and index.is_trained else use_gpu)
    if not work.is_trained:
        sample = _sample_rows(shards, min(train_sample, n), seed)
        log.info("training %s on %d of %d vectors", index_factory, len(sample), n)
        work.train(sample)
    for shard in shards:
        for i in range(0, len(shard), ADD_CHUNK):
            work.add(np.ascontiguousarray(shard[i : i + ADD_CHUNK], dtype=np.float32))
    if work.ntotal != n:
        raise RuntimeError(f"index holds {work.ntotal} vectors, expected {n}")
    cpu_index = faiss.index_gpu_to_cpu(work) if on_gpu else work
    with atomic_path(out_path) as tmp:
        faiss.write_index(cpu_index, str(tmp))
    log.info("wrote %s (%s, %d vectors of dim %d)", out_path, index_factory, n, dim)
    return n


def search(
    index: str | os.PathLike | faiss.Index,
    query_emb: np.ndarray,
    k: int,
    use_gpu: bool | None = None,
    nprobe: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` inner-product search; return ``(scores, row_ids)``, both of shape (n_queries, k).

    ``index`` is a path written by :func:`build_index` (or a loaded index). Row ids index the
    concatenated shards, i.e. the corpus rows; -1 pads queries with fewer than k hits. GPUs are used
    when FAISS sees them unless ``use_gpu`` is False. ``nprobe`` sets an IVF index's probe count.
    """
    import faiss

    if not isinstance(index, faiss.Index):
        index = faiss.read_index(os.fspath(index))
    if nprobe is not None:
        faiss.extract_index_ivf(index).nprobe = nprobe  # copied along when cloned to a GPU
    queries = np.ascontiguousarray(np.atleast_2d(query_emb), dtype=np.float32)
    if queries.shape[1] != index.d:
        raise ValueError(f"query dimension {queries.shape[1]} does not match the index's {index.d}")
    index, _ = _to_gpu(index, use_gpu)
    scores, rows = index.search(queries, k)
    return scores, rows


def run_frame(
    qids: Sequence[str], pids_by_row: Sequence[str] | pl.Series | np.ndarray, scores: np.ndarray, rows: np.ndarray
) -> pl.DataFrame:
    """The run table (qid, pid, rank, score) from a search result, in query order then rank.

    ``pids_by_row[i]`` is the pid of corpus row i. Padding rows (-1) are skipped; ranks are 1-based
    and count only real hits.
    """
    scores, rows = np.asarray(scores), np.asarray(rows)
    if scores.shape != rows.shape or scores.ndim != 2 or len(rows) != len(qids):
        raise ValueError(f"scores {scores.shape} and rows {rows.shape} must be (n_queries={len(qids)}, k)")
    pids = pids_by_row if isinstance(pids_by_row, pl.Series) else pl.Series(values=pids_by_row)
    valid = rows >= 0
    query_idx = np.nonzero(valid)[0]  # row-major: queries in order, hits in rank order
    frame: dict[str, Any] = {
        "qid": pl.Series(values=qids).cast(pl.String).gather(query_idx),
        "pid": pids.cast(pl.String).gather(rows[valid]),
        "rank": np.cumsum(valid, axis=1)[valid],
        "score": scores[valid],
    }
    return conform(pl.DataFrame(frame), RUN_SCHEMA, "run")
