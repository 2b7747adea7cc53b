"""Rule qrels: an LLM's gold set (C or U) as TREC qrels, for scoring any retriever's run by
LLM-specific utility.

By hand:  python workflow/scripts/qrels.py dataset=wf-single llm=smollm2-135m pool=U
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("qrels")

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.pipeline import qrels_job  # noqa: E402

qrels_job(
    gold=snakemake.input.gold,
    candidates=snakemake.input.candidates,
    pool=snakemake.wildcards.pool,
    output=snakemake.output.qrels,
    log=log,
)
