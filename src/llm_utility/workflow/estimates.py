"""How long each model job should take, from token counts: the `runtime` a scheduler is asked for,
and how many query shards (``datasets.<name>.shards``) each model rule of a dataset needs so that
no job outlives the scheduler's limit (``resources.max_job_hours``).

A job's expected seconds are

    startup_minutes x 60 x (model sessions)
    + queries x (prompt tokens per query / prefill_tokens_per_s + output tokens per query / decode_tokens_per_s)

where a rule's tokens per query add up its calls per query (``rule_calls``: which prompts the rule
sends, from the plan: top_k, the methods, the LLMs) times each call's prompt and output tokens.
Prompts are counted as ``benchmarks/prompt_tokens.py`` counts them (the constants below, with
SmolLM2's tokenizer: the tokens each kind of prompt adds around its passages), passages as
``resources.estimate.passage_tokens`` each, and outputs at their caps (greedy answers usually stop
sooner: an upper bound). Scoring calls (likelihood, perplexity, attention) are prefill only. The
store serves repeated prompts and vLLM caches shared prefixes; neither is counted, so this is an
upper bound of the work, not a prediction of a rerun. Pure functions of the plan; no Snakemake.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..method.judgments import selection_method
from .parts import parse_part, part_bounds
from .plan import Plan

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


def _sizes(plan: Plan) -> dict[str, float]:
    est = plan.config["resources"]["estimate"]
    return {k: float(est[k]) for k in ("passage_tokens", "human_passages", "gold_passages", "answer_tokens")}


def answer_prompt_tokens(plan: Plan, passages: float) -> float:
    """An answer prompt with ``passages`` passages."""
    return ANSWER_BASE + passages * (_sizes(plan)["passage_tokens"] + ANSWER_PER_PASSAGE)


def _judgment_calls(plan: Plan, methods: list[str], cap_of) -> list[Calls]:
    s, k = _sizes(plan), plan.config["top_k"]
    calls = []
    for name in methods:
        m = selection_method(name)
        pa = s["answer_tokens"] if m.pseudo_context else 0.0
        if m.form == "pointwise":
            calls.append(Calls(name, k, POINTWISE_BASE + s["passage_tokens"] + pa, cap_of(m)))
        else:
            calls.append(Calls(name, 1, LISTWISE_BASE + k * (s["passage_tokens"] + LISTWISE_PER_PASSAGE) + pa, cap_of(m)))
    return calls


def rule_calls(plan: Plan, rule: str, llm: str) -> list[Calls]:
    """The calls per query of one job of ``rule`` for ``llm`` (any dataset: they do not depend on it)."""
    s, k, n_llms = _sizes(plan), plan.config["top_k"], len(plan.llms)
    h, g, a = s["human_passages"], s["gold_passages"], s["answer_tokens"]
    cap = plan.config["llms"][llm]["max_new_tokens"]
    judge = plan.config["judgments"]
    think_cap = judge["thinking_max_new_tokens"]

    def ans(what: str, per_query: float, passages: float, out: float = cap) -> Calls:
        return Calls(what, per_query, answer_prompt_tokens(plan, passages), out)

    if rule == "answer_candidates":
        # none, one call per passage of U (C and the human passages not in it: at most k + h), top-k,
        # union, human.
        return [ans("none", 1, 0), ans("single", k + h, 1), ans("topk", 1, k), ans("union", 1, k + h), ans("human", 1, h)]
    if rule == "answer_gold":
        return [ans("gold", 2 * n_llms, g)]  # every LLM's gold set among C and among U
    if rule == "answer_reask":
        return [ans("reask_none", 1, 0), ans("reask_human", 1, h), ans("reask_topk", 1, k), ans("reask_union", 1, k + h),
                ans("reask_gold", 2 * n_llms, g)]
    if rule == "answer_thinking":
        return [ans("topk_think", 1, k, think_cap)]
    if rule == "answer_judgments":
        return [ans("selected", len(judge["rag_methods"]) * n_llms, g),
                ans("reranked", len(plan.rankings["rag_methods"]), plan.rankings["rag_top"])]
    if rule == "answer_run":
        return [ans("run", 1, k)]
    if rule == "judge_thinking":
        return _judgment_calls(plan, plan.thinking_methods, lambda m: think_cap)
    if rule == "judge":
        calls = _judgment_calls(
            plan, plan.judge_methods,
            lambda m: judge["pointwise_max_new_tokens"] if m.form == "pointwise" else judge["listwise_max_new_tokens"],
        )
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
        calls.append(Calls("perplexity", 2 * h, s["passage_tokens"] + PERPLEXITY_EXTRA))
        return calls
    raise ValueError(f"no runtime estimate for rule '{rule}'")


def sessions(plan: Plan, rule: str, llm: str) -> int:
    """Model sessions (loads) of one job: a judge job ranks by attention in a second session when its
    LLM generates on another backend (vLLM)."""
    if rule == "judge" and "attention" in plan.model_rankings:
        if plan.rankings.get("attention_backend", "transformers") != plan.config["llms"][llm]["backend"]:
            return 2
    return 1


def tokens_per_query(plan: Plan, rule: str, llm: str) -> tuple[float, float]:
    """(prompt tokens, output tokens) of one query in a job of ``rule``."""
    calls = rule_calls(plan, rule, llm)
    return sum(c.per_query * c.prompt_tokens for c in calls), sum(c.per_query * c.output_tokens for c in calls)


def has_throughputs(plan: Plan, llm: str) -> bool:
    spec = plan.config["llms"][llm]
    return bool(spec.get("prefill_tokens_per_s")) and bool(spec.get("decode_tokens_per_s"))


def expected_seconds(plan: Plan, rule: str, llm: str, queries: int) -> float | None:
    """Expected wall seconds of a job of ``rule`` for ``llm`` over ``queries`` queries; None without
    the LLM's throughputs (``llms.<name>.prefill_tokens_per_s``, ``decode_tokens_per_s``)."""
    if not has_throughputs(plan, llm):
        return None
    spec = plan.config["llms"][llm]
    prompt, output = tokens_per_query(plan, rule, llm)
    startup = 60.0 * plan.config["resources"]["estimate"]["startup_minutes"] * sessions(plan, rule, llm)
    return startup + queries * (prompt / spec["prefill_tokens_per_s"] + output / spec["decode_tokens_per_s"])


