# Stage 4, answers: every LLM call goes through the generation store (one SQLite file per model), so
# a prompt asked for by two jobs is computed once and an interrupted job resumes where it stopped.


# Weights land in resources/models/{llm}/ (or <models_dir>/llms/{llm}) once: a GGUF dequantized, or
# hub weights downloaded at their pinned revision (the manifest records the commit). Every other job
# loads them offline. A local rule: it runs where Snakemake runs, which has network when compute
# nodes do not.
rule materialize_model:
    output:
        manifest="resources/models/{llm}/manifest.json",
    log:
        "logs/materialize_model/{llm}.log",
    benchmark:
        "benchmarks/out/materialize_model/{llm}.tsv"
    localrule: True
    conda:
        materialize_conda_env
    params:
        spec=llm_cfg,
        weights_dir=lambda wc: (
            f"{config['models_dir']}/llms/{wc.llm}" if config["models_dir"] else None
        ),
    script:
        "../workflow/scripts/materialize_model.py"


# The contexts that need no gold set, answered together in one job per (dataset, LLM).
rule answer_candidates:
    input:
        queries="results/{dataset}/queries.parquet",
        run=run_of_dataset,
        passages=passages_of_dataset,
        manifest=manifest_of,
        prompts=config["prompts"],
    output:
        **{
            c: f"results/{{dataset}}/{{llm}}/answers/{c}.parquet"
            for c in CANDIDATE_CONTEXTS
        },
    log:
        "logs/answer_candidates/{dataset}/{llm}.log",
    benchmark:
        "benchmarks/out/answer_candidates/{dataset}/{llm}.tsv"
    conda:
        llm_conda_env
    threads: 2
    resources:
        gpu=lambda wc: llm_cfg(wc)["gpu"],
    params:
        spec=llm_cfg,
        top_k=config["top_k"],
        store=store_of,
        gpu_lock_dir=config["gpu_lock_dir"],
    script:
        "../workflow/scripts/answer.py"


# The LLM answering with its own gold sets G(C) and G(U).
rule answer_gold:
    input:
        queries="results/{dataset}/queries.parquet",
        run=run_of_dataset,
        passages=passages_of_dataset,
        manifest=manifest_of,
        prompts=config["prompts"],
        gold_C="results/{dataset}/{llm}/gold_C.parquet",
        gold_U="results/{dataset}/{llm}/gold_U.parquet",
    output:
        gold_C="results/{dataset}/{llm}/answers/gold_C.parquet",
        gold_U="results/{dataset}/{llm}/answers/gold_U.parquet",
    log:
        "logs/answer_gold/{dataset}/{llm}.log",
    benchmark:
        "benchmarks/out/answer_gold/{dataset}/{llm}.tsv"
    conda:
        llm_conda_env
    threads: 2
    resources:
        gpu=lambda wc: llm_cfg(wc)["gpu"],
    params:
        spec=llm_cfg,
        top_k=config["top_k"],
        store=store_of,
        gpu_lock_dir=config["gpu_lock_dir"],
    script:
        "../workflow/scripts/answer.py"


# Transfer: the LLM answering with the gold sets built for another LLM ({source}).
rule answer_transfer:
    input:
        queries="results/{dataset}/queries.parquet",
        run=run_of_dataset,
        passages=passages_of_dataset,
        manifest=manifest_of,
        prompts=config["prompts"],
        gold_C="results/{dataset}/{source}/gold_C.parquet",
        gold_U="results/{dataset}/{source}/gold_U.parquet",
    output:
        gold_C="results/{dataset}/{llm}/answers/gold_C_from_{source}.parquet",
        gold_U="results/{dataset}/{llm}/answers/gold_U_from_{source}.parquet",
    log:
        "logs/answer_transfer/{dataset}/{llm}/{source}.log",
    benchmark:
        "benchmarks/out/answer_transfer/{dataset}/{llm}/{source}.tsv"
    conda:
        llm_conda_env
    threads: 2
    resources:
        gpu=lambda wc: llm_cfg(wc)["gpu"],
    params:
        spec=llm_cfg,
        top_k=config["top_k"],
        store=store_of,
        gpu_lock_dir=config["gpu_lock_dir"],
    script:
        "../workflow/scripts/answer.py"
