"""Rules <rule>_gather (rules/gather.smk): a model job's per-part tables concatenated, in part order,
into the tables one job of the whole dataset writes.

By hand (the parts must exist):
    python workflow/scripts/gather_parts.py judge_gather dataset=nq llm=qwen3-32b
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("judge_gather")

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.pipeline import gather_parts_job  # noqa: E402

# Each output's part files are the inputs named <part>/<output name>, in the order of params.parts.
outputs = dict(snakemake.output.items())
parts = {key: [snakemake.input[f"{part}/{key}"] for part in snakemake.params.parts] for key in outputs}
gather_parts_job(parts=parts, outputs=outputs, log=log)
