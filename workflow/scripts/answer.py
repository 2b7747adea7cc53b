"""Rules answer_candidates, answer_gold and answer_reask (and answer_thinking,
answer_judgments): one job answers every context its outputs name (none, single, topk, union, human;
gold_{C,U}_from_<llm>; reask_*) through the generation store.

By hand (inputs must exist):
    python workflow/scripts/answer.py answer_gold dataset=wf-single llm=smollm2-135m
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("answer_candidates")

from llm_utility.workflow import run_in_llm_python

run_in_llm_python(snakemake.config, snakemake.wildcards.llm)  # under llms.<llm>.python when set, before the log opens

from llm_utility.logs import log_to  # noqa: E402

log = log_to(snakemake.log[0])

from llm_utility.generation.store import job_name  # noqa: E402
from llm_utility.gpu import lease_gpus  # noqa: E402  (must run before torch or vLLM is imported)
from llm_utility.workflow import gpu_lock_dir, job_part_queries, store_root  # noqa: E402

with lease_gpus(snakemake.resources.gpu, gpu_lock_dir(snakemake.config)):
    from llm_utility.pipeline import answer_job

    outputs = dict(snakemake.output.items())
    answer_job(
        dataset=snakemake.wildcards.dataset,
        queries=snakemake.input.queries,
        candidates=snakemake.input.candidates,
        manifest=snakemake.input.manifest,
        prompts=snakemake.input.prompts,
        tables={name: path for name, path in snakemake.input.items() if name in outputs},
        outputs=outputs,
        spec=snakemake.params.spec,
        store=store_root(snakemake.config, snakemake.wildcards.llm),
        job=job_name(snakemake.rule, dict(snakemake.wildcards.items())),
        synonyms=snakemake.params.synonyms,
        threads=snakemake.threads,
        # A query shard's job (rule <name>_part) answers only its part's queries.
        qids=job_part_queries(snakemake),
        log=log,
    )
