"""Rule table1: paper Table 1 as CSV (tidy), Markdown and LaTeX."""

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.pipeline import table1_job  # noqa: E402

table1_job(
    datasets=snakemake.params.datasets,
    llms=snakemake.params.llms,
    patterns=snakemake.params.patterns,
    csv=snakemake.output.csv,
    md=snakemake.output.md,
    tex=snakemake.output.tex,
)
