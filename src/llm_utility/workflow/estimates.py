"""How long each model job should take, from token counts: the `runtime` a scheduler is asked for,
and how many query shards (``datasets.<name>.shards``) each model rule of a dataset needs so that
no job outlives the scheduler's limit (``resources.max_job_hours``).

A job's expected seconds are

    startup_minutes x 60 x (model sessions)
    + queries x (prompt tokens per query / prefill_tokens_per_s + output tokens per query / decode_tokens_per_s)

where a rule's tokens per query add up its calls per query (``rule_calls``: the estimator of its row
in ``workflow.model_rules``) times each call's prompt and output
tokens. The store serves repeated prompts and vLLM caches shared prefixes; neither is counted, so
this is an upper bound of the work, not a prediction of a rerun. Pure functions of the plan; no
Snakemake.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from typing import Any, TextIO

from .data_plan import DataPlan
from .model_plan import ModelPlan
from .model_rules import Calls, model_jobs, model_rule, rule_jobs
from .parts import parse_part, part_bounds


def rule_calls(plan: ModelPlan, rule: str, llm: str) -> list[Calls]:
    """The calls per query of one job of ``rule`` for ``llm`` (the model rules table's estimator);
    a ValueError for a rule without one."""
    calls_of = model_rule(rule).calls
    if calls_of is None:
        raise ValueError(f"no runtime estimate for rule '{rule}'")
    return calls_of(plan, llm)


def sessions(plan: ModelPlan, rule: str, llm: str) -> int:
    """Model sessions (loads) of one job: a judge job ranks by attention in a second session when its
    LLM generates on another backend (vLLM)."""
    if rule == "judge" and "attention" in plan.model_rankings:
        if plan.rankings.get("attention_backend", "transformers") != plan.config["llms"][llm]["backend"]:
            return 2
    return 1


def tokens_per_query(plan: ModelPlan, rule: str, llm: str) -> tuple[float, float]:
    """(prompt tokens, output tokens) of one query in a job of ``rule``."""
    calls = rule_calls(plan, rule, llm)
    return sum(c.per_query * c.prompt_tokens for c in calls), sum(c.per_query * c.output_tokens for c in calls)


def has_throughputs(plan: ModelPlan, llm: str) -> bool:
    spec = plan.config["llms"][llm]
    return bool(spec.get("prefill_tokens_per_s")) and bool(spec.get("decode_tokens_per_s"))


def expected_seconds(plan: ModelPlan, rule: str, llm: str, queries: int) -> float | None:
    """Expected wall seconds of a job of ``rule`` for ``llm`` over ``queries`` queries; None without
    the LLM's throughputs (``llms.<name>.prefill_tokens_per_s``, ``decode_tokens_per_s``)."""
    if not has_throughputs(plan, llm):
        return None
    spec = plan.config["llms"][llm]
    prompt, output = tokens_per_query(plan, rule, llm)
    startup = 60.0 * plan.config["resources"]["estimate"]["startup_minutes"] * sessions(plan, rule, llm)
    return startup + queries * (prompt / spec["prefill_tokens_per_s"] + output / spec["decode_tokens_per_s"])


def job_queries(plan: ModelPlan, dataset: str, part: str | None = None) -> int | None:
    """The queries one model job of ``dataset`` (of ``part``, when sharded) is expected to cover."""
    total = plan.data.expected_queries(dataset)
    if total is None:
        return None
    if not part:
        return total
    index, count = parse_part(part)
    start, stop = part_bounds(total, index, count)
    return stop - start


def runtime_minutes(plan: ModelPlan, rule: str, wildcards: Mapping[str, Any]) -> int | None:
    """The `runtime` (minutes) a model job asks for: its expected time times
    ``resources.runtime_margin``, rounded up, at most ``resources.max_job_hours``; None when there is
    no estimate (no throughputs, or a dataset of unknown size)."""
    queries = job_queries(plan, wildcards["dataset"], wildcards.get("part"))
    seconds = None if queries is None else expected_seconds(plan, rule, wildcards["llm"], queries)
    if seconds is None:
        return None
    res = plan.config["resources"]
    return max(1, min(math.ceil(seconds * res["runtime_margin"] / 60), math.floor(res["max_job_hours"] * 60)))


def _dataset_rules(plan: ModelPlan, dataset: str) -> list[tuple[str, str]]:
    """(rule, llm) of every kind of model job ``dataset`` has."""
    return list(dict.fromkeys((rule, wc["llm"]) for rule, wc in rule_jobs(plan) if wc.get("dataset") == dataset))


def longest_job(
    plan: ModelPlan, dataset: str, shards: int | None = None, rule: str | None = None
) -> tuple[float, str, str] | None:
    """(expected seconds, rule, llm) of ``dataset``'s longest model job (of ``rule``'s jobs only,
    when given) with ``shards`` query shards (default: each rule's configured shards): the first,
    largest, part's; None without an estimate."""
    total = plan.data.expected_queries(dataset)
    if total is None:
        return None
    found = []
    for r, llm in _dataset_rules(plan, dataset):
        if rule is None or r == rule:
            start, stop = part_bounds(total, 1, min(shards or plan.shards(dataset, r), total))
            found.append((expected_seconds(plan, r, llm, stop - start), r, llm))
    found = [f for f in found if f[0] is not None]
    return max(found) if found else None


def shards_needed(plan: ModelPlan, dataset: str, rule: str | None = None) -> int | None:
    """The fewest query shards of ``rule``'s jobs of ``dataset`` (every model rule's, when None: the
    most any rule needs) with which each job's expected time, times ``resources.runtime_margin``,
    fits in ``resources.max_job_hours``; None without an estimate. A ValueError when even one query
    per job does not fit (the startup alone is too long)."""
    if rule is None:
        needed = [shards_needed(plan, dataset, r) for r in rules_of(plan, dataset)]
        needed = [n for n in needed if n is not None]
        return max(needed) if needed else None
    total = plan.data.expected_queries(dataset)
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


def rules_of(plan: ModelPlan, dataset: str) -> list[str]:
    """The model rules with jobs of ``dataset``, in the plan's order."""
    return list(dict.fromkeys(rule for rule, _ in _dataset_rules(plan, dataset)))


def shard_warnings(plan: ModelPlan) -> list[str]:
    """The config check's warnings (allowed, but likely a mistake): each model rule whose longest job
    of a dataset is expected to outlive ``resources.max_job_hours``, with the shards that fit."""
    limits = plan.config["resources"]
    warnings = []
    for dataset in plan.datasets:
        for rule in rules_of(plan, dataset):
            needed = shards_needed(plan, dataset, rule)
            if needed is not None and needed > plan.shards(dataset, rule):
                warnings.append(
                    f"Warning: {plan.shards_key(dataset, rule)} gives {rule} {plan.shards(dataset, rule)} shards of "
                    f"{dataset}: its longest job is expected to outlive resources.max_job_hours "
                    f"({limits['max_job_hours']} h, runtime_margin {limits['runtime_margin']}); "
                    f"datasets.{dataset}.shards.{rule}: {needed} fits "
                    "(python -m llm_utility.workflow.estimates <config>)."
                )
    return warnings


def check_job_lengths(plan: ModelPlan, stream: TextIO | None = None) -> list[str]:
    """The config check once the plan is built (rules/common.smk runs it when the workflow loads):
    ``shard_warnings``, printed to ``stream`` (standard error by default) and returned."""
    warnings = shard_warnings(plan)
    for warning in warnings:
        print(warning, file=stream or sys.stderr)
    return warnings


def shard_report(plan: ModelPlan) -> list[dict[str, Any]]:
    """Per dataset: its queries, each model rule's configured shards and the shards it needs, the
    dataset's model jobs (parts counted), and its longest expected job (hours, rule, LLM) as
    configured: what docs/cluster.md tabulates for config/paper.yaml."""
    rows = []
    jobs = model_jobs(plan)
    for d in plan.datasets:
        longest = longest_job(plan, d)
        rules = rules_of(plan, d)
        rows.append(
            {
                "dataset": d,
                "queries": plan.data.expected_queries(d),
                "shards": {r: plan.shards(d, r) for r in rules},
                "shards_needed": {r: shards_needed(plan, d, r) for r in rules},
                "model_jobs": sum(1 for _, wc in jobs if wc.get("dataset") == d),
                "longest_hours": None if longest is None else round(longest[0] / 3600, 2),
                "longest_rule": None if longest is None else longest[1],
                "longest_llm": None if longest is None else longest[2],
            }
        )
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
    for row in shard_report(ModelPlan(DataPlan(validated(config)))):
        print(json.dumps(row))


if __name__ == "__main__":
    main()
