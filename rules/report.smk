# Stage 7, tables and figures: each a target of its own (a localrule: cheap, no model), so a change
# of styling reruns only that figure. Inputs are keyed (rules/common.smk), so a job reads exactly the
# files its rule declares. Captions for `snakemake --report` live in report/.

TABLE1_CONTEXTS = ["none", "topk", "union", "human"]


localrules:
    table1,
    empty_answers,
    figure_topk,
    figure_transfer,
    figure_overlap,


rule table1:
    input:
        **answers_inputs(
            DATASETS,
            lambda llm: TABLE1_CONTEXTS + [f"gold_C_from_{llm}", f"gold_U_from_{llm}"],
        ),
        **gold_inputs(DATASETS),
        **queries_inputs(DATASETS),
    output:
        csv=f"{TABLES}/table1_rag.csv",
        md=report(
            f"{TABLES}/table1_rag.md",
            caption="../report/table1.rst",
            category="2 Tables",
        ),
        tex=f"{TABLES}/table1_rag.tex",
    log:
        "logs/table1.log",
    conda:
        "../envs/base.yaml"
    resources:
        mem_mb=RESOURCES["light"]["mem_mb"],
        runtime=RESOURCES["light"]["runtime"],
    params:
        intervals=INTERVALS,
    script:
        "../workflow/scripts/table1.py"


# Beside Table 1: how often each model said nothing, per context (a silent model must be visible).
rule empty_answers:
    input:
        **answers_inputs(
            DATASETS,
            lambda llm: list(CANDIDATE_CONTEXTS)
            + [f"gold_C_from_{llm}", f"gold_U_from_{llm}"],
        ),
    output:
        csv=f"{TABLES}/empty_answers.csv",
        md=report(
            f"{TABLES}/empty_answers.md",
            caption="../report/empty_answers.rst",
            category="2 Tables",
        ),
    log:
        "logs/empty_answers.log",
    conda:
        "../envs/base.yaml"
    resources:
        mem_mb=RESOURCES["light"]["mem_mb"],
        runtime=RESOURCES["light"]["runtime"],
    script:
        "../workflow/scripts/empty_answers.py"


rule figure_topk:
    input:
        **answers_inputs(DATASETS, lambda llm: ["none", "topk"]),
    output:
        png=report(
            f"{FIGURES}/fig1_left_topk.png",
            caption="../report/fig1_left.rst",
            category="3 Figures",
        ),
        pdf=f"{FIGURES}/fig1_left_topk.pdf",
    log:
        "logs/figure_topk.log",
    conda:
        "../envs/base.yaml"
    resources:
        mem_mb=RESOURCES["light"]["mem_mb"],
        runtime=RESOURCES["light"]["runtime"],
    params:
        style=config["figures"],
    script:
        "../workflow/scripts/figure_topk.py"


rule figure_transfer:
    input:
        unpack(transfer_inputs),
    output:
        png=report(
            f"{FIGURES}/{{figure}}.png",
            caption="../report/transfer.rst",
            category="3 Figures",
        ),
        pdf=f"{FIGURES}/{{figure}}.pdf",
        csv=f"{TABLES}/{{figure}}.csv",
    log:
        "logs/figure_transfer/{figure}.log",
    wildcard_constraints:
        figure="|".join(TRANSFER_FIGURES),
    conda:
        "../envs/base.yaml"
    resources:
        mem_mb=RESOURCES["light"]["mem_mb"],
        runtime=RESOURCES["light"]["runtime"],
    params:
        candidates=lambda wc: TRANSFER_FIGURES[wc.figure]["candidates"],
        llms=LLMS,
        style=config["figures"],
    script:
        "../workflow/scripts/figure_transfer.py"


rule figure_overlap:
    input:
        **gold_inputs(DATASETS, candidates=["U"]),
        **queries_inputs(DATASETS),
    output:
        png=report(
            f"{FIGURES}/fig3_overlap.png",
            caption="../report/fig3_overlap.rst",
            category="3 Figures",
        ),
        pdf=f"{FIGURES}/fig3_overlap.pdf",
        csv=f"{TABLES}/fig3_overlap.csv",
    log:
        "logs/figure_overlap.log",
    conda:
        "../envs/base.yaml"
    resources:
        mem_mb=RESOURCES["light"]["mem_mb"],
        runtime=RESOURCES["light"]["runtime"],
    params:
        llms=LLMS,
        style=config["figures"],
    script:
        "../workflow/scripts/figure_overlap.py"


