"""Query shards (llm_utility.workflow.parts) and runtime estimates (llm_utility.workflow.estimates):
which queries each part holds, the part jobs a config has, and each model job's expected time
against a hand computation."""

from __future__ import annotations

import copy
import math
import re

import pytest
import yaml
from snakemake.utils import validate

from llm_utility.workflow import estimates
from llm_utility.workflow.checks import check_config
from llm_utility.workflow.data_plan import DataPlan
from llm_utility.workflow.model_plan import ModelPlan
from llm_utility.workflow.model_rules import MODEL_RULE_NAMES, QUERY_PART_RULES, all_parts, model_jobs
from llm_utility.workflow.parts import (
    job_wildcards,
    parse_part,
    part_bounds,
    part_dir,
    part_name,
    part_names,
    part_of_dir,
    query_part,
)
from workflow_runner import REPO


def model_plan(config: dict) -> ModelPlan:
    return ModelPlan(DataPlan(config))


def _config(name: str) -> dict:
    cfg = yaml.safe_load((REPO / "config" / name).read_text())
    validate(cfg, str(REPO / "config" / "schema.yaml"))
    return cfg


@pytest.mark.parametrize(
    ("total", "count"),
    [(t, c) for t in (1, 2, 7, 10, 12576) for c in (1, 2, 3, 7) if c <= t],  # more parts than queries: an error, below
)
def test_parts_are_contiguous_blocks_covering_every_query_once(total, count):
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


def test_a_part_s_folder_in_paths_and_wildcards():
    """A model job's `part_dir` wildcard: its part's folder, empty for the whole dataset."""
    assert part_dir("2-of-4") == "parts/2-of-4/" and part_dir(None) == ""
    assert part_of_dir("parts/2-of-4/") == "2-of-4" and part_of_dir("") is None
    with pytest.raises(ValueError, match="not a part folder"):
        part_of_dir("2-of-4")
    # As the plan lists jobs: the part by its name, nothing for the whole dataset.
    assert job_wildcards({"dataset": "nq", "llm": "q", "part_dir": "parts/1-of-2/"}) == {
        "dataset": "nq",
        "llm": "q",
        "part": "1-of-2",
    }
    assert job_wildcards({"dataset": "nq", "llm": "q", "part_dir": ""}) == {"dataset": "nq", "llm": "q"}


def test_a_config_s_parts_and_part_jobs():
    cfg = _config("config.yaml")
    cfg["datasets"]["wf-twohop"]["shards"] = 3
    plan = model_plan(cfg)
    assert plan.sharded_datasets("judge") == ["wf-twohop"] and plan.unsharded_datasets("judge") == [
        "wf-single",
        "wf-claims",
    ]
    assert plan.parts("wf-twohop", "judge") == ["1-of-3", "2-of-3", "3-of-3"] and plan.parts("wf-single", "judge") == []
    unsharded = model_jobs(model_plan(_config("config.yaml")))
    jobs = model_jobs(plan)
    # Every job of the sharded dataset three times, one per part; the others as they were.
    twohop = [(r, wc) for r, wc in unsharded if wc.get("dataset") == "wf-twohop"]
    assert len(jobs) == len(unsharded) + 2 * len(twohop)
    assert [(r, wc) for r, wc in jobs if "part" not in wc] == [
        (r, wc) for r, wc in unsharded if wc.get("dataset") != "wf-twohop"
    ]
    assert ("judge", {"dataset": "wf-twohop", "llm": "smollm2-135m", "part": "2-of-3"}) in jobs
    # The scheduling keys never reach a job's params (setting them reruns nothing).
    assert "shards" not in plan.data.dataset_spec("wf-twohop") and "prefill_tokens_per_s" not in plan.llm_spec(
        "smollm2-135m"
    )


