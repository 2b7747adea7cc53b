"""Jobs of the retrieval stage: the top-k run of a dataset and the retrieval quality table."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from ..io import read_table, write_parquet
from ..schemas import QUERIES_SCHEMA

_log = logging.getLogger("llm_utility")


def retrieve_job(*, queries: str, passages: str, index: str, encoder_spec: Mapping, top_k: int, output: str, log=_log):
    """Encode the queries, search the index and write the run (qid, pid, rank, score)."""
    import polars as pl

    from ..retrieval.encoders import load_encoder
    from ..retrieval.index import run_frame, search

    q = read_table(queries, QUERIES_SCHEMA)
    encoder = load_encoder(encoder_spec)
    emb = encoder.encode_queries(q["question"].to_list())
    scores, rows = search(index, emb, top_k, nprobe=encoder_spec.get("nprobe"))
    pids = pl.read_parquet(passages, columns=["pid"])["pid"].to_numpy()
    write_parquet(run_frame(q["qid"].to_list(), pids, scores, rows), output)
    log.info("retrieved top-%d for %d queries", top_k, q.height)


def retrieval_table_job(*, queries: Mapping[str, str], candidates: Mapping[str, str], top_k: int, csv: str, md: str) -> None:
    """Per dataset: number of queries, answer recall@k and human-passage recall@k (percent).

    ``queries`` and ``candidates`` map each dataset to its queries and candidates tables."""
    import polars as pl

    from ..metrics import retrieval_quality
    from ..report.tables import write_simple_table
    from .answers import read_candidates

    rows = []
    for name, qpath in queries.items():
        q = read_table(qpath, QUERIES_SCHEMA)
        cands = read_candidates(candidates[name])
        texts = {pid: f"{p.title} {p.text}" for pid, p in cands.passages.items()}
        per_query = retrieval_quality(q, cands.C, texts)
        rows.append(
            {
                "dataset": name,
                "queries": q.height,
                "k": top_k,
                f"answer_recall@{top_k}": _percent(per_query["answer_recall"].mean()),
                f"human_recall@{top_k}": _percent(per_query["human_recall"].mean()),
            }
        )
    write_simple_table(pl.DataFrame(rows), csv, md)


def _percent(x):
    return None if x is None else round(100 * x, 2)
