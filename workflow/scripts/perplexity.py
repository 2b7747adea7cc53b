"""Rule perplexity: the LLM's perplexity of the human passages of queries with a gold set, alone and
after the query, in and out of its gold set (Figure 4, top).

By hand:  python workflow/scripts/perplexity.py dataset=wf-single llm=smollm2-135m
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("perplexity")

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.gpu import lease_gpus  # noqa: E402  (must run before torch or vLLM is imported)
from llm_utility.generation.store import job_name  # noqa: E402
from llm_utility.workflow import gpu_lock_dir, store_root  # noqa: E402

with lease_gpus(snakemake.resources.gpu, gpu_lock_dir(snakemake.config)):
    from llm_utility.pipeline import perplexity_job

    perplexity_job(
        dataset=snakemake.wildcards.dataset,
        queries=snakemake.input.queries,
        candidates=snakemake.input.candidates,
        gold_U=snakemake.input.gold_U,
        manifest=snakemake.input.manifest,
        spec=snakemake.params.spec,
        store=store_root(snakemake.config, snakemake.wildcards.llm),
        job=job_name(snakemake.rule, dict(snakemake.wildcards.items())),
        output=snakemake.output.perplexity,
        threads=snakemake.threads,
        log=log,
    )
