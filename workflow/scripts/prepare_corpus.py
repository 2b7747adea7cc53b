"""Rule prepare_corpus: the worldfacts demo corpus, or a local DPR-style TSV, as passages.parquet."""

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.data.sources import prepare_corpus  # noqa: E402
from llm_utility.io import write_parquet  # noqa: E402

passages = prepare_corpus(snakemake.wildcards.corpus, snakemake.params.corpus, seed=snakemake.params.seed)
write_parquet(passages, snakemake.output.passages)
log.info("corpus %s: %d passages", snakemake.wildcards.corpus, passages.height)
