# Stage 1, data: demo data generated from PyPI packages, or the user's own files, normalized to
# results/corpora/{corpus}/passages.parquet and results/{dataset}/queries.parquet.


def local_corpus_file(wildcards):
    cfg = config["corpora"][wildcards.corpus]
    return [cfg["path"]] if cfg["source"] == "local" else []


def local_queries_file(wildcards):
    cfg = dataset_cfg(wildcards)
    return [cfg["queries"]] if cfg["source"] == "local" else []


rule prepare_corpus:
    input:
        local=local_corpus_file,
    output:
        passages="results/corpora/{corpus}/passages.parquet",
    params:
        corpus=lambda wc: config["corpora"][wc.corpus],
        seed=config["seed"],
    log:
        "logs/prepare_corpus/{corpus}.log",
    conda:
        "../envs/base.yaml"
    script:
        "../workflow/scripts/prepare_corpus.py"


rule prepare_queries:
    input:
        passages=passages_of_dataset,
        local=local_queries_file,
    output:
        queries="results/{dataset}/queries.parquet",
    params:
        dataset=dataset_cfg,
        seed=config["seed"],
    log:
        "logs/prepare_queries/{dataset}.log",
    conda:
        "../envs/base.yaml"
    script:
        "../workflow/scripts/prepare_queries.py"
