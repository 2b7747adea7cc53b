"""Rule build_index: a FAISS inner-product index over the memory-mapped embedding shards.

By hand:  python workflow/scripts/build_index.py corpus=worldfacts retriever=minilm
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("build_index")

from llm_utility.logs import log_to

log_to(snakemake.log[0])

from llm_utility.gpu import lease_gpus  # noqa: E402  (before FAISS initializes CUDA)
from llm_utility.workflow import gpu_lock_dir  # noqa: E402

# With `gpu` resources the index is trained on a GPU and its vectors assigned on all leased ones,
# and nothing else: FAISS without GPUs (faiss-cpu, or no device visible) is an error, not days of
# k-means on the CPU. A killed build resumes from its checkpoints (the trained index, each shard).
gpus = snakemake.resources.gpu
with lease_gpus(gpus, gpu_lock_dir(snakemake.config)):
    from llm_utility.retrieval.index import build_index

    build_index(
        list(snakemake.input.shards),
        snakemake.output.index,
        index_factory=snakemake.params.index_factory,
        train_sample=snakemake.params.train_sample,
        use_gpu=bool(gpus),
    )
