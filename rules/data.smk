# Stage 1, data: demo data generated from PyPI packages, the user's own files, or the paper's
# benchmarks as their publishers ship them, normalized to results/corpora/{corpus}/passages.parquet
# and results/{dataset}/queries.parquet. Every job reads only its declared inputs: a configured file
# is always an input (downloaded by `download_data` when the config gives a URL; a missing local
# file is the output of `missing_data_file`, which fails naming where to get it).

from llm_utility.data.files import configured_files, data_paths, downloads_and_missing

# --- shared by the rules below (input functions are lambdas: `snakemake --lint` wants no `def`
# beside rules; a rule's own sit right above it) ----------------------------------------------------
DOWNLOADS, MISSING = downloads_and_missing(configured_files(config), config["data_dir"])
# Where each configured data file is, by (section, name, key).
DATA_PATHS = data_paths(config)
# The configured files of one corpus or dataset, named by role: {role: key}.
configured = lambda section, name, roles: {
    role: DATA_PATHS[(section, name, key)]
    for role, key in roles.items()
    if (section, name, key) in DATA_PATHS
}


# --- rules ----------------------------------------------------------------------------------------
if DOWNLOADS:

    rule download_data:
        output:
            file="{download}",
        log:
            "logs/download_data/{download}.log",
        wildcard_constraints:
            download=alternatives(DOWNLOADS),
        retries: 1
        # On the machine that runs Snakemake, like the materialize rules: cluster compute nodes
        # often have no network.
        localrule: True
        conda:
            BASE_ENV
        resources:
            **RESOURCES["download"],
        params:
            spec=lambda wc: DOWNLOADS[wc.download],
            retries=config["downloads"]["retries"],
            timeout=config["downloads"]["timeout"],
        script:
            "../workflow/scripts/download_data.py"


if MISSING:

    # A configured local file that is absent: this job fails with where to get it and where to put it,
    # first (top priority), before any other job spends time on a run that cannot finish.
    rule missing_data_file:
        output:
            file="{missing}",
        log:
            "logs/missing_data_file/{missing}.log",
        wildcard_constraints:
            missing=alternatives(MISSING),
        priority: 1000
        resources:
            **LIGHT,
        params:
            message=lambda wc: MISSING[wc.missing],
        script:
            "../workflow/scripts/missing_data_file.py"


rule chunk_corpus_shard:
    input:
        knowledge_source=lambda wc: DATA_PATHS[("corpora", wc.corpus, "file")],
    output:
        shard=CORPUS_SHARD,
    log:
        "logs/chunk_corpus_shard/{corpus}/{corpus_shard}.log",
    benchmark:
        "benchmarks/out/chunk_corpus_shard/{corpus}/{corpus_shard}.tsv"
    wildcard_constraints:
        corpus=alternatives(DATA_PLAN.kilt_corpora),
    priority: RETRIEVE_PRIORITY
    conda:
        BASE_ENV
    resources:
        **RESOURCES["data"],
    params:
        n_shards=lambda wc: config["corpora"][wc.corpus]["shards"],
        words=lambda wc: config["corpora"][wc.corpus]["passage_words"],
    script:
        "../workflow/scripts/chunk_corpus_shard.py"


# A corpus's source: the shards of a chunked KILT knowledge source, or its configured file.
corpus_inputs = lambda wc: (
    {
        "shards": expand(
            CORPUS_SHARD,
            corpus=wc.corpus,
            corpus_shard=range(config["corpora"][wc.corpus]["shards"]),
        )
    }
    if wc.corpus in DATA_PLAN.kilt_corpora
    else configured(
        "corpora", wc.corpus, {"file": DATA_PLAN.corpus_file_key(wc.corpus)}
    )
)


rule prepare_corpus:
    input:
        unpack(corpus_inputs),
    output:
        passages=PASSAGES,
    log:
        "logs/prepare_corpus/{corpus}.log",
    benchmark:
        "benchmarks/out/prepare_corpus/{corpus}.tsv"
    priority: RETRIEVE_PRIORITY
    conda:
        BASE_ENV
    resources:
        **RESOURCES["data"],
    params:
        corpus=lambda wc: config["corpora"][wc.corpus],
        seed=config["seed"],
    script:
        "../workflow/scripts/prepare_corpus.py"


rule corpus_spans:
    input:
        shards=lambda wc: corpus_inputs(wc)["shards"],
    output:
        spans=CORPUS_SPANS,
    log:
        "logs/corpus_spans/{corpus}.log",
    wildcard_constraints:
        corpus=alternatives(DATA_PLAN.kilt_corpora),
    conda:
        BASE_ENV
    resources:
        **RESOURCES["data"],
    script:
        "../workflow/scripts/corpus_spans.py"