def job_queries(plan: Plan, dataset: str, part: str | None = None) -> int | None:
    """The queries one model job of ``dataset`` (of ``part``, when sharded) is expected to cover."""
    total = plan.expected_queries(dataset)
    if total is None:
        return None
    if not part:
        return total
    index, count = parse_part(part)
    start, stop = part_bounds(total, index, count)
    return stop - start


def runtime_minutes(plan: Plan, rule: str, wildcards: Mapping[str, Any]) -> int | None:
    """The `runtime` (minutes) a model job asks for: its expected time times
    ``resources.runtime_margin``, rounded up, at most ``resources.max_job_hours``; None when there is
    no estimate (no throughputs, or a dataset of unknown size)."""
    queries = job_queries(plan, wildcards["dataset"], wildcards.get("part"))
    seconds = None if queries is None else expected_seconds(plan, rule, wildcards["llm"], queries)
    if seconds is None:
        return None
    res = plan.config["resources"]
    return max(1, min(math.ceil(seconds * res["runtime_margin"] / 60), math.floor(res["max_job_hours"] * 60)))


def _dataset_rules(plan: Plan, dataset: str) -> list[tuple[str, str]]:
    """(rule, llm) of every kind of model job ``dataset`` has."""
    return list(dict.fromkeys(
        (rule, wc["llm"]) for rule, wc in plan._model_jobs() if wc.get("dataset") == dataset
    ))


