"""Table 1, Figure 1 left, transfer and overlap matrices on a hand-computed toy dataset."""

from __future__ import annotations

import math

import polars as pl
import pytest

from llm_utility.report import analysis

QIDS = ["q1", "q2", "q3", "q4"]


def answers_frame(hits: list[bool], pids: list[list[str]] | None = None, qids: list[str] = QIDS) -> pl.DataFrame:
    pids = pids if pids is not None else [[] for _ in qids]
    return pl.DataFrame(
        {"qid": qids, "pids": pids, "output": ["x"] * len(qids), "correct": hits},
        schema={"qid": pl.String, "pids": pl.List(pl.String), "output": pl.String, "correct": pl.Boolean},
    )


def gold_frame(pairs: list[tuple[str, str]]) -> pl.DataFrame:
    return pl.DataFrame(pairs, schema={"qid": pl.String, "pid": pl.String}, orient="row")


T, F = True, False
QUERIES = {
    "d": pl.DataFrame(
        {
            "qid": QIDS,
            "question": ["?"] * 4,
            "answers": [["a"]] * 4,
            # 2 + 1 + 3 + 0 = 6 human passages: 1.5 per query over all four queries
            "human_pids": [["h1", "h2"], ["h3"], ["h4", "h5", "h6"], []],
            "task": ["qa"] * 4,
        }
    )
}
TOPK_PIDS = [["p1", "p2", "p3"], ["p1", "p2"], ["p4", "p5", "p6"], ["p7"]]

GOLD = {
    # a, C: 1 + 2 + 0 + 0 = 3 passages -> 0.75 per query (q3, q4 empty)
    ("d", "a", "C"): gold_frame([("q1", "p1"), ("q2", "p1"), ("q2", "p2")]),
    # a, U: 2 + 1 + 1 = 4 -> 1.0; q9 is not a query of the dataset and must be ignored
    ("d", "a", "U"): gold_frame([("q1", "p1"), ("q1", "h1"), ("q2", "h3"), ("q3", "p4"), ("q9", "p1")]),
    # b, C: 1 -> 0.25
    ("d", "b", "C"): gold_frame([("q4", "p7")]),
    # b, U: 1 + 2 = 3 -> 0.75
    ("d", "b", "U"): gold_frame([("q1", "h1"), ("q3", "h4"), ("q3", "p4")]),
}


def contexts(**hits: list[bool]) -> dict[str, pl.DataFrame]:
    return {name: answers_frame(h, TOPK_PIDS if name == "topk" else None) for name, h in hits.items()}


ANSWERS = {
    ("d", "a"): contexts(
        none=[T, F, F, F],  # 25
        topk=[T, T, F, F],  # 50
        union=[T, T, T, F],  # 75
        human=[T, F, T, F],  # 50
        gold_C_from_a=[T, T, F, T],  # 75 (its own)
        gold_U_from_a=[T, T, T, T],  # 100 (its own)
        gold_C_from_b=[F, F, F, F],  # 0
        gold_U_from_b=[T, F, F, F],  # 25
    ),
    ("d", "b"): contexts(
        none=[F, F, F, F],  # 0
        topk=[T, F, F, F],  # 25
        union=[T, F, F, F],  # 25
        human=[T, T, F, F],  # 50
        gold_C_from_b=[T, F, F, T],  # 50 (its own)
        gold_U_from_b=[T, T, T, F],  # 75 (its own)
        gold_C_from_a=[F, T, F, F],  # 25
        gold_U_from_a=[F, F, F, F],  # 0
    ),
}


def cell(df: pl.DataFrame, llm: str, column: str, field: str):
    return df.filter((pl.col("llm") == llm) & (pl.col("column") == column))[field].item()


def test_table1_values_and_sizes():
    t = analysis.table1(ANSWERS, GOLD, QUERIES)
    assert t.columns == ["block", "dataset", "llm", "column", "correct", "avg_size", "n_queries"]
    assert set(t["block"]) == {"answer"}
    assert t.height == 2 * 6
    assert t["column"].to_list()[:6] == ["None", "C", "U", "Human", "G(C)", "G(U)"]
    expected = {
        "a": {"None": 25, "C": 50, "U": 75, "Human": 50, "G(C)": 75, "G(U)": 100},
        "b": {"None": 0, "C": 25, "U": 25, "Human": 50, "G(C)": 50, "G(U)": 75},
    }
    for llm, row in expected.items():
        for column, value in row.items():
            assert cell(t, llm, column, "correct") == pytest.approx(value)
    sizes = {"a": {"Human": 1.5, "G(C)": 0.75, "G(U)": 1.0}, "b": {"Human": 1.5, "G(C)": 0.25, "G(U)": 0.75}}
    for llm, row in sizes.items():
        for column, value in row.items():
            assert cell(t, llm, column, "avg_size") == pytest.approx(value)
        for column in ("None", "C", "U"):
            assert cell(t, llm, column, "avg_size") is None
    assert set(t["n_queries"]) == {4}


