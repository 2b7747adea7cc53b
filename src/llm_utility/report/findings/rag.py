"""Section 6.1 of the paper, RAG performance with utility judgments: answers with the LLM's own
selections against the top-k (Table 3) and against the top passages of every utility ranking
(Table 7), and how selections transfer across LLMs compared with gold sets (Figure 9 against
Figure 2)."""

from __future__ import annotations

from typing import Any

import polars as pl

from .framework import (
    ALL,
    REPLAY_KNOWN,
    REPLAY_ONE,
    SINGLE_HOP,
    Claim,
    Finding,
    FindingInputs,
    Resampling,
    beats_every_entry,
    correct_values,
    difference_entry,
    not_run,
    paired,
)
from .parse_shares import judged_sides, with_parse_shares


def _answer_pairs(
    inputs: FindingInputs, context_a: str, context_b: str
) -> list[tuple[dict[str, Any], str, pl.DataFrame]]:
    """(cell keys, dataset, qid/a/b) of correct answers of each LLM with two contexts (``{llm}`` in a
    context is the answering LLM)."""
    pairs = []
    for dataset in inputs.datasets:
        for llm in inputs.llms:
            a = inputs.answers.get((dataset, llm, context_a.format(llm=llm)))
            b = inputs.answers.get((dataset, llm, context_b.format(llm=llm)))
            if a is not None and b is not None:
                pairs.append(({"dataset": dataset, "llm": llm}, dataset, paired(correct_values(a), correct_values(b))))
    return pairs


def selected_beats_topk_claim(inputs: FindingInputs) -> Claim:
    method = inputs.figure9_method
    return Claim(
        id="selected_beats_topk",
        claim=f"RAG with the LLM's own utility selections ({method}) answers more queries correctly than with the "
        "top-k retrieved passages",
        source="Table 3 (tables/table3_rag_selection)",
        unit=f"correct answers (%), own {method} selection minus top-k, paired per judged query",
        scope=ALL,
    )


