"""Rule build_index: a FAISS inner-product index over the memory-mapped embedding shards."""

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.retrieval.index import build_index  # noqa: E402

build_index(list(snakemake.input.shards), snakemake.output.index, index_factory=snakemake.params.index_factory)
