"""Answer contexts, prompts and gold sets on small hand-made tables (no model)."""

from pathlib import Path

import polars as pl
import pytest

from llm_utility.method.answers import (
    Candidates,
    answer_contexts,
    candidates_table,
    context_requests,
    render_requests,
)
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


@pytest.fixture(scope="module")
def passages_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "passages.parquet"
    pl.DataFrame(
        [(p.pid, p.title, p.text) for p in PASSAGES.values()], schema=["pid", "title", "text"], orient="row"
    ).write_parquet(path)
    return str(path)


def candidates(queries, run, passages_file, top_k=2) -> Candidates:
    return Candidates.from_table(candidates_table(queries, run, passages_file, top_k))


def test_candidates_table_order_union_and_texts(passages_file):
    table = candidates_table(QUERIES, RUN, passages_file, top_k=2)
    assert table.select("qid", "pid", "rank", "in_C", "human").rows() == [
        ("q1", "p1", 1, True, False),
        ("q1", "p2", 2, True, False),
        ("q1", "h1", None, False, True),  # a human passage retrieved below top-k (or not at all)
        ("q2", "p1", 1, True, False),
        ("q2", "p2", 2, True, True),
    ]
    c = Candidates.from_table(table)
    assert c.C == {"q1": ["p1", "p2"], "q2": ["p1", "p2"]}
    assert c.U == {"q1": ["p1", "p2", "h1"], "q2": ["p1", "p2"]}  # human already retrieved: U == C
    assert c.human == {"q1": ["h1"], "q2": ["p2"]}
    assert c.passages["h1"] == PASSAGES["h1"]


def test_candidates_table_names_missing_passages(passages_file):
    bad = QUERIES.with_columns(pl.Series("human_pids", [["nope"], []]))
    with pytest.raises(KeyError, match="1 passage id.*nope"):
        candidates_table(bad, RUN, passages_file, top_k=2)


def test_context_requests(passages_file):
    c = candidates(QUERIES, RUN, passages_file)
    assert context_requests("none", c) == [("q1", ()), ("q2", ())]
    assert context_requests("single", c) == [
        ("q1", ("p1",)),
        ("q1", ("p2",)),
        ("q1", ("h1",)),
        ("q2", ("p1",)),
        ("q2", ("p2",)),
    ]
    gold = pl.DataFrame({"qid": ["q1", "q1"], "pid": ["h1", "p1"]})
    # Gold passages follow U's order whatever the table's order, so equal sets give equal prompts.
    assert context_requests("gold_U_from_other-llm", c, gold) == [("q1", ("p1", "h1")), ("q2", ())]
    # A selection keeps retrieval order; a query that selected nothing gets no passage.
    judged = pl.DataFrame({"qid": ["q1", "q1", "q2"], "pid": ["p2", "p1", "p1"], "selected": [True, True, False]})
    assert context_requests("selected_listwise_pa_from_x", c, judged) == [("q1", ("p1", "p2")), ("q2", ())]
    # Queries that were not judged (a demo judges the first N) are not answered.
    assert context_requests("selected_listwise_pa_from_x", c, judged.filter(pl.col("qid") == "q1")) == [
        ("q1", ("p1", "p2"))
    ]
    # A reranked context keeps the ranking's order and its first n.
    ranking = pl.DataFrame({"qid": ["q1", "q1", "q2", "q2"], "pid": ["p1", "p2", "p1", "p2"], "rank": [2, 1, 1, 2]})
    assert context_requests("reranked_likelihood_top1", c, ranking) == [("q1", ("p2",)), ("q2", ("p1",))]
    assert context_requests("reranked_likelihood_top5", c, ranking) == [("q1", ("p2", "p1")), ("q2", ("p1", "p2"))]
    with pytest.raises(ValueError, match="needs its gold table"):
        context_requests("gold_C_from_x", c)
    with pytest.raises(ValueError, match="unknown answer context"):
        context_requests("gold_X", c)


