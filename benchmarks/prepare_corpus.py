"""Corpus preparation rate (passages/s), peak memory and disk per passage, printed as JSON lines.

Synthesizes files in the publishers' layouts and runs the data jobs on them, each in a fresh process
(so ``ru_maxrss`` is that job's peak):

- ``kilt-chunk``: one ``chunk_corpus_shard`` job over a KILT-layout knowledge source whose pages have
  KILT's average size (about 580 words, so ~5.8 passages of 100 words per page, as 34M / 5.9M);
- ``kilt-merge``: ``prepare_corpus`` concatenating shard files into passages.parquet;
- ``dpr-tsv``: ``prepare_corpus`` streaming a psgs_w100.tsv-layout file (100-word quoted passages);
- ``msmarco-tsv``: ``prepare_corpus`` streaming a collection.tsv-layout file (~56 words per passage).

    .venv/bin/python benchmarks/prepare_corpus.py --pages 20000 --passages 200000
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

WORDS = (
    "the of and in to a was is for on as by with he that at from his it an were are which this also be "
    "has or had first one their its new after who they two her she been other when there all during into "
    "school time may years more most only over city some world would where later up such used many can "
    "state about national out known university united then made"
).split()


def _paragraph(rng: random.Random, n: int) -> str:
    return " ".join(rng.choices(WORDS, k=n)) + "."


def write_knowledge_source(path: Path, pages: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        for i in range(pages):
            text = [f"Page {i}\n"]
            words = 0
            while words < 580:
                n = rng.randint(40, 120)
                if rng.random() < 0.15:
                    text.append(f"Section::::Part {len(text)}.\n")
                text.append(_paragraph(rng, n) + "\n")
                words += n
            page = {
                "_id": str(i),
                "wikipedia_id": str(i + 1),
                "wikipedia_title": f"Page {i}",
                "text": text,
                "anchors": [{"text": "x", "href": "y", "paragraph_id": 1, "start": 0, "end": 1}],
                "categories": "Synthetic",
                "history": {"pageid": i + 1},
            }
            f.write(json.dumps(page) + "\n")


def write_dpr_tsv(path: Path, n: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        f.write("id\ttext\ttitle\n")
        for i in range(n):
            f.write(f'{i + 1}\t"{_paragraph(rng, 100)} ""quoted"""\tPage {i // 6}\n')


def write_msmarco_tsv(path: Path, n: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            f.write(f"{i}\t{_paragraph(rng, 56)}\n")


def _job(code: str) -> dict:
    """Run ``code`` in a fresh interpreter; return its JSON result plus its peak RSS."""
    wrapper = code + (
        "\nimport json, resource\n"
        "print(json.dumps({**result, 'peak_rss_mb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))\n"
    )
    # This checkout's library, whatever the interpreter's editable install points at.
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)}
    out = subprocess.run([sys.executable, "-c", wrapper], capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=20_000, help="knowledge-source pages (about 5.8 passages each)")
    parser.add_argument("--passages", type=int, default=200_000, help="rows of the TSV corpora")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        ks, dpr, msm = d / "kilt_knowledgesource.json", d / "psgs_w100.tsv", d / "collection.tsv"
        write_knowledge_source(ks, args.pages)
        write_dpr_tsv(dpr, args.passages)
        write_msmarco_tsv(msm, args.passages)
        runs = {
            "kilt-chunk": f"""
import time
from llm_utility.pipeline.data import chunk_corpus_shard_job
t = time.perf_counter()
n = chunk_corpus_shard_job(knowledge_source={str(ks)!r}, shard=0, n_shards=1, words=100,
    output={str(d / "shard0.parquet")!r})
result = {{'passages': n, 'seconds': time.perf_counter() - t}}
""",
            "kilt-merge": f"""
import time
from llm_utility.pipeline.data import prepare_corpus_job
t = time.perf_counter()
n = prepare_corpus_job(name='k', cfg={{'source': 'kilt'}}, inputs={{'shards': [{str(d / "shard0.parquet")!r}]}},
    output={str(d / "kilt.parquet")!r}, seed=0)
result = {{'passages': n, 'seconds': time.perf_counter() - t}}
""",
            "dpr-tsv": f"""
import time
from llm_utility.pipeline.data import prepare_corpus_job
t = time.perf_counter()
n = prepare_corpus_job(name='d', cfg={{'source': 'dpr'}}, inputs={{'file': {str(dpr)!r}}},
    output={str(d / "dpr.parquet")!r}, seed=0)
result = {{'passages': n, 'seconds': time.perf_counter() - t}}
""",
            "msmarco-tsv": f"""
import time
from llm_utility.pipeline.data import prepare_corpus_job
t = time.perf_counter()
n = prepare_corpus_job(name='m', cfg={{'source': 'msmarco'}}, inputs={{'file': {str(msm)!r}}},
    output={str(d / "msmarco.parquet")!r}, seed=0)
result = {{'passages': n, 'seconds': time.perf_counter() - t}}
""",
        }
        outputs = {
            "kilt-chunk": "shard0.parquet",
            "kilt-merge": "kilt.parquet",
            "dpr-tsv": "dpr.parquet",
            "msmarco-tsv": "msmarco.parquet",
        }
        inputs = {"kilt-chunk": ks, "kilt-merge": d / "shard0.parquet", "dpr-tsv": dpr, "msmarco-tsv": msm}
        for name, code in runs.items():
            r = _job(code)
            out = d / outputs[name]
            r.update(
                stage=name,
                passages_per_s=round(r["passages"] / r["seconds"]),
                seconds_per_million=round(1e6 * r["seconds"] / r["passages"], 1),
                input_bytes_per_passage=round(os.path.getsize(inputs[name]) / r["passages"]),
                parquet_bytes_per_passage=round(out.stat().st_size / r["passages"]),
                seconds=round(r["seconds"], 2),
                peak_rss_mb=round(r["peak_rss_mb"]),
            )
            print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
