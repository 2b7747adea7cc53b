import polars as pl
import pytest

from llm_utility.metrics import dpr_tokens, has_answer, retrieval_quality, score_answer


@pytest.mark.parametrize(
    ("text", "answers", "expected"),
    [
        ("The capital is Paris.", ["paris"], True),  # case
        ("PARIS", ["Paris"], True),
        ("It starts here", ["art"], False),  # partial-token non-match
        ("state of the art", ["art"], True),
        ("New York City", ["New York"], True),  # multi-token answer, contiguous
        ("New big York", ["New York"], False),  # not contiguous
        ("Bogotá is the capital", ["Bogotá"], True),  # NFD on both sides
        ("Bogota\u0301 is the capital", ["Bogot\u00e1"], True),  # composed vs decomposed
        ("Bogota is the capital", ["Bogotá"], False),  # accents are not stripped (DPR)
        ("U.S.", ["U.S."], True),  # every punctuation char is its own token
        ("US dollar", ["U.S."], False),
        ("anything at all", [""], False),  # empty answer never matches
        ("anything at all", ["   "], False),
        ("a sentence. with dots!", ["."], False),  # punctuation-only answer never matches
        ("a sentence. with dots!", ["!", ".", ""], False),
        ("", ["paris"], False),
        ("Answer: 42", ["42", "forty-two"], True),  # any answer counts
        ("forty-two", ["forty - two"], True),  # '-' is a token either way
        ("the answer", [], False),
    ],
)
def test_has_answer(text, answers, expected):
    assert has_answer(text, answers) is expected


def test_tokens_are_dpr_like():
    assert dpr_tokens("Hello, World!") == ("hello", ",", "world", "!")
    assert dpr_tokens("e\u0301") == ("e\u0301",)  # a mark stays inside its word


def test_retrieval_quality():
    queries = pl.DataFrame(
        {
            "qid": ["q1", "q2", "q3"],
            "question": ["a", "b", "c"],
            "answers": [["Paris"], ["Lima"], ["SUPPORTS"]],
            "human_pids": [["p1"], ["p3", "p4"], []],
            "task": ["qa", "qa", "fact"],
        }
    )
    texts = {"p1": "France Capital Paris.", "p2": "Peru Capital Lima.", "p3": "Chile x"}
    top1 = {"q1": ["p2"], "q2": ["p3"], "q3": ["p1"]}
    got = retrieval_quality(queries, top1, texts).sort("qid")
    assert got["answer_recall"].to_list() == [0.0, 0.0, None]  # claims: labels never occur in passages
    assert got["human_recall"].to_list() == [0.0, 0.5, None]
    top2 = {"q1": ["p2", "p1"], "q2": ["p3", "p2"], "q3": ["p1"]}
    got2 = retrieval_quality(queries, top2, texts).sort("qid")
    assert got2["answer_recall"].to_list() == [1.0, 1.0, None]
    assert got2["human_recall"].to_list() == [1.0, 0.5, None]


@pytest.mark.parametrize(
    ("output", "gold", "synonyms", "expected"),
    [
        ("SUPPORTS", "SUPPORTS", None, True),
        ("supports.", "SUPPORTS", None, True),  # case-insensitive, punctuation around
        ("The claim is REFUTES", "REFUTES", None, True),
        ("SUPPORTS or REFUTES", "SUPPORTS", None, False),  # an echo of the instruction: both stated
        ("SUPPORTS or REFUTES", "REFUTES", None, False),
        ("REFUTES", "SUPPORTS", None, False),
        ("", "SUPPORTS", None, False),  # neither stated
        ("SUPPORTSX", "SUPPORTS", None, False),  # whole words only
        ("Yes.", "SUPPORTS", None, False),  # synonyms are off unless configured
        ("Yes.", "SUPPORTS", {"SUPPORTS": ["yes", "true"], "REFUTES": ["no", "false"]}, True),
        ("No, that is false", "REFUTES", {"SUPPORTS": ["yes"], "REFUTES": ["no", "false"]}, True),
        ("yes and no", "SUPPORTS", {"SUPPORTS": ["yes"], "REFUTES": ["no"]}, False),
        ("It is not true", "REFUTES", {"SUPPORTS": ["true"], "REFUTES": ["not true"]}, True),  # longest match wins
        ("True, not true", "REFUTES", {"SUPPORTS": ["true"], "REFUTES": ["not true"]}, False),  # both stated
    ],
)
def test_score_answer_fact_verdicts(output, gold, synonyms, expected):
    assert score_answer(output, [gold], "fact", synonyms) is expected


def test_score_answer_qa_is_has_answer_and_tasks_are_checked():
    assert score_answer("It is Paris.", ["Paris"], "qa") is True
    assert score_answer("SUPPORTS", ["SUPPORTS"], "qa") is True  # qa never reads verdicts
    with pytest.raises(ValueError, match="unknown task"):
        score_answer("x", ["x"], "chat")
    with pytest.raises(ValueError, match="fact answers must be among"):
        score_answer("x", ["maybe"], "fact")
