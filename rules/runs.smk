# The runs stage: every run of a dataset (its configured retriever's, whose top-k is the candidates C;
# every other retriever of runs.retrievers; TREC run files) scored by every judge (the human passages,
# each LLM's qrels over C and U), each LLM's answers with every other run's top-k (one model job per
# dataset, LLM and run), and whether each judge's metric predicts those answers.


# --- shared by the rules below (input functions are lambdas: `snakemake --lint` wants no `def`
# beside rules; a rule's own sit right above it) ----------------------------------------------------
# A run's file: a retriever's run table, or the TREC run file named in config (or dropped in).
run_file = lambda dataset, run: (
    fill(RUN, dataset=dataset, retriever=DATA_PLAN.runs_of(dataset)[run][1])
    if DATA_PLAN.runs_of(dataset)[run][0] == "retriever"
    else DATA_PLAN.runs_of(dataset)[run][1]
)
RUN_FILES = {
    input_key("runs", d, run): run_file(d, run)
    for d in DATASETS
    for run in DATA_PLAN.runs_of(d)
}
QRELS_INPUTS = {
    input_key("qrels", d, llm, pool): fill(QRELS, dataset=d, llm=llm, pool=pool)
    for d in DATASETS
    for llm in LLMS
    for pool in ("C", "U")
}


# --- rules ----------------------------------------------------------------------------------------
# A run's top-k with the passages' texts, read from the corpus once (the answer jobs and the
# retrieval table read this small table, never the corpus).
rule run_topk:
    input:
        run=lambda wc: run_file(wc.dataset, wc.run),
        queries=QUERIES,
        passages=passages_of_dataset,
    output:
        topk=RUN_TOPK,
    log:
        "logs/run_topk/{dataset}/{run}.log",
    conda:
        BASE_ENV
    resources:
        **RESOURCES["data"],
    params:
        top_k=config["top_k"],
    script:
        "../workflow/scripts/run_topk.py"


# RAG with another run's top-k: one job per (dataset, LLM, run), one call per query, through the
# generation store (a query the run ranks nothing for gets the no-passage call, which it serves).
ANSWER_RUN = model_rule_files(
    "answer_run",
    output={"answers": fill(ANSWERS, context="run_{run}")},
    log="logs/answer_run/{dataset}/{llm}/{run}.log",
    benchmark="benchmarks/out/answer_run/{dataset}/{llm}/{run}.tsv",
)


rule answer_run:
    input:
        **MODEL_JOB_INPUTS,
        topk=RUN_TOPK,
    output:
        **ANSWER_RUN["output"],
    log:
        ANSWER_RUN["log"],
    benchmark:
        ANSWER_RUN["benchmark"]
    priority: model_priority("answer_run")
    conda:
        llm_conda_env
    threads: llm_threads
    resources:
        **model_resources("answer_run"),
    params:
        spec=llm_spec,
        synonyms=config["verdict_synonyms"],
    script:
        "../workflow/scripts/answer_run.py"


# Every run scored by every judge: NDCG@k, Recall@k (with intervals), Judged@k, condensed lists.
rule external_runs:
    input:
        **RUN_FILES,
        **QRELS_INPUTS,
        **queries_inputs(DATASETS),
    output:
        **table_outputs("external_runs", formats=("csv", "md")),
        **figure_outputs("external_runs", csv=False),
    log:
        "logs/external_runs.log",
    localrule: True
    conda:
        BASE_ENV
    resources:
        **LIGHT,
    params:
        k=config["top_k"],
        pool_runs={d: DATA_PLAN.pool_retriever(d) for d in DATASETS},
        intervals=REPORT_PLAN.intervals(),
        style=config["figures"],
    script:
        "../workflow/scripts/external_runs.py"


# The LLM's answers with each run's top-k: the configured retriever's is the topk answer itself.
RUN_ANSWERS = {
    input_key("answers", d, llm, run): fill(
        ANSWERS, dataset=d, llm=llm, context=MODEL_PLAN.run_answer_context(d, run)
    )
    for d in DATASETS
    for llm in LLMS
    for run in DATA_PLAN.runs_of(d)
}


# Does a judge's metric of a run's top-k predict the LLM's answer with it? Per query (AUC,
# point-biserial r) and across runs (Kendall's tau), per LLM and judge.
rule qrels_agreement:
    input:
        **RUN_FILES,
        **QRELS_INPUTS,
        **queries_inputs(DATASETS),
        **RUN_ANSWERS,
        **known_inputs(),
    output:
        **table_outputs("qrels_agreement", formats=("csv", "md")),
        pairs=RUN_PAIRS,
    log:
        "logs/qrels_agreement.log",
    localrule: True
    conda:
        BASE_ENV
    resources:
        **LIGHT,
    params:
        k=config["top_k"],
        bootstrap=REPORT_PLAN.bootstrap(),
    script:
        "../workflow/scripts/qrels_agreement.py"
