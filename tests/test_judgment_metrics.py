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


# --- an output that does not parse is a failure, never a correct rejection -----------------------


def _judgments(rows):
    """A judgments table (method.judgments' schema) from (qid, pid, selected, parsed) rows."""
    import polars as pl

    return pl.DataFrame(
        [(q, p, s, ok, "raw") for q, p, s, ok in rows],
        schema={"qid": pl.String, "pid": pl.String, "selected": pl.Boolean, "parsed": pl.Boolean, "output": pl.String},
        orient="row",
    )


# Listwise, four judged queries over the candidates a, b, c:
#   e1: empty gold, output parsed, nothing selected        -> a correct rejection
#   e2: empty gold, output did not parse (nothing selected) -> a failure, not a rejection
#   n1: gold {a}, parsed, a and b selected                  -> P 1/2, R 1
#   n2: gold {b}, output did not parse                      -> P 0, R 0 (a miss)
LISTWISE = _judgments(
    [("e1", p, False, True) for p in "abc"]
    + [("e2", p, False, False) for p in "abc"]
    + [("n1", "a", True, True), ("n1", "b", True, True), ("n1", "c", False, True)]
    + [("n2", p, False, False) for p in "abc"]
)
GOLD_C = {"n1": ["a"], "n2": ["b"]}


def _gold_table(pairs):
    import polars as pl

    return pl.DataFrame(
        [(q, p) for q, ps in pairs.items() for p in ps], schema={"qid": pl.String, "pid": pl.String}, orient="row"
    )


def test_unparsed_outputs_are_failures_in_the_selection_table():
    from llm_utility.report.judgments import selection_scores

    [row] = selection_scores({("d", "m", "listwise"): LISTWISE}, {("d", "m"): _gold_table(GOLD_C)}).to_dicts()
    assert row["accuracy_empty"] == pytest.approx(50.0)  # e1 right, e2 (unparsed) wrong; it used to be 100
    assert row["precision"] == pytest.approx(100 * (1 / 2 + 0) / 2)
    assert row["recall"] == pytest.approx(100 * (1 + 0) / 2)
    p, r = 0.25, 0.5
    assert row["f1"] == pytest.approx(100 * 2 * p * r / (p + r))
    assert (row["unparsed"], row["unparsed_nonempty"], row["unparsed_empty"]) == pytest.approx((50.0, 50.0, 50.0))
    assert (row["avg_selected_empty"], row["avg_selected_nonempty"]) == pytest.approx((0.0, 1.0))


def test_a_pointwise_query_with_one_unparsed_output_is_no_rejection():
    """Pointwise outputs are per passage: the parsed ones keep their selections, the unparsed ones
    select nothing, and an empty-gold query with any unparsed output is not a correct rejection."""
    from llm_utility.report.judgments import selection_scores

    table = _judgments(
        [("e1", "a", False, True), ("e1", "b", False, False)]  # one "No", one output that did not parse
        + [("e2", "a", False, True), ("e2", "b", False, True)]  # two "No": a rejection
        + [("n1", "a", False, False), ("n1", "b", True, True)]  # gold a unparsed: a miss; b selected
    )
    [row] = selection_scores({("d", "m", "pointwise"): table}, {("d", "m"): _gold_table({"n1": ["a"]})}).to_dicts()
    assert row["accuracy_empty"] == pytest.approx(50.0)
    assert (row["precision"], row["recall"]) == (0.0, 0.0)
    assert (row["unparsed_empty"], row["unparsed_nonempty"]) == pytest.approx((50.0, 100.0))


def test_unparsed_rejections_in_the_intervals_too():
    from llm_utility.report.judgments import selection_intervals

    many = _judgments([(f"e{i}", "a", False, i % 2 == 0) for i in range(20)])  # half unparsed, all empty gold
    [row] = selection_intervals(
        {("d", "m", "listwise"): many}, {("d", "m"): _gold_table({})}, n_resamples=2000, seed=1
    ).to_dicts()
    assert row["accuracy_empty_lo"] < 50.0 < row["accuracy_empty_hi"] < 100.0


