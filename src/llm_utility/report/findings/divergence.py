"""Section 5 of the paper, "What underlies the divergence between human-annotated and LLM-specific
utility?": the share of human passages inside an LLM's gold set and the overlap of gold sets within
and across model families (Figure 3), and perplexity: human passages inside the gold set against
those outside, and known queries answered with human passages (Figure 4)."""

from __future__ import annotations

from functools import partial
from itertools import combinations
from typing import Any

import numpy as np
import polars as pl

from ..bootstrap import paired_difference, ratio, ratio_interval, statistic_interval
from ..judgments import gold_of
from .framework import (
    HUMAN_SHARE,
    SINGLE_HOP,
    Claim,
    Finding,
    FindingInputs,
    Pool,
    Resampling,
    correct_values,
    difference_entry,
    known_qids,
    make_cell,
    make_entry,
    not_run,
    paired,
)

# --- Figure 3: human passages in gold sets, same-family overlap -----------------------------------

ABOUT_HALF = (100 / 3, 200 / 3)


HUMAN_SHARE_IN_GOLD = Claim(
    id="human_share_in_gold",
    claim="Only about half of the human-annotated passages are gold utilitarian passages for an LLM "
    "(on its unknown queries; 'about half' read as a third to two thirds)",
    source="Figure 3 (figures/fig3_overlap: the Human column against each LLM's diagonal)",
    unit="% of human passages inside the LLM's gold set (U), pooled over its unknown queries with human passages",
    band=ABOUT_HALF,
    construction="can_fail",
    construction_reason="known queries are left out: their gold set is empty by definition (the paper's share "
    "counts them)",
    scope=HUMAN_SHARE,
)


