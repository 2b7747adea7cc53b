"""Rule prepare_queries: the worldfacts query sets, a local JSONL file, or a benchmark's loaded queries
with their mapped human passages (and MS MARCO-FQA's short answers), as queries.parquet.

By hand:  python workflow/scripts/prepare_queries.py dataset=wf-single
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("prepare_queries")

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.pipeline.data import prepare_queries_job  # noqa: E402

prepare_queries_job(
    name=snakemake.wildcards.dataset,
    cfg=snakemake.params.dataset,
    inputs=dict(snakemake.input.items()),
    output=snakemake.output.queries,
    seed=snakemake.params.seed,
    log=log,
)
