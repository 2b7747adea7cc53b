"""Rule transfer_unknown_both: the transfer matrices beside their control on the queries unknown to
both LLMs of each cell (CSV, Markdown).

By hand:  python workflow/scripts/transfer_unknown_both.py pool=U
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("transfer_unknown_both")

from llm_utility.logs import log_to

log_to(snakemake.log[0])

from llm_utility.pipeline import transfer_unknown_job  # noqa: E402
from llm_utility.workflow import keyed_inputs  # noqa: E402

transfer_unknown_job(
    answers=keyed_inputs(snakemake.input, "answers"),
    known=keyed_inputs(snakemake.input, "known"),
    llms=snakemake.params.llms,
    candidates=snakemake.wildcards.pool,
    csv=snakemake.output.csv,
    md=snakemake.output.md,
)
