# Findings: the paper's headline claims tested on this run with bootstrap intervals (findings.json),
# the transfer matrices on the queries unknown to both LLMs (a control beyond the paper), what the
# model stages cost, and the validated config, all for the Snakemake report (captions in report/).
# Input functions are lambdas (`snakemake --lint` wants no `def` beside rules), each right above the
# rule it serves.

from llm_utility.report.judgments import figure9_method
from llm_utility.workflow.model_rules import model_jobs
from llm_utility.workflow.operational import results_config

# Everything a finding reads: Table 1's, the transfer and the RAG-with-judgments answers, gold sets,
# known flags, queries, perplexity, the judgments and Table 4's rankings (where configured), and,
# where the plan has the re-ask stage (config reask.enabled), the re-ask answers
# (answers/reask_<context>.parquet) of the re-ask twins.
FINDINGS_INPUTS = {
    **answers_inputs(DATASETS, lambda llm: REPORT_PLAN.findings_contexts()),
    **answers_inputs(DATASETS, lambda llm: REPORT_PLAN.findings_reask_contexts()),
    **gold_inputs(DATASETS),
    **known_inputs(),
    **queries_inputs(DATASETS),
    **keyed_per_llm("perplexity", PERPLEXITY, DATASETS),
    **keyed_per_llm(
        "judgments", JUDGMENTS, DATASETS, lambda d, llm: MODEL_PLAN.judge_methods
    ),
    **keyed_per_llm(
        "rankings", RANKINGS, DATASETS, lambda d, llm: REPORT_PLAN.findings_rankings()
    ),
    # The qrels at work (rules/runs.smk): only where runs are answered with.
    **({"run_pairs": RUN_PAIRS} if DATA_PLAN.run_rag else {}),
}


rule findings:
    input:
        **FINDINGS_INPUTS,
    output:
        json=report(
            FINDINGS_JSON,
            caption="../report/findings_json.rst",
            category="1 Findings",
        ),
        md=report(
            fill(TABLE, name="findings", ext="md"),
            caption="../report/findings.rst",
            category="1 Findings",
        ),
        html=report(
            fill(TABLE, name="findings", ext="html"),
            caption="../report/findings.rst",
            category="1 Findings",
        ),
        # The summary alone, for the report's opening page (report/workflow.rst includes it).
        summary=report(
            FINDINGS_SUMMARY,
            caption="../report/findings_summary.rst",
            category="1 Findings",
        ),
    log:
        "logs/findings.log",
    localrule: True
    conda:
        BASE_ENV
    params:
        llms=LLMS,
        families=REPORT_PLAN.families(),
        k=RANK["k"],
        resampling={
            **REPORT_PLAN.bootstrap(),
            "min_queries": config["report"]["min_queries"],
        },
        paper_datasets=REPORT_PLAN.paper_datasets,
        claim_scope=REPORT_PLAN.claim_scope(),
        figure9_method=figure9_method(MODEL_PLAN),
        rag_top=RANK["rag_top"],
    script:
        "../workflow/scripts/findings.py"


transfer_unknown_inputs = lambda wc: {
    **answers_inputs(
        DATASETS, lambda llm: ["human"] + MODEL_PLAN.gold_contexts(wc.pool)
    ),
    **known_inputs(),
}


rule transfer_unknown_both:
    input:
        unpack(transfer_unknown_inputs),
    output:
        **table_outputs(
            "transfer_unknown_both",
            name="transfer_unknown_both_{pool}",
            formats=("csv", "md"),
        ),
    log:
        "logs/transfer_unknown_both/{pool}.log",
    localrule: True
    conda:
        BASE_ENV
    params:
        llms=LLMS,
    script:
        "../workflow/scripts/transfer_unknown_both.py"


# The cost table's rows are the model jobs of the plan (llm_utility.workflow.model_rules:
# model_jobs). Each is a job the DAG runs anyway: the cost rule waits for one output of each (its
# row's `output`), from the patterns the rule registered (rules/parts.smk: MODEL_RULE_FILES;
# `rules.<name>.output` would be the storage-local path under a storage provider, Kubernetes, not an
# input). tests/test_workflow_dryrun.py checks that the cost table schedules exactly the model jobs
# of the full DAG.
MODEL_RULE_OUTPUT = {
    name: files["output"][model_rule(name).output or next(iter(files["output"]))]
    for name, files in MODEL_RULE_FILES.items()
    if files["output"]
}
# A job's pattern filled in: a job of a query part (a `part` wildcard in the plan) in its part's
# folder. Its row in the cost table is its rule's, so the parts of a dataset add up there.
filled = lambda pattern, wc: (
    fill(str(pattern), part_dir=part_dir(wc.get("part")), **wc) if pattern else None
)
MODEL_JOB_OUTPUTS = [
    filled(MODEL_RULE_OUTPUT[name], wc) for name, wc in model_jobs(MODEL_PLAN)
]
# rule, wildcards, and the log and benchmark paths of each model job, filled in from the rule's own
# log: and benchmark: patterns (rules.<name>), so the cost table never rebuilds a path.
MODEL_JOB_RECORDS = [
    {
        "rule": name,
        "wildcards": wc,
        "log": filled(getattr(rules, name).log[0], wc),
        "benchmark": filled(getattr(rules, name).benchmark, wc),
    }
    for name, wc in model_jobs(MODEL_PLAN)
]


# The cost table reads the logs and benchmark files of the model jobs. Those are not outputs a rule
# can depend on, so the inputs are the jobs' outputs (the table is made after every model job ran,
# and again after any reran), and the log and benchmark paths come as params, filled in from each
# rule's own log: and benchmark: patterns (rules.<name>), never rebuilt by hand.
rule cost:
    input:
        outputs=MODEL_JOB_OUTPUTS,
    output:
        **table_outputs("cost", name="cost", formats=("csv", "md"), category="4 Cost"),
    log:
        "logs/cost.log",
    localrule: True
    conda:
        BASE_ENV
    params:
        jobs=MODEL_JOB_RECORDS,
    script:
        "../workflow/scripts/cost.py"


rule config_report:
    output:
        yaml=report(
            RESULTS_CONFIG,
            caption="../report/config_report.rst",
            category="5 Config",
        ),
    log:
        "logs/config_report.log",
    localrule: True
    conda:
        BASE_ENV
    params:
        config=results_config(config),
    script:
        "../workflow/scripts/config_report.py"
