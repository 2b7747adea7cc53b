"""Rule config_report: the validated config these results were made from, as YAML, for the report.

By hand:  python workflow/scripts/config_report.py
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("config_report")

from llm_utility.logs import log_to

log_to(snakemake.log[0])

from llm_utility.pipeline import config_job  # noqa: E402

config_job(config=snakemake.params.config, output=snakemake.output.yaml)