# --- the judgment benchmark: Tables 2, 3, 4, 5, 7, 8, Figures 4 and 9, external runs -------------


localrules:
    table2,
    table3,
    table4,
    table5,
    table7,
    table8,
    figure4,
    figure9,
    external_runs,


rule table2:
    input:
        **keyed_per_llm(
            "judgments", JUDGMENTS, DATASETS, lambda d, llm: JUDGE["methods"]
        ),
        **gold_C_inputs(),
    output:
        csv=f"{TABLES}/table2_selection.csv",
        md=report(
            f"{TABLES}/table2_selection.md",
            caption="../report/table2.rst",
            category="2 Tables",
        ),
        tex=f"{TABLES}/table2_selection.tex",
    log:
        "logs/table2.log",
    conda:
        "../envs/base.yaml"
    resources:
        mem_mb=RESOURCES["light"]["mem_mb"],
        runtime=RESOURCES["light"]["runtime"],
    params:
        intervals=INTERVALS,
    script:
        "../workflow/scripts/table2.py"


rule table3:
    input:
        **answers_inputs(
            DATASETS,
            lambda llm: ["topk"]
            + [f"selected_{m}_from_{llm}" for m in JUDGE["rag_methods"]],
        ),
        **known_inputs(),
    output:
        csv=f"{TABLES}/table3_rag_selection.csv",
        md=report(
            f"{TABLES}/table3_rag_selection.md",
            caption="../report/table3.rst",
            category="2 Tables",
        ),
        tex=f"{TABLES}/table3_rag_selection.tex",
    log:
        "logs/table3.log",
    conda:
        "../envs/base.yaml"
    resources:
        mem_mb=RESOURCES["light"]["mem_mb"],
        runtime=RESOURCES["light"]["runtime"],
    params:
        intervals=INTERVALS,
    script:
        "../workflow/scripts/table3.py"


rule table4:
    input:
        **keyed_per_llm("rankings", RANKINGS, DATASETS, lambda d, llm: RANK["methods"]),
        **gold_C_inputs(),
    output:
        csv=f"{TABLES}/table4_ranking.csv",
        md=report(
            f"{TABLES}/table4_ranking.md",
            caption="../report/table4.rst",
            category="2 Tables",
        ),
        tex=f"{TABLES}/table4_ranking.tex",
    log:
        "logs/table4.log",
    conda:
        "../envs/base.yaml"
    resources:
        mem_mb=RESOURCES["light"]["mem_mb"],
        runtime=RESOURCES["light"]["runtime"],
    params:
        intervals=INTERVALS,
        k=RANK["k"],
    script:
        "../workflow/scripts/table4.py"


rule table5:
    input:
        **table5_inputs(),
    output:
        csv=f"{TABLES}/table5_thinking.csv",
        md=report(
            f"{TABLES}/table5_thinking.md",
            caption="../report/table5.rst",
            category="2 Tables",
        ),
        tex=f"{TABLES}/table5_thinking.tex",
    log:
        "logs/table5.log",
    conda:
        "../envs/base.yaml"
    resources:
        mem_mb=RESOURCES["light"]["mem_mb"],
        runtime=RESOURCES["light"]["runtime"],
    params:
        intervals=INTERVALS,
        note=(
            ""
            if thinking_llms()
            else "No configured LLM has a thinking switch (llms.<name>.can_think): nothing to compare."
        ),
    script:
        "../workflow/scripts/table5.py"


