"""Rule gold_sets: gold utilitarian passages among C and U (Eq. 1-2) and the known flag.

By hand:  python workflow/scripts/gold_sets.py dataset=wf-single llm=smollm2-135m
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("gold_sets")

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.pipeline import gold_job  # noqa: E402

gold_job(
    candidates=snakemake.input.candidates,
    none=snakemake.input.none,
    single=snakemake.input.single,
    outputs=dict(snakemake.output.items()),
    log=log,
)
