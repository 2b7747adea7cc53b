# Stage 1, data: demo data generated from PyPI packages, the user's own files, or the paper's
# benchmarks as their publishers ship them, normalized to results/corpora/{corpus}/passages.parquet
# and results/{dataset}/queries.parquet. Every job reads only its declared inputs: a configured file
# is always an input (downloaded by `download_data` when the config gives a URL; a missing local
# file is the output of `missing_data_file`, which fails naming where to get it).


include: "data_inputs.smk"


if DOWNLOADS:

    rule download_data:
        output:
            file="{download}",
        log:
            "logs/download_data/{download}.log",
        wildcard_constraints:
            download=_alternatives_or_none(DOWNLOADS),
        retries: 1
        # On the machine that runs Snakemake, like the materialize rules: cluster compute nodes
        # often have no network.
        localrule: True
        conda:
            "../envs/base.yaml"
        resources:
            mem_mb=RESOURCES["download"]["mem_mb"],
            runtime=RESOURCES["download"]["runtime"],
        params:
            spec=lambda wc: DOWNLOADS[wc.download],
            retries=config["downloads"]["retries"],
            timeout=config["downloads"]["timeout"],
        script:
            "../workflow/scripts/download_data.py"


if MISSING:

    # A configured local file that is absent: this job fails with where to get it and where to put it.
    rule missing_data_file:
        output:
            file="{missing}",
        log:
            "logs/missing_data_file/{missing}.log",
        wildcard_constraints:
            missing=_alternatives_or_none(MISSING),
        resources:
            mem_mb=RESOURCES["light"]["mem_mb"],
            runtime=RESOURCES["light"]["runtime"],
        params:
            message=lambda wc: MISSING[wc.missing],
        script:
            "../workflow/scripts/missing_data_file.py"


rule chunk_corpus_shard:
    input:
        knowledge_source=lambda wc: data_file("corpora", wc.corpus, "file"),
    output:
        shard="results/corpora/{corpus}/shards/{shard}.parquet",
    log:
        "logs/chunk_corpus_shard/{corpus}/{shard}.log",
    benchmark:
        "benchmarks/out/chunk_corpus_shard/{corpus}/{shard}.tsv"
    wildcard_constraints:
        corpus=_alternatives_or_none(KILT_CORPORA),
    conda:
        "../envs/base.yaml"
    resources:
        mem_mb=RESOURCES["data"]["mem_mb"],
        runtime=RESOURCES["data"]["runtime"],
    params:
        n_shards=lambda wc: config["corpora"][wc.corpus]["shards"],
        words=lambda wc: config["corpora"][wc.corpus]["passage_words"],
    script:
        "../workflow/scripts/chunk_corpus_shard.py"


rule prepare_corpus:
    input:
        unpack(corpus_inputs),
    output:
        passages="results/corpora/{corpus}/passages.parquet",
    log:
        "logs/prepare_corpus/{corpus}.log",
    benchmark:
        "benchmarks/out/prepare_corpus/{corpus}.tsv"
    conda:
        "../envs/base.yaml"
    resources:
        mem_mb=RESOURCES["data"]["mem_mb"],
        runtime=RESOURCES["data"]["runtime"],
    params:
        corpus=lambda wc: config["corpora"][wc.corpus],
        seed=config["seed"],
    script:
        "../workflow/scripts/prepare_corpus.py"


rule corpus_spans:
    input:
        shards=lambda wc: corpus_inputs(wc)["shards"],
    output:
        spans="results/corpora/{corpus}/spans.parquet",
    log:
        "logs/corpus_spans/{corpus}.log",
    wildcard_constraints:
        corpus=_alternatives_or_none(KILT_CORPORA),
    conda:
        "../envs/base.yaml"
    resources:
        mem_mb=RESOURCES["data"]["mem_mb"],
        runtime=RESOURCES["data"]["runtime"],
    script:
        "../workflow/scripts/corpus_spans.py"


