"""End to end: the whole DAG on a tiny worldfacts config with two tiny random LLMs built here.

One Snakemake run (a few minutes on 2 cores) checked from every side: every target exists, the gold
sets follow Eq. 1-2 from the answers, the judgments cover what they should, nothing was computed
twice, a rerun does nothing and makes no model call, a styling change reruns only figures, and a
job's script runs by hand with the workflow's own paths.

The run checks the wiring, not model numbers, so its LLMs are tiny random models of the demo
models' two kinds (tests/tiny_models.py: a chat Llama, a completion Gemma 3 with sliding-window
attention), in the demo's arithmetic (`dtype: auto`). What the demo models compute is checked
against transformers itself in test_hf_backend.py, test_cpu_engine.py and test_independent_checks.py.
"""

import json
import os
import re
import shutil
import subprocess
import sys

import polars as pl
import pytest
import yaml

from llm_utility.generation.host import HOST_DIR_ENV
from llm_utility.generation.store import count_rows
from llm_utility.method.answers import Candidates
from tiny_models import write_tiny_model
from workflow_runner import run_workflow, snakemake_cmd

pytestmark = pytest.mark.slow

TARGETS = [
    "results/tables/retrieval.md",
    "results/tables/table1_rag.md",
    "results/tables/table1_rag.tex",
    "results/tables/table1_rag.csv",
    "results/tables/empty_answers.md",
    "results/figures/fig1_left_topk.png",
    "results/figures/fig1_right_transfer.pdf",
    "results/figures/fig2_transfer_U.png",
    "results/figures/fig8_transfer_C.png",
    "results/figures/fig3_overlap.png",
    "results/tables/fig3_overlap.csv",
    "results/tables/table2_selection.md",
    "results/tables/table2_selection.tex",
    "results/tables/table3_rag_selection.md",
    "results/tables/table4_ranking.md",
    "results/tables/table5_thinking.md",
    "results/tables/table7_rag_reranked.md",
    "results/tables/table8_known_rejection.md",
    "results/figures/fig4_perplexity.png",
    "results/figures/fig9_selection_transfer.png",
    "results/tables/external_runs.md",
    "results/figures/external_runs.png",
    "results/tables/qrels_agreement.md",
    "results/wf-single/tiny-chat/qrels_U.txt",
    "results/findings.json",
    "results/tables/findings.md",
    "results/tables/findings.html",
    "results/tables/cost.csv",
    "results/tables/cost.md",
    "results/tables/transfer_unknown_both_U.md",
    "results/tables/transfer_unknown_both_C.csv",
    "results/config.yaml",
]
# Every table and figure marked for the report.
REPORTED = [
    "results/tables/findings.md",
    "results/tables/findings.html",
    "results/findings.json",
    "results/tables/findings_summary.rst",
    *(
        f"results/tables/{name}.md"
        for name in (
            "retrieval",
            "table1_rag",
            "empty_answers",
            "table6_datasets",
            "table2_selection",
            "table3_rag_selection",
            "table4_ranking",
            "table5_thinking",
            "table7_rag_reranked",
            "table8_known_rejection",
            "external_runs",
            "qrels_agreement",
            "transfer_unknown_both_U",
            "transfer_unknown_both_C",
            "cost",
        )
    ),
    *(
        f"results/figures/{name}.png"
        for name in (
            "fig1_left_topk",
            "fig1_right_transfer",
            "fig2_transfer_U",
            "fig8_transfer_C",
            "fig3_overlap",
            "fig4_perplexity",
            "fig9_selection_transfer",
            "external_runs",
        )
    ),
    "results/config.yaml",
]
# Rules that draw a figure (external_runs writes its table and its figure in one job).
FIGURE_RULES = {
    "figure_topk",
    "figure_transfer",
    "figure_overlap",
    "figure_perplexity",
    "figure_selection_transfer",
    "external_runs",
}


# The two LLMs (slug: architecture), of two families as the demo's are.
TINY_LLMS = {"tiny-chat": "llama", "tiny-base": "gemma3"}
CHAT, BASE = TINY_LLMS


