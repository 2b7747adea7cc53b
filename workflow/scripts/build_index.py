"""Rule build_index: a FAISS inner-product index over the memory-mapped embedding shards.

By hand:  python workflow/scripts/build_index.py corpus=worldfacts retriever=minilm
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("build_index")

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.retrieval.index import build_index  # noqa: E402

build_index(list(snakemake.input.shards), snakemake.output.index, index_factory=snakemake.params.index_factory)
