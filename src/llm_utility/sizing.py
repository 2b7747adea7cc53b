"""What a run of ``python -m llm_utility.init``'s config costs on this machine's CPUs, from measured
rates, and the cuts that make it fit a budget (``--budget MINUTES``).

The run's wall time is its jobs' seconds shared among the jobs that run side by side,

    startup + (model calls + per-job costs + encoding x its threads + BM25 + model materialization)
              / jobs side by side,

or its longest path through the jobs (the encoding, then one LLM's longest chain of model jobs),
when that is longer:

- **model calls**: per model rule and LLM, its prompt tokens as ``workflow.estimates`` counts them
  (upper bounds: outputs at their caps, nothing served by the store), at the rate that same count of
  the demo's calls had against the seconds the demo's calls measured (its cost table), times this
  CPU kind's factor. The count's excess is in the rate, so the time is a prediction, not a bound,
  for prompts like the demo's (5 passages): longer ones cost more per token than this counts;
- **encoding**: the corpus's words at MiniLM's measured words per second on one thread, 1.5x with
  two threads or more (``retrievers.<name>.encode_threads``; more than two is counted as two), plus
  the encoder's load;
- **per-job costs**: the demo's measured seconds outside model calls, per model job and per other job;
- **side by side**: one chain of jobs per LLM, at most the cores over an LLM job's threads
  (``llms.<name>.threads``).

The demo's two cores were never idle (113 jobs, 625 job-seconds, 5 min 13 s), so on its machine this
sum gives back its time (tests/test_init.py). Every constant below names the run it comes from.
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .config import SCHEMA

REPO = SCHEMA.parents[1]
DEMO_CONFIG = REPO / "config" / "config.yaml"

# The reference run: `make demo` (config/config.yaml) at 182d27e on the development machine's Intel
# Xeon with AMX (bfloat16), 2026-12-05, two cores: seconds inside model calls per (rule, LLM), from
# its results/tables/cost.csv.
DEMO_CALL_SECONDS = {
    ("answer_candidates", "smollm2-135m"): 56.7,
    ("answer_candidates", "gemma3-270m"): 72.6,
    ("answer_gold", "smollm2-135m"): 9.6,
    ("answer_gold", "gemma3-270m"): 11.2,
    ("judge", "smollm2-135m"): 60.3,
    ("judge", "gemma3-270m"): 77.8,
    ("answer_judgments", "smollm2-135m"): 6.8,
    ("answer_judgments", "gemma3-270m"): 6.7,
    ("answer_reask", "smollm2-135m"): 44.4,
    ("answer_reask", "gemma3-270m"): 49.5,
    ("answer_run", "smollm2-135m"): 16.6,
    ("answer_run", "gemma3-270m"): 18.3,
}
# The same run's jobs (its Snakemake log, start to finish): the 38 model jobs took 469 s, 430 of them
# inside calls; the 74 jobs that are neither model jobs, nor the encoding nor a materialization 85 s.
SECONDS_PER_MODEL_JOB = 1.0
SECONDS_PER_OTHER_JOB = 1.15
# Jobs besides the model jobs: 30 + 15 per dataset (`snakemake -n`: the demo's 3 datasets 75, one
# dataset of init's config 45).
OTHER_JOBS = (30, 15)
# Its two materializations (the GGUF weights dequantized, once per machine) and Snakemake's start.
MATERIALIZE_SECONDS = {"smollm2-135m": 8.3, "gemma3-270m": 24.0}
STARTUP_SECONDS = 10.0
# MiniLM-L6 on one thread of the same CPU: 47.1 passages/s of ~72 words (benchmarks/encode_throughput.py
# --n 512 --threads 1, 2026-12-05); the demo's encoding job, 83,500 words, took 39 s: 25 s of
# encoding at that rate and ~15 s of loading. A second thread gains 1.5x (config/config.yaml).
MINILM_WORDS_PER_S = 3_390.0
ENCODER_LOAD_SECONDS = 15.0
SECOND_THREAD_GAIN = 1.5
# The demo's data as the estimates see it: worldfacts passages of 51 words with their titles
# (85 tokens), and human passages per query of each flavour.
DEMO_PASSAGE_TOKENS = 85
DEMO_HUMAN_PASSAGES = {"single_hop": 1, "two_hop": 2, "claim": 1}
# Rates measured elsewhere (docs/performance.md), for BM25's build on one core.
BM25_S_PER_PASSAGE = 0.55e-3
# A budget judges this share of the queries it keeps, as the demo does (3 of 10): a judged query
# costs several answered ones.
JUDGED_SHARE = 0.3


@dataclass(frozen=True)
class CpuKind:
    """A kind of CPU: what multiplies the reference run's model-call and encoding seconds on it."""

    name: str
    model_factor: float
    encode_factor: float
    source: str