rule load_queries:
    input:
        unpack(dataset_files),
    output:
        queries="results/{dataset}/source/queries.parquet",
        evidence="results/{dataset}/source/evidence.parquet",
        summary="results/{dataset}/source/summary.json",
    log:
        "logs/load_queries/{dataset}.log",
    wildcard_constraints:
        dataset=_alternatives_or_none(BENCHMARKS),
    conda:
        "../envs/base.yaml"
    resources:
        mem_mb=RESOURCES["data"]["mem_mb"],
        runtime=RESOURCES["data"]["runtime"],
    params:
        dataset=dataset_cfg,
    script:
        "../workflow/scripts/load_queries.py"


# MS MARCO-FQA: the extractor LLM turns MS MARCO's long answers into short entity answers.
rule extract_answers:
    input:
        queries="results/{dataset}/source/queries.parquet",
        manifest=lambda wc: f"resources/models/{extractor_of(wc)}/manifest.json",
        prompts=config["prompts"],
    output:
        answers="results/{dataset}/source/short_answers.parquet",
    log:
        "logs/extract_answers/{dataset}.log",
    benchmark:
        "benchmarks/out/extract_answers/{dataset}.tsv"
    wildcard_constraints:
        dataset=_alternatives_or_none(MSMARCO_QA),
    conda:
        lambda wc: f"../envs/llm-{extractor_cfg(wc)['backend']}.yaml"
    threads: 8
    resources:
        mem_mb=lambda wc: extractor_cfg(wc)["mem_mb"] or RESOURCES["llm"]["mem_mb"],
        runtime=lambda wc: extractor_cfg(wc)["runtime"] or RESOURCES["llm"]["runtime"],
        gpu=lambda wc: extractor_cfg(wc)["gpu"],
    params:
        spec=extractor_cfg,
        extractor=extractor_of,
    script:
        "../workflow/scripts/extract_answers.py"


rule map_human_passages:
    input:
        unpack(mapping_inputs),
    output:
        human="results/{dataset}/human_passages.parquet",
        coverage="results/{dataset}/human_coverage.json",
    log:
        "logs/map_human_passages/{dataset}.log",
    benchmark:
        "benchmarks/out/map_human_passages/{dataset}.tsv"
    wildcard_constraints:
        dataset=_alternatives_or_none(BENCHMARKS),
    conda:
        "../envs/base.yaml"
    resources:
        mem_mb=RESOURCES["data"]["mem_mb"],
        runtime=RESOURCES["data"]["runtime"],
    params:
        corpus=corpus_of,
        rule=lambda wc: mapping_rule(wc.dataset),
    script:
        "../workflow/scripts/map_human_passages.py"


rule prepare_queries:
    input:
        unpack(prepare_queries_inputs),
    output:
        queries="results/{dataset}/queries.parquet",
    log:
        "logs/prepare_queries/{dataset}.log",
    conda:
        "../envs/base.yaml"
    resources:
        mem_mb=RESOURCES["data"]["mem_mb"],
        runtime=RESOURCES["data"]["runtime"],
    params:
        dataset=dataset_cfg,
        seed=config["seed"],
    script:
        "../workflow/scripts/prepare_queries.py"


localrules:
    table6,


# Paper Table 6: dataset statistics (queries, human passages per query, corpus and its size, coverage).
rule table6:
    input:
        queries=expand(QUERIES, dataset=DATASETS),
        passages=[
            f"results/corpora/{config['datasets'][d]['corpus']}/passages.parquet"
            for d in DATASETS
        ],
        coverage=expand("results/{dataset}/human_coverage.json", dataset=BENCHMARKS),
    output:
        csv="results/tables/table6_datasets.csv",
        md="results/tables/table6_datasets.md",
        tex="results/tables/table6_datasets.tex",
    log:
        "logs/table6.log",
    conda:
        "../envs/base.yaml"
    resources:
        mem_mb=RESOURCES["light"]["mem_mb"],
        runtime=RESOURCES["light"]["runtime"],
    params:
        datasets=DATASETS,
        corpora=[config["datasets"][d]["corpus"] for d in DATASETS],
        with_coverage=BENCHMARKS,
    script:
        "../workflow/scripts/table6.py"
