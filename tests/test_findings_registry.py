"""The findings registry (``report.findings.registry``): every finding declared once, in the paper's
order, with its claim's scope, construction label and re-ask twin; ``all_findings`` derives the
entries, their twins and the controls from it. (tests/test_findings.py tests what each finding
computes; tests/test_findings_construction.py what the construction labels and twins promise.)"""

from __future__ import annotations

import dataclasses

import polars as pl
import pytest

from llm_utility.report import findings as F
from llm_utility.report.findings import registry

RS = F.Resampling(n_resamples=50, seed=1)

# The entries of findings.json, in their order (Sections 4, 5, 6.1, 6.2, RAG, beyond the paper).
IDS = [
    "table1_gu_over_gc", "table1_gu_over_gc_reask", "table1_gc_over_human", "table1_gc_over_human_reask",
    "table1_human_over_u", "table1_u_over_c", "table1_c_over_none",
    "own_gold_beats_others_U", "own_gold_beats_others_U_reask",
    "own_gold_beats_others_U_unknown_both", "own_gold_beats_others_U_unknown_both_reask",
    "own_gold_beats_others_C", "own_gold_beats_others_C_reask",
    "own_gold_beats_others_C_unknown_both", "own_gold_beats_others_C_unknown_both_reask",
    "own_gold_beats_human", "own_gold_beats_human_reask",
    "human_share_in_gold", "same_family_overlap", "gold_lower_perplexity", "gold_lower_perplexity_query",
    "known_lose_with_human", "known_lose_with_human_reask",
    "listwise_beats_pointwise", "pseudo_answer_improves_f1", "known_overselection", "known_rejection_lowers_recall",
    "attention_below_retriever", "listwise_pa_ranks_best", "likelihood_beats_listwise_pa_triviaqa",
    "selected_beats_topk", "selected_beats_reranked",
    "selections_transfer_better_than_gold", "selections_transfer_better_than_gold_reask",
    "llm_qrels_predict_rag",
]  # fmt: skip


def test_all_findings_lists_the_registry_in_the_papers_order_with_the_twins():
    entries = F.all_findings(F.FindingInputs(llms=["a"]), RS)
    assert [e["id"] for e in entries] == IDS
    assert [f.id for f in registry.FINDINGS] == [i for i in IDS if not i.endswith("_reask")]
    # Each entry names the part of the paper it tests, its twin the same one.
    sections = {e["id"]: e["section"] for e in entries}
    assert sections["table1_gu_over_gc_reask"] == sections["own_gold_beats_human"] == registry.SECTIONS[0][0]
    assert sections["selected_beats_topk"].startswith("Section 6.1: RAG")
    assert sections["llm_qrels_predict_rag"].startswith("Beyond the paper")
    assert list(dict.fromkeys(sections.values())) == [title for title, _ in registry.SECTIONS]


def test_each_finding_declares_its_claim_scope_construction_and_twin():
    inputs = F.FindingInputs(llms=["a"], k=3, figure9_method="listwise", rag_top=2)
    for finding in registry.FINDINGS:
        claim = finding.claim_for(inputs)
        assert claim.id == finding.id
        assert claim.scope in {"single_hop", "human_share", "all", "triviaqa"}, claim.id
        assert claim.construction in F.CONSTRUCTIONS, claim.id
        # A paper finding with part of its verdict built in has its re-ask twin; the qrels finding
        # (beyond the paper) reads the runs' answers, which the re-ask stage does not answer again.
        assert claim.reask_twin == (claim.construction != "can_fail" and claim.id != "llm_qrels_predict_rag"), claim.id
    # Wording from the configured settings: the cutoff, Figure 9's method, Table 7's top.
    claims = {f.id: f.claim_for(inputs) for f in registry.FINDINGS}
    assert "NDCG@3" in claims["listwise_pa_ranks_best"].unit and "(listwise)" in claims["selected_beats_topk"].claim
    assert "top 2" in claims["selected_beats_reranked"].claim


def _recording_finding(seen: list, **claim_fields) -> F.Finding:
    claim = F.Claim(id="toy", claim="toy claim", source="nowhere", unit="u", **claim_fields)

    def compute(claim: F.Claim, inputs: F.FindingInputs, rs: F.Resampling) -> dict:
        seen.append((claim, inputs))
        return F.not_run(claim, f"seen {sorted(c for _, _, c in inputs.answers)}", inputs)

    return F.Finding(claim, compute)


def test_a_finding_added_to_the_registry_is_evaluated_and_its_twin_reads_the_reask_answers(monkeypatch):
    frame = pl.DataFrame({"qid": ["q"], "correct": [True]})
    inputs = F.FindingInputs(llms=["a"], answers={("d", "a", "human"): frame, ("d", "a", "reask_human"): frame})
    seen: list = []
    toy = _recording_finding(seen, construction="partly_built_in", construction_reason="replays", reask_twin=True)
    monkeypatch.setattr(registry, "SECTIONS", [("Section 9", [toy])])
    main, twin = F.all_findings(inputs, RS)
    assert (main["id"], main["reask_twin"], twin["id"], twin["twin_of"]) == ("toy", "toy_reask", "toy_reask", "toy")
    assert main["section"] == twin["section"] == "Section 9"
    assert main["reason"] == "seen ['human', 'reask_human']" and twin["reason"] == "seen ['human']"
    assert seen[1][1].answers[("d", "a", "human")] is frame and twin["construction"] == "can_fail"
    # No re-ask answers: the twin is not run, and says why.
    seen.clear()
    main, twin = F.all_findings(F.FindingInputs(llms=["a"]), RS)
    assert twin["status"] == "not run" and "no re-ask answers" in twin["reason"] and len(seen) == 1
    # Without a declared twin, the finding stands alone.
    monkeypatch.setattr(registry, "SECTIONS", [("Section 9", [_recording_finding(seen)])])
    assert [e["id"] for e in F.all_findings(inputs, RS)] == ["toy"]


def test_a_control_is_linked_to_the_finding_it_controls(monkeypatch):
    def holds(claim, inputs, rs):
        return {**F.not_run(claim, "", inputs), "status": "run", "verdict": "holds"}

    def fails(claim, inputs, rs):
        return {**F.not_run(claim, "", inputs), "status": "run", "verdict": "inconclusive"}

    main = F.Claim(id="main", claim="c", source="s", unit="u")
    control = dataclasses.replace(main, id="main_control")
    monkeypatch.setattr(
        registry, "SECTIONS", [("Section 9", [F.Finding(main, holds), F.Finding(control, fails, control_of="main")])]
    )
    first, second = F.all_findings(F.FindingInputs(llms=["a"]), RS)
    assert "control_of" not in first and (second["control_of"], second["survives"]) == ("main", False)


def test_a_finding_whose_claim_is_built_from_the_inputs_names_its_id():
    with pytest.raises(ValueError, match="needs its id"):
        F.Finding(lambda inputs: F.Claim(id="x", claim="c", source="s", unit="u"), lambda c, i, r: {})
