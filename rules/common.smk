# Helpers shared by every stage: file patterns (written once), config lookups and checks, wildcard
# constraints, input functions and the list of final targets. Nothing here runs a job.

import os
import re
import sys
from pathlib import Path

# Jobs import the llm_utility library from this checkout, also inside per-rule conda environments;
# so does this file (the context names and method registries are the library's).
_SRC = str(Path(workflow.basedir) / "src")
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (_SRC, os.environ.get("PYTHONPATH")) if p
)
sys.path.insert(0, _SRC)

from llm_utility.method.answers import CANDIDATE_CONTEXTS  # noqa: E402
from llm_utility.method.judgments import (
    SELECTION_METHODS,
    selection_method,
)  # noqa: E402
from llm_utility.method.rankings import RANKING_METHODS  # noqa: E402
from llm_utility.workflow import check_config, figure1_dataset, input_key  # noqa: E402

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


# --- file patterns: every path of the workflow, written once --------------------------------------
QUERIES = "results/{dataset}/queries.parquet"
PASSAGES = "results/corpora/{corpus}/passages.parquet"
RUN = "results/{dataset}/{retriever}/run.parquet"
CANDIDATES = "results/{dataset}/candidates.parquet"
MANIFEST = "resources/models/{llm}/manifest.json"
RETRIEVER_MANIFEST = "resources/retrievers/{retriever}/manifest.json"
ANSWERS = "results/{dataset}/{llm}/answers/{context}.parquet"
GOLD = "results/{dataset}/{llm}/gold_{candidates}.parquet"
KNOWN = "results/{dataset}/{llm}/known.parquet"
TABLES = "results/tables"
FIGURES = "results/figures"

DATASETS = list(config["datasets"])
LLMS = list(config["llms"])
CORPORA = list(config["corpora"])
RETRIEVERS = list(config["retrievers"])

check_config(config)


def fill(pattern, **values):
    """``pattern`` with only the named fields filled in; other wildcards stay as they are."""
    return re.sub(
        r"\{(\w+)\}",
        lambda m: str(values[m.group(1)]) if m.group(1) in values else m.group(0),
        pattern,
    )


def _alternatives(names):
    return "|".join(re.escape(n) for n in names)


wildcard_constraints:
    dataset=_alternatives(DATASETS),
    llm=_alternatives(LLMS),
    corpus=_alternatives(CORPORA),
    retriever=_alternatives(RETRIEVERS),
    candidates="C|U",
    shard=r"\d+",


# --- config lookups -------------------------------------------------------------------------------
def dataset_cfg(wildcards):
    return config["datasets"][wildcards.dataset]


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


def run_of_dataset(wildcards):
    return fill(RUN, dataset=wildcards.dataset, retriever=retriever_of(wildcards))


def gpus_of_llm(wildcards):
    return llm_cfg(wildcards)["gpu"]


def llm_conda_env(wildcards):
    return f"../envs/llm-{llm_cfg(wildcards)['backend']}.yaml"


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


def embedding_shards(wildcards):
    n = config["retrievers"][wildcards.retriever]["shards"]
    return expand(
        "results/corpora/{corpus}/{retriever}/embeddings/{shard}.npy",
        corpus=wildcards.corpus,
        retriever=wildcards.retriever,
        shard=range(n),
    )


def index_of_dataset(wildcards):
    return (
        f"results/corpora/{corpus_of(wildcards)}/{retriever_of(wildcards)}/index.faiss"
    )


# --- inputs and outputs of the answer rules -------------------------------------------------------
# An answer job's outputs are named by their context; an input a context is made from (a gold set, a
# selection, a ranking) is named by the same context, so the job pairs them without any path logic.
def answers_named(contexts):
    """Named answer outputs (patterns in {dataset} and {llm}), one per context."""
    return {ctx: fill(ANSWERS, context=ctx) for ctx in contexts}


def gold_contexts(candidates):
    """The contexts of every LLM's gold set among ``candidates`` (an LLM's own: from itself)."""
    return [f"gold_{candidates}_from_{source}" for source in LLMS]


def gold_tables(candidates):
    """Every LLM's gold set among ``candidates`` (pattern in {dataset}), named by its context."""
    return {
        f"gold_{candidates}_from_{source}": fill(
            GOLD, llm=source, candidates=candidates
        )
        for source in LLMS
    }


