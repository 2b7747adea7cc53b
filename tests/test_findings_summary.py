"""The findings summary (``report.findings.summary``): built from small fixed findings records, one
for each way a finding can read (established, holding only where built in, reversed, undecided, on
too few queries, on outputs that are not judgments, not run, fixed by construction), each sentence
checked as written."""

from __future__ import annotations

import re

import pytest

from llm_utility.report.findings.summary import numbers, short, summarize, summary_html, summary_markdown, summary_rst

S4 = "Section 4: gold sets"
S6 = "Section 6.1: selection"
S9 = "Beyond the paper"


def record(fid, section, verdict, effect=None, lo=None, hi=None, n=20, **fields):
    """A findings.json entry with what the summary reads; ``fields`` override or add."""
    return {
        "id": fid,
        "section": section,
        "claim": f"claim of {fid} (a gloss the summary leaves out)",
        "unit": "correct answers (%), A minus B, paired per query",
        "expected": "> 0",
        "construction": "can_fail",
        "status": "run",
        "reason": "",
        "overall": "pooled",
        "effect": effect,
        "lo": lo,
        "hi": hi,
        "n": n,
        "verdict": verdict,
        "note": "",
        **fields,
    }


def twin_of(main, verdict, effect, lo, hi, survives, **fields):
    return record(
        f"{main['id']}_reask", main["section"], verdict, effect, lo, hi, twin_of=main["id"], survives=survives, **fields
    )


# Section 4: one established (can fail), one established through its re-ask twin, one that holds only
# where it is built in (its twin does not hold), one whose control on the queries unknown to both
# LLMs does not hold, one undecided.
ESTABLISHED = record("human_over_u", S4, "holds", 40.0, 20.0, 65.0)
VIA_TWIN = record(
    "gu_over_gc", S4, "holds", 20.0, 10.0, 30.0, construction="partly_built_in", reask_twin="gu_over_gc_reask"
)
VIA_TWIN_TWIN = twin_of(VIA_TWIN, "holds", 15.0, 5.0, 25.0, True)
BUILT_IN = record("own_gold", S4, "holds", 10.0, 2.5, 17.5, construction="partly_built_in", reask_twin="own_gold_reask")
BUILT_IN_TWIN = twin_of(BUILT_IN, "inconclusive", 0.0, -15.0, 15.0, False)
CONTROLLED = record("transfer", S4, "holds", 12.0, 4.0, 20.0)
CONTROL = record("transfer_unknown_both", S4, "inconclusive", 3.0, -6.0, 12.0, control_of="transfer", survives=False)
UNDECIDED = record("c_over_none", S4, "inconclusive", 5.0, -5.0, 15.0)
# Section 6.1: reversed; too few queries (the demo's interval below zero on nine queries); mostly
# non-genuine outputs that "hold"; both; a band claim on too few queries; not run; by construction.
REVERSED = record("listwise_beats_pointwise", S6, "reversed", -12.0, -20.0, -4.0)
FEW = record("selected_beats_topk", S6, "too few queries", -27.8, -50.0, -11.1, n=9)
ECHOES = record("known_rejection", S6, "holds", 5.0, 1.0, 9.0, n=30, mostly_non_genuine=True)
FEW_ECHOES = record("ranks_best", S6, "too few queries", 0.0, 0.0, 0.0, n=6, mostly_non_genuine=True)
BAND = record("human_share", S6, "too few queries", 93.75, n=2, expected="within [33.3, 66.7]")
NOT_RUN = record(
    "same_family",
    S6,
    "not run",
    n=0,
    status="not run",
    reason="no two LLMs share a family (llms.<name>.family: {'a': 'x', 'b': 'y'})",
    overall=None,
)
FIXED = record(
    "known_lose", S6, "by construction", 0.0, 0.0, 0.0, construction="cannot_fail", reask_twin="known_lose_reask"
)
FIXED_TWIN = twin_of(FIXED, "too few queries", 0.0, -50.0, 50.0, False, n=2)
# Beyond the paper: an AUC difference, whose numbers need three decimals.
AUC = record("qrels_predict_rag", S9, "inconclusive", 0.0005, -0.174, 0.0976, n=43, construction="partly_built_in")