def test_table1_reask_block_reads_the_reask_contexts():
    """The re-ask block: the same columns, read from the reask_* answers (hand-set hits), the same
    set sizes; the answer block unchanged."""
    reask_hits = {
        "none": [F, F, F, F],  # 0
        "topk": [T, F, F, F],  # 25
        "union": [T, T, F, F],  # 50
        "human": [T, T, T, F],  # 75
        "gold_C_from_a": [T, F, F, F],  # 25
        "gold_U_from_a": [T, T, F, F],  # 50
    }
    answers = {("d", "a"): {**ANSWERS[("d", "a")], **{f"reask_{c}": answers_frame(h) for c, h in reask_hits.items()}}}
    t = analysis.table1(answers, GOLD, QUERIES, blocks=("answer", "reask"))
    assert t["block"].to_list() == ["answer"] * 6 + ["reask"] * 6
    reask = t.filter(pl.col("block") == "reask")
    assert reask["correct"].to_list() == [0.0, 25.0, 50.0, 75.0, 25.0, 50.0]
    answer = t.filter(pl.col("block") == "answer")
    assert answer["correct"].to_list() == [25.0, 50.0, 75.0, 50.0, 75.0, 100.0]
    assert reask["avg_size"].to_list() == answer["avg_size"].to_list() == [None, None, None, 1.5, 0.75, 1.0]
    with pytest.raises(KeyError, match="reask_none"):
        analysis.table1(ANSWERS, GOLD, QUERIES, blocks=("reask",))
    with pytest.raises(ValueError, match="unknown Table 1 block"):
        analysis.table1(answers, GOLD, QUERIES, blocks=("again",))
    iv = analysis.table1_intervals(answers, 200, 1, blocks=("answer", "reask"))
    assert iv.filter(pl.col("block") == "reask").height == 6
    # All 4 queries wrong: the interval is [0, 0] whatever the resamples.
    assert iv.filter((pl.col("block") == "reask") & (pl.col("column") == "None")).select("lo", "hi").row(0) == (
        0.0,
        0.0,
    )


def test_table1_rejects_inconsistent_answers():
    broken = {("d", "a"): {**ANSWERS[("d", "a")], "union": answers_frame([T, T], qids=["q1", "q1"])}}
    with pytest.raises(ValueError, match="one row per query"):
        analysis.table1(broken, GOLD, QUERIES)
    partial = {("d", "a"): {**ANSWERS[("d", "a")], "union": answers_frame([T, T], qids=["q1", "q2"])}}
    with pytest.raises(ValueError, match="differ"):
        analysis.table1(partial, GOLD, QUERIES)
    missing = {("d", "a"): {k: v for k, v in ANSWERS[("d", "a")].items() if k != "human"}}
    with pytest.raises(KeyError, match="human"):
        analysis.table1(missing, GOLD, QUERIES)


def test_topk_gain():
    g = analysis.topk_gain(ANSWERS)
    assert g.columns == ["dataset", "llm", "none", "topk", "gain", "k"]
    assert g.rows() == [("d", "a", 25.0, 50.0, 25.0, 3), ("d", "b", 0.0, 25.0, 25.0, 3)]


def test_transfer_matrix_orientation():
    m = analysis.transfer_matrix(ANSWERS, ["a", "b"], "d", "U")
    assert m.columns == ["gold_from", "a", "b"]
    assert m["gold_from"].to_list() == ["a", "b", "Human"]
    # Column = answering LLM, row = whose gold set.
    assert m["a"].to_list() == [100.0, 25.0, 50.0]  # a's own, a with b's gold, a with human
    assert m["b"].to_list() == [0.0, 75.0, 50.0]  # b with a's gold, b's own, b with human
    c = analysis.transfer_matrix(ANSWERS, ["a", "b"], "d", "C")
    assert c["a"].to_list() == [75.0, 0.0, 50.0]
    assert c["b"].to_list() == [25.0, 50.0, 50.0]
    with pytest.raises(ValueError):
        analysis.transfer_matrix(ANSWERS, ["a", "b"], "d", "X")


def test_gold_overlap_symmetric_with_sizes_on_diagonal():
    m = analysis.gold_overlap(GOLD, QUERIES, ["a", "b"], "d")
    assert m.columns == ["set", "a", "b", "Human"]
    assert m["set"].to_list() == ["a", "b", "Human"]
    values = m.select("a", "b", "Human").to_numpy()
    # a∩b: q1 {h1} + q3 {p4} = 2; a∩H: q1 {h1} + q2 {h3} = 2; b∩H: q1 {h1} + q3 {h4} = 2; over 4 queries.
    expected = [[1.0, 0.5, 0.5], [0.5, 0.75, 0.5], [0.5, 0.5, 1.5]]
    assert values.tolist() == expected
    assert (values == values.T).all()
    # The diagonal is Table 1's average set size.
    t = analysis.table1(ANSWERS, GOLD, QUERIES)
    assert values[0, 0] == pytest.approx(cell(t, "a", "G(U)", "avg_size"))
    assert values[2, 2] == pytest.approx(cell(t, "a", "Human", "avg_size"))
    c = analysis.gold_overlap(GOLD, QUERIES, ["a", "b"], "d", candidates="C")
    assert c.select("a", "b").to_numpy().tolist() == [[0.75, 0.0], [0.0, 0.25], [0.0, 0.0]]


def test_matrices_long():
    m = analysis.transfer_matrix(ANSWERS, ["a", "b"], "d", "U")
    long = analysis.matrices_long({"d": m}, "correct")
    assert long.columns == ["dataset", "row", "column", "correct"]
    assert long.height == 6
    assert long.filter((pl.col("row") == "b") & (pl.col("column") == "a"))["correct"].item() == 25.0


def test_empty_dataset_gives_nan_not_error():
    assert math.isnan(analysis.correct_pct(answers_frame([], qids=[])))