def _tiny_llms(cfg, models):
    """The demo's LLM settings (arithmetic, threads, limits, stop strings) on tiny random weights."""
    demo = list(cfg["llms"].values())
    llms = {}
    for (slug, arch), like in zip(TINY_LLMS.items(), demo, strict=True):
        spec = {k: v for k, v in like.items() if k not in ("weights", "family", "prompt_format")}
        llms[slug] = {
            **spec,
            "weights": {"path": str(write_tiny_model(models / slug, arch))},
            "prompt_format": "chat" if arch == "llama" else "completion",
            "family": f"tiny-{arch}",
        }
    return llms


def _tiny_config(repo, workdir):
    cfg = yaml.safe_load((repo / "config" / "config.yaml").read_text())
    cfg["prompts"] = [str(repo / p) for p in cfg["prompts"]]
    cfg["llms"] = _tiny_llms(cfg, workdir / "tiny-models")
    # 258 passages instead of 1,346 with every country: the dense encoder's job is then seconds, not half a minute.
    cfg["corpora"]["worldfacts"].update(n_cities=20, n_countries=40)
    # QA and claims (verdict scoring); the two-hop set adds only more LLM calls, and `make test`
    # must stay within 15 minutes.
    del cfg["datasets"]["wf-twohop"]
    for ds in cfg["datasets"].values():
        ds["n_queries"] = 3
    # One rule's jobs in query shards (parts of 2 and 1 queries, then a gather): the rest of the
    # DAG reads the gathered tables, so every check below checks them too.
    cfg["datasets"]["wf-claims"]["shards"] = {"default": 1, "answer_candidates": 2}
    cfg["top_k"] = 3
    # Every method, including the listwise ones the demo leaves out for time.
    all_selections = ["pointwise", "pointwise_pa", "listwise", "listwise_pa", "listwise_pa_reject"]
    # One judged query per dataset: every judgment job and table runs; more queries only cost time.
    cfg["judgments"] = {**cfg.get("judgments", {}), "max_queries": 1, "methods": all_selections}
    all_rankings = ["retriever", "listwise", "listwise_pa", "likelihood", "attention"]
    cfg["rankings"] = {**cfg.get("rankings", {}), "methods": all_rankings}
    path = workdir / "tiny.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return cfg, path


