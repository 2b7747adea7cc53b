"""The plans of the data, model and report stages (llm_utility.workflow.data_plan, model_plan,
report.plan) on real configs, validated against the schema as
the Snakefile validates them: which methods each judge job runs, the thinking pairs and Table 5's
methods, the contexts each table reads, and which model jobs exist. Expected values are written out
from the configs, not computed with the plan's own helpers."""

from __future__ import annotations

import copy

import pytest
import yaml
from snakemake.utils import update_config, validate

from llm_utility.data.paper import paper_datasets_of
from llm_utility.method.judgments import counterpart
from llm_utility.report.analysis import empty_answers_contexts, table1_contexts, table1_reask_contexts
from llm_utility.report.judgments import (
    figure9_contexts,
    figure9_method,
    known_rejection_methods,
    table3_contexts,
    table5_methods,
    table7_contexts,
)
from llm_utility.report.plan import ReportPlan
from llm_utility.workflow.checks import check_config
from llm_utility.workflow.data_plan import DataPlan
from llm_utility.workflow.model_plan import ModelPlan
from llm_utility.workflow.model_rules import model_jobs
from llm_utility.workflow.operational import results_config
from workflow_runner import REPO


def plans(config: dict) -> ReportPlan:
    """The three plans of ``config``: the report's, its ``model`` plan and that one's ``data`` plan."""
    return ReportPlan(ModelPlan(DataPlan(config)))


def _config(name: str, **changes) -> dict:
    cfg = yaml.safe_load((REPO / "config" / name).read_text())
    for dotted, value in changes.items():
        node = cfg
        *path, key = dotted.split("__")
        for part in path:
            node = node[part]
        node[key] = value
    validate(cfg, str(REPO / "config" / "schema.yaml"))
    check_config(cfg)
    return cfg


@pytest.fixture(scope="module")
def demo() -> ReportPlan:
    return plans(_config("config.yaml"))


@pytest.fixture(scope="module")
def paper() -> ReportPlan:
    return plans(_config("paper.yaml"))


def test_demo_judge_jobs_and_no_thinking(demo):
    # methods [pointwise, pointwise_pa, listwise_pa, listwise_pa_reject] + rag [pointwise_pa, listwise_pa];
    # no demo model can think, so no counterpart joins and Table 5 reads nothing.
    assert demo.model.judge_methods == ["pointwise", "pointwise_pa", "listwise_pa", "listwise_pa_reject"]
    assert demo.model.thinking_llms == [] and demo.model.thinking_pairs == []
    assert all(table5_methods(demo.model, d, llm) == [] for d in demo.datasets for llm in demo.model.llms)
    assert known_rejection_methods(demo.model) == ["listwise_pa", "listwise_pa_reject"]
    assert demo.model.model_rankings == ["listwise_pa", "likelihood", "attention"]  # retriever: no model
    assert figure9_method(demo.model) == "listwise_pa"
    assert demo.model.pseudo_contexts(demo.model.judge_methods) == ["topk"]


def test_paper_thinking_pairs_and_table5(paper):
    # One thinking model (qwen3-14b), on thinking_datasets [nq] only.
    assert paper.model.thinking_pairs == [("nq", "qwen3-14b")]
    assert table5_methods(paper.model, "nq", "qwen3-14b") == [
        "pointwise",
        "pointwise_pa",
        "listwise",
        "listwise_pa",
        "pointwise_think",
        "pointwise_pa_think",
        "pointwise_pat_think",
        "listwise_think",
        "listwise_pa_think",
        "listwise_pat_think",
    ]
    assert table5_methods(paper.model, "hotpotqa", "qwen3-14b") == []
    assert table5_methods(paper.model, "nq", "qwen3-8b") == []
    # Table 2's methods, then the rag ones, then the counterparts Table 5 compares with (all already there).
    assert paper.model.judge_methods == ["pointwise", "pointwise_pa", "listwise", "listwise_pa", "listwise_pa_reject"]
    assert paper.model.pseudo_contexts(paper.model.thinking_methods) == ["topk", "topk_think"]