ENTRIES = [
    ESTABLISHED,
    VIA_TWIN,
    VIA_TWIN_TWIN,
    BUILT_IN,
    BUILT_IN_TWIN,
    CONTROLLED,
    CONTROL,
    UNDECIDED,
    REVERSED,
    FEW,
    ECHOES,
    FEW_ECHOES,
    BAND,
    NOT_RUN,
    FIXED,
    FIXED_TWIN,
    AUC,
]


def sentences(paragraph):
    return list(paragraph.sentences)


def test_the_opening_says_what_is_established_and_why_the_rest_is_not():
    opening, *_ = summarize(ENTRIES, min_queries=10, llms=["a", "b"])
    assert opening.title == ""
    assert sentences(opening) == [
        # 13 headline findings: twins and controls are read with the finding they belong to.
        "This run tests 13 findings with a and b on 2 to 43 queries each, and establishes 2: `human_over_u` and "
        "`gu_over_gc`.",
        "Of the others, 2 hold only where built in, 1 is reversed and 2 are undecided.",
        "6 cannot be judged here, some for two reasons: 3 rest on fewer than 10 queries (report.min_queries), "
        "2 rest mostly on outputs that are not judgments (unparsed, or the prompt echoed), 1 was not run and 1 has "
        "a sign fixed by construction.",
        "A finding is established when it holds and nothing built in decides it: it can fail, or its re-ask twin "
        "holds too (and so does its control on the queries unknown to both LLMs, where it has one).",
    ]


def test_each_part_of_the_paper_says_what_holds_what_is_reversed_and_what_cannot_be_judged():
    _, s4, s6, s9 = summarize(ENTRIES, min_queries=10, llms=["a", "b"])
    assert (s4.title, s6.title, s9.title) == (S4, S6, S9)
    assert sentences(s4) == [
        "Established: claim of human_over_u (`human_over_u`: 40.0 [20.0, 65.0], correct answers (%)).",
        # Partly built in, but its twin on the re-ask answers holds: established, with both numbers.
        "Established: claim of gu_over_gc (`gu_over_gc`: 20.0 [10.0, 30.0], correct answers (%); re-ask twin 15.0 "
        "[5.0, 25.0]).",
        "Holds but not established: claim of own_gold (`own_gold`: 10.0 [2.5, 17.5], correct answers (%)), but its "
        "re-ask twin reads 0.0 [-15.0, 15.0], inconclusive.",
        "Holds but not established: claim of transfer (`transfer`: 12.0 [4.0, 20.0], correct answers (%)), but on "
        "the queries unknown to both LLMs 3.0 [-6.0, 12.0], inconclusive.",
        "Undecided (the interval contains the tested value): `c_over_none` 5.0 [-5.0, 15.0].",
    ]
    assert sentences(s6) == [
        "Reversed, the run shows the opposite of: claim of listwise_beats_pointwise (`listwise_beats_pointwise`: "
        "-12.0 [-20.0, -4.0], correct answers (%)).",
        "Cannot be judged here.",
        # The demo's case: an interval entirely below 0 on nine queries is named, with its numbers.
        "Fewer than 10 queries: `selected_beats_topk` -27.8 [-50.0, -11.1] (n=9), `human_share` 93.8, no interval "
        "(n=2; expected within [33.3, 66.7]).",
        # "Holds" on outputs that are mostly not judgments is not a hold of utility judgment.
        "Outputs mostly not judgments: `known_rejection` 5.0 [1.0, 9.0].",
        "Fewer than 10 queries, outputs mostly not judgments: `ranks_best` 0.0 [0.0, 0.0] (n=6).",
        "Not run: `same_family` (no two LLMs share a family).",
        "A sign fixed by construction: `known_lose` 0.0 [0.0, 0.0], and its re-ask twin reads 0.0 [-50.0, 50.0], "
        "too few queries.",
    ]
    assert sentences(s9) == [
        "Undecided (the interval contains the tested value): `qrels_predict_rag` 0.001 [-0.174, 0.098]."
    ]


