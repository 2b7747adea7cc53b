"""Findings, their intervals and verdicts, the transfer control, the cost table and the tables'
intervals, on small hand-made frames whose answers are known."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import polars as pl
import pytest

from llm_utility.report import findings as F
from llm_utility.report.bootstrap import (
    Effect,
    f1_of_means,
    f1_of_sums,
    ratio,
    ratio_interval,
    scaled,
    statistic_interval,
    verdict,
)
from llm_utility.report.cost import cost_table, read_benchmark, read_store_stats
from llm_utility.report.tables import grouped_blocks, interval_text, join_intervals, table1_blocks

RS = F.Resampling(n_resamples=500, seed=3)
N = 20
QIDS = [f"q{i}" for i in range(N)]
D = "d"


def answers_frame(correct_qids, qids=QIDS):
    return pl.DataFrame(
        {
            "qid": qids,
            "pids": [[]] * len(qids),
            "output": [""] * len(qids),
            "correct": [q in correct_qids for q in qids],
        }
    )


def first(n):
    return set(QIDS[:n])


def known_frame(known_qids):
    return pl.DataFrame({"qid": QIDS, "known": [q in known_qids for q in QIDS]})


def by_id(entries):
    return {e["id"]: e for e in entries}


# --- bootstrap on cases with a known answer ---------------------------------------------------------


def test_statistic_interval_identical_columns_is_inconclusive_around_zero():
    rng = np.random.default_rng(0)
    p, r = rng.uniform(0, 1, 30), rng.uniform(0, 1, 30)
    e = statistic_interval(
        (p, r, p.copy(), r.copy()),
        lambda a, b, c, d, axis=-1: f1_of_means(a, b, axis) - f1_of_means(c, d, axis),
        **RS.kwargs(),
    )
    assert e.effect == 0.0 and e.lo <= 0 <= e.hi and verdict(e) == "inconclusive"


def test_statistic_interval_always_better_holds():
    rng = np.random.default_rng(1)
    p, r = rng.uniform(0, 0.5, 30), rng.uniform(0, 0.5, 30)
    better = (p + 0.4, r + 0.4, p, r)
    e = statistic_interval(
        better, lambda a, b, c, d, axis=-1: f1_of_means(a, b, axis) - f1_of_means(c, d, axis), **RS.kwargs()
    )
    assert 0 < e.lo < e.effect < e.hi and e.method == "BCa" and verdict(e) == "holds"


def test_ratio_interval_pools_items_and_handles_degenerate_cases():
    # 3 of 4 items in query 1, 1 of 4 in query 2...: the pooled share is sum/sum, not a mean of shares.
    e = ratio_interval([3, 1, 2, 0, 4], [4, 4, 2, 1, 4], **RS.kwargs())
    assert e.effect == pytest.approx(10 / 15) and e.lo <= e.effect <= e.hi
    same = ratio_interval([1, 2, 3], [2, 4, 6], **RS.kwargs())
    assert (same.effect, same.lo, same.hi, same.method) == (0.5, 0.5, 0.5, "degenerate")  # every resample is 1/2
    one = ratio_interval([1], [2], **RS.kwargs())
    assert one.effect == 0.5 and math.isnan(one.lo) and "one query" in one.reason
    empty = statistic_interval(([0.0, 0.0], [0.0, 0.0]), ratio, **RS.kwargs())
    assert math.isnan(empty.effect) and "undefined" in empty.reason and verdict(empty) == "inconclusive"


def test_f1_of_sums_equals_f1_of_means_for_one_cell():
    p, r = np.array([1.0, 0.5, 0.0]), np.array([0.5, 0.5, 1.0])
    assert f1_of_sums(p, r, np.ones(3)) == pytest.approx(f1_of_means(p, r))
    assert f1_of_means(np.zeros(3), np.zeros(3)) == 0.0


def test_verdict_against_a_null_value_and_scaled_bounds():
    e = Effect(40.0, 30.0, 55.0, 10)
    assert verdict(scaled(e, 1.0, -100.0), expected_sign=-1) == "holds"  # share < 100
    assert verdict(scaled(e, 1.0, -50.0), expected_sign=+1) == "inconclusive"  # 50 inside [30, 55]
    assert verdict(scaled(e, 1.0, -20.0), expected_sign=-1) == "reversed"
    flipped = scaled(e, -1.0)
    assert (flipped.lo, flipped.hi) == (-55.0, -30.0)


# --- findings on hand-made frames ---------------------------------------------------------------------


def table1_inputs():
    """LLM a: G(U) right on all 20 queries, G(C) on 15, Human and U on 10, C on 5, None on none."""
    counts = {"gold_U_from_a": 20, "gold_C_from_a": 15, "human": 10, "union": 10, "topk": 5, "none": 0}
    answers = {(D, "a", ctx): answers_frame(first(n)) for ctx, n in counts.items()}
    return F.FindingInputs(llms=["a"], answers=answers)


def test_table1_hierarchy_pair_by_pair():
    found = by_id(F.table1_hierarchy(table1_inputs(), RS))
    assert list(found) == [
        "table1_gu_over_gc",
        "table1_gc_over_human",
        "table1_human_over_u",
        "table1_u_over_c",
        "table1_c_over_none",
    ]
    assert (
        found["table1_gu_over_gc"]["effect"] == pytest.approx(25.0) and found["table1_gu_over_gc"]["verdict"] == "holds"
    )
    assert found["table1_c_over_none"]["verdict"] == "holds"
    # Human == U on every query: the point interval [0, 0], which does not show Human > U.
    human_u = found["table1_human_over_u"]
    assert (human_u["effect"], human_u["lo"], human_u["hi"], human_u["verdict"]) == (0.0, 0.0, 0.0, "inconclusive")
    assert human_u["cells"][0] | {"note": ""} == {
        "dataset": D,
        "llm": "a",
        "effect": 0.0,
        "lo": 0.0,
        "hi": 0.0,
        "n": N,
        "interval": "degenerate",
        "verdict": "inconclusive",
        "note": "",
        "in_scope": True,
    }


def transfer_inputs():
    """Each LLM right on every query with its own gold set, and with the other's only on q10..q19,
    which are the queries unknown to both (a knows q0..q4, b knows q5..q9)."""
    late = set(QIDS[10:])
    answers = {}
    for llm, other in (("a", "b"), ("b", "a")):
        answers[(D, llm, f"gold_U_from_{llm}")] = answers_frame(set(QIDS))
        answers[(D, llm, f"gold_U_from_{other}")] = answers_frame(late)
        answers[(D, llm, "human")] = answers_frame(first(15))
    known = {(D, "a"): known_frame(first(5)), (D, "b"): known_frame(set(QIDS[5:10]))}
    return F.FindingInputs(llms=["a", "b"], answers=answers, known=known)


def test_own_gold_beats_others_and_the_unknown_both_control():
    inputs = transfer_inputs()
    main = F.own_gold_beats_others(inputs, RS, "U")
    assert main["verdict"] == "holds" and main["effect"] == pytest.approx(50.0)
    assert [(c["llm"], c["gold_from"]) for c in main["cells"]] == [("a", "b"), ("b", "a")]
    control = F.with_control(main, F.own_gold_beats_others(inputs, RS, "U", control=True))
    assert control["cells"][0]["n"] == 10  # q10..q19: unknown to both
    assert control["effect"] == 0.0 and control["verdict"] == "inconclusive"
    assert control["control_of"] == "own_gold_beats_others_U" and control["survives"] is False
    human = F.own_gold_beats_human(inputs, RS)
    assert human["effect"] == pytest.approx(25.0) and human["verdict"] == "holds"


def test_transfer_unknown_both_table():
    inputs = transfer_inputs()
    table = F.transfer_unknown_both(inputs.answers, inputs.known, ["a", "b"], D, "U")
    cell = table.filter((pl.col("gold_from") == "b") & (pl.col("llm") == "a")).row(0, named=True)
    assert (cell["correct"], cell["n_queries"], cell["correct_unknown_both"], cell["n_unknown_both"]) == (
        50.0,
        20,
        100.0,
        10,
    )
    human = table.filter((pl.col("gold_from") == "Human") & (pl.col("llm") == "a")).row(0, named=True)
    assert human["n_unknown_both"] == 15  # unknown to a only
    md = F.transfer_unknown_markdown(table)
    assert "unknown to both" in md and "100.0 (n=10)" in md


def test_human_share_and_same_family_overlap():
    human = [[f"h{i}a", f"h{i}b"] for i in range(N)]
    queries = {
        D: pl.DataFrame(
            {"qid": QIDS, "question": QIDS, "answers": [["x"]] * N, "human_pids": human, "task": ["qa"] * N}
        )
    }
    # a and b (family x) share two passages per query; c (family y) shares none with either.
    gold_rows = {
        "a": [(q, p) for i, q in enumerate(QIDS) for p in ((f"h{i}a", f"h{i}b") if i % 2 == 0 else ("s1", "s2"))],
        "b": [(q, p) for i, q in enumerate(QIDS) for p in ((f"h{i}a", f"h{i}b") if i % 2 == 0 else ("s1", "s2"))],
        "c": [(q, "c1") for q in QIDS],
    }
    gold = {(D, llm, "U"): pl.DataFrame(rows, schema=["qid", "pid"], orient="row") for llm, rows in gold_rows.items()}
    known = {(D, llm): known_frame(set()) for llm in gold_rows}
    inputs = F.FindingInputs(
        llms=["a", "b", "c"], gold=gold, queries=queries, known=known, families={"a": "x", "b": "x", "c": "y"}
    )
    share = F.human_share_in_gold(inputs, RS)
    assert share["expected"] == "within [33.3, 66.7]"
    a = share["cells"][0]
    # Even queries: both human passages in. 20 queries of 0% or 100% leave the interval wider than the band.
    assert (
        a["effect"] == pytest.approx(50.0) and a["lo"] < 100 / 3 < 200 / 3 < a["hi"] and a["verdict"] == "inconclusive"
    )
    assert (
        share["cells"][2]["effect"] == 0.0 and share["cells"][2]["verdict"] == "reversed"
    )  # c's gold set has no human passage
    family = F.same_family_overlap(inputs, RS)
    assert family["effect"] == pytest.approx(2.0) and family["verdict"] == "holds"
    assert family["cells"][0]["same_pairs"] == 1 and family["cells"][0]["cross_pairs"] == 2
    for families, reason in [
        ({}, "no LLM has a family"),
        ({"a": "x", "b": "y"}, "no two LLMs share a family"),
        ({"a": "x", "b": "x"}, "same one"),
    ]:
        entry = F.same_family_overlap(
            F.FindingInputs(llms=["a", "b", "c"], gold=gold, queries=queries, families=families), RS
        )
        assert entry["verdict"] == "not run" and reason in entry["reason"]


def test_an_about_claim_holds_inside_its_band_and_is_reversed_outside_it():
    claim = F.Claim(id="x", claim="about half", source="s", unit="%", band=(100 / 3, 200 / 3))
    assert claim.verdict_of(Effect(50.0, 40.0, 60.0, 30)) == "holds"
    assert claim.verdict_of(Effect(50.0, 30.0, 60.0, 30)) == "inconclusive"  # reaches below a third
    assert claim.verdict_of(Effect(90.0, 80.0, 95.0, 30)) == "reversed"
    assert claim.verdict_of(Effect(10.0, 5.0, 20.0, 30)) == "reversed"
    with pytest.raises(ValueError, match="needs its construction_reason"):
        F.Claim(id="y", claim="c", source="s", unit="u", construction="partly_built_in")
    with pytest.raises(ValueError, match="construction must be one of"):
        F.Claim(id="y", claim="c", source="s", unit="u", construction="maybe")


def test_human_share_leaves_the_known_queries_out():
    """A known query's gold set is empty by definition: counting it would pull the share down whatever
    the passages do. Every human passage of an unknown query is gold here, so the share is 100% (out
    of the band: reversed), although half the queries are known and have none in their gold set."""
    queries = {
        D: pl.DataFrame(
            {
                "qid": QIDS,
                "question": QIDS,
                "answers": [["x"]] * N,
                "human_pids": [[f"h{i}"] for i in range(N)],
                "task": ["qa"] * N,
            }
        )
    }
    gold = {(D, "a", "U"): pl.DataFrame({"qid": QIDS[10:], "pid": [f"h{i}" for i in range(10, N)]})}
    inputs = F.FindingInputs(llms=["a"], gold=gold, queries=queries, known={(D, "a"): known_frame(first(10))})
    share = F.human_share_in_gold(inputs, RS)
    cell = share["cells"][0]
    assert (cell["effect"], cell["n"], cell["known_left_out"]) == (100.0, 10, 10) and share["verdict"] == "reversed"
    assert F.human_share_in_gold(F.FindingInputs(llms=["a"], gold=gold, queries=queries), RS)["reason"].startswith(
        "no known flags"
    )


def test_gold_lower_perplexity_on_log_scale_paired_within_query_and_known_lose_with_human():
    rng = np.random.default_rng(5)
    rows = [(q, f"{q}g", True, 10 + rng.uniform(0, 2), 8 + rng.uniform(0, 2)) for q in QIDS]
    rows += [(q, f"{q}h", False, 30 + rng.uniform(0, 2), 25 + rng.uniform(0, 2)) for q in QIDS]
    ppl = pl.DataFrame(rows, schema=["qid", "pid", "in_gold", "ppl_passage", "ppl_query_passage"], orient="row")
    inputs = F.FindingInputs(
        llms=["a"],
        perplexity={(D, "a"): ppl},
        answers={(D, "a", "none"): answers_frame(first(10)), (D, "a", "human"): answers_frame(first(5))},
        known={(D, "a"): known_frame(first(10))},
    )
    for measure in ("ppl_passage", "ppl_query_passage"):
        entry = F.gold_lower_perplexity(inputs, RS, measure)
        cell = entry["cells"][0]
        # The paper's formula written out: per query, log ppl(G) - log ppl(H), averaged.
        g, h = ppl.filter(pl.col("in_gold")), ppl.filter(~pl.col("in_gold"))
        expected = float(np.mean(np.log(g[measure].to_numpy()) - np.log(h[measure].to_numpy())))
        assert cell["effect"] == pytest.approx(expected, abs=1e-4) and cell["hi"] < 0
        assert (
            cell["comparison"].startswith("paired within query (20 queries")
            and entry["verdict"] == "holds"
            and entry["overall"] == "cells"
        )
    # On known queries None is right by definition: Human minus None cannot be positive, so it is
    # described, not tested.
    lose = F.known_lose_with_human(inputs, RS)
    assert lose["construction"] == "cannot_fail" and lose["verdict"] == "by construction"
    assert (
        lose["cells"][0]["n"] == 10
        and lose["effect"] == pytest.approx(-50.0)
        and lose["cells"][0]["verdict"] == "by construction"
    )
    assert lose["description"].startswith("-50.0 [") and "correct by definition" in lose["description"]


def test_perplexity_is_unpaired_where_few_queries_have_both_kinds_and_one_passage_does_not_decide_it():
    """One gold passage per query, one non-gold on other queries (single-hop: one human passage), and
    one gold passage with a perplexity of 80,000: the mean of raw perplexities says gold passages are
    far harder, the log-perplexity says they are easier on every other query."""
    rows = [(q, f"{q}g", True, 9.0 + i % 3, 0.0) for i, q in enumerate(QIDS[:10])]
    rows[0] = (QIDS[0], "g-outlier", True, 80_000.0, 0.0)
    rows += [(q, f"{q}h", False, 30.0 + i % 3, 0.0) for i, q in enumerate(QIDS[10:])]
    ppl = pl.DataFrame(rows, schema=["qid", "pid", "in_gold", "ppl_passage", "ppl_query_passage"], orient="row")
    entry = F.gold_lower_perplexity(F.FindingInputs(llms=["a"], perplexity={(D, "a"): ppl}), RS, "ppl_passage")
    cell = entry["cells"][0]
    assert cell["comparison"].startswith("unpaired") and "0 queries with both kinds" in cell["comparison"]
    logs = np.log(ppl["ppl_passage"].to_numpy())
    gold = ppl["in_gold"].to_numpy()
    assert cell["effect"] == pytest.approx(logs[gold].mean() - logs[~gold].mean(), abs=1e-4)
    assert ppl.filter(pl.col("in_gold"))["ppl_passage"].mean() > ppl.filter(~pl.col("in_gold"))["ppl_passage"].mean()
    assert cell["effect"] < 0


def judgments_frame(selections):
    """qid -> selected pids among p1..p3, as a judgments table."""
    rows = [(q, p, p in chosen, True, "") for q, chosen in selections.items() for p in ("p1", "p2", "p3")]
    return pl.DataFrame(rows, schema=["qid", "pid", "selected", "parsed", "output"], orient="row")


def test_listwise_beats_pointwise_overselection_and_attention():
    gold_c = pl.DataFrame({"qid": QIDS[:10], "pid": ["p1"] * 10})  # q10..q19: empty gold (known)
    listwise = judgments_frame({q: {"p1"} if i < 10 else set() for i, q in enumerate(QIDS)})
    pointwise = judgments_frame({q: ({"p1", "p2", "p3"} if i % 2 == 0 else {"p2"}) for i, q in enumerate(QIDS)})

    def ranking(order):
        return pl.DataFrame(
            [(q, p, r, 0.0, True) for q in QIDS[:10] for r, p in enumerate(order, 1)],
            schema=["qid", "pid", "rank", "score", "parsed"],
            orient="row",
        )

    inputs = F.FindingInputs(
        llms=["a"],
        gold={(D, "a", "C"): gold_c},
        known={(D, "a"): known_frame(set(QIDS[10:]))},
        judgments={(D, "a", "listwise"): listwise, (D, "a", "pointwise"): pointwise},
        rankings={
            (D, "a", "retriever"): ranking(["p1", "p2", "p3"]),
            (D, "a", "attention"): ranking(["p3", "p2", "p1"]),
        },
        k=2,
    )
    f1 = F.listwise_beats_pointwise(inputs, RS)
    # listwise: P = R = 1; pointwise: P = (1/3 + 0) / 2, R = 1/2 -> F1 = 2PR / (P + R) = 0.2857...
    assert f1["cells"][0]["pair"] == "listwise vs pointwise"
    assert f1["effect"] == pytest.approx(100 * (1 - 2 * (1 / 6) * 0.5 / (1 / 6 + 0.5)), abs=1e-3)
    assert f1["verdict"] == "holds"
    over = by_id([F.known_overselection(inputs, RS)])["known_overselection"]
    cells = {c["method"]: c for c in over["cells"]}
    assert (
        cells["pointwise"]["effect"] == 100.0 and cells["pointwise"]["verdict"] == "holds"
    )  # selects on every known query
    assert cells["listwise"]["effect"] == 0.0 and cells["listwise"]["verdict"] == "reversed"  # rejects them all
    attention = F.attention_below_retriever(inputs, RS)
    assert attention["effect"] < 0 and attention["verdict"] == "holds" and "NDCG@2" in attention["unit"]


def test_pooled_effect_weights_each_dataset_equally_and_pools_only_the_claims_scope():
    """A dataset of 200 queries where C and None tie, one of 20 where C wins half the queries: the
    pooled effect is the mean of the two datasets' effects (25), not the query-weighted 4.5. With
    the paper's scope (Table 1: single-hop datasets) the two-hop one is shown, not pooled."""
    big = [f"b{i}" for i in range(200)]
    answers = {
        ("big", "a", "topk"): answers_frame(set(big[:50]), big),
        ("big", "a", "none"): answers_frame(set(big[:50]), big),
        ("small", "a", "topk"): answers_frame(first(10)),
        ("small", "a", "none"): answers_frame(set()),
    }
    inputs = F.FindingInputs(llms=["a"], answers=answers)
    entry = F.table1_pair(inputs, RS, "C", "None")
    assert entry["effect"] == pytest.approx((0 + 50) / 2) and entry["datasets"] == ["big", "small"]
    assert entry["lo"] > 0 and entry["verdict"] == "holds" and entry["n"] == 220
    scoped = F.FindingInputs(
        llms=["a"],
        answers=answers,
        paper_datasets={"big": ["hotpotqa"], "small": ["nq", "triviaqa"]},
        claim_scope={"single_hop": ["nq", "triviaqa", "msmarco-fqa"], "all": list(F.PAPER_DATASETS)},
    )
    entry = F.table1_pair(scoped, RS, "C", "None")
    assert (entry["datasets"], entry["datasets_out_of_scope"], entry["paper_datasets"]) == (
        ["small"],
        ["big"],
        ["nq", "triviaqa", "msmarco-fqa"],
    )
    assert entry["effect"] == pytest.approx(50.0) and entry["n"] == N
    assert {c["dataset"]: c["in_scope"] for c in entry["cells"]} == {"big": False, "small": True}
    # No configured dataset stands for the claim's: shown, not run.
    only_big = F.FindingInputs(
        llms=["a"],
        answers={k: v for k, v in answers.items() if k[0] == "big"},
        paper_datasets=scoped.paper_datasets,
        claim_scope=scoped.claim_scope,
    )
    out = F.table1_pair(only_big, RS, "C", "None")
    assert (
        out["status"] == "out of scope"
        and out["verdict"] == "not run"
        and "report.claim_scope.single_hop" in out["reason"]
    )


