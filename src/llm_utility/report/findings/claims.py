"""The paper's headline claims, one function each, in the paper's order (``all_findings``): Table 1's
hierarchy, the transfer of gold sets (with the unknown-both control), Figure 3, Figure 4, the
judgment benchmark (Tables 2, 8, 4), RAG with judgments (Tables 3, 7, Figure 9), and the re-ask
twin of every finding whose quantities build part of its verdict in.

Each claim states its construction (``framework.Claim``): how its compared quantities are made
decides whether it can fail. The replays behind the labels (docs/method.md, "Findings"):

- a gold set of one passage is answered with the very call that made it gold (correct by
  construction), and the empty gold set of a known query with the no-passage call that made the
  query known (correct by definition);
- on a known query the no-passage answer is correct, so nothing can beat it there.

A function with ``reask=True`` evaluates the same claim on the re-ask answers
(``FindingInputs.reasked``): gold sets and known flags stay those of the answer prompt, every
evaluated answer comes from a paraphrased instruction with the passages reversed, so no evaluated
call is a call that selected its passages.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import combinations
from typing import Any

import numpy as np
import polars as pl

from ...method.judgments import VERBAL_RANKING_METHODS
from ...method.parsing import GENUINE
from ...metrics import ranking_metrics_per_query, set_metrics_per_query
from ..analysis import TABLE1_CONTEXTS
from ..bootstrap import (
    f1_of_means,
    f1_of_sums,
    mean_interval,
    paired_difference,
    ratio,
    ratio_interval,
    statistic_interval,
)
from ..judgments import _gold_of, _selected_of, _unparsed_of, outcome_shares, outcomes_of
from .framework import (
    BY_CONSTRUCTION,
    Claim,
    FindingInputs,
    Pool,
    PooledDifferences,
    Resampling,
    correct_values,
    difference_entry,
    known_qids,
    make_cell,
    make_entry,
    not_run,
    paired,
    too_few,
)
from .qrels import llm_qrels_predict_rag

# Scopes (report.claim_scope): the paper's datasets each claim is stated for.
SINGLE_HOP = "single_hop"  # Sections 4-5 (Table 1, Figures 1-4 and 8): NQ, TriviaQA, MS MARCO-FQA
HUMAN_SHARE = "human_share"  # "about half ... for both the NQ and MS MARCO-FQA datasets"
ALL = "all"  # Section 6 (Tables 2-4, 7, 8): all six datasets
TRIVIAQA = "triviaqa"  # Table 4: likelihood ranks best on TriviaQA

REPLAY_ONE = "a one-passage gold set is answered with the very call that made it gold (correct by construction)"
REPLAY_KNOWN = "the empty gold set of a known query replays the no-passage call that made it known (correct by definition)"
REASK_REASON = (
    "re-ask answers (a paraphrased instruction, passages in reverse order): no evaluated call is the call that "
    "selected its passages or made its query known"
)
REASK_MISSING = "no re-ask answers (answers/reask_<context>.parquet) among the inputs: the re-ask stage is off or not configured"


def twin_claim(claim: Claim) -> Claim:
    """The re-ask twin of ``claim``: the same claim and unit, on the re-ask answers."""
    return replace(
        claim,
        id=f"{claim.id}_reask",
        claim=f"{claim.claim} (re-ask control: every evaluated context answered again under a paraphrased instruction, passages reversed)",
        source=f"{claim.source}, on the re-ask answers (answers/reask_*.parquet)",
        construction="can_fail",
        construction_reason=REASK_REASON,
    )


def _for_reask(claim: Claim, inputs: FindingInputs, reask: bool) -> tuple[Claim, FindingInputs, dict[str, Any] | None]:
    """(claim, inputs, None) as given, or for ``reask`` the twin claim on the re-ask answers; the
    third item is the not-run entry when there are no re-ask answers."""
    if not reask:
        return claim, inputs, None
    twin = twin_claim(claim)
    if not inputs.has_reask():
        return twin, inputs, not_run(twin, REASK_MISSING, inputs)
    return twin, inputs.reasked(), None


# --- Table 1: the hierarchy, pair by pair ---------------------------------------------------------

TABLE1_PAIRS = [("G(U)", "G(C)"), ("G(C)", "Human"), ("Human", "U"), ("U", "C"), ("C", "None")]
_TABLE1_CONSTRUCTION = {
    ("G(U)", "G(C)"): (
        "partly_built_in",
        "G(U) holds G(C) (each passage is judged alone) and a one-passage set replays the call that made it gold "
        "(correct): where G(C) is empty and G(U) one human passage this favours G(U), where G(C) has one passage and "
        "G(U) more it favours G(C), so the replays cut both ways",
    ),
    ("G(C)", "Human"): (
        "partly_built_in",
        f"{REPLAY_ONE}; {REPLAY_KNOWN}, so G(C) minus Human is never negative on a known query",
    ),
}


def _table1_claim(better: str, worse: str) -> Claim:
    slug = {"G(U)": "gu", "G(C)": "gc", "Human": "human", "U": "u", "C": "c", "None": "none"}
    text = f"{better} answers more queries correctly than {worse} (Table 1: G(U) > G(C) > Human >= U > C > None)"
    if (better, worse) == ("Human", "U"):
        text = "Human passages answer at least as many queries as U (Table 1: Human >= U; holds means strictly more, inconclusive does not contradict it)"
    construction, reason = _TABLE1_CONSTRUCTION.get((better, worse), ("can_fail", ""))
    return Claim(
        id=f"table1_{slug[better]}_over_{slug[worse]}",
        claim=text,
        source="Table 1 (tables/table1_rag)",
        unit=f"correct answers (%), {better} minus {worse}, paired per query",
        construction=construction,
        construction_reason=reason,
        scope=SINGLE_HOP,
    )


def table1_pair(inputs: FindingInputs, rs: Resampling, better: str, worse: str, reask: bool = False) -> dict[str, Any]:
    """One adjacent pair of Table 1's hierarchy: ``better`` minus ``worse``, paired per query."""
    claim, inputs, missing = _for_reask(_table1_claim(better, worse), inputs, reask)
    if missing:
        return missing
    pairs = []
    for dataset in inputs.datasets:
        for llm in inputs.llms:
            ctx_a, ctx_b = (TABLE1_CONTEXTS[c].format(llm=llm) for c in (better, worse))
            a, b = inputs.answers.get((dataset, llm, ctx_a)), inputs.answers.get((dataset, llm, ctx_b))
            if a is None or b is None:
                continue
            pairs.append(({"dataset": dataset, "llm": llm}, dataset, paired(correct_values(a), correct_values(b))))
    return difference_entry(claim, pairs, rs, f"no answers with both {better} and {worse} passages configured", inputs)