def test_reask_requests_reverse_the_passages(passages_file):
    c = candidates(QUERIES, RUN, passages_file)
    # U of q1 is p1, p2 (retrieved), h1 (human): the re-ask gets h1, p2, p1.
    assert context_requests("reask_union", c) == [("q1", ("h1", "p2", "p1")), ("q2", ("p2", "p1"))]
    assert context_requests("reask_topk", c) == [("q1", ("p2", "p1")), ("q2", ("p2", "p1"))]
    assert context_requests("reask_human", c) == [("q1", ("h1",)), ("q2", ("p2",))]
    assert context_requests("reask_none", c) == [("q1", ()), ("q2", ())]
    gold = pl.DataFrame({"qid": ["q1", "q1"], "pid": ["h1", "p1"]})
    assert context_requests("reask_gold_U_from_other-llm", c, gold) == [("q1", ("h1", "p1")), ("q2", ())]
    with pytest.raises(ValueError, match="needs its gold table"):
        context_requests("reask_gold_C_from_x", c)
    # Only the evaluation contexts are re-asked (not the single calls that define gold sets).
    with pytest.raises(ValueError, match="unknown re-ask context 'reask_single'"):
        context_requests("reask_single", c)


def test_reask_prompt_is_a_paraphrase_never_an_answer_call(passages_file):
    """No re-ask prompt equals any prompt of the answer wording: a re-asked one-passage gold set is
    not its single call, an empty one not the none call, a re-asked top-k not the top-k call."""
    c = candidates(QUERIES, RUN, passages_file)
    gold = pl.DataFrame({"qid": ["q1"], "pid": ["h1"]})
    answer = {
        ctx: context_requests(ctx, c, gold if ctx.startswith("gold") else None)
        for ctx in ("none", "single", "topk", "union", "human", "gold_U_from_x")
    }
    reask = {
        f"reask_{ctx}": context_requests(f"reask_{ctx}", c, gold if ctx.startswith("gold") else None)
        for ctx in ("none", "topk", "union", "human", "gold_U_from_x")
    }
    answer_texts = {t for *_, t in render_requests(answer, QUERIES, PASSAGES, PROMPTS, lambda t: t)}
    reask_rows = render_requests(reask, QUERIES, PASSAGES, PROMPTS, lambda t: t)
    assert reask_rows and not answer_texts & {t for *_, t in reask_rows}
    q1_union = next(t for ctx, qid, _, t in reask_rows if ctx == "reask_union" and qid == "q1")
    # Written out from config/prompts.yaml's reask.qa.with_passages, passages last-to-first.
    assert q1_union == (
        "Passages:\nLima Lima is a city in Peru.\nChile Santiago is the capital of Chile.\n"
        "Peru Lima is the capital of Peru.\n"
        "Using these passages or what you know, reply to the question below in a word or a short phrase.\n"
        "Question: What is the capital of Peru?\nShort reply:"
    )
    q2_none = next(t for ctx, qid, _, t in reask_rows if ctx == "reask_none" and qid == "q2")
    assert "SUPPORTS or REFUTES" in q2_none and "The capital of Chile is Lima." in q2_none
    # The re-ask's answers record the passages in the order the model saw them.
    frames = answer_contexts(reask, QUERIES, PASSAGES, PROMPTS, lambda t: t, _fake_llm)
    assert frames["reask_union"]["pids"].to_list() == [["h1", "p2", "p1"], ["p2", "p1"]]
    assert frames["reask_topk"]["correct"].to_list() == [True, False]