def test_table8_counts_by_known_and_by_gold():
    """The paper's Table 8 split (known: answered correctly with no passage) and the gold split are
    different partitions: an unknown query that no single passage helps has an empty gold set."""
    import polars as pl

    from llm_utility.report.judgments import selection_scores

    # k1 known (empty gold, 1 selected); u1 unknown with gold (2 selected); u2 unknown, empty gold (3 selected)
    table = _judgments(
        [("k1", p, p == "a", True) for p in "abc"]
        + [("u1", p, p in "ab", True) for p in "abc"]
        + [("u2", p, True, True) for p in "abc"]
    )
    known = pl.DataFrame({"qid": ["k1", "u1", "u2", "other"], "known": [True, False, False, True]})
    [row] = selection_scores(
        {("d", "m", "listwise_pa"): table}, {("d", "m"): _gold_table({"u1": ["a"]})}, {("d", "m"): known}
    ).to_dicts()
    assert (row["n_known"], row["n_unknown"], row["n_empty"], row["n_nonempty"]) == (1, 2, 2, 1)
    assert row["avg_selected_known"] == pytest.approx(1.0)
    assert row["avg_selected_unknown"] == pytest.approx((2 + 3) / 2)
    assert row["avg_selected_empty"] == pytest.approx((1 + 3) / 2)
    assert row["avg_selected_nonempty"] == pytest.approx(2.0)
    with pytest.raises(ValueError, match="no known flag"):
        selection_scores({("d", "m", "listwise_pa"): table}, {("d", "m"): _gold_table({})}, {("d", "m"): known.head(1)})


def test_known_overselection_counts_an_unparsed_output_as_no_rejection():
    import polars as pl

    from llm_utility.report.findings import FindingInputs, Resampling, known_overselection

    table = _judgments([("k1", "a", False, True), ("k2", "a", False, False), ("k3", "a", True, True)])
    known = pl.DataFrame({"qid": ["k1", "k2", "k3"], "known": [True, True, True]})
    inputs = FindingInputs(llms=["m"], judgments={("d", "m", "listwise_pa"): table}, known={("d", "m"): known})
    entry = known_overselection(inputs, Resampling(n_resamples=200, seed=0, confidence=0.95, min_queries=1))
    assert entry["cells"][0]["effect"] == pytest.approx(100 * 2 / 3)  # k2 (unparsed) and k3 did not reject


# --- genuine, unparsed and echo outputs: shares beside every judgment metric ----------------------


def _judgments_with_echo(rows):
    """A judgments table from (qid, pid, selected, parsed, echo) rows."""
    import polars as pl

    return pl.DataFrame(
        [(q, p, s, ok, e, "raw") for q, p, s, ok, e in rows],
        schema={
            "qid": pl.String,
            "pid": pl.String,
            "selected": pl.Boolean,
            "parsed": pl.Boolean,
            "echo": pl.Boolean,
            "output": pl.String,
        },
        orient="row",
    )


# Listwise over a, b; gold: n1 {a}, n2 {b}, n3 {a}; e1, e2, e3 empty.
#   n1 genuine (a), n2 echo, n3 unparsed, e1 genuine rejection, e2 echo, e3 genuine selection of b
ECHOES = _judgments_with_echo(
    [("n1", "a", True, True, False), ("n1", "b", False, True, False)]
    + [("n2", p, False, False, True) for p in "ab"]
    + [("n3", p, False, False, False) for p in "ab"]
    + [("e1", p, False, True, False) for p in "ab"]
    + [("e2", p, False, False, True) for p in "ab"]
    + [("e3", "a", False, True, False), ("e3", "b", True, True, False)]
)


def test_an_echo_is_a_failure_with_its_own_share():
    import polars as pl

    from llm_utility.report.judgments import selection_scores

    known = pl.DataFrame(
        {"qid": ["n1", "n2", "n3", "e1", "e2", "e3"], "known": [False, False, False, True, True, False]}
    )
    [row] = selection_scores(
        {("d", "m", "listwise"): ECHOES},
        {("d", "m"): _gold_table({"n1": ["a"], "n2": ["b"], "n3": ["a"]})},
        {("d", "m"): known},
    ).to_dicts()
    # the metrics count an echo as they count an unparsed output: selects nothing, no rejection
    assert (row["precision"], row["recall"]) == pytest.approx((100 / 3, 100 / 3))
    assert row["accuracy_empty"] == pytest.approx(100 / 3)  # e1 only: e2 echoed, e3 selected
    # each judged query is exactly one of genuine, unparsed, echo
    assert (row["genuine"], row["unparsed"], row["echo"]) == pytest.approx((50.0, 100 / 6, 100 / 3))
    assert (row["unparsed_nonempty"], row["echo_nonempty"]) == pytest.approx((100 / 3, 100 / 3))
    assert (row["unparsed_empty"], row["echo_empty"]) == pytest.approx((0.0, 100 / 3))
    assert (row["unparsed_known"], row["echo_known"], row["unparsed_unknown"], row["echo_unknown"]) == pytest.approx(
        (0.0, 50.0, 25.0, 25.0)
    )


