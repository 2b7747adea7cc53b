"""Rules answer_candidates, answer_gold and answer_transfer: one job answers every context named by
its outputs (none, single, topk, union, human, gold_C, gold_U) through the generation store."""

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.gpu import lease_gpus  # noqa: E402  (must run before torch or vLLM is imported)

with lease_gpus(snakemake.resources.gpu, snakemake.params.gpu_lock_dir):
    from llm_utility.pipeline import answer_job  # noqa: E402

    answer_job(
        queries=snakemake.input.queries,
        run=snakemake.input.run,
        passages=snakemake.input.passages,
        manifest=snakemake.input.manifest,
        prompts=snakemake.input.prompts,
        gold={k: snakemake.input[k] for k in ("gold_C", "gold_U") if k in snakemake.input.keys()},
        outputs=dict(snakemake.output.items()),
        spec=snakemake.params.spec,
        top_k=snakemake.params.top_k,
        store_path=snakemake.params.store,
        threads=snakemake.threads,
        log=log,
    )
