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
from llm_utility.workflow.model_rules import MODEL_RULE_NAMES, MODEL_RULES, QUERY_PART_RULES, model_jobs, model_rule
from workflow_runner import REPO


def _plan(name: str) -> ModelPlan:
    cfg = yaml.safe_load((REPO / "config" / name).read_text())
    validate(cfg, str(REPO / "config" / "schema.yaml"))
    check_config(cfg)
    return ModelPlan(DataPlan(cfg))


def _rule_blocks() -> dict[str, str]:
    """Each rule of rules/*.smk (``rule x:`` or ``use rule y as x with:``) and its text."""
    blocks = {}
    for path in sorted((REPO / "rules").glob("*.smk")):
        for block in re.split(r"\n(?=\s*(?:use )?rule )", path.read_text()):
            name = re.match(r"\s*(?:rule (\w+):|use rule \w+ as (\w+) with:)", block)
            if name:
                blocks[name.group(1) or name.group(2)] = block
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


@pytest.mark.parametrize("config", ["config.yaml", "paper.yaml"])
def test_every_rule_with_jobs_has_an_estimate_but_the_materialization(config):
    plan = _plan(config)
    rules = {rule for rule, _ in model_jobs(plan)}
    assert "answer_candidates" in rules and "judge" in rules
    for name in rules - {"materialize_model"}:
        for llm in plan.llms:
            calls = rule_calls(plan, name, llm)
            assert calls and sum(c.per_query for c in calls) > 0 and all(c.prompt_tokens > 0 for c in calls), (name, llm)
    with pytest.raises(ValueError, match="no runtime estimate"):
        rule_calls(plan, "materialize_model", plan.llms[0])
