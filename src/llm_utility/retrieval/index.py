"""FAISS inner-product indexes over embedding shards, search, and the run table.

Embeddings are unit vectors, so inner product is cosine similarity. FAISS is imported inside the
functions: the FlagEmbedding test environment imports this package without it.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from llm_utility.io import atomic_path, conform, write_text
from llm_utility.schemas import RUN_SCHEMA

if TYPE_CHECKING:
    import faiss

log = logging.getLogger(__name__)

ADD_CHUNK = 65_536  # rows copied out of the memory map per add(): bounded memory at any corpus size


MIN_POINTS_PER_CENTROID = 39  # FAISS warns when k-means gets fewer training points per centroid
DEFAULT_POINTS_PER_CENTROID = 64  # between FAISS's minimum (39) and the most it uses (256)


def _n_gpus() -> int:
    import faiss

    return faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0


def _gpu_wanted(use_gpu: bool | None) -> bool:
    n_gpus = _n_gpus()
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


class _Shard:
    """An embedding shard (.npy) read with plain file reads, a chunk or a row at a time.

    Not through a memory map: the pages of a mapped file that were read count in the process's
    resident memory until unmapped, so a memory map read end to end looks (to ``ps``, and to a
    scheduler's memory accounting) like the whole shard in memory.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        header = np.load(path, mmap_mode="r")  # parses the header; no data is read
        self.path, self.shape, self.dtype, self.offset = os.fspath(path), header.shape, header.dtype, header.offset
        self.fortran = header.flags.f_contiguous and not header.flags.c_contiguous
        del header

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def row_bytes(self) -> int:
        return self.shape[1] * self.dtype.itemsize

    def rows(self, start: int, stop: int) -> np.ndarray:
        """Rows [start, stop) as a C-contiguous float32 array."""
        out = np.empty((stop - start, self.shape[1]), dtype=self.dtype)
        with open(self.path, "rb") as fh:
            fh.seek(self.offset + start * self.row_bytes)
            if fh.readinto(memoryview(out).cast("B")) != out.nbytes:
                raise ValueError(f"{self.path}: shorter than its header says")
        return np.ascontiguousarray(out, dtype=np.float32)

    def pick(self, rows: np.ndarray) -> np.ndarray:
        """The given rows (sorted), one read each."""
        out = np.empty((len(rows), self.shape[1]), dtype=self.dtype)
        fd = os.open(self.path, os.O_RDONLY)
        try:
            for i, row in enumerate(rows):
                out[i] = np.frombuffer(
                    os.pread(fd, self.row_bytes, self.offset + int(row) * self.row_bytes), self.dtype
                )
        finally:
            os.close(fd)
        return out.astype(np.float32, copy=False)


def _open_shards(shard_paths: Sequence[str | os.PathLike]) -> list[_Shard]:
    if not shard_paths:
        raise ValueError("build_index needs at least one embedding shard")
    shards = [_Shard(p) for p in shard_paths]
    dims = {s.shape[1] if len(s.shape) == 2 else None for s in shards}
    if len(dims) != 1 or None in dims:
        raise ValueError(f"embedding shards must be 2-D with one dimension; got shapes {[s.shape for s in shards]}")
    if any(s.fortran for s in shards):
        raise ValueError("embedding shards must be in C order (row after row), as encode_corpus_shard writes them")
    return shards


def _sample_rows(shards: list[_Shard], size: int, seed: int) -> np.ndarray:
    """A uniform sample of ``size`` rows across the shards, reading only those rows."""
    n = sum(len(s) for s in shards)
    picked = np.sort(np.random.default_rng(seed).choice(n, size=size, replace=False))
    parts, offset = [], 0
    for shard in shards:
        local = picked[(picked >= offset) & (picked < offset + len(shard))] - offset
        parts.append(shard.pick(local))
        offset += len(shard)
    return np.ascontiguousarray(np.concatenate(parts))


def _centroids(index: faiss.Index) -> int:
    """The most k-means centroids training ``index`` computes: IVF lists, or PQ codebook entries."""
    import faiss

    most = 0
    try:
        ivf = faiss.extract_index_ivf(index)
    except RuntimeError:  # not an IVF index
        ivf = None
    if ivf is not None:
        most = int(ivf.nlist)
    for holder in (ivf, index):
        pq = getattr(faiss.downcast_index(holder), "pq", None) if holder is not None else None
        if pq is not None:
            most = max(most, int(pq.ksub))
    return most


def train_sample_size(index: faiss.Index, n: int, train_sample: int | None = None) -> int:
    """How many vectors to train ``index`` on: ``train_sample``, else 64 per centroid, at most ``n``.

    FAISS's k-means wants at least 39 points per centroid (it warns below) and uses at most 256;
    a sample below 39 per centroid is logged as a warning here too, with the numbers.
    """
    centroids = _centroids(index)
    size = int(train_sample) if train_sample else max(DEFAULT_POINTS_PER_CENTROID * centroids, 10_000)
    size = min(size, n)
    if centroids and size < MIN_POINTS_PER_CENTROID * centroids:
        log.warning(
            "training %d centroids on %d vectors (%.1f per centroid; FAISS wants >= %d): raise train_sample, "
            "or use fewer IVF lists for a corpus of %d vectors",
            centroids,
            size,
            size / centroids,
            MIN_POINTS_PER_CENTROID,
            n,
        )
    return size


def _train(index: faiss.Index, sample: np.ndarray, use_gpu: bool | None) -> faiss.Index:
    """Train ``index`` once, on one GPU when wanted (k-means is where a GPU pays), and return it on the CPU."""
    import faiss

    if _gpu_wanted(use_gpu):
        try:
            gpu_index = faiss.index_cpu_to_gpu(faiss.StandardGpuResources(), 0, index)
        except RuntimeError as err:  # no GPU version of this index type
            if use_gpu:
                raise
            log.warning("training on the CPU: FAISS cannot put this index on a GPU (%s)", err)
        else:
            gpu_index.train(sample)
            return faiss.index_gpu_to_cpu(gpu_index)
    index.train(sample)
    return index


def _coarse_assigner(index: faiss.Index, use_gpu: bool | None) -> tuple[Any, Any] | None:
    """For a plain IVF index with GPUs: (ivf, the coarse quantizer replicated on every GPU), else None.

    Adding to an IVF index is dominated by assigning each vector to its nearest list (21M x 65,536
    inner products of dimension 1024 for the paper's corpus); every GPU takes a share of each chunk,
    and the encoded vectors go into the one CPU index, which is what gets written.
    """
    import faiss

    if not _gpu_wanted(use_gpu) or not isinstance(faiss.downcast_index(index), faiss.IndexIVF):
        return None
    ivf = faiss.downcast_index(index)
    try:
        return ivf, faiss.index_cpu_to_all_gpus(ivf.quantizer)  # replicated: queries split across GPUs
    except RuntimeError as err:
        if use_gpu:
            raise
        log.warning("adding on the CPU: FAISS cannot put the quantizer on the GPUs (%s)", err)
        return None


def _add_chunk(index: faiss.Index, chunk: np.ndarray, ids: np.ndarray, assigner: tuple[Any, Any] | None) -> None:
    """Add ``chunk`` under the row ids ``ids`` (its rows in the concatenated shards)."""
    import faiss

    if assigner is None:
        index.add_with_ids(chunk, ids)
        return
    ivf, quantizer = assigner
    _, lists = quantizer.search(chunk, 1)
    lists = np.ascontiguousarray(lists.ravel(), dtype=np.int64)
    ivf.add_core(len(chunk), faiss.swig_ptr(chunk), faiss.swig_ptr(ids), faiss.swig_ptr(lists))


def _fill_flat(flat: faiss.IndexFlat, shards: list[_Shard], n: int) -> None:
    """Copy the vectors into a flat index's storage, allocated once at its final size.

    ``add`` would grow the storage chunk by chunk, and each reallocation holds the old and the new
    buffer at once: up to twice the index (86 GB for 21M x 1024) at the peak. A flat index's codes
    are the float32 vectors themselves, so they are written in place.
    """
    import faiss

    size = n * flat.code_size
    flat.codes.resize(size)
    storage = faiss.rev_swig_ptr(flat.codes.data(), size).view(np.float32).reshape(n, flat.d)
    done = 0
    for shard in shards:
        for chunk in _shard_chunks(shard):
            storage[done : done + len(chunk)] = chunk
            done += len(chunk)
    flat.ntotal = done


def _shard_chunks(shard: _Shard) -> Iterator[np.ndarray]:
    for i in range(0, len(shard), ADD_CHUNK):
        yield shard.rows(i, min(i + ADD_CHUNK, len(shard)))


class _Checkpoints:
    """The resumable state of one build, in a hidden folder beside the index: the trained (empty)
    index, then one part per shard (the trained index holding that shard's vectors), each written
    atomically, so a build killed at any point (a scheduler's time limit) resumes after the last
    complete step. ``inputs.json`` records what the state was built from (factory, training
    settings, each shard's size and mtime): a folder left by other inputs is discarded, not reused.
    The folder is created only when the first checkpoint is written and removed once the index is.
    """

    def __init__(self, out_path: str | os.PathLike, inputs: dict[str, Any]) -> None:
        out_path = Path(out_path)
        self.dir = out_path.with_name(f".{out_path.name}.partial")
        self.inputs = inputs
        recorded = self.dir / "inputs.json"
        if self.dir.is_dir() and (not recorded.is_file() or json.loads(recorded.read_text()) != inputs):
            log.info("discarding %s: it was built from other inputs", self.dir)
            shutil.rmtree(self.dir)

    def _path(self, name: str) -> Path:
        return self.dir / name

    def has(self, name: str) -> bool:
        return self._path(name).is_file()

    def load(self, name: str) -> faiss.Index | None:
        import faiss

        return faiss.read_index(str(self._path(name))) if self.has(name) else None

    def save(self, name: str, index: faiss.Index) -> None:
        import faiss

        if not self.dir.is_dir():
            self.dir.mkdir(parents=True)
            write_text(json.dumps(self.inputs, indent=1), self._path("inputs.json"))
        with atomic_path(self._path(name)) as tmp:
            faiss.write_index(index, str(tmp))

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def _inputs_record(shards: list[_Shard], index_factory: str, train_sample: int | None, seed: int) -> dict[str, Any]:
    files = []
    for shard in shards:
        stat = os.stat(shard.path)
        files.append({"path": os.path.abspath(shard.path), "bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns})
    return {"index_factory": index_factory, "train_sample": train_sample, "seed": seed, "shards": files}


def _trained(
    index: faiss.Index,
    shards: list[_Shard],
    n: int,
    train_sample: int | None,
    seed: int,
    use_gpu: bool | None,
    checkpoints: _Checkpoints,
    index_factory: str,
) -> faiss.Index:
    """``index`` trained (or as it is, if it needs no training), from the checkpoint when there is one."""
    if index.is_trained:
        return index
    saved = checkpoints.load("trained.faiss")
    if saved is not None:
        log.info("resuming: the trained %s from %s", index_factory, checkpoints.dir)
        return saved
    started = time.perf_counter()
    size = train_sample_size(index, n, train_sample)
    sample = _sample_rows(shards, size, seed)
    log.info("training %s on %d of %d vectors (%d GPU(s) visible)", index_factory, len(sample), n, _n_gpus())
    index = _train(index, sample, use_gpu)
    del sample
    log.info("trained in %.1f s", time.perf_counter() - started)
    checkpoints.save("trained.faiss", index)
    return index


def _add_by_shard(
    trained: faiss.Index, shards: list[_Shard], use_gpu: bool | None, checkpoints: _Checkpoints
) -> faiss.Index:
    """An IVF index's vectors, assigned to their lists shard by shard into checkpointed parts, then
    merged (list by list, in row order) into one index."""
    import faiss

    assigner = _coarse_assigner(trained, use_gpu)
    offset = 0
    for i, shard in enumerate(shards):
        name = f"part-{i}.faiss"
        if checkpoints.has(name):
            log.info("resuming: shard %d of %d already assigned", i + 1, len(shards))
        else:
            started = time.perf_counter()
            part = faiss.clone_index(trained)
            part_assigner = None if assigner is None else (faiss.downcast_index(part), assigner[1])
            row = offset
            for chunk in _shard_chunks(shard):
                _add_chunk(part, chunk, np.arange(row, row + len(chunk), dtype=np.int64), part_assigner)
                row += len(chunk)
            checkpoints.save(name, part)
            log.info(
                "shard %d of %d: %d vectors assigned in %.1f s",
                i + 1,
                len(shards),
                len(shard),
                time.perf_counter() - started,
            )
            del part
        offset += len(shard)
    index = faiss.clone_index(trained)
    for i in range(len(shards)):
        part = checkpoints.load(f"part-{i}.faiss")
        index.merge_from(part, 0)  # moves the part's lists over; its ids are already the row ids
        del part
    return index


def build_index(
    shard_paths: Sequence[str | os.PathLike],
    out_path: str | os.PathLike,
    index_factory: str = "Flat",
    train_sample: int | None = None,
    use_gpu: bool | None = None,
    seed: int = 0,
) -> int:
    """Build a FAISS inner-product index over the shards, in order; return the number of vectors.

    Each shard is read in chunks of ``ADD_CHUNK`` rows, so memory stays flat at any corpus size, the
    index itself aside (a flat index is allocated once at its final size, see :func:`_fill_flat`).
    Factories that need training (IVF, PQ) are trained once, on ``train_sample`` rows drawn
    uniformly across shards (None: 64 per k-means centroid, see :func:`train_sample_size`), on one
    GPU when wanted. An IVF index's vectors are then assigned to their lists shard by shard, on all
    GPUs when wanted (the quantizer replicated, each chunk's search split between them), into one CPU
    index; ``search`` shards it across the GPUs. ``use_gpu``: None uses GPUs when FAISS sees them,
    False never, True insists (an error where FAISS has no GPU: faiss-cpu, or no device visible).

    Resumable: the trained index and each shard's assigned part are checkpointed (see
    :class:`_Checkpoints`), so a rerun after a kill, such as a scheduler's time limit, redoes only
    the step that was cut short. The index file appears only once complete.
    """
    import faiss

    _gpu_wanted(use_gpu)  # use_gpu=True without a GPU stops here, before any work
    shards = _open_shards(shard_paths)
    dim, n = shards[0].shape[1], sum(len(s) for s in shards)
    index = faiss.index_factory(dim, index_factory, faiss.METRIC_INNER_PRODUCT)
    started = time.perf_counter()
    checkpoints = _Checkpoints(out_path, _inputs_record(shards, index_factory, train_sample, seed))
    index = _trained(index, shards, n, train_sample, seed, use_gpu, checkpoints, index_factory)
    flat = faiss.downcast_index(index)
    if isinstance(flat, faiss.IndexFlat):
        _fill_flat(flat, shards, n)
    elif isinstance(flat, faiss.IndexIVF):
        index = _add_by_shard(index, shards, use_gpu, checkpoints)
    else:  # other trained indexes (PQ, HNSW, a pre-transform): one pass, training checkpointed
        for shard in shards:
            for chunk in _shard_chunks(shard):
                index.add(chunk)
    if index.ntotal != n:
        raise RuntimeError(f"index holds {index.ntotal} vectors, expected {n}")
    with atomic_path(out_path) as tmp:
        faiss.write_index(index, str(tmp))
    checkpoints.remove()
    log.info(
        "wrote %s (%s, %d vectors of dim %d) in %.1f s", out_path, index_factory, n, dim, time.perf_counter() - started
    )
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
