# Stage 4, answers: every LLM call goes through the generation store (one directory of SQLite shards
# per model), so a prompt asked for by two jobs is computed once and an interrupted job resumes where
# it stopped. Each job loads its model once and answers every context its outputs name.


from llm_utility.method.answers import CANDIDATE_CONTEXTS

# What every job that answers or judges with an LLM reads besides its own tables.
MODEL_JOB_INPUTS = {
    "queries": QUERIES,
    "candidates": CANDIDATES_TABLE,
    "manifest": MANIFEST,
    "prompts": config["prompts"],
}
# --- rules ----------------------------------------------------------------------------------------
# Weights land in resources/models/{llm}/ (or <models_dir>/llms/{llm}) once: a GGUF dequantized, or
# hub weights downloaded at their pinned revision (the manifest records the commit). Every other job
# loads them offline. A local rule: it runs where Snakemake runs, which has network when compute
# nodes do not.
MATERIALIZE_MODEL = model_rule_files(
    "materialize_model",
    output={"manifest": MANIFEST},
    log="logs/materialize_model/{llm}.log",
    benchmark="benchmarks/out/materialize_model/{llm}.tsv",
)


rule materialize_model:
    output:
        **MATERIALIZE_MODEL["output"],
    log:
        MATERIALIZE_MODEL["log"],
    benchmark:
        MATERIALIZE_MODEL["benchmark"]
    localrule: True
    conda:
        materialize_conda_env
    resources:
        **RESOURCES["download"],
    params:
        spec=weights_spec,
        weights_dir=lambda wc: weights_dir(LLM_WEIGHTS, llm=wc.llm),
    script:
        "../workflow/scripts/materialize_model.py"


# The passages any LLM call of a dataset can get (U, with C marked), read once from the corpus.
run_of_dataset = lambda wc: fill(RUN, dataset=wc.dataset, retriever=retriever_of(wc))


rule candidate_passages:
    input:
        queries=QUERIES,
        run=run_of_dataset,
        passages=passages_of_dataset,
    output:
        candidates=CANDIDATES_TABLE,
    log:
        "logs/candidate_passages/{dataset}.log",
    conda:
        BASE_ENV
    resources:
        **RESOURCES["data"],
    params:
        top_k=config["top_k"],
    script:
        "../workflow/scripts/candidate_passages.py"


# The contexts that need no gold set (none, single, topk, union, human): one job per (dataset, LLM),
# or per query part of a dataset in parts (gathered by rules/gather.smk).
ANSWER_CANDIDATES = model_rule_files(
    "answer_candidates",
    output=answers_named(CANDIDATE_CONTEXTS),
    log="logs/answer_candidates/{dataset}/{llm}.log",
    benchmark="benchmarks/out/answer_candidates/{dataset}/{llm}.tsv",
)


rule answer_candidates:
    input:
        **MODEL_JOB_INPUTS,
    output:
        **ANSWER_CANDIDATES["output"],
    log:
        ANSWER_CANDIDATES["log"],
    benchmark:
        ANSWER_CANDIDATES["benchmark"]
    # The candidate answers feed everything after them (gold sets, judgments, transfer): run them
    # first, so that the last minutes are many short jobs side by side, not one long chain.
    priority: model_priority("answer_candidates")
    conda:
        llm_conda_env
    threads: llm_threads
    resources:
        **model_resources("answer_candidates"),
    params:
        spec=llm_spec,
        synonyms=config["verdict_synonyms"],
    script:
        "../workflow/scripts/answer.py"


# Every LLM's gold sets among C and among U, answered by {llm}; its own are gold_{C,U}_from_{llm}.
# One job per (dataset, LLM) covers Table 1's G(C) and G(U) and the transfer matrices: G(C) and G(U)
# are often the same passages, and one job computes the prompts they share once. Its inputs: every
# LLM's gold set among C and U (pattern in {dataset}), named by its context: an answer job's inputs
# that a context is made from are named by that context, so the job pairs them with its outputs
# without any path logic.
GOLD_TABLES = {
    context: fill(GOLD, llm=source, pool=pool)
    for pool in ("C", "U")
    for context, source in MODEL_PLAN.gold_sources(pool).items()
}
ANSWER_GOLD = model_rule_files(
    "answer_gold",
    output=answers_named(MODEL_PLAN.gold_contexts("C") + MODEL_PLAN.gold_contexts("U")),
    log="logs/answer_gold/{dataset}/{llm}.log",
    benchmark="benchmarks/out/answer_gold/{dataset}/{llm}.tsv",
)


use rule answer_candidates as answer_gold with:
    input:
        **GOLD_TABLES,
        **MODEL_JOB_INPUTS,
    output:
        **ANSWER_GOLD["output"],
    log:
        ANSWER_GOLD["log"],
    benchmark:
        ANSWER_GOLD["benchmark"]
    priority: model_priority("answer_gold")
    resources:
        **model_resources("answer_gold"),


# The re-ask control (docs/method.md, "The re-ask"): none, human, topk, union and every LLM's gold
# sets answered again under the paraphrased `reask` wording with the passages in reverse order, so
# no evaluated call is the call that selected its passages. Its own job: it needs every LLM's gold
# sets (as answer_gold does) and feeds only Table 1 and the findings, so it runs last among the
# model jobs (lowest priority) and fills the cores the judge chain leaves free; it shares no prompt
# with the other jobs, so it waits for none of them.
if MODEL_PLAN.reask:
    # The re-asked gold sets: every LLM's gold set among C and U, named by its re-ask context.
    REASK_GOLD_TABLES = {
        context: fill(GOLD, llm=source, pool=pool)
        for context, (source, pool) in MODEL_PLAN.reask_gold_sources().items()
    }
    ANSWER_REASK = model_rule_files(
        "answer_reask",
        output=answers_named(MODEL_PLAN.reask_contexts()),
        log="logs/answer_reask/{dataset}/{llm}.log",
        benchmark="benchmarks/out/answer_reask/{dataset}/{llm}.tsv",
    )

    use rule answer_candidates as answer_reask with:
        input:
            **REASK_GOLD_TABLES,
            **MODEL_JOB_INPUTS,
        output:
            **ANSWER_REASK["output"],
        log:
            ANSWER_REASK["log"],
        benchmark:
            ANSWER_REASK["benchmark"]
        priority: model_priority("answer_reask")
        resources:
            **model_resources("answer_reask"),
