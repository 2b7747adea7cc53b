"""The calls per query each model rule's jobs make: the runtime estimators of the model rules table
(``workflow.model_rules``), from which ``workflow.estimates`` computes a job's expected time.

A rule's calls per query add up which prompts it sends (from the plan: top_k, the methods, the LLMs),
each with its prompt and output tokens. Prompts are counted as ``benchmarks/prompt_tokens.py``
counts them (the constants below, with SmolLM2's tokenizer: the tokens each kind of prompt adds
around its passages), passages as ``resources.estimate.passage_tokens`` each, and outputs at their
caps (greedy answers usually stop sooner: an upper bound). Scoring calls (likelihood, perplexity,
attention) are prefill only. Pure functions of the plan; no Snakemake.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..method.judgments import JudgmentMethod, selection_method
from .model_plan import ModelPlan

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


# A rule's estimator: (plan, llm) -> the calls per query of one of its jobs for that LLM (any
# dataset: they do not depend on it).
CallsOf = Callable[[ModelPlan, str], list[Calls]]


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


def answer_candidates(plan: ModelPlan, llm: str) -> list[Calls]:
    """none, one call per passage of U (C and the human passages not in it: at most k + h), top-k,
    union, human."""
    s, k = _sizes(plan), plan.config["top_k"]
    h = s["human_passages"]
    return [_answer(plan, llm, "none", 1, 0), _answer(plan, llm, "single", k + h, 1), _answer(plan, llm, "topk", 1, k),
            _answer(plan, llm, "union", 1, k + h), _answer(plan, llm, "human", 1, h)]


def answer_gold(plan: ModelPlan, llm: str) -> list[Calls]:
    """Every LLM's gold set among C and among U."""
    return [_answer(plan, llm, "gold", 2 * len(plan.llms), _sizes(plan)["gold_passages"])]


def answer_reask(plan: ModelPlan, llm: str) -> list[Calls]:
    s, k = _sizes(plan), plan.config["top_k"]
    h = s["human_passages"]
    return [_answer(plan, llm, "reask_none", 1, 0), _answer(plan, llm, "reask_human", 1, h),
            _answer(plan, llm, "reask_topk", 1, k), _answer(plan, llm, "reask_union", 1, k + h),
            _answer(plan, llm, "reask_gold", 2 * len(plan.llms), s["gold_passages"])]


def answer_thinking(plan: ModelPlan, llm: str) -> list[Calls]:
    return [_answer(plan, llm, "topk_think", 1, plan.config["top_k"], plan.judgments["thinking_max_new_tokens"])]


def answer_judgments(plan: ModelPlan, llm: str) -> list[Calls]:
    selections = len(plan.judgments["rag_methods"]) * len(plan.llms)  # every LLM's, with every rag method
    return [_answer(plan, llm, "selected", selections, _sizes(plan)["gold_passages"]),
            _answer(plan, llm, "reranked", len(plan.rankings["rag_methods"]), plan.rankings["rag_top"])]


def answer_run(plan: ModelPlan, llm: str) -> list[Calls]:
    return [_answer(plan, llm, "run", 1, plan.config["top_k"])]


def judge_thinking(plan: ModelPlan, llm: str) -> list[Calls]:
    return _judgment_calls(plan, plan.thinking_methods, lambda m: plan.judgments["thinking_max_new_tokens"])


def judge(plan: ModelPlan, llm: str) -> list[Calls]:
    """Every judgment method, every ranking an LLM makes, and each human passage's perplexity."""
    s, k, a = _sizes(plan), plan.config["top_k"], _sizes(plan)["answer_tokens"]
    judge_cfg = plan.judgments
    caps = {"pointwise": judge_cfg["pointwise_max_new_tokens"], "listwise": judge_cfg["listwise_max_new_tokens"]}
    calls = _judgment_calls(plan, plan.judge_methods, lambda m: caps["pointwise" if m.form == "pointwise" else "listwise"])
    for name in plan.model_rankings:
        if name in ("listwise", "listwise_pa"):
            pa = a if name == "listwise_pa" else 0.0
            calls.append(Calls(f"rank_{name}", 1, RANKING_BASE + k * (s["passage_tokens"] + RANKING_PER_PASSAGE) + pa,
                               plan.rankings["max_new_tokens"]))
        elif name == "likelihood":  # the pseudo-answer scored after each passage of C
            calls.append(Calls("rank_likelihood", k, answer_prompt_tokens(plan, 1) + a))
        elif name == "attention":  # one pass over the top-k prompt and the pseudo-answer
            calls.append(Calls("rank_attention", 1, answer_prompt_tokens(plan, k) + a))
    # Each human passage alone and after its question.
    calls.append(Calls("perplexity", 2 * s["human_passages"], s["passage_tokens"] + PERPLEXITY_EXTRA))
    return calls
