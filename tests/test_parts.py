"""Query shards (llm_utility.workflow.parts) and runtime estimates (llm_utility.workflow.estimates):
which queries each part holds, the part jobs a config has, and each model job's expected time
against a hand computation."""

from __future__ import annotations

import copy
import math

import pytest
import yaml
from snakemake.utils import validate

from llm_utility.workflow import Plan, check_config
from llm_utility.workflow import estimates
from llm_utility.workflow.parts import parse_part, part_bounds, part_name, part_names, query_part
from workflow_runner import REPO


def _config(name: str) -> dict:
    cfg = yaml.safe_load((REPO / "config" / name).read_text())
    validate(cfg, str(REPO / "config" / "schema.yaml"))
    return cfg


@pytest.mark.parametrize("total", [1, 2, 7, 10, 12576])
@pytest.mark.parametrize("count", [1, 2, 3, 7])
def test_parts_are_contiguous_blocks_covering_every_query_once(total, count):
    if count > total:
        pytest.skip("more parts than queries")
    qids = [f"q{i}" for i in range(total)]
    parts = [query_part(qids, i, count) for i in range(1, count + 1)]
    assert sum(parts, []) == qids  # in order, each query in exactly one part
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 1
    assert parts == [query_part(qids, i, count) for i in range(1, count + 1)]  # deterministic


def test_part_bounds_written_out():
    # 10 queries in 3 parts: 4, 3, 3 (the first 10 % 3 = 1 part holds one more).
    assert [part_bounds(10, i, 3) for i in (1, 2, 3)] == [(0, 4), (4, 7), (7, 10)]
    assert query_part(["a", "b", "c", "d", "e"], 2, 2) == ["d", "e"]


def test_part_names_and_errors():
    assert part_names(1) == [] and part_names(3) == ["1-of-3", "2-of-3", "3-of-3"]
    assert parse_part(part_name(2, 4)) == (2, 4)
    for bad in ("0-of-2", "3-of-2", "2of4", "part-1-of-2"):
        with pytest.raises(ValueError, match="not a part name"):
            parse_part(bad)
    with pytest.raises(ValueError, match="datasets.nq.shards is 4, more than the dataset's 3 queries"):
        query_part(["a", "b", "c"], 1, 4, key="datasets.nq.shards")


def test_a_config_s_parts_and_part_jobs():
    cfg = _config("config.yaml")
    cfg["datasets"]["wf-twohop"]["shards"] = 3
    plan = Plan(cfg)
    assert plan.sharded_datasets == ["wf-twohop"] and plan.unsharded_datasets == ["wf-single", "wf-claims"]
    assert plan.parts("wf-twohop") == ["1-of-3", "2-of-3", "3-of-3"] and plan.parts("wf-single") == []
    unsharded = Plan(_config("config.yaml")).model_jobs()
    jobs = plan.model_jobs()
    # Every job of the sharded dataset three times, one per part; the others as they were.
    twohop = [(r, wc) for r, wc in unsharded if wc.get("dataset") == "wf-twohop"]
    assert len(jobs) == len(unsharded) + 2 * len(twohop)
    assert [(r, wc) for r, wc in jobs if "part" not in wc] == [(r, wc) for r, wc in unsharded if wc.get("dataset") != "wf-twohop"]
    assert ("judge", {"dataset": "wf-twohop", "llm": "smollm2-135m", "part": "2-of-3"}) in jobs
    # The scheduling keys never reach a job's params (setting them reruns nothing).
    assert "shards" not in plan.dataset_spec("wf-twohop") and "prefill_tokens_per_s" not in plan.llm_spec("smollm2-135m")


def test_more_shards_than_known_queries_is_a_config_error():
    cfg = _config("config.yaml")
    cfg["datasets"]["wf-single"]["shards"] = cfg["datasets"]["wf-single"]["n_queries"] + 1
    with pytest.raises(ValueError, match=r"datasets\.wf-single\.shards is 11, more than the dataset's 10 queries"):
        check_config(cfg)


def test_expected_queries():
    plan = Plan(_config("paper.yaml"))
    assert {d: plan.expected_queries(d) for d in plan.datasets} == {
        "nq": 2837, "triviaqa": 5359, "hotpotqa": 5600, "2wikiqa": 12576, "msmarco-fqa": 3199, "fever": 10245,
    }
    cfg = _config("paper.yaml")
    cfg["datasets"]["nq"]["limit"] = 200
    cfg["datasets"]["fever"]["expected_queries"] = 99
    del cfg["datasets"]["msmarco-fqa"]["ranking_queries"], cfg["datasets"]["msmarco-fqa"]["ranking_qrels"]
    plan = Plan(cfg)
    assert plan.expected_queries("nq") == 200 and plan.expected_queries("fever") == 99
    assert plan.expected_queries("msmarco-fqa") is None  # the whole QnA dev set: size unknown here
    assert Plan(_config("config.yaml")).expected_queries("wf-single") == 10


