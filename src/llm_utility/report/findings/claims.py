"""The paper's headline claims, one function each, in the paper's order (``all_findings``): Table 1's
hierarchy, the transfer of gold sets (with the unknown-both control), Figure 3, Figure 4, and the
judgment benchmark (Tables 2, 8, 4)."""

from __future__ import annotations

from itertools import combinations
from typing import Any

import numpy as np
import polars as pl

from ...metrics import ranking_metrics_per_query, set_metrics_per_query
from ..analysis import TABLE1_CONTEXTS
from ..bootstrap import f1_of_means, f1_of_sums, mean_interval, ratio, ratio_interval, statistic_interval
from ..judgments import _gold_of, _selected_of, _unparsed_of
from .framework import (
    Claim,
    FindingInputs,
    Resampling,
    correct_values,
    difference_entry,
    known_qids,
    make_cell,
    make_entry,
    not_run,
    paired,
)

# --- Table 1: the hierarchy, pair by pair ---------------------------------------------------------

TABLE1_PAIRS = [("G(U)", "G(C)"), ("G(C)", "Human"), ("Human", "U"), ("U", "C"), ("C", "None")]


def _table1_claim(better: str, worse: str) -> Claim:
    slug = {"G(U)": "gu", "G(C)": "gc", "Human": "human", "U": "u", "C": "c", "None": "none"}
    text = f"{better} answers more queries correctly than {worse} (Table 1: G(U) > G(C) > Human >= U > C > None)"
    if (better, worse) == ("Human", "U"):
        text = "Human passages answer at least as many queries as U (Table 1: Human >= U; holds means strictly more, inconclusive does not contradict it)"
    return Claim(
        id=f"table1_{slug[better]}_over_{slug[worse]}",
        claim=text,
        source="Table 1 (tables/table1_rag)",
        unit=f"correct answers (%), {better} minus {worse}, paired per query",
    )


def table1_hierarchy(inputs: FindingInputs, rs: Resampling) -> list[dict[str, Any]]:
    """Table 1's hierarchy G(U) > G(C) > Human >= U > C > None, one entry per adjacent pair."""
    entries = []
    for better, worse in TABLE1_PAIRS:
        claim = _table1_claim(better, worse)
        pairs = []
        for dataset in inputs.datasets:
            for llm in inputs.llms:
                ctx_a, ctx_b = (TABLE1_CONTEXTS[c].format(llm=llm) for c in (better, worse))
                a, b = inputs.answers.get((dataset, llm, ctx_a)), inputs.answers.get((dataset, llm, ctx_b))
                if a is None or b is None:
                    continue
                pairs.append(({"dataset": dataset, "llm": llm}, dataset, paired(correct_values(a), correct_values(b))))
        entries.append(difference_entry(claim, pairs, rs, f"no answers with both {better} and {worse} passages configured"))
    return entries


# --- transfer: own gold set vs other LLMs' gold sets and vs Human ---------------------------------

_FIGURE_OF = {"U": "Figure 2 (figures/fig2_transfer_U; Figure 1 right for one dataset)", "C": "Figure 8 (figures/fig8_transfer_C)"}


def _transfer_claim(candidates: str, control: bool) -> Claim:
    if control:
        return Claim(
            id=f"own_gold_beats_others_{candidates}_unknown_both",
            claim=f"Gold sets ({candidates}) are not transferable, on the queries unknown to both LLMs of a pair "
            "(a control beyond the paper: on an LLM's known queries its empty gold set replays its own correct "
            "no-passage answer, which builds part of the own-gold advantage in)",
            source=f"tables/transfer_unknown_both_{candidates} (control of {_FIGURE_OF[candidates].split(' (')[0]})",
            unit="correct answers (%), own gold set minus the other LLM's, paired per query",
        )
    return Claim(
        id=f"own_gold_beats_others_{candidates}",
        claim=f"Gold sets ({candidates}) are not transferable: each LLM answers best with its own gold set (transfer diagonal)",
        source=_FIGURE_OF[candidates],
        unit="correct answers (%), own gold set minus another LLM's, paired per query",
    )


