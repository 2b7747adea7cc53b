"""The model rules: every rule of ``rules/`` whose jobs load an LLM of ``llms``, in one table.

Everything that lists model rules derives from it: the order in which ready jobs get the free cores
(``priority``), the rules that may run in query parts (the keys of a ``datasets.<name>.shards``
mapping), the jobs the plan has of each (the cost table's rows), each job's runtime estimator (its
calls per query, from which ``workflow.estimates`` computes its expected time) and the output the
cost rule waits for. A rule file takes a model rule's settings from here (``rules/resources.smk``:
``model_priority``, ``model_resources``) and registers its file patterns (``rules/parts.smk``:
``model_rule_files``).
``tests/test_workflow_dryrun.py`` fails when a rule whose jobs read or write an LLM's manifest is
missing from the table (or from ``OTHER_LLM_RULES``, the data jobs that load an LLM).

Adding a model rule: a row here (with its estimator and its jobs beside the others below), and the
rule in its stage's file. A rule's calls per query add up which prompts it sends (from the plan:
top_k, the methods, the LLMs), each with its prompt and output tokens: prompts counted as
``benchmarks/prompt_tokens.py`` counts them (the constants below), passages as
``resources.estimate.passage_tokens`` each, outputs at their caps (an upper bound); scorings
(likelihood, perplexity, attention) are prefill only. Pure functions of the plan; no Snakemake.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..method.judgments import JudgmentMethod, selection_method
from .model_plan import ModelPlan
from .parts import part_names

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
    calls: Callable[[ModelPlan, str], list[Calls]] | None
    query_parts: bool = True
    judged_only: bool = False
    output: str | None = None


# --- runtime estimators: the calls per query of one job of a rule for an LLM (any dataset) -------
# Tokens of each kind of prompt besides its passages, and per passage besides the passage's own
# tokens, as benchmarks/prompt_tokens.py counts them with SmolLM2's tokenizer (config/prompts.yaml,
# 100-word passages, 2026-12): an answer with no passage 68, with one 255, with 20 passages of 3,285
# tokens in all 3,380; a pointwise judgment with the pseudo-answer 320 (its passage: 179 tokens); a
# listwise selection (each passage its own chat turn and acknowledgment) 3,932 for 20 passages and
# 2,099 for 10 (1,654 passage tokens); a listwise ranking 3,913 and 2,080.
ANSWER_BASE, ANSWER_PER_PASSAGE = 68, 2
POINTWISE_BASE = 140
LISTWISE_BASE, LISTWISE_PER_PASSAGE = 243, 20
RANKING_BASE, RANKING_PER_PASSAGE = 224, 20
# A passage's perplexity is scored alone and after its question (~16 tokens).
PERPLEXITY_EXTRA = 16


@dataclass(frozen=True)
class Calls:
    """Calls of one kind a job makes per query: how many, and each one's prompt and output tokens
    (output 0: a scoring, prefill only)."""

    what: str
    per_query: float
    prompt_tokens: float
    output_tokens: float = 0.0


def _sizes(plan: ModelPlan) -> dict[str, float]:
    est = plan.config["resources"]["estimate"]
    return {k: float(est[k]) for k in ("passage_tokens", "human_passages", "gold_passages", "answer_tokens")}


def answer_prompt_tokens(plan: ModelPlan, passages: float) -> float:
    """An answer prompt with ``passages`` passages."""
    return ANSWER_BASE + passages * (_sizes(plan)["passage_tokens"] + ANSWER_PER_PASSAGE)


def _answer(plan: ModelPlan, llm: str, what: str, per_query: float, passages: float, out: float | None = None) -> Calls:
    """``per_query`` answers with ``passages`` passages each, output at ``out`` (the LLM's cap)."""
    cap = plan.config["llms"][llm]["max_new_tokens"] if out is None else out
    return Calls(what, per_query, answer_prompt_tokens(plan, passages), cap)


def _judgment_calls(plan: ModelPlan, methods: list[str], cap_of: Callable[[JudgmentMethod], float]) -> list[Calls]:
    s, k = _sizes(plan), plan.config["top_k"]
    calls = []
    for name in methods:
        m = selection_method(name)
        pa = s["answer_tokens"] if m.pseudo_context else 0.0
        if m.form == "pointwise":
            calls.append(Calls(name, k, POINTWISE_BASE + s["passage_tokens"] + pa, cap_of(m)))
        else:
            prompt = LISTWISE_BASE + k * (s["passage_tokens"] + LISTWISE_PER_PASSAGE) + pa
            calls.append(Calls(name, 1, prompt, cap_of(m)))
    return calls


def answer_candidates_calls(plan: ModelPlan, llm: str) -> list[Calls]:
    """none, one call per passage of U (C and the human passages not in it: at most k + h), top-k,
    union, human."""
    s, k = _sizes(plan), plan.config["top_k"]
    h = s["human_passages"]
    return [
        _answer(plan, llm, "none", 1, 0),
        _answer(plan, llm, "single", k + h, 1),
        _answer(plan, llm, "topk", 1, k),
        _answer(plan, llm, "union", 1, k + h),
        _answer(plan, llm, "human", 1, h),
    ]


def answer_gold_calls(plan: ModelPlan, llm: str) -> list[Calls]:
    """Every LLM's gold set among C and among U."""
    return [_answer(plan, llm, "gold", 2 * len(plan.llms), _sizes(plan)["gold_passages"])]


def answer_reask_calls(plan: ModelPlan, llm: str) -> list[Calls]:
    s, k = _sizes(plan), plan.config["top_k"]
    h = s["human_passages"]
    return [
        _answer(plan, llm, "reask_none", 1, 0),
        _answer(plan, llm, "reask_human", 1, h),
        _answer(plan, llm, "reask_topk", 1, k),
        _answer(plan, llm, "reask_union", 1, k + h),
        _answer(plan, llm, "reask_gold", 2 * len(plan.llms), s["gold_passages"]),
    ]


def answer_thinking_calls(plan: ModelPlan, llm: str) -> list[Calls]:
    return [_answer(plan, llm, "topk_think", 1, plan.config["top_k"], plan.judgments["thinking_max_new_tokens"])]


def answer_judgments_calls(plan: ModelPlan, llm: str) -> list[Calls]:
    selections = len(plan.judgments["rag_methods"]) * len(plan.llms)  # every LLM's, with every rag method
    return [
        _answer(plan, llm, "selected", selections, _sizes(plan)["gold_passages"]),
        _answer(plan, llm, "reranked", len(plan.rankings["rag_methods"]), plan.rankings["rag_top"]),
    ]


def answer_run_calls(plan: ModelPlan, llm: str) -> list[Calls]:
    return [_answer(plan, llm, "run", 1, plan.config["top_k"])]


def judge_thinking_calls(plan: ModelPlan, llm: str) -> list[Calls]:
    return _judgment_calls(plan, plan.thinking_methods, lambda m: plan.judgments["thinking_max_new_tokens"])


def judge_calls(plan: ModelPlan, llm: str) -> list[Calls]:
    """Every judgment method, every ranking an LLM makes, and each human passage's perplexity."""
    s, k, a = _sizes(plan), plan.config["top_k"], _sizes(plan)["answer_tokens"]
    judge_cfg = plan.judgments
    caps = {"pointwise": judge_cfg["pointwise_max_new_tokens"], "listwise": judge_cfg["listwise_max_new_tokens"]}
    calls = _judgment_calls(
        plan, plan.judge_methods, lambda m: caps["pointwise" if m.form == "pointwise" else "listwise"]
    )
    for name in plan.model_rankings:
        if name in ("listwise", "listwise_pa"):
            pa = a if name == "listwise_pa" else 0.0
            calls.append(
                Calls(
                    f"rank_{name}",
                    1,
                    RANKING_BASE + k * (s["passage_tokens"] + RANKING_PER_PASSAGE) + pa,
                    plan.rankings["max_new_tokens"],
                )
            )
        elif name == "likelihood":  # the pseudo-answer scored after each passage of C
            calls.append(Calls("rank_likelihood", k, answer_prompt_tokens(plan, 1) + a))
        elif name == "attention":  # one pass over the top-k prompt and the pseudo-answer
            calls.append(Calls("rank_attention", 1, answer_prompt_tokens(plan, k) + a))
    # Each human passage alone and after its question.
    calls.append(Calls("perplexity", 2 * s["human_passages"], s["passage_tokens"] + PERPLEXITY_EXTRA))
    return calls


# --- the jobs of each rule -------------------------------------------------------------------------
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
    ModelRule("answer_candidates", 4, _pairs, answer_candidates_calls, output="none"),
    ModelRule("answer_gold", 1, _pairs, answer_gold_calls),
    ModelRule("judge", 3, _pairs, judge_calls, judged_only=True, output="perplexity"),
    ModelRule("answer_thinking", 2, _thinking_answers, answer_thinking_calls, judged_only=True),
    ModelRule("judge_thinking", 3, _thinking_pairs, judge_thinking_calls, judged_only=True),
    ModelRule("answer_judgments", 2, _rag_with_judgments, answer_judgments_calls, judged_only=True),
    ModelRule("answer_reask", 0, _reask, answer_reask_calls),
    ModelRule("answer_run", 1, lambda plan: plan.run_answer_jobs(), answer_run_calls),
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
