"""Rule prepare_queries: the worldfacts query sets, or a local JSONL file, as queries.parquet."""

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.data.sources import prepare_queries  # noqa: E402
from llm_utility.io import write_parquet  # noqa: E402

queries = prepare_queries(
    snakemake.wildcards.dataset, snakemake.params.dataset, snakemake.input.passages, seed=snakemake.params.seed
)
write_parquet(queries, snakemake.output.queries)
log.info("dataset %s: %d queries", snakemake.wildcards.dataset, queries.height)