def test_shards_per_rule():
    cfg = _config("config.yaml")
    cfg["datasets"]["wf-twohop"]["shards"] = {"default": 2, "judge": 4, "answer_run": 1}
    cfg["datasets"]["wf-single"]["shards"] = {"answer_gold": 3}  # default: 1
    plan = model_plan(cfg)
    assert [plan.shards("wf-twohop", r) for r in ("judge", "answer_run", "answer_candidates")] == [4, 1, 2]
    assert [plan.shards("wf-single", r) for r in ("answer_gold", "answer_reask", "judge")] == [3, 1, 1]
    assert plan.sharded_datasets("judge") == ["wf-twohop"] and plan.sharded_datasets("answer_run") == []
    assert plan.sharded_datasets("answer_gold") == ["wf-single", "wf-twohop"]
    assert plan.unsharded_datasets("answer_gold") == ["wf-claims"]
    assert all_parts(plan) == sorted(
        {"1-of-2", "2-of-2", "1-of-3", "2-of-3", "3-of-3", "1-of-4", "2-of-4", "3-of-4", "4-of-4"}
    )
    base = model_jobs(model_plan(_config("config.yaml")))
    jobs = model_jobs(plan)

    def count(rule, dataset):
        return sum(1 for r, wc in jobs if r == rule and wc["dataset"] == dataset), sum(
            1 for r, wc in base if r == rule and wc["dataset"] == dataset
        )

    # Each (rule, dataset)'s jobs: its own count of parts per job of the unsharded plan.
    assert count("judge", "wf-twohop") == (4 * 2, 2) and count("answer_run", "wf-twohop") == (2, 2)
    assert count("answer_candidates", "wf-twohop") == (2 * 2, 2) and count("judge", "wf-single") == (2, 2)
    assert count("answer_gold", "wf-single") == (3 * 2, 2) and count("answer_reask", "wf-single") == (2, 2)
    assert ("answer_run", {"dataset": "wf-twohop", "llm": "smollm2-135m", "run": "bm25"}) in jobs
    assert plan.shards_key("wf-twohop", "judge") == "datasets.wf-twohop.shards.judge"
    assert plan.shards_key("wf-twohop", "answer_gold") == "datasets.wf-twohop.shards.default"
    assert model_plan(_config("config.yaml")).shards_key("wf-twohop", "judge") == "datasets.wf-twohop.shards"
    # An integer and a mapping of only a default are the same plan.
    cfg["datasets"]["wf-single"]["shards"] = {"default": 3}
    cfg["datasets"]["wf-twohop"]["shards"] = 3
    other = _config("config.yaml")
    other["datasets"]["wf-single"]["shards"], other["datasets"]["wf-twohop"]["shards"] = 3, {"default": 3}
    assert model_jobs(model_plan(cfg)) == model_jobs(model_plan(other))


@pytest.mark.parametrize(
    "shards, message",
    [
        (
            {"default": 2, "judge_thinkng": 3},
            r"datasets\.wf-single\.shards\.judge_thinkng: not a model rule that can be sharded",
        ),
        ({"judge_part": 2}, r"datasets\.wf-single\.shards\.judge_part: not a model rule"),
        ({"judge": 11}, r"datasets\.wf-single\.shards\.judge is 11, more than the dataset's 10 queries"),
        (
            {"default": 11, "judge": 2},
            r"datasets\.wf-single\.shards\.default is 11, more than the dataset's 10 queries",
        ),
        (11, r"datasets\.wf-single\.shards is 11, more than the dataset's 10 queries"),
    ],
)
def test_bad_shards_are_config_errors_naming_the_key(shards, message):
    cfg = _config("config.yaml")
    cfg["datasets"]["wf-single"]["shards"] = shards
    with pytest.raises(ValueError, match=message):
        check_config(cfg)


@pytest.mark.parametrize("shards", [0, {"judge": 0}, {}, {"judge": "2"}, "auto"])
def test_the_schema_refuses_shards_that_are_not_counts(shards):
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    cfg["datasets"]["wf-single"]["shards"] = shards
    with pytest.raises(Exception, match="shards"):
        validate(cfg, str(REPO / "config" / "schema.yaml"))


def test_the_model_rules_that_run_in_query_parts():
    """The keys a shards mapping takes are the model rules table's rules that run in query parts (the
    schema's description says where they are listed, and which one does not); every model rule
    registers its files (rules/parts.smk: `model_rule_files`, which refuses a rule missing from the
    table)."""
    schema = yaml.safe_load((REPO / "config" / "schema.yaml").read_text())
    description = " ".join(
        schema["properties"]["datasets"]["additionalProperties"]["properties"]["shards"]["description"].split()
    )
    assert "llm_utility.workflow.model_rules" in description
    assert (
        set(MODEL_RULE_NAMES) - set(QUERY_PART_RULES) == {"materialize_model"}
        and "but materialize_model" in description
    )
    registered = set()
    for path in (REPO / "rules").glob("*.smk"):
        registered |= set(re.findall(r'model_rule_files\(\s*"(\w+)"', path.read_text()))
    assert registered == set(MODEL_RULE_NAMES)