# --- inputs of the report rules, keyed -----------------------------------------------------------
# Report jobs get many files of one kind (answers of every dataset, LLM and context). Each input is
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


# --- inputs of the transfer figures -----------------------------------------------------------
# Figure 1 right (one dataset, U candidates), Figure 2 (every dataset, U), Figure 8 (every dataset, C).
TRANSFER_FIGURES = {
    "fig1_right_transfer": {"candidates": "U", "datasets": [figure1_dataset(config)]},
    "fig2_transfer_U": {"candidates": "U", "datasets": DATASETS},
    "fig8_transfer_C": {"candidates": "C", "datasets": DATASETS},
}


def transfer_inputs(wildcards):
    spec = TRANSFER_FIGURES[wildcards.figure]
    contexts = ["human"] + gold_contexts(spec["candidates"])
    return answers_inputs(spec["datasets"], lambda llm: contexts)


# --- final targets --------------------------------------------------------------------------------
def all_targets():
    tables = [
        f"{TABLES}/{name}.md"
        for name in (
            "retrieval",
            "table1_rag",
            "empty_answers",
            "table6_datasets",
            "table2_selection",
            "table3_rag_selection",
            "table4_ranking",
            "table5_thinking",
            "table7_rag_reranked",
            "table8_known_rejection",
            "external_runs",
        )
    ]
    figures = [
        f"{FIGURES}/{name}.png"
        for name in (
            "fig1_left_topk",
            "fig1_right_transfer",
            "fig2_transfer_U",
            "fig8_transfer_C",
            "fig3_overlap",
            "fig4_perplexity",
            "fig9_selection_transfer",
        )
    ]
    qrels = expand(QRELS, dataset=DATASETS, llm=LLMS, candidates=["C", "U"])
    return tables + figures + qrels


# --- the judgment stage ---------------------------------------------------------------------------
JUDGMENTS = "results/{dataset}/{llm}/judgments/{method}.parquet"
RANKINGS = "results/{dataset}/{llm}/rankings/{method}.parquet"
PERPLEXITY = "results/{dataset}/{llm}/perplexity.parquet"
QRELS = "results/{dataset}/{llm}/qrels_{candidates}.txt"
JUDGE = config["judgments"]
RANK = config["rankings"]
# Figure 9 shows the transfer of the paper's best selection method, if it is a rag method.
FIGURE9_METHOD = (
    "listwise_pa" if "listwise_pa" in JUDGE["rag_methods"] else JUDGE["rag_methods"][0]
)


def can_think(llm):
    return config["llms"][llm]["can_think"]


def thinking_pairs():
    """(dataset, llm) pairs the thinking methods run for (Table 5)."""
    datasets = JUDGE["thinking_datasets"] or DATASETS
    return [(d, llm) for d in datasets for llm in LLMS if can_think(llm)]


def _counterpart(method):
    """The method without thinking that a thinking method is compared with in Table 5."""
    return method.replace("_pat_think", "_pa").replace("_think", "")


# The selection methods one `judge` job runs for every (dataset, LLM): Table 2's, the RAG ones, and
# Table 5's counterparts where some model thinks. The thinking ones run in `judge_thinking`.
JUDGE_METHODS = list(
    dict.fromkeys(
        JUDGE["methods"]
        + JUDGE["rag_methods"]
        + (
            [_counterpart(m) for m in JUDGE["thinking_methods"]]
            if thinking_pairs()
            else []
        )
    )
)
THINKING_METHODS = list(JUDGE["thinking_methods"])
# Table 8 compares these two when both are judged.
KNOWN_REJECTION = ["listwise_pa", "listwise_pa_reject"]
# The rankings the LLM makes (in its `judge` job); the retriever's needs no model.
RANKED = list(dict.fromkeys(RANK["methods"] + RANK["rag_methods"]))
MODEL_RANKINGS = [m for m in RANKED if m != "retriever"]


def judge_inputs(methods):
    """The pseudo-answers ``methods`` need, named by their answer context (topk, topk_think)."""
    contexts = {selection_method(m).pseudo_context for m in methods} - {None}
    return {ctx: fill(ANSWERS, context=ctx) for ctx in sorted(contexts)}


def judge_max_new_tokens():
    return {
        "pointwise": JUDGE["pointwise_max_new_tokens"],
        "listwise": JUDGE["listwise_max_new_tokens"],
        "thinking": JUDGE["thinking_max_new_tokens"],
    }