def test_counterparts_join_the_judge_job_only_where_a_model_thinks():
    cfg = _config("config.yaml", judgments__thinking_methods=["listwise_think", "pointwise_pat_think"])
    assert plans(cfg).model.judge_methods == ["pointwise", "pointwise_pa", "listwise_pa", "listwise_pa_reject"]
    cfg = copy.deepcopy(cfg)
    cfg["llms"]["gemma3-270m"]["can_think"] = True
    plan = plans(cfg)
    assert plan.model.thinking_pairs == [(d, "gemma3-270m") for d in ("wf-single", "wf-twohop", "wf-claims")]
    assert plan.model.judge_methods == ["pointwise", "pointwise_pa", "listwise_pa", "listwise_pa_reject", "listwise"]
    assert table5_methods(plan.model, "wf-claims", "gemma3-270m") == [
        "listwise",
        "pointwise_pa",
        "listwise_think",
        "pointwise_pat_think",
    ]
    assert [counterpart(m) for m in ("pointwise_pat_think", "listwise_pa_think", "listwise_think")] == [
        "pointwise_pa",
        "listwise_pa",
        "listwise",
    ]


def test_model_jobs_of_the_demo(demo):
    pairs = [
        {"dataset": d, "llm": llm}
        for d in ("wf-single", "wf-twohop", "wf-claims")
        for llm in ("smollm2-135m", "gemma3-270m")
    ]
    expected = [("materialize_model", {"llm": "smollm2-135m"}), ("materialize_model", {"llm": "gemma3-270m"})]
    for rule in ("answer_candidates", "answer_gold", "judge"):
        expected += [(rule, wc) for wc in pairs]
    expected += [("answer_judgments", wc) for wc in pairs]
    expected += [("answer_reask", wc) for wc in pairs]
    # The runs stage: every LLM answers with BM25's top-k (MiniLM's is the topk answer already).
    expected += [("answer_run", {**wc, "run": "bm25"}) for wc in pairs]
    assert model_jobs(demo.model) == expected


def test_model_jobs_of_the_paper(paper):
    jobs = model_jobs(paper.model)
    rules = [rule for rule, _ in jobs]
    # datasets x LLMs, each rule's jobs of a dataset once per query shard of that rule
    # (config/paper.yaml's shards: judge in 2 + 4 + 4 + 9 + 3 + 7 = 29 parts per LLM, ...).
    per_llm = {
        "answer_candidates": 1 + 2 + 2 + 5 + 2 + 4,
        "judge": 29,
        "answer_judgments": 1 + 1 + 1 + 2 + 1 + 2,
        "answer_reask": 1 + 2 + 2 + 3 + 1 + 3,
        "answer_gold": 1 + 1 + 1 + 2 + 1 + 1,
    }
    assert {r: rules.count(r) for r in set(rules)} == {
        "materialize_model": 4,
        "answer_run": 24,
        **{r: n * 4 for r, n in per_llm.items()},
        "answer_thinking": 1,
        "judge_thinking": 37,  # qwen3-14b on NQ
    }
    assert ("judge_thinking", {"dataset": "nq", "llm": "qwen3-14b", "part": "1-of-37"}) in jobs
    assert ("answer_thinking", {"dataset": "nq", "llm": "qwen3-14b"}) in jobs


def test_no_thinking_answer_without_a_thinking_pseudo_answer_and_no_rag_job_without_rag_methods():
    cfg = _config(
        "config.yaml",
        judgments__thinking_methods=["listwise_think"],
        judgments__rag_methods=[],
        rankings__rag_methods=[],
    )
    cfg["llms"]["gemma3-270m"]["can_think"] = True
    rules = {rule for rule, _ in model_jobs(plans(cfg).model)}
    assert "judge_thinking" in rules and "answer_thinking" not in rules and "answer_judgments" not in rules


