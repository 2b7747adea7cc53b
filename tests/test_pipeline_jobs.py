"""Every ``pipeline.*_job`` of the answer, judgment and report stages, run in DAG order on tiny
parquet fixtures with stand-in models (tests/standin.py): the fast tier's check that jobs read what
their rules give them and write what docs/outputs.md says, without loading or dequantizing any model.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

import llm_utility.generation as generation
from llm_utility import pipeline
from llm_utility.config import with_defaults
from llm_utility.generation.store import count_rows
from standin import StandInGenerator, stand_in_manifest, write_tiny_model

REPO = Path(__file__).resolve().parents[1]
LLMS = ("std-a", "std-b")
DATASET = "tiny"
QUERIES = pl.DataFrame(
    {
        "qid": ["q1", "q2", "q3", "q4"],
        "question": [
            "What is the capital of Peru?",
            "What is the capital of Chile?",
            "Lima is the capital of Peru.",
            "What is the capital of Bolivia?",
        ],
        "answers": [["Lima"], ["Santiago"], ["SUPPORTS"], ["Sucre"]],
        "human_pids": [["h1"], ["p2"], ["p1"], []],
        "task": ["qa", "qa", "fact", "qa"],
    }
)
PASSAGES = pl.DataFrame(
    [
        ("p1", "Peru", "Lima is the capital of Peru."),
        ("p2", "Chile", "Santiago is the capital of Chile."),
        ("p3", "Peru economy", "Peru uses the sol."),
        ("p4", "Andes", "The Andes run through Peru and Chile."),
        ("h1", "Lima", "Lima lies on the coast; Lima is the capital of Peru."),
    ],
    schema=["pid", "title", "text"],
    orient="row",
)
RUN = pl.DataFrame(
    [
        (q, p, r, 1.0 / r)
        for q, ps in {
            "q1": ["p3", "p1", "p4"],
            "q2": ["p2", "p4", "p1"],
            "q3": ["p1", "p3", "p4"],
            "q4": ["p4", "p3", "p2"],
        }.items()
        for r, p in enumerate(ps, 1)
    ],
    schema={"qid": pl.String, "pid": pl.String, "rank": pl.Int32, "score": pl.Float32},
    orient="row",
)


# The stand-in's tokenizer (a vocabulary of 400) spends 15 tokens on "Utility judgment: Yes.", which
# the default cap (8, SmolLM2's 6 tokens and room) cannot hold: a judge job would stop before a call.
JUDGE_CAPS = {"pointwise": 16, "listwise": with_defaults("judgments", {})["listwise_max_new_tokens"], "thinking": 64}


class StandInB(StandInGenerator):
    """A second model that reads the last capital a prompt names, so the two LLMs disagree, and that
    answers the listwise selection about Chile with a copy of an acknowledgement turn (an echo)."""

    def _answer(self, prompt: str) -> str:
        import re

        if "My selection:" in prompt and "capital of Chile?" in prompt:
            return "Received passage [1]."
        if "Utility judgment: Yes/No" in prompt or "passages" in prompt.lower() and "[1]" in prompt:
            return super()._answer(prompt)
        found = re.findall(r"([A-Z][a-z]+) is the capital of", prompt)
        return found[-1] if found else "No idea"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The stages in DAG order, each job called as its script calls it; returns the paths."""
    tmp = tmp_path_factory.mktemp("jobs")
    mp = pytest.MonkeyPatch()
    model_dir = write_tiny_model(tmp / "tiny-model")

    def load(manifest, spec, threads=None):
        data = json.loads(Path(manifest).read_text())
        cls = StandInB if data["slug"] == "std-b" else StandInGenerator
        return cls(data, spec)

    mp.setattr(generation, "load_generator", load)
    paths = {
        "tmp": tmp,
        "queries": tmp / "queries.parquet",
        "passages": tmp / "passages.parquet",
        "run": tmp / "run.parquet",
    }
    QUERIES.write_parquet(paths["queries"])
    PASSAGES.write_parquet(paths["passages"])
    RUN.write_parquet(paths["run"])
    prompts = str(REPO / "config" / "prompts.yaml")
    spec = with_defaults(
        "llms",
        {
            "backend": "transformers",
            "weights": {"path": str(model_dir)},
            "prompt_format": "chat",
            "stop": ["\n"],
            "max_new_tokens": 16,
            "batch_size": 3,
        },
    )
    rank_cfg = with_defaults("rankings", {})
    cands = tmp / "candidates.parquet"
    pipeline.candidates_job(
        queries=paths["queries"], run=paths["run"], passages=paths["passages"], top_k=3, output=cands
    )
    paths["candidates"] = cands

    def ans(llm, context):
        return str(tmp / llm / "answers" / f"{context}.parquet")

    def common(llm):
        manifest = tmp / llm / "manifest.json"
        manifest.parent.mkdir(parents=True, exist_ok=True)
        manifest.write_text(json.dumps(stand_in_manifest(model_dir, llm)))
        return {"manifest": str(manifest), "spec": spec, "store": str(tmp / "store" / llm)}

    stats = {}
    for llm in LLMS:
        c = common(llm)
        stats[llm] = pipeline.answer_job(
            dataset=DATASET,
            queries=paths["queries"],
            candidates=cands,
            prompts=prompts,
            tables={},
            outputs={ctx: ans(llm, ctx) for ctx in ("none", "single", "topk", "union", "human")},
            job="answer_candidates",
            **c,
        )
        pipeline.gold_job(
            candidates=cands,
            none=ans(llm, "none"),
            single=ans(llm, "single"),
            outputs={k: str(tmp / llm / f"{k}.parquet") for k in ("gold_C", "gold_U", "known")},
        )
    for llm in LLMS:
        for cand in "CU":
            tables = {f"gold_{cand}_from_{s}": str(tmp / s / f"gold_{cand}.parquet") for s in LLMS}
            pipeline.answer_job(
                dataset=DATASET,
                queries=paths["queries"],
                candidates=cands,
                prompts=prompts,
                tables=tables,
                outputs={ctx: ans(llm, ctx) for ctx in tables},
                job=f"answer_gold_{cand}",
                **common(llm),
            )
        methods = ("pointwise", "pointwise_pa", "listwise", "listwise_pa", "listwise_pa_reject")
        rankings = {
            m: str(tmp / llm / "rankings" / f"{m}.parquet")
            for m in ("retriever", "listwise", "listwise_pa", "likelihood", "attention")
        }
        pipeline.rank_retriever_job(
            queries=paths["queries"], candidates=cands, max_queries=3, output=rankings["retriever"]
        )
        pipeline.judge_job(
            dataset=DATASET,
            queries=paths["queries"],
            candidates=cands,
            prompts=prompts,
            job="judge",
            judgments={m: str(tmp / llm / "judgments" / f"{m}.parquet") for m in methods},
            rankings={m: p for m, p in rankings.items() if m != "retriever"},
            perplexity=str(tmp / llm / "perplexity.parquet"),
            gold_U=str(tmp / llm / "gold_U.parquet"),
            pseudo_answers={"topk": ans(llm, "topk")},
            max_new_tokens=JUDGE_CAPS,
            rankings_cfg={**rank_cfg, "attention_backend": "transformers"},
            max_queries=3,
            **common(llm),
        )
        for cand in "CU":
            pipeline.qrels_job(
                gold=str(tmp / llm / f"gold_{cand}.parquet"),
                candidates=cands,
                pool=cand,
                output=str(tmp / llm / f"qrels_{cand}.txt"),
            )
    for llm in LLMS:
        tables = {
            f"selected_{m}_from_{s}": str(tmp / s / "judgments" / f"{m}.parquet")
            for m in ("pointwise_pa", "listwise_pa")
            for s in LLMS
        }
        tables |= {
            f"reranked_{m}_top2": str(tmp / llm / "rankings" / f"{m}.parquet") for m in ("likelihood", "listwise_pa")
        }
        stats[f"{llm}-derived"] = pipeline.answer_job(
            dataset=DATASET,
            queries=paths["queries"],
            candidates=cands,
            prompts=prompts,
            tables=tables,
            outputs={ctx: ans(llm, ctx) for ctx in tables},
            job="answer_selected",
            **common(llm),
        )
    paths["ans"], paths["stats"], paths["spec"] = ans, stats, spec
    yield paths
    mp.undo()


