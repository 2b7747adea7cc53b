"""The runs stage: BM25 through bm25s, every run scored by every judge (ir-measures), the qrels'
agreement with RAG, the score-run command, and the plan of runs. Expected values are written out
(the BM25 and NDCG formulas, the Mann-Whitney AUC) or come from scipy, never from the module under
test."""

from __future__ import annotations

import math
import os
import re
from collections import Counter

import numpy as np
import polars as pl
import pytest
from scipy import stats

from llm_utility.report import runs as R
from llm_utility.workflow.model_rules import model_jobs

# --- BM25 -----------------------------------------------------------------------------------------

PASSAGES = pl.DataFrame(
    {
        "pid": ["a", "b", "c", "d"],
        "title": ["Lima", "Peru", "Chile", "Andes"],
        "text": [
            "Lima is the capital of Peru and Lima lies on the coast",
            "Peru borders Chile and the capital of Peru is Lima",
            "Santiago is the capital of Chile",
            "The Andes run through Peru and Chile and Bolivia",
        ],
    }
)
PLAIN = {"backend": "bm25", "stopwords": None, "stemmer": None}


def _tokens(text: str) -> list[str]:
    return re.findall(r"(?u)\b\w\w+\b", text.lower())


def _lucene_bm25(query: str, docs: list[str], k1: float = 0.9, b: float = 0.4) -> np.ndarray:
    """Lucene's BM25 (Kamphuis et al., ECIR 2020): idf = ln(1 + (N - df + 0.5) / (df + 0.5)),
    tf part = tf / (tf + k1 (1 - b + b |d| / avgdl)), summed over the query's distinct terms."""
    toks = [_tokens(d) for d in docs]
    n, avgdl = len(toks), sum(map(len, toks)) / len(toks)
    scores = np.zeros(n)
    for term in set(_tokens(query)):
        df = sum(term in t for t in toks)
        if df == 0:
            continue
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        for i, t in enumerate(toks):
            tf = Counter(t)[term]
            scores[i] += idf * tf / (tf + k1 * (1 - b + b * len(t) / avgdl))
    return scores


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "passages.parquet"
    PASSAGES.write_parquet(path)
    return path


def test_bm25_scores_are_lucene_bm25_written_out(corpus, tmp_path):
    from llm_utility.retrieval.lexical import bm25_search, build_bm25_index

    assert build_bm25_index(corpus, tmp_path / "bm25", PLAIN) == 4
    docs = [f"{t} {x}" for t, x in PASSAGES.select("title", "text").iter_rows()]
    queries = ["capital of Peru", "Bolivia Andes", "zebra"]
    scores, rows = bm25_search(tmp_path / "bm25", queries, 3, PLAIN)
    for i, query in enumerate(queries):
        expected = _lucene_bm25(query, docs)
        order = [j for j in np.argsort(-expected, kind="stable") if expected[j] > 0][:3]
        assert rows[i, : len(order)].tolist() == order
        np.testing.assert_allclose(scores[i, : len(order)], expected[order], rtol=1e-5)
        assert (rows[i, len(order) :] == -1).all()  # fewer hits: padded as the FAISS search pads
    assert rows[2].tolist() == [-1, -1, -1]  # no query term in the corpus


def test_bm25_index_files_do_not_depend_on_the_hash_seed(corpus, tmp_path):
    """The same passages make the same index files, byte for byte, under two hash seeds (term ids
    in sorted order); with bm25s numbering terms itself they differed from run to run."""
    import subprocess
    import sys

    build = "import sys; from llm_utility.retrieval.lexical import build_bm25_index as b; b(*sys.argv[1:3], {})"
    for seed in ("1", "2"):
        subprocess.run(
            [sys.executable, "-c", build.format({"backend": "bm25"}), str(corpus), str(tmp_path / seed)],
            env={**os.environ, "PYTHONHASHSEED": seed},
            check=True,
        )
    files = sorted(p.relative_to(tmp_path / "1") for p in (tmp_path / "1").rglob("*") if p.is_file())
    assert len(files) >= 4 and files == sorted(
        p.relative_to(tmp_path / "2") for p in (tmp_path / "2").rglob("*") if p.is_file()
    )
    assert all((tmp_path / "1" / f).read_bytes() == (tmp_path / "2" / f).read_bytes() for f in files)