def thinking_spec(wildcards):
    """The LLM's spec with thinking on (judge_thinking)."""
    return {**llm_cfg(wildcards), "enable_thinking": True, "stop": []}


def thinking_answer_spec(wildcards):
    """topk_think: the top-k answer with thinking on and the thinking budget (pseudo-answer (T))."""
    return {
        **thinking_spec(wildcards),
        "max_new_tokens": JUDGE["thinking_max_new_tokens"],
    }


def judge_outputs(methods, rankings=(), perplexity=False):
    """A judge job's outputs, named by kind and method (read back with keyed_inputs)."""
    out = {input_key("judgments", m): fill(JUDGMENTS, method=m) for m in methods}
    out |= {input_key("rankings", m): fill(RANKINGS, method=m) for m in rankings}
    if perplexity:
        out["perplexity"] = PERPLEXITY
    return out


def selected_contexts():
    """RAG with selections: every rag method's selections of every LLM (an LLM's own: from itself)."""
    return [
        f"selected_{m}_from_{source}" for m in JUDGE["rag_methods"] for source in LLMS
    ]


def selection_tables():
    """The judgment tables behind ``selected_contexts`` (pattern in {dataset}), named by context."""
    return {
        f"selected_{m}_from_{source}": fill(JUDGMENTS, llm=source, method=m)
        for m in JUDGE["rag_methods"]
        for source in LLMS
    }


def reranked_contexts():
    return [f"reranked_{m}_top{RANK['rag_top']}" for m in RANK["rag_methods"]]


def reranked_tables():
    return {
        f"reranked_{m}_top{RANK['rag_top']}": fill(RANKINGS, method=m)
        for m in RANK["rag_methods"]
    }


# --- inputs of the judgment tables, keyed ---------------------------------------------------------
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


def thinking_llms():
    return [llm for llm in LLMS if can_think(llm)]


def table5_methods(dataset, llm):
    """Table 5: the thinking methods and their counterparts without thinking."""
    if (dataset, llm) not in thinking_pairs():
        return []
    counterparts = [_counterpart(m) for m in THINKING_METHODS]
    return list(dict.fromkeys(counterparts)) + THINKING_METHODS


def table5_inputs():
    inputs = {}
    for d in DATASETS:
        for llm in thinking_llms():
            for m in table5_methods(d, llm):
                inputs[input_key("judgments", d, llm, m)] = fill(
                    JUDGMENTS, dataset=d, llm=llm, method=m
                )
                inputs[input_key("gold", d, llm)] = fill(
                    GOLD, dataset=d, llm=llm, candidates="C"
                )
    return inputs


def external_runs():
    """TREC runs a user dropped in resources/runs/<dataset>/<name>.trec, keyed (dataset, name)."""
    found = {}
    for d in DATASETS:
        for path in sorted(Path("resources/runs", d).glob("*.trec")):
            found[input_key("runs", d, path.stem)] = str(path)
    return found


# --- what each job asks a scheduler for (config `resources`; an LLM's own mem_mb/runtime first) ----
RESOURCES = config["resources"]

# The order in which ready LLM jobs get the free cores (higher first; everything else is 0): along
# the DAG's longest chain, candidate answers -> judgments -> answers with judgments.
PRIORITY = {
    "retrieve": 4,
    "answer_candidates": 3,
    "judge": 2,
    "answer_judgments": 1,
    "answer_gold": 0,
}


def llm_threads(wildcards):
    return llm_cfg(wildcards)["threads"] or 8


def llm_mem_mb(wildcards):
    return llm_cfg(wildcards)["mem_mb"] or RESOURCES["llm"]["mem_mb"]


def llm_runtime(wildcards):
    return llm_cfg(wildcards)["runtime"] or RESOURCES["llm"]["runtime"]


# --- the findings stage (rules/findings.smk) ------------------------------------------------------
# Bootstrap settings of every interval (Table 1, the judgment tables, findings.json). The tables get
# INTERVALS: None when report.intervals is off (the paper's exact layout).
BOOTSTRAP = {
    k: config["report"][k] for k in ("resamples", "bootstrap_seed", "confidence")
}
INTERVALS = BOOTSTRAP if config["report"]["intervals"] else None