def _tiny_paper() -> dict:
    """config/paper.yaml cut to what a hand computation can follow: one dataset, one LLM with
    throughputs, top-4, the pointwise_pa and listwise methods, likelihood ranking only."""
    cfg = copy.deepcopy(_config("paper.yaml"))
    cfg["datasets"] = {"nq": cfg["datasets"]["nq"]}
    cfg["llms"] = {"qwen3-8b": {**cfg["llms"]["qwen3-8b"], "prefill_tokens_per_s": 1000, "decode_tokens_per_s": 100}}
    cfg["top_k"] = 4
    cfg["judgments"] = {"methods": ["pointwise_pa", "listwise"], "rag_methods": ["pointwise_pa"], "thinking_datasets": None}
    cfg["rankings"] = {"methods": ["retriever", "likelihood"], "rag_methods": ["likelihood"]}
    cfg["reask"] = {"enabled": False}
    cfg["runs"] = {"retrievers": ["bge-m3"]}
    cfg["resources"] = {"estimate": {"passage_tokens": 100, "human_passages": 1, "gold_passages": 2, "answer_tokens": 10, "startup_minutes": 5}}
    validate(cfg, str(REPO / "config" / "schema.yaml"))
    check_config(cfg)
    return cfg


def test_expected_seconds_by_hand():
    plan = Plan(_tiny_paper())
    # Answer prompts: 68 + n x (100 + 2) tokens with n passages; answers capped at 64 tokens.
    # answer_candidates per query: none (68), 5 single (170 each: U = 4 of C + 1 human), top-4 (476),
    # union of 5 (578), human (170): 68 + 850 + 476 + 578 + 170 = 2,142 prompt tokens, 9 x 64 = 576
    # output tokens.
    assert estimates.tokens_per_query(plan, "answer_candidates", "qwen3-8b") == (2142, 576)
    # judge per query: pointwise_pa 4 x (140 + 100 + 10) = 1,000 prompt, 4 x 8 output; listwise
    # 243 + 4 x (100 + 20) = 723 prompt, 128 output; likelihood 4 x (170 + 10) = 720; perplexity
    # 2 x 1 x (100 + 16) = 232: 2,675 prompt and 160 output tokens.
    assert estimates.tokens_per_query(plan, "judge", "qwen3-8b") == (2675, 160)
    # 2,837 NQ queries at 1,000 prompt and 100 output tokens a second, after two model sessions
    # (vLLM generates; attention is not configured, so one): 5 min = 300 s of startup.
    assert estimates.sessions(plan, "judge", "qwen3-8b") == 1
    expected = 300 + 2837 * (2675 / 1000 + 160 / 100)
    assert estimates.expected_seconds(plan, "judge", "qwen3-8b", 2837) == pytest.approx(expected)  # 12,428 s
    # As a runtime: times the margin (1.5), in minutes, rounded up: 18,642 s, 311 minutes.
    assert estimates.runtime_minutes(plan, "judge", {"dataset": "nq", "llm": "qwen3-8b"}) == 311
    part = {"dataset": "nq", "llm": "qwen3-8b", "part": "1-of-4"}  # 710 queries
    assert estimates.runtime_minutes(plan, "judge", part) == math.ceil((300 + 710 * (2.675 + 1.6)) * 1.5 / 60)
    # Shards needed: the longest job within 8 h / 1.5 = 19,200 s. That is answer_candidates, whose
    # output caps weigh most at 100 tokens a second: 2.142 + 5.76 = 7.902 s per query, 22,718 s for
    # all 2,837 queries (judge: 4.275 s per query); two shards of 1,419 queries take 11,513 s.
    assert estimates.longest_job(plan, "nq", 1) == (pytest.approx(300 + 2837 * 7.902), "answer_candidates", "qwen3-8b")
    assert estimates.shards_needed(plan, "nq") == 2
    # With runtime_margin 3 (9,600 s), three shards of at most 946 queries (7,775 s).
    cfg = _tiny_paper()
    cfg["resources"]["runtime_margin"] = 3
    assert estimates.shards_needed(Plan(cfg), "nq") == 3
    assert estimates.longest_job(Plan(cfg), "nq", 3) == (pytest.approx(300 + 946 * 7.902), "answer_candidates", "qwen3-8b")
    # The judge job's 12,428 s x 3 is 621 minutes: the runtime asked stops at the limit, 480.
    assert estimates.runtime_minutes(Plan(cfg), "judge", {"dataset": "nq", "llm": "qwen3-8b"}) == 480


def test_no_estimate_without_throughputs():
    plan = Plan(_config("config.yaml"))
    assert estimates.runtime_minutes(plan, "judge", {"dataset": "wf-single", "llm": "smollm2-135m"}) is None
    assert estimates.shards_needed(plan, "wf-single") is None


def test_the_paper_config_s_shards_fit_the_limit():
    """config/paper.yaml's shards keep every expected job within resources.max_job_hours / margin."""
    plan = Plan(_config("paper.yaml"))
    bound = plan.config["resources"]["max_job_hours"] * 3600 / plan.config["resources"]["runtime_margin"]
    for d in plan.datasets:
        assert plan.shards(d) >= estimates.shards_needed(plan, d), d
        assert estimates.longest_job(plan, d)[0] <= bound, d
