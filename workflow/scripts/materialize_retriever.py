"""Rule materialize_retriever: fetch a hub encoder once into resources/ (or describe local weights).

By hand:  python workflow/scripts/materialize_retriever.py retriever=minilm
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("materialize_retriever")

import os  # noqa: E402

from llm_utility.logs import log_to  # noqa: E402

log = log_to(snakemake.log[0])

from llm_utility.retrieval.encoders import materialize_retriever  # noqa: E402

manifest = materialize_retriever(
    snakemake.wildcards.retriever,
    snakemake.params.spec,
    os.path.dirname(snakemake.output.manifest),
    weights_dir=snakemake.params.weights_dir,
)
log.info("materialized %s: %s", snakemake.wildcards.retriever, manifest)