def test_contexts_each_table_reads(demo):
    assert table1_contexts("gemma3-270m") == [
        "none",
        "topk",
        "union",
        "human",
        "gold_C_from_gemma3-270m",
        "gold_U_from_gemma3-270m",
    ]
    assert empty_answers_contexts(demo.model, "gemma3-270m") == [
        "none",
        "single",
        "topk",
        "union",
        "human",
        "gold_C_from_gemma3-270m",
        "gold_U_from_gemma3-270m",
    ]
    assert table3_contexts(demo.model, "smollm2-135m") == [
        "topk",
        "selected_pointwise_pa_from_smollm2-135m",
        "selected_listwise_pa_from_smollm2-135m",
    ]
    assert table7_contexts(demo.model) == ["topk", "reranked_likelihood_top2", "reranked_listwise_pa_top2"]
    assert figure9_contexts(demo.model) == [
        "selected_listwise_pa_from_smollm2-135m",
        "selected_listwise_pa_from_gemma3-270m",
    ]
    assert demo.model.selection_sources()["selected_pointwise_pa_from_gemma3-270m"] == ("gemma3-270m", "pointwise_pa")
    assert demo.model.gold_sources("C") == {
        "gold_C_from_smollm2-135m": "smollm2-135m",
        "gold_C_from_gemma3-270m": "gemma3-270m",
    }
    assert demo.findings_contexts() == [
        "none",
        "topk",
        "union",
        "human",
        "gold_C_from_smollm2-135m",
        "gold_C_from_gemma3-270m",
        "gold_U_from_smollm2-135m",
        "gold_U_from_gemma3-270m",
        "selected_listwise_pa_from_smollm2-135m",
        "selected_listwise_pa_from_gemma3-270m",
        "reranked_likelihood_top2",
        "reranked_listwise_pa_top2",
    ]
    assert demo.findings_rankings() == ["retriever", "listwise_pa", "likelihood", "attention"]
    # The contract with the re-ask stage: every context Table 1 and the transfer findings evaluate.
    assert demo.findings_reask_contexts() == [
        "reask_none",
        "reask_human",
        "reask_topk",
        "reask_union",
        "reask_gold_C_from_smollm2-135m",
        "reask_gold_C_from_gemma3-270m",
        "reask_gold_U_from_smollm2-135m",
        "reask_gold_U_from_gemma3-270m",
    ]


def test_the_paper_datasets_a_configured_dataset_stands_for(demo):
    """The demo's flavours stand for the paper's kinds of query; the paper config's datasets are the
    paper's by name; a KILT file by its task; a dataset of one's own stands for none (every scope)."""
    assert demo.paper_datasets == {
        "wf-single": ["nq", "triviaqa"],
        "wf-twohop": ["hotpotqa", "2wikiqa"],
        "wf-claims": ["fever"],
    }
    assert demo.claim_scope() == {
        "single_hop": ["nq", "triviaqa", "msmarco-fqa"],
        "human_share": ["nq", "msmarco-fqa"],
        "all": ["nq", "triviaqa", "hotpotqa", "2wikiqa", "msmarco-fqa", "fever"],
        "triviaqa": ["triviaqa"],
    }
    paper = plans(_config("paper.yaml"))
    assert all(paper.paper_datasets[d] == [d] for d in paper.datasets)
    kilt = {"source": "kilt", "file": {"url": "http://dl.fbaipublicfiles.com/KILT/triviaqa-dev_id-kilt.jsonl"}}
    assert paper_datasets_of("tqa-sample", kilt) == ["triviaqa"]
    assert paper_datasets_of("mine", {"source": "local", "queries": "q.jsonl"}) is None
    assert paper_datasets_of("mine", {"source": "local", "queries": "q.jsonl", "paper_dataset": ["fever"]}) == ["fever"]