def test_bm25_stems_and_drops_stopwords_by_default(corpus, tmp_path):
    from llm_utility.retrieval.lexical import bm25_search, build_bm25_index

    build_bm25_index(corpus, tmp_path / "bm25", {"backend": "bm25"})
    _, rows = bm25_search(tmp_path / "bm25", ["runs", "the of and is"], 2, {"backend": "bm25"})
    assert rows[0, 0] == 3  # "runs" and "run" share the Snowball stem
    assert rows[1].tolist() == [-1, -1]  # only stopwords: nothing to match


def test_bm25_index_refuses_other_settings(corpus, tmp_path):
    from llm_utility.retrieval.lexical import bm25_search, build_bm25_index

    build_bm25_index(corpus, tmp_path / "bm25", PLAIN)
    with pytest.raises(ValueError, match="tokenization.*rebuild the index"):
        bm25_search(tmp_path / "bm25", ["Peru"], 2, {**PLAIN, "stemmer": "english"})
    with pytest.raises(ValueError, match="k1=0.9.*k1=1.2"):
        bm25_search(tmp_path / "bm25", ["Peru"], 2, {**PLAIN, "k1": 1.2})
    with pytest.raises(ValueError, match="unknown stemmer 'klingon'"):
        build_bm25_index(corpus, tmp_path / "other", {**PLAIN, "stemmer": "klingon"})
    assert not (tmp_path / "other").exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temp folder left


# --- run metrics ----------------------------------------------------------------------------------


def _ndcg_at(ranked: list[str], relevant: set[str], k: int) -> float:
    """Binary-gain NDCG@k written out: sum 1/log2(rank+1) over relevant passages in the top k, over
    the same for the ideal ranking."""
    dcg = sum(1 / math.log2(i + 2) for i, p in enumerate(ranked[:k]) if p in relevant)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(k, len(relevant))))
    return dcg / ideal if ideal else 0.0


def test_per_query_metrics_match_ndcg_recall_and_condensed_lists_written_out():
    judge = R.Judge(
        "m",
        "U",
        relevant={"q1": {"a", "c"}, "q2": {"x"}, "q3": set()},
        judged={"q1": {"a", "b", "c"}, "q2": {"x", "y"}, "q3": {"z"}},
    )
    ranked = {"q1": ["n1", "a", "b", "n2", "c"], "q2": ["y", "n3", "n4"], "q3": ["z"]}
    k = 3
    got = R.per_query_metrics(ranked, judge, k, ["q1", "q2", "q3", "q4"]).rows_by_key("qid", named=True, unique=True)
    for qid in ("q1", "q2"):
        rel, pool = judge.relevant[qid], judge.judged[qid]
        condensed = [p for p in ranked[qid] if p in pool]  # unjudged passages dropped, then cut at k
        assert got[qid]["ndcg"] == pytest.approx(_ndcg_at(ranked[qid], rel, k))
        assert got[qid]["recall"] == pytest.approx(len(set(ranked[qid][:k]) & rel) / len(rel))
        assert got[qid]["judged"] == pytest.approx(sum(p in pool for p in ranked[qid][:k]) / k)
        assert got[qid]["ndcg_condensed"] == pytest.approx(_ndcg_at(condensed, rel, k))
        assert got[qid]["recall_condensed"] == pytest.approx(len(set(condensed[:k]) & rel) / len(rel))
    assert got["q1"]["ndcg_condensed"] > got["q1"]["ndcg"]  # q1's unjudged n1 pushes a down
    assert got["q3"]["ndcg"] == 0 and got["q4"]["ndcg"] == 0  # nothing relevant; not ranked
    human = R.per_query_metrics(ranked, R.Judge(None, "human", {"q1": {"c"}}, None), k, ["q1"])
    assert human["judged"].to_list() == [None] and human["ndcg"].item() == 0.0  # c is at rank 5


def test_run_table_keeps_queries_with_a_relevant_passage_and_marks_the_pool_run():
    judge = R.Judge("m", "C", {"q1": {"a"}, "q2": set()}, {"q1": {"a", "b"}, "q2": {"b"}})
    runs = {("d", "dense"): {"q1": ["a", "b"], "q2": ["b"]}, ("d", "bm25"): {"q1": ["n", "a"], "q2": ["n"]}}
    scored = R.score_runs(runs, {"d": [judge]}, {"d": ["q1", "q2"]}, 2)
    table = R.run_table(scored, 2, {"d": "dense"}, None)
    assert table["queries"].to_list() == [1, 1]
    assert table["pool_run"].to_list() == [True, False]
    assert table["ndcg@2"].to_list() == pytest.approx([100.0, round(100 / math.log2(3), 2)])
    assert table["judged@2"].to_list() == [100.0, 50.0]
    assert table["ndcg@2_condensed"].to_list() == [100.0, 100.0]


