"""Rule rank_retriever: the retrieval order of C as a ranking, the baseline of Table 4.

By hand:  python workflow/scripts/rank_retriever.py dataset=wf-single llm=smollm2-135m
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("rank_retriever")

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.pipeline import rank_retriever_job  # noqa: E402

rank_retriever_job(
    queries=snakemake.input.queries,
    candidates=snakemake.input.candidates,
    output=snakemake.output.ranking,
    max_queries=snakemake.params.max_queries,
    log=log,
)
