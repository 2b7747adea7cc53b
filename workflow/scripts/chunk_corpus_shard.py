"""Rule chunk_corpus_shard: one byte range of the KILT knowledge source as 100-word passages with spans.

By hand:  python workflow/scripts/chunk_corpus_shard.py corpus=kilt-wiki corpus_shard=0 --configfile config/paper.yaml
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("chunk_corpus_shard")

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.pipeline.data import chunk_corpus_shard_job  # noqa: E402

chunk_corpus_shard_job(
    knowledge_source=snakemake.input.knowledge_source,
    shard=int(snakemake.wildcards.corpus_shard),
    n_shards=snakemake.params.n_shards,
    words=snakemake.params.words,
    output=snakemake.output.shard,
    log=log,
)
