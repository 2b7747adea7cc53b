# Stage 7, tables and figures: each a target of its own (a local rule: cheap, no model), so a change
# of styling reruns only that figure. Inputs are keyed (rules/common.smk), so a job reads exactly the
# files its rule declares. Captions for `snakemake --report` live in report/<rule>.rst.


# Input functions are lambdas (`snakemake --lint` wants no `def` beside rules), each right above
# the rule it serves. What each table reads is beside the table's own code in the library.

from llm_utility.report.analysis import (
    empty_answers_contexts,
    table1_contexts,
    table1_reask_contexts,
)
from llm_utility.report.judgments import (
    figure9_contexts,
    figure9_method,
    known_rejection_methods,
    table3_contexts,
    table5_methods,
    table7_contexts,
)


# --- the RAG analyses: Tables 1 and 6, Figures 1, 2, 3 and 8 --------------------------------------
rule table1:
    input:
        **answers_inputs(
            DATASETS,
            lambda llm: table1_contexts(llm) + table1_reask_contexts(MODEL_PLAN, llm),
        ),
        **gold_inputs(DATASETS),
        **queries_inputs(DATASETS),
    output:
        **table_outputs("table1"),
    log:
        "logs/table1.log",
    localrule: True
    conda:
        BASE_ENV
    resources:
        **LIGHT,
    params:
        intervals=REPORT_PLAN.intervals(),
        reask=MODEL_PLAN.reask,
    script:
        "../workflow/scripts/table1.py"


# Beside Table 1: how often each model said nothing, per context (a silent model must be visible).
rule empty_answers:
    input:
        **answers_inputs(DATASETS, lambda llm: empty_answers_contexts(MODEL_PLAN, llm)),
    output:
        **table_outputs("empty_answers", formats=("csv", "md")),
    log:
        "logs/empty_answers.log",
    localrule: True
    conda:
        BASE_ENV
    resources:
        **LIGHT,
    script:
        "../workflow/scripts/empty_answers.py"


# Paper Table 6: dataset statistics (queries, human passages per query, corpus and its size, coverage).
rule table6:
    input:
        queries=expand(QUERIES, dataset=DATASETS),
        passages=[fill(PASSAGES, corpus=DATA_PLAN.corpus_of(d)) for d in DATASETS],
        coverage=expand(HUMAN_COVERAGE, dataset=DATA_PLAN.benchmarks),
    output:
        **table_outputs("table6"),
    log:
        "logs/table6.log",
    localrule: True
    conda:
        BASE_ENV
    resources:
        **LIGHT,
    params:
        datasets=DATASETS,
        corpora=[DATA_PLAN.corpus_of(d) for d in DATASETS],
        with_coverage=DATA_PLAN.benchmarks,
    script:
        "../workflow/scripts/table6.py"


rule figure_topk:
    input:
        **answers_inputs(DATASETS, lambda llm: ["none", "topk"]),
    output:
        **figure_outputs("figure_topk", csv=False),
    log:
        "logs/figure_topk.log",
    localrule: True
    conda:
        BASE_ENV
    resources:
        **LIGHT,
    params:
        style=config["figures"],
    script:
        "../workflow/scripts/figure_topk.py"


transfer_inputs = lambda wc: answers_inputs(
    REPORT_PLAN.transfer_figures[wc.figure]["datasets"],
    lambda llm: ["human"]
    + MODEL_PLAN.gold_contexts(REPORT_PLAN.transfer_figures[wc.figure]["candidates"]),
)


rule figure_transfer:
    input:
        unpack(transfer_inputs),
    output:
        **figure_outputs("figure_transfer", name="{figure}"),
    log:
        "logs/figure_transfer/{figure}.log",
    wildcard_constraints:
        figure=alternatives(REPORT_PLAN.transfer_figures),
    localrule: True
    conda:
        BASE_ENV
    resources:
        **LIGHT,
    params:
        candidates=lambda wc: REPORT_PLAN.transfer_figures[wc.figure]["candidates"],
        llms=LLMS,
        style=config["figures"],
    script:
        "../workflow/scripts/figure_transfer.py"


rule figure_overlap:
    input:
        **gold_inputs(DATASETS, pools=["U"]),
        **queries_inputs(DATASETS),
    output:
        **figure_outputs("figure_overlap"),
    log:
        "logs/figure_overlap.log",
    localrule: True
    conda:
        BASE_ENV
    resources:
        **LIGHT,
    params:
        llms=LLMS,
        style=config["figures"],
    script:
        "../workflow/scripts/figure_overlap.py"


# --- the judgment benchmark: Tables 2, 3, 4, 5, 7, 8, Figures 4 and 9, external runs -------------
rule table2:
    input:
        **keyed_per_llm(
            "judgments", JUDGMENTS, DATASETS, lambda d, llm: JUDGE["methods"]
        ),
        **gold_C_inputs(),
    output:
        **table_outputs("table2"),
    log:
        "logs/table2.log",
    localrule: True
    conda:
        BASE_ENV
    resources:
        **LIGHT,
    params:
        intervals=REPORT_PLAN.intervals(),
        note="",
    script:
        "../workflow/scripts/selection_table.py"


