"""Rules rank_retriever, rank and rank_attention: the utility rankings of C its outputs name, for
one (dataset, LLM): the retrieval order; the LLM's verbalized listwise ranking and the likelihood of
its pseudo-answer (one model session); or its attention (on the transformers backend).

By hand:  python workflow/scripts/rank.py rank dataset=wf-single llm=smollm2-135m
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("rank")

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.gpu import lease_gpus  # noqa: E402  (must run before torch or vLLM is imported)
from llm_utility.generation.store import job_name  # noqa: E402
from llm_utility.workflow import gpu_lock_dir, store_root  # noqa: E402

outputs = dict(snakemake.output.items())
model = {}
if set(outputs) != {"retriever"}:
    model = dict(
        manifest=snakemake.input.manifest,
        prompts=snakemake.input.prompts,
        pseudo_answers=snakemake.input.pseudo_answers,
        spec=snakemake.params.spec,
        rankings_cfg=snakemake.params.rankings,
        store=store_root(snakemake.config, snakemake.wildcards.llm),
        job=job_name(snakemake.rule, dict(snakemake.wildcards.items())),
        threads=snakemake.threads,
    )

with lease_gpus(snakemake.resources.get("gpu", 0), gpu_lock_dir(snakemake.config)):
    from llm_utility.pipeline import rank_job

    rank_job(
        dataset=snakemake.wildcards.dataset,
        queries=snakemake.input.queries,
        candidates=snakemake.input.candidates,
        outputs=outputs,
        max_queries=snakemake.params.max_queries,
        log=log,
        **model,
    )