rule table7:
    input:
        **answers_inputs(DATASETS, lambda llm: ["topk"] + reranked_contexts()),
        **known_inputs(),
    output:
        csv=f"{TABLES}/table7_rag_reranked.csv",
        md=report(
            f"{TABLES}/table7_rag_reranked.md",
            caption="../report/table7.rst",
            category="2 Tables",
        ),
        tex=f"{TABLES}/table7_rag_reranked.tex",
    log:
        "logs/table7.log",
    conda:
        "../envs/base.yaml"
    resources:
        mem_mb=RESOURCES["light"]["mem_mb"],
        runtime=RESOURCES["light"]["runtime"],
    params:
        intervals=INTERVALS,
    script:
        "../workflow/scripts/table7.py"


rule table8:
    input:
        **keyed_per_llm(
            "judgments",
            JUDGMENTS,
            DATASETS,
            lambda d, llm: (
                KNOWN_REJECTION if set(KNOWN_REJECTION) <= set(JUDGE_METHODS) else []
            ),
        ),
        **gold_C_inputs(),
        **known_inputs(),
    output:
        csv=f"{TABLES}/table8_known_rejection.csv",
        md=report(
            f"{TABLES}/table8_known_rejection.md",
            caption="../report/table8.rst",
            category="2 Tables",
        ),
        tex=f"{TABLES}/table8_known_rejection.tex",
    log:
        "logs/table8.log",
    conda:
        "../envs/base.yaml"
    resources:
        mem_mb=RESOURCES["light"]["mem_mb"],
        runtime=RESOURCES["light"]["runtime"],
    params:
        intervals=INTERVALS,
        note=(
            ""
            if set(KNOWN_REJECTION) <= set(JUDGE_METHODS)
            else "Known-rejection needs listwise_pa and listwise_pa_reject in judgments.methods."
        ),
    script:
        "../workflow/scripts/table8.py"


rule figure9:
    input:
        **answers_inputs(
            DATASETS,
            lambda llm: [f"selected_{FIGURE9_METHOD}_from_{s}" for s in LLMS],
        ),
    output:
        png=report(
            f"{FIGURES}/fig9_selection_transfer.png",
            caption="../report/fig9.rst",
            category="3 Figures",
        ),
        pdf=f"{FIGURES}/fig9_selection_transfer.pdf",
        csv=f"{TABLES}/fig9_selection_transfer.csv",
    log:
        "logs/figure9.log",
    conda:
        "../envs/base.yaml"
    resources:
        mem_mb=RESOURCES["light"]["mem_mb"],
        runtime=RESOURCES["light"]["runtime"],
    params:
        llms=LLMS,
        method=FIGURE9_METHOD,
        style=config["figures"],
    script:
        "../workflow/scripts/figure9.py"


rule figure4:
    input:
        **keyed_per_llm("perplexity", PERPLEXITY, DATASETS),
        **answers_inputs(DATASETS, lambda llm: ["none", "human"]),
        **known_inputs(),
    output:
        png=report(
            f"{FIGURES}/fig4_perplexity.png",
            caption="../report/fig4.rst",
            category="3 Figures",
        ),
        pdf=f"{FIGURES}/fig4_perplexity.pdf",
        csv=f"{TABLES}/fig4_perplexity.csv",
    log:
        "logs/figure4.log",
    conda:
        "../envs/base.yaml"
    resources:
        mem_mb=RESOURCES["light"]["mem_mb"],
        runtime=RESOURCES["light"]["runtime"],
    params:
        style=config["figures"],
    script:
        "../workflow/scripts/figure4.py"


# Any retriever's TREC run (resources/runs/<dataset>/<name>.trec), scored by every LLM's gold set.
rule external_runs:
    input:
        **external_runs(),
        **keyed_per_llm("qrels", fill(QRELS, candidates="U"), DATASETS),
        **queries_inputs(DATASETS),
    output:
        csv=f"{TABLES}/external_runs.csv",
        md=report(
            f"{TABLES}/external_runs.md",
            caption="../report/external_runs.rst",
            category="2 Tables",
        ),
    log:
        "logs/external_runs.log",
    conda:
        "../envs/base.yaml"
    resources:
        mem_mb=RESOURCES["light"]["mem_mb"],
        runtime=RESOURCES["light"]["runtime"],
    params:
        k=RANK["k"],
    script:
        "../workflow/scripts/external_runs.py"
