"""The registry of findings: every finding the workflow tests, in the order findings.json lists them
(the paper's order: Sections 4, 5 and 6, then the qrels at work, beyond the paper). A new finding is a
``Finding`` in its section's module, listed in its ``FINDINGS``; nothing else lists it. Each module's
``SECTION`` names the part of the paper it tests: every entry carries it (``section``), and the
findings summary is told in those parts."""

from __future__ import annotations

from typing import Any

from . import divergence, human_passages, qrels, rag, ranking, selection
from .framework import Finding, FindingInputs, Resampling, with_control, with_twin

# Section 4: Table 1, transfer of gold sets (Figures 1, 2, 8); Section 5: Figures 3 and 4; Section
# 6.1: Tables 2 and 8; Section 6.2: Table 4; Section 6.1, RAG performance: Tables 3, 7 and Figure 9;
# beyond the paper: the qrels at work.
SECTIONS: list[tuple[str, list[Finding]]] = [
    (module.SECTION, module.FINDINGS) for module in (human_passages, divergence, selection, ranking, rag, qrels)
]
FINDINGS: list[Finding] = [finding for _, findings in SECTIONS for finding in findings]


def _in_section(entry: dict[str, Any], section: str) -> dict[str, Any]:
    """``entry`` with its ``section`` right after its ``id`` (findings.json reads in that order)."""
    return {"id": entry["id"], "section": section, **entry}


def all_findings(inputs: FindingInputs, rs: Resampling) -> list[dict[str, Any]]:
    """Every finding of the registry on ``inputs``, each with its ``section``; a finding whose claim
    declares a re-ask twin is followed by the twin (``<id>_reask``), and a control is linked to the
    finding it controls."""
    entries: list[dict[str, Any]] = []
    evaluated: dict[str, dict[str, Any]] = {}
    for section, findings in SECTIONS:
        for finding in findings:
            entry = _in_section(finding.entry(inputs, rs), section)
            if finding.control_of is not None:
                entry = with_control(evaluated[finding.control_of], entry)
            evaluated[finding.id] = entry
            if finding.claim_for(inputs).reask_twin:
                entries += with_twin(entry, _in_section(finding.twin_entry(inputs, rs), section))
            else:
                entries.append(entry)
    return entries