def selected_beats_topk(inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    """RAG with the LLM's own selections (the paper's best selection method, listwise with the
    pseudo-answer) answers more queries correctly than with the top-k (Table 3), on the judged queries."""
    return _selected_beats_topk(selected_beats_topk_claim(inputs), inputs, rs)


def _selected_beats_topk(claim: Claim, inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    method = inputs.figure9_method
    pairs = _answer_pairs(inputs, f"selected_{method}_from_{{llm}}", "topk")
    entry = difference_entry(
        claim,
        pairs,
        rs,
        f"needs answers with the own {method} selections (judgments.rag_methods) and the top-k",
        inputs,
    )
    return with_parse_shares(entry, lambda cell: judged_sides(inputs, cell, [("judgments", cell["llm"], method)]))


def selected_beats_reranked_claim(inputs: FindingInputs) -> Claim:
    method, top = inputs.figure9_method, inputs.rag_top
    return Claim(
        id="selected_beats_reranked",
        claim=f"RAG with the LLM's own utility selections ({method}) answers more queries correctly than with the "
        f"top {top} of any utility ranking",
        source="Tables 3 and 7 (tables/table3_rag_selection, table7_rag_reranked)",
        unit=f"correct answers (%), own {method} selection minus each reranked top {top}, paired per judged query; "
        "overall the smallest pooled margin",
        scope=ALL,
    )


def selected_beats_reranked(inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    """RAG with the own selections beats RAG with the top passages of every utility ranking (Table 7
    against Table 3): each reranking's margin, overall the smallest pooled margin."""
    return _selected_beats_reranked(selected_beats_reranked_claim(inputs), inputs, rs)


def _selected_beats_reranked(claim: Claim, inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    method, top = inputs.figure9_method, inputs.rag_top
    prefix, suffix = "reranked_", f"_top{top}"
    rerankings = sorted(
        {c[len(prefix) : -len(suffix)] for _, _, c in inputs.answers if c.startswith(prefix) and c.endswith(suffix)}
    )
    competitors = {
        m: _answer_pairs(inputs, f"selected_{method}_from_{{llm}}", f"{prefix}{m}{suffix}") for m in rerankings
    }
    entry = beats_every_entry(
        claim,
        inputs,
        rs,
        competitors,
        "",
        f"needs answers with the own {method} selections and with reranked top-{top} passages (rankings.rag_methods)",
    )
    return with_parse_shares(
        entry,
        lambda cell: judged_sides(
            inputs, cell, [("judgments", cell["llm"], method), ("rankings", cell["llm"], cell["versus"])]
        ),
    )


SELECTIONS_TRANSFER_BETTER_THAN_GOLD = Claim(
    id="selections_transfer_better_than_gold",
    claim="Utility selections transfer across LLMs better than gold sets do (Figure 9 against Figure 2): "
    "what an LLM loses with another LLM's passages instead of its own is smaller for selections",
    source="Figure 9 against Figure 2 (figures/fig9_selection_transfer, fig2_transfer_U)",
    unit="correct answers (%), (own gold set minus the other's) minus (own selection minus the other's), "
    "paired per judged query",
    construction="partly_built_in",
    construction_reason=f"the gold-set side replays selecting calls ({REPLAY_ONE}; {REPLAY_KNOWN}); selections are "
    "answered afresh",
    scope=SINGLE_HOP,
    reask_twin=True,
)


def selections_transfer_better_than_gold(inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    """The transfer loss of gold sets (U) minus that of selections (Figure 9's method), per answering
    LLM and source LLM: cells (dataset, llm, from). The re-ask twin re-asks the gold-set side; the
    selections' answers are the same in both (each loss compares answers under one prompt)."""
    return _selections_transfer(SELECTIONS_TRANSFER_BETTER_THAN_GOLD, inputs, rs)


def _selections_transfer(claim: Claim, inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    method = inputs.figure9_method
    if len(inputs.llms) < 2:
        return not_run(claim, "needs at least two LLMs (config llms)", inputs)
    pairs = []
    for dataset in inputs.datasets:
        for llm in inputs.llms:
            get = lambda ctx: inputs.answers.get((dataset, llm, ctx))  # noqa: E731
            own_gold, own_sel = get(f"gold_U_from_{llm}"), get(f"selected_{method}_from_{llm}")
            if own_gold is None or own_sel is None:
                continue
            for source in inputs.llms:
                other_gold, other_sel = get(f"gold_U_from_{source}"), get(f"selected_{method}_from_{source}")
                if source == llm or other_gold is None or other_sel is None:
                    continue
                gold_loss = paired(correct_values(own_gold), correct_values(other_gold)).select(
                    "qid", value=pl.col("a") - pl.col("b")
                )
                sel_loss = paired(correct_values(own_sel), correct_values(other_sel)).select(
                    "qid", value=pl.col("a") - pl.col("b")
                )
                pairs.append(({"dataset": dataset, "llm": llm, "from": source}, dataset, paired(gold_loss, sel_loss)))
    entry = difference_entry(
        claim,
        pairs,
        rs,
        f"needs the transfer answers of gold sets (U) and of {method} selections (judgments.rag_methods)",
        inputs,
    )
    return with_parse_shares(
        entry,
        lambda cell: judged_sides(
            inputs, cell, [("judgments", cell["llm"], method), ("judgments", cell["from"], method)]
        ),
    )


SECTION = "Section 6.1: RAG with the LLM's own judgments (Tables 3, 7; Figure 9)"
FINDINGS = [
    Finding(selected_beats_topk_claim, _selected_beats_topk, id="selected_beats_topk"),
    Finding(selected_beats_reranked_claim, _selected_beats_reranked, id="selected_beats_reranked"),
    Finding(SELECTIONS_TRANSFER_BETTER_THAN_GOLD, _selections_transfer),
]
