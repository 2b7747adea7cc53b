"""Rule figure_transfer: paper Figures 1 (right), 2 and 8, and their numbers as CSV.

By hand:  python workflow/scripts/figure_transfer.py figure=fig1_right_transfer
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("figure_transfer")

from llm_utility.logs import log_to

log_to(snakemake.log[0])

from llm_utility.pipeline import transfer_figure_job  # noqa: E402
from llm_utility.workflow import keyed_inputs  # noqa: E402

transfer_figure_job(
    answers=keyed_inputs(snakemake.input, "answers"),
    llms=snakemake.params.llms,
    candidates=snakemake.params.candidates,
    style=snakemake.params.style,
    png=snakemake.output.png,
    pdf=snakemake.output.pdf,
    csv=snakemake.output.csv,
)