def test_more_shards_than_known_queries_is_a_config_error():
    cfg = _config("config.yaml")
    cfg["datasets"]["wf-single"]["shards"] = cfg["datasets"]["wf-single"]["n_queries"] + 1
    with pytest.raises(ValueError, match=r"datasets\.wf-single\.shards is 11, more than the dataset's 10 queries"):
        check_config(cfg)


def test_expected_queries():
    plan = model_plan(_config("paper.yaml"))
    assert {d: plan.data.expected_queries(d) for d in plan.datasets} == {
        "nq": 2837,
        "triviaqa": 5359,
        "hotpotqa": 5600,
        "2wikiqa": 12576,
        "msmarco-fqa": 3199,
        "fever": 10245,
    }
    cfg = _config("paper.yaml")
    cfg["datasets"]["nq"]["limit"] = 200
    cfg["datasets"]["fever"]["expected_queries"] = 99
    del cfg["datasets"]["msmarco-fqa"]["ranking_queries"], cfg["datasets"]["msmarco-fqa"]["ranking_qrels"]
    plan = model_plan(cfg)
    assert plan.data.expected_queries("nq") == 200 and plan.data.expected_queries("fever") == 99
    assert plan.data.expected_queries("msmarco-fqa") is None  # the whole QnA dev set: size unknown here
    assert model_plan(_config("config.yaml")).data.expected_queries("wf-single") == 10


def _tiny_paper() -> dict:
    """config/paper.yaml cut to what a hand computation can follow: one dataset, one LLM with
    throughputs, top-4, the pointwise_pa and listwise methods, likelihood ranking only."""
    cfg = copy.deepcopy(_config("paper.yaml"))
    cfg["datasets"] = {"nq": cfg["datasets"]["nq"]}
    cfg["llms"] = {"qwen3-8b": {**cfg["llms"]["qwen3-8b"], "prefill_tokens_per_s": 1000, "decode_tokens_per_s": 100}}
    cfg["top_k"] = 4
    cfg["judgments"] = {
        "methods": ["pointwise_pa", "listwise"],
        "rag_methods": ["pointwise_pa"],
        "thinking_datasets": None,
    }
    cfg["rankings"] = {"methods": ["retriever", "likelihood"], "rag_methods": ["likelihood"]}
    cfg["reask"] = {"enabled": False}
    cfg["runs"] = {"retrievers": ["bge-m3"]}
    cfg["resources"] = {
        "estimate": {
            "passage_tokens": 100,
            "human_passages": 1,
            "gold_passages": 2,
            "answer_tokens": 10,
            "startup_minutes": 5,
        }
    }
    validate(cfg, str(REPO / "config" / "schema.yaml"))
    check_config(cfg)
    return cfg


def test_expected_seconds_by_hand():
    plan = model_plan(_tiny_paper())
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
    assert estimates.shards_needed(model_plan(cfg), "nq") == 3
    assert estimates.longest_job(model_plan(cfg), "nq", 3) == (
        pytest.approx(300 + 946 * 7.902),
        "answer_candidates",
        "qwen3-8b",
    )
    # The judge job's 12,428 s x 3 is 621 minutes: the runtime asked stops at the limit, 480.
    assert estimates.runtime_minutes(model_plan(cfg), "judge", {"dataset": "nq", "llm": "qwen3-8b"}) == 480


def test_no_estimate_without_throughputs():
    plan = model_plan(_config("config.yaml"))
    assert estimates.runtime_minutes(plan, "judge", {"dataset": "wf-single", "llm": "smollm2-135m"}) is None
    assert estimates.shards_needed(plan, "wf-single") is None


