"""Time and peak memory of building a BM25 index (retrieval.lexical.build_bm25_index: bm25s with the
default tokenization, English stopwords and Snowball stemming) on a synthetic corpus of 100-word
passages drawn from a Zipfian vocabulary, to extrapolate to the paper's corpora (docs/performance.md,
"BM25 at paper scale"). The build runs in a child process, so its peak memory is its own.

    python benchmarks/bm25_index_scale.py --passages 50000 200000
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import tempfile
import time
from pathlib import Path


def _corpus(n: int, path: Path, seed: int = 0) -> None:
    import numpy as np
    import polars as pl

    rng = np.random.default_rng(seed)
    vocab = np.array([f"w{i}x" for i in range(200_000)])
    words = vocab[np.minimum(rng.zipf(1.1, size=(n, 100)) - 1, len(vocab) - 1)]
    pl.DataFrame(
        {"pid": [str(i) for i in range(n)], "title": ["t"] * n, "text": [" ".join(r) for r in words]}
    ).write_parquet(path)


def _build(passages: str, out: str) -> None:
    from llm_utility.retrieval.lexical import build_bm25_index

    build_bm25_index(passages, out, {"backend": "bm25"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--passages", type=int, nargs="+", default=[50_000])
    args = parser.parse_args()
    print("| passages | build seconds | peak RSS of the build (MB) | KB per passage |")
    print("|---:|---:|---:|---:|")
    spawn = multiprocessing.get_context("spawn")
    for n in args.passages:
        with tempfile.TemporaryDirectory() as tmp:
            corpus = Path(tmp) / "passages.parquet"
            _corpus(n, corpus)
            started = time.perf_counter()
            child = spawn.Process(target=_build, args=(str(corpus), str(Path(tmp) / "bm25")))
            child.start()
            child.join()
            if child.exitcode != 0:
                raise SystemExit(f"the build of {n} passages failed (exit {child.exitcode})")
            seconds = time.perf_counter() - started
            # ru_maxrss of the children: the largest child so far, and each n is larger than the last.
            peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
            print(f"| {n:,} | {seconds:.1f} | {peak_mb:.0f} | {1024 * peak_mb / n:.2f} |")


if __name__ == "__main__":
    main()