def test_demo_prompts_override_the_claims_reask_too():
    demo = load_prompts([Path(__file__).parents[1] / "config" / name for name in ("prompts.yaml", "prompts-demo.yaml")])
    assert "true or false" in demo["reask"]["fact"]["with_passages"]
    assert demo["reask"]["qa"] == PROMPTS["reask"]["qa"]
    for task in ("qa", "fact"):
        for form in ("no_passages", "with_passages"):
            assert demo["reask"][task][form] != demo["answer"][task][form]
    with pytest.raises(ValueError, match="unknown answer wording"):
        answer_prompt(PROMPTS, "qa", "q", [], wording="rephrase")


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
    bad.write_text("passage: '{title} {text}'\npassage_separator: ' '\nanswer: {qa: {}}\n")
    with pytest.raises(ValueError, match="missing prompt 'answer.qa.no_passages'"):
        load_prompts(bad)


def _fake_llm(prompts):
    """Answers 'Lima' only when the Peru passage is in the prompt; always 'SUPPORTS' for claims."""
    return ["SUPPORTS" if "claim" in p else ("Lima" if "Lima is the capital" in p else "Cusco") for p in prompts]


def test_answer_contexts_one_generation_call(passages_file):
    c = candidates(QUERIES, RUN, passages_file)
    calls = []

    def generate(texts):
        calls.append(texts)
        return _fake_llm(texts)

    requests = {ctx: context_requests(ctx, c) for ctx in ("none", "single", "topk", "union", "human")}
    frames = answer_contexts(requests, QUERIES, PASSAGES, PROMPTS, lambda t: t, generate)
    assert len(calls) == 1  # every context in one call to the store
    assert frames["single"].height == 5
    assert frames["none"]["correct"].to_list() == [False, False]
    # q2 is a claim whose gold verdict is REFUTES; the fake model says SUPPORTS.
    assert frames["topk"]["correct"].to_list() == [True, False]
    assert frames["single"].filter(pl.col("qid") == "q1")["correct"].to_list() == [True, False, False]
    assert frames["union"]["pids"].to_list() == [["p1", "p2", "h1"], ["p1", "p2"]]
    assert frames["human"].schema["pids"] == pl.List(pl.String)


def test_claims_scored_by_verdict(passages_file):
    """An echo of the instruction states both verdicts: wrong for either gold label."""
    c = candidates(QUERIES, RUN, passages_file)
    requests = {"none": context_requests("none", c)}
    for output, correct in [("SUPPORTS or REFUTES", False), ("REFUTES.", True), ("No.", False)]:
        frames = answer_contexts(requests, QUERIES, PASSAGES, PROMPTS, lambda t: t, lambda ps: [output] * len(ps))
        assert frames["none"]["correct"].to_list()[1] is correct
    frames = answer_contexts(
        requests, QUERIES, PASSAGES, PROMPTS, lambda t: t, lambda ps: ["No."] * len(ps), synonyms={"REFUTES": ["no"]}
    )
    assert frames["none"]["correct"].to_list() == [False, True]


def test_gold_sets_eq1_and_known(passages_file):
    none = pl.DataFrame(
        {"qid": ["q1", "q2", "q3"], "pids": [[], [], []], "output": ["", "", ""], "correct": [False, False, True]}
    )
    single = pl.DataFrame(
        {
            "qid": ["q1", "q1", "q1", "q2", "q3"],
            "pids": [["p1"], ["p2"], ["h1"], ["p1"], ["p1"]],
            "output": [""] * 5,
            "correct": [True, False, True, False, True],
        }
    )
    q = pl.concat([QUERIES, QUERIES.head(1).with_columns(pl.lit("q3").alias("qid"))])
    run = pl.concat([RUN, RUN.filter(pl.col("qid") == "q1").with_columns(pl.lit("q3").alias("qid"))])
    c = candidates(q, run, passages_file)
    gc = gold_sets(none, single, c, "C")
    gu = gold_sets(none, single, c, "U")
    assert gc.rows() == [("q1", "p1")]  # h1 helps but is not in C
    assert gu.rows() == [("q1", "p1"), ("q1", "h1")]
    # q3 is known: the passage that also gives the right answer is not gold (no gain over none).
    assert "q3" not in gu["qid"].to_list()
    assert known_flags(none).rows() == [("q1", False), ("q2", False), ("q3", True)]
