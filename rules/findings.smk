# Findings: the paper's headline claims tested on this run with bootstrap intervals (findings.json),
# the transfer matrices on the queries unknown to both LLMs (a control beyond the paper), what the
# model stages cost, and the validated config, all for the Snakemake report (captions in report/).


localrules:
    findings,
    transfer_unknown_both,
    cost,
    config_report,


rule findings:
    input:
        **findings_inputs(),
    output:
        json=report(
            "results/findings.json",
            caption="../report/findings_json.rst",
            category="1 Findings",
        ),
        md=report(
            f"{TABLES}/findings.md",
            caption="../report/findings.rst",
            category="1 Findings",
        ),
        html=report(
            f"{TABLES}/findings.html",
            caption="../report/findings.rst",
            category="1 Findings",
        ),
    log:
        "logs/findings.log",
    conda:
        "../envs/base.yaml"
    params:
        llms=LLMS,
        families=families(),
        k=RANK["k"],
        resampling={**BOOTSTRAP, "min_queries": config["report"]["min_queries"]},
    script:
        "../workflow/scripts/findings.py"


rule transfer_unknown_both:
    input:
        unpack(transfer_unknown_inputs),
    output:
        csv=f"{TABLES}/transfer_unknown_both_{{candidates}}.csv",
        md=report(
            f"{TABLES}/transfer_unknown_both_{{candidates}}.md",
            caption="../report/transfer_unknown_both.rst",
            category="2 Tables",
        ),
    log:
        "logs/transfer_unknown_both/{candidates}.log",
    conda:
        "../envs/base.yaml"
    params:
        llms=LLMS,
    script:
        "../workflow/scripts/transfer_unknown_both.py"


# The cost table reads the logs and benchmark files of the model jobs. Those are not outputs a rule
# can depend on, so the inputs are the jobs' outputs (the table is made after every model job ran,
# and again after any reran), and the log and benchmark paths come as params, filled in from each
# rule's own log: and benchmark: patterns (rules.<name>), never rebuilt by hand.
rule cost:
    input:
        outputs=model_job_outputs(),
    output:
        csv=f"{TABLES}/cost.csv",
        md=report(
            f"{TABLES}/cost.md",
            caption="../report/cost.rst",
            category="4 Cost",
        ),
    log:
        "logs/cost.log",
    conda:
        "../envs/base.yaml"
    params:
        jobs=model_job_records(),
    script:
        "../workflow/scripts/cost.py"


rule config_report:
    output:
        yaml=report(
            "results/config.yaml",
            caption="../report/config.rst",
            category="5 Config",
        ),
    log:
        "logs/config_report.log",
    conda:
        "../envs/base.yaml"
    params:
        config=results_config(),
    script:
        "../workflow/scripts/config_report.py"