rule table3:
    input:
        **answers_inputs(DATASETS, lambda llm: table3_contexts(MODEL_PLAN, llm)),
        **known_inputs(),
        # The selections behind the selected_* rows, for their genuine/unparsed/echo shares.
        **keyed_per_llm(
            "judgments", JUDGMENTS, DATASETS, lambda d, llm: JUDGE["rag_methods"]
        ),
    output:
        **table_outputs("table3"),
    log:
        "logs/table3.log",
    localrule: True
    conda:
        BASE_ENV
    resources:
        **LIGHT,
    params:
        intervals=REPORT_PLAN.intervals(),
    script:
        "../workflow/scripts/rag_table.py"


rule table4:
    input:
        **keyed_per_llm("rankings", RANKINGS, DATASETS, lambda d, llm: RANK["methods"]),
        **gold_C_inputs(),
    output:
        **table_outputs("table4"),
    log:
        "logs/table4.log",
    localrule: True
    conda:
        BASE_ENV
    resources:
        **LIGHT,
    params:
        intervals=REPORT_PLAN.intervals(),
        k=RANK["k"],
    script:
        "../workflow/scripts/table4.py"


# Table 5: every thinking method and its counterpart, and the gold set (C), of each thinking pair.
TABLE5_INPUTS = {
    key: path
    for d in DATASETS
    for llm in MODEL_PLAN.thinking_llms
    for m in table5_methods(MODEL_PLAN, d, llm)
    for key, path in (
        (
            input_key("judgments", d, llm, m),
            fill(JUDGMENTS, dataset=d, llm=llm, method=m),
        ),
        (input_key("gold", d, llm), fill(GOLD, dataset=d, llm=llm, pool="C")),
    )
}


use rule table2 as table5 with:
    input:
        **TABLE5_INPUTS,
    output:
        **table_outputs("table5"),
    log:
        "logs/table5.log",
    params:
        intervals=REPORT_PLAN.intervals(),
        note=(
            ""
            if MODEL_PLAN.thinking_llms
            else "No configured LLM has a thinking switch (llms.<name>.can_think): nothing to compare."
        ),


use rule table3 as table7 with:
    input:
        **answers_inputs(DATASETS, lambda llm: table7_contexts(MODEL_PLAN)),
        **known_inputs(),
        # The LLM's own rankings behind the reranked_* rows, for their genuine/unparsed/echo shares.
        **keyed_per_llm(
            "judgments", RANKINGS, DATASETS, lambda d, llm: RANK["rag_methods"]
        ),
    output:
        **table_outputs("table7"),
    log:
        "logs/table7.log",


use rule table2 as table8 with:
    input:
        **keyed_per_llm(
            "judgments",
            JUDGMENTS,
            DATASETS,
            lambda d, llm: known_rejection_methods(MODEL_PLAN),
        ),
        **gold_C_inputs(),
        **known_inputs(),
    output:
        **table_outputs("table8"),
    log:
        "logs/table8.log",
    params:
        intervals=REPORT_PLAN.intervals(),
        note=(
            ""
            if known_rejection_methods(MODEL_PLAN)
            else "Known-rejection needs listwise_pa and listwise_pa_reject in judgments.methods."
        ),


rule figure_selection_transfer:
    input:
        **answers_inputs(DATASETS, lambda llm: figure9_contexts(MODEL_PLAN)),
    output:
        **figure_outputs("figure_selection_transfer"),
    log:
        "logs/figure_selection_transfer.log",
    localrule: True
    conda:
        BASE_ENV
    resources:
        **LIGHT,
    params:
        llms=LLMS,
        method=figure9_method(MODEL_PLAN),
        style=config["figures"],
    script:
        "../workflow/scripts/figure_selection_transfer.py"


rule figure_perplexity:
    input:
        **keyed_per_llm("perplexity", PERPLEXITY, DATASETS),
        **answers_inputs(DATASETS, lambda llm: ["none", "human"]),
        **known_inputs(),
    output:
        **figure_outputs("figure_perplexity"),
    log:
        "logs/figure_perplexity.log",
    localrule: True
    conda:
        BASE_ENV
    resources:
        **LIGHT,
    params:
        style=config["figures"],
    script:
        "../workflow/scripts/figure_perplexity.py"


# --- the examples behind the numbers ---------------------------------------------------------------
# The explorer of one dataset: its candidates, each LLM's answers with no passage and with each
# passage alone, gold sets, selections and rankings.
explorer_inputs = lambda wc: {
    "candidates": fill(CANDIDATES_TABLE, dataset=wc.dataset),
    **queries_inputs([wc.dataset]),
    **answers_inputs([wc.dataset], lambda llm: ["none", "single"]),
    **gold_inputs([wc.dataset]),
    **keyed_per_llm(
        "judgments", JUDGMENTS, [wc.dataset], lambda d, llm: JUDGE["methods"]
    ),
    **keyed_per_llm("rankings", RANKINGS, [wc.dataset], lambda d, llm: RANK["methods"]),
}


rule explorer:
    input:
        unpack(explorer_inputs),
    output:
        html=report(EXPLORER, caption="../report/explorer.rst", category="6 Explorer"),
    log:
        "logs/explorer/{dataset}.log",
    localrule: True
    conda:
        BASE_ENV
    resources:
        **LIGHT,
    params:
        llms=LLMS,
        max_queries=config["report"]["explorer_queries"],
    script:
        "../workflow/scripts/explorer.py"
