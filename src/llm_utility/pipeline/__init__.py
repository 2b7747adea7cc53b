"""The jobs behind the workflow's rules, as plain functions of file paths: each reads the files its
rule declares, calls the method and report layers, and writes its outputs atomically. Each workflow
script calls one of them; tests call them directly.

Grouped by stage as the DAG is: ``data`` (corpora and query sets), ``retrieval``, ``answers``
(candidate passages, answers, gold sets), ``judgments`` (selections, rankings, perplexity, qrels),
``parts`` (the gather of a model job's query parts), ``runs`` (every run scored by every judge, and
the qrels' agreement with RAG), ``report`` (tables and figures) and ``findings`` (findings, the
transfer control, cost, config). The jobs of every stage but ``data`` are re-exported here, so a
script reads ``pipeline.table1_job``; ``common`` holds what the jobs that load a model share.
"""

from .answers import answer_job, candidates_job, gold_job, read_candidates
from .findings import config_job, cost_job, findings_job, transfer_unknown_job
from .judgments import judge_job, qrels_job, rank_retriever_job
from .parts import gather_parts_job
from .report import (
    empty_answers_job,
    explorer_job,
    overlap_figure_job,
    perplexity_figure_job,
    rag_table_job,
    selection_table_job,
    selection_transfer_figure_job,
    table1_job,
    table4_job,
    table6_job,
    topk_figure_job,
    transfer_figure_job,
)
from .retrieval import bm25_index_job, retrieval_table_job, retrieve_bm25_job, retrieve_job, run_topk_job
from .runs import external_runs_job, qrels_agreement_job

__all__ = [
    "answer_job",
    "bm25_index_job",
    "candidates_job",
    "config_job",
    "cost_job",
    "empty_answers_job",
    "explorer_job",
    "external_runs_job",
    "findings_job",
    "gather_parts_job",
    "gold_job",
    "judge_job",
    "overlap_figure_job",
    "perplexity_figure_job",
    "qrels_agreement_job",
    "qrels_job",
    "rag_table_job",
    "rank_retriever_job",
    "read_candidates",
    "retrieval_table_job",
    "retrieve_bm25_job",
    "retrieve_job",
    "run_topk_job",
    "selection_table_job",
    "selection_transfer_figure_job",
    "table1_job",
    "table4_job",
    "table6_job",
    "topk_figure_job",
    "transfer_figure_job",
    "transfer_unknown_job",
]