def test_candidates_and_answers(run):
    cands = pl.read_parquet(run["candidates"])
    assert cands.columns == ["qid", "pid", "rank", "in_C", "human", "title", "text"]
    assert cands.filter(pl.col("qid") == "q1")["pid"].to_list() == ["p3", "p1", "p4", "h1"]
    none = pl.read_parquet(run["ans"]("std-a", "none"))
    assert none.columns == ["qid", "pids", "output", "correct"] and none.height == 4
    single = pl.read_parquet(run["ans"]("std-a", "single"))
    assert single.height == 4 + 3 + 3 + 3  # U sizes: q1 has a human passage below top-3
    # The stand-in answers after a leading newline ("\nLima\nmore"): the stop rule keeps "Lima".
    topk = dict(pl.read_parquet(run["ans"]("std-a", "topk")).select("qid", "output").iter_rows())
    assert topk["q1"] == "Lima" and topk["q3"] == "SUPPORTS"
    assert dict(pl.read_parquet(run["ans"]("std-a", "topk")).select("qid", "correct").iter_rows())["q3"] is True


def test_gold_sets_follow_eq1(run):
    gold = pl.read_parquet(run["tmp"] / "std-a" / "gold_U.parquet")
    assert set(gold.iter_rows()) >= {("q1", "p1"), ("q1", "h1"), ("q2", "p2")}
    known = dict(pl.read_parquet(run["tmp"] / "std-a" / "known.parquet").iter_rows())
    assert known == {"q1": False, "q2": False, "q3": True, "q4": False}  # the claim needs no passage
    own = pl.read_parquet(run["ans"]("std-a", "gold_U_from_std-a"))
    assert dict(own.select("qid", "correct").iter_rows())["q1"] is True


