# Stage 5, gold: each LLM's gold utilitarian passages among C and U (paper Eq. 1-2) and the
# per-query known flag, from the no-passage and single-passage answers.


rule gold_sets:
    input:
        candidates=CANDIDATES_TABLE,
        none=fill(ANSWERS, context="none"),
        single=fill(ANSWERS, context="single"),
    output:
        gold_C=fill(GOLD, pool="C"),
        gold_U=fill(GOLD, pool="U"),
        known=KNOWN,
    log:
        "logs/gold_sets/{dataset}/{llm}.log",
    conda:
        BASE_ENV
    resources:
        **LIGHT,
    script:
        "../workflow/scripts/gold_sets.py"
