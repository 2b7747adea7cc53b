"""Rule gold_sets: gold utilitarian passages among C and U (Eq. 1-2) and the known flag."""

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.pipeline import gold_job  # noqa: E402

gold_job(
    queries=snakemake.input.queries,
    run=snakemake.input.run,
    none=snakemake.input.none,
    single=snakemake.input.single,
    top_k=snakemake.params.top_k,
    outputs=dict(snakemake.output.items()),
    log=log,
)
