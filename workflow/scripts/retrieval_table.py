"""Rule retrieval_table: answer recall@k and human-passage recall@k per dataset."""

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.pipeline import retrieval_table_job  # noqa: E402

retrieval_table_job(
    datasets=snakemake.params.datasets,
    queries=list(snakemake.input.queries),
    runs=list(snakemake.input.runs),
    passages=list(snakemake.input.passages),
    top_k=snakemake.params.top_k,
    csv=snakemake.output.csv,
    md=snakemake.output.md,
)