def test_nothing_is_computed_twice_and_reruns_are_served(run):
    # An empty gold set or selection is the no-passage call, a one-passage one a single call.
    made = run["stats"]["std-a"]["generate"]["made"]
    assert made == count_rows(run["tmp"] / "store" / "std-a", "generate") - _made_after_answers(run, "std-a")
    # none + single + topk, and union/human only where they differ from what was already asked.
    assert made < 4 + 13 + 4 + 4 + 4
    again = pipeline.answer_job(
        dataset=DATASET,
        queries=run["queries"],
        candidates=run["candidates"],
        prompts=str(REPO / "config/prompts.yaml"),
        tables={},
        outputs={"topk": str(run["tmp"] / "again.parquet")},
        manifest=str(run["tmp"] / "std-a" / "manifest.json"),
        spec=run["spec"],
        store=str(run["tmp"] / "store" / "std-a"),
        job="again",
    )
    assert again["generate"]["made"] == 0 and again["generate"]["served"] == 4


def _made_after_answers(run, llm):
    """Calls made by the jobs after answer_candidates (gold, judgments, rankings...), from the store."""
    import sqlite3

    total = 0
    for shard in (run["tmp"] / "store" / llm).glob("*.sqlite"):
        if shard.name.startswith("answer_candidates"):
            continue
        db = sqlite3.connect(shard)
        total += db.execute("SELECT COUNT(*) FROM calls WHERE kind = 'generate'").fetchone()[0]
        db.close()
    return total


def test_judgments(run):
    for method in ("pointwise", "listwise_pa"):
        table = pl.read_parquet(run["tmp"] / "std-a" / "judgments" / f"{method}.parquet")
        assert table.columns == ["qid", "pid", "selected", "parsed", "echo", "output"]
        assert table["qid"].unique().sort().to_list() == ["q1", "q2", "q3"]  # max_queries: the first 3
        assert table.height == 9 and table["parsed"].all() and not table["echo"].any()
        # The stand-in selects exactly the passages that name a capital.
        chosen = set(table.filter(pl.col("selected")).select("qid", "pid").iter_rows())
        assert chosen == {("q1", "p1"), ("q2", "p2"), ("q2", "p1"), ("q3", "p1")}


def test_an_output_that_repeats_its_prompt_is_an_echo_not_a_selection(run):
    """std-b answers the listwise selection on q2 with "Received passage [1]." (its prompt's
    acknowledgement turn): the judge job reads it against that prompt and selects nothing."""
    for method in ("listwise", "listwise_pa", "listwise_pa_reject"):
        table = pl.read_parquet(run["tmp"] / "std-b" / "judgments" / f"{method}.parquet")
        q2 = table.filter(pl.col("qid") == "q2")
        assert q2["output"].unique().to_list() == ["Received passage [1]."]
        assert q2["echo"].all() and not q2["parsed"].any() and not q2["selected"].any()
        others = table.filter(pl.col("qid") != "q2")
        assert others["parsed"].all() and not others["echo"].any()
    assert not pl.read_parquet(run["tmp"] / "std-b" / "judgments" / "pointwise.parquet")["echo"].any()
    # The empty selection is answered with no passage, as an unparsed one always was.
    sel = pl.read_parquet(run["ans"]("std-b", "selected_listwise_pa_from_std-b"))
    assert sel.filter(pl.col("qid") == "q2")["pids"].item().to_list() == []


def test_rankings(run):
    for method in ("retriever", "listwise", "listwise_pa", "likelihood", "attention"):
        table = pl.read_parquet(run["tmp"] / "std-a" / "rankings" / f"{method}.parquet")
        assert table.columns == ["qid", "pid", "rank", "score", "parsed", "echo"], method
        assert table.height == 9 and sorted(table.filter(pl.col("qid") == "q1")["rank"].to_list()) == [1, 2, 3]

    def first(m):
        rankings = pl.read_parquet(run["tmp"] / "std-a" / "rankings" / f"{m}.parquet")
        return rankings.filter((pl.col("qid") == "q1") & (pl.col("rank") == 1))["pid"].item()

    assert first("retriever") == "p3"
    assert first("listwise") == "p1"  # the stand-in ranks the passage naming a capital first
    assert first("likelihood") == "p1"  # its pseudo-answer "Lima" occurs in that passage only


def test_perplexity_and_qrels(run):
    ppl = pl.read_parquet(run["tmp"] / "std-a" / "perplexity.parquet")
    assert ppl.columns == ["qid", "pid", "in_gold", "ppl_passage", "ppl_query_passage"]
    assert set(ppl.select("qid", "pid").iter_rows()) == {("q1", "h1"), ("q2", "p2")}  # queries with a gold set
    assert (ppl["ppl_passage"] > 1).all()
    qrels = (run["tmp"] / "std-a" / "qrels_U.txt").read_text().splitlines()
    assert "q1 0 p1 1" in qrels and "q1 0 p3 0" in qrels and "q1 0 h1 1" in qrels
    assert len(qrels) == 13  # every passage of U judged


def test_derived_answers(run):
    sel = pl.read_parquet(run["ans"]("std-a", "selected_listwise_pa_from_std-a"))
    assert sel["qid"].to_list() == ["q1", "q2", "q3"]  # judged queries only
    assert sel.filter(pl.col("qid") == "q1")["pids"].item().to_list() == ["p1"]
    rr = pl.read_parquet(run["ans"]("std-a", "reranked_listwise_pa_top2"))
    assert rr.filter(pl.col("qid") == "q1")["pids"].item().to_list()[0] == "p1"


