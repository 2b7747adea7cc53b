# What every stage shares: the environment jobs run in, config access and the workflow's plan
# (llm_utility.workflow.plan), wildcard constraints, what jobs ask a scheduler for, and every file
# pattern of the workflow, each written once. A stage's own input functions open its rule file.

import os
import re
import sys
from pathlib import Path

# Jobs import the llm_utility library from this checkout, also inside per-rule conda environments;
# so does this file (the plan and the config checks are the library's).
_SRC = str(Path(workflow.basedir) / "src")
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (_SRC, os.environ.get("PYTHONPATH")) if p
)
sys.path.insert(0, _SRC)

from llm_utility.method.answers import CANDIDATE_CONTEXTS, gold_context  # noqa: E402
from llm_utility.workflow import (
    Plan,
    canonicalize_config,
    check_config,
    input_key,
)  # noqa: E402
from llm_utility.workflow.estimates import (
    rules_of,
    runtime_minutes,
    shards_needed,
)  # noqa: E402
from llm_utility.workflow.parts import SHARDABLE_RULES  # noqa: E402

# HF_TOKEN (gated models) and HF_HOME (the hub cache) reach remote jobs. Snakemake requires declared
# variables to exist, so unset ones get the hub's own defaults: no token ("" counts as none).
os.environ.setdefault("HF_TOKEN", "")
os.environ.setdefault(
    "HF_HOME",
    os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "huggingface"
    ),
)


envvars:
    "PYTHONPATH",
    "HF_TOKEN",
    "HF_HOME",


# Params built from the config are then the same for a config whose keys were only reordered.
canonicalize_config(config)


# --- config access and the plan -------------------------------------------------------------------
check_config(config)
# TREC runs a user dropped in resources/runs/<dataset>/<name>.trec are scored beside runs.files.
DROPPED_RUNS = {
    d: {
        path.stem: str(path)
        for path in sorted(Path("resources/runs", d).glob("*.trec"))
    }
    for d in config["datasets"]
}
PLAN = Plan(config, dropped_runs=DROPPED_RUNS)
DATASETS, LLMS = PLAN.datasets, PLAN.llms
JUDGE = config["judgments"]
RANK = config["rankings"]


def dataset_cfg(wildcards):
    return config["datasets"][wildcards.dataset]


def dataset_spec(wildcards):
    """The dataset's entry as a job's param: without the keys that only schedule (shards)."""
    return PLAN.dataset_spec(wildcards.dataset)


def llm_spec(wildcards):
    """The LLM's entry as a model job's `spec` param: without the runtime estimate's throughputs."""
    return PLAN.llm_spec(wildcards.llm)


def weights_spec(wildcards):
    """The LLM's entry as materialize_model's `spec` param: its weights and prompt format only."""
    return PLAN.weights_spec(wildcards.llm)


def llm_cfg(wildcards):
    return config["llms"][wildcards.llm]


def retriever_cfg(wildcards):
    return config["retrievers"][wildcards.retriever]


def corpus_of(wildcards):
    return dataset_cfg(wildcards)["corpus"]


def retriever_of(wildcards):
    return dataset_cfg(wildcards)["retriever"]


def passages_of_dataset(wildcards):
    return fill(PASSAGES, corpus=corpus_of(wildcards))


# --- wildcard constraints -------------------------------------------------------------------------
def alternatives(names):
    """A constraint matching exactly ``names`` (nothing at all when there are none)."""
    return "|".join(re.escape(n) for n in names) if names else "(?!)"


wildcard_constraints:
    dataset=alternatives(DATASETS),
    llm=alternatives(LLMS),
    corpus=alternatives(PLAN.corpora),
    retriever=alternatives(PLAN.retrievers),
    run=alternatives(sorted({r for d in DATASETS for r in PLAN.runs_of(d)})),
    candidates="C|U",
    shard=r"\d+",
    # Query shards of the model jobs (a rule's datasets.<name>.shards > 1): 1-of-4, ...
    part=alternatives(PLAN.all_parts),


# A model rule that opts in to query shards (docs/architecture.md, "Query shards") takes
# `dataset=unsharded(rule)`, the datasets where the rule has 1 shard; its `<rule>_part` twin, one job
# per part, `dataset=sharded(rule)`, the others; and `<rule>_gather` (rules/parts.smk) writes the
# unsharded paths from the parts. So every path has exactly one rule, and a config without shards
# has no part or gather job. Per rule, since datasets.<name>.shards may give each rule its own count.
def sharded(rule):
    return alternatives(PLAN.sharded_datasets(rule))


