"""Rule materialize_retriever: fetch a hub encoder once into resources/ (or describe local weights)."""

import os

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.retrieval.encoders import materialize_retriever  # noqa: E402

manifest = materialize_retriever(
    snakemake.wildcards.retriever,
    snakemake.params.spec,
    os.path.dirname(snakemake.output.manifest),
    weights_dir=snakemake.params.weights_dir,
)
log.info("materialized %s: %s", snakemake.wildcards.retriever, manifest)