# The benchmark files a dataset's loader reads (file, and questions/aliases/qrels when configured).
dataset_files = lambda wc: configured(
    "datasets",
    wc.dataset,
    {
        k: k
        for k in ("file", "questions", "aliases", "ranking_queries", "ranking_qrels")
    },
)


rule load_queries:
    input:
        unpack(dataset_files),
    output:
        queries=SOURCE_QUERIES,
        evidence=EVIDENCE,
        summary=SOURCE_SUMMARY,
    log:
        "logs/load_queries/{dataset}.log",
    wildcard_constraints:
        dataset=alternatives(DATA_PLAN.benchmarks),
    conda:
        BASE_ENV
    resources:
        **RESOURCES["data"],
    params:
        dataset=dataset_spec,
    script:
        "../workflow/scripts/load_queries.py"


extractor_of = lambda wc: config["datasets"][wc.dataset]["extractor"]


# MS MARCO-FQA: the extractor LLM turns MS MARCO's long answers into short entity answers.
rule extract_answers:
    input:
        queries=SOURCE_QUERIES,
        manifest=lambda wc: fill(MANIFEST, llm=extractor_of(wc)),
        prompts=config["prompts"],
    output:
        answers=SHORT_ANSWERS,
    log:
        "logs/extract_answers/{dataset}.log",
    benchmark:
        "benchmarks/out/extract_answers/{dataset}.tsv"
    wildcard_constraints:
        dataset=alternatives(DATA_PLAN.msmarco_qa),
    conda:
        lambda wc: llm_env(extractor_of(wc))
    threads: 8
    resources:
        **llm_resources(extractor_of),
    params:
        spec=lambda wc: MODEL_PLAN.llm_spec(extractor_of(wc)),
        extractor=extractor_of,
    script:
        "../workflow/scripts/extract_answers.py"


mapping_inputs = lambda wc: {
    "evidence": fill(EVIDENCE, dataset=wc.dataset),
    "queries": fill(SOURCE_QUERIES, dataset=wc.dataset),
    "summary": fill(SOURCE_SUMMARY, dataset=wc.dataset),
    "passages": passages_of_dataset(wc),
    **(
        {"spans": fill(CORPUS_SPANS, corpus=corpus_of(wc))}
        if DATA_PLAN.mapping_rule(wc.dataset) == "span"
        else {}
    ),
    **(
        configured("datasets", wc.dataset, {"knowledge_source": "knowledge_source"})
        if DATA_PLAN.maps_provenance_by_text(wc.dataset)
        else {}
    ),
}


rule map_human_passages:
    input:
        unpack(mapping_inputs),
    output:
        human=HUMAN_PASSAGES,
        coverage=HUMAN_COVERAGE,
    log:
        "logs/map_human_passages/{dataset}.log",
    benchmark:
        "benchmarks/out/map_human_passages/{dataset}.tsv"
    wildcard_constraints:
        dataset=alternatives(DATA_PLAN.benchmarks),
    conda:
        BASE_ENV
    resources:
        **RESOURCES["data"],
    params:
        corpus=corpus_of,
        rule=lambda wc: DATA_PLAN.mapping_rule(wc.dataset),
    script:
        "../workflow/scripts/map_human_passages.py"


# worldfacts and local query sets are read with their corpus; benchmarks from their loaded queries
# and mapped human passages (and MS MARCO-FQA's short answers).
prepare_queries_inputs = lambda wc: (
    {
        "passages": passages_of_dataset(wc),
        **configured("datasets", wc.dataset, {"queries": "queries"}),
    }
    if wc.dataset not in DATA_PLAN.benchmarks
    else {
        "source": fill(SOURCE_QUERIES, dataset=wc.dataset),
        "human": fill(HUMAN_PASSAGES, dataset=wc.dataset),
        **(
            {"short_answers": fill(SHORT_ANSWERS, dataset=wc.dataset)}
            if wc.dataset in DATA_PLAN.msmarco_qa
            else {}
        ),
    }
)


rule prepare_queries:
    input:
        unpack(prepare_queries_inputs),
    output:
        queries=QUERIES,
    log:
        "logs/prepare_queries/{dataset}.log",
    conda:
        BASE_ENV
    resources:
        **RESOURCES["data"],
    params:
        dataset=dataset_spec,
        seed=config["seed"],
    script:
        "../workflow/scripts/prepare_queries.py"
