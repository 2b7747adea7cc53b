"""Rule figure_overlap: paper Figure 3, and its numbers as CSV.

By hand:  python workflow/scripts/figure_overlap.py
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("figure_overlap")

from llm_utility.logs import log_to

log_to(snakemake.log[0])

from llm_utility.pipeline import overlap_figure_job  # noqa: E402
from llm_utility.workflow import keyed_inputs  # noqa: E402

overlap_figure_job(
    gold=keyed_inputs(snakemake.input, "gold"),
    queries=keyed_inputs(snakemake.input, "queries"),
    llms=snakemake.params.llms,
    style=snakemake.params.style,
    png=snakemake.output.png,
    pdf=snakemake.output.pdf,
    csv=snakemake.output.csv,
)