def test_nothing_established_is_said_plainly():
    opening, _ = summarize([UNDECIDED, {**FEW, "section": S4}], min_queries=10)
    assert sentences(opening)[0] == "This run tests 2 findings on 9 to 20 queries each, and establishes none of them."
    assert sentences(opening)[1] == "None is reversed and 1 is undecided."


def test_findings_out_of_scope_for_one_reason_share_it():
    reason = "no configured dataset stands for one of the paper's datasets of this claim (nq: report.claim_scope)"
    out = [record(i, S4, "not run", n=0, status="out of scope", reason=reason, overall=None) for i in ("x", "y")]
    opening, s4 = summarize(out, min_queries=10)
    assert sentences(opening)[2] == (
        "2 cannot be judged here: 2 are out of scope (no configured dataset stands for the claim's)."
    )
    assert sentences(s4) == [
        "Cannot be judged here.",
        "Out of scope (no configured dataset stands for one of the paper's datasets of this claim): `x`, `y`.",
    ]


def test_a_control_that_holds_only_where_built_in_keeps_its_finding_from_being_established():
    control = {**CONTROL, "verdict": "holds", "construction": "partly_built_in", "survives": True}
    control_twin = twin_of(control, "inconclusive", 1.0, -4.0, 6.0, False)
    opening, s4 = summarize([CONTROLLED, control, control_twin], min_queries=10)
    assert sentences(s4) == [
        "Holds but not established: claim of transfer (`transfer`: 12.0 [4.0, 20.0], correct answers (%)), but on "
        "the queries unknown to both LLMs 3.0 [-6.0, 12.0], holds, but that control's re-ask twin reads 1.0 "
        "[-4.0, 6.0], inconclusive."
    ]
    # With a sound control, both numbers are named.
    sound = {**CONTROL, "verdict": "holds", "survives": True}
    _, s4 = summarize([CONTROLLED, sound], min_queries=10)
    assert sentences(s4) == [
        "Established: claim of transfer (`transfer`: 12.0 [4.0, 20.0], correct answers (%); on the queries unknown "
        "to both LLMs 3.0 [-6.0, 12.0], holds)."
    ]


def test_numbers_and_short_claims():
    assert numbers(ESTABLISHED) == "40.0 [20.0, 65.0]" and numbers(AUC) == "0.001 [-0.174, 0.098]"
    assert numbers(BAND) == "93.8, no interval"
    cells = record("ppl", S4, "too few queries", overall="cells", cell_verdicts={"holds": 1, "too few queries": 2})
    assert numbers(cells) == "no pooled effect (cells: 1 holds, 2 too few queries)"
    assert short("G(U) beats G(C) (Table 1: G(U) > G(C))") == "G(U) beats G(C)"
    assert short("Gold sets (U) are not transferable") == "Gold sets (U) are not transferable"


def test_the_summary_renders_as_markdown_html_and_restructuredtext():
    from docutils.core import publish_parts

    paragraphs = summarize(ENTRIES, min_queries=10, llms=["a", "b"])
    md = summary_markdown(paragraphs)
    assert md.startswith("This run tests 13 findings") and f"\n\n**{S4}.** Established: claim of human_over_u" in md
    html = summary_html(paragraphs)
    assert "<code>human_over_u</code>" in html and "(llms.&lt;name&gt;" not in html
    assert html.count("<p>") == len(paragraphs) == 4
    rst = summary_rst(paragraphs)
    body = publish_parts(rst, writer="html", settings_overrides={"halt_level": 2, "report_level": 5})["body"]
    text = re.sub(r"<[^>]+>", "", body)
    # Underscores and asterisks stay literal; ids are literals; every sentence survives docutils.
    assert re.search(r'literal">(<span class="pre">)?selected_beats_topk<', body) and f"{S4}." in text
    for sentence in [s for p in paragraphs for s in p.sentences]:
        assert re.sub(r"`", "", sentence) in re.sub(r"\s+", " ", text), sentence


@pytest.mark.parametrize("entries", [[], [NOT_RUN]])
def test_a_summary_of_nothing_run_reads(entries):
    opening, *rest = summarize(entries, min_queries=10)
    assert sentences(opening)[0].endswith("establishes none of them.")
    assert len(rest) == len({e["section"] for e in entries})
