"""Section 6.1 of the paper, utility-based selection: listwise against pointwise selection and the
pseudo-answer (Table 2), the known-rejection instruction and selection on known queries (Tables 2
and 8). F1 is the paper's: the harmonic mean of precision and recall averaged over the judged
queries with a non-empty gold set (C)."""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from ...metrics import set_metrics_per_query
from ..bootstrap import f1_of_means, f1_of_sums, mean_interval, ratio, statistic_interval
from ..judgments import gold_of, selected_of, unparsed_of
from .framework import (
    ALL,
    Claim,
    Finding,
    FindingInputs,
    Pool,
    Resampling,
    difference_entry,
    known_qids,
    make_cell,
    make_entry,
    not_run,
    paired,
)
from .parse_shares import judged_sides, nonempty_gold, with_parse_shares

SELECTION_PAIRS = [("listwise", "pointwise"), ("listwise_pa", "pointwise_pa")]
PSEUDO_ANSWER_PAIRS = [("pointwise_pa", "pointwise"), ("listwise_pa", "listwise")]
KNOWN_REJECTION = ("listwise_pa_reject", "listwise_pa")


def _precision_recall(table: pl.DataFrame, gold: pl.DataFrame) -> pl.DataFrame:
    """qid, precision, recall (x100) of a judgments table on the judged queries with a non-empty gold set."""
    qids, selected = selected_of(table)
    per_query = set_metrics_per_query(selected, gold_of(gold, qids))
    return per_query.filter(pl.col("n_gold") > 0).select("qid", pl.col("precision") * 100, pl.col("recall") * 100)


def _f1_difference(pa, ra, pb, rb, axis=-1):
    return f1_of_means(pa, ra, axis=axis) - f1_of_means(pb, rb, axis=axis)


def _pooled_f1_difference(pa, ra, pb, rb, count, axis=-1):
    return f1_of_sums(pa, ra, count, axis=axis) - f1_of_sums(pb, rb, count, axis=axis)


def _missing_methods(inputs: FindingInputs, method_pairs: list[tuple[str, str]]) -> str:
    """A note naming the method pairs of a comparison that no (dataset, LLM) has both of."""
    have = {m for _, _, m in inputs.judgments}
    missing = [
        f"{a} vs {b} ({', '.join(m for m in (a, b) if m not in have)} not in judgments.methods)"
        for a, b in method_pairs
        if not {a, b} <= have
    ]
    return f"not compared: {'; '.join(missing)}" if missing else ""


def _f1_comparison(
    claim: Claim, inputs: FindingInputs, rs: Resampling, method_pairs: list[tuple[str, str]]
) -> dict[str, Any]:
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
                joined = _precision_recall(a, gold).join(
                    _precision_recall(b, gold), on="qid", suffix="_b", maintain_order="left"
                )
                cols = [joined[c].to_numpy() for c in ("precision", "recall", "precision_b", "recall_b")]
                effect = statistic_interval(cols, _f1_difference, **rs.kwargs())
                cells.append(make_cell({"dataset": dataset, "llm": llm, "pair": f"{first} vs {second}"}, effect, claim))
                pool.add(dataset, joined.with_columns(count=pl.lit(1.0)))
    pairs_text = " or ".join(f"{a}/{b}" for a, b in method_pairs)
    if not cells:
        return not_run(
            claim, f"needs both methods of a pair in judgments.methods ({pairs_text}) and gold sets (C)", inputs
        )
    entry = make_entry(claim, cells, pool, rs, note=_missing_methods(inputs, method_pairs), inputs=inputs)

    def sides(cell):
        qids = nonempty_gold(inputs, cell["dataset"], cell["llm"])
        return judged_sides(inputs, cell, [("judgments", cell["llm"], m) for m in cell["pair"].split(" vs ")], qids)

    return with_parse_shares(entry, sides)


LISTWISE_BEATS_POINTWISE = Claim(
    id="listwise_beats_pointwise",
    claim="Listwise utility selection has a higher F1 than pointwise selection",
    source="Table 2 (tables/table2_selection)",
    unit="F1 (%), listwise minus pointwise (F1 of averaged P and R, queries resampled)",
    scope=ALL,
)


