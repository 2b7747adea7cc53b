"""Rule extract_answers: MS MARCO-FQA short entity answers from the long answers, through the generation store."""

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.gpu import lease_gpus  # noqa: E402  (must run before torch or vLLM is imported)

with lease_gpus(snakemake.resources.gpu, snakemake.params.gpu_lock_dir):
    from llm_utility.data.jobs import extract_answers_job  # noqa: E402

    extract_answers_job(
        queries=snakemake.input.queries,
        manifest=snakemake.input.manifest,
        prompts=snakemake.input.prompts,
        spec=snakemake.params.spec,
        store_path=snakemake.params.store,
        output=snakemake.output.answers,
        log=log,
    )
