"""Answer contexts, prompts and gold sets on small hand-made tables (no model)."""

from pathlib import Path

import polars as pl
import pytest

from llm_utility.method.answers import answer_contexts, candidate_sets, context_requests
from llm_utility.method.gold import gold_sets, known_flags
from llm_utility.method.prompts import Passage, answer_prompt, load_prompts

PROMPTS = load_prompts(Path(__file__).parents[1] / "config" / "prompts.yaml")

QUERIES = pl.DataFrame(
    {
        "qid": ["q1", "q2"],
        "question": ["What is the capital of Peru?", "The capital of Chile is Lima."],
        "answers": [["Lima"], ["REFUTES"]],
        "human_pids": [["h1"], ["p2"]],
        "task": ["qa", "fact"],
    }
)
RUN = pl.DataFrame(
    {
        "qid": ["q1", "q1", "q1", "q2", "q2", "q2"],
        "pid": ["p2", "p1", "p3", "p1", "p2", "p3"],
        "rank": [2, 1, 3, 1, 2, 3],
        "score": [0.8, 0.9, 0.1, 0.9, 0.8, 0.1],
    },
    schema_overrides={"rank": pl.Int32, "score": pl.Float32},
)
PASSAGES = {
    p: Passage(p, t, x)
    for p, t, x in [
        ("p1", "Peru", "Lima is the capital of Peru."),
        ("p2", "Chile", "Santiago is the capital of Chile."),
        ("p3", "Peru economy", "Peru uses the sol."),
        ("h1", "Lima", "Lima is a city in Peru."),
    ]
}


def test_candidate_sets_order_and_union():
    c = candidate_sets(QUERIES, RUN, top_k=2)
    assert c.C == {"q1": ["p1", "p2"], "q2": ["p1", "p2"]}
    assert c.U == {"q1": ["p1", "p2", "h1"], "q2": ["p1", "p2"]}  # human already retrieved: U == C
    assert c.human == {"q1": ["h1"], "q2": ["p2"]}


def test_context_requests():
    c = candidate_sets(QUERIES, RUN, top_k=2)
    assert context_requests("none", c) == [("q1", ()), ("q2", ())]
    assert context_requests("single", c) == [("q1", ("p1",)), ("q1", ("p2",)), ("q1", ("h1",)), ("q2", ("p1",)), ("q2", ("p2",))]
    gold = pl.DataFrame({"qid": ["q1", "q1"], "pid": ["h1", "p1"]})
    # Gold passages follow U's order whatever the table's order, so equal sets give equal prompts.
    assert context_requests("gold_U_from_other-llm", c, gold) == [("q1", ("p1", "h1")), ("q2", ())]
    with pytest.raises(ValueError, match="needs a gold set"):
        context_requests("gold_C", c)
    with pytest.raises(ValueError, match="unknown answer context"):
        context_requests("gold_X", c)


def test_prompts_reuse_calls():
    """A one-passage gold set renders as the single call; an empty one as the no-passage call."""
    q = "What is the capital of Peru?"
    assert answer_prompt(PROMPTS, "qa", q, []) == PROMPTS["answer"]["qa"]["no_passages"].format(question=q)
    one = answer_prompt(PROMPTS, "qa", q, [PASSAGES["p1"]])
    assert "Peru Lima is the capital of Peru." in one and q in one
    two = answer_prompt(PROMPTS, "qa", q, [PASSAGES["p1"], PASSAGES["p2"]])
    assert "Peru Lima is the capital of Peru.\nChile Santiago" in two
    assert "SUPPORTS or REFUTES" in answer_prompt(PROMPTS, "fact", "x", [])
    with pytest.raises(ValueError, match="no answer prompt for task"):
        answer_prompt(PROMPTS, "chat", q, [])


def test_load_prompts_errors(tmp_path):
    bad = tmp_path / "prompts.yaml"
    bad.write_text("passage: '{title}'\n")
    with pytest.raises(ValueError, match=r"prompts.yaml: prompt 'passage' must contain the placeholder \{text\}"):
        load_prompts(bad)
    bad.write_text("passage: '{title} {text}'\nanswer: {qa: {}}\n")
    with pytest.raises(ValueError, match="missing prompt 'answer.qa.no_passages'"):
        load_prompts(bad)


def _fake_llm(prompts):
    """Answers 'Lima' only when the Peru passage is in the prompt; always 'SUPPORTS' for claims."""
    return ["SUPPORTS" if "claim" in p else ("Lima" if "Lima is the capital" in p else "Cusco") for p in prompts]


def test_answer_contexts_one_generation_call():
    c = candidate_sets(QUERIES, RUN, top_k=2)
    calls = []

    def generate(texts):
        calls.append(texts)
        return _fake_llm(texts)

    requests = {ctx: context_requests(ctx, c) for ctx in ("none", "single", "topk", "union", "human")}
    frames = answer_contexts(requests, QUERIES, PASSAGES, PROMPTS, lambda t: t, generate)
    assert len(calls) == 1  # every context in one call to the store
    assert frames["single"].height == 5
    assert frames["none"]["has_answer"].to_list() == [False, False]
    assert frames["topk"]["has_answer"].to_list() == [True, False]
    assert frames["single"].filter(pl.col("qid") == "q1")["has_answer"].to_list() == [True, False, False]
    assert frames["union"]["pids"].to_list() == [["p1", "p2", "h1"], ["p1", "p2"]]
    assert frames["human"].schema["pids"] == pl.List(pl.String)


def test_gold_sets_eq1_and_known():
    none = pl.DataFrame({"qid": ["q1", "q2", "q3"], "pids": [[], [], []], "output": ["", "", ""], "has_answer": [False, False, True]})
    single = pl.DataFrame(
        {
            "qid": ["q1", "q1", "q1", "q2", "q3"],
            "pids": [["p1"], ["p2"], ["h1"], ["p1"], ["p1"]],
            "output": [""] * 5,
            "has_answer": [True, False, True, False, True],
        }
    )
    q = pl.concat([QUERIES, QUERIES.head(1).with_columns(pl.lit("q3").alias("qid"))])
    run = pl.concat([RUN, RUN.filter(pl.col("qid") == "q1").with_columns(pl.lit("q3").alias("qid"))])
    c = candidate_sets(q, run, top_k=2)
    gc = gold_sets(none, single, c, "C")
    gu = gold_sets(none, single, c, "U")
    assert gc.rows() == [("q1", "p1")]  # h1 helps but is not in C
    assert gu.rows() == [("q1", "p1"), ("q1", "h1")]
    # q3 is known: the passage that also gives the right answer is not gold (no gain over none).
    assert "q3" not in gu["qid"].to_list()
    assert known_flags(none).rows() == [("q1", False), ("q2", False), ("q3", True)]
