# Stage 6, judgments: can an LLM tell which candidates have utility for itself? Verbalized selection
# (pointwise and listwise, with and without its pseudo-answer, known-rejection, thinking), utility
# rankings of C (verbalized, likelihood, attention), its perplexity of human passages, RAG with what
# it selected or ranked first, and its gold sets as TREC qrels. Every model call goes through the
# generation store. One `judge` job per (dataset, LLM) makes every configured judgment, ranking and
# perplexity in one model session: a job's start (loading a model, starting an engine) costs more
# than many of its calls. Adding a method reruns it; the store serves every call already made.

from llm_utility.method.answers import gold_context

# --- shared by the rules below (input functions are lambdas: `snakemake --lint` wants no `def`
# beside rules; a rule's own sit right above it) ----------------------------------------------------
# A judge job's outputs, named by kind and method (read back with keyed_inputs).
judge_outputs = lambda methods, rankings=(), perplexity=False: {
    **{input_key("judgments", m): fill(JUDGMENTS, method=m) for m in methods},
    **{input_key("rankings", m): fill(RANKINGS, method=m) for m in rankings},
    **({"perplexity": PERPLEXITY} if perplexity else {}),
}
# --- rules ----------------------------------------------------------------------------------------
# The top-k answer with thinking on: the pseudo-answer "(T)" of Table 5 (thinking models only).
ANSWER_THINKING = model_rule_files(
    "answer_thinking",
    output=answers_named(["topk_think"]),
    log="logs/answer_thinking/{dataset}/{llm}.log",
    benchmark="benchmarks/out/answer_thinking/{dataset}/{llm}.tsv",
)


use rule answer_candidates as answer_thinking with:
    output:
        **ANSWER_THINKING["output"],
    log:
        ANSWER_THINKING["log"],
    benchmark:
        ANSWER_THINKING["benchmark"]
    priority: model_priority("answer_thinking")
    resources:
        **model_resources("answer_thinking"),
    params:
        spec=lambda wc: MODEL_PLAN.thinking_answer_spec(wc.llm),
        synonyms=config["verdict_synonyms"],


# The pseudo-answers some methods need, named by their answer context (topk, topk_think).
judge_inputs = lambda methods: answers_named(MODEL_PLAN.pseudo_contexts(methods))


# Selections with every configured method, the LLM's utility rankings and its perplexities.
JUDGE_FILES = model_rule_files(
    "judge",
    output=judge_outputs(
        MODEL_PLAN.judge_methods, MODEL_PLAN.model_rankings, perplexity=True
    ),
    log="logs/judge/{dataset}/{llm}.log",
    benchmark="benchmarks/out/judge/{dataset}/{llm}.tsv",
)


rule judge:
    input:
        unpack(lambda wc: judge_inputs(MODEL_PLAN.judge_methods)),
        **MODEL_JOB_INPUTS,
        topk=fill(ANSWERS, context="topk"),
        gold_U=fill(GOLD, pool="U"),
    output:
        **JUDGE_FILES["output"],
    log:
        JUDGE_FILES["log"],
    benchmark:
        JUDGE_FILES["benchmark"]
    priority: model_priority("judge")
    conda:
        llm_conda_env
    threads: llm_threads
    resources:
        **model_resources("judge"),
    params:
        spec=llm_spec,
        max_new_tokens=MODEL_PLAN.judge_max_new_tokens(),
        rankings=RANK,
        max_queries=JUDGE["max_queries"],
    script:
        "../workflow/scripts/judge.py"


# The selections with thinking on (Table 5), for models with a thinking switch.
JUDGE_THINKING = model_rule_files(
    "judge_thinking",
    output=judge_outputs(MODEL_PLAN.thinking_methods),
    log="logs/judge_thinking/{dataset}/{llm}.log",
    benchmark="benchmarks/out/judge_thinking/{dataset}/{llm}.tsv",
)


use rule judge as judge_thinking with:
    input:
        unpack(lambda wc: judge_inputs(MODEL_PLAN.thinking_methods)),
        **MODEL_JOB_INPUTS,
    output:
        **JUDGE_THINKING["output"],
    log:
        JUDGE_THINKING["log"],
    benchmark:
        JUDGE_THINKING["benchmark"]
    priority: model_priority("judge_thinking")
    resources:
        **model_resources("judge_thinking"),
    params:
        spec=lambda wc: MODEL_PLAN.thinking_spec(wc.llm),
        max_new_tokens=MODEL_PLAN.judge_max_new_tokens(),
        rankings=RANK,
        max_queries=JUDGE["max_queries"],


# The retrieval order as a ranking: the baseline of Table 4 (no model).
rule rank_retriever:
    input:
        queries=QUERIES,
        candidates=CANDIDATES_TABLE,
    output:
        ranking=fill(RANKINGS, method="retriever"),
    log:
        "logs/rank_retriever/{dataset}/{llm}.log",
    localrule: True
    conda:
        BASE_ENV
    resources:
        **LIGHT,
    params:
        max_queries=JUDGE["max_queries"],
    script:
        "../workflow/scripts/rank_retriever.py"


# The judgment tables behind the selected_* contexts (pattern in {dataset}), and the LLM's own
# rankings behind the reranked_* ones, named by context.
SELECTION_TABLES = {
    context: fill(JUDGMENTS, llm=source, method=method)
    for context, (source, method) in MODEL_PLAN.selection_sources().items()
}
RERANKED_TABLES = {
    context: fill(RANKINGS, method=method)
    for context, method in MODEL_PLAN.reranked_sources().items()
}
# RAG with judgments: every rag method's selections of every LLM (Table 3: its own; Figure 9: the
# others') and the top passages of its own rag rankings (Table 7). An empty selection is the
# no-passage call, a one-passage one a single call: the store serves both.
ANSWER_JUDGMENTS = model_rule_files(
    "answer_judgments",
    output=answers_named(
        MODEL_PLAN.selected_contexts() + MODEL_PLAN.reranked_contexts()
    ),
    log="logs/answer_judgments/{dataset}/{llm}.log",
    benchmark="benchmarks/out/answer_judgments/{dataset}/{llm}.tsv",
)


use rule answer_candidates as answer_judgments with:
    input:
        **SELECTION_TABLES,
        **RERANKED_TABLES,
        **MODEL_JOB_INPUTS,
        # Not read: a selection is often the LLM's gold set, so this job waits for the gold answers
        # (U, then C) and the store serves it the prompts they share.
        after_gold=fill(ANSWERS, context=gold_context("C", "{llm}")),
    output:
        **ANSWER_JUDGMENTS["output"],
    log:
        ANSWER_JUDGMENTS["log"],
    benchmark:
        ANSWER_JUDGMENTS["benchmark"]
    priority: model_priority("answer_judgments")
    resources:
        **model_resources("answer_judgments"),


# Each LLM's gold sets as TREC qrels, so any retriever's run can be scored by LLM-specific utility.
rule qrels:
    input:
        gold=GOLD,
        candidates=CANDIDATES_TABLE,
    output:
        qrels=QRELS,
    log:
        "logs/qrels/{dataset}/{llm}/{pool}.log",
    localrule: True
    conda:
        BASE_ENV
    resources:
        **LIGHT,
    script:
        "../workflow/scripts/qrels.py"
