"""Section 6.2 of the paper, utility-based ranking (Table 4): NDCG@k of the attention, likelihood and
verbalized listwise rankings against the retriever's order and each other, with the gold set (C) as
binary relevance, on the ranked queries with a non-empty gold set."""

from __future__ import annotations

from typing import Any

import polars as pl

from ...metrics import ranking_metrics_per_query
from ..judgments import gold_of
from .framework import (
    ALL,
    TRIVIAQA,
    Claim,
    Finding,
    FindingInputs,
    Resampling,
    beats_every_entry,
    difference_entry,
    paired,
)
from .parse_shares import judged_sides, nonempty_gold, with_parse_shares

RANKING_COMPETITORS = ("retriever", "listwise", "likelihood", "attention")


def _ndcg_values(table: pl.DataFrame, gold: pl.DataFrame, k: int) -> pl.DataFrame:
    """qid, value (100 x NDCG@k) of a ranking on its ranked queries with a non-empty gold set."""
    ranked = dict(table.sort(["qid", "rank"]).group_by("qid", maintain_order=True).agg(pl.col("pid")).iter_rows())
    per_query = ranking_metrics_per_query(ranked, gold_of(gold, list(ranked)), k=k)
    return per_query.select(pl.col("qid").cast(pl.String), value=100 * pl.col("ndcg"))


def _ranking_pairs(
    inputs: FindingInputs, first: str, second: str, ndcg: dict[tuple[str, str, str], pl.DataFrame] | None = None
) -> list[tuple[dict[str, Any], str, pl.DataFrame]]:
    """(cell keys, dataset, qid/a/b) of NDCG@k of ranking ``first`` and ``second`` against gold C;
    ``ndcg`` keeps each ranking's per-query NDCG for the next call (one ranking against several)."""
    ndcg = {} if ndcg is None else ndcg

    def values(dataset: str, llm: str, method: str) -> pl.DataFrame:
        key = (dataset, llm, method)
        if key not in ndcg:
            ndcg[key] = _ndcg_values(inputs.rankings[key], inputs.gold[(dataset, llm, "C")], inputs.k)
        return ndcg[key]

    pairs = []
    for dataset in inputs.datasets:
        for llm in inputs.llms:
            a, b, gold = (
                inputs.rankings.get((dataset, llm, first)),
                inputs.rankings.get((dataset, llm, second)),
                inputs.gold.get((dataset, llm, "C")),
            )
            if a is None or b is None or gold is None:
                continue
            pairs.append(
                (
                    {"dataset": dataset, "llm": llm},
                    dataset,
                    paired(values(dataset, llm, first), values(dataset, llm, second)),
                )
            )
    return pairs


def attention_below_retriever_claim(inputs: FindingInputs) -> Claim:
    return Claim(
        id="attention_below_retriever",
        claim="Attention-based utility ranks below the retriever's own order",
        source="Table 4 (tables/table4_ranking)",
        unit=f"NDCG@{inputs.k} (%), attention minus retriever, paired per query (non-empty gold C)",
        expected=-1,
        scope=ALL,
    )


def attention_below_retriever(inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    """Attention rankings have a lower NDCG@k than the retriever's order (per query, gold set C)."""
    return _attention_below_retriever(attention_below_retriever_claim(inputs), inputs, rs)


def _attention_below_retriever(claim: Claim, inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    pairs = _ranking_pairs(inputs, "attention", "retriever")
    return difference_entry(
        claim, pairs, rs, "needs the attention and retriever rankings (rankings.methods) and gold sets (C)", inputs
    )


def likelihood_beats_listwise_pa_triviaqa_claim(inputs: FindingInputs) -> Claim:
    return Claim(
        id="likelihood_beats_listwise_pa_triviaqa",
        claim="On TriviaQA, likelihood ranks better than verbalized listwise ranking with the pseudo-answer",
        source="Table 4 (tables/table4_ranking)",
        unit=f"NDCG@{inputs.k} (%), likelihood minus listwise with pseudo-answer, paired per query (non-empty gold C)",
        scope=TRIVIAQA,
    )


def likelihood_beats_listwise_pa_triviaqa(inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    """On TriviaQA the likelihood ranking beats listwise ranking with the pseudo-answer (Table 4)."""
    return _likelihood_beats_listwise_pa_triviaqa(likelihood_beats_listwise_pa_triviaqa_claim(inputs), inputs, rs)


def _likelihood_beats_listwise_pa_triviaqa(claim: Claim, inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    pairs = _ranking_pairs(inputs, "likelihood", "listwise_pa")
    entry = difference_entry(
        claim, pairs, rs, "needs the likelihood and listwise_pa rankings (rankings.methods) and gold sets (C)", inputs
    )
    return with_parse_shares(
        entry,
        lambda cell: judged_sides(
            inputs,
            cell,
            [("rankings", cell["llm"], "listwise_pa")],
            nonempty_gold(inputs, cell["dataset"], cell["llm"]),
        ),
    )


def listwise_pa_ranks_best_claim(inputs: FindingInputs) -> Claim:
    return Claim(
        id="listwise_pa_ranks_best",
        claim="Verbalized listwise ranking with the pseudo-answer ranks best overall (above the retriever, listwise "
        "without it, likelihood and attention)",
        source="Table 4 (tables/table4_ranking)",
        unit=f"NDCG@{inputs.k} (%), listwise with pseudo-answer minus each other ranking, paired per query; overall "
        "the smallest pooled margin",
        scope=ALL,
    )


def listwise_pa_ranks_best(inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    """Verbalized listwise ranking with the pseudo-answer ranks best (Table 4's ALL AVG): NDCG@k of
    listwise_pa minus each other configured ranking (retriever, listwise, likelihood, attention);
    overall the smallest pooled margin."""
    return _listwise_pa_ranks_best(listwise_pa_ranks_best_claim(inputs), inputs, rs)


def _listwise_pa_ranks_best(claim: Claim, inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    ndcg: dict[tuple[str, str, str], pl.DataFrame] = {}
    competitors = {m: _ranking_pairs(inputs, "listwise_pa", m, ndcg) for m in RANKING_COMPETITORS}
    have = {m for _, _, m in inputs.rankings}
    missing = [m for m in RANKING_COMPETITORS if not competitors[m] and m not in have]
    note = f"not compared: {', '.join(missing)} (not in rankings.methods)" if missing else ""
    entry = beats_every_entry(
        claim,
        inputs,
        rs,
        competitors,
        note,
        "needs the listwise_pa ranking and another (rankings.methods) and gold sets (C)",
    )
    return with_parse_shares(
        entry,
        lambda cell: judged_sides(
            inputs,
            cell,
            [("rankings", cell["llm"], m) for m in ("listwise_pa", cell["versus"])],
            nonempty_gold(inputs, cell["dataset"], cell["llm"]),
        ),
    )


SECTION = "Section 6.2: utility ranking (Table 4)"
FINDINGS = [
    Finding(attention_below_retriever_claim, _attention_below_retriever, id="attention_below_retriever"),
    Finding(listwise_pa_ranks_best_claim, _listwise_pa_ranks_best, id="listwise_pa_ranks_best"),
    Finding(
        likelihood_beats_listwise_pa_triviaqa_claim,
        _likelihood_beats_listwise_pa_triviaqa,
        id="likelihood_beats_listwise_pa_triviaqa",
    ),
]