def test_a_pointwise_query_is_an_echo_when_one_of_its_outputs_is():
    from llm_utility.report.judgments import outcomes_of

    table = _judgments_with_echo(
        [("q1", "a", True, True, False), ("q1", "b", False, False, True)]  # one echo: the query is an echo
        + [("q2", "a", False, False, False), ("q2", "b", False, False, True)]  # unparsed and echo: an echo
        + [("q3", "a", False, False, False), ("q3", "b", True, True, False)]  # one unparsed: unparsed
        + [("q4", "a", False, True, False), ("q4", "b", True, True, False)]
    )
    assert outcomes_of(table) == {"q1": "echo", "q2": "echo", "q3": "unparsed", "q4": "genuine"}
    # A table written before echoes were told apart has no echo column: its failures are unparsed.
    assert outcomes_of(LISTWISE) == {"e1": "genuine", "e2": "unparsed", "n1": "genuine", "n2": "unparsed"}


def test_table3_rows_carry_the_outcomes_of_their_selections():
    import polars as pl

    from llm_utility.report.judgments import known_split, with_selection_outcomes

    answers = {
        ("d", "m", "topk"): pl.DataFrame({"qid": ["n1", "n2", "e1"], "correct": [True, False, True]}),
        ("d", "m", "selected_listwise_from_m"): pl.DataFrame(
            {"qid": ["n1", "n2", "e1"], "correct": [True, False, False]}
        ),
    }
    known = {("d", "m"): pl.DataFrame({"qid": ["n1", "n2", "e1"], "known": [False, False, True]})}
    split = with_selection_outcomes(known_split(answers, known), answers, {("d", "m", "listwise"): ECHOES})
    shares = {s: (g, u, e) for s, g, u, e in split.select("source", "genuine", "unparsed", "echo").iter_rows()}
    assert shares["topk"] == (None, None, None)
    assert shares["selected_listwise_from_m"] == pytest.approx((200 / 3, 0.0, 100 / 3))  # n1, e1 genuine; n2 echo


def test_table7_rows_carry_the_outcomes_of_their_own_rankings():
    import polars as pl

    from llm_utility.report.judgments import known_split, with_selection_outcomes

    qids = ["n1", "n2", "e1"]
    answers = {
        ("d", "m", "topk"): pl.DataFrame({"qid": qids, "correct": [True, False, True]}),
        ("d", "m", "reranked_listwise_top2"): pl.DataFrame({"qid": qids, "correct": [True, True, False]}),
        ("d", "m", "reranked_likelihood_top2"): pl.DataFrame({"qid": qids, "correct": [False, True, False]}),
    }
    known = {("d", "m"): pl.DataFrame({"qid": qids, "known": [False, False, True]})}
    # The listwise ranking echoed on n2 (ECHOES' outcomes: n1, e1 genuine, n2 echo); the likelihood
    # ranking was never given: its row has no shares.
    split = with_selection_outcomes(known_split(answers, known), answers, {("d", "m", "listwise"): ECHOES})
    shares = {s: (g, u, e) for s, g, u, e in split.select("source", "genuine", "unparsed", "echo").iter_rows()}
    assert shares["reranked_listwise_top2"] == pytest.approx((200 / 3, 0.0, 100 / 3))
    assert shares["reranked_likelihood_top2"] == (None, None, None) and shares["topk"] == (None, None, None)
    # Another LLM's ranking is not this row's: keyed by the row's own LLM only.
    other = with_selection_outcomes(known_split(answers, known), answers, {("d", "x", "listwise"): ECHOES})
    assert other.filter(pl.col("source") == "reranked_listwise_top2")["genuine"].to_list() == [None]
