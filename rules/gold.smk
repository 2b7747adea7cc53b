# Stage 5, gold: each LLM's gold utilitarian passages among C and U (paper Eq. 1-2) and the
# per-query known flag, from the no-passage and single-passage answers.


rule gold_sets:
    input:
        queries="results/{dataset}/queries.parquet",
        run=run_of_dataset,
        none="results/{dataset}/{llm}/answers/none.parquet",
        single="results/{dataset}/{llm}/answers/single.parquet",
    output:
        gold_C="results/{dataset}/{llm}/gold_C.parquet",
        gold_U="results/{dataset}/{llm}/gold_U.parquet",
        known="results/{dataset}/{llm}/known.parquet",
    log:
        "logs/gold_sets/{dataset}/{llm}.log",
    conda:
        "../envs/base.yaml"
    params:
        top_k=config["top_k"],
    script:
        "../workflow/scripts/gold_sets.py"
