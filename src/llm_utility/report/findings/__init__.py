"""The paper's headline findings, tested on whatever datasets and LLMs the config runs.

Each finding is a small function of the tables' inputs (``FindingInputs``: the workflow's files,
already read and keyed as the report jobs key them) that returns one entry (a plain dict, written
to ``findings.json``):

- ``id``, ``claim`` (what the paper says), ``source`` (the table or figure it is read from),
  ``unit`` and ``expected`` (the side of ``null`` on which the claim holds, ``>`` or ``<``);
- ``status``: ``run``, or ``not run`` with the ``reason`` (its inputs are not configured);
- ``cells``: one row per dataset and LLM (and pair or method, where the finding has several), each
  with ``effect``, ``lo``, ``hi`` (the bootstrap interval over queries), ``n`` (queries),
  ``interval`` (how it was computed: ``BCa``, ``percentile``, ``degenerate``, ``none``), ``verdict``
  and ``note``;
- ``effect``, ``lo``, ``hi``, ``n``, ``verdict`` for the finding as a whole, and ``overall`` saying
  how: ``pooled`` (every cell's queries together, queries of a dataset resampled as clusters that
  carry all their cells' values, so one interval covers all LLMs) or ``cells`` (for statistics
  whose scale differs between LLMs, e.g. perplexity: holds when every cell holds, reversed when
  every cell is reversed, inconclusive otherwise).

A verdict is ``holds`` when the interval lies entirely on the claimed side of ``null``,
``reversed`` when entirely on the other side, ``inconclusive`` when it contains ``null`` or is
missing (``bootstrap.verdict``), or when it rests on fewer than ``min_queries`` queries (a bootstrap
over a handful of values only knows those values: its interval is too narrow to trust). Small query
sets give wide intervals: that is the honest answer.

Intervals come from ``report.bootstrap`` (``scipy.stats.bootstrap``, seeded): per-query quantities
(correct answers, per-query NDCG) as paired differences, set-level statistics (the paper's F1, a
pooled share, a mean perplexity over passages) as statistics recomputed on resampled queries.

The package: ``framework`` (inputs, resampling, cells and entries), ``claims`` (one function per
finding, and ``all_findings``), ``rendering`` (findings.md and findings.html) and ``transfer`` (the
transfer matrices on the queries unknown to both LLMs).
"""

from .claims import (
    all_findings,
    attention_below_retriever,
    gold_lower_perplexity,
    human_share_in_gold,
    known_lose_with_human,
    known_overselection,
    listwise_beats_pointwise,
    own_gold_beats_human,
    own_gold_beats_others,
    same_family_overlap,
    table1_hierarchy,
    with_control,
)
from .framework import NOT_RUN, VERDICTS, Claim, FindingInputs, NotRun, Resampling, not_run
from .rendering import cells_frame, findings_html, findings_markdown, summary_frame
from .transfer import transfer_unknown_both, transfer_unknown_markdown

__all__ = [
    "NOT_RUN",
    "VERDICTS",
    "Claim",
    "FindingInputs",
    "NotRun",
    "Resampling",
    "all_findings",
    "attention_below_retriever",
    "cells_frame",
    "findings_html",
    "findings_markdown",
    "gold_lower_perplexity",
    "human_share_in_gold",
    "known_lose_with_human",
    "known_overselection",
    "listwise_beats_pointwise",
    "not_run",
    "own_gold_beats_human",
    "own_gold_beats_others",
    "same_family_overlap",
    "summary_frame",
    "table1_hierarchy",
    "transfer_unknown_both",
    "transfer_unknown_markdown",
    "with_control",
]
