# Stage 6, judgments: can an LLM tell which candidates have utility for itself? Verbalized selection
# (pointwise and listwise, with and without its pseudo-answer, known-rejection, thinking), utility
# rankings of C (verbalized, likelihood, attention), RAG with what it selected or ranked first, its
# perplexity of human passages, and its gold sets as TREC qrels. Every model call goes through the
# generation store.


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


rule judge:
    input:
        unpack(pseudo_answers_input),
        queries=QUERIES,
        candidates=CANDIDATES,
        manifest=MANIFEST,
        prompts=config["prompts"],
    output:
        judgments=JUDGMENTS,
    log:
        "logs/judge/{dataset}/{llm}/{method}.log",
    benchmark:
        "benchmarks/out/judge/{dataset}/{llm}/{method}.tsv"
    wildcard_constraints:
        method="|".join(SELECTION_METHODS),
    conda:
        llm_conda_env
    threads: 8
    resources:
        mem_mb=llm_mem_mb,
        runtime=llm_runtime,
        gpu=gpus_of_llm,
    params:
        spec=judge_spec,
        max_new_tokens=judge_max_new_tokens,
        max_queries=JUDGE["max_queries"],
    script:
        "../workflow/scripts/judge.py"


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
        ranking=fill(RANKINGS, method="retriever"),
    log:
        "logs/rank/{dataset}/{llm}/retriever.log",
    conda:
        "../envs/base.yaml"
    resources:
        mem_mb=RESOURCES["light"]["mem_mb"],
        runtime=RESOURCES["light"]["runtime"],
    params:
        max_queries=JUDGE["max_queries"],
    script:
        "../workflow/scripts/rank.py"


# Rankings by the LLM: verbalized listwise (with and without pseudo-answer), likelihood of the
# pseudo-answer (Eq. 7) and attention (Eq. 6, on the transformers backend).
rule rank:
    input:
        unpack(ranking_pseudo_answers),
        queries=QUERIES,
        candidates=CANDIDATES,
        manifest=MANIFEST,
        prompts=config["prompts"],
    output:
        ranking=RANKINGS,
    log:
        "logs/rank/{dataset}/{llm}/{method}.log",
    benchmark:
        "benchmarks/out/rank/{dataset}/{llm}/{method}.tsv"
    wildcard_constraints:
        method="listwise|listwise_pa|likelihood|attention",
    conda:
        ranking_conda_env
    threads: 8
    resources:
        mem_mb=llm_mem_mb,
        runtime=llm_runtime,
        gpu=gpus_of_llm,
    params:
        spec=llm_cfg,
        rankings=RANK,
        max_queries=JUDGE["max_queries"],
    script:
        "../workflow/scripts/rank.py"


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
        mem_mb=llm_mem_mb,
        runtime=llm_runtime,
        gpu=gpus_of_llm,
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