CPU_KINDS = {
    "amx": CpuKind(
        "AMX (bfloat16)",
        1.0,
        1.0,
        "measured: the demo on an Intel Xeon with AMX, 2026-12-05",
    ),
    "avx512": CpuKind(
        "AVX-512 BF16 without AMX (bfloat16)",
        678.6 / 430.4 * 946 / 915,
        88 / 131,
        "the demo's calls on an AMD EPYC Zen 4 (678.6 s in int8 against the Xeon's 430.4; its whole demo in "
        "bfloat16 made 946 call-seconds against 915 in int8) and its float32 products (88 against 131 GFLOP/s)",
    ),
    "avx2": CpuKind(
        "AVX2 only, or AVX-512 without BF16 (float32)",
        1_372 / 430.4 / 0.51,
        57 / 131,
        "an estimate: the Xeon's demo with its kernels capped at AVX2 (float32, 1,372 call-seconds) scaled by "
        "an AVX2-only EPYC's float32 products (57-64 against the capped Xeon's 118 GFLOP/s; docs/performance.md, "
        "'Budgets and today's numbers')",
    ),
}


def cpu_kind(flags: set[str]) -> tuple[str, CpuKind]:
    """The kind of a CPU with these /proc/cpuinfo flags; unknown flags get the slowest kind's rates."""
    if "amx_bf16" in flags:
        return "amx", CPU_KINDS["amx"]
    if "avx512_bf16" in flags:  # dtype auto: bfloat16 where the CPU multiplies it natively, else float32
        return "avx512", CPU_KINDS["avx512"]
    if "avx2" in flags:
        return "avx2", CPU_KINDS["avx2"]
    slowest = CPU_KINDS["avx2"]
    return "unknown", CpuKind(
        "unknown (no x86 flags read)", slowest.model_factor, slowest.encode_factor, slowest.source
    )


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    """The CPU's flags (Linux); empty where /proc/cpuinfo does not exist."""
    try:
        with open(cpuinfo, encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def model_cost(full: Mapping[str, Any], name: str) -> list[dict[str, Any]]:
    """Per (rule, LLM) of the dataset: calls, prompt and output tokens, expected hours at the LLM's
    configured throughputs (``workflow.estimates``; None without them)."""
    from .workflow import estimates
    from .workflow.data_plan import DataPlan
    from .workflow.model_plan import ModelPlan
    from .workflow.model_rules import model_rule

    plan = ModelPlan(DataPlan(full))
    queries = plan.data.expected_queries(name)
    judged = full["judgments"].get("max_queries") or queries
    rows = []
    for rule, llm in estimates._dataset_rules(plan, name):
        try:
            calls = estimates.rule_calls(plan, rule, llm)
        except ValueError:
            continue
        n = min(judged if model_rule(rule).judged_only else queries, queries)
        seconds = estimates.expected_seconds(plan, rule, llm, n)
        rows.append(
            {
                "rule": rule,
                "llm": llm,
                "calls": sum(c.per_query for c in calls) * n,
                "prompt_tokens": sum(c.per_query * c.prompt_tokens for c in calls) * n,
                "output_tokens": sum(c.per_query * c.output_tokens for c in calls) * n,
                "hours": None if seconds is None else seconds / 3600,
            }
        )
    return rows


@functools.cache
def demo_estimated_tokens() -> dict[tuple[str, str], float]:
    """The prompt tokens ``model_cost`` counts for the reference run's calls: config/config.yaml's
    datasets with the demo's passage length and human passages."""
    from .workflow.checks import validated

    demo = yaml.safe_load(DEMO_CONFIG.read_text(encoding="utf-8"))
    tokens: dict[tuple[str, str], float] = {}
    for name, spec in demo["datasets"].items():
        config = copy.deepcopy(demo)
        config["resources"] = {
            **config.get("resources", {}),
            "estimate": {
                **config.get("resources", {}).get("estimate", {}),
                "passage_tokens": DEMO_PASSAGE_TOKENS,
                "human_passages": DEMO_HUMAN_PASSAGES[spec["flavour"]],
            },
        }
        for row in model_cost(validated(config), name):
            key = (row["rule"], row["llm"])
            tokens[key] = tokens.get(key, 0.0) + row["prompt_tokens"]
    return tokens


def tokens_per_call_second(rule: str, llm: str) -> float:
    """Counted prompt tokens per second of model calls on the reference CPU: the demo's count over its
    measured seconds, for this rule and LLM (else the slowest of the rule's, else of all)."""
    counted = demo_estimated_tokens()
    rates = {key: counted[key] / seconds for key, seconds in DEMO_CALL_SECONDS.items() if counted.get(key)}
    if (rule, llm) in rates:
        return rates[(rule, llm)]
    same_rule = [rate for (r, _), rate in rates.items() if r == rule]
    return min(same_rule or rates.values())


def encode_seconds(words: float, threads: int, kind: CpuKind) -> float:
    """Seconds of one encoding job of MiniLM over ``words`` (passages with their titles) on ``threads``."""
    speed = MINILM_WORDS_PER_S * kind.encode_factor * (SECOND_THREAD_GAIN if threads >= 2 else 1.0)
    return ENCODER_LOAD_SECONDS + words / speed


@dataclass
class Estimate:
    """A run's expected wall seconds on this machine and the job-seconds they are made of."""

    seconds: float
    parts: dict[str, float]  # job-seconds (core-seconds for the encoding) by what they are spent on
    side_by_side: int
    longest_chain: float  # the wall seconds of the longest path through the jobs
    model_jobs: int

    @property
    def minutes(self) -> float:
        return self.seconds / 60


# The model rules' longest paths, each rule after the one before it: the answers with the top-k
# first; then the judgments and the answers with them, or the re-ask, or the gold sets' answers.
# The run's answers (answer_run) need only the BM25 run.
MODEL_CHAINS = (
    ("answer_candidates", "judge", "answer_judgments"),
    ("answer_candidates", "answer_reask"),
    ("answer_candidates", "answer_gold"),
    ("answer_run",),
)
# The reference run's wall seconds between the encoding's end and the first model job (the index
# and the retrieval), and after the last model job (the tables and findings left).
RETRIEVAL_SECONDS = 8.0
TAIL_SECONDS = 5.0


def cpu_run(full: Mapping[str, Any], corpus_info: Mapping[str, Any], here: Mapping[str, Any]) -> Estimate:
    """The expected wall time on this machine (``here``: cores, CPU flags, materialized models) of
    the whole run of a config whose LLMs run on CPUs and whose datasets share one corpus
    (``corpus_info``: passages, mean words): the larger of its jobs' seconds shared among the jobs
    that run side by side, and its longest path through them."""
    _, kind = cpu_kind(here.get("cpu_flags") or set())
    parts: dict[str, float] = {}
    job_seconds: dict[tuple[str, str, str], float] = {}  # (dataset, rule, LLM)
    for name in full["datasets"]:
        for row in model_cost(full, name):
            calls = row["prompt_tokens"] / tokens_per_call_second(row["rule"], row["llm"]) * kind.model_factor
            parts[f"model calls: {row['llm']}"] = parts.get(f"model calls: {row['llm']}", 0.0) + calls
            job_seconds[(name, row["rule"], row["llm"])] = calls + SECONDS_PER_MODEL_JOB
    parts["model jobs outside their calls"] = len(job_seconds) * SECONDS_PER_MODEL_JOB
    retrievers = {full["datasets"][name]["retriever"] for name in full["datasets"]}
    words = corpus_info["passages"] * corpus_info["mean_words"]
    encoding = 0.0
    for retriever in sorted(retrievers):
        threads = int(full["retrievers"][retriever].get("encode_threads") or 1)
        seconds = encode_seconds(words, threads, kind)
        encoding = max(encoding, seconds)
        parts["encoding"] = parts.get("encoding", 0.0) + seconds * min(threads, here["cores"])
    if any(spec.get("backend") == "bm25" for spec in full["retrievers"].values()):
        parts["BM25 index"] = corpus_info["passages"] * BM25_S_PER_PASSAGE
    parts["other jobs"] = (OTHER_JOBS[0] + OTHER_JOBS[1] * len(full["datasets"])) * SECONDS_PER_OTHER_JOB
    unmade = {
        llm: MATERIALIZE_SECONDS.get(llm, max(MATERIALIZE_SECONDS.values())) * kind.model_factor
        for llm in full["llms"]
        if llm not in here.get("materialized", ())
    }
    if unmade:
        parts["materializing the models (once)"] = sum(unmade.values())
    llm_threads = max(int(spec.get("threads") or 1) for spec in full["llms"].values())
    side_by_side = max(1, min(len(full["llms"]), here["cores"] // llm_threads))
    chains = [
        max(encoding, unmade.get(llm, 0.0))
        + RETRIEVAL_SECONDS
        + sum(job_seconds.get((name, rule, llm), 0.0) for rule in chain)
        for name in full["datasets"]
        for llm in full["llms"]
        for chain in MODEL_CHAINS
    ]
    longest = STARTUP_SECONDS + max(chains, default=encoding) + TAIL_SECONDS
    seconds = max(STARTUP_SECONDS + sum(parts.values()) / side_by_side, longest)
    return Estimate(seconds, parts, side_by_side, longest, len(job_seconds))


@dataclass(frozen=True)
class Cut:
    """One size of the run: its queries, judged queries and whether it takes the demo's cuts."""

    queries: int
    judged: int
    demo_cuts: bool


def ladder(total: int) -> list[Cut]:
    """The sizes a budget tries, from the whole run down, each no dearer than the one before: every
    query judged with the paper's settings; the demo's cuts (``demo_cuts``); fewer judged queries,
    down to ``JUDGED_SHARE`` of them; then fewer queries, that share of them judged."""
    share = lambda n: max(1, math.ceil(JUDGED_SHARE * n))  # noqa: E731
    cuts = [Cut(total, total, False)]
    cuts += [Cut(total, judged, True) for judged in range(total, share(total) - 1, -1)]
    cuts += [Cut(n, share(n), True) for n in range(total - 1, 0, -1)]
    return cuts


@functools.cache
def demo_cuts() -> dict[tuple[str, ...], Any]:
    """What config/config.yaml cuts from the paper's settings besides the query counts, by key path:
    one variant of each kind of judgment and ranking method, and the top 5 (of them the top 2 in
    the reranked RAG). They also keep a run's prompts near the lengths the rates were measured on
    (the demo's)."""
    demo = yaml.safe_load(DEMO_CONFIG.read_text(encoding="utf-8"))
    return {
        ("judgments", "methods"): list(demo["judgments"]["methods"]),
        ("rankings", "methods"): list(demo["rankings"]["methods"]),
        ("top_k",): demo["top_k"],
        ("rankings", "rag_top"): demo["rankings"]["rag_top"],
    }


def _get(config: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        config = config[key]
    return config


def apply_cut(config: Mapping[str, Any], name: str, cut: Cut, total: int) -> dict[str, Any]:
    """``config`` (init's, unvalidated) cut to ``cut``: the dataset's limit, the judged queries and
    the demo's cuts."""
    config = copy.deepcopy(dict(config))
    dataset = config["datasets"][name]
    if cut.queries < total:
        dataset["limit"] = cut.queries
    dataset["expected_queries"] = cut.queries
    if cut.judged < cut.queries:
        config["judgments"]["max_queries"] = cut.judged
    if cut.demo_cuts:
        for path, value in demo_cuts().items():
            _get(config, path[:-1])[path[-1]] = copy.deepcopy(value)
    return config


def fit(
    config: Mapping[str, Any],
    name: str,
    total: int,
    budget_seconds: float,
    corpus_info: Mapping[str, Any],
    here: Mapping[str, Any],
) -> tuple[Cut, dict[str, Any], Estimate] | tuple[None, dict[str, Any], Estimate]:
    """The first size of ``ladder(total)`` whose estimate fits ``budget_seconds``: (cut, config,
    estimate); (None, the smallest config, its estimate) when none does."""
    from .workflow.checks import validated

    cuts = ladder(total)

    def estimate(i: int) -> tuple[dict[str, Any], Estimate]:
        cut_config = apply_cut(config, name, cuts[i], total)
        return cut_config, cpu_run(validated(cut_config), corpus_info, here)

    smallest = estimate(len(cuts) - 1)
    if smallest[1].seconds > budget_seconds:
        return None, *smallest
    lo, hi = 0, len(cuts) - 1  # the estimates never rise along the ladder: the first that fits
    while lo < hi:
        mid = (lo + hi) // 2
        if estimate(mid)[1].seconds <= budget_seconds:
            hi = mid
        else:
            lo = mid + 1
    return cuts[lo], *estimate(lo)


def describe_cut(cut: Cut, queries: int, total: int, name: str, config: Mapping[str, Any]) -> list[str]:
    """What ``cut`` of a run of ``queries`` (of the file's ``total``) leaves out of ``config`` (before
    the cut), one line per cut, naming the keys it sets."""
    lines = []
    if cut.queries < queries:
        lines.append(f"queries: the first {cut.queries:,} of {total:,} (datasets.{name}.limit)")
    if cut.judged < cut.queries:
        lines.append(f"judged queries: the first {cut.judged:,} of those (judgments.max_queries)")
    if cut.demo_cuts:
        for path, value in demo_cuts().items():
            before, key = _get(config, path), ".".join(path)
            if isinstance(value, list) and set(before) - set(value):
                lines.append(f"{key}: the demo's, without {', '.join(m for m in before if m not in value)}")
            elif not isinstance(value, list) and before != value:
                lines.append(f"{key}: {value} (the demo's), not {before}")
    return lines