def test_report_jobs(run, tmp_path):
    """Every report job reads keyed inputs and writes its files."""
    t, ans = run["tmp"], run["ans"]
    style = with_defaults("figures", {"dpi": 50})
    answers = {
        (DATASET, llm, ctx): ans(llm, ctx)
        for llm in LLMS
        for ctx in ("none", "topk", "union", "human", f"gold_C_from_{llm}", f"gold_U_from_{llm}")
    }
    gold = {(DATASET, llm, c): str(t / llm / f"gold_{c}.parquet") for llm in LLMS for c in "CU"}
    queries = {DATASET: str(run["queries"])}
    out = lambda name: {k: str(tmp_path / f"{name}.{k}") for k in ("csv", "md", "tex")}  # noqa: E731
    pipeline.table1_job(answers=answers, gold=gold, queries=queries, **out("t1"))
    t1 = pl.read_csv(tmp_path / "t1.csv")
    assert t1.height == 12 and set(t1["column"]) == {"None", "C", "U", "Human", "G(C)", "G(U)"}
    pipeline.empty_answers_job(answers=answers, csv=str(tmp_path / "e.csv"), md=str(tmp_path / "e.md"))
    assert pl.read_csv(tmp_path / "e.csv")["empty"].sum() == 0
    judged = {
        (DATASET, llm, m): str(t / llm / "judgments" / f"{m}.parquet")
        for llm in LLMS
        for m in ("pointwise", "pointwise_pa", "listwise", "listwise_pa", "listwise_pa_reject")
    }
    gold_c = {(DATASET, llm): str(t / llm / "gold_C.parquet") for llm in LLMS}
    known = {(DATASET, llm): str(t / llm / "known.parquet") for llm in LLMS}
    pipeline.selection_table_job(table="table2", judgments=judged, gold=gold_c, **out("t2"))
    t2 = pl.read_csv(tmp_path / "t2.csv")
    assert t2.height == 10 and {
        "precision",
        "recall",
        "f1",
        "accuracy_empty",
        "genuine",
        "unparsed",
        "echo",
        "echo_nonempty",
        "echo_empty",
    } <= set(t2.columns)
    assert "**" in (tmp_path / "t2.md").read_text() and "echo % (F1)" in (tmp_path / "t2.md").read_text()
    # std-b echoed its acknowledgement on q2 (of 3 judged queries): one third echo, two thirds genuine.
    row = t2.filter((pl.col("llm") == "std-b") & (pl.col("method") == "listwise_pa")).row(0, named=True)
    assert (row["genuine"], row["unparsed"], row["echo"]) == pytest.approx((200 / 3, 0.0, 100 / 3))
    assert (t2["genuine"] + t2["unparsed"] + t2["echo"]).round(6).to_list() == [100.0] * 10
    pipeline.selection_table_job(
        table="table5", judgments={}, gold={}, note="No configured LLM has a thinking switch", **out("t5")
    )
    assert "No configured LLM" in (tmp_path / "t5.md").read_text()
    pipeline.selection_table_job(
        table="table8",
        judgments={k: v for k, v in judged.items() if k[2] in ("listwise_pa", "listwise_pa_reject")},
        gold=gold_c,
        known=known,
        **out("t8"),
    )
    t8 = pl.read_csv(tmp_path / "t8.csv")
    assert {"avg_selected_unknown", "avg_selected_known", "avg_selected_nonempty", "avg_selected_empty"} <= set(
        t8.columns
    )
    assert (t8["n_unknown"] + t8["n_known"] == t8["n_nonempty"] + t8["n_empty"]).all()
    assert "count (unknown)" in (tmp_path / "t8.md").read_text()
    ranked = {
        (DATASET, llm, m): str(t / llm / "rankings" / f"{m}.parquet")
        for llm in LLMS
        for m in ("retriever", "listwise", "likelihood", "attention")
    }
    pipeline.table4_job(rankings=ranked, gold=gold_c, k=2, **out("t4"))
    t4 = pl.read_csv(tmp_path / "t4.csv")
    assert (
        t4.filter((pl.col("llm") == "std-a") & (pl.col("method") == "listwise"))["ndcg"].item()
        >= t4.filter((pl.col("llm") == "std-a") & (pl.col("method") == "retriever"))["ndcg"].item()
    )
    sel = {(DATASET, llm, ctx): ans(llm, ctx) for llm in LLMS for ctx in ["topk", f"selected_listwise_pa_from_{llm}"]}
    pipeline.rag_table_job(
        table="table3",
        answers=sel,
        known=known,
        judgments={k: v for k, v in judged.items() if k[2] == "listwise_pa"},
        **out("t3"),
    )
    t3 = pl.read_csv(tmp_path / "t3.csv")
    assert set(t3["source"]) == {"topk", "selected_listwise_pa_from_std-a", "selected_listwise_pa_from_std-b"}
    shares = {
        s: (g, u, e) for s, g, u, e in t3.unique("source").select("source", "genuine", "unparsed", "echo").iter_rows()
    }
    assert shares["topk"] == (None, None, None) and shares["selected_listwise_pa_from_std-a"] == (100.0, 0.0, 0.0)
    assert shares["selected_listwise_pa_from_std-b"] == pytest.approx((200 / 3, 0.0, 100 / 3))
    assert "echo %" in (tmp_path / "t3.md").read_text()
    rer = {(DATASET, llm, ctx): ans(llm, ctx) for llm in LLMS for ctx in ["topk", "reranked_likelihood_top2"]}
    pipeline.rag_table_job(table="table7", answers=rer, known=known, **out("t7"))
    # Every table page has a title and a legend, in Markdown and, beside it, in HTML.
    for name in ("t1", "e", "t2", "t8", "t4", "t3", "t7"):
        md, page = (tmp_path / f"{name}.md").read_text(), (tmp_path / f"{name}.html").read_text()
        assert md.startswith("## ") and "**Legend**" in md and "<b>Legend</b>" in page, name

    def fig(name):
        return {ext: str(tmp_path / f"{name}.{ext}") for ext in ("png", "pdf", "csv")}

    transfer = {
        (DATASET, llm, f"selected_listwise_pa_from_{s}"): ans(llm, f"selected_listwise_pa_from_{s}")
        for llm in LLMS
        for s in LLMS
    }
    pipeline.selection_transfer_figure_job(
        answers=transfer, llms=list(LLMS), method="listwise_pa", style=style, **fig("f9")
    )
    assert pl.read_csv(tmp_path / "f9.csv").height == 4
    ppl = {(DATASET, llm): str(t / llm / "perplexity.parquet") for llm in LLMS}
    pipeline.perplexity_figure_job(
        perplexity=ppl,
        answers={k: v for k, v in answers.items() if k[2] in ("none", "human")},
        known=known,
        style=style,
        **fig("f4"),
    )
    assert (tmp_path / "f4.png").read_bytes()[:4] == b"\x89PNG"
    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    (runs_dir / "bm25.trec").write_text("q1 Q0 p1 1 3.0 bm25\nq1 Q0 zz 2 2.0 bm25\nq2 Q0 p2 1 1.0 bm25\n")
    qrels = {(DATASET, llm, pool): str(t / llm / f"qrels_{pool}.txt") for llm in LLMS for pool in "CU"}
    runs = {(DATASET, "dense"): str(run["run"]), (DATASET, "bm25"): str(runs_dir / "bm25.trec")}
    pipeline.external_runs_job(
        runs=runs,
        qrels=qrels,
        queries=queries,
        pool_runs={DATASET: "dense"},
        k=2,
        intervals=None,
        style=style,
        csv=str(tmp_path / "x.csv"),
        md=str(tmp_path / "x.md"),
        png=str(tmp_path / "x.png"),
        pdf=str(tmp_path / "x.pdf"),
    )
    ext = pl.read_csv(tmp_path / "x.csv")
    assert set(ext["judge"]) == {"std-a", "std-b", "Human"}
    assert ext.height == 2 * (1 + 2 * 2)  # two runs, each scored by the human passages and 2 LLMs x (C, U)
    assert (tmp_path / "x.png").read_bytes()[:4] == b"\x89PNG"
    # The configured retriever's top-k is the pool C: every passage of it is judged.
    # (An LLM with no gold passage among C has no query to average over: no value.)
    assert ext.filter((pl.col("run") == "dense") & (pl.col("pool") == "C"))["judged@2"].drop_nulls().to_list() == [
        100.0
    ]
    row = ext.filter((pl.col("run") == "bm25") & (pl.col("judge") == "std-a") & (pl.col("pool") == "U"))
    assert row["judged@2"].item() == pytest.approx(75.0)  # q1: 1 of 2 judged; q2: 1 of 1
    assert row["ndcg@2_condensed"].item() >= row["ndcg@2"].item()