def unsharded(rule):
    return alternatives(PLAN.unsharded_datasets(rule))


# Each opting-in rule's files (output, log, benchmark patterns), for its part twin and its gather.
SHARDABLE = {}


def in_part(pattern):
    """A dataset's path (pattern or mapping of patterns) as one query shard's: under
    .../{dataset}/parts/{part}/."""
    if isinstance(pattern, dict):
        return {k: in_part(v) for k, v in pattern.items()}
    if "{dataset}/" not in pattern:
        raise ValueError(f"{pattern}: a sharded path needs a {{dataset}}/ folder")
    return pattern.replace("{dataset}/", "{dataset}/parts/{part}/", 1)


def shardable(name, output, log, benchmark):
    """Register rule ``name``'s files (for its part twin and its gather) and return them."""
    # The config's shards mappings are checked against that list (llm_utility.workflow.parts).
    if name not in SHARDABLE_RULES:
        raise ValueError(
            f"{name}: add it to llm_utility.workflow.parts.SHARDABLE_RULES"
        )
    SHARDABLE[name] = {"output": output, "log": log, "benchmark": benchmark}
    return SHARDABLE[name]


# Where a model rule's longest job of a dataset would outlive the scheduler's limit, say so with what fits.
_limits = config["resources"]
for _d in DATASETS:
    for _r in rules_of(PLAN, _d):
        _needed = shards_needed(PLAN, _d, _r)
        if _needed is not None and _needed > PLAN.shards(_d, _r):
            print(
                f"Warning: {PLAN.shards_key(_d, _r)} gives {_r} {PLAN.shards(_d, _r)} shards of {_d}: its "
                f"longest job is expected to outlive resources.max_job_hours ({_limits['max_job_hours']} h, "
                f"runtime_margin {_limits['runtime_margin']}); datasets.{_d}.shards.{_r}: {_needed} fits "
                "(python -m llm_utility.workflow.estimates <config>).",
                file=sys.stderr,
            )


# --- what each job asks a scheduler for (config `resources`; an LLM's own mem_mb/runtime first) ----
RESOURCES = config["resources"]
# Tables, figures, gold sets, qrels: no model, little memory.
LIGHT = RESOURCES["light"]
# The environment of every job that loads no model.
BASE_ENV = "../envs/base.yaml"

# The order in which ready LLM jobs get the free cores (higher first; everything else is 0): along
# the DAG's longest chain, candidate answers -> judgments -> answers with judgments; then the gold
# answers, and last the re-ask, which only the report waits for.
PRIORITY = {
    "retrieve": 5,
    "answer_candidates": 4,
    "judge": 3,
    "answer_judgments": 2,
    "answer_gold": 1,
    "answer_reask": 0,
}


def gpus_of_llm(wildcards):
    return llm_cfg(wildcards)["gpu"]


def llm_threads(wildcards):
    return llm_cfg(wildcards)["threads"] or 8


def llm_mem_mb(wildcards):
    return llm_cfg(wildcards)["mem_mb"] or RESOURCES["llm"]["mem_mb"]


def llm_runtime(wildcards):
    return llm_cfg(wildcards)["runtime"] or RESOURCES["llm"]["runtime"]


def model_runtime(rule):
    """A model job's runtime (minutes): the LLM's own `runtime`, else the expected time of this job
    (llm_utility.workflow.estimates: its rule, LLM and queries) with the margin, else
    resources.llm.runtime."""
    return lambda wildcards: (
        llm_cfg(wildcards)["runtime"]
        or runtime_minutes(PLAN, rule, dict(wildcards.items()))
        or RESOURCES["llm"]["runtime"]
    )


def model_resources(rule):
    """What a model job of ``rule`` asks a scheduler for."""
    return {
        "mem_mb": llm_mem_mb,
        "runtime": model_runtime(rule),
        "gpu": gpus_of_llm,
    }


def llm_env(llm):
    """The conda environment of an LLM's model jobs: its backend's; vLLM's CPU build with gpu 0."""
    spec = config["llms"][llm]
    if spec["backend"] == "vllm" and not spec["gpu"]:
        return "../envs/llm-vllm-cpu.yaml"
    return f"../envs/llm-{spec['backend']}.yaml"


def llm_conda_env(wildcards):
    return llm_env(wildcards.llm)