def own_gold_beats_others(inputs: FindingInputs, rs: Resampling, candidates: str, control: bool = False) -> dict[str, Any]:
    """Each LLM with its own gold set vs with every other LLM's (cells: dataset, llm, gold_from); with
    ``control``, only on the queries unknown to both LLMs of the cell."""
    claim = _transfer_claim(candidates, control)
    if len(inputs.llms) < 2:
        return not_run(claim, "needs at least two LLMs (config llms)")
    if control and not inputs.known:
        return not_run(claim, "no known flags (known.parquet) among the inputs")
    pairs = []
    for dataset in inputs.datasets:
        for llm in inputs.llms:
            own = inputs.answers.get((dataset, llm, f"gold_{candidates}_from_{llm}"))
            if own is None:
                continue
            for source in inputs.llms:
                other = inputs.answers.get((dataset, llm, f"gold_{candidates}_from_{source}"))
                if source == llm or other is None:
                    continue
                qids = None
                if control:
                    kl, ks = inputs.known.get((dataset, llm)), inputs.known.get((dataset, source))
                    if kl is None or ks is None:
                        continue
                    qids = sorted(known_qids(kl, False) & known_qids(ks, False))
                frame = paired(correct_values(own), correct_values(other), qids)
                pairs.append(({"dataset": dataset, "llm": llm, "gold_from": source}, dataset, frame))
    return difference_entry(claim, pairs, rs, f"no transfer answers (gold_{candidates}_from_<llm>) configured")


def with_control(main: dict[str, Any], control: dict[str, Any]) -> dict[str, Any]:
    """Mark ``control`` as the control of ``main`` and say whether ``main``'s conclusion survives it:
    true when both hold, false when main holds and the control does not, null when main does not hold."""
    survives = None
    if main["verdict"] == "holds" and control["status"] == "run":
        survives = control["verdict"] == "holds"
    return {**control, "control_of": main["id"], "survives": survives}