def test_retrieval_jobs(run, tmp_path, monkeypatch):
    """retrieve_job with a stand-in encoder over a real FAISS index, and the retrieval table."""
    import llm_utility.retrieval.encoders as encoders
    from llm_utility.retrieval.index import build_index

    vectors = np.eye(5, dtype=np.float32)
    np.save(tmp_path / "0.npy", vectors)
    build_index([str(tmp_path / "0.npy")], str(tmp_path / "index.faiss"), index_factory="Flat")

    class Encoder:
        def encode_queries(self, texts):
            return np.stack([vectors[i % 5] for i in range(len(texts))])

    monkeypatch.setattr(encoders, "load_encoder", lambda spec: Encoder())
    pipeline.retrieve_job(
        queries=run["queries"],
        passages=run["passages"],
        index=str(tmp_path / "index.faiss"),
        encoder_spec={"nprobe": None},
        top_k=2,
        output=str(tmp_path / "run.parquet"),
    )
    got = pl.read_parquet(tmp_path / "run.parquet")
    assert got.filter((pl.col("qid") == "q2") & (pl.col("rank") == 1))["pid"].item() == "p2"
    pipeline.run_topk_job(
        run=str(run["run"]),
        queries=str(run["queries"]),
        passages=str(run["passages"]),
        top_k=3,
        output=str(tmp_path / "topk.parquet"),
    )
    topk = pl.read_parquet(tmp_path / "topk.parquet")
    assert topk.filter(pl.col("qid") == "q1")["pid"].to_list() == ["p3", "p1", "p4"]
    assert topk.filter(pl.col("pid") == "p2")["text"].unique().to_list() == ["Santiago is the capital of Chile."]
    pipeline.retrieval_table_job(
        queries={DATASET: str(run["queries"])},
        runs={(DATASET, "dense"): str(tmp_path / "topk.parquet")},
        pool_runs={DATASET: "dense"},
        top_k=3,
        csv=str(tmp_path / "r.csv"),
        md=str(tmp_path / "r.md"),
    )
    table = pl.read_csv(tmp_path / "r.csv")
    assert table["pool_run"].to_list() == [True]
    assert table["answer_recall@3"].item() == pytest.approx(100 * 2 / 3, abs=0.01)  # q1, q2, not q4; q3 is a claim


