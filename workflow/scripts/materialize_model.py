"""Rule materialize_model: dequantize a GGUF once into safetensors (or describe hub/local weights)."""

import os

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.generation.models import materialize  # noqa: E402

manifest = materialize(snakemake.wildcards.llm, snakemake.params.spec, os.path.dirname(snakemake.output.manifest))
log.info("materialized %s: %s", snakemake.wildcards.llm, manifest)