def longest_job(
    plan: Plan, dataset: str, shards: int | None = None, rule: str | None = None
) -> tuple[float, str, str] | None:
    """(expected seconds, rule, llm) of ``dataset``'s longest model job (of ``rule``'s jobs only,
    when given) with ``shards`` query shards (default: each rule's configured shards): the first,
    largest, part's; None without an estimate."""
    total = plan.expected_queries(dataset)
    if total is None:
        return None
    found = []
    for r, llm in _dataset_rules(plan, dataset):
        if rule is None or r == rule:
            start, stop = part_bounds(total, 1, min(shards or plan.shards(dataset, r), total))
            found.append((expected_seconds(plan, r, llm, stop - start), r, llm))
    found = [f for f in found if f[0] is not None]
    return max(found) if found else None


def shards_needed(plan: Plan, dataset: str, rule: str | None = None) -> int | None:
    """The fewest query shards of ``rule``'s jobs of ``dataset`` (every model rule's, when None: the
    most any rule needs) with which each job's expected time, times ``resources.runtime_margin``,
    fits in ``resources.max_job_hours``; None without an estimate. A ValueError when even one query
    per job does not fit (the startup alone is too long)."""
    if rule is None:
        needed = [shards_needed(plan, dataset, r) for r in rules_of(plan, dataset)]
        needed = [n for n in needed if n is not None]
        return max(needed) if needed else None
    total = plan.expected_queries(dataset)
    if total is None or longest_job(plan, dataset, 1, rule) is None:
        return None
    res = plan.config["resources"]
    bound = res["max_job_hours"] * 3600 / res["runtime_margin"]
    lo, hi = 1, total
    if longest_job(plan, dataset, hi, rule)[0] > bound:
        raise ValueError(
            f"datasets.{dataset}: a {rule} job of one query is expected to take longer than "
            f"resources.max_job_hours / resources.runtime_margin ({bound / 3600:.2f} h)"
        )
    while lo < hi:  # the longest job shrinks as the shards grow: the first n that fits
        mid = (lo + hi) // 2
        if longest_job(plan, dataset, mid, rule)[0] <= bound:
            hi = mid
        else:
            lo = mid + 1
    return lo


def rules_of(plan: Plan, dataset: str) -> list[str]:
    """The model rules with jobs of ``dataset``, in the plan's order."""
    return list(dict.fromkeys(rule for rule, _ in _dataset_rules(plan, dataset)))


def shard_report(plan: Plan) -> list[dict[str, Any]]:
    """Per dataset: its queries, each model rule's configured shards and the shards it needs, the
    dataset's model jobs (parts counted), and its longest expected job (hours, rule, LLM) as
    configured: what docs/cluster.md tabulates for config/paper.yaml."""
    rows = []
    jobs = plan.model_jobs()
    for d in plan.datasets:
        longest = longest_job(plan, d)
        rules = rules_of(plan, d)
        rows.append({
            "dataset": d,
            "queries": plan.expected_queries(d),
            "shards": {r: plan.shards(d, r) for r in rules},
            "shards_needed": {r: shards_needed(plan, d, r) for r in rules},
            "model_jobs": sum(1 for _, wc in jobs if wc.get("dataset") == d),
            "longest_hours": None if longest is None else round(longest[0] / 3600, 2),
            "longest_rule": None if longest is None else longest[1],
            "longest_llm": None if longest is None else longest[2],
        })
    return rows


def main(argv: list[str] | None = None) -> None:
    """``python -m llm_utility.workflow.estimates CONFIG``: the shard report of a config (validated
    as the Snakefile validates it, defaults filled in), one JSON line per dataset."""
    import argparse
    import json

    import yaml

    from .checks import validated

    parser = argparse.ArgumentParser(description="the shard report of a config: one JSON line per dataset")
    parser.add_argument("config", help="a config file, e.g. config/paper.yaml")
    args = parser.parse_args(argv)
    with open(args.config, encoding="utf-8") as fh:
        config = yaml.safe_load(fh)
    for row in shard_report(Plan(validated(config))):
        print(json.dumps(row))


if __name__ == "__main__":
    main()
