"""Rules judge and judge_thinking: everything one LLM judges or scores about one dataset's
candidates, in one model session: verbalized selections with every method its outputs name, its
utility rankings (verbalized, likelihood, attention) and its perplexities of human passages.

By hand:  python workflow/scripts/judge.py judge dataset=wf-single llm=smollm2-135m
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("judge")

from llm_utility.workflow import run_in_llm_python

run_in_llm_python(snakemake.config, snakemake.wildcards.llm)  # under llms.<llm>.python when set, before the log opens

from llm_utility.logs import log_to  # noqa: E402

log = log_to(snakemake.log[0])

from llm_utility.generation.store import job_name  # noqa: E402
from llm_utility.gpu import lease_gpus  # noqa: E402  (must run before torch or vLLM is imported)
from llm_utility.workflow import gpu_lock_dir, job_part_queries, keyed_inputs, store_root  # noqa: E402

with lease_gpus(snakemake.resources.gpu, gpu_lock_dir(snakemake.config)):
    from llm_utility.pipeline import judge_job

    judge_job(
        dataset=snakemake.wildcards.dataset,
        queries=snakemake.input.queries,
        candidates=snakemake.input.candidates,
        manifest=snakemake.input.manifest,
        prompts=snakemake.input.prompts,
        spec=snakemake.params.spec,
        store=store_root(snakemake.config, snakemake.wildcards.llm),
        job=job_name(snakemake.rule, dict(snakemake.wildcards.items())),
        judgments=keyed_inputs(snakemake.output, "judgments"),
        rankings=keyed_inputs(snakemake.output, "rankings"),
        perplexity=snakemake.output.get("perplexity"),
        pseudo_answers={k: snakemake.input[k] for k in ("topk", "topk_think") if k in snakemake.input.keys()},
        gold_U=snakemake.input.get("gold_U"),
        max_new_tokens=snakemake.params.max_new_tokens,
        rankings_cfg=snakemake.params.rankings,
        max_queries=snakemake.params.max_queries,
        threads=snakemake.threads,
        # A query shard's job (rule <name>_part) answers only its part's queries.
        qids=job_part_queries(snakemake),
        log=log,
    )