def materialize_conda_env(wildcards):
    # Dequantizing a GGUF needs transformers >= 5.23, which vLLM's environment cannot have.
    if "gguf_package" in llm_cfg(wildcards)["weights"]:
        return "../envs/llm-transformers.yaml"
    return llm_conda_env(wildcards)


def encoder_conda_env(wildcards):
    backend = retriever_cfg(wildcards)["backend"]
    return (
        "../envs/encode-flagembedding.yaml"
        if backend == "flagembedding"
        else "../envs/encode.yaml"
    )


# --- file patterns: every path of the workflow, written once --------------------------------------
# Data (rules/data.smk): benchmark files loaded, human passages mapped, then the normalized tables.
SOURCE_QUERIES = "results/{dataset}/source/queries.parquet"
EVIDENCE = "results/{dataset}/source/evidence.parquet"
SOURCE_SUMMARY = "results/{dataset}/source/summary.json"
SHORT_ANSWERS = "results/{dataset}/source/short_answers.parquet"
HUMAN_PASSAGES = "results/{dataset}/human_passages.parquet"
HUMAN_COVERAGE = "results/{dataset}/human_coverage.json"
CORPUS_SHARD = "results/corpora/{corpus}/shards/{shard}.parquet"
CORPUS_SPANS = "results/corpora/{corpus}/spans.parquet"
QUERIES = "results/{dataset}/queries.parquet"
PASSAGES = "results/corpora/{corpus}/passages.parquet"
# Retrieval (rules/retrieval.smk).
RETRIEVER_MANIFEST = "resources/retrievers/{retriever}/manifest.json"
RETRIEVER_WEIGHTS = "{models_dir}/retrievers/{retriever}"
EMBEDDINGS = "results/corpora/{corpus}/{retriever}/embeddings/{shard}.npy"
INDEX = "results/corpora/{corpus}/{retriever}/index.faiss"
BM25_INDEX = "results/corpora/{corpus}/{retriever}/bm25"
RUN = "results/{dataset}/{retriever}/run.parquet"
# Every run scored on a dataset (rules/runs.smk): its top-k with texts.
RUN_TOPK = "results/{dataset}/runs/{run}/topk.parquet"
# Per (dataset, run, LLM answering, judge, query): the judge's metrics and the answer's correctness.
RUN_PAIRS = "results/runs/qrels_agreement_pairs.parquet"
# The model stages (rules/generation.smk, gold.smk, judgments.smk).
MANIFEST = "resources/models/{llm}/manifest.json"
LLM_WEIGHTS = "{models_dir}/llms/{llm}"
CANDIDATES = "results/{dataset}/candidates.parquet"
ANSWERS = "results/{dataset}/{llm}/answers/{context}.parquet"
GOLD = "results/{dataset}/{llm}/gold_{candidates}.parquet"
KNOWN = "results/{dataset}/{llm}/known.parquet"
JUDGMENTS = "results/{dataset}/{llm}/judgments/{method}.parquet"
RANKINGS = "results/{dataset}/{llm}/rankings/{method}.parquet"
PERPLEXITY = "results/{dataset}/{llm}/perplexity.parquet"
QRELS = "results/{dataset}/{llm}/qrels_{candidates}.txt"
# The report (rules/report.smk, findings.smk).
TABLE = "results/tables/{name}.{ext}"
FIGURE = "results/figures/{name}.{ext}"
FINDINGS_JSON = "results/findings.json"
EXPLORER = "results/explorer/{dataset}.html"
RESULTS_CONFIG = "results/config.yaml"
# The report's tables and figures by rule: the file name of each (its caption: report/<rule>.rst).
TABLE_NAMES = {
    "retrieval_table": "retrieval",
    "table1": "table1_rag",
    "empty_answers": "empty_answers",
    "table6": "table6_datasets",
    "table2": "table2_selection",
    "table3": "table3_rag_selection",
    "table4": "table4_ranking",
    "table5": "table5_thinking",
    "table7": "table7_rag_reranked",
    "table8": "table8_known_rejection",
    "external_runs": "external_runs",
    "qrels_agreement": "qrels_agreement",
}
FIGURE_NAMES = {
    "figure_topk": "fig1_left_topk",
    "figure_overlap": "fig3_overlap",
    "figure_perplexity": "fig4_perplexity",
    "figure_selection_transfer": "fig9_selection_transfer",
    "external_runs": "external_runs",
}


def fill(pattern, **values):
    """``pattern`` with only the named fields filled in; other wildcards stay as they are."""
    return re.sub(
        r"\{(\w+)\}",
        lambda m: str(values[m.group(1)]) if m.group(1) in values else m.group(0),
        pattern,
    )