def ranking_frame(orders):
    """qid -> pids in ranked order, as a rankings table."""
    rows = [(q, p, r, 0.0, True) for q, order in orders.items() for r, p in enumerate(order, 1)]
    return pl.DataFrame(rows, schema=["qid", "pid", "rank", "score", "parsed"], orient="row")


def test_the_new_judgment_findings_hold_where_their_effect_is_there():
    """Each of the paper's judgment claims on tables where it is true by a margin: pseudo-answer F1
    (Table 2), known rejection lowers recall (Table 8), listwise with pseudo-answer ranks best and
    likelihood beats it on TriviaQA (Table 4); the numbers are the paper's formulas written out."""
    gold_c = pl.DataFrame({"qid": QIDS, "pid": ["p1"] * N})
    perfect = judgments_frame({q: {"p1"} for q in QIDS})
    everything = judgments_frame({q: {"p1", "p2", "p3"} for q in QIDS})
    half = judgments_frame({q: ({"p1"} if i % 2 == 0 else {"p2"}) for i, q in enumerate(QIDS)})
    good, bad = {q: ["p1", "p2", "p3"] for q in QIDS}, {q: ["p3", "p2", "p1"] for q in QIDS}
    inputs = F.FindingInputs(
        llms=["a"],
        gold={(D, "a", "C"): gold_c},
        judgments={
            (D, "a", "pointwise_pa"): perfect,
            (D, "a", "pointwise"): everything,
            (D, "a", "listwise_pa"): perfect,
            (D, "a", "listwise"): half,
            (D, "a", "listwise_pa_reject"): judgments_frame({q: set() for q in QIDS}),
        },
        rankings={
            (D, "a", m): ranking_frame(good if m == "listwise_pa" else bad)
            for m in ("listwise_pa", "retriever", "likelihood", "attention")
        },
        k=3,
    )
    pa = F.pseudo_answer_improves_f1(inputs, RS)
    # pointwise: P = 1/3, R = 1 -> F1 = 1/2; listwise: P = R = 1/2 -> F1 = 1/2; with the pseudo-answer: 1.
    assert {c["pair"]: c["effect"] for c in pa["cells"]} == {
        "pointwise_pa vs pointwise": 50.0,
        "listwise_pa vs listwise": 50.0,
    }
    # Pooled: F1 of P and R averaged over both pairs' (pair, query) values: P = (1/3 + 1/2) / 2, R = (1 + 1/2) / 2.
    p_without, r_without = (1 / 3 + 1 / 2) / 2, (1 + 1 / 2) / 2
    assert pa["effect"] == pytest.approx(100 * (1 - 2 * p_without * r_without / (p_without + r_without)), abs=1e-3)
    assert pa["verdict"] == "holds" and pa["construction"] == "can_fail"
    recall = F.known_rejection_lowers_recall(inputs, RS)
    assert recall["effect"] == pytest.approx(-100.0) and recall["verdict"] == "holds"
    best = F.listwise_pa_ranks_best(inputs, RS)
    ndcg_last = 100 / math.log2(4)  # gold at rank 3 of 3: DCG 1/log2(4), ideal 1
    assert {m["versus"] for m in best["margins"]} == {"retriever", "likelihood", "attention"}
    assert all(m["effect"] == pytest.approx(100 - ndcg_last, abs=1e-3) for m in best["margins"])
    assert best["verdict"] == "holds" and "not compared: listwise" in best["note"]
    likelihood = F.likelihood_beats_listwise_pa_triviaqa(inputs, RS)
    assert likelihood["effect"] == pytest.approx(ndcg_last - 100, abs=1e-3) and likelihood["verdict"] == "reversed"
    # Stated for TriviaQA: a dataset that stands for NQ is out of its scope.
    nq = F.FindingInputs(
        **{
            **inputs.__dict__,
            "paper_datasets": {D: ["nq"]},
            "claim_scope": {"triviaqa": ["triviaqa"], "all": list(F.PAPER_DATASETS)},
        }
    )
    assert F.likelihood_beats_listwise_pa_triviaqa(nq, RS)["status"] == "out of scope"
    assert F.listwise_pa_ranks_best(nq, RS)["status"] == "run"
    # A competitor that wins on some datasets: the smallest margin decides, and it is not a hold.
    tie = F.FindingInputs(
        **{**inputs.__dict__, "rankings": {**inputs.rankings, (D, "a", "likelihood"): ranking_frame(good)}}
    )
    tied = F.listwise_pa_ranks_best(tie, RS)
    assert tied["smallest_margin"] == "likelihood" and tied["effect"] == 0.0 and tied["verdict"] == "inconclusive"


