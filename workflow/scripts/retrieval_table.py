"""Rule retrieval_table: answer recall@k and human-passage recall@k per dataset and run.

By hand:  python workflow/scripts/retrieval_table.py
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("retrieval_table")

from llm_utility.logs import log_to

log_to(snakemake.log[0])

from llm_utility.pipeline import retrieval_table_job  # noqa: E402
from llm_utility.workflow import keyed_inputs  # noqa: E402

retrieval_table_job(
    queries=keyed_inputs(snakemake.input, "queries"),
    runs=keyed_inputs(snakemake.input, "runs"),
    pool_runs=snakemake.params.pool_runs,
    top_k=snakemake.params.top_k,
    csv=snakemake.output.csv,
    md=snakemake.output.md,
)