# --- agreement statistics -------------------------------------------------------------------------


def test_auc_point_biserial_and_tau_agree_with_scipy():
    rng = np.random.default_rng(0)
    values = rng.integers(0, 4, size=40).astype(float)  # ties on purpose
    correct = (rng.random(40) < 0.4 + 0.1 * values).astype(float)
    u = stats.mannwhitneyu(values[correct == 1], values[correct == 0]).statistic
    assert R.auc(values, correct) == pytest.approx(u / ((correct == 1).sum() * (correct == 0).sum()))
    assert R.point_biserial(values, correct) == pytest.approx(stats.pointbiserialr(correct, values).statistic)
    x, y = rng.random(5), rng.integers(0, 3, size=5).astype(float)
    assert R.kendall_tau_b(x, y) == pytest.approx(stats.kendalltau(x, y).statistic)
    assert np.isnan(R.auc([1.0, 2.0], [1.0, 1.0]))  # one class only


def test_agreement_table_prefers_the_judge_whose_metric_tracks_correctness():
    """Synthetic: the LLM answers correctly exactly when its own qrels' NDCG is positive; the human
    qrels' metric is unrelated. Its own judge gets AUC 1, the human judge less."""
    rng = np.random.default_rng(1)
    qids = [f"q{i}" for i in range(30)]
    own = {q: set() for q in qids}
    human = {q: {f"h{q}"} for q in qids}
    runs, answers = {}, {}
    for run in ("r1", "r2", "r3"):
        ranked, correct = {}, []
        for q in qids:
            hit = rng.random() < 0.5
            own[q] |= {f"{run}{q}"} if hit else set()
            ranked[q] = [f"{run}{q}" if hit else f"x{run}{q}", f"h{q}" if rng.random() < 0.5 else "n"]
            correct.append(hit)
        runs[("d", run)] = ranked
        answers[("d", "m", run)] = pl.DataFrame({"qid": qids, "correct": correct})
    judges = {"d": [R.Judge(None, "human", human, None), R.Judge("m", "U", own, {q: own[q] | {"n"} for q in qids})]}
    scored = R.score_runs(runs, judges, {"d": qids}, 2)
    boot = {"resamples": 200, "bootstrap_seed": 3, "confidence": 0.95}
    table = R.agreement_table(R.rag_pairs(scored, answers), {}, boot, 2).filter(pl.col("metric") == "ndcg@2")
    mine = table.filter(pl.col("own")).row(0, named=True)
    theirs = table.filter(pl.col("pool") == "human").row(0, named=True)
    assert mine["auc"] == 1.0 and mine["point_biserial"] > 0.9  # r < 1: NDCG varies among the hits
    assert (
        theirs["auc"] < 0.8 and theirs["point_biserial"] < 0.5 and theirs["auc_lo"] <= theirs["auc"] <= theirs["auc_hi"]
    )
    assert mine["n"] == 30 and mine["runs"] == 3 and mine["kendall_tau"] is not None


def test_two_runs_say_tau_is_not_meaningful():
    values = np.array([[0.1, 0.9], [0.2, 0.5], [0.0, 1.0]])
    correct = np.array([[0, 1], [1, 1], [0, 0]], float)
    cells = R.agreement_cells(values, correct, {"n_resamples": 50, "seed": 0, "confidence": 0.9})
    assert "not meaningful" in cells["kendall_tau"].reason and np.isnan(cells["kendall_tau"].lo)


# --- the score-run command ------------------------------------------------------------------------