def human_share_in_gold(inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    """Share of human passages that are in the LLM's gold set (U), pooled over the LLM's unknown
    queries with human passages, tested as the paper's 'about half' (inside a third to two thirds).
    Known queries are left out: their gold set is empty by definition, so they would pull the share
    down whatever the passages do."""
    return _human_share_entry(HUMAN_SHARE_IN_GOLD, inputs, rs)


def _human_share_entry(claim: Claim, inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    if not inputs.known:
        return not_run(claim, "no known flags (known.parquet) among the inputs", inputs)
    cells = []
    pool = Pool(("inside", "total"), ratio)
    for dataset in inputs.datasets:
        q = inputs.queries.get(dataset)
        if q is None:
            continue
        human = q.select(pl.col("qid").cast(pl.String), pl.col("human_pids").list.unique().alias("human")).filter(
            pl.col("human").list.len() > 0
        )
        for llm in inputs.llms:
            gold, known = inputs.gold.get((dataset, llm, "U")), inputs.known.get((dataset, llm))
            if gold is None or known is None:
                continue
            unknown = human.filter(pl.col("qid").is_in(sorted(known_qids(known, False))))
            gold_sets = gold_of(gold, unknown["qid"].to_list())
            inside = np.array([len(set(h) & gold_sets[qid]) for qid, h in unknown.iter_rows()], float)
            total = unknown["human"].list.len().to_numpy().astype(float)
            cell = make_cell(
                {"dataset": dataset, "llm": llm}, ratio_interval(100 * inside, total, **rs.kwargs()), claim
            )
            cell["known_left_out"] = human.height - unknown.height
            cells.append(cell)
            pool.add(dataset, pl.DataFrame({"qid": unknown["qid"], "inside": 100 * inside, "total": total}))
    if not cells:
        return not_run(claim, "no gold sets (U), known flags and queries configured", inputs)
    return make_entry(claim, cells, pool, rs, inputs=inputs)


SAME_FAMILY_OVERLAP = Claim(
    id="same_family_overlap",
    claim="LLMs of the same family have more overlapping gold utilitarian passages than LLMs of different families",
    source="Figure 3 (figures/fig3_overlap)",
    unit="passages shared per query, same-family pairs minus cross-family pairs, paired per query",
    scope=SINGLE_HOP,
)


def same_family_overlap(inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    """Gold sets (U) of LLMs of one family share more passages per query than those of LLMs of
    different families (``llms.<name>.family``). Per query: mean overlap of same-family pairs minus
    mean overlap of cross-family pairs, paired per query."""
    return _same_family_entry(SAME_FAMILY_OVERLAP, inputs, rs)


def _same_family_entry(claim: Claim, inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    families = {llm: inputs.families.get(llm) for llm in inputs.llms if inputs.families.get(llm)}
    if not families:
        return not_run(claim, "no LLM has a family (config llms.<name>.family)", inputs)
    same = [(a, b) for a, b in combinations(families, 2) if families[a] == families[b]]
    cross = [(a, b) for a, b in combinations(families, 2) if families[a] != families[b]]
    if not same:
        return not_run(claim, f"no two LLMs share a family (llms.<name>.family: {families})", inputs)
    if not cross:
        return not_run(claim, f"every LLM with a family is of the same one (llms.<name>.family: {families})", inputs)
    pairs = []
    for dataset in inputs.datasets:
        q = inputs.queries.get(dataset)
        if q is None or any((dataset, llm, "U") not in inputs.gold for llm in families):
            continue
        qids = q["qid"].cast(pl.String).to_list()
        sets = {llm: gold_of(inputs.gold[(dataset, llm, "U")], qids) for llm in families}

        def mean_overlap(group: list[tuple[str, str]]) -> np.ndarray:
            return np.array([np.mean([len(sets[a][qid] & sets[b][qid]) for a, b in group]) for qid in qids], float)

        frame = pl.DataFrame({"qid": qids, "a": mean_overlap(same), "b": mean_overlap(cross)})
        pairs.append(({"dataset": dataset, "same_pairs": len(same), "cross_pairs": len(cross)}, dataset, frame))
    return difference_entry(claim, pairs, rs, "no gold sets (U) of the LLMs with a family configured", inputs)


# --- Figure 4: perplexity, known queries with human passages ---------------------------------------


def _difference_of_means(sum_g, n_g, sum_h, n_h, axis=-1):
    return ratio(sum_g, n_g, axis=axis) - ratio(sum_h, n_h, axis=axis)


def perplexity_claim(measure: str) -> Claim:
    what = {"ppl_passage": "the passage alone", "ppl_query_passage": "the query followed by the passage"}[measure]
    return Claim(
        id=f"gold_lower_perplexity{'_query' if measure == 'ppl_query_passage' else ''}",
        claim=f"An LLM's perplexity of {what} is lower for human passages inside its gold set than outside it",
        source="Figure 4 top (figures/fig4_perplexity)",
        unit="log-perplexity (mean NLL per token, nats) of gold (G) minus non-gold (H) human passages",
        expected=-1,
        scope=SINGLE_HOP,
    )


def gold_lower_perplexity(inputs: FindingInputs, rs: Resampling, measure: str) -> dict[str, Any]:
    """Human passages inside the LLM's gold set (G) have a lower log-perplexity (the mean negative
    log-likelihood per token) than those outside (H). Where at least ``min_queries`` queries have
    passages of both kinds, the comparison is paired within those queries (per query: mean over its G
    passages minus mean over its H passages), which removes what makes one query's passages harder
    than another's; otherwise it is the difference of the two means over passages, queries resampled
    (each carries its G and H passages). Each cell says which (``comparison``). Log scale: one passage
    with a perplexity in the tens of thousands does not decide a mean. Per LLM only: the verdict
    summarises the cells."""
    return _perplexity_entry(perplexity_claim(measure), inputs, rs, measure)


def _perplexity_entry(claim: Claim, inputs: FindingInputs, rs: Resampling, measure: str) -> dict[str, Any]:
    if not inputs.perplexity:
        return not_run(claim, "the perplexity stage is not among the inputs", inputs)
    cells = []
    for (dataset, llm), table in inputs.perplexity.items():
        per_query = (
            table.with_columns(nll=pl.col(measure).log())
            .group_by("qid", maintain_order=True)
            .agg(
                sum_g=pl.col("nll").filter(pl.col("in_gold")).sum(),
                n_g=pl.col("in_gold").sum(),
                sum_h=pl.col("nll").filter(~pl.col("in_gold")).sum(),
                n_h=(~pl.col("in_gold")).sum(),
            )
            .with_columns(pl.exclude("qid").cast(pl.Float64))
        )
        both = per_query.filter((pl.col("n_g") > 0) & (pl.col("n_h") > 0))
        if both.height >= rs.min_queries:
            g, h = (both["sum_g"] / both["n_g"]).to_numpy(), (both["sum_h"] / both["n_h"]).to_numpy()
            effect = paired_difference(g, h, **rs.kwargs())
            comparison = f"paired within query ({both.height} queries with G and H passages)"
        else:
            cols = [per_query[c].to_numpy() for c in ("sum_g", "n_g", "sum_h", "n_h")]
            effect = statistic_interval(cols, _difference_of_means, **rs.kwargs())
            comparison = (
                f"unpaired: mean over G passages minus mean over H passages ({both.height} queries with both kinds, "
                f"fewer than report.min_queries {rs.min_queries} for a paired comparison)"
            )
        cell = make_cell({"dataset": dataset, "llm": llm}, effect, claim)
        cell["comparison"] = comparison
        if per_query["n_g"].sum() == 0 or per_query["n_h"].sum() == 0:
            note = (
                "no human passage inside the gold set"
                if per_query["n_g"].sum() == 0
                else "every human passage is inside the gold set"
            )
            cell["note"] = "; ".join(t for t in (note, cell["note"]) if t)
        cells.append(cell)
    return make_entry(claim, cells, None, rs, inputs=inputs)


KNOWN_LOSE_WITH_HUMAN = Claim(
    id="known_lose_with_human",
    claim="On known queries, human-annotated passages lower accuracy compared with no passage",
    source="Figure 4 bottom (figures/fig4_perplexity)",
    unit="correct answers (%) on known queries, Human minus None, paired per query",
    expected=-1,
    construction="cannot_fail",
    construction_reason="on a known query the no-passage answer is correct by definition (it is what makes the "
    "query known), so Human minus None is at most 0 on every query",
    scope=SINGLE_HOP,
    reask_twin=True,
)


def known_lose_with_human(inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    """On its known queries (answered correctly with no passage), an LLM given the human passages
    answers fewer correctly than with none. By construction (None is right on every known query) this
    cannot come out reversed: it is described, and its re-ask twin (both contexts answered again)
    tests it."""
    return _known_lose_entry(KNOWN_LOSE_WITH_HUMAN, inputs, rs)


def _known_lose_entry(claim: Claim, inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
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
            pairs.append(
                ({"dataset": dataset, "llm": llm}, dataset, paired(correct_values(human), correct_values(none), qids))
            )
    return difference_entry(
        claim, pairs, rs, "no answers with human and no passages, or no known flags, configured", inputs
    )


SECTION = "Section 5: what underlies the divergence (Figures 3, 4)"
FINDINGS = [
    Finding(HUMAN_SHARE_IN_GOLD, _human_share_entry),
    Finding(SAME_FAMILY_OVERLAP, _same_family_entry),
    *(
        Finding(perplexity_claim(m), partial(_perplexity_entry, measure=m))
        for m in ("ppl_passage", "ppl_query_passage")
    ),
    Finding(KNOWN_LOSE_WITH_HUMAN, _known_lose_entry),
]
