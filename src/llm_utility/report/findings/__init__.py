"""The paper's headline findings, tested on whatever datasets and LLMs the config runs.

Each finding is a small function of the tables' inputs (``FindingInputs``: the workflow's files,
already read and keyed as the report jobs key them) that returns one entry (a plain dict, written
to ``findings.json``):

- ``id``, ``section`` (the part of the paper it tests), ``claim`` (what the paper says), ``source``
  (the table or figure it is read from), ``unit`` and ``expected`` (``> null``, ``< null``, or
  ``within [lo, hi]`` for an "about" claim);
- ``construction`` (``can_fail``, ``partly_built_in``, ``cannot_fail``) and ``construction_reason``:
  whether the way the compared quantities are built decides the verdict (a gold set replays the call
  that selected it; a known query's no-passage answer is correct by definition);
- ``paper_datasets`` (the paper's datasets the claim covers, ``report.claim_scope``), ``datasets``
  (the configured datasets that stand for them: pooled) and ``datasets_out_of_scope`` (shown as
  cells, not pooled);
- ``status``: ``run``, ``not run`` with the ``reason`` (its inputs are not configured) or ``out of
  scope`` (no configured dataset stands for the claim's);
- ``cells``: one row per dataset and LLM (and pair or method, where the finding has several), each
  with ``effect``, ``lo``, ``hi`` (the bootstrap interval over queries), ``n`` (queries),
  ``interval`` (how it was computed: ``BCa``, ``percentile``, ``degenerate``, ``none``), ``verdict``,
  ``in_scope`` and ``note``;
- ``effect``, ``lo``, ``hi``, ``n``, ``verdict`` for the finding as a whole, and ``overall`` saying
  how: ``pooled`` (the mean of the in-scope datasets' effects, each dataset weighted equally, queries
  resampled within their dataset, a query carrying all its cells' values) or ``cells`` (for
  statistics of one LLM each, e.g. perplexity: ``framework.cells_verdict``);
- a finding that cannot fail has the verdict ``by construction`` and a ``description`` of its effect
  instead of a test; a construction-prone finding is followed by its re-ask twin (``<id>_reask``, the
  same claim on the re-ask answers), linked by ``reask_twin`` / ``twin_of``, the twin saying whether
  the original's effect ``survives``.

A verdict is ``holds`` when the interval lies entirely on the claimed side of ``null`` (inside the
band), ``reversed`` when entirely on the other side (outside the band), ``inconclusive`` when it
contains ``null`` or is missing (``bootstrap.verdict``), and ``too few queries`` (``TOO_FEW``)
whatever the interval when it rests on fewer than ``min_queries`` queries (a bootstrap over a
handful of values only knows those values: its interval is too narrow to trust).

Intervals come from ``report.bootstrap`` (``scipy.stats.bootstrap``, seeded): per-query quantities
(correct answers, per-query NDCG) as paired differences, set-level statistics (the paper's F1, a
pooled share, a mean log-perplexity over passages) as statistics recomputed on resampled queries,
pooled effects with ``stratified_interval``.

The package: ``framework`` (inputs, claims, pooling, cells and entries, ``Finding`` and the re-ask
twins: the API a new finding is written with); one module per section of the paper, each declaring
its findings: ``human_passages`` (Section 4: Table 1, the transfer of gold sets), ``divergence``
(Section 5: Figures 3 and 4), ``selection`` (Section 6.1: Tables 2 and 8), ``ranking`` (Section
6.2: Table 4), ``rag`` (Section 6.1's RAG performance: Tables 3, 7 and Figure 9); ``qrels`` (beyond
the paper: do an LLM's own qrels predict its RAG accuracy better than human qrels); ``registry``
(every finding in order, and ``all_findings``); ``parse_shares`` (how much of a judgment finding
rests on genuine outputs); ``summary`` (what the run establishes, in a few sentences per part of the
paper); ``rendering`` (findings.md and findings.html) and ``transfer`` (the transfer matrices on the
queries unknown to both LLMs).
"""

from .divergence import gold_lower_perplexity, human_share_in_gold, known_lose_with_human, same_family_overlap
from .framework import (
    BY_CONSTRUCTION,
    CONSTRUCTIONS,
    NOT_RUN,
    PAPER_DATASETS,
    TOO_FEW,
    VERDICTS,
    Claim,
    Finding,
    FindingInputs,
    NotRun,
    Pool,
    PooledDifferences,
    Resampling,
    beats_every_entry,
    difference_entry,
    make_cell,
    make_entry,
    not_run,
    twin_claim,
    with_control,
    with_twin,
)
from .human_passages import own_gold_beats_human, own_gold_beats_others, table1_hierarchy, table1_pair
from .parse_shares import with_parse_shares
from .qrels import llm_qrels_predict_rag
from .rag import selected_beats_reranked, selected_beats_topk, selections_transfer_better_than_gold
from .ranking import attention_below_retriever, likelihood_beats_listwise_pa_triviaqa, listwise_pa_ranks_best
from .registry import FINDINGS, all_findings
from .rendering import cells_frame, construction_frame, findings_html, findings_markdown, reask_frame, summary_frame
from .selection import (
    known_overselection,
    known_rejection_lowers_recall,
    listwise_beats_pointwise,
    pseudo_answer_improves_f1,
)
from .summary import summarize
from .transfer import transfer_unknown_both, transfer_unknown_markdown

__all__ = [
    "BY_CONSTRUCTION",
    "CONSTRUCTIONS",
    "FINDINGS",
    "NOT_RUN",
    "PAPER_DATASETS",
    "TOO_FEW",
    "VERDICTS",
    "Claim",
    "Finding",
    "FindingInputs",
    "NotRun",
    "Pool",
    "PooledDifferences",
    "Resampling",
    "all_findings",
    "attention_below_retriever",
    "beats_every_entry",
    "cells_frame",
    "construction_frame",
    "difference_entry",
    "findings_html",
    "findings_markdown",
    "gold_lower_perplexity",
    "human_share_in_gold",
    "known_lose_with_human",
    "known_overselection",
    "known_rejection_lowers_recall",
    "likelihood_beats_listwise_pa_triviaqa",
    "listwise_beats_pointwise",
    "listwise_pa_ranks_best",
    "llm_qrels_predict_rag",
    "make_cell",
    "make_entry",
    "not_run",
    "own_gold_beats_human",
    "own_gold_beats_others",
    "pseudo_answer_improves_f1",
    "reask_frame",
    "same_family_overlap",
    "selected_beats_reranked",
    "selected_beats_topk",
    "selections_transfer_better_than_gold",
    "summarize",
    "summary_frame",
    "table1_hierarchy",
    "table1_pair",
    "twin_claim",
    "with_twin",
    "transfer_unknown_both",
    "transfer_unknown_markdown",
    "with_control",
    "with_parse_shares",
]