def test_the_new_rag_findings_hold_where_their_effect_is_there():
    """Table 3 (own selections beat the top-k), Table 7 (beat every reranked top-n) and Figure 9
    against Figure 2 (selections lose less than gold sets when another LLM's are used)."""
    answers = {}
    for llm, other in (("a", "b"), ("b", "a")):
        answers |= {
            (D, llm, f"selected_listwise_pa_from_{llm}"): answers_frame(first(15)),
            (D, llm, f"selected_listwise_pa_from_{other}"): answers_frame(first(15)),
            (D, llm, "topk"): answers_frame(first(5)),
            (D, llm, "reranked_likelihood_top2"): answers_frame(first(10)),
            (D, llm, "reranked_listwise_pa_top2"): answers_frame(first(5)),
            (D, llm, f"gold_U_from_{llm}"): answers_frame(first(20)),
            (D, llm, f"gold_U_from_{other}"): answers_frame(first(8)),
        }
    inputs = F.FindingInputs(llms=["a", "b"], answers=answers, rag_top=2)
    topk = F.selected_beats_topk(inputs, RS)
    assert topk["effect"] == pytest.approx(50.0) and topk["verdict"] == "holds" and len(topk["cells"]) == 2
    reranked = F.selected_beats_reranked(inputs, RS)
    assert {m["versus"]: m["effect"] for m in reranked["margins"]} == {"likelihood": 25.0, "listwise_pa": 50.0}
    assert reranked["smallest_margin"] == "likelihood" and reranked["effect"] == 25.0 and reranked["verdict"] == "holds"
    transfer = F.selections_transfer_better_than_gold(inputs, RS)
    # Gold sets lose 60 points with the other LLM's, selections 0: (100 - 40) - (75 - 75).
    assert transfer["effect"] == pytest.approx(60.0) and transfer["verdict"] == "holds"
    assert transfer["construction"] == "partly_built_in" and {c["from"] for c in transfer["cells"]} == {"a", "b"}
    assert F.selected_beats_topk(F.FindingInputs(llms=["a"]), RS)["status"] == "not run"


