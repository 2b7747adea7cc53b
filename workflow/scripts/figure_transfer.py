"""Rule figure_transfer: paper Figures 1 (right), 2 and 8, and their numbers as CSV."""

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.pipeline import transfer_figure_job  # noqa: E402

transfer_figure_job(
    datasets=snakemake.params.spec["datasets"],
    llms=snakemake.params.llms,
    candidates=snakemake.params.spec["candidates"],
    patterns=snakemake.params.patterns,
    style=snakemake.params.style,
    png=snakemake.output.png,
    pdf=snakemake.output.pdf,
    csv=snakemake.output.csv,
)