def own_gold_beats_human(inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    claim = Claim(
        id="own_gold_beats_human",
        claim="Each LLM answers better with its own gold set (U) than with the human-annotated passages",
        source=_FIGURE_OF["U"],
        unit="correct answers (%), own gold set (U) minus Human, paired per query",
    )
    pairs = []
    for dataset in inputs.datasets:
        for llm in inputs.llms:
            own, human = inputs.answers.get((dataset, llm, f"gold_U_from_{llm}")), inputs.answers.get((dataset, llm, "human"))
            if own is not None and human is not None:
                pairs.append(({"dataset": dataset, "llm": llm}, dataset, paired(correct_values(own), correct_values(human))))
    return difference_entry(claim, pairs, rs, "no answers with the own gold set (U) and the human passages configured")


# --- Figure 3: human passages in gold sets, same-family overlap -----------------------------------


def human_share_in_gold(inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    """Share of human passages that are in the LLM's gold set (U), pooled over the queries that have
    human passages; the paper reads 'about half', tested here as 'not all' (share < 100%)."""
    claim = Claim(
        id="human_share_in_gold",
        claim="Not all human-annotated passages are gold utilitarian passages for an LLM (paper: about half are)",
        source="Figure 3 (figures/fig3_overlap: the Human column against each LLM's diagonal)",
        unit="% of human passages inside the LLM's gold set (U), pooled over queries",
        expected=-1,
        null=100.0,
    )
    cells = []
    units = []
    for dataset in inputs.datasets:
        q = inputs.queries.get(dataset)
        if q is None:
            continue
        human = q.select(pl.col("qid").cast(pl.String), pl.col("human_pids").list.unique().alias("human")).filter(pl.col("human").list.len() > 0)
        for llm in inputs.llms:
            gold = inputs.gold.get((dataset, llm, "U"))
            if gold is None:
                continue
            gold_sets = _gold_of(gold, human["qid"].to_list())
            inside = np.array([len(set(h) & gold_sets[qid]) for qid, h in human.iter_rows()], float)
            total = human["human"].list.len().to_numpy().astype(float)
            cells.append(make_cell({"dataset": dataset, "llm": llm}, ratio_interval(100 * inside, total, **rs.kwargs()), claim))
            units.append(pl.DataFrame({"dataset": dataset, "qid": human["qid"], "inside": 100 * inside, "total": total}))
    if not cells:
        return not_run(claim, "no gold sets (U) and queries configured")
    pooled = pl.concat(units).group_by("dataset", "qid", maintain_order=True).agg(pl.col("inside").sum(), pl.col("total").sum())
    return make_entry(claim, cells, ratio_interval(pooled["inside"].to_numpy(), pooled["total"].to_numpy(), **rs.kwargs()), rs)


def same_family_overlap(inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    """Gold sets (U) of LLMs of one family share more passages per query than those of LLMs of
    different families (``llms.<name>.family``). Per query: mean overlap of same-family pairs minus
    mean overlap of cross-family pairs, paired per query."""
    claim = Claim(
        id="same_family_overlap",
        claim="LLMs of the same family have more overlapping gold utilitarian passages than LLMs of different families",
        source="Figure 3 (figures/fig3_overlap)",
        unit="passages shared per query, same-family pairs minus cross-family pairs, paired per query",
    )
    families = {llm: inputs.families.get(llm) for llm in inputs.llms if inputs.families.get(llm)}
    if not families:
        return not_run(claim, "no LLM has a family (config llms.<name>.family)")
    same = [(a, b) for a, b in combinations(families, 2) if families[a] == families[b]]
    cross = [(a, b) for a, b in combinations(families, 2) if families[a] != families[b]]
    if not same:
        return not_run(claim, f"no two LLMs share a family (llms.<name>.family: {families})")
    if not cross:
        return not_run(claim, f"every LLM with a family is of the same one (llms.<name>.family: {families})")
    pairs = []
    for dataset in inputs.datasets:
        q = inputs.queries.get(dataset)
        if q is None or any((dataset, llm, "U") not in inputs.gold for llm in families):
            continue
        qids = q["qid"].cast(pl.String).to_list()
        sets = {llm: _gold_of(inputs.gold[(dataset, llm, "U")], qids) for llm in families}

        def mean_overlap(group: list[tuple[str, str]]) -> np.ndarray:
            return np.array([np.mean([len(sets[a][qid] & sets[b][qid]) for a, b in group]) for qid in qids], float)

        frame = pl.DataFrame({"qid": qids, "a": mean_overlap(same), "b": mean_overlap(cross)})
        pairs.append(({"dataset": dataset, "same_pairs": len(same), "cross_pairs": len(cross)}, dataset, frame))
    return difference_entry(claim, pairs, rs, "no gold sets (U) of the LLMs with a family configured")


# --- Figure 4: perplexity, known queries with human passages ---------------------------------------


def _difference_of_means(sum_g, n_g, sum_h, n_h, axis=-1):
    return ratio(sum_g, n_g, axis=axis) - ratio(sum_h, n_h, axis=axis)


def gold_lower_perplexity(inputs: FindingInputs, rs: Resampling, measure: str) -> dict[str, Any]:
    """Human passages inside the LLM's gold set (G) have lower perplexity than those outside (H): the
    difference of the two mean perplexities over passages, queries resampled (each carries its G and
    H passages). Per LLM only: perplexities of different LLMs are on different scales."""
    what = {"ppl_passage": "the passage alone", "ppl_query_passage": "the query followed by the passage"}[measure]
    claim = Claim(
        id=f"gold_lower_perplexity{'_query' if measure == 'ppl_query_passage' else ''}",
        claim=f"An LLM's perplexity of {what} is lower for human passages inside its gold set than outside it",
        source="Figure 4 top (figures/fig4_perplexity)",
        unit="mean perplexity of gold (G) minus non-gold (H) human passages",
        expected=-1,
    )
    if not inputs.perplexity:
        return not_run(claim, "the perplexity stage is not among the inputs")
    cells = []
    for (dataset, llm), table in inputs.perplexity.items():
        per_query = (
            table.group_by("qid", maintain_order=True)
            .agg(
                sum_g=pl.col(measure).filter(pl.col("in_gold")).sum(),
                n_g=pl.col("in_gold").sum(),
                sum_h=pl.col(measure).filter(~pl.col("in_gold")).sum(),
                n_h=(~pl.col("in_gold")).sum(),
            )
            .with_columns(pl.exclude("qid").cast(pl.Float64))
        )
        note = ""
        if per_query["n_g"].sum() == 0 or per_query["n_h"].sum() == 0:
            note = "no human passage inside the gold set" if per_query["n_g"].sum() == 0 else "every human passage is inside the gold set"
        cols = [per_query[c].to_numpy() for c in ("sum_g", "n_g", "sum_h", "n_h")]
        effect = statistic_interval(cols, _difference_of_means, **rs.kwargs())
        cell = make_cell({"dataset": dataset, "llm": llm}, effect, claim)
        if note:
            cell["note"] = "; ".join(t for t in (note, cell["note"]) if t)
        cells.append(cell)
    return make_entry(claim, cells, None, rs)


def known_lose_with_human(inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    """On its known queries (answered correctly with no passage), an LLM given the human passages
    answers fewer correctly than with none."""
    claim = Claim(
        id="known_lose_with_human",
        claim="On known queries, human-annotated passages lower accuracy compared with no passage",
        source="Figure 4 bottom (figures/fig4_perplexity)",
        unit="correct answers (%) on known queries, Human minus None, paired per query",
        expected=-1,
    )
    pairs = []
    for dataset in inputs.datasets:
        for llm in inputs.llms:
            human, none, known = (
                inputs.answers.get((dataset, llm, "human")),
                inputs.answers.get((dataset, llm, "none")),
                inputs.known.get((dataset, llm)),
            )
            if human is None or none is None or known is None:
                continue
            qids = sorted(known_qids(known, True))
            pairs.append(({"dataset": dataset, "llm": llm}, dataset, paired(correct_values(human), correct_values(none), qids)))
    return difference_entry(claim, pairs, rs, "no answers with human and no passages, or no known flags, configured")


# --- judgments: listwise vs pointwise, over-selection, attention vs retriever ---------------------

SELECTION_PAIRS = [("listwise", "pointwise"), ("listwise_pa", "pointwise_pa")]


def _precision_recall(table: pl.DataFrame, gold: pl.DataFrame) -> pl.DataFrame:
    """qid, precision, recall (x100) of a judgments table on the judged queries with a non-empty gold set."""
    qids, selected = _selected_of(table)
    per_query = set_metrics_per_query(selected, _gold_of(gold, qids))
    return per_query.filter(pl.col("n_gold") > 0).select("qid", pl.col("precision") * 100, pl.col("recall") * 100)


def _f1_difference(pa, ra, pb, rb, axis=-1):
    return f1_of_means(pa, ra, axis=axis) - f1_of_means(pb, rb, axis=axis)


def _pooled_f1_difference(pa, ra, pb, rb, count, axis=-1):
    return f1_of_sums(pa, ra, count, axis=axis) - f1_of_sums(pb, rb, count, axis=axis)


def listwise_beats_pointwise(inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    """Listwise selection has a higher F1 than pointwise (with and without the pseudo-answer), F1 being
    the paper's harmonic mean of averaged precision and recall over queries with a non-empty gold set
    (C); the F1 difference is recomputed on queries resampled (each carries both methods' P and R)."""
    claim = Claim(
        id="listwise_beats_pointwise",
        claim="Listwise utility selection has a higher F1 than pointwise selection",
        source="Table 2 (tables/table2_selection)",
        unit="F1 (%), listwise minus pointwise (F1 of averaged P and R, queries resampled)",
    )
    cells, units = [], []
    for dataset in inputs.datasets:
        for llm in inputs.llms:
            gold = inputs.gold.get((dataset, llm, "C"))
            for lw, pw in SELECTION_PAIRS:
                a, b = inputs.judgments.get((dataset, llm, lw)), inputs.judgments.get((dataset, llm, pw))
                if gold is None or a is None or b is None:
                    continue
                joined = _precision_recall(a, gold).join(_precision_recall(b, gold), on="qid", suffix="_b", maintain_order="left")
                cols = [joined[c].to_numpy() for c in ("precision", "recall", "precision_b", "recall_b")]
                effect = statistic_interval(cols, _f1_difference, **rs.kwargs())
                cells.append(make_cell({"dataset": dataset, "llm": llm, "pair": f"{lw} vs {pw}"}, effect, claim))
                units.append(joined.with_columns(dataset=pl.lit(dataset)))
    if not cells:
        return not_run(claim, "needs a listwise and a pointwise method of one kind in judgments.methods (listwise/pointwise or listwise_pa/pointwise_pa)")
    pooled = (
        pl.concat(units)
        .group_by("dataset", "qid", maintain_order=True)
        .agg(pl.col("precision", "recall", "precision_b", "recall_b").sum(), count=pl.len())
    )
    cols = [pooled[c].to_numpy().astype(float) for c in ("precision", "recall", "precision_b", "recall_b", "count")]
    return make_entry(claim, cells, statistic_interval(cols, _pooled_f1_difference, **rs.kwargs()), rs)


def known_overselection(inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    """On its known queries (nothing can help, the gold set is empty) an LLM still selects passages:
    the share of judged known queries where a method did not reject all passages (selected at least
    one, or gave an output that did not parse, which is never a rejection), tested against 50%."""
    claim = Claim(
        id="known_overselection",
        claim="LLMs fail to reject all passages on known queries: most judged known queries get passages selected",
        source="Table 2 (Acc on empty gold) and Table 8 (tables/table2_selection, table8_known_rejection)",
        unit="% of judged known queries where the method did not reject all passages (selected one or more, or its output did not parse)",
        null=50.0,
    )
    cells, units = [], []
    for (dataset, llm, method), table in inputs.judgments.items():
        known = inputs.known.get((dataset, llm))
        if known is None:
            continue
        qids, selected = _selected_of(table)
        unparsed = _unparsed_of(table)
        known_q = known_qids(known, True)
        chosen = [q for q in qids if q in known_q]
        values = np.array([100.0 * (bool(selected[q]) or q in unparsed) for q in chosen], float)
        effect = mean_interval(values, **rs.kwargs())
        cells.append(make_cell({"dataset": dataset, "llm": llm, "method": method}, effect, claim))
        units.append(pl.DataFrame({"dataset": dataset, "qid": chosen, "d": values}, schema_overrides={"qid": pl.String, "d": pl.Float64}))
    if not cells:
        return not_run(claim, "no judgments (judgments.methods) with known flags configured")
    pool = pl.concat(units).group_by("dataset", "qid", maintain_order=True).agg(s=pl.col("d").sum(), c=pl.len())
    return make_entry(claim, cells, ratio_interval(pool["s"].to_numpy(), pool["c"].to_numpy().astype(float), **rs.kwargs()), rs)


def attention_below_retriever(inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    """Attention rankings have a lower NDCG@k than the retriever's order (per query, gold set C)."""
    claim = Claim(
        id="attention_below_retriever",
        claim="Attention-based utility ranks below the retriever's own order",
        source="Table 4 (tables/table4_ranking)",
        unit=f"NDCG@{inputs.k} (%), attention minus retriever, paired per query (non-empty gold C)",
        expected=-1,
    )
    pairs = []
    for dataset in inputs.datasets:
        for llm in inputs.llms:
            att, ret, gold = (
                inputs.rankings.get((dataset, llm, "attention")),
                inputs.rankings.get((dataset, llm, "retriever")),
                inputs.gold.get((dataset, llm, "C")),
            )
            if att is None or ret is None or gold is None:
                continue
            scores = []
            for table in (att, ret):
                ranked = dict(table.sort(["qid", "rank"]).group_by("qid", maintain_order=True).agg(pl.col("pid")).iter_rows())
                per_query = ranking_metrics_per_query(ranked, _gold_of(gold, list(ranked)), k=inputs.k)
                scores.append(per_query.select("qid", value=100 * pl.col("ndcg")))
            pairs.append(({"dataset": dataset, "llm": llm}, dataset, paired(*scores)))
    return difference_entry(claim, pairs, rs, "needs the attention and retriever rankings (rankings.methods) and gold sets (C)")


# --- all of them ----------------------------------------------------------------------------------

def all_findings(inputs: FindingInputs, rs: Resampling) -> list[dict[str, Any]]:
    """Every finding, in the paper's order: Table 1's hierarchy, transfer (with the unknown-both
    control), Figure 3, Figure 4, then the judgment benchmark (Tables 2, 8, 4)."""
    entries = table1_hierarchy(inputs, rs)
    for candidates in ("U", "C"):
        main = own_gold_beats_others(inputs, rs, candidates)
        entries += [main, with_control(main, own_gold_beats_others(inputs, rs, candidates, control=True))]
    entries += [
        own_gold_beats_human(inputs, rs),
        human_share_in_gold(inputs, rs),
        same_family_overlap(inputs, rs),
        gold_lower_perplexity(inputs, rs, "ppl_passage"),
        gold_lower_perplexity(inputs, rs, "ppl_query_passage"),
        known_lose_with_human(inputs, rs),
        listwise_beats_pointwise(inputs, rs),
        known_overselection(inputs, rs),
        attention_below_retriever(inputs, rs),
    ]
    return entries
