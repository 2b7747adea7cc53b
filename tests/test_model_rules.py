"""The table of model rules (llm_utility.workflow.model_rules): what derives from it, and the rule
files taking their settings from it. (That every rule loading an LLM has a row is checked on the
paper DAG: tests/test_workflow_dryrun.py.)"""

from __future__ import annotations

import re

import pytest
import yaml
from snakemake.utils import validate

from llm_utility.workflow.checks import check_config
from llm_utility.workflow.data_plan import DataPlan
from llm_utility.workflow.estimates import rule_calls
from llm_utility.workflow.model_plan import ModelPlan
from llm_utility.workflow.model_rules import (
    MODEL_RULE_NAMES,
    MODEL_RULES,
    OTHER_LLM_RULES,
    QUERY_PART_RULES,
    model_jobs,
    model_rule,
)
from workflow_runner import REPO


def _plan(name: str) -> ModelPlan:
    cfg = yaml.safe_load((REPO / "config" / name).read_text())
    validate(cfg, str(REPO / "config" / "schema.yaml"))
    check_config(cfg)
    return ModelPlan(DataPlan(cfg))


def _rule_blocks() -> dict[str, str]:
    """Each rule of rules/*.smk (``rule x:`` or ``use rule y as x with:``) and its body: the lines
    indented under its header."""
    blocks = {}
    for path in sorted((REPO / "rules").glob("*.smk")):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            name = re.match(r"(\s*)(?:rule (\w+):|use rule \w+ as (\w+) with:)", line)
            if not name:
                continue
            indent, body = len(name.group(1)), [line]
            for following in lines[i + 1 :]:
                if following.strip() and len(following) - len(following.lstrip()) <= indent:
                    break
                body.append(following)
            blocks[name.group(2) or name.group(3)] = "\n".join(body)
    return blocks


def test_one_row_per_rule_and_the_order_the_cost_table_follows():
    assert len(set(MODEL_RULE_NAMES)) == len(MODEL_RULES)
    assert MODEL_RULE_NAMES[0] == "materialize_model"
    # The candidate answers feed everything after them: the highest priority; the re-ask the lowest.
    assert max(MODEL_RULES, key=lambda r: r.priority).name == "answer_candidates"
    assert model_rule("answer_reask").priority == min(r.priority for r in MODEL_RULES)
    assert set(MODEL_RULE_NAMES) - set(QUERY_PART_RULES) == {"materialize_model"}
    with pytest.raises(KeyError, match="MODEL_RULES"):
        model_rule("answer_nothing")


def test_the_rule_files_take_priority_and_resources_from_the_table():
    """Every model rule's block asks the table for its priority and resources (rules/resources.smk),
    and names nothing the table does not have."""
    blocks = _rule_blocks()
    for rule in MODEL_RULES:
        block = blocks[rule.name]
        if rule.name == "materialize_model":  # a local download rule: no model session, no priority
            continue
        assert f'priority: model_priority("{rule.name}")' in block, rule.name
        assert f'**model_resources("{rule.name}")' in block, rule.name
    asked = {n for b in blocks.values() for n in re.findall(r'model_(?:priority|resources)\("(\w+)"\)', b)}
    assert asked == set(MODEL_RULE_NAMES) - {"materialize_model"}


def test_every_rule_wired_to_an_llm_has_a_row():
    """Read from the rule files (the paper DAG's check, tests/test_workflow_dryrun.py, sees the rules
    that run; this one also a rule no target asks for yet): a rule that reads or writes an LLM's
    manifest, runs in an LLM's environment, asks for an LLM's resources or gets its spec is a row of
    the table, or one of OTHER_LLM_RULES."""
    llm = re.compile(
        r"\bMANIFEST\b|\bMODEL_JOB_INPUTS\b|\b(?:llm|materialize)_conda_env\b|\bllm_env\(|\b(?:model|llm)_resources\(|\bllm_spec\b"
    )
    blocks = _rule_blocks()
    wired = {name for name, block in blocks.items() if llm.search(block)}
    # `use rule` children of a model rule inherit its environment: their own blocks name their resources.
    assert {"materialize_model", "answer_candidates", "answer_run", "judge", "extract_answers"} <= wired
    assert wired - set(MODEL_RULE_NAMES) == set(OTHER_LLM_RULES)
    assert not {"candidate_passages", "gold_sets", "table1", "cost"} & wired


@pytest.mark.parametrize("config", ["config.yaml", "paper.yaml"])
def test_every_rule_with_jobs_has_an_estimate_but_the_materialization(config):
    plan = _plan(config)
    rules = {rule for rule, _ in model_jobs(plan)}
    assert "answer_candidates" in rules and "judge" in rules
    for name in rules - {"materialize_model"}:
        for llm in plan.llms:
            calls = rule_calls(plan, name, llm)
            assert calls and sum(c.per_query for c in calls) > 0 and all(c.prompt_tokens > 0 for c in calls), (
                name,
                llm,
            )
    with pytest.raises(ValueError, match="no runtime estimate"):
        rule_calls(plan, "materialize_model", plan.llms[0])
