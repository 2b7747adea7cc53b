"""Jobs of the runs stage: every run of a dataset (its configured retriever's, the other retrievers',
TREC run files) scored by every judge (the human passages, each LLM's qrels over C and U), and
whether each judge's metric predicts the LLM's answers with each run's top-k."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import polars as pl

from ..io import read_table, write_parquet
from ..schemas import ANSWERS_SCHEMA, QUERIES_SCHEMA

_log = logging.getLogger("llm_utility")


def read_judges(qrels: Mapping[tuple[str, str, str], str], queries: Mapping[str, pl.DataFrame]):
    """Per dataset: the human judge, then each LLM's qrels (C, then U) in the keys' order."""
    from ..report.runs import human_judge, judge_from_qrels

    judges = {d: [human_judge(q)] for d, q in queries.items()}
    for (dataset, llm, pool), path in qrels.items():
        judges[dataset].append(judge_from_qrels(path, llm, pool))
    return judges


def _scored(runs: Mapping[tuple[str, str], str], qrels, queries: Mapping[str, str], k: int):
    from ..data.trec import read_ranked
    from ..report.runs import score_runs

    q = {d: read_table(path, QUERIES_SCHEMA) for d, path in queries.items()}
    ranked = {key: read_ranked(path) for key, path in runs.items()}
    qids = {d: frame["qid"].to_list() for d, frame in q.items()}
    return score_runs(ranked, read_judges(qrels, q), qids, k)


def external_runs_job(
    *,
    runs: Mapping[tuple[str, str], str],
    qrels: Mapping[tuple[str, str, str], str],
    queries: Mapping[str, str],
    pool_runs: Mapping[str, str],
    k: int,
    intervals: Mapping[str, Any] | None,
    style: Mapping[str, Any],
    csv: str,
    md: str,
    png: str,
    pdf: str,
    log: logging.Logger = _log,
) -> pl.DataFrame:
    """The run table (``report.runs.run_table``) and its figure: every run of every dataset, scored
    by the human passages and by each LLM's qrels (C and U). ``runs`` maps (dataset, run) to a run
    table or TREC file, ``qrels`` (dataset, llm, pool) to a qrels file, ``queries`` a dataset to its
    queries, ``pool_runs`` a dataset to its configured retriever."""
    from ..report.figures import plot_runs
    from ..report.notation import interval_words
    from ..report.runs import run_table
    from ..report.tables import write_simple_table

    scored = _scored(runs, qrels, queries, k)
    table = run_table(scored, k, pool_runs, intervals)
    write_simple_table(
        table,
        csv,
        md,
        title=f"Every run scored by every judge (@{k})",
        intro="Each run of each dataset (its configured retriever's, the other retrievers', TREC run files) against "
        "the human passages and each LLM's qrels over C and U, on the queries with a relevant passage for that judge.",
        glossary=(
            (
                "pool_run",
                "true for the dataset's configured retriever, whose top-k is the pool C: its Recall under C is 100% "
                "by construction",
            ),
            ("judge, pool", "Human (the human passages, pool human), or an LLM's qrels over the pool C or U"),
            ("queries", "the queries with a relevant passage for that judge"),
            (f"ndcg@{k}, recall@{k}", "mean NDCG and Recall at k over those queries (%)"),
            ("_lo, _hi", f"the bounds of {interval_words(intervals)}"),
            (
                f"judged@{k}",
                "share of the run's top-k that the judge judged (%); below 100 the plain scores are lower bounds",
            ),
            ("_condensed", "the same scores with the unjudged passages dropped first"),
        ),
        missing="not defined for this judge: the human passages judge no other passage (judged and condensed "
        "scores); no interval (intervals off, or a single query)",
    )
    plot_runs(table, k, png, pdf, style)
    log.info("%d runs scored by %d judges", len(runs), table.select("dataset", "judge", "pool").n_unique())
    return table


def qrels_agreement_job(
    *,
    runs: Mapping[tuple[str, str], str],
    qrels: Mapping[tuple[str, str, str], str],
    queries: Mapping[str, str],
    answers: Mapping[tuple[str, str, str], str],
    known: Mapping[tuple[str, str], str],
    k: int,
    bootstrap: Mapping[str, Any],
    csv: str,
    md: str,
    pairs: str,
    log: logging.Logger = _log,
) -> pl.DataFrame:
    """Whether each judge's per-query metric of a run's top-k predicts the LLM's correctness with
    that top-k (``report.runs.agreement_table``). ``answers`` maps (dataset, llm, run) to the LLM's
    answers with that run's top-k. ``pairs`` gets the per-(dataset, run, LLM, judge, query) metrics
    with the answer's correctness, which the finding ``llm_qrels_predict_rag`` reads."""
    from ..report.runs import agreement_table, rag_pairs
    from ..report.tables import write_simple_table

    scored = _scored(runs, qrels, queries, k)
    frames = {key: read_table(path, ANSWERS_SCHEMA) for key, path in answers.items()}
    flags = {key: read_table(path).select("qid", "known") for key, path in known.items()}
    from ..report.notation import interval_words

    joined = rag_pairs(scored, frames)
    table = agreement_table(joined, flags, bootstrap, k)
    write_parquet(joined, pairs)
    write_simple_table(
        table,
        csv,
        md,
        title="Does a judge's metric of a run's top-k predict the LLM's answer with it?",
        intro="Per answering LLM and judge, over every (query, run): how well the judge's metric of the run's top-k "
        "separates the LLM's correct answers with that top-k from its wrong ones; across runs, whether the runs' "
        "order by mean metric follows their order by RAG accuracy.",
        glossary=(
            ("llm", "the LLM answering with each run's top-k"),
            ("judge, pool", "Human (the human passages), or an LLM's qrels over the pool C or U"),
            ("own", "true where the judge is the answering LLM's own qrels"),
            ("queries", "all, or unknown: only the queries the LLM does not answer correctly without passages"),
            ("n, runs", "the queries answered with every run; the runs compared"),
            (
                "auc",
                "chance that a correct answer's metric exceeds a wrong one's (Mann-Whitney, ties count half; "
                "0.5: chance)",
            ),
            ("point_biserial", "Pearson's r of the metric with the answer's correctness (0/1)"),
            (
                "kendall_tau",
                "Kendall's tau-b between the runs' order by mean metric and by RAG accuracy; with two runs only -1, 0 "
                "or 1, not meaningful",
            ),
            ("_lo, _hi", f"the bounds of {interval_words(bootstrap)}"),
            ("note", "why a value or interval is missing or rests on fewer resamples"),
        ),
        missing="undefined here: one class of answers absent, a constant metric, or too few runs (the note says which)",
    )
    log.info(
        "agreement of %d judges with %d LLMs' answers",
        table.select("dataset", "judge", "pool").n_unique() if table.height else 0,
        len({llm for _, llm, _ in answers}),
    )
    return table