def table1_hierarchy(inputs: FindingInputs, rs: Resampling) -> list[dict[str, Any]]:
    """Table 1's hierarchy G(U) > G(C) > Human >= U > C > None, one entry per adjacent pair."""
    return [table1_pair(inputs, rs, better, worse) for better, worse in TABLE1_PAIRS]


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
            construction="partly_built_in",
            construction_reason=f"the known queries are left out, but {REPLAY_ONE}; the other LLM's gold set is answered afresh",
            scope=SINGLE_HOP,
        )
    return Claim(
        id=f"own_gold_beats_others_{candidates}",
        claim=f"Gold sets ({candidates}) are not transferable: each LLM answers best with its own gold set (transfer diagonal)",
        source=_FIGURE_OF[candidates],
        unit="correct answers (%), own gold set minus another LLM's, paired per query",
        construction="partly_built_in",
        construction_reason=f"{REPLAY_ONE}; {REPLAY_KNOWN}; the other LLM's gold set is answered afresh",
        scope=SINGLE_HOP,
    )


def own_gold_beats_others(inputs: FindingInputs, rs: Resampling, candidates: str, control: bool = False, reask: bool = False) -> dict[str, Any]:
    """Each LLM with its own gold set vs with every other LLM's (cells: dataset, llm, gold_from); with
    ``control``, only on the queries unknown to both LLMs of the cell."""
    claim, inputs, missing = _for_reask(_transfer_claim(candidates, control), inputs, reask)
    if missing:
        return missing
    if len(inputs.llms) < 2:
        return not_run(claim, "needs at least two LLMs (config llms)", inputs)
    if control and not inputs.known:
        return not_run(claim, "no known flags (known.parquet) among the inputs", inputs)
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
    return difference_entry(claim, pairs, rs, f"no transfer answers (gold_{candidates}_from_<llm>) configured", inputs)


def with_control(main: dict[str, Any], control: dict[str, Any]) -> dict[str, Any]:
    """Mark ``control`` as the control of ``main`` and say whether ``main``'s conclusion survives it:
    true when both hold, false when main holds and the control does not, null when main does not hold."""
    survives = None
    if main["verdict"] == "holds" and control["status"] == "run":
        survives = control["verdict"] == "holds"
    return {**control, "control_of": main["id"], "survives": survives}