def test_missing_inputs_are_not_run_with_a_reason():
    entries = F.all_findings(F.FindingInputs(llms=["a"]), RS)
    assert len(entries) == 35 and {e["status"] for e in entries} == {"not run"}
    assert all(e["verdict"] == "not run" and e["reason"] for e in entries)
    assert by_id(entries)["own_gold_beats_others_U"]["reason"] == "needs at least two LLMs (config llms)"
    assert by_id(entries)["gold_lower_perplexity"]["reason"] == "the perplexity stage is not among the inputs"
    # Table 1's answers alone: its findings (and own gold vs Human, the same answers) run, no other.
    ran = {e["id"] for e in F.all_findings(table1_inputs(), RS) if e["status"] == "run"}
    assert ran == {
        "table1_gu_over_gc",
        "table1_gc_over_human",
        "table1_human_over_u",
        "table1_u_over_c",
        "table1_c_over_none",
        "own_gold_beats_human",
    }
    # Their re-ask twins say why they did not run.
    assert by_id(entries)["table1_gu_over_gc_reask"]["reason"].startswith("no re-ask answers")
    json.dumps(entries, allow_nan=False)  # findings.json is strict JSON


def test_findings_markdown_and_html_list_every_finding():
    entries = F.all_findings(table1_inputs(), RS)
    md, html = F.findings_markdown(entries, RS), F.findings_html(entries, RS)
    for e in entries:
        assert f"| {e['id']}" in md and e["id"] in html
    assert "## table1_gu_over_gc" in md and "not run" in md