def test_a_prompt_that_does_not_fit_stops_the_job_before_any_call(run, tmp_path):
    """The stand-in model's context is 2048 tokens (its config.json): a 3000-word passage does not fit
    in the answer prompt, and the job names the dataset, query, context and length; with
    max_passage_tokens the passage is cut and the job runs."""
    from llm_utility.generation import PromptTooLongError

    long = PASSAGES.with_columns(
        pl.when(pl.col("pid") == "p3").then(pl.lit("word " * 3000)).otherwise(pl.col("text")).alias("text")
    )
    long.write_parquet(tmp_path / "passages.parquet")
    cands = tmp_path / "candidates.parquet"
    pipeline.candidates_job(
        queries=run["queries"], run=run["run"], passages=str(tmp_path / "passages.parquet"), top_k=3, output=cands
    )
    common = dict(
        dataset=DATASET,
        queries=run["queries"],
        candidates=cands,
        prompts=str(REPO / "config/prompts.yaml"),
        tables={},
        manifest=str(run["tmp"] / "std-a" / "manifest.json"),
        store=str(tmp_path / "store"),
        job="long",
    )
    out = tmp_path / "topk.parquet"
    with pytest.raises(
        PromptTooLongError, match=r"dataset tiny, query q1, context topk.*has \d+ tokens.*context of 2048"
    ):
        pipeline.answer_job(outputs={"topk": str(out)}, spec=run["spec"], **common)
    assert not out.exists() and not list((tmp_path / "store").glob("*.sqlite"))  # nothing half-made
    stats = pipeline.answer_job(outputs={"topk": str(out)}, spec={**run["spec"], "max_passage_tokens": 50}, **common)
    assert stats["generate"]["made"] == 4 and out.exists()


