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


def retrieval_table_job(
    *,
    queries: Mapping[str, str],
    runs: Mapping[tuple[str, str], str],
    pool_runs: Mapping[str, str],
    top_k: int,
    csv: str,
    md: str,
) -> None:
    """Per (dataset, run): number of queries, answer recall@k and human-passage recall@k (percent).

    ``queries`` maps each dataset to its queries table, ``runs`` each (dataset, run) to the run's
    top-k with texts (``run_topk``), ``pool_runs`` each dataset to its configured retriever (whose
    top-k is the candidates C)."""
    import polars as pl

    from ..metrics import retrieval_quality
    from ..report.tables import write_simple_table
    from ..schemas import RUN_TOPK_SCHEMA

    rows = []
    tables = {name: read_table(path, QUERIES_SCHEMA) for name, path in queries.items()}
    for (name, run), path in runs.items():
        q = tables[name]
        top = read_table(path, RUN_TOPK_SCHEMA).sort(["qid", "rank"])
        ranked = {qid: [] for qid in q["qid"].to_list()}
        texts = {}
        for qid, pid, title, text in top.select("qid", "pid", "title", "text").iter_rows():
            ranked[qid].append(pid)
            texts[pid] = f"{title} {text}"
        per_query = retrieval_quality(q, ranked, texts)
        rows.append(
            {
                "dataset": name,
                "run": run,
                "pool_run": pool_runs.get(name) == run,
                "queries": q.height,
                "k": top_k,
                f"answer_recall@{top_k}": _percent(per_query["answer_recall"].mean()),
                f"human_recall@{top_k}": _percent(per_query["human_recall"].mean()),
            }
        )
    write_simple_table(
        pl.DataFrame(rows),
        csv,
        md,
        title="Retrieval quality of each run",
        intro="How well each run's top-k (a retriever's, or a run file's) covers the answers and the human passages, "
        "per dataset. The candidates C of every other table are the top-k of the run with pool_run true.",
        glossary=(
            ("pool_run", "true for the dataset's configured retriever, whose top-k is the candidates C"),
            ("queries, k", "the dataset's queries; the cutoff (top_k)"),
            (f"answer_recall@{top_k}", "share of the queries with an answer string in the top-k (%)"),
            (
                f"human_recall@{top_k}",
                "share of a query's human passages found in the top-k, averaged over the queries that have some (%)",
            ),
        ),
        missing="undefined: a claim's label (SUPPORTS, REFUTES) never occurs in a passage (answer recall), or no "
        "query has a human passage (human recall)",
    )


def _percent(x):
    return None if x is None else round(100 * x, 2)


def bm25_index_job(*, passages: str, spec: Mapping, output: str, log=_log) -> None:
    """Build a BM25 index (a folder) over every passage of the corpus."""
    import time

    from ..retrieval.lexical import build_bm25_index

    started = time.perf_counter()
    n = build_bm25_index(passages, output, spec)
    log.info("BM25 index of %d passages in %.1f s", n, time.perf_counter() - started)


def retrieve_bm25_job(*, queries: str, passages: str, index: str, spec: Mapping, depth: int, output: str, log=_log):
    """Search the BM25 index with every query and write the run (qid, pid, rank, score)."""
    import polars as pl

    from ..retrieval.index import run_frame
    from ..retrieval.lexical import bm25_search

    q = read_table(queries, QUERIES_SCHEMA)
    scores, rows = bm25_search(index, q["question"].to_list(), depth, spec)
    pids = pl.read_parquet(passages, columns=["pid"])["pid"].to_numpy()
    run = run_frame(q["qid"].to_list(), pids, scores, rows)
    write_parquet(run, output)
    empty = q.height - run["qid"].n_unique()
    log.info("BM25: top-%d for %d queries (%d with no query term in the corpus)", depth, q.height, empty)


def run_topk_job(*, run: str, queries: str, passages: str, top_k: int, output: str, log=_log) -> None:
    """A run's top-k with the passages' texts (qid, pid, rank, title, text), read once from the
    corpus: what an LLM answers with, and what the retrieval table scores. ``run`` is a run table
    or a TREC run file; a passage it names that the corpus lacks stops the job, naming the file."""
    import polars as pl

    from ..data.trec import read_ranked
    from ..schemas import RUN_TOPK_SCHEMA

    ranked = read_ranked(run)
    qids = read_table(queries, QUERIES_SCHEMA)["qid"].to_list()
    unknown = sorted(set(ranked) - set(qids))
    if unknown:
        log.warning("%s: %d queries not in the dataset ignored, e.g. %s", run, len(unknown), unknown[:3])
    rows = [(qid, pid, rank) for qid in qids for rank, pid in enumerate(ranked.get(qid, [])[:top_k], start=1)]
    frame = pl.DataFrame(rows, schema={"qid": pl.String, "pid": pl.String, "rank": pl.Int32}, orient="row")
    needed = frame["pid"].unique().to_list()
    texts = pl.scan_parquet(passages).filter(pl.col("pid").is_in(needed)).select("pid", "title", "text").collect()
    missing = sorted(set(needed) - set(texts["pid"].to_list()))
    if missing:
        raise KeyError(f"{run}: {len(missing)} passage id(s) not in the corpus {passages}, e.g. {missing[:3]}")
    table = frame.join(texts, on="pid", how="left", maintain_order="left").select(list(RUN_TOPK_SCHEMA))
    write_parquet(table, output)
    log.info("%s: top-%d of %d queries (%d ranked nothing)", run, top_k, len(qids), len(qids) - table["qid"].n_unique())
