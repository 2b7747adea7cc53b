import polars as pl
import pytest

from llm_utility.metrics import dpr_tokens, has_answer, retrieval_quality


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
    run = pl.DataFrame(
        {
            "qid": ["q1", "q1", "q2", "q2", "q3"],
            "pid": ["p2", "p1", "p3", "p2", "p1"],
            "rank": [1, 2, 1, 2, 1],
            "score": [0.9, 0.8, 0.7, 0.6, 0.5],
        }
    )
    passages = pl.DataFrame(
        {"pid": ["p1", "p2", "p3"], "title": ["France", "Peru", "Chile"], "text": ["Capital Paris.", "Capital Lima.", "x"]}
    )
    got = retrieval_quality(queries, run, passages, k=1).sort("qid")
    assert got["answer_recall"].to_list() == [0.0, 0.0, None]
    assert got["human_recall"].to_list() == [0.0, 0.5, None]
    got2 = retrieval_quality(queries, run, passages, k=2).sort("qid")
    assert got2["answer_recall"].to_list() == [1.0, 1.0, None]
    assert got2["human_recall"].to_list() == [1.0, 0.5, None]