def test_findings_transfer_control_cost_and_config_jobs(run, tmp_path):
    """The findings-stage jobs read keyed inputs and write findings.json/.md/.html, the transfer
    control tables, the cost table and the config; the tables carry intervals when asked."""
    import yaml

    from llm_utility.config import schema_defaults

    t, ans = run["tmp"], run["ans"]
    report_cfg = schema_defaults("report")
    contexts = ("none", "topk", "union", "human") + tuple(f"gold_{c}_from_{s}" for c in "CU" for s in LLMS)
    answers = {(DATASET, llm, ctx): ans(llm, ctx) for llm in LLMS for ctx in contexts}
    known = {(DATASET, llm): str(t / llm / "known.parquet") for llm in LLMS}
    gold = {(DATASET, llm, c): str(t / llm / f"gold_{c}.parquet") for llm in LLMS for c in "CU"}
    judged = {
        (DATASET, llm, m): str(t / llm / "judgments" / f"{m}.parquet")
        for llm in LLMS
        for m in ("pointwise", "listwise", "listwise_pa_reject")
    }
    ranked = {
        (DATASET, llm, m): str(t / llm / "rankings" / f"{m}.parquet")
        for llm in LLMS
        for m in ("retriever", "attention")
    }
    out = {
        "json_path": str(tmp_path / "findings.json"),
        "md": str(tmp_path / "findings.md"),
        "html": str(tmp_path / "findings.html"),
        "summary": str(tmp_path / "findings_summary.rst"),
    }
    entries = pipeline.findings_job(
        answers=answers,
        known=known,
        gold=gold,
        queries={DATASET: str(run["queries"])},
        perplexity={(DATASET, llm): str(t / llm / "perplexity.parquet") for llm in LLMS},
        judgments=judged,
        rankings=ranked,
        llms=list(LLMS),
        families={"std-a": "std", "std-b": None},
        k=2,
        resampling=report_cfg,
        paper_datasets={DATASET: ["fever"]},
        claim_scope={"single_hop": ["nq", "triviaqa", "msmarco-fqa"], "all": ["nq", "fever"]},
        **out,
    )
    doc = json.loads((tmp_path / "findings.json").read_text())
    assert doc["settings"]["resamples"] == report_cfg["resamples"] and len(doc["findings"]) == len(entries)
    by_id = {e["id"]: e for e in doc["findings"]}
    assert len(by_id["table1_gu_over_gc"]["cells"]) == 2
    assert (
        by_id["same_family_overlap"]["status"] == "not run"
        and "share a family" in by_id["same_family_overlap"]["reason"]
    )
    assert by_id["own_gold_beats_others_U_unknown_both"]["control_of"] == "own_gold_beats_others_U"
    verdicts = {"holds", "reversed", "inconclusive", "too few queries", "not run", "by construction"}
    assert {e["verdict"] for e in entries} <= verdicts
    # A dataset that stands for FEVER is out of the single-hop claims' scope, in the judgment claims'.
    assert by_id["table1_gu_over_gc"]["status"] == "out of scope" and by_id["table1_gu_over_gc"][
        "datasets_out_of_scope"
    ] == [DATASET]
    assert by_id["listwise_beats_pointwise"]["datasets"] == [DATASET]
    assert doc["settings"]["paper_datasets"] == {DATASET: ["fever"]}
    assert doc["settings"]["min_queries"] == report_cfg["min_queries"]
    assert (
        "| finding" in (tmp_path / "findings.md").read_text() and "<table" in (tmp_path / "findings.html").read_text()
    )
    # The summary alone, for the report's opening page: the same sentences as findings.md's.
    summary = (tmp_path / "findings_summary.rst").read_text()
    assert summary.startswith(f"This run tests 24 findings with {LLMS[0]} and {LLMS[1]}")
    assert "out of scope" in summary and summary.split(". ")[0] in (tmp_path / "findings.md").read_text()

    pipeline.transfer_unknown_job(
        answers={k: v for k, v in answers.items() if k[2] == "human" or k[2].startswith("gold_U")},
        known=known,
        llms=list(LLMS),
        candidates="U",
        csv=str(tmp_path / "tu.csv"),
        md=str(tmp_path / "tu.md"),
    )
    tu = pl.read_csv(tmp_path / "tu.csv")
    assert tu.height == 6 and (tu["n_unknown_both"] <= tu["n_queries"]).all()

    log = tmp_path / "judge.log"
    log.write_text(
        'x INFO llm_utility: store_stats {"llm": "std-a", "job": "j", "calls": {"generate": '
        '{"made": 3, "served": 1, "prompt_tokens": 30, "output_tokens": 6, "seconds": 0.5}}}\n'
    )
    bench = tmp_path / "judge.tsv"
    bench.write_text("s\th:m:s\tmax_rss\n2.5\t0:00:02\t100.0\n")
    jobs = [
        {
            "rule": "judge",
            "wildcards": {"dataset": DATASET, "llm": "std-a", "method": "listwise"},
            "log": str(log),
            "benchmark": str(bench),
        }
    ]
    pipeline.cost_job(jobs=jobs, csv=str(tmp_path / "cost.csv"), md=str(tmp_path / "cost.md"))
    cost = pl.read_csv(tmp_path / "cost.csv").row(0, named=True)
    assert (cost["calls_made"], cost["calls_served"], cost["prompt_tokens"], cost["wall_seconds"]) == (3, 1, 30, 2.5)

    pipeline.config_job(config={"seed": 13, "llms": {"std-a": {"family": "std"}}}, output=str(tmp_path / "config.yaml"))
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["llms"]["std-a"]["family"] == "std"

    # Table 1 and the judgment tables with intervals: lo/hi beside the values, small type in md/tex.
    t1 = {k: str(tmp_path / f"t1.{k}") for k in ("csv", "md", "tex")}
    pipeline.table1_job(
        answers={
            k: v
            for k, v in answers.items()
            if k[2] in ("none", "topk", "union", "human", f"gold_C_from_{k[1]}", f"gold_U_from_{k[1]}")
        },
        gold=gold,
        queries={DATASET: str(run["queries"])},
        intervals=report_cfg,
        **t1,
    )
    table = pl.read_csv(t1["csv"])
    # No re-ask answers given: one block, the answer prompt's.
    assert table.columns[:7] == ["block", "dataset", "llm", "column", "correct", "lo", "hi"] and set(
        table["block"]
    ) == {"answer"}
    assert ((table["lo"] <= table["correct"] + 1e-9) & (table["correct"] <= table["hi"] + 1e-9)).all()
    assert "<sub>[" in Path(t1["md"]).read_text() and r"\scriptsize" in Path(t1["tex"]).read_text()
    t2 = {k: str(tmp_path / f"t2.{k}") for k in ("csv", "md", "tex")}
    pipeline.selection_table_job(
        table="table2",
        judgments=judged,
        gold={(DATASET, llm): str(t / llm / "gold_C.parquet") for llm in LLMS},
        intervals=report_cfg,
        **t2,
    )
    t2_table = pl.read_csv(t2["csv"])
    assert t2_table.columns[t2_table.columns.index("f1") + 1 : t2_table.columns.index("f1") + 3] == ["f1_lo", "f1_hi"]
    assert "<sub>[" in Path(t2["md"]).read_text()


