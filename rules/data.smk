# Stage 1, data: demo data generated from PyPI packages, or the user's own files, normalized to
# results/corpora/{corpus}/passages.parquet and results/{dataset}/queries.parquet.


rule prepare_corpus:
    input:
        local=local_corpus_file,
    output:
        passages="results/corpora/{corpus}/passages.parquet",
    log:
        "logs/prepare_corpus/{corpus}.log",
    conda:
        "../envs/base.yaml"
    params:
        corpus=lambda wc: config["corpora"][wc.corpus],
        seed=config["seed"],
    script:
        "../workflow/scripts/prepare_corpus.py"


rule prepare_queries:
    input:
        passages=passages_of_dataset,
        local=local_queries_file,
    output:
        queries="results/{dataset}/queries.parquet",
    log:
        "logs/prepare_queries/{dataset}.log",
    conda:
        "../envs/base.yaml"
    params:
        dataset=dataset_cfg,
        seed=config["seed"],
    script:
        "../workflow/scripts/prepare_queries.py"
