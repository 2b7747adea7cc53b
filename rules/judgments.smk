# Stage 6, judgments: can an LLM tell which candidates have utility for itself? Verbalized selection
# (pointwise and listwise, with and without its pseudo-answer, known-rejection, thinking), utility
# rankings of C (verbalized, likelihood, attention), RAG with what it selected or ranked first, its
# perplexity of human passages, and its gold sets as TREC qrels. Every model call goes through the
# generation store. A model job covers every configured method of its kind for one (dataset, LLM):
# one engine start; adding a method reruns it, and the store serves every call already made.


localrules:
    rank_retriever,
    qrels,


# The top-k answer with thinking on: the pseudo-answer "(T)" of Table 5 (thinking models only).
use rule answer_candidates as answer_thinking with:
    output:
        topk_think=fill(ANSWERS, context="topk_think"),
    log:
        "logs/answer_thinking/{dataset}/{llm}.log",
    benchmark:
        "benchmarks/out/answer_thinking/{dataset}/{llm}.tsv"
    params:
        spec=thinking_answer_spec,
        synonyms=config["verdict_synonyms"],


# Verbalized selection with every configured method (judgments.methods and rag_methods).
rule judge:
    input:
        unpack(lambda wc: judge_inputs(JUDGE_METHODS)),
        queries=QUERIES,
        candidates=CANDIDATES,
        manifest=MANIFEST,
        prompts=config["prompts"],
    output:
        **judgments_named(JUDGE_METHODS),
    log:
        "logs/judge/{dataset}/{llm}.log",
    benchmark:
        "benchmarks/out/judge/{dataset}/{llm}.tsv"
    conda:
        llm_conda_env
    threads: 8
    resources:
        gpu=gpus_of_llm,
        mem_mb=llm_mem_mb,
        runtime=llm_runtime,
    params:
        spec=llm_cfg,
        max_new_tokens=judge_max_new_tokens(),
        max_queries=JUDGE["max_queries"],
    script:
        "../workflow/scripts/judge.py"


# The same judgments with thinking on (Table 5), for models with a thinking switch.
use rule judge as judge_thinking with:
    input:
        unpack(lambda wc: judge_inputs(THINKING_METHODS)),
        queries=QUERIES,
        candidates=CANDIDATES,
        manifest=MANIFEST,
        prompts=config["prompts"],
    output:
        **judgments_named(THINKING_METHODS),
    log:
        "logs/judge_thinking/{dataset}/{llm}.log",
    benchmark:
        "benchmarks/out/judge_thinking/{dataset}/{llm}.tsv"
    params:
        spec=thinking_spec,
        max_new_tokens=judge_max_new_tokens(),
        max_queries=JUDGE["max_queries"],


# RAG with selections: every LLM answers with each rag method's selections of every LLM (Table 3:
# its own; Figure 9: the others'). An empty selection is the no-passage call, served by the store.
use rule answer_candidates as answer_selected with:
    input:
        **selection_tables(),
        queries=QUERIES,
        candidates=CANDIDATES,
        manifest=MANIFEST,
        prompts=config["prompts"],
    output:
        **answers_named(selected_contexts()),
    log:
        "logs/answer_selected/{dataset}/{llm}.log",
    benchmark:
        "benchmarks/out/answer_selected/{dataset}/{llm}.tsv"


# The retrieval order as a ranking: the baseline of Table 4 (no model).
rule rank_retriever:
    input:
        queries=QUERIES,
        candidates=CANDIDATES,
    output:
        retriever=fill(RANKINGS, method="retriever"),
    log:
        "logs/rank_retriever/{dataset}/{llm}.log",
    conda:
        "../envs/base.yaml"
    resources:
        mem_mb=RESOURCES["light"]["mem_mb"],
        runtime=RESOURCES["light"]["runtime"],
    params:
        max_queries=JUDGE["max_queries"],
    script:
        "../workflow/scripts/rank.py"


# Rankings by the LLM: verbalized listwise (with and without pseudo-answer) and the likelihood of
# its pseudo-answer (Eq. 7), as configured in rankings.methods and rag_methods.
rule rank:
    input:
        queries=QUERIES,
        candidates=CANDIDATES,
        manifest=MANIFEST,
        prompts=config["prompts"],
        pseudo_answers=fill(ANSWERS, context="topk"),
    output:
        **rankings_named(MODEL_RANKINGS),
    log:
        "logs/rank/{dataset}/{llm}.log",
    benchmark:
        "benchmarks/out/rank/{dataset}/{llm}.tsv"
    conda:
        llm_conda_env
    threads: 8
    resources:
        gpu=gpus_of_llm,
        mem_mb=llm_mem_mb,
        runtime=llm_runtime,
    params:
        spec=llm_cfg,
        rankings=RANK,
        max_queries=JUDGE["max_queries"],
    script:
        "../workflow/scripts/rank.py"


# Attention (Eq. 6): the answer generated with all of C attending to each passage, on the
# transformers backend whatever backend the LLM generates with (vLLM exposes no attention weights).
use rule rank as rank_attention with:
    output:
        attention=fill(RANKINGS, method="attention"),
    log:
        "logs/rank_attention/{dataset}/{llm}.log",
    benchmark:
        "benchmarks/out/rank_attention/{dataset}/{llm}.tsv"
    conda:
        f"../envs/llm-{RANK['attention_backend']}.yaml"


# RAG with the top passages of the LLM's own rankings (Table 7).
use rule answer_candidates as answer_reranked with:
    input:
        **reranked_tables(),
        queries=QUERIES,
        candidates=CANDIDATES,
        manifest=MANIFEST,
        prompts=config["prompts"],
    output:
        **answers_named(reranked_contexts()),
    log:
        "logs/answer_reranked/{dataset}/{llm}.log",
    benchmark:
        "benchmarks/out/answer_reranked/{dataset}/{llm}.tsv"


# Figure 4 (top): the LLM's perplexity of human passages, in and out of its gold set (U).
rule perplexity:
    input:
        queries=QUERIES,
        candidates=CANDIDATES,
        gold_U=fill(GOLD, candidates="U"),
        manifest=MANIFEST,
    output:
        perplexity=PERPLEXITY,
    log:
        "logs/perplexity/{dataset}/{llm}.log",
    benchmark:
        "benchmarks/out/perplexity/{dataset}/{llm}.tsv"
    conda:
        llm_conda_env
    threads: 8
    resources:
        gpu=gpus_of_llm,
        mem_mb=llm_mem_mb,
        runtime=llm_runtime,
    params:
        spec=llm_cfg,
    script:
        "../workflow/scripts/perplexity.py"


# Each LLM's gold sets as TREC qrels, so any retriever's run can be scored by LLM-specific utility.
rule qrels:
    input:
        gold=GOLD,
        candidates=CANDIDATES,
    output:
        qrels=QRELS,
    log:
        "logs/qrels/{dataset}/{llm}/{candidates}.log",
    conda:
        "../envs/base.yaml"
    resources:
        mem_mb=RESOURCES["light"]["mem_mb"],
        runtime=RESOURCES["light"]["runtime"],
    script:
        "../workflow/scripts/qrels.py"