def test_score_run_scores_a_hand_written_run_and_names_a_malformed_line(tmp_path, capsys):
    qrels = tmp_path / "qrels_U.txt"
    qrels.write_text("q1 0 a 1\nq1 0 b 0\nq1 0 c 1\nq2 0 x 1\nq2 0 y 0\n")
    run = tmp_path / "mine.trec"
    # q1: b (judged, not relevant), n (unjudged), a (relevant); scores give the order, not the ranks.
    run.write_text("q1 Q0 a 3 1.0 mine\nq1 Q0 b 1 3.0 mine\nq1 Q0 n 2 2.0 mine\nq2 Q0 x 1 5.0 mine\n")
    out = tmp_path / "scores.csv"
    assert R.main(["score-run", "--qrels", str(qrels), "--k", "3", "--csv", str(out), str(run)]) == 0
    row = pl.read_csv(out).row(0, named=True)
    ndcg_q1 = _ndcg_at(["b", "n", "a"], {"a", "c"}, 3)
    assert row["queries"] == 2 and row["unranked"] == 0
    assert row["ndcg@3"] == pytest.approx(round(100 * (ndcg_q1 + 1.0) / 2, 2))
    assert row["recall@3"] == pytest.approx(100 * (0.5 + 1.0) / 2)
    assert row["judged@3"] == pytest.approx(round(100 * (2 / 3 + 1) / 2, 2))  # of the passages ranked: q2 has 1
    assert row["ndcg@3_condensed"] == pytest.approx(round(100 * (_ndcg_at(["b", "a"], {"a", "c"}, 3) + 1.0) / 2, 2))
    assert "ndcg@3" in capsys.readouterr().out
    run.write_text("q1 Q0 a 1 1.0 mine\nq1 Q0 b 2\n")
    assert R.main(["score-run", "--qrels", str(qrels), str(run)]) == 2
    assert f"{run}, line 2: expected 6 fields" in capsys.readouterr().err


# --- the plan of runs -----------------------------------------------------------------------------


def test_plan_gives_every_dataset_its_retrievers_runs_and_run_files():
    import yaml
    from snakemake.utils import validate

    from llm_utility.workflow.checks import check_config
    from llm_utility.workflow.data_plan import DataPlan
    from llm_utility.workflow.model_plan import ModelPlan
    from workflow_runner import REPO

    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    cfg["runs"] = {"files": {"wf-single": {"mine": "runs/mine.trec"}}}
    validate(cfg, str(REPO / "config" / "schema.yaml"))
    check_config(cfg)
    plan = DataPlan(cfg, dropped_runs={"wf-twohop": {"dropped": "resources/runs/wf-twohop/dropped.trec"}})
    model = ModelPlan(plan)
    assert plan.bm25_retrievers == ["bm25"] and plan.dense_retrievers == ["minilm"]
    assert plan.runs_of("wf-single") == {
        "minilm": ("retriever", "minilm"),
        "bm25": ("retriever", "bm25"),
        "mine": ("file", "runs/mine.trec"),
    }
    assert list(plan.runs_of("wf-twohop")) == ["minilm", "bm25", "dropped"]
    assert plan.run_depth("wf-single", "minilm") == 5 and plan.run_depth("wf-single", "bm25") == 100
    assert model.run_answer_context("wf-single", "minilm") == "topk"  # the topk answer, not a new call
    assert model.run_answer_context("wf-single", "bm25") == "run_bm25"
    jobs = [wc for name, wc in model_jobs(model) if name == "answer_run"]
    assert len(jobs) == 3 * 2 + 2 + 2  # bm25 on 3 datasets x 2 LLMs, mine and dropped on one dataset each
    assert "k1" not in plan.retriever_spec("minilm") and "model" not in plan.retriever_spec("bm25")
    cfg["runs"] = {"rag": False}
    validate(cfg, str(REPO / "config" / "schema.yaml"))
    assert not DataPlan(cfg).run_rag and not [n for n, _ in model_jobs(ModelPlan(DataPlan(cfg))) if n == "answer_run"]
    cfg["runs"] = {"retrievers": ["nope"]}
    validate(cfg, str(REPO / "config" / "schema.yaml"))
    with pytest.raises(ValueError, match=r"runs.retrievers: 'nope' is not in retrievers"):
        check_config(cfg)


# --- the finding llm_qrels_predict_rag -------------------------------------------------------------