def test_attention_runs_in_a_session_of_its_own_when_the_llm_generates_elsewhere(run, tmp_path):
    """A vLLM model's attention comes from the transformers backend: a second session (and shard)
    after the first has closed its engine."""
    store = tmp_path / "store"
    out = tmp_path / "attention.parquet"
    pipeline.judge_job(
        dataset=DATASET,
        queries=run["queries"],
        candidates=run["candidates"],
        prompts=str(REPO / "config/prompts.yaml"),
        manifest=str(run["tmp"] / "std-a" / "manifest.json"),
        spec={**run["spec"], "backend": "vllm", "gpu": 1},
        store=str(store),
        job="judge",
        judgments={},
        rankings={"attention": str(out)},
        pseudo_answers={"topk": run["ans"]("std-a", "topk")},
        rankings_cfg=with_defaults("rankings", {}),
        max_queries=2,
    )
    assert pl.read_parquet(out)["qid"].unique().sort().to_list() == ["q1", "q2"]
    assert [p.name.split(".")[0] for p in sorted(store.glob("*.sqlite"))] == ["judge+attention"]


def test_a_sharded_job_gathers_to_the_unsharded_tables(run, tmp_path):
    """Query shards change no number: each part's job (its part's query ids, a store of its own, so
    nothing is served from the unsharded run) and the gather of the parts give frame-equal tables,
    row for row, for the answers (with and without derived tables) and for every judgment, ranking
    and perplexity, also when judgments.max_queries cuts across the parts."""
    from llm_utility.workflow.parts import part_name, part_queries

    prompts, rank_cfg = str(REPO / "config" / "prompts.yaml"), with_defaults("rankings", {})
    manifest = str(run["tmp"] / "std-a" / "manifest.json")
    answer_outputs = ("none", "single", "topk", "union", "human")
    gold_tables = {f"gold_U_from_{s}": str(run["tmp"] / s / "gold_U.parquet") for s in LLMS}
    methods = ("pointwise", "pointwise_pa", "listwise_pa")
    rankings = ("listwise_pa", "likelihood", "attention")
    parts = [part_name(i, 3) for i in (1, 2, 3)]  # 4 queries: parts of 2, 1 and 1
    for part in parts:
        qids = part_queries(str(run["queries"]), part, DATASET)
        here = tmp_path / part
        common = dict(
            dataset=DATASET,
            queries=run["queries"],
            candidates=run["candidates"],
            prompts=prompts,
            manifest=manifest,
            spec=run["spec"],
            store=str(here / "store"),
            qids=qids,
        )
        pipeline.answer_job(
            tables={},
            outputs={c: str(here / f"{c}.parquet") for c in answer_outputs},
            job=f"answer_candidates_{part}",
            **common,
        )
        pipeline.answer_job(
            tables=gold_tables,
            outputs={c: str(here / f"{c}.parquet") for c in gold_tables},
            job=f"answer_gold_U_{part}",
            **common,
        )
        pipeline.judge_job(
            job=f"judge_{part}",
            judgments={m: str(here / f"j_{m}.parquet") for m in methods},
            rankings={m: str(here / f"r_{m}.parquet") for m in rankings},
            perplexity=str(here / "perplexity.parquet"),
            gold_U=str(run["tmp"] / "std-a" / "gold_U.parquet"),
            pseudo_answers={"topk": run["ans"]("std-a", "topk")},
            max_new_tokens=JUDGE_CAPS,
            rankings_cfg={**rank_cfg, "attention_backend": "transformers"},
            max_queries=3,
            **common,
        )
    unsharded = {c: run["ans"]("std-a", c) for c in (*answer_outputs, *gold_tables)}
    unsharded |= {f"j_{m}": str(run["tmp"] / "std-a" / "judgments" / f"{m}.parquet") for m in methods}
    unsharded |= {f"r_{m}": str(run["tmp"] / "std-a" / "rankings" / f"{m}.parquet") for m in rankings}
    unsharded["perplexity"] = str(run["tmp"] / "std-a" / "perplexity.parquet")
    gathered = pipeline.gather_parts_job(
        parts={key: [str(tmp_path / part / f"{key}.parquet") for part in parts] for key in unsharded},
        outputs={key: str(tmp_path / "gathered" / f"{key}.parquet") for key in unsharded},
    )
    for key, path in unsharded.items():
        expected = pl.read_parquet(path)
        assert expected.height > 0, key
        assert_frame_equal(pl.read_parquet(tmp_path / "gathered" / f"{key}.parquet"), expected, check_exact=True)
        assert gathered[key].height == expected.height
    # Each part answered only its own queries, and the judge of the last part judged none (max_queries 3).
    assert pl.read_parquet(tmp_path / parts[0] / "none.parquet")["qid"].to_list() == ["q1", "q2"]
    assert pl.read_parquet(tmp_path / parts[2] / "j_pointwise.parquet").height == 0


def test_the_gather_refuses_parts_of_different_tables(tmp_path):
    pl.DataFrame({"qid": ["q1"], "x": [1]}).write_parquet(tmp_path / "a.parquet")
    pl.DataFrame({"qid": ["q2"], "x": ["one"]}).write_parquet(tmp_path / "b.parquet")
    with pytest.raises(ValueError, match="b.parquet: columns"):
        pipeline.gather_parts_job(
            parts={"t": [str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")]},
            outputs={"t": str(tmp_path / "t.parquet")},
        )