def with_twin(main: dict[str, Any], twin: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Link ``main`` and its re-ask ``twin`` (``reask_twin`` / ``twin_of``) and say whether main's
    effect survives the re-ask: true when the twin holds, false when it does not, null when main
    neither holds nor is built in (nothing to survive) or the twin did not run."""
    survives = None
    if main["verdict"] in ("holds", BY_CONSTRUCTION) and main.get("effect") is not None and twin["status"] == "run":
        survives = twin["verdict"] == "holds"
    return {**main, "reask_twin": twin["id"]}, {**twin, "twin_of": main["id"], "survives": survives}


def _own_gold_human_claim() -> Claim:
    return Claim(
        id="own_gold_beats_human",
        claim="Each LLM answers better with its own gold set (U) than with the human-annotated passages",
        source=_FIGURE_OF["U"],
        unit="correct answers (%), own gold set (U) minus Human, paired per query",
        construction="partly_built_in",
        construction_reason=f"{REPLAY_ONE}; {REPLAY_KNOWN}, so own gold minus Human is never negative on a known query",
        scope=SINGLE_HOP,
    )


def own_gold_beats_human(inputs: FindingInputs, rs: Resampling, reask: bool = False) -> dict[str, Any]:
    claim, inputs, missing = _for_reask(_own_gold_human_claim(), inputs, reask)
    if missing:
        return missing
    pairs = []
    for dataset in inputs.datasets:
        for llm in inputs.llms:
            own, human = inputs.answers.get((dataset, llm, f"gold_U_from_{llm}")), inputs.answers.get((dataset, llm, "human"))
            if own is not None and human is not None:
                pairs.append(({"dataset": dataset, "llm": llm}, dataset, paired(correct_values(own), correct_values(human))))
    return difference_entry(claim, pairs, rs, "no answers with the own gold set (U) and the human passages configured", inputs)


# --- Figure 3: human passages in gold sets, same-family overlap -----------------------------------

ABOUT_HALF = (100 / 3, 200 / 3)


def human_share_in_gold(inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    """Share of human passages that are in the LLM's gold set (U), pooled over the LLM's unknown
    queries with human passages, tested as the paper's 'about half' (inside a third to two thirds).
    Known queries are left out: their gold set is empty by definition, so they would pull the share
    down whatever the passages do."""
    claim = Claim(
        id="human_share_in_gold",
        claim="Only about half of the human-annotated passages are gold utilitarian passages for an LLM "
        "(on its unknown queries; 'about half' read as a third to two thirds)",
        source="Figure 3 (figures/fig3_overlap: the Human column against each LLM's diagonal)",
        unit="% of human passages inside the LLM's gold set (U), pooled over its unknown queries with human passages",
        band=ABOUT_HALF,
        construction="can_fail",
        construction_reason="known queries are left out: their gold set is empty by definition (the paper's share counts them)",
        scope=HUMAN_SHARE,
    )
    if not inputs.known:
        return not_run(claim, "no known flags (known.parquet) among the inputs", inputs)
    cells = []
    pool = Pool(("inside", "total"), ratio)
    for dataset in inputs.datasets:
        q = inputs.queries.get(dataset)
        if q is None:
            continue
        human = q.select(pl.col("qid").cast(pl.String), pl.col("human_pids").list.unique().alias("human")).filter(pl.col("human").list.len() > 0)
        for llm in inputs.llms:
            gold, known = inputs.gold.get((dataset, llm, "U")), inputs.known.get((dataset, llm))
            if gold is None or known is None:
                continue
            unknown = human.filter(pl.col("qid").is_in(sorted(known_qids(known, False))))
            gold_sets = _gold_of(gold, unknown["qid"].to_list())
            inside = np.array([len(set(h) & gold_sets[qid]) for qid, h in unknown.iter_rows()], float)
            total = unknown["human"].list.len().to_numpy().astype(float)
            cell = make_cell({"dataset": dataset, "llm": llm}, ratio_interval(100 * inside, total, **rs.kwargs()), claim)
            cell["known_left_out"] = human.height - unknown.height
            cells.append(cell)
            pool.add(dataset, pl.DataFrame({"qid": unknown["qid"], "inside": 100 * inside, "total": total}))
    if not cells:
        return not_run(claim, "no gold sets (U), known flags and queries configured", inputs)
    return make_entry(claim, cells, pool, rs, inputs=inputs)


def same_family_overlap(inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    """Gold sets (U) of LLMs of one family share more passages per query than those of LLMs of
    different families (``llms.<name>.family``). Per query: mean overlap of same-family pairs minus
    mean overlap of cross-family pairs, paired per query."""
    claim = Claim(
        id="same_family_overlap",
        claim="LLMs of the same family have more overlapping gold utilitarian passages than LLMs of different families",
        source="Figure 3 (figures/fig3_overlap)",
        unit="passages shared per query, same-family pairs minus cross-family pairs, paired per query",
        scope=SINGLE_HOP,
    )
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
        sets = {llm: _gold_of(inputs.gold[(dataset, llm, "U")], qids) for llm in families}

        def mean_overlap(group: list[tuple[str, str]]) -> np.ndarray:
            return np.array([np.mean([len(sets[a][qid] & sets[b][qid]) for a, b in group]) for qid in qids], float)

        frame = pl.DataFrame({"qid": qids, "a": mean_overlap(same), "b": mean_overlap(cross)})
        pairs.append(({"dataset": dataset, "same_pairs": len(same), "cross_pairs": len(cross)}, dataset, frame))
    return difference_entry(claim, pairs, rs, "no gold sets (U) of the LLMs with a family configured", inputs)


# --- Figure 4: perplexity, known queries with human passages ---------------------------------------


def _difference_of_means(sum_g, n_g, sum_h, n_h, axis=-1):
    return ratio(sum_g, n_g, axis=axis) - ratio(sum_h, n_h, axis=axis)


def gold_lower_perplexity(inputs: FindingInputs, rs: Resampling, measure: str) -> dict[str, Any]:
    """Human passages inside the LLM's gold set (G) have a lower log-perplexity (the mean negative
    log-likelihood per token) than those outside (H). Where at least ``min_queries`` queries have
    passages of both kinds, the comparison is paired within those queries (per query: mean over its G
    passages minus mean over its H passages), which removes what makes one query's passages harder
    than another's; otherwise it is the difference of the two means over passages, queries resampled
    (each carries its G and H passages). Each cell says which (``comparison``). Log scale: one passage
    with a perplexity in the tens of thousands does not decide a mean. Per LLM only: the verdict
    summarises the cells."""
    what = {"ppl_passage": "the passage alone", "ppl_query_passage": "the query followed by the passage"}[measure]
    claim = Claim(
        id=f"gold_lower_perplexity{'_query' if measure == 'ppl_query_passage' else ''}",
        claim=f"An LLM's perplexity of {what} is lower for human passages inside its gold set than outside it",
        source="Figure 4 top (figures/fig4_perplexity)",
        unit="log-perplexity (mean NLL per token, nats) of gold (G) minus non-gold (H) human passages",
        expected=-1,
        scope=SINGLE_HOP,
    )
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
            note = "no human passage inside the gold set" if per_query["n_g"].sum() == 0 else "every human passage is inside the gold set"
            cell["note"] = "; ".join(t for t in (note, cell["note"]) if t)
        cells.append(cell)
    return make_entry(claim, cells, None, rs, inputs=inputs)


def _known_lose_claim() -> Claim:
    return Claim(
        id="known_lose_with_human",
        claim="On known queries, human-annotated passages lower accuracy compared with no passage",
        source="Figure 4 bottom (figures/fig4_perplexity)",
        unit="correct answers (%) on known queries, Human minus None, paired per query",
        expected=-1,
        construction="cannot_fail",
        construction_reason="on a known query the no-passage answer is correct by definition (it is what makes the query known), "
        "so Human minus None is at most 0 on every query",
        scope=SINGLE_HOP,
    )


def known_lose_with_human(inputs: FindingInputs, rs: Resampling, reask: bool = False) -> dict[str, Any]:
    """On its known queries (answered correctly with no passage), an LLM given the human passages
    answers fewer correctly than with none. By construction (None is right on every known query) this
    cannot come out reversed: it is described, and its re-ask twin (both contexts answered again)
    tests it."""
    claim, inputs, missing = _for_reask(_known_lose_claim(), inputs, reask)
    if missing:
        return missing
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
    return difference_entry(claim, pairs, rs, "no answers with human and no passages, or no known flags, configured", inputs)


# --- judgments: selection (Tables 2, 8) -----------------------------------------------------------

# --- parse shares: how much of a judgment finding's cells rests on genuine judgments ----------------

# A cell rests mostly on non-genuine outputs when fewer than this share (%) of the judgments it
# compares are the model's own (the rest did not parse or repeated the prompt).
GENUINE_MAJORITY = 50.0


def _judged_sides(inputs: FindingInputs, cell: dict[str, Any], sides: list[tuple[str, str, str]], qids: set[str] | None = None):
    """(label, table, qids) of each (kind, llm, method) side a cell compares: kind ``judgments`` or
    ``rankings`` (verbalized ones only: the others are scores, never echoes); ``qids`` the cell's
    queries (None: every judged query)."""
    out = []
    for kind, llm, method in sides:
        if kind == "rankings" and method not in VERBAL_RANKING_METHODS:
            continue
        table = getattr(inputs, kind).get((cell["dataset"], llm, method))
        if table is not None:
            label = method if llm == cell.get("llm") else f"{method} of {llm}"
            out.append((label if kind == "judgments" else f"{label} ranking", table, qids))
    return out


def with_parse_shares(entry: dict[str, Any], sides_of) -> dict[str, Any]:
    """A judgment finding's entry with, in each cell, ``parse``: the shares (%) of genuine, unparsed
    and echo outputs of each judgment it compares (``sides_of(cell)`` -> [(label, judgments or
    rankings table, the cell's qids or None for all judged)]), and a note on every cell where fewer
    than ``GENUINE_MAJORITY`` % of them are genuine; the entry's note says so when most of its
    in-scope cells do, and ``non_genuine_cells`` counts them."""
    if entry["status"] != "run":
        return entry
    cells, flagged, counted = [], 0, 0
    for cell in entry["cells"]:
        parse = {}
        for label, table, qids in sides_of(cell):
            outcome = outcomes_of(table)
            chosen = [q for q in (outcome if qids is None else qids) if q in outcome]
            if chosen:
                parse[label] = {k: round(v, 1) for k, v in outcome_shares(outcome, chosen).items()}
        if not parse:
            cells.append(cell)
            continue
        cell = {**cell, "parse": parse}
        genuine = float(np.mean([s[GENUINE] for s in parse.values()]))
        if cell.get("in_scope", True):
            counted += 1
        if genuine < GENUINE_MAJORITY:
            flagged += cell.get("in_scope", True)
            shares = ", ".join(f"{label} {s['genuine']:.0f}/{s['unparsed']:.0f}/{s['echo']:.0f}" for label, s in parse.items())
            note = f"rests mostly on non-genuine outputs (genuine/unparsed/echo %: {shares})"
            cell["note"] = "; ".join(t for t in (note, cell.get("note")) if t)
        cells.append(cell)
    entry = {**entry, "cells": cells, "non_genuine_cells": flagged}
    if counted and flagged > counted / 2:
        note = (f"{flagged} of {counted} in-scope cells rest mostly on non-genuine outputs (fewer than half of the judgments "
                "they compare are the model's own; the rest did not parse or repeated the prompt): the verdict says little "
                "about utility judgment")
        entry["note"] = "; ".join(t for t in (note, entry.get("note")) if t)
    return entry


def _nonempty_gold(inputs: FindingInputs, dataset: str, llm: str) -> set[str]:
    gold = inputs.gold.get((dataset, llm, "C"))
    return set() if gold is None else set(gold["qid"].cast(pl.String).to_list())


SELECTION_PAIRS = [("listwise", "pointwise"), ("listwise_pa", "pointwise_pa")]
PSEUDO_ANSWER_PAIRS = [("pointwise_pa", "pointwise"), ("listwise_pa", "listwise")]
KNOWN_REJECTION = ("listwise_pa_reject", "listwise_pa")


def _precision_recall(table: pl.DataFrame, gold: pl.DataFrame) -> pl.DataFrame:
    """qid, precision, recall (x100) of a judgments table on the judged queries with a non-empty gold set."""
    qids, selected = _selected_of(table)
    per_query = set_metrics_per_query(selected, _gold_of(gold, qids))
    return per_query.filter(pl.col("n_gold") > 0).select("qid", pl.col("precision") * 100, pl.col("recall") * 100)


def _f1_difference(pa, ra, pb, rb, axis=-1):
    return f1_of_means(pa, ra, axis=axis) - f1_of_means(pb, rb, axis=axis)


def _pooled_f1_difference(pa, ra, pb, rb, count, axis=-1):
    return f1_of_sums(pa, ra, count, axis=axis) - f1_of_sums(pb, rb, count, axis=axis)


def _missing_methods(inputs: FindingInputs, method_pairs: list[tuple[str, str]]) -> str:
    """A note naming the method pairs of a comparison that no (dataset, LLM) has both of."""
    have = {m for _, _, m in inputs.judgments}
    missing = [f"{a} vs {b} ({', '.join(m for m in (a, b) if m not in have)} not in judgments.methods)" for a, b in method_pairs if not {a, b} <= have]
    return f"not compared: {'; '.join(missing)}" if missing else ""


def _f1_comparison(claim: Claim, inputs: FindingInputs, rs: Resampling, method_pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """F1 of the first method of each pair minus F1 of the second (the paper's F1 of averaged P and R
    on the judged queries with a non-empty gold set C), recomputed on resampled queries; cells per
    (dataset, llm, pair)."""
    cells = []
    pool = Pool(("precision", "recall", "precision_b", "recall_b", "count"), _pooled_f1_difference)
    for dataset in inputs.datasets:
        for llm in inputs.llms:
            gold = inputs.gold.get((dataset, llm, "C"))
            for first, second in method_pairs:
                a, b = inputs.judgments.get((dataset, llm, first)), inputs.judgments.get((dataset, llm, second))
                if gold is None or a is None or b is None:
                    continue
                joined = _precision_recall(a, gold).join(_precision_recall(b, gold), on="qid", suffix="_b", maintain_order="left")
                cols = [joined[c].to_numpy() for c in ("precision", "recall", "precision_b", "recall_b")]
                effect = statistic_interval(cols, _f1_difference, **rs.kwargs())
                cells.append(make_cell({"dataset": dataset, "llm": llm, "pair": f"{first} vs {second}"}, effect, claim))
                pool.add(dataset, joined.with_columns(count=pl.lit(1.0)))
    pairs_text = " or ".join(f"{a}/{b}" for a, b in method_pairs)
    if not cells:
        return not_run(claim, f"needs both methods of a pair in judgments.methods ({pairs_text}) and gold sets (C)", inputs)
    entry = make_entry(claim, cells, pool, rs, note=_missing_methods(inputs, method_pairs), inputs=inputs)

    def sides(cell):
        qids = _nonempty_gold(inputs, cell["dataset"], cell["llm"])
        return _judged_sides(inputs, cell, [("judgments", cell["llm"], m) for m in cell["pair"].split(" vs ")], qids)

    return with_parse_shares(entry, sides)


def listwise_beats_pointwise(inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    """Listwise selection has a higher F1 than pointwise (with and without the pseudo-answer), F1 being
    the paper's harmonic mean of averaged precision and recall over queries with a non-empty gold set
    (C); the F1 difference is recomputed on queries resampled (each carries both methods' P and R)."""
    claim = Claim(
        id="listwise_beats_pointwise",
        claim="Listwise utility selection has a higher F1 than pointwise selection",
        source="Table 2 (tables/table2_selection)",
        unit="F1 (%), listwise minus pointwise (F1 of averaged P and R, queries resampled)",
        scope=ALL,
    )
    return _f1_comparison(claim, inputs, rs, SELECTION_PAIRS)


def pseudo_answer_improves_f1(inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    """Selection with the pseudo-answer has a higher F1 than without it (pointwise and listwise)."""
    claim = Claim(
        id="pseudo_answer_improves_f1",
        claim="Incorporating the pseudo-answer during utility judgments improves F1",
        source="Table 2 (tables/table2_selection)",
        unit="F1 (%), with minus without the pseudo-answer (F1 of averaged P and R, queries resampled)",
        scope=ALL,
    )
    return _f1_comparison(claim, inputs, rs, PSEUDO_ANSWER_PAIRS)


def known_rejection_lowers_recall(inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    """The known-rejection instruction lowers recall: listwise selection with the pseudo-answer, with
    minus without the instruction, per-query recall on the judged queries with a non-empty gold set C
    (an output that did not parse selects nothing: recall 0)."""
    claim = Claim(
        id="known_rejection_lowers_recall",
        claim="The known-rejection instruction lowers the recall of listwise selection with the pseudo-answer",
        source="Table 8 (tables/table8_known_rejection)",
        unit="recall (%), with minus without the known-rejection instruction, paired per query (non-empty gold C)",
        expected=-1,
        scope=ALL,
    )
    with_it, without = KNOWN_REJECTION
    pairs = []
    for dataset in inputs.datasets:
        for llm in inputs.llms:
            a, b = inputs.judgments.get((dataset, llm, with_it)), inputs.judgments.get((dataset, llm, without))
            gold = inputs.gold.get((dataset, llm, "C"))
            if a is None or b is None or gold is None:
                continue
            ra = _precision_recall(a, gold).select("qid", value="recall")
            rb = _precision_recall(b, gold).select("qid", value="recall")
            pairs.append(({"dataset": dataset, "llm": llm}, dataset, paired(ra, rb)))
    entry = difference_entry(claim, pairs, rs, f"needs {with_it} and {without} in judgments.methods and gold sets (C)", inputs)
    return with_parse_shares(entry, lambda cell: _judged_sides(
        inputs, cell, [("judgments", cell["llm"], m) for m in (with_it, without)], _nonempty_gold(inputs, cell["dataset"], cell["llm"])))


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
        scope=ALL,
    )
    cells = []
    pool = Pool(("s", "c"), ratio)
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
        pool.add(dataset, pl.DataFrame({"qid": chosen, "s": values, "c": np.ones(len(chosen))}, schema_overrides={"qid": pl.String}))
    if not cells:
        return not_run(claim, "no judgments (judgments.methods) with known flags configured", inputs)
    entry = make_entry(claim, cells, pool, rs, inputs=inputs)
    return with_parse_shares(entry, lambda cell: _judged_sides(
        inputs, cell, [("judgments", cell["llm"], cell["method"])], known_qids(inputs.known[(cell["dataset"], cell["llm"])], True)))


# --- judgments: rankings (Table 4) ----------------------------------------------------------------

RANKING_COMPETITORS = ("retriever", "listwise", "likelihood", "attention")


def _ndcg_values(table: pl.DataFrame, gold: pl.DataFrame, k: int) -> pl.DataFrame:
    """qid, value (100 x NDCG@k) of a ranking on its ranked queries with a non-empty gold set."""
    ranked = dict(table.sort(["qid", "rank"]).group_by("qid", maintain_order=True).agg(pl.col("pid")).iter_rows())
    per_query = ranking_metrics_per_query(ranked, _gold_of(gold, list(ranked)), k=k)
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
            pairs.append(({"dataset": dataset, "llm": llm}, dataset, paired(values(dataset, llm, first), values(dataset, llm, second))))
    return pairs


def attention_below_retriever(inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    """Attention rankings have a lower NDCG@k than the retriever's order (per query, gold set C)."""
    claim = Claim(
        id="attention_below_retriever",
        claim="Attention-based utility ranks below the retriever's own order",
        source="Table 4 (tables/table4_ranking)",
        unit=f"NDCG@{inputs.k} (%), attention minus retriever, paired per query (non-empty gold C)",
        expected=-1,
        scope=ALL,
    )
    pairs = _ranking_pairs(inputs, "attention", "retriever")
    return difference_entry(claim, pairs, rs, "needs the attention and retriever rankings (rankings.methods) and gold sets (C)", inputs)


def likelihood_beats_listwise_pa_triviaqa(inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    """On TriviaQA the likelihood ranking beats listwise ranking with the pseudo-answer (Table 4)."""
    claim = Claim(
        id="likelihood_beats_listwise_pa_triviaqa",
        claim="On TriviaQA, likelihood ranks better than verbalized listwise ranking with the pseudo-answer",
        source="Table 4 (tables/table4_ranking)",
        unit=f"NDCG@{inputs.k} (%), likelihood minus listwise with pseudo-answer, paired per query (non-empty gold C)",
        scope=TRIVIAQA,
    )
    pairs = _ranking_pairs(inputs, "likelihood", "listwise_pa")
    entry = difference_entry(claim, pairs, rs, "needs the likelihood and listwise_pa rankings (rankings.methods) and gold sets (C)", inputs)
    return with_parse_shares(entry, lambda cell: _judged_sides(
        inputs, cell, [("rankings", cell["llm"], "listwise_pa")], _nonempty_gold(inputs, cell["dataset"], cell["llm"])))


def _beats_every(claim: Claim, inputs: FindingInputs, rs: Resampling, competitors: dict[str, list[tuple[dict[str, Any], str, pl.DataFrame]]],
                 note: str, empty_reason: str) -> dict[str, Any]:
    """An entry for "A beats every competitor": a cell per (dataset, llm, versus) with A minus that
    competitor paired per query, and per competitor its pooled margin (``margins``: the mean of the
    in-scope datasets' mean differences). The entry's effect and interval are the smallest margin's.
    It holds when every margin's interval lies above 0 (an intersection-union test: no correction
    needed) and is reversed when the smallest margin lies below 0 even at the Bonferroni-corrected
    confidence 1 - (1 - confidence) / competitors (the smallest of several null margins is more often
    below 0 than one is)."""
    names = [m for m, pairs in competitors.items() if pairs]
    if not names:
        return not_run(claim, empty_reason, inputs)
    cells, pools = [], {}
    for name in names:
        pools[name] = PooledDifferences()
        for keys, dataset, frame in competitors[name]:
            a, b = frame["a"].to_numpy(), frame["b"].to_numpy()
            cells.append(make_cell({**keys, "versus": name}, paired_difference(a, b, **rs.kwargs()), claim))
            pools[name].add(dataset, frame["qid"].to_list(), a - b)
    scoped = [d for d in inputs.datasets if inputs.in_scope(d, claim)]
    effects = {name: e for name in names if (e := pools[name].effect(rs, scoped)) is not None}
    smallest = min(effects, key=lambda m: effects[m].effect) if effects else None
    entry = make_entry(claim, cells, effects.get(smallest), rs, note=note, inputs=inputs)
    if entry["status"] != "run" or smallest is None:
        return entry
    margins = [too_few(make_cell({"versus": m}, effects[m], claim), rs) for m in effects]
    if all(m["verdict"] == "holds" for m in margins):
        decided = "holds"
    else:
        corrected = replace(rs, confidence=1 - (1 - rs.confidence) / len(effects))
        strict = pools[smallest].effect(corrected, scoped)
        decided = "reversed" if strict is not None and strict.hi < 0 else "inconclusive"
    entry = too_few({**entry, "verdict": decided}, rs)
    return entry | {"margins": margins, "smallest_margin": smallest}


def listwise_pa_ranks_best(inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    """Verbalized listwise ranking with the pseudo-answer ranks best (Table 4's ALL AVG): NDCG@k of
    listwise_pa minus each other configured ranking (retriever, listwise, likelihood, attention);
    overall the smallest pooled margin."""
    claim = Claim(
        id="listwise_pa_ranks_best",
        claim="Verbalized listwise ranking with the pseudo-answer ranks best overall (above the retriever, listwise without it, likelihood and attention)",
        source="Table 4 (tables/table4_ranking)",
        unit=f"NDCG@{inputs.k} (%), listwise with pseudo-answer minus each other ranking, paired per query; overall the smallest pooled margin",
        scope=ALL,
    )
    ndcg: dict[tuple[str, str, str], pl.DataFrame] = {}
    competitors = {m: _ranking_pairs(inputs, "listwise_pa", m, ndcg) for m in RANKING_COMPETITORS}
    have = {m for _, _, m in inputs.rankings}
    missing = [m for m in RANKING_COMPETITORS if not competitors[m] and m not in have]
    note = f"not compared: {', '.join(missing)} (not in rankings.methods)" if missing else ""
    entry = _beats_every(claim, inputs, rs, competitors, note, "needs the listwise_pa ranking and another (rankings.methods) and gold sets (C)")
    return with_parse_shares(entry, lambda cell: _judged_sides(
        inputs, cell, [("rankings", cell["llm"], m) for m in ("listwise_pa", cell["versus"])], _nonempty_gold(inputs, cell["dataset"], cell["llm"])))


# --- RAG with judgments (Tables 3, 7, Figure 9) ------------------------------------------------------


def _answer_pairs(inputs: FindingInputs, context_a: str, context_b: str) -> list[tuple[dict[str, Any], str, pl.DataFrame]]:
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


def selected_beats_topk(inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    """RAG with the LLM's own selections (the paper's best selection method, listwise with the
    pseudo-answer) answers more queries correctly than with the top-k (Table 3), on the judged queries."""
    method = inputs.figure9_method
    claim = Claim(
        id="selected_beats_topk",
        claim=f"RAG with the LLM's own utility selections ({method}) answers more queries correctly than with the top-k retrieved passages",
        source="Table 3 (tables/table3_rag_selection)",
        unit=f"correct answers (%), own {method} selection minus top-k, paired per judged query",
        scope=ALL,
    )
    pairs = _answer_pairs(inputs, f"selected_{method}_from_{{llm}}", "topk")
    entry = difference_entry(claim, pairs, rs, f"needs answers with the own {method} selections (judgments.rag_methods) and the top-k", inputs)
    return with_parse_shares(entry, lambda cell: _judged_sides(inputs, cell, [("judgments", cell["llm"], method)]))


def selected_beats_reranked(inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    """RAG with the own selections beats RAG with the top passages of every utility ranking (Table 7
    against Table 3): each reranking's margin, overall the smallest pooled margin."""
    method, top = inputs.figure9_method, inputs.rag_top
    claim = Claim(
        id="selected_beats_reranked",
        claim=f"RAG with the LLM's own utility selections ({method}) answers more queries correctly than with the top {top} of any utility ranking",
        source="Tables 3 and 7 (tables/table3_rag_selection, table7_rag_reranked)",
        unit=f"correct answers (%), own {method} selection minus each reranked top {top}, paired per judged query; overall the smallest pooled margin",
        scope=ALL,
    )
    prefix, suffix = "reranked_", f"_top{top}"
    rerankings = sorted({c[len(prefix):-len(suffix)] for _, _, c in inputs.answers if c.startswith(prefix) and c.endswith(suffix)})
    competitors = {m: _answer_pairs(inputs, f"selected_{method}_from_{{llm}}", f"{prefix}{m}{suffix}") for m in rerankings}
    entry = _beats_every(claim, inputs, rs, competitors, "", f"needs answers with the own {method} selections and with reranked top-{top} passages (rankings.rag_methods)")
    return with_parse_shares(entry, lambda cell: _judged_sides(
        inputs, cell, [("judgments", cell["llm"], method), ("rankings", cell["llm"], cell["versus"])]))


def _selection_transfer_claim() -> Claim:
    return Claim(
        id="selections_transfer_better_than_gold",
        claim="Utility selections transfer across LLMs better than gold sets do (Figure 9 against Figure 2): "
        "what an LLM loses with another LLM's passages instead of its own is smaller for selections",
        source="Figure 9 against Figure 2 (figures/fig9_selection_transfer, fig2_transfer_U)",
        unit="correct answers (%), (own gold set minus the other's) minus (own selection minus the other's), paired per judged query",
        construction="partly_built_in",
        construction_reason=f"the gold-set side replays selecting calls ({REPLAY_ONE}; {REPLAY_KNOWN}); selections are answered afresh",
        scope=SINGLE_HOP,
    )


def selections_transfer_better_than_gold(inputs: FindingInputs, rs: Resampling, reask: bool = False) -> dict[str, Any]:
    """The transfer loss of gold sets (U) minus that of selections (Figure 9's method), per answering
    LLM and source LLM: cells (dataset, llm, from). The re-ask twin re-asks the gold-set side; the
    selections' answers are the same in both (each loss compares answers under one prompt)."""
    method = inputs.figure9_method
    claim, inputs, missing = _for_reask(_selection_transfer_claim(), inputs, reask)
    if missing:
        return missing
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
                gold_loss = paired(correct_values(own_gold), correct_values(other_gold)).select("qid", value=pl.col("a") - pl.col("b"))
                sel_loss = paired(correct_values(own_sel), correct_values(other_sel)).select("qid", value=pl.col("a") - pl.col("b"))
                pairs.append(({"dataset": dataset, "llm": llm, "from": source}, dataset, paired(gold_loss, sel_loss)))
    entry = difference_entry(claim, pairs, rs, f"needs the transfer answers of gold sets (U) and of {method} selections (judgments.rag_methods)", inputs)
    return with_parse_shares(entry, lambda cell: _judged_sides(
        inputs, cell, [("judgments", cell["llm"], method), ("judgments", cell["from"], method)]))


# --- all of them ----------------------------------------------------------------------------------


def _pair(main: dict[str, Any], twin: dict[str, Any]) -> list[dict[str, Any]]:
    return list(with_twin(main, twin))


def all_findings(inputs: FindingInputs, rs: Resampling) -> list[dict[str, Any]]:
    """Every finding, in the paper's order: Table 1's hierarchy, transfer (with the unknown-both
    control), Figure 3, Figure 4, the judgment benchmark (Tables 2, 8, 4), RAG with judgments
    (Tables 3, 7, Figure 9); each finding whose construction builds part of its verdict in is
    followed by its re-ask twin (``<id>_reask``); last, the qrels at work (beyond the paper:
    ``findings.qrels``)."""
    entries: list[dict[str, Any]] = []
    for better, worse in TABLE1_PAIRS:
        main = table1_pair(inputs, rs, better, worse)
        if main["construction"] == "can_fail":
            entries.append(main)
        else:
            entries += _pair(main, table1_pair(inputs, rs, better, worse, reask=True))
    for candidates in ("U", "C"):
        main = own_gold_beats_others(inputs, rs, candidates)
        control = with_control(main, own_gold_beats_others(inputs, rs, candidates, control=True))
        main_twin = own_gold_beats_others(inputs, rs, candidates, reask=True)
        control_twin = own_gold_beats_others(inputs, rs, candidates, control=True, reask=True)
        entries += _pair(main, main_twin) + _pair(control, control_twin)
    entries += _pair(own_gold_beats_human(inputs, rs), own_gold_beats_human(inputs, rs, reask=True))
    entries += [
        human_share_in_gold(inputs, rs),
        same_family_overlap(inputs, rs),
        gold_lower_perplexity(inputs, rs, "ppl_passage"),
        gold_lower_perplexity(inputs, rs, "ppl_query_passage"),
    ]
    entries += _pair(known_lose_with_human(inputs, rs), known_lose_with_human(inputs, rs, reask=True))
    entries += [
        listwise_beats_pointwise(inputs, rs),
        pseudo_answer_improves_f1(inputs, rs),
        known_overselection(inputs, rs),
        known_rejection_lowers_recall(inputs, rs),
        attention_below_retriever(inputs, rs),
        listwise_pa_ranks_best(inputs, rs),
        likelihood_beats_listwise_pa_triviaqa(inputs, rs),
        selected_beats_topk(inputs, rs),
        selected_beats_reranked(inputs, rs),
    ]
    entries += _pair(selections_transfer_better_than_gold(inputs, rs), selections_transfer_better_than_gold(inputs, rs, reask=True))
    entries.append(llm_qrels_predict_rag(inputs, rs))
    return entries
