"""Set and ranking metrics of utility judgments, on hand-computed cases."""

import math

import pytest

from llm_utility.metrics import (
    ranking_metrics,
    ranking_metrics_per_query,
    set_metrics,
    set_metrics_per_query,
)

GOLD = {"q1": {"a", "b"}, "q2": {"c"}, "q3": set(), "q4": [], "q5": ["d"]}
SELECTED = {
    "q1": ["a", "x"],  # P 1/2, R 1/2, F1 1/2
    "q2": ["c", "y", "z"],  # P 1/3, R 1, F1 1/2
    "q3": [],  # empty gold, nothing selected: correct
    "q4": ["e", "f"],  # empty gold, two selected: wrong
    # q5 missing: selected nothing, P 0, R 0, F1 0
    "q6": ["z"],  # not in gold: ignored
}


def test_set_metrics_hand_computed():
    m = set_metrics(SELECTED, GOLD)
    assert m["precision"] == pytest.approx((1 / 2 + 1 / 3 + 0) / 3)  # 5/18
    assert m["recall"] == pytest.approx((1 / 2 + 1 + 0) / 3)  # 1/2
    # harmonic mean of the averages (the paper's convention), not the mean of per-query F1
    assert m["f1"] == pytest.approx(5 / 14)
    assert m["f1_per_query"] == pytest.approx(1 / 3)
    assert m["accuracy_empty"] == pytest.approx(0.5)
    assert (m["n_nonempty"], m["n_empty"]) == (3, 2)
    assert m["avg_selected_nonempty"] == pytest.approx(5 / 3)
    assert m["avg_selected_empty"] == pytest.approx(1.0)


def test_set_metrics_per_query():
    df = set_metrics_per_query(SELECTED, GOLD)
    assert df["qid"].to_list() == ["q1", "q2", "q3", "q4", "q5"]  # gold's queries, gold's order
    assert df["n_selected"].to_list() == [2, 3, 0, 2, 0]
    assert df["precision"].to_list()[:2] == pytest.approx([0.5, 1 / 3])
    assert df["precision"].to_list()[2:] == [None, None, 0.0]
    assert df["recall"].to_list() == [0.5, 1.0, None, None, 0.0]
    assert df["f1"].to_list() == [0.5, 0.5, None, None, 0.0]
    assert df["correct_empty"].to_list() == [None, None, 1.0, 0.0, None]


def test_set_metrics_duplicates_count_once():
    m = set_metrics({"q": ["a", "a"]}, {"q": ["a", "b"]})
    assert (m["precision"], m["recall"], m["avg_selected_nonempty"]) == (1.0, 0.5, 1.0)


def test_set_metrics_zero_queries_is_nan():
    only_empty = set_metrics({"q": []}, {"q": []})
    assert math.isnan(only_empty["precision"]) and math.isnan(only_empty["f1"])
    assert math.isnan(only_empty["f1_per_query"]) and math.isnan(only_empty["avg_selected_nonempty"])
    assert only_empty["accuracy_empty"] == 1.0 and only_empty["n_nonempty"] == 0
    only_nonempty = set_metrics({}, {"q": ["a"]})
    assert only_nonempty["precision"] == 0.0 and only_nonempty["f1"] == 0.0  # 0, not NaN: P = R = 0
    assert math.isnan(only_nonempty["accuracy_empty"]) and math.isnan(only_nonempty["avg_selected_empty"])
    nothing = set_metrics({}, {})
    assert (nothing["n_nonempty"], nothing["n_empty"]) == (0, 0)
    assert math.isnan(nothing["recall"]) and math.isnan(nothing["accuracy_empty"])


def test_ranking_metrics_hand_computed():
    # gold {a}, a at rank 2: NDCG@5 = 1/log2(3); Recall@5 = 1
    m = ranking_metrics({"q": ["b", "a", "c"]}, {"q": {"a"}})
    assert m["ndcg"] == pytest.approx(1 / math.log2(3))
    assert m["recall"] == 1.0
    # gold {a, c} at ranks 1 and 3: DCG = 1 + 1/log2(4), IDCG = 1 + 1/log2(3)
    m = ranking_metrics({"q": ["a", "b", "c"]}, {"q": {"a", "c"}})
    assert m["ndcg"] == pytest.approx(1.5 / (1 + 1 / math.log2(3)))
    # gold larger than k: the ideal is k relevant passages, recall is out of all gold
    six = list("abcdef")
    assert ranking_metrics({"q": six}, {"q": six}, k=5) == pytest.approx({"ndcg": 1.0, "recall": 5 / 6})
    # a gold passage below the cutoff counts nothing
    assert ranking_metrics({"q": ["b", "c", "d", "e", "f", "a"]}, {"q": {"a", "z"}}) == {"ndcg": 0.0, "recall": 0.0}


def test_ranking_metrics_keep_the_given_order():
    # trec_eval breaks score ties by descending doc id (c, b, a): the given order must win.
    assert ranking_metrics({"q": ["a", "b", "c"]}, {"q": {"a"}}, k=1) == {"ndcg": 1.0, "recall": 1.0}
    assert ranking_metrics({"q": ["c", "b", "a"]}, {"q": {"a"}}, k=1) == {"ndcg": 0.0, "recall": 0.0}
    # a repeated pid counts at its first place
    assert ranking_metrics({"q": ["b", "b", "a"]}, {"q": {"a"}})["ndcg"] == pytest.approx(1 / math.log2(3))


def test_ranking_metrics_per_query_and_mean():
    gold = {"q1": {"a"}, "q2": set(), "q3": {"x"}, "q4": {"c"}}
    rankings = {"q1": ["b", "a"], "q2": ["a"], "q4": ["c", "d"]}  # q3 missing: scores 0
    df = ranking_metrics_per_query(rankings, gold)
    assert df.columns == ["qid", "ndcg", "recall"]
    assert df["qid"].to_list() == ["q1", "q3", "q4"]  # non-empty gold only
    assert df["ndcg"].to_list() == pytest.approx([1 / math.log2(3), 0.0, 1.0])
    assert df["recall"].to_list() == [1.0, 0.0, 1.0]
    m = ranking_metrics(rankings, gold)
    assert m == pytest.approx({"ndcg": (1 / math.log2(3) + 1) / 3, "recall": 2 / 3})


def test_ranking_metrics_no_gold_is_nan():
    m = ranking_metrics({"q": ["a"]}, {"q": []})
    assert math.isnan(m["ndcg"]) and math.isnan(m["recall"])
    assert ranking_metrics_per_query({}, {}).height == 0
    with pytest.raises(ValueError, match="k >= 1"):
        ranking_metrics({"q": ["a"]}, {"q": ["a"]}, k=0)
