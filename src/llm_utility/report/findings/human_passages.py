"""Section 4 of the paper, "Are the human-annotated passages optimal for LLMs in RAG?": Table 1's
hierarchy of passage sets (4.1), and the transfer of gold sets across LLMs with its control on the
queries unknown to both LLMs, and each LLM's own gold set against the human passages (4.2,
Figures 1-2 and 8).

Gold sets are selected on the very calls that these comparisons then evaluate (``REPLAY_ONE``,
``REPLAY_KNOWN``), so the findings that compare a gold set are partly built in and have a re-ask twin.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from ..analysis import TABLE1_CONTEXTS
from .framework import (
    REPLAY_KNOWN,
    REPLAY_ONE,
    SINGLE_HOP,
    Claim,
    Finding,
    FindingInputs,
    Resampling,
    correct_values,
    difference_entry,
    known_qids,
    not_run,
    paired,
)

# --- 4.1, Table 1: the hierarchy, pair by pair ----------------------------------------------------

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
_SLUG = {"G(U)": "gu", "G(C)": "gc", "Human": "human", "U": "u", "C": "c", "None": "none"}


def table1_claim(better: str, worse: str) -> Claim:
    text = f"{better} answers more queries correctly than {worse} (Table 1: G(U) > G(C) > Human >= U > C > None)"
    if (better, worse) == ("Human", "U"):
        text = (
            "Human passages answer at least as many queries as U (Table 1: Human >= U; holds means strictly more, "
            "inconclusive does not contradict it)"
        )
    construction, reason = _TABLE1_CONSTRUCTION.get((better, worse), ("can_fail", ""))
    return Claim(
        id=f"table1_{_SLUG[better]}_over_{_SLUG[worse]}",
        claim=text,
        source="Table 1 (tables/table1_rag)",
        unit=f"correct answers (%), {better} minus {worse}, paired per query",
        construction=construction,
        construction_reason=reason,
        scope=SINGLE_HOP,
        reask_twin=construction != "can_fail",
    )


def _table1_entry(claim: Claim, inputs: FindingInputs, rs: Resampling, better: str, worse: str) -> dict[str, Any]:
    pairs = []
    for dataset in inputs.datasets:
        for llm in inputs.llms:
            ctx_a, ctx_b = (TABLE1_CONTEXTS[c].format(llm=llm) for c in (better, worse))
            a, b = inputs.answers.get((dataset, llm, ctx_a)), inputs.answers.get((dataset, llm, ctx_b))
            if a is None or b is None:
                continue
            pairs.append(({"dataset": dataset, "llm": llm}, dataset, paired(correct_values(a), correct_values(b))))
    return difference_entry(claim, pairs, rs, f"no answers with both {better} and {worse} passages configured", inputs)


def table1_pair(inputs: FindingInputs, rs: Resampling, better: str, worse: str) -> dict[str, Any]:
    """One adjacent pair of Table 1's hierarchy: ``better`` minus ``worse``, paired per query."""
    return _table1_entry(table1_claim(better, worse), inputs, rs, better, worse)


def table1_hierarchy(inputs: FindingInputs, rs: Resampling) -> list[dict[str, Any]]:
    """Table 1's hierarchy G(U) > G(C) > Human >= U > C > None, one entry per adjacent pair."""
    return [table1_pair(inputs, rs, better, worse) for better, worse in TABLE1_PAIRS]


# --- 4.2: own gold set vs other LLMs' gold sets and vs Human ------------------------------------------

_FIGURE_OF = {
    "U": "Figure 2 (figures/fig2_transfer_U; Figure 1 right for one dataset)",
    "C": "Figure 8 (figures/fig8_transfer_C)",
}


