"""Rule retrieve: encode the queries and write the run (qid, pid, rank, score) to its depth.

By hand:  python workflow/scripts/retrieve.py dataset=wf-single retriever=minilm
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("retrieve")

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.gpu import lease_gpus  # noqa: E402  (before torch is imported)
from llm_utility.workflow import gpu_lock_dir  # noqa: E402

with lease_gpus(snakemake.resources.gpu, gpu_lock_dir(snakemake.config)):
    import torch

    from llm_utility.pipeline import retrieve_job
    from llm_utility.retrieval.encoders import materialized_spec

    torch.set_num_threads(snakemake.threads)
    retrieve_job(
        queries=snakemake.input.queries,
        passages=snakemake.input.passages,
        index=snakemake.input.index,
        # The retriever's manifest: the weights come from resources/, offline.
        encoder_spec=materialized_spec(snakemake.params.encoder, snakemake.input.manifest),
        top_k=snakemake.params.depth,
        output=snakemake.output.run,
        log=log,
    )