def test_reask_contexts_and_switch(demo, paper):
    assert demo.model.reask and paper.model.reask  # on by default, in the demo and the paper config
    assert demo.model.reask_contexts() == [
        "reask_none",
        "reask_human",
        "reask_topk",
        "reask_union",
        "reask_gold_C_from_smollm2-135m",
        "reask_gold_C_from_gemma3-270m",
        "reask_gold_U_from_smollm2-135m",
        "reask_gold_U_from_gemma3-270m",
    ]
    assert demo.model.reask_gold_sources()["reask_gold_U_from_gemma3-270m"] == ("gemma3-270m", "U")
    assert table1_reask_contexts(demo.model, "gemma3-270m") == [
        "reask_none",
        "reask_topk",
        "reask_union",
        "reask_human",
        "reask_gold_C_from_gemma3-270m",
        "reask_gold_U_from_gemma3-270m",
    ]
    off = plans(_config("config.yaml", reask={"enabled": False}))
    assert off.model.reask_contexts() == [] and table1_reask_contexts(off.model, "gemma3-270m") == []
    assert off.findings_reask_contexts() == []  # the findings then read no re-ask answer, present or not
    assert "answer_reask" not in {rule for rule, _ in model_jobs(off.model)}


def test_figures_and_fallbacks():
    plan = plans(
        _config("config.yaml", judgments__rag_methods=["pointwise_pa"], judgments__methods=["pointwise", "listwise_pa"])
    )
    assert figure9_method(plan.model) == "pointwise_pa"  # listwise_pa is not a rag method here
    assert known_rejection_methods(plan.model) == []  # listwise_pa_reject is not judged
    assert plan.transfer_figures == {
        "fig1_right_transfer": {"candidates": "U", "datasets": ["wf-single"]},
        "fig2_transfer_U": {"candidates": "U", "datasets": ["wf-single", "wf-twohop", "wf-claims"]},
        "fig8_transfer_C": {"candidates": "C", "datasets": ["wf-single", "wf-twohop", "wf-claims"]},
    }


def test_results_config_leaves_out_only_the_operational_settings(demo):
    kept = results_config(demo.config)
    assert set(demo.config) - set(kept) == {"store_dir", "gpu_lock_dir"}
    # Per LLM, only the Python its jobs run under (llms.<name>.python) is left out.
    assert kept["llms"] == {
        llm: {k: v for k, v in spec.items() if k != "python"} for llm, spec in demo.config["llms"].items()
    }
    assert all("python" in spec for spec in demo.config["llms"].values())


def test_data_checks_name_the_key():
    cfg = _config("config.yaml")
    cfg = copy.deepcopy(cfg)
    cfg["datasets"]["wf-single"]["source"] = "kilt"
    with pytest.raises(ValueError, match=r"config: datasets.wf-single: source 'kilt' needs `file`"):
        check_config(cfg)


def test_materializing_reads_only_the_weights_so_a_backend_switch_reruns_nothing_there(demo):
    """Rule materialize_model's spec param: the demo's and config/vllm-cpu.yaml's (vLLM, float32,
    another KV cache) are the same, so switching between them does not dequantize again; the model
    jobs' own spec does change."""
    overlay = yaml.safe_load((REPO / "config" / "vllm-cpu.yaml").read_text())["llms"]
    base = demo.model
    vllm = plans(
        _config(
            "config.yaml", **{f"llms__{llm}": {**base.config["llms"][llm], **spec} for llm, spec in overlay.items()}
        )
    ).model
    for llm in overlay:
        assert (
            base.weights_spec(llm)
            == vllm.weights_spec(llm)
            == {k: base.config["llms"][llm][k] for k in ("weights", "prompt_format")}
        )
        assert base.llm_spec(llm)["backend"] == "transformers" and vllm.llm_spec(llm)["backend"] == "vllm"


def test_the_judge_all_overlay_changes_only_how_many_queries_are_judged():
    """config/judge-all.yaml merged over the demo as Snakemake merges ``--configfile`` files: the
    judgment benchmark covers every query (``max_queries`` null, as the judge jobs read it) and no
    other key of the validated config moves."""
    demo_cfg = _config("config.yaml")
    merged = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    update_config(merged, yaml.safe_load((REPO / "config" / "judge-all.yaml").read_text()))
    validate(merged, str(REPO / "config" / "schema.yaml"))
    check_config(merged)
    assert demo_cfg["judgments"]["max_queries"] == 3 and merged["judgments"]["max_queries"] is None
    merged["judgments"]["max_queries"] = 3
    assert merged == demo_cfg
