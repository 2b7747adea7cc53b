"""Rule cost: LLM calls, tokens and time per stage, method and LLM, from the model jobs' logs and
benchmark files (CSV, Markdown).

By hand:  python workflow/scripts/cost.py
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("cost")

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.pipeline import cost_job  # noqa: E402

cost_job(jobs=snakemake.params.jobs, csv=snakemake.output.csv, md=snakemake.output.md, log=log)
