"""Rule chunk_corpus_shard: one byte range of the KILT knowledge source as 100-word passages with spans."""

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.data.jobs import chunk_corpus_shard_job  # noqa: E402

chunk_corpus_shard_job(
    knowledge_source=snakemake.input.knowledge_source,
    shard=int(snakemake.wildcards.shard),
    n_shards=snakemake.params.n_shards,
    words=snakemake.params.words,
    output=snakemake.output.shard,
    log=log,
)
