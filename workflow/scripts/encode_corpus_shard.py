"""Rule encode_corpus_shard: dense embeddings of one contiguous slice of the corpus (.npy).

By hand:  python workflow/scripts/encode_corpus_shard.py corpus=worldfacts retriever=minilm corpus_shard=0
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("encode_corpus_shard")

from llm_utility.logs import log_to

log_to(snakemake.log[0])

from llm_utility.gpu import lease_gpus  # noqa: E402  (before torch is imported)
from llm_utility.workflow import gpu_lock_dir  # noqa: E402

with lease_gpus(snakemake.resources.gpu, gpu_lock_dir(snakemake.config)):
    import torch

    from llm_utility.retrieval.encoders import encode_corpus_shard, load_encoder, materialized_spec

    torch.set_num_threads(snakemake.threads)
    # The retriever's manifest: the weights come from resources/, offline.
    encoder = load_encoder(materialized_spec(snakemake.params.encoder, snakemake.input.manifest))
    encode_corpus_shard(
        encoder,
        snakemake.input.passages,
        shard=int(snakemake.wildcards.corpus_shard),
        n_shards=snakemake.params.n_shards,
        out_path=snakemake.output.embeddings,
    )