def weights_dir(pattern, **values):
    """Where materialized weights go when config `models_dir` is set (else beside the manifest)."""
    models_dir = config["models_dir"]
    return fill(pattern, models_dir=models_dir, **values) if models_dir else None


def table_outputs(rule, name=None, formats=("csv", "md", "tex"), category="2 Tables"):
    """A table's files (results/tables/<name>.<format>), the Markdown one in the report."""
    name = name or TABLE_NAMES[rule]
    out = {ext: fill(TABLE, name=name, ext=ext) for ext in formats}
    out["md"] = report(out["md"], caption=f"../report/{rule}.rst", category=category)
    return out


def figure_outputs(rule, name=None, csv=True):
    """A figure's PNG (in the report) and PDF, and its numbers as a CSV table."""
    name = name or FIGURE_NAMES[rule]
    png = fill(FIGURE, name=name, ext="png")
    out = {
        "png": report(png, caption=f"../report/{rule}.rst", category="3 Figures"),
        "pdf": fill(FIGURE, name=name, ext="pdf"),
    }
    if csv:
        out["csv"] = fill(TABLE, name=name, ext="csv")
    return out


def answers_named(contexts):
    """Named answer files (patterns in {dataset} and {llm}), one per context."""
    return {ctx: fill(ANSWERS, context=ctx) for ctx in contexts}


# Report jobs read many files of one kind (answers of every dataset, LLM and context). Each input is
# named by its key (`input_key("answers", dataset, llm, context)`), which the job reads back with
# `llm_utility.workflow.keyed_inputs`: the files a job reads are exactly the rule's inputs.
def answers_inputs(datasets, contexts_of):
    """Keyed answer files: ``contexts_of(llm)`` lists the contexts read for each LLM."""
    return {
        input_key("answers", d, llm, ctx): fill(
            ANSWERS, dataset=d, llm=llm, context=ctx
        )
        for d in datasets
        for llm in LLMS
        for ctx in contexts_of(llm)
    }


def gold_inputs(datasets, candidates=("C", "U")):
    return {
        input_key("gold", d, llm, c): fill(GOLD, dataset=d, llm=llm, candidates=c)
        for d in datasets
        for llm in LLMS
        for c in candidates
    }


def queries_inputs(datasets):
    return {input_key("queries", d): fill(QUERIES, dataset=d) for d in datasets}


def keyed_per_llm(kind, pattern, datasets, methods_of=None):
    """Keyed files of one pattern for every dataset and LLM (and method, if ``methods_of(d, llm)``)."""
    if methods_of is None:
        return {
            input_key(kind, d, llm): fill(pattern, dataset=d, llm=llm)
            for d in datasets
            for llm in LLMS
        }
    return {
        input_key(kind, d, llm, m): fill(pattern, dataset=d, llm=llm, method=m)
        for d in datasets
        for llm in LLMS
        for m in methods_of(d, llm)
    }


def gold_C_inputs(datasets=DATASETS):
    return keyed_per_llm("gold", fill(GOLD, candidates="C"), datasets)


def known_inputs(datasets=DATASETS):
    return keyed_per_llm("known", KNOWN, datasets)


def final_targets():
    """Every table and figure, the qrels, the findings, the cost table and the config."""
    tables = [
        fill(TABLE, name=name, ext="md")
        for rule, name in TABLE_NAMES.items()
        if rule != "qrels_agreement" or PLAN.run_rag
    ]
    figures = [
        fill(FIGURE, name=name, ext="png")
        for name in [
            FIGURE_NAMES["figure_topk"],
            *PLAN.transfer_figures,
            FIGURE_NAMES["figure_overlap"],
            FIGURE_NAMES["figure_perplexity"],
            FIGURE_NAMES["figure_selection_transfer"],
            FIGURE_NAMES["external_runs"],
        ]
    ]
    qrels = expand(QRELS, dataset=DATASETS, llm=LLMS, candidates=["C", "U"])
    findings = [
        FINDINGS_JSON,
        fill(TABLE, name="findings", ext="md"),
        fill(TABLE, name="cost", ext="md"),
        *(fill(TABLE, name=f"transfer_unknown_both_{c}", ext="md") for c in ("U", "C")),
        RESULTS_CONFIG,
        *expand(EXPLORER, dataset=DATASETS),
    ]
    return tables + figures + qrels + findings
