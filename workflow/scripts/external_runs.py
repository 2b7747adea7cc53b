"""Rule external_runs: every run of every dataset (retrievers' and TREC run files) scored against
the human passages and each LLM's qrels (C and U): the table and its figure.

By hand:  python workflow/scripts/external_runs.py
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("external_runs")

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.pipeline import external_runs_job  # noqa: E402
from llm_utility.workflow import keyed_inputs  # noqa: E402

external_runs_job(
    runs=keyed_inputs(snakemake.input, "runs"),
    qrels=keyed_inputs(snakemake.input, "qrels"),
    queries=keyed_inputs(snakemake.input, "queries"),
    pool_runs=snakemake.params.pool_runs,
    k=snakemake.params.k,
    intervals=snakemake.params.intervals,
    style=snakemake.params.style,
    csv=snakemake.output.csv,
    md=snakemake.output.md,
    png=snakemake.output.png,
    pdf=snakemake.output.pdf,
    log=log,
)
