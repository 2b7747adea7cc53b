"""Rule load_queries: a benchmark file (KILT, 2WikiMultihopQA, MS MARCO QnA) as source queries and annotations.

By hand:  python workflow/scripts/load_queries.py dataset=nq --configfile config/paper.yaml
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("load_queries")

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.pipeline.data import load_queries_job  # noqa: E402

load_queries_job(
    name=snakemake.wildcards.dataset,
    cfg=snakemake.params.dataset,
    inputs=dict(snakemake.input.items()),
    queries_out=snakemake.output.queries,
    evidence_out=snakemake.output.evidence,
    summary_out=snakemake.output.summary,
    log=log,
)