def test_findings_md_and_html_open_with_the_summary_then_one_legend_line_per_verdict():
    entries = F.all_findings(table1_inputs(), RS)
    md = F.findings_markdown(entries, RS, ["a"])
    assert md.index("## What this run establishes") < md.index("## Every finding") < md.index("| finding")
    assert "This run tests 24 findings with a on 20 queries each" in md
    legend = dict(re.findall(r"^- `([^`]+)`: (.+)$", md, re.M))
    assert list(legend) == [*F.VERDICTS, "by construction", "not run"]
    assert {e["verdict"] for e in entries} <= set(legend)
    assert legend["too few queries"].startswith("fewer than 10 queries (report.min_queries)")
    assert legend["inconclusive"].startswith("it contains `expected`")
    html = F.findings_html(entries, RS, ["a"])
    assert (
        html.index("What this run establishes") < html.index("<li><code>too few queries</code>") < html.index("<table")
    )


def test_the_interval_columns_name_the_configured_confidence():
    """report.confidence: 0.9 gives 90% intervals, and the table's headers must say 90%, not 95%."""
    rs90 = F.Resampling(n_resamples=500, seed=3, confidence=0.9)
    entries = F.all_findings(table1_inputs(), rs90)
    md = F.findings_markdown(entries, rs90, ["a"])
    assert "effect [90% CI]" in md and "95%" not in md
    assert "original [90% CI]" in md and "re-ask [90% CI]" in md
    # and the default stays the paper's 95%
    assert "effect [95% CI]" in F.findings_markdown(F.all_findings(table1_inputs(), RS), RS, ["a"])


