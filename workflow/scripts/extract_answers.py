"""Rule extract_answers: MS MARCO-FQA short entity answers from the long answers, through the
generation store.

By hand:  python workflow/scripts/extract_answers.py dataset=msmarco-fqa --configfile config/paper.yaml
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("extract_answers")

from llm_utility.workflow import run_in_llm_python

run_in_llm_python(
    snakemake.config, snakemake.params.extractor
)  # under llms.<llm>.python when set, before the log opens

from llm_utility.logs import log_to  # noqa: E402

log = log_to(snakemake.log[0])

from llm_utility.generation.store import job_name  # noqa: E402
from llm_utility.gpu import lease_gpus  # noqa: E402  (must run before torch or vLLM is imported)
from llm_utility.workflow import gpu_lock_dir, store_root  # noqa: E402

with lease_gpus(snakemake.resources.gpu, gpu_lock_dir(snakemake.config)):
    from llm_utility.pipeline.data import extract_answers_job

    extract_answers_job(
        queries=snakemake.input.queries,
        manifest=snakemake.input.manifest,
        prompts=snakemake.input.prompts,
        spec=snakemake.params.spec,
        store=store_root(snakemake.config, snakemake.params.extractor),
        job=job_name(snakemake.rule, dict(snakemake.wildcards.items())),
        output=snakemake.output.answers,
        log=log,
    )