def test_shards_needed_per_rule():
    """Each rule's fewest shards: the dataset's is the most any rule needs; a long rule no longer
    multiplies the others."""
    plan = model_plan(_tiny_paper())
    # answer_candidates (7.902 s per query: 22,718 s unsharded) needs 2 shards; judge (4.275 s per
    # query: 12,428 s) fits 19,200 s in one job; answer_gold_* and answer_judgments easily.
    assert estimates.shards_needed(plan, "nq", "answer_candidates") == 2
    assert estimates.shards_needed(plan, "nq", "judge") == 1
    assert estimates.shards_needed(plan, "nq") == 2
    assert estimates.longest_job(plan, "nq", 1, "judge") == (pytest.approx(300 + 2837 * 4.275), "judge", "qwen3-8b")
    # Configured per rule: the longest job with the configured counts.
    cfg = _tiny_paper()
    cfg["datasets"]["nq"]["shards"] = {"answer_candidates": 2}
    plan = model_plan(cfg)
    assert estimates.longest_job(plan, "nq") == (pytest.approx(300 + 2837 * 4.275), "judge", "qwen3-8b")
    row = estimates.shard_report(plan)[0]
    assert row["shards"]["answer_candidates"] == 2 and row["shards"]["judge"] == 1 == row["shards_needed"]["judge"]
    # answer_candidates in 2 parts, then one job each of gold (C and U), judge and answer_judgments
    # (the one run is BGE-M3's, the top-k answer: no answer_run).
    assert row["model_jobs"] == 2 + 3 and row["longest_rule"] == "judge"


def test_the_config_check_warns_of_a_job_expected_to_outlive_the_limit():
    """Allowed, but likely a mistake: a model job longer than resources.max_job_hours is a warning
    (printed when the workflow loads) that names the key and the shards that fit."""
    import io

    cfg = _tiny_paper()
    cfg["datasets"]["nq"]["shards"] = {"default": 1}
    stream = io.StringIO()
    (warning,) = estimates.check_job_lengths(model_plan(cfg), stream)
    assert (
        "gives answer_candidates 1 shards of nq" in warning
        and "datasets.nq.shards.answer_candidates: 2 fits" in warning
    )
    assert stream.getvalue() == warning + "\n"
    cfg["datasets"]["nq"]["shards"] = {"default": 1, "answer_candidates": 2}
    assert estimates.check_job_lengths(model_plan(cfg), io.StringIO()) == []


def test_the_paper_config_s_shards_fit_the_limit():
    """config/paper.yaml's shards are, per (dataset, rule), the fewest that keep every expected job
    within resources.max_job_hours / margin: a default of 1 and the rules that need more."""
    plan = model_plan(_config("paper.yaml"))
    bound = plan.config["resources"]["max_job_hours"] * 3600 / plan.config["resources"]["runtime_margin"]
    for d in plan.datasets:
        spec = plan.config["datasets"][d]["shards"]
        assert spec["default"] == 1 and all(n > 1 for r, n in spec.items() if r != "default"), d
        for r in estimates.rules_of(plan, d):
            assert plan.shards(d, r) == estimates.shards_needed(plan, d, r), (d, r)
        assert estimates.longest_job(plan, d)[0] <= bound, d
    # Table 5's thinking judgments alone need NQ's 37 parts; NQ's other jobs at most 2.
    assert plan.shards("nq", "judge_thinking") == 37 and plan.shards("nq", "judge") == 2
    assert max(plan.shards("nq", r) for r in estimates.rules_of(plan, "nq") if r != "judge_thinking") == 2


def test_a_part_jobs_queries_come_from_its_wildcards_and_the_queries_table(tmp_path):
    from types import SimpleNamespace

    import polars as pl

    from llm_utility.workflow import job_part_queries

    queries = tmp_path / "queries.parquet"
    pl.DataFrame({"qid": [f"q{i}" for i in range(5)]}).write_parquet(queries)

    def job(part, shards):
        wildcards = {"dataset": "d", "part_dir": part_dir(part)}
        return SimpleNamespace(
            input=SimpleNamespace(queries=str(queries)),
            rule="judge",
            wildcards=SimpleNamespace(dataset="d", get=wildcards.get),
            config={"datasets": {"d": {"shards": shards}}},
        )

    assert job_part_queries(job(None, None)) is None  # an unsharded job: every query
    assert job_part_queries(job("1-of-2", 2)) == ["q0", "q1", "q2"]
    assert job_part_queries(job("2-of-2", {"default": 1, "judge": 2})) == ["q3", "q4"]
    with pytest.raises(ValueError, match="datasets.d.shards"):
        job_part_queries(job("1-of-6", 6))  # more parts than the table's 5 queries