# --- cost table --------------------------------------------------------------------------------------


def _stats_line(made, served, prompt, output, seconds, kind="generate"):
    calls = {
        kind: {"made": made, "served": served, "prompt_tokens": prompt, "output_tokens": output, "seconds": seconds}
    }
    return f"2026-01-01 INFO llm_utility: store_stats {json.dumps({'llm': 'a', 'job': 'j', 'calls': calls})}\n"


def test_cost_table_sums_store_stats_and_benchmarks(tmp_path):
    log1, log2 = tmp_path / "j1.log", tmp_path / "j2.log"
    log1.write_text("loading\n" + _stats_line(4, 1, 400, 20, 2.0) + _stats_line(2, 0, 100, 0, 1.0, kind="score"))
    log2.write_text(_stats_line(0, 5, 0, 0, 0.1))
    bench = tmp_path / "j1.tsv"
    bench.write_text("s\th:m:s\tmax_rss\tmax_vms\n10.0\t0:00:10\t512.5\t900\n")
    assert read_store_stats(log1)["score"]["prompt_tokens"] == 100 and read_store_stats(tmp_path / "none.log") is None
    assert read_benchmark(bench) == {"seconds": 10.0, "max_rss_mb": 512.5}
    jobs = [
        {
            "rule": "rank",
            "wildcards": {"dataset": "d1", "llm": "a", "method": "likelihood"},
            "log": str(log1),
            "benchmark": str(bench),
        },
        {
            "rule": "rank",
            "wildcards": {"dataset": "d2", "llm": "a", "method": "likelihood"},
            "log": str(log2),
            "benchmark": None,
        },
        {
            "rule": "judge",
            "wildcards": {"dataset": "d1", "llm": "a", "method": "pointwise"},
            "log": str(tmp_path / "missing.log"),
            "benchmark": None,
        },
    ]
    table = cost_table(jobs)
    rank = table.filter(pl.col("rule") == "rank").row(0, named=True)
    assert (rank["jobs"], rank["kinds"], rank["calls_made"], rank["calls_served"]) == (2, "generate+score", 6, 6)
    assert (rank["prompt_tokens"], rank["output_tokens"], rank["wall_seconds"], rank["max_rss_mb"]) == (
        500,
        20,
        10.0,
        512.5,
    )
    assert rank["missing"] == "1 without benchmark"
    judge = table.filter(pl.col("rule") == "judge").row(0, named=True)
    assert judge["calls_made"] == 0 and judge["missing"] == "1 without log, 1 without benchmark"
    total = table.filter((pl.col("rule") == "total") & (pl.col("llm") == "all")).row(0, named=True)
    assert (total["jobs"], total["calls_made"], total["prompt_tokens"]) == (3, 6, 500)


def test_a_judge_jobs_methods_get_rows_that_sum_to_the_job(tmp_path):
    log = tmp_path / "judge.log"
    calls = {
        "generate": {"made": 10, "served": 2, "prompt_tokens": 1000, "output_tokens": 50, "seconds": 8.0},
        "score": {"made": 4, "served": 0, "prompt_tokens": 200, "output_tokens": 40, "seconds": 1.0},
    }
    methods = {
        "pointwise": {"generate": {"made": 6, "served": 2, "prompt_tokens": 600, "output_tokens": 10, "seconds": 5.0}},
        "rank_likelihood": {
            "score": {"made": 4, "served": 0, "prompt_tokens": 200, "output_tokens": 40, "seconds": 1.0}
        },
    }
    log.write_text(
        f"INFO llm_utility: store_stats {json.dumps({'llm': 'a', 'job': 'j', 'calls': calls, 'methods': methods})}\n"
    )
    bench = tmp_path / "judge.tsv"
    bench.write_text("s\th:m:s\tmax_rss\tmax_vms\n20.0\t0:00:20\t700\t900\n")
    table = cost_table(
        [{"rule": "judge", "wildcards": {"dataset": "d", "llm": "a"}, "log": str(log), "benchmark": str(bench)}]
    )
    rows = {r["method"]: r for r in table.filter(pl.col("rule") == "judge").iter_rows(named=True)}
    assert set(rows) == {"", "pointwise", "rank_likelihood"}
    # The job's row: its wall time and the calls outside any method (4 generations).
    assert (rows[""]["jobs"], rows[""]["wall_seconds"], rows[""]["calls_made"], rows[""]["kinds"]) == (
        1,
        20.0,
        4,
        "generate",
    )
    assert (rows["pointwise"]["jobs"], rows["pointwise"]["calls_made"], rows["pointwise"]["prompt_tokens"]) == (
        0,
        6,
        600,
    )
    assert rows["rank_likelihood"]["kinds"] == "score" and rows["rank_likelihood"]["output_tokens"] == 40
    total = table.filter((pl.col("rule") == "total") & (pl.col("llm") == "all")).row(0, named=True)
    assert (total["jobs"], total["calls_made"], total["calls_served"], total["prompt_tokens"]) == (1, 14, 2, 1200)