def listwise_beats_pointwise(inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    """Listwise selection has a higher F1 than pointwise (with and without the pseudo-answer), F1 being
    the paper's harmonic mean of averaged precision and recall over queries with a non-empty gold set
    (C); the F1 difference is recomputed on queries resampled (each carries both methods' P and R)."""
    return _listwise_beats_pointwise(LISTWISE_BEATS_POINTWISE, inputs, rs)


def _listwise_beats_pointwise(claim: Claim, inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    return _f1_comparison(claim, inputs, rs, SELECTION_PAIRS)


PSEUDO_ANSWER_IMPROVES_F1 = Claim(
    id="pseudo_answer_improves_f1",
    claim="Incorporating the pseudo-answer during utility judgments improves F1",
    source="Table 2 (tables/table2_selection)",
    unit="F1 (%), with minus without the pseudo-answer (F1 of averaged P and R, queries resampled)",
    scope=ALL,
)


def pseudo_answer_improves_f1(inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    """Selection with the pseudo-answer has a higher F1 than without it (pointwise and listwise)."""
    return _pseudo_answer_improves_f1(PSEUDO_ANSWER_IMPROVES_F1, inputs, rs)


def _pseudo_answer_improves_f1(claim: Claim, inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    return _f1_comparison(claim, inputs, rs, PSEUDO_ANSWER_PAIRS)


KNOWN_REJECTION_LOWERS_RECALL = Claim(
    id="known_rejection_lowers_recall",
    claim="The known-rejection instruction lowers the recall of listwise selection with the pseudo-answer",
    source="Table 8 (tables/table8_known_rejection)",
    unit="recall (%), with minus without the known-rejection instruction, paired per query (non-empty gold C)",
    expected=-1,
    scope=ALL,
)


def known_rejection_lowers_recall(inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    """The known-rejection instruction lowers recall: listwise selection with the pseudo-answer, with
    minus without the instruction, per-query recall on the judged queries with a non-empty gold set C
    (an output that did not parse selects nothing: recall 0)."""
    return _known_rejection_lowers_recall(KNOWN_REJECTION_LOWERS_RECALL, inputs, rs)


def _known_rejection_lowers_recall(claim: Claim, inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
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
    entry = difference_entry(
        claim, pairs, rs, f"needs {with_it} and {without} in judgments.methods and gold sets (C)", inputs
    )
    return with_parse_shares(
        entry,
        lambda cell: judged_sides(
            inputs,
            cell,
            [("judgments", cell["llm"], m) for m in (with_it, without)],
            nonempty_gold(inputs, cell["dataset"], cell["llm"]),
        ),
    )


KNOWN_OVERSELECTION = Claim(
    id="known_overselection",
    claim="LLMs fail to reject all passages on known queries: most judged known queries get passages selected",
    source="Table 2 (Acc on empty gold) and Table 8 (tables/table2_selection, table8_known_rejection)",
    unit="% of judged known queries where the method did not reject all passages (selected one or more, or its "
    "output did not parse)",
    null=50.0,
    scope=ALL,
)


def known_overselection(inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    """On its known queries (nothing can help, the gold set is empty) an LLM still selects passages:
    the share of judged known queries where a method did not reject all passages (selected at least
    one, or gave an output that did not parse, which is never a rejection), tested against 50%."""
    return _known_overselection(KNOWN_OVERSELECTION, inputs, rs)


def _known_overselection(claim: Claim, inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    cells = []
    pool = Pool(("s", "c"), ratio)
    for (dataset, llm, method), table in inputs.judgments.items():
        known = inputs.known.get((dataset, llm))
        if known is None:
            continue
        qids, selected = selected_of(table)
        unparsed = unparsed_of(table)
        known_q = known_qids(known, True)
        chosen = [q for q in qids if q in known_q]
        values = np.array([100.0 * (bool(selected[q]) or q in unparsed) for q in chosen], float)
        effect = mean_interval(values, **rs.kwargs())
        cells.append(make_cell({"dataset": dataset, "llm": llm, "method": method}, effect, claim))
        pool.add(
            dataset,
            pl.DataFrame({"qid": chosen, "s": values, "c": np.ones(len(chosen))}, schema_overrides={"qid": pl.String}),
        )
    if not cells:
        return not_run(claim, "no judgments (judgments.methods) with known flags configured", inputs)
    entry = make_entry(claim, cells, pool, rs, inputs=inputs)
    return with_parse_shares(
        entry,
        lambda cell: judged_sides(
            inputs,
            cell,
            [("judgments", cell["llm"], cell["method"])],
            known_qids(inputs.known[(cell["dataset"], cell["llm"])], True),
        ),
    )


SECTION = "Section 6.1: utility selection (Tables 2, 8)"
FINDINGS = [
    Finding(LISTWISE_BEATS_POINTWISE, _listwise_beats_pointwise),
    Finding(PSEUDO_ANSWER_IMPROVES_F1, _pseudo_answer_improves_f1),
    Finding(KNOWN_OVERSELECTION, _known_overselection),
    Finding(KNOWN_REJECTION_LOWERS_RECALL, _known_rejection_lowers_recall),
]
