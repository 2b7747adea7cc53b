"""Rule materialize_model: dequantize a GGUF once into safetensors, fetch hub weights once at their
pinned revision, or describe a local directory; write the manifest every LLM job loads from.

By hand:  python workflow/scripts/materialize_model.py llm=smollm2-135m
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("materialize_model")

import os

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.generation.models import materialize  # noqa: E402

manifest = materialize(
    snakemake.wildcards.llm,
    snakemake.params.spec,
    os.path.dirname(snakemake.output.manifest),
    weights_dir=snakemake.params.weights_dir,
)
log.info("materialized %s: %s", snakemake.wildcards.llm, manifest)