def test_cost_table_names_the_dtype_each_rows_jobs_ran_in(tmp_path):
    def line(dtype):
        calls = {"generate": {"made": 1, "served": 0, "prompt_tokens": 10, "output_tokens": 1, "seconds": 1.0}}
        return f"INFO llm_utility: store_stats {json.dumps({'llm': 'a', 'job': 'j', 'dtype': dtype, 'calls': calls})}\n"

    logs = {name: tmp_path / f"{name}.log" for name in ("f1", "f2", "b1", "old")}
    logs["f1"].write_text(line("float32"))
    logs["f2"].write_text(line("float32"))
    logs["b1"].write_text(line("bfloat16"))
    logs["old"].write_text(_stats_line(1, 0, 10, 1, 1.0))  # a log from before the lines named the dtype
    jobs = [
        {"rule": rule, "wildcards": {"dataset": d, "llm": llm}, "log": str(logs[name]), "benchmark": None}
        for rule, d, llm, name in (
            ("answer", "d1", "a", "f1"),
            ("answer", "d2", "a", "f2"),
            ("judge", "d1", "a", "f1"),
            ("judge", "d2", "a", "b1"),
            ("gold", "d1", "a", "old"),
        )
    ]
    dtypes = {r["rule"]: r["dtype"] for r in cost_table(jobs).filter(pl.col("rule") != "total").iter_rows(named=True)}
    assert dtypes == {"answer": "float32", "judge": "bfloat16+float32", "gold": ""}


def test_cost_table_names_the_backend_of_each_job_and_of_each_method(tmp_path):
    """A judge job on vLLM whose attention ran on transformers in a second session: the job's row
    names both backends, each method's row the one its calls ran on."""

    def line(backend, methods):
        calls = {"generate": {"made": 2, "served": 0, "prompt_tokens": 20, "output_tokens": 2, "seconds": 1.0}}
        record = {
            "llm": "a",
            "job": "j",
            "backend": backend,
            "dtype": "float32",
            "calls": calls,
            "methods": {m: calls for m in methods},
        }
        return f"INFO llm_utility: store_stats {json.dumps(record)}\n"

    log = tmp_path / "judge.log"
    log.write_text(line("vllm", ["pointwise"]) + line("transformers", ["rank_attention"]))
    table = cost_table(
        [{"rule": "judge", "wildcards": {"dataset": "d", "llm": "a"}, "log": str(log), "benchmark": None}]
    )
    rows = {
        r["method"]: (r["backend"], r["dtype"]) for r in table.filter(pl.col("rule") == "judge").iter_rows(named=True)
    }
    assert rows == {
        "": ("transformers+vllm", "float32"),
        "pointwise": ("vllm", "float32"),
        "rank_attention": ("transformers", "float32"),
    }
    assert table.filter(pl.col("rule") == "total")["backend"].to_list() == ["", ""]


def test_cost_log_with_a_broken_stats_line_names_file_and_line(tmp_path):
    log = tmp_path / "bad.log"
    log.write_text("first\nsecond\nINFO store_stats {not json}\n")
    with pytest.raises(ValueError, match=r"bad.log:3: unreadable store_stats line"):
        read_store_stats(log)


# --- intervals in the tables -------------------------------------------------------------------------


def test_interval_columns_sit_beside_their_values_and_render_small():
    table = pl.DataFrame(
        {"dataset": ["d"], "llm": ["a"], "column": ["None"], "correct": [50.0], "avg_size": [None], "n_queries": [4]},
        schema_overrides={"avg_size": pl.Float64},
    )
    with_iv = join_intervals(
        table,
        pl.DataFrame({"dataset": ["d"], "llm": ["a"], "column": ["None"], "lo": [20.0], "hi": [80.0]}),
        ["dataset", "llm", "column"],
    )
    assert with_iv.columns == ["dataset", "llm", "column", "correct", "lo", "hi", "avg_size", "n_queries"]
    # A lone cell beats nothing: not bold.
    assert table1_blocks(with_iv, "md")["d"].loc["a", "None"] == "50.00 <sub>[20.0, 80.0]</sub>"
    assert table1_blocks(with_iv, "tex")["d"].loc["a", "None"] == r"50.00 {\scriptsize [20.0, 80.0]}"
    assert table1_blocks(table, "md")["d"].loc["a", "None"] == "50.00"  # intervals off: the paper's layout
    scores = pl.DataFrame(
        {
            "llm": ["a", "a"],
            "method": ["m1", "m2"],
            "dataset": ["d", "d"],
            "f1": [40.0, 60.0],
            "f1_lo": [30.0, None],
            "f1_hi": [50.0, None],
        }
    )
    block = grouped_blocks(scores, group="llm", index=["method"], across="dataset", values=[("f1", "F1", "max")])["a"]
    assert block.loc["m1", "F1 d"] == "40.00 <sub>[30.0, 50.0]</sub>" and block.loc["m2", "F1 d"] == "**60.00**"
    assert interval_text(float("nan"), 1.0) == ""


def test_too_few_queries_is_a_verdict_of_its_own_shown_with_its_interval():
    """Below report.min_queries a finding reads `too few queries`, whatever side of the null its
    interval lies on: `inconclusive` keeps its legend's meaning (the interval contains the null)."""

    def c_over_none(n_queries, c_wins, rs=RS):
        qids = QIDS[:n_queries]
        answers = {
            (D, "a", "topk"): answers_frame(set(qids[:c_wins]), qids),
            (D, "a", "none"): answers_frame(set(qids[c_wins:]), qids),
        }
        return F.table1_pair(F.FindingInputs(llms=["a"], answers=answers), rs, "C", "None")

    # Nine queries, each lost with the top-k: every paired difference is -100, so the interval is
    # [-100, -100], entirely below 0. It would read reversed; on nine queries it is not judged.
    nine = c_over_none(9, 0)
    assert (nine["effect"], nine["lo"], nine["hi"], nine["n"]) == (-100.0, -100.0, -100.0, 9)
    assert nine["verdict"] == "too few queries" and nine["cells"][0]["verdict"] == "too few queries"
    assert "fewer than" not in nine["note"]  # the verdict says it; the note does not repeat it
    assert c_over_none(10, 0)["verdict"] == "reversed"  # ten queries: judged
    # An interval that contains 0, on few queries, is not judged either.
    mixed = c_over_none(6, 3)
    assert mixed["lo"] < 0 < mixed["hi"] and mixed["verdict"] == "too few queries"
    assert c_over_none(12, 6)["verdict"] == "inconclusive"
    # With report.min_queries 3, three won queries hold.
    assert c_over_none(3, 3, F.Resampling(500, 3, min_queries=3))["verdict"] == "holds"
    assert (
        F.Resampling.from_config(
            {"resamples": 100, "bootstrap_seed": 1, "confidence": 0.9, "min_queries": 4}
        ).min_queries
        == 4
    )


