"""Rule table6: paper Table 6, dataset statistics, as CSV, Markdown and LaTeX.

By hand:  python workflow/scripts/table6.py
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("table6")

from llm_utility.logs import log_to

log_to(snakemake.log[0])

from llm_utility.pipeline import table6_job  # noqa: E402

table6_job(
    datasets=snakemake.params.datasets,
    corpora=snakemake.params.corpora,
    queries=list(snakemake.input.queries),
    passages=list(snakemake.input.passages),
    coverage=dict(zip(snakemake.params.with_coverage, snakemake.input.coverage, strict=True)),
    csv=snakemake.output.csv,
    md=snakemake.output.md,
    tex=snakemake.output.tex,
)