def test_weighted_auc_is_the_mann_whitney_auc_of_the_repeated_items():
    from llm_utility.report.runs import weighted_auc

    rng = np.random.default_rng(2)
    scores = rng.integers(0, 5, size=25).astype(float)
    correct = (rng.random(25) < 0.5).astype(float)
    weights = rng.integers(0, 3, size=(4, 25)).astype(float)
    got = weighted_auc(scores, correct, weights)
    for row, value in zip(weights.astype(int), got):
        s, c = np.repeat(scores, row), np.repeat(correct, row)
        u = stats.mannwhitneyu(s[c == 1], s[c == 0]).statistic
        assert value == pytest.approx(u / ((c == 1).sum() * (c == 0).sum()))
    r = R.weighted_pearson(scores, correct, weights)
    for row, value in zip(weights.astype(int), r):
        assert value == pytest.approx(stats.pearsonr(np.repeat(scores, row), np.repeat(correct, row)).statistic)
    assert np.isnan(weighted_auc(scores, correct, np.where(correct == 1, 0.0, 1.0)[None, :]))[
        0
    ]  # no correct item drawn


def test_agreement_intervals_leave_out_resamples_without_both_answer_classes():
    values = np.array([[0.9, 0.1], [0.8, 0.0], [0.2, 0.3], [0.0, 0.0]])
    correct = np.array([[1, 0], [1, 0], [0, 0], [0, 0]], float)  # only two queries have a correct answer
    cells = R.agreement_cells(values, correct, {"n_resamples": 400, "seed": 0, "confidence": 0.9})
    assert cells["auc"].effect == 1.0 and cells["auc"].method in ("percentile", "degenerate")
    assert "resamples undefined, left out" in cells["auc"].reason  # draws of only queries 3 and 4


def _pairs(n: int, seed: int, own_predicts: bool) -> pl.DataFrame:
    """Synthetic run pairs of one dataset, two LLMs, two runs: correctness follows the LLM's own
    U-qrels NDCG (or is a coin flip when not ``own_predicts``); the human NDCG is noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for llm in ("a", "b"):
        for run in ("dense", "bm25"):
            for i in range(n):
                own = float(rng.random() < 0.5) * rng.uniform(0.3, 1.0)
                correct = float(own > 0) if own_predicts else float(rng.random() < 0.5)
                human = rng.random()
                for judge, pool, value in (
                    (llm, "U", own),
                    (None, "human", human),
                    ("a" if llm == "b" else "b", "U", rng.random()),
                ):
                    rows.append(
                        {
                            "dataset": "d",
                            "run": run,
                            "answer_llm": llm,
                            "llm": judge,
                            "pool": pool,
                            "qid": f"q{i}",
                            "ndcg": value,
                            "correct": correct,
                        }
                    )
    return pl.DataFrame(rows)


def test_llm_qrels_predict_rag_holds_when_own_qrels_track_the_answers_and_is_labelled():
    from llm_utility.report.findings import FindingInputs, Resampling, llm_qrels_predict_rag

    rs = Resampling(n_resamples=500, seed=1, confidence=0.95, min_queries=10)
    known = {
        ("d", llm): pl.DataFrame({"qid": [f"q{i}" for i in range(40)], "known": [i < 5 for i in range(40)]})
        for llm in "ab"
    }
    entry = llm_qrels_predict_rag(FindingInputs(llms=["a", "b"], known=known, run_pairs=_pairs(40, 0, True)), rs)
    assert entry["construction"] == "partly_built_in" and "single-passage" in entry["construction_reason"]
    assert [c["n"] for c in entry["cells"]] == [35, 35]  # the 5 known queries left out
    assert entry["verdict"] == "holds" and entry["lo"] > 0 and entry["effect"] <= 1
    for cell in entry["cells"]:  # own AUC is 1: the effect is 1 - AUC(human), written out with scipy
        pairs = _pairs(40, 0, True).filter(
            (pl.col("answer_llm") == cell["llm"])
            & (pl.col("pool") == "human")
            & (pl.col("qid").is_in([f"q{i}" for i in range(5, 40)]))
        )
        h, c = pairs["ndcg"].to_numpy(), pairs["correct"].to_numpy()
        u = stats.mannwhitneyu(h[c == 1], h[c == 0]).statistic
        assert cell["effect"] == pytest.approx(1 - u / ((c == 1).sum() * (c == 0).sum()), abs=1e-4)
    noise = llm_qrels_predict_rag(FindingInputs(llms=["a", "b"], run_pairs=_pairs(40, 3, False)), rs)
    assert noise["verdict"] != "holds" and noise["lo"] < 0 < noise["hi"]
    assert llm_qrels_predict_rag(FindingInputs(llms=["a"]), rs)["status"] == "not run"