def test_beats_every_competitor_on_too_few_queries_is_not_judged():
    """The case of selected_beats_reranked on the demo: both margins' intervals lie below 0 on nine
    queries. The finding and each margin read too few queries, with their intervals."""
    claim = F.Claim(id="a_beats_all", claim="A beats every competitor", source="s", unit="u")
    qids = QIDS[:9]
    losing = pl.DataFrame({"qid": qids, "a": [0.0] * 9, "b": [100.0] * 9})
    competitors = {name: [({"dataset": D, "llm": "a"}, D, losing)] for name in ("x", "y")}
    inputs = F.FindingInputs(llms=["a"], queries={D: pl.DataFrame({"qid": qids})})
    entry = F.beats_every_entry(claim, inputs, RS, competitors, note="", empty_reason="none")
    assert (entry["effect"], entry["lo"], entry["hi"], entry["n"]) == (-100.0, -100.0, -100.0, 9)
    assert entry["verdict"] == "too few queries"
    assert [m["verdict"] for m in entry["margins"]] == ["too few queries"] * 2
    assert entry["cell_verdicts"]["too few queries"] == 2 and entry["cell_verdicts"]["inconclusive"] == 0
    ten = pl.DataFrame({"qid": QIDS[:10], "a": [0.0] * 10, "b": [100.0] * 10})
    judged = F.beats_every_entry(
        claim,
        F.FindingInputs(llms=["a"], queries={D: ten}),
        RS,
        {name: [({"dataset": D, "llm": "a"}, D, ten)] for name in ("x", "y")},
        note="",
        empty_reason="none",
    )
    assert judged["verdict"] == "reversed"


def test_a_verdict_from_cells_waits_for_enough_queries_only_where_the_rest_agree():
    from llm_utility.report.findings.framework import TOO_FEW, cells_verdict

    assert cells_verdict(["holds", "holds"]) == "holds" and cells_verdict(["reversed"]) == "reversed"
    assert cells_verdict(["holds", TOO_FEW]) == cells_verdict([TOO_FEW, TOO_FEW]) == TOO_FEW
    assert cells_verdict(["reversed", TOO_FEW]) == TOO_FEW
    # A cell whose interval contains the null, or two that disagree, leave it inconclusive.
    assert cells_verdict(["holds", "inconclusive", TOO_FEW]) == "inconclusive"
    assert cells_verdict(["holds", "reversed", TOO_FEW]) == "inconclusive"
    assert cells_verdict([]) == "inconclusive"


def test_judgment_findings_carry_parse_shares_and_say_when_their_cells_rest_on_echoes():
    """Each judgment finding's cell gives the genuine/unparsed/echo shares of the judgments it
    compares, over the cell's queries; a cell where fewer than half are genuine says so, and so does
    the finding when most of its cells do (its verdict then says little about utility judgment)."""

    def judged(status_of):
        """A listwise judgments table: qid -> (selected pids, status)."""
        rows = []
        for q in QIDS:
            chosen, status = status_of(q)
            rows += [(q, p, p in chosen, status == "genuine", status == "echo", "") for p in ("p1", "p2", "p3")]
        return pl.DataFrame(rows, schema=["qid", "pid", "selected", "parsed", "echo", "output"], orient="row")

    gold_c = pl.DataFrame({"qid": QIDS[:10], "pid": ["p1"] * 10})  # q10..q19: empty gold, known
    nonempty = set(QIDS[:10])
    listwise = judged(lambda q: ({"p1"}, "genuine") if q in set(QIDS[:3]) else (set(), "echo"))  # 3 of the 10 genuine
    listwise_pa = judged(lambda q: (set(), "echo" if q in nonempty else "unparsed"))
    pointwise = judged(lambda q: ({"p1", "p2"}, "genuine"))
    inputs = F.FindingInputs(
        llms=["a"],
        gold={(D, "a", "C"): gold_c},
        known={(D, "a"): known_frame(set(QIDS[10:]))},
        judgments={
            (D, "a", "listwise"): listwise,
            (D, "a", "listwise_pa"): listwise_pa,
            (D, "a", "pointwise"): pointwise,
        },
    )
    f1 = F.listwise_beats_pointwise(inputs, RS)
    [cell] = f1["cells"]
    assert cell["parse"] == {
        "listwise": {"genuine": 30.0, "unparsed": 0.0, "echo": 70.0},
        "pointwise": {"genuine": 100.0, "unparsed": 0.0, "echo": 0.0},
    }
    assert "non-genuine" not in cell["note"] and f1["non_genuine_cells"] == 0  # 65% of its judgments genuine
    pa = F.pseudo_answer_improves_f1(inputs, RS)
    [cell] = pa["cells"]
    assert cell["parse"]["listwise_pa"] == {"genuine": 0.0, "unparsed": 0.0, "echo": 100.0}
    assert cell["note"] == "rests mostly on non-genuine outputs"  # the shares are its `parse`
    assert pa["non_genuine_cells"] == 1 and pa["note"].startswith(
        "1 of 1 in-scope cells mostly non-genuine: not a test of utility judgment"
    )
    assert pa["mostly_non_genuine"] and not f1["mostly_non_genuine"]
    # Over the known queries: listwise echoes on all, listwise_pa is unparsed on all, pointwise genuine.
    over = F.known_overselection(inputs, RS)
    cells = {c["method"]: c for c in over["cells"]}
    assert cells["listwise"]["parse"]["listwise"] == {"genuine": 0.0, "unparsed": 0.0, "echo": 100.0}
    assert cells["listwise_pa"]["parse"]["listwise_pa"] == {"genuine": 0.0, "unparsed": 100.0, "echo": 0.0}
    assert "non-genuine" not in cells["pointwise"]["note"]
    assert over["non_genuine_cells"] == 2 and "2 of 3 in-scope cells" in over["note"] and over["mostly_non_genuine"]
    md = F.findings_markdown([f1, pa, over], RS)
    assert "genuine/unparsed/echo %" in md and "listwise_pa 0/0/100" in md
