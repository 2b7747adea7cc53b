"""The model rules: every rule of ``rules/`` whose jobs load an LLM of ``llms``, in one table.

Everything that lists model rules derives from it: the order in which ready jobs get the free cores
(``priority``), the rules that may run in query parts (the keys of a ``datasets.<name>.shards``
mapping), the jobs the plan has of each (the cost table's rows), each job's runtime estimate (its
calls per query, ``workflow.calls``) and the output the cost rule waits for. A rule file takes a
model rule's settings from here (``rules/resources.smk``: ``model_priority``, ``model_resources``)
and registers its file patterns (``rules/parts.smk``: ``model_rule_files``).
``tests/test_workflow_dryrun.py`` fails when a rule whose jobs read or write an LLM's manifest is
missing from the table (or from ``OTHER_LLM_RULES``, the data jobs that load an LLM).

Adding a model rule: a row here, and the rule in its stage's file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..method.judgments import selection_method
from . import calls
from .parts import part_names
from .model_plan import ModelPlan

Wildcards = dict[str, str]


@dataclass(frozen=True)
class ModelRule:
    """One model rule.

    - ``priority``: ready jobs with a higher one get the free cores first (everything else is 0);
    - ``jobs``: the wildcards of every job the plan has of the rule;
    - ``calls``: its runtime estimator, the calls per query of one job for an LLM (None: no estimate;
      the LLM's own ``runtime`` or ``resources.llm.runtime`` then);
    - ``query_parts``: whether a dataset's job may run in query parts (``datasets.<name>.shards``);
    - ``judged_only``: whether its jobs cover only the first ``judgments.max_queries`` queries;
    - ``output``: the name of the output the cost rule waits for (None: the rule's first).
    """

    name: str
    priority: int
    jobs: Callable[[ModelPlan], list[Wildcards]]
    calls: calls.CallsOf | None
    query_parts: bool = True
    judged_only: bool = False
    output: str | None = None


def _per_llm(plan: ModelPlan) -> list[Wildcards]:
    return [{"llm": llm} for llm in plan.llms]


def _pairs(plan: ModelPlan) -> list[Wildcards]:
    """One job per (dataset, LLM)."""
    return [{"dataset": d, "llm": llm} for d in plan.datasets for llm in plan.llms]


def _thinking_pairs(plan: ModelPlan) -> list[Wildcards]:
    return [{"dataset": d, "llm": llm} for d, llm in plan.thinking_pairs]


def _thinking_answers(plan: ModelPlan) -> list[Wildcards]:
    """The thinking pseudo-answer (T) exists only where a thinking method reads it."""
    if any(selection_method(m).pseudo_context == "topk_think" for m in plan.thinking_methods):
        return _thinking_pairs(plan)
    return []


def _rag_with_judgments(plan: ModelPlan) -> list[Wildcards]:
    return _pairs(plan) if plan.judgments["rag_methods"] or plan.rankings["rag_methods"] else []


def _reask(plan: ModelPlan) -> list[Wildcards]:
    return _pairs(plan) if plan.reask else []


# In the plan's order (the cost table's rows follow it). Priorities run along the DAG's longest
# chain, candidate answers -> judgments -> answers with judgments; then the gold answers and the
# answers with other runs, and last the re-ask, which only the report waits for.
MODEL_RULES: tuple[ModelRule, ...] = (
    ModelRule("materialize_model", 0, _per_llm, None, query_parts=False, output="manifest"),
    ModelRule("answer_candidates", 4, _pairs, calls.answer_candidates, output="none"),
    ModelRule("answer_gold", 1, _pairs, calls.answer_gold),
    ModelRule("judge", 3, _pairs, calls.judge, judged_only=True, output="perplexity"),
    ModelRule("answer_thinking", 2, _thinking_answers, calls.answer_thinking, judged_only=True),
    ModelRule("judge_thinking", 3, _thinking_pairs, calls.judge_thinking, judged_only=True),
    ModelRule("answer_judgments", 2, _rag_with_judgments, calls.answer_judgments, judged_only=True),
    ModelRule("answer_reask", 0, _reask, calls.answer_reask),
    ModelRule("answer_run", 1, lambda plan: plan.run_answer_jobs(), calls.answer_run),
)
MODEL_RULE_NAMES = tuple(r.name for r in MODEL_RULES)
# The rules besides these that load an LLM: one named by their dataset's config (MS MARCO-FQA's
# answer extractor), a data job with no {llm} wildcard and no row in the cost table.
OTHER_LLM_RULES = ("extract_answers",)
# The keys of a `shards` mapping besides `default`.
QUERY_PART_RULES = tuple(r.name for r in MODEL_RULES if r.query_parts)
_BY_NAME = {r.name: r for r in MODEL_RULES}


def model_rule(name: str) -> ModelRule:
    """The table's row of rule ``name``; a KeyError that says where to add one."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"{name}: not a model rule; add it to llm_utility.workflow.model_rules.MODEL_RULES") from None


def rule_jobs(plan: ModelPlan) -> list[tuple[str, Wildcards]]:
    """(rule, wildcards) of every job that loads an LLM, one per (dataset, LLM, ...) however many
    query parts it runs in."""
    return [(rule.name, wc) for rule in MODEL_RULES for wc in rule.jobs(plan)]


def model_jobs(plan: ModelPlan) -> list[tuple[str, Wildcards]]:
    """Every job that loads an LLM, as (rule, wildcards): the cost table's rows. A rule's jobs of a
    dataset it runs in query parts come once per part, with a ``part`` wildcard (``1-of-4``)."""
    jobs: list[tuple[str, Wildcards]] = []
    for rule, wc in rule_jobs(plan):
        parts = plan.parts(wc["dataset"], rule) if "dataset" in wc else []
        jobs += [(rule, {**wc, "part": part}) for part in parts] if parts else [(rule, wc)]
    return jobs


def all_parts(plan: ModelPlan) -> list[str]:
    """Every part name of any model rule and dataset (``1-of-4``, ...)."""
    return sorted({p for d in plan.datasets for r in QUERY_PART_RULES for p in part_names(plan.shards(d, r))})
