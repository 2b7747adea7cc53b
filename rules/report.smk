# Stage 7, tables and figures: each a target of its own (a localrule: cheap, no model), so a change
# of styling reruns only that figure. Captions for `snakemake --report` live in report/.

PAPER_CONTEXTS = ["none", "topk", "union", "human", "gold_C", "gold_U"]


localrules:
    table1,
    figure_topk,
    figure_transfer,
    figure_overlap,


rule table1:
    input:
        answers=answers_for(PAPER_CONTEXTS),
        gold=expand(GOLD, dataset=DATASETS, llm=LLMS, candidates=["C", "U"]),
        queries=expand(QUERIES, dataset=DATASETS),
    output:
        csv="results/tables/table1_rag.csv",
        md="results/tables/table1_rag.md",
        tex="results/tables/table1_rag.tex",
    log:
        "logs/table1.log",
    conda:
        "../envs/base.yaml"
    params:
        datasets=DATASETS,
        llms=LLMS,
        patterns={"answers": ANSWERS, "gold": GOLD, "queries": QUERIES},
    script:
        "../workflow/scripts/table1.py"


rule figure_topk:
    input:
        answers=answers_for(["none", "topk"]),
    output:
        png=report(
            "results/figures/fig1_left_topk.png",
            caption="../report/fig1_left.rst",
            category="Figures",
        ),
        pdf="results/figures/fig1_left_topk.pdf",
    log:
        "logs/figure_topk.log",
    conda:
        "../envs/base.yaml"
    params:
        datasets=DATASETS,
        llms=LLMS,
        patterns={"answers": ANSWERS},
        style=config["figures"],
    script:
        "../workflow/scripts/figure_topk.py"


# Figure 1 right (first dataset, U candidates), Figure 2 (all datasets, U), Figure 8 (all, C).
TRANSFER_FIGURES = {
    "fig1_right_transfer": {"candidates": "U", "datasets": DATASETS[:1]},
    "fig2_transfer_U": {"candidates": "U", "datasets": DATASETS},
    "fig8_transfer_C": {"candidates": "C", "datasets": DATASETS},
}


rule figure_transfer:
    input:
        answers=answers_for(["human", "gold_C", "gold_U"], transfer=True),
    output:
        png=report(
            "results/figures/{figure}.png",
            caption="../report/transfer.rst",
            category="Figures",
        ),
        pdf="results/figures/{figure}.pdf",
        csv="results/tables/{figure}.csv",
    log:
        "logs/figure_transfer/{figure}.log",
    wildcard_constraints:
        figure="|".join(TRANSFER_FIGURES),
    conda:
        "../envs/base.yaml"
    params:
        spec=lambda wc: TRANSFER_FIGURES[wc.figure],
        llms=LLMS,
        patterns={"answers": ANSWERS},
        style=config["figures"],
    script:
        "../workflow/scripts/figure_transfer.py"


rule figure_overlap:
    input:
        gold=expand(GOLD, dataset=DATASETS, llm=LLMS, candidates=["U"]),
        queries=expand(QUERIES, dataset=DATASETS),
    output:
        png=report(
            "results/figures/fig3_overlap.png",
            caption="../report/fig3_overlap.rst",
            category="Figures",
        ),
        pdf="results/figures/fig3_overlap.pdf",
        csv="results/tables/fig3_overlap.csv",
    log:
        "logs/figure_overlap.log",
    conda:
        "../envs/base.yaml"
    params:
        datasets=DATASETS,
        llms=LLMS,
        patterns={"gold": GOLD, "queries": QUERIES},
        style=config["figures"],
    script:
        "../workflow/scripts/figure_overlap.py"
