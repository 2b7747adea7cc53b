"""The jobs behind the workflow's rules, as plain functions of file paths: the one place where jobs
meet files. Each workflow script calls exactly one of them; tests call them directly.

Grouped by stage as the DAG is: ``retrieval``, ``answers`` (candidate passages, answers, gold sets),
``judgments`` (selections, rankings, perplexity, qrels) and ``report``; the functions are re-exported
here, so a script reads ``pipeline.table1_job``.
"""

from .answers import answer_job, candidates_job, gold_job, read_candidates
from .findings import config_job, cost_job, findings_job, transfer_unknown_job
from .judgments import judge_job, qrels_job, rank_retriever_job
from .report import (
    empty_answers_job,
    external_runs_job,
    figure4_job,
    figure9_job,
    overlap_figure_job,
    table1_job,
    table2_job,
    table3_job,
    table4_job,
    table5_job,
    table7_job,
    table8_job,
    topk_figure_job,
    transfer_figure_job,
)
from .retrieval import retrieval_table_job, retrieve_job

__all__ = [
    "config_job",
    "cost_job",
    "findings_job",
    "transfer_unknown_job",
    "answer_job",
    "external_runs_job",
    "figure4_job",
    "figure9_job",
    "judge_job",
    "qrels_job",
    "rank_retriever_job",
    "table2_job",
    "table3_job",
    "table4_job",
    "table5_job",
    "table7_job",
    "table8_job",
    "candidates_job",
    "empty_answers_job",
    "gold_job",
    "overlap_figure_job",
    "read_candidates",
    "retrieval_table_job",
    "retrieve_job",
    "table1_job",
    "topk_figure_job",
    "transfer_figure_job",
]
