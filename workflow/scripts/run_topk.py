"""Rule run_topk: a run's top-k with the passages' texts, read once from the corpus.

By hand:  python workflow/scripts/run_topk.py dataset=wf-single run=bm25
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("run_topk")

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.pipeline import run_topk_job  # noqa: E402

run_topk_job(
    run=snakemake.input.run,
    queries=snakemake.input.queries,
    passages=snakemake.input.passages,
    top_k=snakemake.params.top_k,
    output=snakemake.output.topk,
    log=log,
)