def families():
    return {llm: config["llms"][llm]["family"] for llm in LLMS}


def findings_inputs():
    """Everything a finding reads: Table 1's and the transfer answers, gold sets, known flags,
    queries, perplexity, Table 2's judgments and the attention/retriever rankings (where configured).
    """
    contexts = TABLE1_CONTEXTS + gold_contexts("C") + gold_contexts("U")
    rankings = [m for m in ("retriever", "attention") if m in RANK["methods"]]
    return {
        **answers_inputs(DATASETS, lambda llm: contexts),
        **gold_inputs(DATASETS),
        **known_inputs(),
        **queries_inputs(DATASETS),
        **keyed_per_llm("perplexity", PERPLEXITY, DATASETS),
        **keyed_per_llm(
            "judgments", JUDGMENTS, DATASETS, lambda d, llm: JUDGE["methods"]
        ),
        **keyed_per_llm("rankings", RANKINGS, DATASETS, lambda d, llm: rankings),
    }


def transfer_unknown_inputs(wildcards):
    contexts = ["human"] + gold_contexts(wildcards.candidates)
    return {**answers_inputs(DATASETS, lambda llm: contexts), **known_inputs()}


# The model jobs the other targets run, as (rule, wildcards): the cost table's rows. Each must be a
# job the DAG runs anyway (the cost rule asks for their outputs); tests/test_workflow_dryrun.py
# checks that the cost table schedules exactly the model jobs of the full DAG.
def model_jobs():
    pairs = [{"dataset": d, "llm": llm} for d in DATASETS for llm in LLMS]
    thinking = [{"dataset": d, "llm": llm} for d, llm in thinking_pairs()]
    jobs = [("materialize_model", {"llm": llm}) for llm in LLMS]
    for name in ("answer_candidates", "answer_gold_C", "answer_gold_U", "judge"):
        jobs += [(name, wc) for wc in pairs]
    if any(
        selection_method(m).pseudo_context == "topk_think" for m in THINKING_METHODS
    ):
        jobs += [("answer_thinking", wc) for wc in thinking]
    jobs += [("judge_thinking", wc) for wc in thinking]
    if JUDGE["rag_methods"] or RANK["rag_methods"]:
        jobs += [("answer_judgments", wc) for wc in pairs]
    return jobs


def _filled(pattern, wildcards):
    return expand(str(pattern), **wildcards)[0] if pattern else None


def _first_output(name):
    """One output pattern of a model rule, from the patterns of this file: `rules.<name>.output`
    would be the storage-local path under a storage provider (Kubernetes), not an input.
    """
    first = {
        "materialize_model": MANIFEST,
        "answer_candidates": fill(ANSWERS, context="none"),
        "answer_gold_C": fill(ANSWERS, context=gold_contexts("C")[0]),
        "answer_gold_U": fill(ANSWERS, context=gold_contexts("U")[0]),
        "answer_thinking": fill(ANSWERS, context="topk_think"),
        "judge": PERPLEXITY,
        "judge_thinking": (
            fill(JUDGMENTS, method=THINKING_METHODS[0]) if THINKING_METHODS else None
        ),
        "answer_judgments": fill(
            ANSWERS, context=(selected_contexts() + reranked_contexts() + ["none"])[0]
        ),
    }
    return first[name]


def model_job_outputs():
    return [_filled(_first_output(name), wc) for name, wc in model_jobs()]


def model_job_records():
    """rule, wildcards, and the log and benchmark paths of each model job, filled in from the rule's
    own log: and benchmark: patterns (``rules.<name>``), so the cost table never rebuilds a path.
    """
    return [
        {
            "rule": name,
            "wildcards": wc,
            "log": _filled(getattr(rules, name).log[0], wc),
            "benchmark": _filled(getattr(rules, name).benchmark, wc),
        }
        for name, wc in model_jobs()
    ]


def results_config():
    """The validated config without the operational settings (where the store and GPU locks live),
    which change no result."""
    return {k: v for k, v in config.items() if k not in ("store_dir", "gpu_lock_dir")}


def findings_targets():
    return [
        "results/findings.json",
        f"{TABLES}/findings.md",
        f"{TABLES}/cost.md",
        f"{TABLES}/transfer_unknown_both_U.md",
        f"{TABLES}/transfer_unknown_both_C.md",
        "results/config.yaml",
    ]