def transfer_claim(candidates: str, control: bool = False) -> Claim:
    if control:
        return Claim(
            id=f"own_gold_beats_others_{candidates}_unknown_both",
            claim=f"Gold sets ({candidates}) are not transferable, on the queries unknown to both LLMs of a pair "
            "(a control beyond the paper: on an LLM's known queries its empty gold set replays its own correct "
            "no-passage answer, which builds part of the own-gold advantage in)",
            source=f"tables/transfer_unknown_both_{candidates} (control of {_FIGURE_OF[candidates].split(' (')[0]})",
            unit="correct answers (%), own gold set minus the other LLM's, paired per query",
            construction="partly_built_in",
            construction_reason=f"the known queries are left out, but {REPLAY_ONE}; the other LLM's gold set is "
            "answered afresh",
            scope=SINGLE_HOP,
            reask_twin=True,
        )
    return Claim(
        id=f"own_gold_beats_others_{candidates}",
        claim=f"Gold sets ({candidates}) are not transferable: each LLM answers best with its own gold set "
        "(transfer diagonal)",
        source=_FIGURE_OF[candidates],
        unit="correct answers (%), own gold set minus another LLM's, paired per query",
        construction="partly_built_in",
        construction_reason=f"{REPLAY_ONE}; {REPLAY_KNOWN}; the other LLM's gold set is answered afresh",
        scope=SINGLE_HOP,
        reask_twin=True,
    )


def _transfer_entry(
    claim: Claim, inputs: FindingInputs, rs: Resampling, candidates: str, control: bool
) -> dict[str, Any]:
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
    reason = f"no transfer answers (gold_{candidates}_from_<llm>) configured"
    return difference_entry(claim, pairs, rs, reason, inputs)


def own_gold_beats_others(
    inputs: FindingInputs, rs: Resampling, candidates: str, control: bool = False
) -> dict[str, Any]:
    """Each LLM with its own gold set vs with every other LLM's (cells: dataset, llm, gold_from); with
    ``control``, only on the queries unknown to both LLMs of the cell."""
    return _transfer_entry(transfer_claim(candidates, control), inputs, rs, candidates, control)


OWN_GOLD_BEATS_HUMAN = Claim(
    id="own_gold_beats_human",
    claim="Each LLM answers better with its own gold set (U) than with the human-annotated passages",
    source=_FIGURE_OF["U"],
    unit="correct answers (%), own gold set (U) minus Human, paired per query",
    construction="partly_built_in",
    construction_reason=f"{REPLAY_ONE}; {REPLAY_KNOWN}, so own gold minus Human is never negative on a known query",
    scope=SINGLE_HOP,
    reask_twin=True,
)


def _own_gold_human_entry(claim: Claim, inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    pairs = []
    for dataset in inputs.datasets:
        for llm in inputs.llms:
            own = inputs.answers.get((dataset, llm, f"gold_U_from_{llm}"))
            human = inputs.answers.get((dataset, llm, "human"))
            if own is not None and human is not None:
                pairs.append(
                    ({"dataset": dataset, "llm": llm}, dataset, paired(correct_values(own), correct_values(human)))
                )
    return difference_entry(
        claim, pairs, rs, "no answers with the own gold set (U) and the human passages configured", inputs
    )


def own_gold_beats_human(inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    return _own_gold_human_entry(OWN_GOLD_BEATS_HUMAN, inputs, rs)


def _transfer_findings(candidates: str) -> list[Finding]:
    main = transfer_claim(candidates)
    return [
        Finding(main, partial(_transfer_entry, candidates=candidates, control=False)),
        Finding(
            transfer_claim(candidates, control=True),
            partial(_transfer_entry, candidates=candidates, control=True),
            control_of=main.id,
        ),
    ]


SECTION = "Section 4: the human passages against LLM-specific gold sets (Table 1; Figures 1, 2, 8)"
FINDINGS = [
    *(Finding(table1_claim(b, w), partial(_table1_entry, better=b, worse=w)) for b, w in TABLE1_PAIRS),
    *_transfer_findings("U"),
    *_transfer_findings("C"),
    Finding(OWN_GOLD_BEATS_HUMAN, _own_gold_human_entry),
]
