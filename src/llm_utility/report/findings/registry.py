"""The registry of findings: every finding the workflow tests, in the order findings.json lists them
(the paper's order: Sections 4, 5 and 6, then the qrels at work, beyond the paper). A new finding is a
``Finding`` in its section's module, listed there; nothing else lists it."""

from __future__ import annotations

from typing import Any

from . import divergence, human_passages, qrels, rag, ranking, selection
from .framework import Finding, FindingInputs, Resampling, with_control, with_twin

FINDINGS: list[Finding] = [
    *human_passages.FINDINGS,  # Section 4: Table 1, transfer of gold sets (Figures 1, 2, 8)
    *divergence.FINDINGS,  # Section 5: Figures 3 and 4
    *selection.FINDINGS,  # Section 6.1: Tables 2 and 8
    *ranking.FINDINGS,  # Section 6.2: Table 4
    *rag.FINDINGS,  # Section 6.1, RAG performance: Tables 3, 7 and Figure 9
    qrels.FINDING,  # beyond the paper
]


def all_findings(inputs: FindingInputs, rs: Resampling) -> list[dict[str, Any]]:
    """Every finding of the registry on ``inputs``; a finding whose claim declares a re-ask twin is
    followed by the twin (``<id>_reask``), and a control is linked to the finding it controls."""
    entries: list[dict[str, Any]] = []
    evaluated: dict[str, dict[str, Any]] = {}
    for finding in FINDINGS:
        entry = finding.entry(inputs, rs)
        if finding.control_of is not None:
            entry = with_control(evaluated[finding.control_of], entry)
        evaluated[finding.id] = entry
        if finding.claim_for(inputs).reask_twin:
            entries += with_twin(entry, finding.twin_entry(inputs, rs))
        else:
            entries.append(entry)
    return entries
