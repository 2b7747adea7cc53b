"""Rule figure_overlap: paper Figure 3, and its numbers as CSV."""

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.pipeline import overlap_figure_job  # noqa: E402

overlap_figure_job(
    datasets=snakemake.params.datasets,
    llms=snakemake.params.llms,
    patterns=snakemake.params.patterns,
    style=snakemake.params.style,
    png=snakemake.output.png,
    pdf=snakemake.output.pdf,
    csv=snakemake.output.csv,
)
