"""Rule figure_selection_transfer: paper Figure 9, RAG with each LLM's utility selections across LLMs.

By hand:  python workflow/scripts/figure_selection_transfer.py
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("figure_selection_transfer")

from llm_utility.logs import log_to

log_to(snakemake.log[0])

from llm_utility.pipeline import selection_transfer_figure_job  # noqa: E402
from llm_utility.workflow import keyed_inputs  # noqa: E402

selection_transfer_figure_job(
    answers=keyed_inputs(snakemake.input, "answers"),
    llms=snakemake.params.llms,
    method=snakemake.params.method,
    style=snakemake.params.style,
    png=snakemake.output.png,
    pdf=snakemake.output.pdf,
    csv=snakemake.output.csv,
)
