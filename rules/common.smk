# Helpers shared by every stage: config lookups, wildcard constraints, input functions and the
# list of final targets. Nothing here runs a job.

import os
import re
from pathlib import Path

# Jobs import the llm_utility library from this checkout, also inside per-rule conda environments.
_SRC = str(Path(workflow.basedir) / "src")
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (_SRC, os.environ.get("PYTHONPATH")) if p
)


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


DATASETS = list(config["datasets"])
LLMS = list(config["llms"])
CORPORA = list(config["corpora"])
RETRIEVERS = list(config["retrievers"])
CANDIDATE_CONTEXTS = ["none", "single", "topk", "union", "human"]
# Path patterns that report scripts also need (to find each input by its wildcards).
ANSWERS = "results/{dataset}/{llm}/answers/{context}.parquet"
GOLD = "results/{dataset}/{llm}/gold_{candidates}.parquet"
QUERIES = "results/{dataset}/queries.parquet"
# Directory names under results/ that a dataset slug must not shadow.
_RESERVED = {"corpora", "tables", "figures", "logs", "benchmarks"}


def _check_config():
    """Cross-references the schema cannot express; errors name the offending key."""
    for name, ds in config["datasets"].items():
        if name in _RESERVED:
            raise ValueError(
                f"config: datasets.{name}: '{name}' is reserved for results/{name}/"
            )
        if ds["corpus"] not in config["corpora"]:
            raise ValueError(
                f"config: datasets.{name}.corpus = '{ds['corpus']}' is not in corpora ({CORPORA})"
            )
        if ds["retriever"] not in config["retrievers"]:
            raise ValueError(
                f"config: datasets.{name}.retriever = '{ds['retriever']}' is not in retrievers ({RETRIEVERS})"
            )
        if (
            ds["source"] == "worldfacts"
            and config["corpora"][ds["corpus"]]["source"] != "worldfacts"
        ):
            raise ValueError(
                f"config: datasets.{name}: worldfacts queries need a worldfacts corpus"
            )


_check_config()


def _alternatives(names):
    return "|".join(re.escape(n) for n in names)


wildcard_constraints:
    dataset=_alternatives(DATASETS),
    llm=_alternatives(LLMS),
    source=_alternatives(LLMS),
    corpus=_alternatives(CORPORA),
    retriever=_alternatives(RETRIEVERS),
    shard=r"\d+",


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
    return f"results/corpora/{corpus_of(wildcards)}/passages.parquet"


def run_of_dataset(wildcards):
    return f"results/{wildcards.dataset}/{retriever_of(wildcards)}/run.parquet"


def manifest_of(wildcards):
    return f"resources/models/{wildcards.llm}/manifest.json"


def store_of(wildcards):
    return str(Path(config["store_dir"]) / f"{wildcards.llm}.sqlite")


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


def other_llms(llm):
    return [o for o in LLMS if o != llm]


# A user's own files are inputs (edits rerun what depends on them) once they exist; a missing one is
# left out so the DAG still resolves (e.g. `snakemake -n` of config/paper.yaml before downloading),
# and the job then stops with an error naming the config key.
def local_corpus_file(wildcards):
    cfg = config["corpora"][wildcards.corpus]
    return (
        [cfg["path"]]
        if cfg["source"] == "local" and os.path.exists(cfg["path"])
        else []
    )


def local_queries_file(wildcards):
    cfg = dataset_cfg(wildcards)
    return (
        [cfg["queries"]]
        if cfg["source"] == "local" and os.path.exists(cfg["queries"])
        else []
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


def all_targets():
    tables = ["results/tables/retrieval.md", "results/tables/table1_rag.md"]
    figures = [
        f"results/figures/{name}.png"
        for name in (
            "fig1_left_topk",
            "fig1_right_transfer",
            "fig2_transfer_U",
            "fig8_transfer_C",
            "fig3_overlap",
        )
    ]
    return tables + figures


def answers_for(contexts, transfer=False):
    """Answer files of every (dataset, LLM) for ``contexts``, plus the transfer files if asked."""
    files = expand(ANSWERS, dataset=DATASETS, llm=LLMS, context=contexts)
    if transfer:
        files += [
            ANSWERS.format(dataset=d, llm=llm, context=f"gold_{c}_from_{src}")
            for d in DATASETS
            for llm in LLMS
            for src in other_llms(llm)
            for c in ("C", "U")
        ]
    return files