@pytest.fixture(scope="module")
def demo(repo, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("e2e")
    cfg, cfg_path = _tiny_config(repo, workdir)
    # The demo's model hosts (keep_loaded), in a folder of this run's own.
    env = {**os.environ, HOST_DIR_ENV: str(workdir / "hosts")}
    out = run_workflow(repo, workdir, cfg_path, "--cores", "2", env=env)
    assert out.returncode == 0, out.stderr[-5000:]
    return workdir, cfg, cfg_path


def test_every_target_exists(demo):
    workdir, _, _ = demo
    for target in TARGETS:
        assert (workdir / target).stat().st_size > 0, target
    table = (workdir / "results/tables/table1_rag.md").read_text()
    assert CHAT in table and BASE in table
    assert "**" in table  # best per LLM marked


def test_model_jobs_reuse_their_llms_model_hosts(demo):
    workdir, cfg, _ = demo
    for llm, spec in cfg["llms"].items():
        assert spec["keep_loaded"]  # the demo's setting, which the tiny LLMs inherit
        hosts = [
            line
            for log in (workdir / "logs").rglob(f"{llm}*.log")
            for line in log.read_text().splitlines()
            if f"{llm}: model host, slot" in line
        ]
        started = [line for line in hosts if "started by this job" in line]
        # Every model job of the LLM was served by a host, and most by one an earlier job started.
        assert len(hosts) >= 10 and 1 <= len(started) < len(hosts) / 2, (llm, len(hosts), started)


def test_answers_and_gold_follow_eq1(demo):
    workdir, cfg, _ = demo
    for dataset in cfg["datasets"]:
        queries = pl.read_parquet(workdir / f"results/{dataset}/queries.parquet")
        cands = Candidates.from_table(pl.read_parquet(workdir / f"results/{dataset}/candidates.parquet"))
        for llm in cfg["llms"]:
            base = workdir / f"results/{dataset}/{llm}"
            none = pl.read_parquet(base / "answers/none.parquet")
            single = pl.read_parquet(base / "answers/single.parquet")
            assert none.height == queries.height
            assert single.height == sum(len(u) for u in cands.U.values())
            correct_alone = {(q, p[0]) for q, p, ok in single.select("qid", "pids", "correct").iter_rows() if ok}
            known = dict(none.select("qid", "correct").iter_rows())
            for name in ("C", "U"):
                gold = pl.read_parquet(base / f"gold_{name}.parquet")
                expected = {
                    (q, p)
                    for q, pool in cands.of(name).items()
                    for p in pool
                    if (q, p) in correct_alone and not known[q]
                }
                assert set(gold.iter_rows()) == expected
                answered = pl.read_parquet(base / f"answers/gold_{name}_from_{llm}.parquet")
                sizes = dict(answered.select("qid", pl.col("pids").list.len()).iter_rows())
                assert sizes == {q: sum(1 for g, _ in expected if g == q) for q in known}
            flags = pl.read_parquet(base / "known.parquet")
            assert dict(flags.iter_rows()) == known


def test_reask_reverses_the_passages_under_a_new_wording(demo):
    """The re-ask stage: every evaluation context answered again with its passages in reverse order,
    and none of its calls is an answer call (each query's re-asked no-passage call is made, never
    served from the none call), so Table 1 has its re-ask block."""
    workdir, cfg, _ = demo
    for dataset in cfg["datasets"]:
        for llm in cfg["llms"]:
            answers = workdir / f"results/{dataset}/{llm}/answers"
            bases = ["none", "human", "topk", "union"] + [
                f"gold_{c}_from_{source}" for c in "CU" for source in cfg["llms"]
            ]
            for base in bases:
                original = dict(pl.read_parquet(answers / f"{base}.parquet").select("qid", "pids").iter_rows())
                reask = dict(pl.read_parquet(answers / f"reask_{base}.parquet").select("qid", "pids").iter_rows())
                assert reask == {q: pids[::-1] for q, pids in original.items()}, (dataset, llm, base)
            log = (workdir / f"logs/answer_reask/{dataset}/{llm}.log").read_text()
            stats = json.loads(re.search(r"store_stats (\{.*\})", log).group(1))
            n_queries = cfg["datasets"][dataset]["n_queries"]
            assert stats["calls"]["generate"]["made"] >= n_queries
    t1 = pl.read_csv(workdir / "results/tables/table1_rag.csv")
    assert set(t1["block"]) == {"answer", "reask"}
    assert t1.filter(pl.col("block") == "reask").height == t1.filter(pl.col("block") == "answer").height
    assert "re-ask" in (workdir / "results/tables/table1_rag.md").read_text()


def _store_stats(workdir):
    """Calls made and served per LLM, added up over every job's store_stats log line."""
    made, served = {}, {}
    for log in (workdir / "logs").rglob("*.log"):
        for m in re.finditer(r"store_stats (\{.*\})", log.read_text()):
            s = json.loads(m.group(1))
            for kind in s["calls"].values():
                made[s["llm"]] = made.get(s["llm"], 0) + kind["made"]
                served[s["llm"]] = served.get(s["llm"], 0) + kind["served"]
    return made, served


def test_nothing_computed_twice(demo):
    workdir, cfg, _ = demo
    made, served = _store_stats(workdir)
    for llm in cfg["llms"]:
        assert made[llm] == count_rows(workdir / cfg["store_dir"] / llm)  # calls made == unique calls
        # An empty own gold set is the no-passage call again, so answer_gold must be served it from
        # the store: at least one served call per query whose G(C) or G(U) is empty.
        empty_gold = 0
        for d in cfg["datasets"]:
            empty = set()
            for c in "CU":
                answered = pl.read_parquet(workdir / f"results/{d}/{llm}/answers/gold_{c}_from_{llm}.parquet")
                empty |= set(answered.filter(pl.col("pids").list.len() == 0)["qid"].to_list())
            empty_gold += len(empty)
        assert served[llm] >= empty_gold


def test_a_sharded_rule_runs_in_parts_and_gathers_them_in_query_order(demo):
    workdir, cfg, _ = demo
    qids = pl.read_parquet(workdir / "results/wf-claims/queries.parquet")["qid"].to_list()
    parts = ["1-of-2", "2-of-2"]
    for llm in cfg["llms"]:
        for context in ("none", "single", "topk"):
            whole = pl.read_parquet(workdir / f"results/wf-claims/{llm}/answers/{context}.parquet")
            pieces = [
                pl.read_parquet(workdir / f"results/wf-claims/parts/{part}/{llm}/answers/{context}.parquet")
                for part in parts
            ]
            assert pl.concat(pieces).equals(whole)
            if context == "none":  # contiguous blocks of the query order, sizes 2 and 1
                assert [p["qid"].to_list() for p in pieces] == [qids[:2], qids[2:]]
        # Each part is its own job with its own log and store shard; the unsharded dataset has none.
        for part in parts:
            assert (workdir / f"logs/answer_candidates/wf-claims/parts/{part}/{llm}.log").is_file()
        # A part's store shard is named by its part (workflow.job_wildcards), a whole dataset's as always.
        shards = [f.name for f in (workdir / cfg["store_dir"] / llm).glob("answer_candidates+dataset=wf-claims+*")]
        assert sorted(name.split("part=")[1].split("+")[0].split(".")[0] for name in shards) == parts
        assert not (workdir / "results/wf-single/parts").exists()


def test_judgments_and_rankings_cover_the_judged_queries(demo):
    workdir, cfg, _ = demo
    for dataset in cfg["datasets"]:
        first = (
            pl.read_parquet(workdir / f"results/{dataset}/queries.parquet")["qid"]
            .head(cfg["judgments"]["max_queries"])
            .to_list()
        )
        cands = Candidates.from_table(pl.read_parquet(workdir / f"results/{dataset}/candidates.parquet"))
        for llm in cfg["llms"]:
            for method in ("pointwise", "listwise_pa", "listwise_pa_reject"):
                table = pl.read_parquet(workdir / f"results/{dataset}/{llm}/judgments/{method}.parquet")
                assert table["qid"].unique(maintain_order=True).to_list() == first  # judgments.max_queries
                assert table.height == sum(len(cands.C[q]) for q in first)
            for method in ("retriever", "listwise", "likelihood", "attention"):
                table = pl.read_parquet(workdir / f"results/{dataset}/{llm}/rankings/{method}.parquet")
                for q in first:
                    ranks = table.filter(pl.col("qid") == q).sort("rank")
                    assert ranks["rank"].to_list() == list(range(1, len(cands.C[q]) + 1))
                    assert set(ranks["pid"]) == set(cands.C[q])
            attention = pl.read_parquet(workdir / f"results/{dataset}/{llm}/rankings/attention.parquet")
            sums = attention.group_by("qid").agg(pl.col("score").sum())["score"].to_list()
            assert all(abs(s - 1) < 1e-6 for s in sums)  # normalized across passages (Eq. 6)


def test_findings_transfer_control_and_cost(demo):
    workdir, cfg, _ = demo
    doc = json.loads((workdir / "results/findings.json").read_text())
    found = {e["id"]: e for e in doc["findings"]}
    assert doc["settings"]["datasets"] == list(cfg["datasets"]) and len(found) == 35
    verdicts = {"holds", "reversed", "inconclusive", "too few queries", "not run", "by construction"}
    assert {e["verdict"] for e in found.values()} <= verdicts
    # Below report.min_queries no finding reads inconclusive: that verdict means its interval holds 0.
    few = [e for e in found.values() if e["status"] == "run" and 0 < e["n"] < doc["settings"]["min_queries"]]
    assert all(e["verdict"] in ("too few queries", "by construction") for e in few)
    # Every finding says whether it can fail; the one that cannot is described, not tested.
    assert {e["construction"] for e in found.values()} == {"can_fail", "partly_built_in", "cannot_fail"}
    lose = found["known_lose_with_human"]
    assert lose["construction"] == "cannot_fail" and lose["verdict"] == "by construction" and lose["description"]
    assert found["table1_gc_over_human_reask"]["twin_of"] == "table1_gc_over_human"
    # Table 1's claims are the paper's single-hop ones: the demo's single-hop dataset is pooled, the
    # others are shown as cells out of scope; the judgment claims cover every dataset.
    assert found["table1_c_over_none"]["datasets"] == ["wf-single"]
    assert found["table1_c_over_none"]["datasets_out_of_scope"] == [d for d in cfg["datasets"] if d != "wf-single"]
    assert found["listwise_pa_ranks_best"]["datasets"] == list(cfg["datasets"])
    # The demo's two LLMs are of two families: nothing to compare, and it says why.
    assert (
        found["same_family_overlap"]["status"] == "not run"
        and "share a family" in found["same_family_overlap"]["reason"]
    )
    table1 = found["table1_c_over_none"]
    assert table1["status"] == "run" and len(table1["cells"]) == len(cfg["datasets"]) * len(cfg["llms"])
    assert all(c["n"] == cfg["datasets"][c["dataset"]]["n_queries"] for c in table1["cells"])
    assert found["own_gold_beats_others_U_unknown_both"]["control_of"] == "own_gold_beats_others_U"
    md = (workdir / "results/tables/findings.md").read_text()
    assert md.startswith("# Findings\n\n## What this run establishes\n\nThis run tests 24 findings")
    control = pl.read_csv(workdir / "results/tables/transfer_unknown_both_U.csv")
    n_llms = len(cfg["llms"])
    assert control.height == len(cfg["datasets"]) * (n_llms + 1) * n_llms
    assert (control["n_unknown_both"] <= control["n_queries"]).all()
    # Table 1 carries its intervals (report.intervals defaults to true).
    t1 = pl.read_csv(workdir / "results/tables/table1_rag.csv")
    assert {"lo", "hi"} <= set(t1.columns) and "<sub>[" in (workdir / "results/tables/table1_rag.md").read_text()
    # Cost: every call made is in the store once; the benchmarks give wall time.
    cost = pl.read_csv(workdir / "results/tables/cost.csv")
    for llm in cfg["llms"]:
        total = cost.filter((pl.col("rule") == "total") & (pl.col("llm") == llm)).row(0, named=True)
        assert total["calls_made"] == count_rows(workdir / cfg["store_dir"] / llm)
        assert total["prompt_tokens"] > 0 and total["output_tokens"] > 0
    answers = cost.filter(pl.col("rule") == "answer_candidates")
    # A query shard is a job of its own: wf-claims answers its candidates in two parts.
    parts = {d: (ds.get("shards") or {}).get("answer_candidates", 1) for d, ds in cfg["datasets"].items()}
    assert parts == {"wf-single": 1, "wf-claims": 2}
    assert answers["jobs"].sum() == sum(parts.values()) * n_llms and (answers["wall_seconds"] > 0).all()
    assert set(cost.filter(pl.col("rule") == "judge")["method"]) >= {"pointwise", "listwise_pa", "listwise_pa_reject"}
    # The qrels at work: MiniLM's and BM25's runs by every judge, every LLM answering with BM25's
    # top-k (one job per dataset and LLM), and the finding with its construction label.
    runs = pl.read_csv(workdir / "results/tables/external_runs.csv")
    for dataset in cfg["datasets"]:
        part = runs.filter(pl.col("dataset") == dataset)
        assert set(part["run"]) == {"minilm", "bm25"} and set(part["judge"]) == {"Human", *cfg["llms"]}
        assert (part.filter(pl.col("run") == "minilm")["pool_run"]).all()
    assert cost.filter(pl.col("rule") == "answer_run")["jobs"].sum() == len(cfg["datasets"]) * n_llms
    qrels = found["llm_qrels_predict_rag"]
    assert qrels["construction"] == "partly_built_in" and qrels["status"] == "run"
    assert {c["llm"] for c in qrels["cells"]} <= set(cfg["llms"])
    agreement = pl.read_csv(workdir / "results/tables/qrels_agreement.csv")
    assert set(agreement["queries"]) <= {"all", "unknown"} and (agreement["runs"] == 2).all()
    # Every model job left its log and benchmark (materialize_model runs here only for a model the
    # suite had not dequantized yet: the models folder is shared).
    ran = cost.filter(pl.col("rule") != "materialize_model")
    assert (ran["missing"].fill_null("") == "").all(), ran.filter(pl.col("missing") != "")


def test_report_holds_every_table_and_figure(repo, demo):
    """`snakemake --report report.zip` from the e2e run: every table and figure, captions, findings first."""
    import zipfile

    workdir, _, cfg_path = demo
    out = run_workflow(repo, workdir, cfg_path, "--report", "report.zip")
    assert out.returncode == 0, out.stderr[-3000:]
    with zipfile.ZipFile(workdir / "report.zip") as z:
        names = z.namelist()
        html = z.read(next(n for n in names if n.endswith("report.html"))).decode()
    stored = {n.rsplit("/", 1)[-1] for n in names}
    for target in REPORTED:
        assert target.rsplit("/", 1)[-1] in stored, target
        assert target in html, target
    assert "start here" in html  # the findings caption
    assert "How to read it" in html  # the workflow description (report/workflow.rst)
    assert "What this run establishes" in html and "This run tests 24 findings" in html  # its findings summary
    categories = json.loads(re.search(r"var categories = (\{.*?\});", html).group(1))
    assert sorted(categories)[0] == "1 Findings"
    assert "results/config.yaml" in json.dumps(categories["5 Config"])


def test_rerun_makes_no_call_and_styling_reruns_only_figures(repo, demo):
    workdir, cfg, cfg_path = demo
    again = run_workflow(repo, workdir, cfg_path, "-n", "--cores", "2")
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr
    # Forcing the model jobs of one dataset and LLM to run again makes no model call: the store
    # serves every one (one pair's judge, RAG-with-judgments and re-ask jobs, their outputs as targets
    # so no table reruns: the same code runs for every pair, and the suite must fit in 15 minutes).
    rows = {llm: count_rows(workdir / cfg["store_dir"] / llm) for llm in cfg["llms"]}
    pair = f"results/wf-single/{CHAT}"
    method = cfg["judgments"]["rag_methods"][0]
    targets = [
        f"{pair}/perplexity.parquet",
        f"{pair}/answers/selected_{method}_from_{BASE}.parquet",
        f"{pair}/answers/reask_none.parquet",
    ]
    forced = run_workflow(
        repo, workdir, cfg_path, "--cores", "2", *targets, "--forcerun", "judge", "answer_judgments", "answer_reask"
    )
    assert forced.returncode == 0, forced.stderr[-3000:]
    assert {llm: count_rows(workdir / cfg["store_dir"] / llm) for llm in cfg["llms"]} == rows
    assert {"judge", "answer_judgments", "answer_reask"} <= set(
        re.findall(r"\(Rule: (\w+)\)", forced.stdout + forced.stderr)
    )
    # The forced outputs are newer than the tables that read them: mark those current (their inputs'
    # bytes did not change) so that the dry-runs below and the later tests start from a current DAG.
    touched = run_workflow(repo, workdir, cfg_path, "--touch", "--cores", "1")
    assert touched.returncode == 0, touched.stderr[-3000:]
    styled = dict(cfg, figures={**cfg["figures"], "dpi": cfg["figures"]["dpi"] + 50})
    styled_path = workdir / "styled.yaml"
    styled_path.write_text(yaml.safe_dump(styled, sort_keys=False))
    dry = run_workflow(repo, workdir, styled_path, "-n", "--cores", "2")
    text = dry.stdout + dry.stderr
    assert dry.returncode == 0, text[-3000:]
    jobs = set(re.findall(r"^(\w+)\s+\d+$", text.split("Job stats:")[1].split("Reasons:")[0], re.M)) - {"total", "job"}
    assert jobs - {"all"} == FIGURE_RULES | {"config_report"}  # the report's config shows the new style
    # Moving where the GPU locks and the store live changes no result (operational settings, not
    # parameters).
    moved = dict(cfg, gpu_lock_dir=str(workdir / "elsewhere-locks"), store_dir=str(workdir / "elsewhere-store"))
    moved_path = workdir / "moved.yaml"
    moved_path.write_text(yaml.safe_dump(moved, sort_keys=False))
    dry = run_workflow(repo, workdir, moved_path, "-n", "--cores", "2")
    assert dry.returncode == 0 and "Nothing to be done" in dry.stdout + dry.stderr


def _reordered(value, keep_order=()):
    """``value`` with the keys of every mapping in reverse order, at any depth (the entries of the
    top-level ``keep_order`` collections keep their order; their own keys are reversed)."""
    if isinstance(value, dict):
        return {
            k: ({n: _reordered(e) for n, e in value[k].items()} if k in keep_order else _reordered(value[k]))
            for k in reversed(list(value))
        }
    if isinstance(value, list):
        return [_reordered(v) for v in value]
    return value


def test_a_reordered_config_reruns_nothing(repo, demo):
    """Snakemake compares params by repr, which follows key order: the workflow canonicalizes its
    config, so the same config with every mapping's keys reversed is the same config."""
    workdir, cfg, _ = demo
    reordered = workdir / "reordered.yaml"
    reordered.write_text(yaml.safe_dump(_reordered(cfg, keep_order=("datasets", "llms")), sort_keys=False))
    dry = run_workflow(repo, workdir, reordered, "-n", "--cores", "2")
    assert dry.returncode == 0 and "Nothing to be done" in dry.stdout + dry.stderr, (dry.stdout + dry.stderr)[-3000:]
    # The order of the datasets and of the LLMs is the order of the tables' rows and columns:
    # reversing it lays out the tables, figures, explorer and findings again, and computes nothing else.
    swapped = workdir / "swapped.yaml"
    swapped.write_text(yaml.safe_dump(_reordered(cfg), sort_keys=False))
    dry = run_workflow(repo, workdir, swapped, "-n", "--cores", "2")
    text = dry.stdout + dry.stderr
    assert dry.returncode == 0, text[-3000:]
    outputs = [o for line in re.findall(r"^\s+output: (.*)$", text, re.M) for o in line.split(", ")]
    laid_out = [
        o
        for o in outputs
        if o.startswith(("results/tables/", "results/figures/", "results/explorer/"))
        or o in ("results/findings.json", "results/config.yaml")
    ]
    assert outputs and laid_out == outputs, sorted(set(outputs) - set(laid_out))


def test_two_workflows_sharing_a_store_compute_every_call_once(repo, demo, tmp_path):
    """The e2e workflow copied into two working directories that share one fresh store_dir, the same
    answer job forced in both at once: neither fails, together they make each call once, and both
    write the answers of the original run."""
    workdir, cfg, cfg_path = demo
    store = tmp_path / "shared-store"
    target = f"results/wf-single/{CHAT}/answers/none.parquet"
    copies = [tmp_path / "workflow-1", tmp_path / "workflow-2"]
    for copy in copies:
        # Not the run's model hosts: their sockets may still be live (they idle keep_loaded seconds).
        shutil.copytree(workdir, copy, symlinks=True, ignore=shutil.ignore_patterns("cache", "locks", "hosts"))
    procs = [
        subprocess.Popen(
            snakemake_cmd(
                "--snakefile",
                str(repo / "Snakefile"),
                "--directory",
                str(copy),
                "--configfile",
                str(cfg_path),
                "--config",
                f"store_dir={store}",
                "--cores",
                "1",
                target,
                "--forcerun",
                "answer_candidates",
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for copy in copies
    ]
    outs = [p.communicate(timeout=1500)[0] for p in procs]
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out[-3000:]
    stats = []
    for copy in copies:
        log = (copy / f"logs/answer_candidates/wf-single/{CHAT}.log").read_text()
        stats.append(json.loads(re.search(r"store_stats (\{.*\})", log).group(1))["calls"]["generate"])
    made, served = [s["made"] for s in stats], [s["served"] for s in stats]
    print(f"two workflows, one store: made {made}, served {served}")  # reported numbers (pytest -s)
    unique = count_rows(store / CHAT)
    assert sum(made) == unique and all(m + s == unique for m, s in zip(made, served))
    for copy in copies:
        for context in ("none", "single", "topk", "union", "human"):
            answers = f"results/wf-single/{CHAT}/answers/{context}.parquet"
            assert pl.read_parquet(copy / answers).equals(pl.read_parquet(workdir / answers)), (copy, context)


def test_a_job_runs_by_hand_with_the_workflows_paths(repo, demo):
    """Every script builds its `snakemake` object with mock_snakemake when run by hand."""
    workdir, _, cfg_path = demo
    table = workdir / "results/tables/table2_selection.csv"
    before = table.read_text()
    table.unlink()
    out = subprocess.run(
        [sys.executable, str(repo / "workflow/scripts/selection_table.py"), "table2", "--configfile", str(cfg_path)],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert table.read_text() == before
